"""Pure edits of a ClusterResourceSetBinding: entries per CRS and owner references.

The reconciler builds the binding it wants from the one it read and writes only when
the two differ, so a steady state costs no write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from crs_controller.core.api.clusters import CLUSTER_GROUP
from crs_controller.core.api.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_KIND,
    CLUSTER_UID_ANNOTATION,
    MESSAGE_LIMIT,
    SHARD_BUCKET_LABEL,
    BindingOutcome,
    ClusterResourceSetBinding,
    ClusterResourceSetBindingSpec,
    CRSBinding,
    ObjectKey,
    ObjectMeta,
    ObjectRef,
    ResourceBinding,
    ResourceKind,
    ResourceRef,
    to_api,
)
from crs_controller.core.manifests.documents import object_ref
from crs_controller.core.membership.shard import BUCKETS, bucket_of
from crs_controller.core.spec.modes import Scope
from crs_controller.core.state.drift_decisions import generation_sum
from crs_controller.core.state.status import Outcome, recorded_reason
from crs_controller.core.text import safe


def parse_binding(raw: Mapping[str, Any] | None) -> ClusterResourceSetBinding | None:
    return None if raw is None else ClusterResourceSetBinding.model_validate(raw)


def entries_by_crs(binding: ClusterResourceSetBinding | None) -> dict[str, CRSBinding]:
    if binding is None:
        return {}
    return {b.cluster_resource_set_name: b for b in binding.spec.bindings}


def with_unrecorded(
    entries: Mapping[str, CRSBinding],
    unrecorded: Mapping[str, Mapping[tuple[ResourceKind, str], Mapping[ObjectKey, ObjectRef]]],
) -> dict[str, CRSBinding]:
    """``entries`` with the objects applied but not recorded (by CRS, then by the
    resource they came from) in the inventory of their resource, with the records of
    their last apply; a resource or CRS no entry had yet gets one that was never
    applied. A resource whose objects this changes is recorded as not applied, as a
    failed one is (its inventory is not the one its hash made any more), keeping its
    hash (the revision it is on): its next pass applies it again, sends what differs
    and records the inventory its sources make."""
    merged = dict(entries)
    for name, resources in unrecorded.items():
        entry = merged.get(name) or CRSBinding(cluster_resource_set_name=name)
        found = {(r.kind, r.name): r for r in entry.resources}
        for (kind, resource), objects in resources.items():
            record = found.get((kind, resource)) or ResourceBinding(kind=kind, name=resource)
            found[(kind, resource)] = _with_objects(record, objects)
        merged[name] = entry.model_copy(update={"resources": list(found.values())})
    return merged


def _with_objects(record: ResourceBinding, noted: Mapping[ObjectKey, ObjectRef]) -> ResourceBinding:
    """``record`` with the ``noted`` objects in its inventory, their records newer."""
    recorded = {o.key: o for o in record.objects}
    if all(o.key in recorded and recorded[o.key].hash == o.hash for o in noted.values()):
        objects = [noted.get(o.key, o) for o in record.objects]
        return record.model_copy(update={"objects": objects})
    added = [o for key, o in noted.items() if key not in recorded]
    objects = [*(noted.get(o.key, o) for o in record.objects), *added]
    return record.model_copy(update={"objects": objects, "applied": False})


def recorded(entry: CRSBinding | None, ref: ResourceRef) -> ResourceBinding | None:
    if entry is None:
        return None
    for resource in entry.resources:
        if resource.kind == ref.kind and resource.name == ref.name:
            return resource
    return None


@dataclass(frozen=True)
class Selection:
    """Which of a resource's objects (by position in apply order) this pass sends,
    and which stay as recorded because their content did not change."""

    send: list[int]
    kept: dict[int, ObjectRef] = field(default_factory=dict)


def select_objects(
    objects: Sequence[Mapping[str, Any]],
    hashes: Sequence[str],
    previous: ResourceBinding | None,
    scope: Scope,
) -> Selection:
    """``scope`` "All" sends every object; "Changed" only those whose hash differs
    from the one recorded after their last successful apply (or that have none)."""
    if scope == "All" or previous is None:
        return Selection(list(range(len(objects))))
    recorded = {o.key: o for o in previous.objects}
    selection = Selection([])
    for position, (obj, digest) in enumerate(zip(objects, hashes, strict=True)):
        entry = _recorded_entry(recorded, object_ref(obj))
        if entry is not None and entry.hash == digest:
            selection.kept[position] = entry
        else:
            selection.send.append(position)
    return selection


def _recorded_entry(recorded: Mapping[ObjectKey, ObjectRef], ref: ObjectRef) -> ObjectRef | None:
    found = recorded.get(ref.key)
    if found is None and not ref.namespace:
        # Written without a namespace: it went to "default" if the kind is namespaced.
        group, kind, _, name = ref.key
        found = recorded.get((group, kind, "default", name))
    return found


def record_apply(
    ref: ResourceRef,
    previous: ResourceBinding | None,
    *,
    digest: str,
    ok: bool,
    objects: Sequence[ObjectRef],
    now: datetime,
    skipped: Sequence[ObjectRef] = (),
) -> ResourceBinding:
    """The entry after an apply. ``objects`` is what the resource has on the cluster
    after this pass, in apply order: those sent and applied, with their new records,
    and those kept as recorded. On failure the previous inventory is kept too, so
    that nothing we created is ever forgotten (an object that failed keeps its old
    record, and so its old hash: it is sent again). Objects skipped because they
    existed (ApplyOnce) stay in the inventory only if an earlier pass created them."""
    current = list(objects)
    if previous is not None:
        ours = {o: o for o in previous.objects}
        current += [ours[o] for o in skipped if o in ours]
        if not ok:
            current = _merge(previous.objects, current)
    return ResourceBinding(
        kind=ref.kind,
        name=ref.name,
        hash=digest,
        applied=ok,
        # A failed apply keeps the time of the last good one: retries (with backoff)
        # then leave the binding as it is instead of rewriting it on every attempt.
        last_applied_time=now if ok else (previous.last_applied_time if previous else None),
        generation=generation_sum([o.generation for o in current]),
        objects=current,
    )


def conflicts(
    applied: Iterable[ObjectRef], others: Mapping[str, CRSBinding]
) -> list[tuple[ObjectRef, str]]:
    """Each object just applied that another CRS's entry (``others``, by CRS name)
    records with other content, and that CRS: both write the one object under the one
    field manager, so each apply undoes the other's. An object recorded without a
    content hash is not compared."""
    theirs: dict[ObjectKey, list[tuple[str, ObjectRef]]] = {}
    for name, entry in sorted(others.items()):
        for resource in entry.resources:
            for ref in resource.objects:
                theirs.setdefault(ref.key, []).append((name, ref))
    found: dict[tuple[ObjectKey, str], ObjectRef] = {}
    for ref in applied:
        for name, other in theirs.get(ref.key, []):
            if ref.hash and other.hash and ref.hash != other.hash:
                found.setdefault((ref.key, name), ref)
    return [(ref, name) for (_, name), ref in found.items()]


def _merge(old: Iterable[ObjectRef], new: Iterable[ObjectRef]) -> list[ObjectRef]:
    """``old`` in its order with ``new``'s records where both name an object, then the
    rest of ``new``."""
    fresh = {o: o for o in new}
    return [fresh.pop(o, o) for o in old] + list(fresh.values())


def with_outcome(
    entry: CRSBinding, previous: CRSBinding | None, outcome: Outcome, now: datetime
) -> CRSBinding:
    """``entry`` carrying its outcome. The time moves only when the outcome does —
    its reason or message (not while waiting for Ready), or the content it was reached
    with (a new revision applied reads "Applied" again, yet a rollout's soak must
    count from it) — so a steady state writes nothing."""
    reason, ready = recorded_reason(outcome)
    # Every outcome message reaches the binding through here: object names from
    # manifests and servers' answers in it are made safe once, for every reader.
    message = safe(outcome.message, MESSAGE_LIMIT)
    before = previous.outcome if previous is not None else None
    same_content = previous is not None and _content(previous) == _content(entry)
    same = before is not None and same_content and (before.reason, before.ready) == (reason, ready)
    # Waiting for objects to be Ready (ready False) is one wait whichever object blocks
    # it: the time stays when the wait began, the message names what blocks now.
    if before is not None and same and (ready is False or before.message == message):
        now = before.time or now
    recorded = BindingOutcome(
        reason=reason,
        message=message,
        time=now,
        observed_generation=outcome.generation,
        ready=ready,
        revision=(outcome.revision or None) if outcome.state == "Failed" else None,
    )
    return entry.model_copy(update={"outcome": recorded})


def _content(entry: CRSBinding) -> list[tuple[str, str, str]]:
    return [(r.kind, r.name, r.hash) for r in entry.resources]


def owner_reference(crs: ObjectMeta) -> dict[str, Any]:
    """The owner reference a binding carries for a CRS it has an entry for."""
    return {
        "apiVersion": API_VERSION,
        "kind": CLUSTER_RESOURCE_SET_KIND,
        "name": crs.name,
        "uid": crs.uid,
    }


def cluster_owner_reference(api_version: str, cluster: ObjectMeta) -> dict[str, Any] | None:
    """The owner reference a binding carries for its Cluster (as Cluster API's does):
    the garbage collector deletes no binding while its Cluster lives, whatever
    happens to the CRSs. None for a Cluster read without a uid."""
    if not cluster.uid:
        return None
    return {"apiVersion": api_version, "kind": "Cluster", "name": cluster.name, "uid": cluster.uid}


def _names_cluster(ref: Mapping[str, Any]) -> bool:
    group = str(ref.get("apiVersion") or "").partition("/")[0]
    return ref.get("kind") == "Cluster" and group == CLUSTER_GROUP


def of_another_cluster(binding: ObjectMeta, uid: str | None) -> bool:
    """Does the binding record another Cluster than the one of uid ``uid`` (one
    deleted, whose name a new Cluster took)? What it lists was applied to that other
    cluster, not this one. A binding recording no uid (written before bindings did)
    is the Cluster's, and so is one whose owner reference names this Cluster, whatever
    its annotation says: ``clusterctl move`` copies the annotation as it was but
    rebuilds the owner references with the uids of the Clusters it recreates."""
    clusters = [o for o in binding.owner_references if _names_cluster(o)]
    if uid is None or any(_names(o, binding.name, uid) for o in clusters):
        return False
    recorded = {str(o.get("uid")) for o in clusters}
    if CLUSTER_UID_ANNOTATION in binding.annotations:
        recorded.add(binding.annotations[CLUSTER_UID_ANNOTATION])
    return any(other != uid for other in recorded)


def _names(ref: Mapping[str, Any], name: str, uid: str) -> bool:
    return ref.get("name") == name and str(ref.get("uid")) == uid


def desired_binding(
    current: ClusterResourceSetBinding | None,
    *,
    namespace: str,
    cluster: str,
    entries: Mapping[str, CRSBinding],
    owners: Sequence[Mapping[str, Any]],
    cluster_owner: Mapping[str, Any] | None = None,
) -> ClusterResourceSetBinding:
    """The binding to write: entries sorted by CRS name, one owner reference per CRS
    and one to the Cluster (``cluster_owner``, its uid recorded in an annotation too),
    the shard bucket label, other owners (not ours) and labels left as they were."""
    meta = (
        current.metadata.model_copy() if current else ObjectMeta(name=cluster, namespace=namespace)
    )
    meta.labels = {**meta.labels, SHARD_BUCKET_LABEL: bucket_label(namespace, cluster)}
    foreign = [o for o in meta.owner_references if o.get("kind") != CLUSTER_RESOURCE_SET_KIND]
    if cluster_owner is not None:
        foreign = [o for o in foreign if not _names_cluster(o)] + [dict(cluster_owner)]
        meta.annotations = {**meta.annotations, CLUSTER_UID_ANNOTATION: str(cluster_owner["uid"])}
    ours = sorted((dict(o) for o in owners), key=lambda o: str(o["name"]))
    meta.owner_references = foreign + ours
    spec = ClusterResourceSetBindingSpec(
        cluster_name=cluster, bindings=[entries[name] for name in sorted(entries)]
    )
    return ClusterResourceSetBinding(metadata=meta, spec=spec)


def bucket_label(namespace: str, cluster: str) -> str:
    """The value of the shard bucket label on the binding of ``namespace/cluster``."""
    return str(bucket_of(namespace, cluster))


def mislabelled(binding: ClusterResourceSetBinding) -> bool:
    """Does the binding lack its shard bucket label, or carry another value (bindings
    are writable by whoever may write them: a value is never trusted, only compared)?"""
    meta = binding.metadata
    expected = bucket_label(meta.namespace or "", meta.name)
    return meta.labels.get(SHARD_BUCKET_LABEL) != expected


def share_selector(buckets: Iterable[int]) -> str:
    """The label selector of the bindings in ``buckets`` (a shard member's share):
    ``addons.crs.dev/shard-bucket in (...)``, at most 5 characters a bucket. A share
    of no bucket selects the value ``none``, which no binding is written with (an
    empty ``in ()`` is refused by the API server)."""
    values = ",".join(str(b) for b in sorted(set(buckets))) or "none"
    return f"{SHARD_BUCKET_LABEL} in ({values})"


# Every binding whose label names no bucket, the ones without it included: what every
# member watches, so that its owner finds and labels it (4,045 characters; a share of
# a quarter of the buckets is about 1,030).
MISLABELLED_SELECTOR = f"{SHARD_BUCKET_LABEL} notin ({','.join(str(b) for b in range(BUCKETS))})"


def merged_entries(
    base: Mapping[str, CRSBinding],
    ours: Mapping[str, CRSBinding],
    fresh: Mapping[str, CRSBinding],
) -> dict[str, CRSBinding] | None:
    """A pass's entries put on a binding another writer changed since the pass read
    it (a Conflict): ``base`` the entries the pass read, ``ours`` those it would
    write, ``fresh`` those the binding has now. Per CRS, an entry the pass left as it
    read it is the other writer's (an entry it removed or added included), one only
    the pass changed is ours (a removal included). One both changed, each its own way,
    is not guessed at: None, and the pass is redone on the fresh binding."""
    merged: dict[str, CRSBinding] = {}
    for name in sorted(base.keys() | ours.keys() | fresh.keys()):
        was, now, theirs = (_api(entries.get(name)) for entries in (base, ours, fresh))
        if now == was:
            chosen = fresh.get(name)
        elif theirs in (was, now):
            chosen = ours.get(name)
        else:
            return None
        if chosen is not None:
            merged[name] = chosen
    return merged


def _api(entry: CRSBinding | None) -> dict[str, Any] | None:
    return None if entry is None else to_api(entry)


def crs_owners(
    binding: ClusterResourceSetBinding | None, names: Iterable[str]
) -> list[dict[str, Any]]:
    """The owner references ``binding`` has for the CRSs ``names``."""
    wanted = set(names)
    refs = [] if binding is None else binding.metadata.owner_references
    return [
        dict(o)
        for o in refs
        if o.get("kind") == CLUSTER_RESOURCE_SET_KIND and o.get("name") in wanted
    ]


def binding_changed(
    current: ClusterResourceSetBinding | None, desired: ClusterResourceSetBinding
) -> bool:
    if current is None:
        return True
    before, after = current.metadata, desired.metadata
    return to_api(current.spec) != to_api(desired.spec) or (
        (before.owner_references, before.annotations) != (after.owner_references, after.annotations)
    )
