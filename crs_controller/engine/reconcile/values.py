"""Per-cluster values: a resource with ``substitute: true`` is parsed once for all
clusters (engine/sources) and substituted per cluster on the parsed objects
(core/substitute), never as text. Its hash on a cluster covers the content and the
values it used, so a Cluster whose used value changes gets that resource again, and
only that cluster."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from crs_controller.core.hashing import object_hash
from crs_controller.core.models import SourceRef
from crs_controller.core.objects import CRS, Cluster
from crs_controller.core.substitute import VariableSpec, cluster_values, substitute, values_digest
from crs_controller.engine.sources import Manifest, Source, Sources


@dataclass(frozen=True)
class Prepared:
    """What one resource is on one cluster: its hash there, and how to get its
    objects (substituted only when they are about to be applied)."""

    digest: str
    values: dict[str, Any] | None = None  # None: the source's own objects, verbatim
    specs: tuple[VariableSpec, ...] = ()

    async def manifest(self, sources: Sources, source: Source) -> Manifest:
        manifest = await sources.manifest(source)
        if self.values is None:
            return manifest
        objects, _ = _substitute(source, manifest, self.values, self.specs)
        return Manifest(tuple(objects), tuple(object_hash(obj) for obj in objects))


# Which variables a source's content uses does not depend on the cluster: found by
# one walk per content, then each cluster's hash costs no walk at all.
_USED: OrderedDict[tuple[str, str], frozenset[str]] = OrderedDict()
_USED_SIZE = 1024


def source_hash(recorded: str) -> str:
    """The source's part of a recorded hash (a substituted resource records
    ``<source hash>+<values digest>``)."""
    return recorded.split("+", 1)[0]


async def prepare(sources: Sources, crs: CRS, cluster: Cluster, source: Source) -> Prepared:
    """Raises UnresolvedVariable or InvalidManifest (malformed reference) for this
    cluster alone."""
    ref = source.ref
    if not (isinstance(ref, SourceRef) and ref.substitute):
        return Prepared(source.hash)
    specs = tuple(variable_specs(crs))
    values = cluster_values(cluster.raw, specs)
    key = (source.hash, f"{ref.kind}/{ref.name}")
    used = _USED.get(key)
    if used is None or not used <= values.keys():
        # First walk of this content, or a value missing here: walk, which also
        # says exactly what is unresolved (a name with an inline default is fine).
        _, used = _substitute(source, await sources.manifest(source), values, specs)
        _USED[key] = used
        if len(_USED) > _USED_SIZE:
            _USED.popitem(last=False)
    return Prepared(f"{source.hash}+{values_digest(used, values)}", values, specs)


def _substitute(
    source: Source, manifest: Manifest, values: dict[str, Any], specs: tuple[VariableSpec, ...]
) -> tuple[list[dict[str, Any]], frozenset[str]]:
    ref = source.ref
    return substitute(
        manifest.objects,
        values,
        resource=f"{ref.kind}/{ref.name}",
        variables=specs,
        secret=ref.kind == "Secret",
    )


def variable_specs(crs: CRS) -> list[VariableSpec]:
    specs = []
    for variable in crs.valid.spec.variables:
        origin = variable.value_from
        specs.append(
            VariableSpec(
                name=variable.name,
                value=variable.value,
                cluster_field=origin.cluster_field if origin else None,
                topology_variable=origin.topology_variable if origin else None,
                default=variable.default,
            )
        )
    return specs
