"""The caches as the reconcilers see them: read-only queries over the informers, and
the indexes that answer them without scanning (which CRS references which
ConfigMap/Secret, which bindings name a CRS, which Clusters a CRS selects). Rebuilt
from the watches alone; only the runtime's watch handlers update the indexes (and a
hand-over, reshaping what is kept of a binding).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, TypeVar

from crs_controller.core.api.models import CRSBinding, ResourceRef, SourceKey
from crs_controller.core.spec.objects import CRS, Binding, Cluster, depends_on
from crs_controller.core.values.dependencies import Dependencies
from crs_controller.engine.io.informer import Informer

K = TypeVar("K")
Selection = tuple[bool, bool]  # a CRS's selection of a Cluster: (before, now)


def read_by(crs: CRS) -> list[ResourceRef]:
    """Every source a CRS reads: its resources and its beforeDelete hook's (none for
    a CRS the model refuses: it reads nothing)."""
    if crs.model is None:
        return []
    spec = crs.model.spec
    return [*spec.resources, *spec.uninstall.before_delete]


def referenced_sources(crs: CRS) -> set[SourceKey]:
    """Every ConfigMap/Secret a CRS reads (``read_by``), as index keys."""
    return {(crs.namespace, r.kind, r.name) for r in read_by(crs)}


class Caches(Protocol):
    """What a reconciler may read. Nothing here writes."""

    def crs(self, namespace: str, name: str) -> CRS | None: ...
    def cluster(self, namespace: str, name: str) -> Cluster | None: ...
    def binding(self, namespace: str, name: str) -> Binding | None: ...
    def entry(self, namespace: str, cluster: str, crs: str) -> CRSBinding | None: ...
    def crss_in(self, namespace: str) -> list[CRS]: ...
    def matching_clusters(self, crs: CRS) -> list[Cluster]: ...
    def matching_crss(self, cluster: Cluster) -> list[CRS]: ...
    def holders(self, namespace: str, crs: str) -> list[str]: ...
    def dependencies(self, namespace: str) -> Dependencies: ...


class Index:
    """The one implementation of ``Caches``, plus the updates the watch handlers
    make."""

    def __init__(
        self, crss: Informer[CRS], clusters: Informer[Cluster], bindings: Informer[Binding]
    ) -> None:
        self._crss = crss
        self._clusters = clusters
        self._bindings = bindings
        self._names: dict[str, dict[str, None]] = defaultdict(dict)  # namespace -> CRS names
        self._cluster_names: dict[str, dict[str, None]] = defaultdict(dict)
        self._refs: dict[SourceKey, set[str]] = defaultdict(set)
        self._holders: dict[tuple[str, str], set[str]] = defaultdict(set)  # (ns, CRS) -> clusters
        self._indexed_refs: dict[tuple[str, str], set[SourceKey]] = {}
        self._indexed_bindings: dict[tuple[str, str], Binding] = {}  # as last indexed
        # (ns, CRS) -> the Clusters it selects, and its selector as last indexed: kept
        # as Clusters and selectors change, so that whether a CRS selects any Cluster
        # is known without matching the namespace's Clusters again.
        self._selected: dict[tuple[str, str], set[str]] = {}
        self._selectors: dict[tuple[str, str], Mapping[str, Any] | None] = {}
        self._population: dict[str, int] = {}  # namespace -> its CRSs and Clusters
        # namespace -> CRS -> its dependsOn; the graph built from it, until it changes.
        self._depends: dict[str, dict[str, tuple[str, ...]]] = defaultdict(dict)
        self._graphs: dict[str, Dependencies] = {}

    # -- updates (watch handlers only) ------------------------------------------------

    # What was indexed per object is remembered here rather than taken from the
    # handler's ``old``: a write this controller cached at once (``Informer.put``)
    # makes the watch's ``old`` the new version already.

    def update_crs(self, old: CRS | None, new: CRS | None) -> set[SourceKey]:
        """Index the CRS as it is now; gives the sources no CRS names any more."""
        crs = new or old
        assert crs is not None
        key = (crs.namespace, crs.name)
        before = self._indexed_refs.pop(key, set())
        for source in before:
            _discard(self._refs, source, crs.name)
        self._note_dependencies(crs.namespace, crs.name, None if new is None else depends_on(new))
        if new is None:
            self._leave(self._names, crs.namespace, crs.name)
            self._selected.pop(key, None)
            self._selectors.pop(key, None)
            return {source for source in before if source not in self._refs}
        self._select(new)
        self._indexed_refs[key] = refs = referenced_sources(new)
        for source in refs:
            self._refs[source].add(new.name)
        self._join(self._names, new.namespace, new.name)
        return {source for source in before if source not in self._refs}

    def _select(self, crs: CRS) -> None:
        """The Clusters ``crs`` selects, matched again only when its selector is not
        the one last indexed (a status write, an edit elsewhere in the spec: no)."""
        key = (crs.namespace, crs.name)
        if key in self._selectors and self._selectors[key] == crs.selector:
            return
        self._selectors[key] = crs.selector
        self._selected[key] = {c.name for c in self.clusters_in(crs.namespace) if crs.selects(c)}

    def update_cluster(self, old: Cluster | None, new: Cluster | None) -> dict[str, Selection]:
        """Index the Cluster as it is now; gives each CRS of its namespace that
        selected it as last indexed, or selects it now: (selected before, now)."""
        cluster = new or old
        assert cluster is not None
        namespace, name = cluster.namespace, cluster.name
        if new is not None:
            self._join(self._cluster_names, namespace, name)
        else:
            self._leave(self._cluster_names, namespace, name)
        moved: dict[str, Selection] = {}
        for crs in self.crss_in(namespace):
            selected = self._selected.setdefault((namespace, crs.name), set())
            was, now = name in selected, new is not None and crs.selects(new)
            if now:
                selected.add(name)
            else:
                selected.discard(name)
            if was or now:
                moved[crs.name] = (was, now)
        return moved

    def update_binding(self, old: Binding | None, new: Binding | None) -> set[str]:
        """Index ``new`` (None: the binding is gone) and return the CRSs whose entry
        changed since the version indexed last: added, removed or changed; every CRS
        it named once it is gone. Against that version, not ``old``: after a write
        cached at once, ``old`` is the new version already."""
        binding = new or old
        assert binding is not None
        namespace, name = binding.meta.namespace or "", binding.meta.name
        before = self._indexed_bindings.pop((namespace, name), None)
        held = {} if before is None else before.entry_of
        for crs in held:
            _discard(self._holders, (namespace, crs), name)
        if new is None:
            return set(held).union(old.entry_of if old is not None else ())
        self._indexed_bindings[(namespace, name)] = new
        for crs in new.entry_of:
            self._holders[(namespace, crs)].add(name)
        return _changed(held, new.entry_of)

    def _note_dependencies(self, namespace: str, name: str, new: tuple[str, ...] | None) -> None:
        """Keep a CRS's dependsOn; the namespace's graph is built again only when one
        appears, goes or changes its dependsOn (not on every edit or status write)."""
        if self._depends.get(namespace, {}).get(name) == new:
            return
        if new is not None:
            self._depends[namespace][name] = new
        else:
            del self._depends[namespace][name]
            if not self._depends[namespace]:
                del self._depends[namespace]
        self._graphs.pop(namespace, None)

    def _join(self, names: dict[str, dict[str, None]], namespace: str, name: str) -> None:
        if name not in names[namespace]:
            names[namespace][name] = None
            self._population[namespace] = self._population.get(namespace, 0) + 1

    def _leave(self, names: dict[str, dict[str, None]], namespace: str, name: str) -> None:
        if names[namespace].pop(name, 0) is None:  # it was there
            left = self._population[namespace] - 1
            if left:
                self._population[namespace] = left
            else:
                del self._population[namespace]

    # -- queries ------------------------------------------------------------------

    def namespace_count(self) -> int:
        """How many namespaces have a CRS or a Cluster: the tenants sharing the workers."""
        return len(self._population)

    def crs(self, namespace: str, name: str) -> CRS | None:
        return self._crss.get(namespace, name)

    def cluster(self, namespace: str, name: str) -> Cluster | None:
        return self._clusters.get(namespace, name)

    def binding(self, namespace: str, name: str) -> Binding | None:
        return self._bindings.get(namespace, name)

    def entry(self, namespace: str, cluster: str, crs: str) -> CRSBinding | None:
        """The CRS's entry in the cluster's binding (None when the model refuses the
        binding: nothing it says can be trusted), looked up, not searched for."""
        binding = self._bindings.get(namespace, cluster)
        return None if binding is None else binding.entry_of.get(crs)

    def named(self, namespace: str, kind: str, name: str) -> bool:
        """Does any CRS name this source?"""
        return (namespace, kind, name) in self._refs

    def referencing(self, namespace: str, kind: str, name: str) -> list[CRS]:
        return self._crss_named(namespace, sorted(self._refs.get((namespace, kind, name), ())))

    def crss_in(self, namespace: str) -> list[CRS]:
        return self._crss_named(namespace, sorted(self._names.get(namespace, ())))

    def clusters_in(self, namespace: str) -> list[Cluster]:
        found = (self.cluster(namespace, n) for n in self._cluster_names.get(namespace, ()))
        return [c for c in found if c is not None]

    def crs_keys(self) -> list[tuple[str, str]]:
        """Every cached CRS as (namespace, name)."""
        return [(ns, name) for ns, names in self._names.items() for name in names]

    def cluster_keys(self) -> list[tuple[str, str]]:
        """Every cached Cluster as (namespace, name)."""
        return [(ns, name) for ns, names in self._cluster_names.items() for name in names]

    def matching_clusters(self, crs: CRS) -> list[Cluster]:
        return [c for c in self.clusters_in(crs.namespace) if crs.selects(c)]

    def selects_any(self, namespace: str, crs: str) -> bool:
        """Does this CRS select any Cluster (as indexed)? Looked up, not matched."""
        return bool(self._selected.get((namespace, crs)))

    def matching_crss(self, cluster: Cluster) -> list[CRS]:
        return [c for c in self.crss_in(cluster.namespace) if c.selects(cluster)]

    def holders(self, namespace: str, crs: str) -> list[str]:
        """Clusters whose binding has an entry for this CRS."""
        return sorted(self._holders.get((namespace, crs), ()))

    def dependencies(self, namespace: str) -> Dependencies:
        """The dependsOn graph of the namespace's CRSs, built once per change of it."""
        graph = self._graphs.get(namespace)
        if graph is None:
            graph = self._graphs[namespace] = Dependencies(self._depends.get(namespace, {}))
        return graph

    def _crss_named(self, namespace: str, names: Iterable[str]) -> list[CRS]:
        found = (self.crs(namespace, n) for n in names)
        return [c for c in found if c is not None]


def _changed(before: Mapping[str, CRSBinding], after: Mapping[str, CRSBinding]) -> set[str]:
    """The CRSs whose entry differs (cheap between summaries: their equal parts are
    one value, compared by identity first)."""
    return {
        crs
        for crs in before.keys() | after.keys()
        if not (before.get(crs) is after.get(crs) or before.get(crs) == after.get(crs))
    }


def _discard(index: dict[K, set[str]], key: K, value: str) -> None:
    members = index.get(key)
    if members is not None:
        members.discard(value)
        if not members:
            del index[key]
