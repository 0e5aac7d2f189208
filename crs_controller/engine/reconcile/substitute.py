"""Per-cluster values: a resource with ``substitute: true`` is parsed once for all
clusters (engine/sources) and substituted per cluster on the parsed objects
(core/render, core/values/substitution), never as text. Its hash on a cluster covers the
content and the values it used, so a Cluster whose used value changes gets that
resource again, and only that cluster."""

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
from crs_controller.core.values.substitution import VariableSpec, cluster_values
from crs_controller.engine.io.sources import Manifest, Source, Sources

__all__ = ["Prepared", "prepare", "variable_specs"]


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
        manifest = await sources.manifest(source)
        _, used = substitute_resource(ref, manifest.objects, values, specs)
        _USED[key] = used
        if len(_USED) > _USED_SIZE:
            _USED.popitem(last=False)
    return Prepared(cluster_hash(source.hash, used, values), values, specs)
