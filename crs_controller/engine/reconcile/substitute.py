"""Per-cluster values: a resource with ``substitute: true`` is parsed once for all
clusters (engine/sources) and substituted per cluster on the parsed objects
(core/render, core/values/substitution), never as text. Its hash on a cluster covers the
content and the values it used, so a Cluster whose used value changes gets that
resource again, and only that cluster. A pass reads the Cluster's values once for
all its resources (``PassValues``)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from crs_controller.core.api.models import SourceRef
from crs_controller.core.manifests.hashing import object_hash
from crs_controller.core.render import (
    cluster_hash,
    substitute_resource,
    variable_specs,
)
from crs_controller.core.spec.objects import CRS, Cluster
from crs_controller.core.values.substitution import VariableSpec, cluster_values, resolvable
from crs_controller.engine.io.sources import Manifest, Source, Sources

__all__ = ["PassValues", "Prepared", "prepare", "variable_specs"]


class PassValues:
    """One CRS's values on one cluster for a pass: read from the Cluster the first
    time a resource with ``substitute`` asks, then shared by the pass's resources."""

    def __init__(self, crs: CRS, cluster: Cluster) -> None:
        self.crs = crs
        self.cluster = cluster
        self._found: tuple[tuple[VariableSpec, ...], dict[str, Any]] | None = None

    def get(self) -> tuple[tuple[VariableSpec, ...], dict[str, Any]]:
        """The CRS's ``spec.variables`` and the values they give on the cluster."""
        if self._found is None:
            specs = tuple(variable_specs(self.crs))
            self._found = specs, cluster_values(self.cluster.raw, specs)
        return self._found


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
        objects, _ = substitute_resource(source.ref, manifest.objects, self.values, self.specs)
        return Manifest(tuple(objects), tuple(object_hash(obj) for obj in objects))


# Which variables a source's content uses does not depend on the cluster: found by
# one walk per content, then each cluster's hash costs no walk at all.
_USED: OrderedDict[tuple[str, str], frozenset[str]] = OrderedDict()
_USED_SIZE = 1024


async def prepare(sources: Sources, values: PassValues, source: Source) -> Prepared:
    """Raises UnresolvedVariable or InvalidManifest (malformed reference) for this
    cluster alone."""
    ref = source.ref
    if not (isinstance(ref, SourceRef) and ref.substitute):
        return Prepared(source.hash)
    specs, found = values.get()
    key = (source.hash, f"{ref.kind}/{ref.name}")
    used = _USED.get(key)
    if used is None or not resolvable(used, found):
        # First walk of this content, or a value missing or refused here: walk, which
        # says exactly what is wrong (a name with an inline default is fine).
        manifest = await sources.manifest(source)
        _, used = substitute_resource(ref, manifest.objects, found, specs)
        _USED[key] = used
        if len(_USED) > _USED_SIZE:
            _USED.popitem(last=False)
    return Prepared(cluster_hash(source.hash, used, found), found, specs)
