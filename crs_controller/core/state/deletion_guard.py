"""Deletes that cannot take a fleet down: the one rule for every path that deletes
on a workload cluster (pruning under ``deletionPolicy: Delete``, a CRS deleted, a
cluster leaving the selector, a version-matched resource leaving, uninstall before a
Cluster is deleted) and for ``crs-controller diff``, which shows what they would do.

A CustomResourceDefinition or a Namespace is deleted only if every resource of the
CRS that recorded it lists its kind in ``spec.resources[].allowDelete``: deleting a
CRD deletes every custom resource of its kind, deleting a Namespace everything in it.
One kept is forgotten from the inventory, as Helm leaves its CRDs behind: the
controller no longer manages it, and no later pass tries again. It is named in the
entry's ``deletionsSkipped`` (bounded) until it is applied again, so the CRS status
can say so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from crs_controller.core.api.models import (
    CRSBinding,
    KeptObject,
    ObjectRef,
    ProtectedKind,
    SkippedDeletion,
    SourceRef,
)
from crs_controller.core.text import safe

# (API group, kind) of each protected kind.
PROTECTED: dict[tuple[str, str], ProtectedKind] = {
    ("apiextensions.k8s.io", "CustomResourceDefinition"): "CustomResourceDefinition",
    ("", "Namespace"): "Namespace",
}
DELETION_SKIPPED = "DeletionSkipped"  # the Event reason
SKIPPED_KEPT = 20  # kept objects recorded per entry, and named in a status

# What each resource of a CRS allows to delete: (kind, name) -> protected kinds.
Allowances = Mapping[tuple[str, str], frozenset[ProtectedKind]]


def allowances(resources: Iterable[SourceRef]) -> dict[tuple[str, str], frozenset[ProtectedKind]]:
    """The CRS's ``spec.resources`` as the rule reads them."""
    return {(r.kind, r.name): frozenset(r.allow_delete or ()) for r in resources}


def protected_kind(ref: ObjectRef) -> ProtectedKind | None:
    return PROTECTED.get((ref.group, ref.kind))


@dataclass(frozen=True)
class Kept:
    """A protected object left on the cluster, and why."""

    ref: ObjectRef
    why: str

    def __str__(self) -> str:
        return f"{self.ref} ({self.why})"


@dataclass
class Guarded:
    """``stale`` split: what may be deleted (in the order given) and what is kept."""

    delete: list[ObjectRef] = field(default_factory=list)
    kept: list[Kept] = field(default_factory=list)


def guard(entry: CRSBinding, stale: Sequence[ObjectRef], allowed: Allowances) -> Guarded:
    """Split ``stale`` objects of ``entry`` by the rule; ``allowed``: the CRS's
    ``allowances`` now (a resource no longer in spec.resources allows nothing)."""
    guarded = Guarded()
    for ref in stale:
        why = _why_kept(entry, ref, allowed)
        if why is None:
            guarded.delete.append(ref)
        else:
            guarded.kept.append(Kept(ref, why))
    return guarded


def _why_kept(entry: CRSBinding, ref: ObjectRef, allowed: Allowances) -> str | None:
    kind = protected_kind(ref)
    if kind is None:
        return None
    sources: list[tuple[str, str]] = [(r.kind, r.name) for r in entry.resources if ref in r.objects]
    if not sources:
        return f"{kind}: no resource recorded it"
    for source_kind, name in sources:
        allows = allowed.get((source_kind, name))
        if allows is None:
            return f"{kind}: its resource {source_kind}/{name} is no longer in spec.resources"
        if kind not in allows:
            return f"{kind} is not in allowDelete of {source_kind}/{name}"
    return None


def describe(kept: Sequence[Kept], most: int = 5) -> str:
    """The kept objects for an Event: at most ``most`` of them, the rest counted."""
    shown = [str(k) for k in kept[:most]]
    if (more := len(kept) - most) > 0:
        shown.append(f"and {more} more")
    return "kept (not deleted): " + "; ".join(shown)


def with_skipped(entry: CRSBinding, kept: Iterable[ObjectRef]) -> CRSBinding:
    """``entry`` naming the ``kept`` objects too (newest first, at most SKIPPED_KEPT)."""
    named = [KeptObject(api_version=k.api_version, kind=k.kind, name=k.name) for k in kept]
    if not named:
        return entry
    return _naming(entry, [*named, *(entry.deletions_skipped or ())])


def carried(entry: CRSBinding, previous: CRSBinding | None) -> CRSBinding:
    """A new pass's ``entry`` keeps naming what ``previous`` kept, but for objects in
    its inventory again (applied since)."""
    before = previous.deletions_skipped if previous is not None else None
    if not before:
        return entry
    applied = {o for r in entry.resources for o in r.objects}
    named = [*(entry.deletions_skipped or ()), *before]
    return _naming(entry, [k for k in named if k.ref not in applied])


def _naming(entry: CRSBinding, named: list[KeptObject]) -> CRSBinding:
    """``entry`` naming each of ``named`` once, in order, at most SKIPPED_KEPT."""
    by_ref = {k.ref: k for k in reversed(named)}  # the first of each wins
    kept = [k for k in named if by_ref.get(k.ref) is k][:SKIPPED_KEPT]
    return entry.model_copy(update={"deletions_skipped": kept or None})


def skipped_status(entries: Iterable[tuple[str, CRSBinding | None]]) -> list[SkippedDeletion]:
    """What the CRS status names: each cluster's kept objects, by cluster, bounded.
    A binding is tenant-writable, so what it names is made safe for the status."""
    found = [
        SkippedDeletion(
            cluster=safe(cluster, 253),
            api_version=safe(kept.api_version, 316),
            kind=safe(kept.kind, 63),
            name=safe(kept.name, 253),
        )
        for cluster, entry in sorted(entries, key=lambda pair: pair[0])
        if entry is not None
        for kept in entry.deletions_skipped or ()
    ]
    return found[:SKIPPED_KEPT]


def skipped_together(parts: Iterable[Iterable[SkippedDeletion]]) -> list[SkippedDeletion]:
    """What the status names from the ``skipped_status`` of disjoint sets of clusters:
    by cluster (each cluster's in its own order), the first SKIPPED_KEPT, as
    ``skipped_status`` of them all would name them."""
    found = sorted((kept for part in parts for kept in part), key=lambda kept: kept.cluster)
    return found[:SKIPPED_KEPT]
