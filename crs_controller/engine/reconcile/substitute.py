"""Per-cluster values: a resource with ``substitute: true`` is parsed once for all
clusters (engine/sources) and substituted per cluster on the parsed objects
(core/render, core/values/substitution), never as text. Its hash on a cluster covers the
content and the values it used, so a Cluster whose used value changes gets that
resource again, and only that cluster. A pass reads the Cluster's values once for
all its resources (``PassValues``); a large resource is substituted and hashed in a
worker thread, as sources are parsed."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from crs_controller.core.api.models import ResourceRef, SourceRef
from crs_controller.core.manifests.hashing import object_hash
from crs_controller.core.render import (
    cluster_hash,
    substitute_resource,
    variable_specs,
)
from crs_controller.core.spec.objects import CRS, Cluster
from crs_controller.core.values.substitution import VariableSpec, cluster_values, resolvable
from crs_controller.engine.io.sources import Manifest, Source, Sources

__all__ = ["SUBSTITUTE_INLINE_COST", "PassValues", "Prepared", "prepare", "variable_specs"]

# A resource whose parsed objects hold more than this (Manifest.cost, estimated bytes)
# is substituted in a worker thread: a walk copies every node, and values can add up to
# a manifest's node limit. Below it a walk takes well under a millisecond.
SUBSTITUTE_INLINE_COST = 64 * 1024


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
        return await _off_the_loop(manifest.cost, self._substituted, source.ref, manifest)

    def _substituted(self, ref: ResourceRef, manifest: Manifest) -> Manifest:
        assert self.values is not None
        objects, _ = substitute_resource(ref, manifest.objects, self.values, self.specs)
        return Manifest(tuple(objects), tuple(object_hash(obj) for obj in objects))


_P = ParamSpec("_P")
_T = TypeVar("_T")


async def _off_the_loop(
    cost: int, run: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs
) -> _T:
    """``run(...)``, in a worker thread when it walks more than SUBSTITUTE_INLINE_COST."""
    if cost <= SUBSTITUTE_INLINE_COST:
        return run(*args, **kwargs)
    return await asyncio.to_thread(run, *args, **kwargs)


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
        used = await _walk(sources, source, found, specs)
        _USED[key] = used
        if len(_USED) > _USED_SIZE:
            _USED.popitem(last=False)
    return Prepared(cluster_hash(source.hash, used, found), found, specs)


async def _walk(
    sources: Sources, source: Source, values: dict[str, Any], specs: tuple[VariableSpec, ...]
) -> frozenset[str]:
    """The names a source's content uses; raises what substituting it raises."""
    manifest = await sources.manifest(source)
    run = substitute_resource
    _, used = await _off_the_loop(manifest.cost, run, source.ref, manifest.objects, values, specs)
    return used
