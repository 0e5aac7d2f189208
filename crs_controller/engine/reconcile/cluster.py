"""Reconcile one Cluster: bring every matching CRS's resources to it, then write its
binding once, and only if it changed.

The cluster is the unit of work because its binding is one object: one reconcile per
cluster means one writer per binding, one workload client in use at a time, and an
unreachable cluster that only ever delays itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import structlog

from crs_controller.clients.workload import kubeconfig_secret_name
from crs_controller.core.api.models import ClusterResourceSetBinding, CRSBinding
from crs_controller.core.errors import Unreachable
from crs_controller.core.spec.objects import CRS, Cluster
from crs_controller.core.state.bindings import entries_by_crs, of_another_cluster
from crs_controller.core.state.status import Outcome
from crs_controller.engine.reconcile.admission import Gate, Held
from crs_controller.engine.reconcile.context import ClusterContext
from crs_controller.engine.reconcile.pair import reconcile_pair, unexpected
from crs_controller.engine.reconcile.result import NOTHING, RETRY, Result
from crs_controller.engine.reconcile.rollout import taking
from crs_controller.engine.reconcile.scope import (
    ClusterScope,
    CRSPass,
    forget_budget,
    step_aside,
)
from crs_controller.engine.reconcile.workload.uninstall import Cleanup, uninstall
from crs_controller.engine.reconcile.workload.uninstall import targets as uninstall_targets

log = structlog.get_logger(__name__)


async def reconcile_cluster(ctx: ClusterContext, namespace: str, name: str) -> Result:
    try:
        return await _reconcile(ctx, namespace, name)
    except BaseException:
        # Timed out, crashed or cancelled: its waiting pairs step aside (a place it
        # holds stays), so a pass that never records them holds nobody back.
        step_aside(ctx, (namespace, name))
        raise


async def _reconcile(ctx: ClusterContext, namespace: str, name: str) -> Result:
    cluster = ctx.caches.cluster(namespace, name)
    if cluster is not None and not cluster.whole and cluster.problem is None:
        # Another replica's Cluster until now (or too large to keep whole): read
        # whole, as its values are. One refused is taken as it is cached: left
        # alone, or cleaned up, which reads no value of it (``Cluster.refused_alive``).
        cluster = await ctx.clusters.read_whole(namespace, name)
    await _tell_refused(ctx, (namespace, name), cluster)
    if cluster is not None and (cluster.paused or cluster.refused_alive):
        # Left alone, it takes no revision: its budget place goes back meanwhile. Its
        # binding is not judged either (clusterctl move pauses a Cluster it recreates
        # until the binding is copied too). A refused Cluster too, said once as it
        # came (not at every pass): selected by no CRS, nothing is applied to it.
        if cluster.paused:
            log.info("cluster paused: left alone", cluster=f"{namespace}/{name}")
        forget_budget(ctx, (namespace, name))
        return NOTHING if cluster.paused else await _release_refused(ctx, cluster)
    binding = await _binding(ctx, cluster, namespace, name)
    if cluster is None:
        return await _forget_cluster(ctx, namespace, name, binding)
    # Notes of an earlier Cluster of this name (deleted and created again between
    # two passes) go: they are not this Cluster's.
    ctx.unrecorded.keep_only((namespace, name), cluster.meta.uid or "")
    if cluster.deleting:
        # Being deleted, it takes no revision: its place goes back and it leaves the
        # line, however long its finalizers keep it.
        forget_budget(ctx, (namespace, name))
        if binding is None and ctx.caches.crss_in(namespace):
            binding = await _binding(ctx, cluster, namespace, name, uncached=True)
        return await _clean_up(ctx, cluster, binding)
    return await _reconcile_live(ctx, cluster, binding)


# The reason of the Warning Event on a Cluster refused for its labels.
CLUSTER_REFUSED = "ClusterRefused"


async def _tell_refused(ctx: ClusterContext, key: tuple[str, str], cluster: Cluster | None) -> None:
    """One Warning Event on a Cluster as it comes refused (its labels over the bound,
    not being deleted), again only if the refusal changes; naming the field and the
    bound, never a label. What becomes of its binding's entries is said too."""
    if cluster is None or not cluster.refused_alive:
        ctx.refusals_told.pop(key, None)
        return
    said = f"{cluster.meta.uid}/{cluster.problem}"
    if ctx.refusals_told.get(key) == said:
        return
    ctx.refusals_told[key] = said
    message = (
        f"Cluster {key[0]}/{key[1]} refused: {cluster.problem}; selected by no "
        "ClusterResourceSet and left alone (nothing applied) until its labels are within "
        "the bound: its binding's entries stay, but for those of ClusterResourceSets being "
        "deleted, which are let go (Delete: once the objects they record are removed)"
    )
    await ctx.events.emit_on_cluster(cluster, "Warning", CLUSTER_REFUSED, message)


async def _release_refused(ctx: ClusterContext, cluster: Cluster) -> Result:
    """A refused Cluster not being deleted still lets go of the CRSs being deleted, so
    it holds no finalizer for ever: an Orphan one's entry leaves the binding (a
    binding write alone), a Delete one's recorded objects are deleted as any pruning
    deletes them (the binding and the workload cluster; no label is read), sparing
    what the other entries record. Every other entry stays exactly as it is."""
    key = (cluster.namespace, cluster.name)
    binding = await _binding(ctx, cluster, *key)
    found = (ctx.caches.crs(cluster.namespace, n) for n in entries_by_crs(binding))
    leaving = [c for c in found if c is not None and c.deleting and not c.left_alone]
    if not leaving:
        return NOTHING
    scope = ClusterScope(ctx, cluster, binding)
    scope.keep_as_recorded(set(scope.entries()) - {c.name for c in leaving})
    result = NOTHING
    if any(c.deletion_policy == "Delete" for c in leaving) and await scope.connect():
        result = RETRY  # not contactable now: its objects stay recorded until it is
    result |= await scope.prune([])
    result |= await scope.record()
    scope.forget_left()
    return result


async def _reconcile_live(
    ctx: ClusterContext, cluster: Cluster, binding: ClusterResourceSetBinding | None
) -> Result:
    """Apply every matching CRS, prune what they no longer ask for, and record it."""
    key = (cluster.namespace, cluster.name)
    crss = _active(ctx, cluster)
    noted = ctx.unrecorded.holds(key, cluster.meta.uid or "")
    if not crss and not entries_by_crs(binding) and not noted:
        # Nothing to apply, prune or record: its kubeconfig is not read and no client
        # is built for a cluster no CRS selects (and it updates nothing).
        forget_budget(ctx, key)
        return NOTHING
    if binding is None:
        binding = await _binding(ctx, cluster, *key, uncached=True)
    scope = ClusterScope(ctx, cluster, binding)
    blocked = await scope.connect()
    if blocked is not None:
        result = await _record_blocked(scope, crss, blocked)
    else:
        result = await _apply_all(scope, crss)
    result |= await scope.prune(crss)
    result |= await scope.record()
    scope.forget_left()
    return result


async def _binding(
    ctx: ClusterContext,
    cluster: Cluster | None,
    namespace: str,
    name: str,
    *,
    uncached: bool = False,
) -> ClusterResourceSetBinding | None:
    """The Cluster's binding, whole. One recorded for an earlier Cluster of this name
    is deleted and the Cluster starts with none: what it lists went to a cluster that
    is gone, and nothing of it is deleted from this one (whose objects were not
    applied from it). One a ``clusterctl move`` copied (owned by this Cluster, its
    annotation naming the Cluster moved) is this Cluster's: its next write records
    the uid. ``uncached``: the pass decides from it, and a shard member whose cache
    holds none reads it (``BindingStore.read_missing``)."""
    cached = ctx.caches.binding(namespace, name)
    if cached is not None and not cached.whole:
        # Another replica's Cluster until now: its inventory is read before anything
        # is decided (the cache held only what status and rollouts read).
        cached = await ctx.bindings.read_whole(namespace, name)
    elif cached is None and uncached and not ctx.holds_every_binding():
        # A shard member's cache holds only what its watches select: a binding whose
        # label a tenant moved to another bucket is not there, and is read rather than
        # taken for a first install (none there, remembered: there is none).
        cached = await ctx.bindings.read_missing(namespace, name)
    if cached is None:
        return None
    if cluster is not None and of_another_cluster(cached.meta, cluster.meta.uid):
        where = f"{namespace}/{name}"
        log.info("binding of an earlier Cluster of this name dropped", cluster=where)
        ctx.still_ours(namespace, name)
        ctx.unrecorded.drop_cluster((namespace, name))
        version = cached.meta.resource_version
        await ctx.bindings.delete(namespace, name, resource_version=version)
        return None
    # A binding the model refuses stops this cluster (InvalidSpec, retried with
    # backoff) rather than being overwritten: its inventory is all we know.
    return cached.valid


def _active(ctx: ClusterContext, cluster: Cluster) -> list[CRS]:
    """The matching CRSs to apply: not paused, being deleted, or refused."""
    matching = ctx.caches.matching_crss(cluster)
    if paused := sorted(c.name for c in matching if c.paused):
        where = f"{cluster.namespace}/{cluster.name}"
        log.info("paused ClusterResourceSets left alone", cluster=where, crss=paused)
    return [c for c in matching if c.active]


async def _record_blocked(scope: ClusterScope, crss: list[CRS], blocked: Outcome) -> Result:
    """The cluster cannot be contacted (pending or failing): every matching CRS gets
    that outcome, in the entry it had (or a new, empty one); a failure, with the
    revision it keeps the cluster from taking (``reconcile.rollout.taking``)."""
    # A broken kubeconfig is retried with backoff; a pending cluster waits for its next
    # event (initialized, kubeconfig created).
    result = RETRY if blocked.state == "Failed" else NOTHING
    for crs in crss:
        outcome = replace(blocked, generation=crs.generation)
        if blocked.state == "Failed":
            outcome = replace(outcome, revision=await _kept_from(scope, crs))
        result |= scope.settle(crs, CRSPass(scope.kept(crs.name), outcome))
    return result


async def _kept_from(scope: ClusterScope, crs: CRS) -> str:
    """The revision a cluster that cannot be contacted fails to take: the one its
    rollout admitted it to, or the one it is on while that rollout goes on. A cluster
    that holds updates is admitted to none."""
    rolled = await scope.rolled(crs)
    if rolled is None:
        return ""
    ctx, cluster = scope.ctx, scope.cluster
    admitted = not cluster.holds_updates and (
        crs.policy is None
        or ctx.rollouts.admitted(cluster.namespace, crs.name, cluster.name, rolled.target)
    )
    return taking(ctx, crs, scope.before(crs.name), rolled, admitted=admitted)


async def _apply_all(scope: ClusterScope, crss: list[CRS]) -> Result:
    """Each matching CRS's pass, those depended on first. A CRS the gate holds back
    (reconcile/admission: dependencies, rollout, budget) keeps its entry: in
    dependency order, a dependency that becomes done in this pass lets its
    dependents go in the same pass."""
    result = NOTHING
    gate = Gate(scope)
    by_name = {c.name: c for c in crss}
    order = scope.ctx.caches.dependencies(scope.cluster.namespace).dependency_order(by_name)
    for name in order:
        result |= scope.settle(by_name[name], await _pass(scope, gate, by_name[name]))
    for name in scope.budget_waiters(order):
        result |= scope.settle(by_name[name], await _pass(scope, gate, by_name[name]))
    return result


async def _pass(scope: ClusterScope, gate: Gate, crs: CRS) -> CRSPass:
    """One CRS's pass, if the gate lets it go; whatever goes wrong in it becomes this
    pair's outcome, so one odd server or object never leaves the CRS without a
    status."""
    try:
        admitted = await gate.admit(crs)
        if isinstance(admitted, Held):
            before = scope.before(crs.name)
            outcome, hold = admitted.outcome(before), admitted.hold(before)
            return CRSPass(scope.kept(crs.name), outcome, hold=hold)
        return await reconcile_pair(scope, crs, admitted)
    except Unreachable as exc:
        # The cluster stopped answering, or answered more than we read, before the pass
        # had its outcome (the gate's reads): that is this cluster's outcome, said as
        # such. Once the resources had their turn, reconcile_pair keeps what went out.
        outcome = Outcome("Failed", exc.reason, str(exc), crs.generation)
        return CRSPass(scope.kept(crs.name), outcome, RETRY)
    except Exception as exc:
        return CRSPass(scope.kept(crs.name), unexpected(scope, crs, exc), RETRY)


async def _clean_up(
    ctx: ClusterContext, cluster: Cluster, binding: ClusterResourceSetBinding | None
) -> Result:
    """A Cluster being deleted: uninstall what CRSs asked to clean up, and let go of
    the CRSs being deleted that have nothing (more) to do here; the binding itself
    goes once the Cluster is gone. What earlier passes applied and did not record
    is cleaned up with the entries (``memory.unrecorded``)."""
    scope = ClusterScope(ctx, cluster, binding)
    entries = scope.entries()
    if not entries:
        return Result()
    crss = uninstall_targets(ctx.caches, cluster, entries, ctx.clock.wall())
    released = _released(ctx, cluster, entries, crss)
    if not crss and not released:
        return Result()
    cleanup = Cleanup(remaining=entries)
    if crss:
        await scope.connect()
        ctx.still_ours(cluster.namespace, cluster.name)
        cleanup = await uninstall(ctx, scope.client, cluster, entries, crss)
    remaining = {n: e for n, e in cleanup.remaining.items() if n not in released}
    return cleanup.then | await scope.record(remaining)


def _released(
    ctx: ClusterContext, cluster: Cluster, entries: Mapping[str, CRSBinding], held: list[CRS]
) -> set[str]:
    """The CRSs being deleted whose entries a Cluster being deleted lets go at once, so
    their finalizers need not wait for it to be gone (however long that takes): no
    cleanup of theirs holds it — Orphan touches no workload cluster, and for Delete
    without ``uninstall.ensure`` (or past its timeout) what they applied goes with the
    workload cluster. A CRS left alone (paused, refused) keeps its entry, as anywhere."""
    holding = {crs.name for crs in held}
    found = (ctx.caches.crs(cluster.namespace, name) for name in entries)
    return {
        crs.name
        for crs in found
        if crs is not None and crs.deleting and not crs.left_alone and crs.name not in holding
    }


async def forget_cluster(ctx: ClusterContext, namespace: str, name: str) -> None:
    """Forget what this process kept for a Cluster: its outcomes, its kubeconfig, its
    drift timers, its budget place (the budget wakes the clusters it lets go), the
    DependentNotWaited Events its deletion told and its client (a Cluster gone, or now
    another replica's)."""
    ctx.outcomes.drop_cluster(namespace, name)
    ctx.unrecorded.drop_cluster((namespace, name))
    ctx.deletion_waits.drop_cluster(namespace, name)
    ctx.not_waited_told.pop((namespace, name), None)
    ctx.sources.forget(namespace, "Secret", kubeconfig_secret_name(name))
    ctx.drift.forget_cluster(namespace, name)
    forget_budget(ctx, (namespace, name))
    await ctx.workloads.forget(namespace, name)


async def _forget_cluster(
    ctx: ClusterContext, namespace: str, name: str, binding: ClusterResourceSetBinding | None
) -> Result:
    await forget_cluster(ctx, namespace, name)
    if binding is not None:
        ctx.still_ours(namespace, name)
        await ctx.bindings.delete(namespace, name)
    return NOTHING
