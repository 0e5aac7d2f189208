"""Cleaning a workload cluster up before its Cluster is deleted (``uninstall.ensure``).

For every CRS recorded in the cluster's binding that asks for it: apply its
``beforeDelete`` hook objects and wait for the Jobs among them (``before_delete``); a
failed Job aborts (deleted, and retried with backoff; nothing deleted meanwhile); then
delete what the CRS applied, in reverse order, sparing what other CRSs recorded and
refusing what the live object does not show we applied (a DeletionRefused event, one
for every cluster's as ``memory.notes`` gathers them), keeping (with a
DeletionSkipped event) the CustomResourceDefinitions and Namespaces no allowDelete
names. The entry leaves the binding once done, which is what the BeforeClusterDelete
hook reports on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import structlog

from crs_controller.clients.api import KubeAPI
from crs_controller.core.api.models import CRSBinding
from crs_controller.core.errors import CRSError, ResourceError, Unreachable
from crs_controller.core.spec.objects import CRS, Cluster
from crs_controller.core.state.deletion_guard import (
    DELETION_SKIPPED,
    allowances,
    describe,
    guard,
)
from crs_controller.core.state.prune_decisions import (
    DELETION_REFUSED,
    inventory,
    stale_objects,
    without,
)
from crs_controller.core.state.uninstall_decisions import cleanup_due, dependents_waited_until
from crs_controller.core.values.dependencies import removal_order
from crs_controller.engine.index import Caches
from crs_controller.engine.memory.notes import Note
from crs_controller.engine.reconcile.context import ClusterContext
from crs_controller.engine.reconcile.result import (
    NOTHING,
    RETRY,
    Result,
    Wake,
    cluster_key,
    crs_key,
)
from crs_controller.engine.reconcile.workload.before_delete import report, run_hooks
from crs_controller.engine.reconcile.workload.pruning import Deletion, delete_objects

log = structlog.get_logger(__name__)

JOB_POLL = 2.0
# The Warning Event of a dependency whose cleanup stopped waiting for a dependent's.
DEPENDENT_NOT_WAITED = "DependentNotWaited"


@dataclass
class Cleanup:
    """Where the cleanup of one deleting cluster stands."""

    remaining: dict[str, CRSBinding]  # entries to keep in the binding
    then: Result = NOTHING


def targets(
    caches: Caches, cluster: Cluster, entries: Mapping[str, CRSBinding], now: datetime
) -> list[CRS]:
    """The CRSs with an entry (by CRS name) that want cleanup and are still within
    their deadline."""
    found = (caches.crs(cluster.namespace, name) for name in entries)
    held = {crs.name: crs for crs in found if crs is not None and holds_deletion(crs, cluster, now)}
    # Dependents are cleaned up before what they depend on.
    graph = caches.dependencies(cluster.namespace)
    return [held[name] for name in removal_order(held, graph)]


def holds_deletion(crs: CRS | None, cluster: Cluster, now: datetime) -> bool:
    """Does this CRS hold the Cluster's deletion for cleanup? One rule for the cleanup
    itself and for the hook's answer: a CRS the model refuses, or a paused one (left
    alone: nothing applied, run or deleted), cleans nothing up, so it must not hold
    anything either."""
    if crs is None or crs.model is None or crs.paused:
        return False
    return cleanup_due(crs.model.spec.uninstall, cluster.meta.deletion_timestamp, now)


async def uninstall(
    ctx: ClusterContext,
    client: KubeAPI | None,
    cluster: Cluster,
    entries: Mapping[str, CRSBinding],
    crss: list[CRS],
) -> Cleanup:
    """Clean up for ``crss`` (from ``targets``) on the cluster behind ``client``,
    whose binding has ``entries`` (by CRS name)."""
    cleanup = Cleanup(remaining=dict(entries))
    for crs in crss:
        name = crs.name
        entry = entries[name]
        if not inventory([entry]):
            del cleanup.remaining[name]  # nothing was ever applied: no hook, nothing to do
            continue
        dependent = _dependent_left(ctx, cluster, cleanup, crss, name)
        if dependent is not None and (left := _wait_left(ctx, cluster, crs)) > 0:
            # A pass lands as the wait ends, whatever the dependent's retries do.
            cleanup.then |= Result.waking(Wake(cluster_key(cluster.namespace, cluster.name), left))
            continue
        if client is None:
            cleanup.then |= RETRY
            continue
        try:
            hooks = await run_hooks(ctx, client, crs, cluster)
        except (CRSError, ResourceError) as exc:
            await report(ctx, crs, cluster, str(exc))
            hooks = "Failed"
        if hooks == "Running":
            cleanup.then |= Result.after(JOB_POLL)
            continue
        if hooks == "Failed":
            cleanup.then |= RETRY
            continue
        if dependent is not None:  # said as its deletion goes ahead, not at each poll
            await _tell_not_waited(ctx, cluster, crs, dependent)
        await _delete(ctx, client, cluster, crs, cleanup)
    return cleanup


def _dependent_left(
    ctx: ClusterContext, cluster: Cluster, cleanup: Cleanup, crss: list[CRS], name: str
) -> str | None:
    """Removal runs the other way: nothing of CRS ``name`` (no hook, no deletion) runs
    while a CRS before it in ``crss`` (removal order) that depends on it still has
    objects here (its hook runs, or its deletion failed): the first such, or None."""
    graph = ctx.caches.dependencies(cluster.namespace).graph
    for crs in crss:
        if crs.name == name:
            return None
        entry = cleanup.remaining.get(crs.name)
        if name in graph.get(crs.name, ()) and entry is not None and inventory([entry]):
            return crs.name
    return None


async def _tell_not_waited(ctx: ClusterContext, cluster: Cluster, crs: CRS, dependent: str) -> None:
    """A Warning Event naming the dependent whose cleanup ``crs`` stopped waiting for:
    once per deletion of the Cluster, not at every retry of its cleanup."""
    key, uid = (cluster.namespace, cluster.name), cluster.meta.uid or ""
    told = ctx.not_waited_told.get(key)
    if told is None or told[0] != uid:
        told = ctx.not_waited_told[key] = (uid, set())
    if crs.name in told[1]:
        return
    told[1].add(crs.name)
    message = (
        f"cluster {cluster.name}: stopped waiting for the cleanup of ClusterResourceSet "
        f"{dependent}, which depends on it, before its own uninstall.timeout ends"
    )
    log.warning("dependent not waited for", crs=crs.name, cluster=cluster.name, dependent=dependent)
    await ctx.events.emit(crs, "Warning", DEPENDENT_NOT_WAITED, message)


def _wait_left(ctx: ClusterContext, cluster: Cluster, crs: CRS) -> float:
    """How many seconds ``crs`` still waits for a dependent's cleanup (0: no longer).
    Only up to its own deadline less a margin (``dependents_waited_until``): past it,
    its cleanup runs anyway, rather than being dropped unrun once its deadline passes.
    Its pass is woken then: the dependent's retries back off past that window."""
    started = cluster.meta.deletion_timestamp
    if started is None:
        return 0.0
    until = dependents_waited_until(crs.valid.spec.uninstall, started)
    return max((until - ctx.clock.wall()).total_seconds(), 0.0)


async def _delete(
    ctx: ClusterContext, client: KubeAPI, cluster: Cluster, crs: CRS, cleanup: Cleanup
) -> None:
    """Delete what ``crs`` applied and no other entry records; its entry leaves
    ``cleanup.remaining`` once done (refused objects never hold it)."""
    name, entry = crs.name, cleanup.remaining[crs.name]
    others = [e for n, e in cleanup.remaining.items() if n != name]
    stale = guard(
        entry,
        stale_objects(entry, inventory(others), set()),
        allowances(crs.valid.spec.resources),
    )
    if stale.kept:
        message = f"cluster {cluster.name}: {describe(stale.kept)}"
        await ctx.events.emit(crs, "Warning", DELETION_SKIPPED, message)
    try:
        done = await delete_objects(client, stale.delete, ctx.settings.field_manager)
    except Unreachable as exc:
        done = Deletion(failed=[str(exc)])
    if done.refused:
        # Told with the other clusters' (memory/notes): one Event and notification.
        note = Note("Warning", DELETION_REFUSED, cluster.name, message=done.refusals())
        quiet = ctx.announcements.note(crs.namespace, name, note)
        cleanup.then |= Result.waking(Wake(crs_key(crs.namespace, name), quiet))
    if done.failed:
        await report(ctx, crs, cluster, "; ".join(done.failed))
        forgotten = [*done.refused_refs, *(k.ref for k in stale.kept)]
        cleanup.remaining[name] = without(entry, forgotten)
        cleanup.then |= RETRY
        return
    del cleanup.remaining[name]
    removed = len(stale.delete) - len(done.refused)
    message = f"removed {removed} objects from cluster {cluster.name}"
    await ctx.events.emit(crs, "Normal", "Uninstalled", message)
