"""What a pass applied to a workload cluster that no binding write has recorded yet.

A pass records what it applied only when it writes the binding, at its end. One that
stops before that (cancelled at ``--reconcile-timeout``, its Cluster handed to
another member of a shard set, a shutdown; or an error before the write) would leave
objects on the cluster that no inventory lists: once the sources stop asking for
them, nothing would prune them or delete them with their CRS. So each object is
noted here as its apply goes out, per Cluster, CRS and resource, and the next pass on
this replica takes them into the CRS's entry as recorded before it (``with_unrecorded``):
they are kept, recorded, pruned or deleted like any object the binding lists.

Only objects this process sent an apply for are noted, never one found on the
cluster: an object whose apply had no answer yet may or may not exist, and pruning
tolerates one that does not, and deletes one only if our field manager applied it.
The notes of a Cluster go when a binding write records them, or when the Cluster is
forgotten (gone, or handed to another replica: what they name stays on that
cluster, unrecorded, as after a crash). Notes are of one Cluster uid: those of an
earlier Cluster of the name count as absent everywhere (a pass, a CRS's finalizer)
and go when a pass sees the Cluster with another uid. A Cluster deleted and created
again under its name starts with none.

Each CRS's notes keep the terms its deletion needs (``Terms``: its deletionPolicy
and what its resources allow to delete, as when it last applied here): in a shard
set the leader removes a CRS's finalizer from the bindings alone, so the owner of a
Cluster may find a CRS gone whose objects it noted, and deletes them by those terms.

Bounded: a resource notes at most ``MAX_DOCUMENTS`` objects (the most one manifest
holds); past that the oldest note goes, logged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import structlog

from crs_controller.core.api.models import (
    CRSBinding,
    DeletionPolicy,
    ObjectKey,
    ObjectRef,
    ResourceKind,
)
from crs_controller.core.manifests.limits import MAX_DOCUMENTS
from crs_controller.core.state.deletion_guard import Allowances

log = structlog.get_logger(__name__)

ResourceKey = tuple[ResourceKind, str]  # (kind, name) of the ConfigMap/Secret applied from
# CRS -> resource -> the objects applied from it, by identity
Notes = dict[str, dict[ResourceKey, dict[ObjectKey, ObjectRef]]]


@dataclass(frozen=True)
class Terms:
    """What deleting a CRS's objects needs once the CRS is gone: its deletionPolicy and
    the protected kinds each of its resources allows to delete."""

    policy: DeletionPolicy
    allowed: Allowances


class _Cluster:
    """The notes of one Cluster, for the Cluster of one uid."""

    def __init__(self, uid: str) -> None:
        self.uid = uid
        self.notes: Notes = {}
        self.terms: dict[str, Terms] = {}  # by CRS: as it was at its last note


class Unrecorded:
    def __init__(self, most: int = MAX_DOCUMENTS) -> None:
        self._clusters: dict[tuple[str, str], _Cluster] = {}
        self._most = most

    def note(
        self,
        cluster: tuple[str, str],
        uid: str,
        crs: str,
        resource: ResourceKey,
        applied: Iterable[ObjectRef],
        terms: Terms,
    ) -> None:
        """``applied`` went out to ``cluster`` (of ``uid``) from ``crs``'s ``resource``:
        each object with its records (an object noted again keeps the newer ones), and
        the CRS with the ``terms`` of its deletion as they are now."""
        held = self._clusters.get(cluster)
        if held is None or held.uid != uid:
            held = self._clusters[cluster] = _Cluster(uid)
        held.terms[crs] = terms
        objects = held.notes.setdefault(crs, {}).setdefault(resource, {})
        for ref in applied:
            objects.pop(ref.key, None)  # the newest note last: the first to go is the oldest
            objects[ref.key] = ref
        excess = len(objects) - self._most
        if excess > 0:
            for key in list(objects)[:excess]:
                del objects[key]
            where = "/".join(cluster)
            log.warning("unrecorded objects forgotten", crs=crs, cluster=where, count=excess)

    def of(self, cluster: tuple[str, str], uid: str, crss: Iterable[str] | None = None) -> Notes:
        """A copy of the Cluster's notes (of ``crss`` alone, when given); a Cluster of
        another uid has none."""
        held = self._clusters.get(cluster)
        if held is None or held.uid != uid:
            return {}
        wanted = set(held.notes) if crss is None else set(crss) & held.notes.keys()
        return {
            crs: {resource: dict(objects) for resource, objects in held.notes[crs].items()}
            for crs in wanted
        }

    def terms(self, cluster: tuple[str, str], uid: str) -> dict[str, Terms]:
        """The terms of each CRS the Cluster (of ``uid``) holds notes of."""
        held = self._clusters.get(cluster)
        if held is None or held.uid != uid:
            return {}
        return {crs: held.terms[crs] for crs in held.notes}

    def holds(self, cluster: tuple[str, str], uid: str) -> bool:
        """Does the Cluster of ``uid`` hold notes?"""
        held = self._clusters.get(cluster)
        return held is not None and held.uid == uid

    def holders(self, namespace: str, crs: str, uid_of: Callable[[str], str | None]) -> list[str]:
        """The Clusters of ``namespace`` that hold notes of ``crs``, by name. ``uid_of``:
        the uid each Cluster has now (None: none is known); an earlier Cluster's notes
        do not count. (Few hold any: a note lasts until the next binding write.)"""
        return sorted(
            name
            for (ns, name), held in self._clusters.items()
            if ns == namespace and crs in held.notes and uid_of(name) == held.uid
        )

    def keep_only(self, cluster: tuple[str, str], uid: str) -> None:
        """The Cluster has ``uid`` now: the notes of an earlier Cluster of its name go
        (what they name went with that cluster, or stays there, unrecorded)."""
        held = self._clusters.get(cluster)
        if held is not None and held.uid != uid:
            log.info("notes of an earlier Cluster of this name dropped", cluster="/".join(cluster))
            del self._clusters[cluster]

    def recorded(
        self,
        cluster: tuple[str, str],
        uid: str,
        taken: Notes,
        written: Mapping[str, CRSBinding],
    ) -> None:
        """A binding write for the Cluster of ``uid`` went through: the notes a pass
        took into its entries (``taken``) are settled, and so is each object the entry
        of its CRS lists as ``written``. Notes made since and written by no entry stay."""
        held = self._clusters.get(cluster)
        if held is None or held.uid != uid:
            return
        for crs in list(held.notes):
            entry = written.get(crs)
            listed = {o.key for r in entry.resources for o in r.objects} if entry else set()
            for resource, objects in list(held.notes[crs].items()):
                settled = taken.get(crs, {}).get(resource, {}).keys() | listed
                for key in settled & objects.keys():
                    del objects[key]
                if not objects:
                    del held.notes[crs][resource]
            if not held.notes[crs]:
                del held.notes[crs]
                del held.terms[crs]
        if not held.notes:
            del self._clusters[cluster]

    def drop_cluster(self, cluster: tuple[str, str]) -> None:
        """Forget a Cluster (gone, handed over, or another Cluster of its name)."""
        self._clusters.pop(cluster, None)

    def __len__(self) -> int:
        """The objects noted, over every Cluster."""
        return sum(
            len(objects)
            for held in self._clusters.values()
            for resources in held.notes.values()
            for objects in resources.values()
        )
