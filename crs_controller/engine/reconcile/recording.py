"""Recording: the cluster's ClusterResourceSetBinding, written once per reconcile and
only when it changed, with optimistic concurrency."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import structlog

from crs_controller.core.api.models import ClusterResourceSetBinding, CRSBinding, to_api
from crs_controller.core.errors import Conflict
from crs_controller.core.state.bindings import (
    binding_changed,
    bucket_label,
    crs_owners,
    desired_binding,
    entries_by_crs,
    merged_entries,
    mislabelled,
)
from crs_controller.engine.io.stores import BindingStore

BINDING_WRITE_ATTEMPTS = 5

log = structlog.get_logger(__name__)


async def write_binding(
    store: BindingStore,
    namespace: str,
    cluster: str,
    current: ClusterResourceSetBinding | None,
    entries: dict[str, CRSBinding],
    owners: list[dict[str, Any]],
    cluster_owner: dict[str, Any] | None = None,
) -> bool:
    """Write the binding with ``entries``, ``owners`` and ``cluster_owner`` if it
    changed; delete it when no entry is left. False when nothing could be written:
    another writer changed an entry this pass changed too, and the pass is to be
    redone on the binding as it is now (read, and cached)."""
    ours = Ours(namespace, cluster, current, entries, owners, cluster_owner)
    # Optimistic concurrency: PUT with the resourceVersion we read. On a Conflict the
    # binding is read again and this pass's changes go onto it (merged_entries), so
    # what another writer recorded meanwhile is kept, rather than failing the whole
    # reconcile (which would redo every apply to record them).
    fresh = current
    for _ in range(BINDING_WRITE_ATTEMPTS - 1):
        try:
            return await _put(store, ours, fresh)
        except Conflict:
            # Read whole: the cache may hold only a summary of it (no inventory).
            read = await store.read_whole(namespace, cluster)
            fresh = None if read is None else read.valid
    return await _put(store, ours, fresh)


@dataclass(frozen=True)
class Ours:
    """What a pass read of the binding (``base``) and would write of it."""

    namespace: str
    cluster: str
    base: ClusterResourceSetBinding | None
    entries: dict[str, CRSBinding]
    owners: list[dict[str, Any]]
    cluster_owner: dict[str, Any] | None = None


async def _put(store: BindingStore, ours: Ours, fresh: ClusterResourceSetBinding | None) -> bool:
    """Write our changes onto ``fresh`` (the binding as last read) if they change it;
    False when they cannot be merged with another writer's."""
    where = f"{ours.namespace}/{ours.cluster}"
    if fresh is ours.base:  # nothing read since: the merge would be ours (and cost)
        merged: dict[str, CRSBinding] | None = dict(ours.entries)
    else:
        merged = merged_entries(entries_by_crs(ours.base), ours.entries, entries_by_crs(fresh))
    if merged is None:
        log.info("binding changed meanwhile: pass redone", cluster=where)
        return False
    if not merged:
        if fresh is not None:
            version = fresh.metadata.resource_version
            await store.delete(ours.namespace, ours.cluster, resource_version=version)
        return True
    # Ours for the CRSs this pass has entries for, the binding's for the others.
    owners = [o for o in ours.owners if o["name"] in merged]
    owners += crs_owners(fresh, merged.keys() - ours.entries.keys())
    desired = desired_binding(
        fresh,
        namespace=ours.namespace,
        cluster=ours.cluster,
        entries=merged,
        owners=owners,
        cluster_owner=ours.cluster_owner,
    )
    if binding_changed(fresh, desired):
        if log.is_enabled_for(logging.DEBUG):  # worked out only when it is logged
            log.debug("binding written", cluster=where, changed=_what(fresh, desired))
        await store.write(to_api(desired), create=fresh is None)  # labelled as it goes
    elif fresh is not None and mislabelled(fresh):
        # Nothing else to write: the label alone, once (a label already right is
        # never written, so a restart with everything applied writes nothing).
        log.info("binding's shard bucket label set", cluster=where)
        bucket = bucket_label(ours.namespace, ours.cluster)
        version = fresh.metadata.resource_version
        await store.label_bucket(ours.namespace, ours.cluster, bucket, resource_version=version)
    return True


def _what(before: ClusterResourceSetBinding | None, after: ClusterResourceSetBinding) -> list[str]:
    """Which parts of the binding a write changes, named (never their values)."""
    if before is None:
        return ["created"]
    old = {e.cluster_resource_set_name: to_api(e) for e in before.spec.bindings}
    changed = (
        [] if before.metadata.owner_references == after.metadata.owner_references else ["owners"]
    )
    for entry in after.spec.bindings:
        new, was = to_api(entry), old.pop(entry.cluster_resource_set_name, None) or {}
        fields = sorted(k for k in new.keys() | was.keys() if new.get(k) != was.get(k))
        if fields == ["outcome"]:
            outcome, prior = new.get("outcome") or {}, was.get("outcome") or {}
            fields = [
                f"outcome.{k}"
                for k in sorted(outcome.keys() | prior.keys())
                if outcome.get(k) != prior.get(k)
            ]
        changed += [f"{entry.cluster_resource_set_name}: {', '.join(fields)}"]
    return changed + [f"{name}: removed" for name in old]
