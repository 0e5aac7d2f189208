"""Reconcile one Cluster: bring every matching CRS's resources to it, then write its
binding once, and only if it changed.

The cluster is the unit of work because its binding is one object: one reconcile per
cluster means one writer per binding, one workload client in use at a time, and an
unreachable cluster that only ever delays itself.
"""

from __future__ import annotations

from dataclasses import replace

import structlog

from crs_controller.clients.api import KubeAPI
from crs_controller.clients.workload import kubeconfig_secret_name
from crs_controller.core.api.models import ClusterResourceSetBinding, CRSBinding
from crs_controller.core.errors import Unreachable
from crs_controller.core.spec.objects import CRS, Cluster
from crs_controller.core.state.bindings import entries_by_crs, owner_reference, with_outcome
from crs_controller.core.state.status import Outcome
from crs_controller.core.values.dependencies import removal_order
from crs_controller.engine.io import metrics
from crs_controller.engine.memory.notes import Note
from crs_controller.engine.reconcile.admission import Gate, Held
from crs_controller.engine.reconcile.context import ClusterContext
from crs_controller.engine.reconcile.pair import CRSPass, reconcile_pair, wanted_by
from crs_controller.engine.reconcile.recording import write_binding
from crs_controller.engine.reconcile.result import (
    NOTHING,
    RETRY,
    Result,
    Wake,
    cluster_key,
    crs_key,
)
from crs_controller.engine.reconcile.validation import validated
from crs_controller.engine.reconcile.workload.pruning import Pruned, prune
from crs_controller.engine.reconcile.workload.uninstall import targets as uninstall_targets
from crs_controller.engine.reconcile.workload.uninstall import uninstall

log = structlog.get_logger(__name__)


async def reconcile_cluster(ctx: ClusterContext, namespace: str, name: str) -> Result:
    cluster = ctx.caches.cluster(namespace, name)
    cached = ctx.caches.binding(namespace, name)
    # A binding the model refuses stops this cluster (InvalidSpec, retried with
    # backoff) rather than being overwritten: its inventory is all we know.
    binding = None if cached is None else cached.valid
    if cluster is None:
        await _forget_cluster(ctx, namespace, name, binding)
        return Result()
    if cluster.paused:
        log.info("cluster paused: left alone", cluster=f"{namespace}/{name}")
        return Result()
    if cluster.deleting:
        return await _clean_up(ctx, cluster, binding)

    crss = _active(ctx, cluster)
    entries = entries_by_crs(binding)
    # Paused CRSs are left alone: their entries stay exactly as they are.
    keep = {c.name for c in ctx.caches.crss_in(namespace) if c.left_alone}
    new_entries = {n: e for n, e in entries.items() if n in keep}

    client, blocked = await _workload_client(ctx, cluster)
    if client is None:
        assert blocked is not None
        result = await _record_blocked(ctx, name, crss, entries, new_entries, blocked)
    else:
        result = await _apply_all(ctx, client, cluster, crss, entries, new_entries)
    pruned = await _prune(ctx, client, cluster, crss, entries, new_entries)
    new_entries = pruned.entries
    if pruned.errors:
        result |= RETRY
    await _record(ctx, cluster, binding, new_entries)
    # Pairs whose CRS no longer selects this cluster leave the CRS's status.
    for crs_name in set(entries) - set(new_entries):
        ctx.outcomes.drop_pair(namespace, crs_name, name)
        ctx.drift.forget_pair((namespace, crs_name, name))
        # Deleted or no longer selecting mid-update: its budget place goes back.
        result |= _woken(ctx, ctx.budget.release((namespace, name), crs_name))
    return result


def _active(ctx: ClusterContext, cluster: Cluster) -> list[CRS]:
    """The matching CRSs to apply: not paused, being deleted, or refused."""
    matching = ctx.caches.matching_crss(cluster)
    if paused := sorted(c.name for c in matching if c.paused):
        where = f"{cluster.namespace}/{cluster.name}"
        log.info("paused ClusterResourceSets left alone", cluster=where, crss=paused)
    return [c for c in matching if c.active]


async def _record(
    ctx: ClusterContext,
    cluster: Cluster,
    binding: ClusterResourceSetBinding | None,
    entries: dict[str, CRSBinding],
) -> None:
    """Write the binding, owned by the CRSs it has entries for."""
    owners = [owner_reference(c.meta) for c in ctx.caches.crss_in(cluster.namespace)]
    owners = [o for o in owners if o["name"] in entries]
    await write_binding(ctx.bindings, cluster.namespace, cluster.name, binding, entries, owners)


async def _record_blocked(
    ctx: ClusterContext,
    cluster_name: str,
    crss: list[CRS],
    entries: dict[str, CRSBinding],
    new_entries: dict[str, CRSBinding],
    blocked: Outcome,
) -> Result:
    """The cluster cannot be contacted (pending or failing): every matching CRS gets
    that outcome, in the entry it had (or a new, empty one)."""
    # A broken kubeconfig is retried with backoff; a pending cluster waits for its next
    # event (initialized, kubeconfig created).
    result = RETRY if blocked.state == "Failed" else NOTHING
    for crs in crss:
        outcome = replace(blocked, generation=crs.generation)
        kept = entries.get(crs.name)
        entry = kept or CRSBinding(cluster_resource_set_name=crs.name)
        result |= _settle(ctx, crs, cluster_name, CRSPass(entry, outcome), kept, new_entries)
    return result


async def _apply_all(
    ctx: ClusterContext,
    client: KubeAPI,
    cluster: Cluster,
    crss: list[CRS],
    entries: dict[str, CRSBinding],
    new_entries: dict[str, CRSBinding],
) -> Result:
    """Each matching CRS's pass, those depended on first; their entries go into
    ``new_entries``. A CRS the gate holds back (reconcile/admission: dependencies,
    rollout) keeps its entry: in dependency order, a dependency that becomes done in
    this pass lets its dependents go in the same pass."""
    result = NOTHING
    gate = Gate(ctx, cluster, entries, new_entries)
    by_name = {c.name: c for c in crss}
    order = ctx.caches.dependencies(cluster.namespace).dependency_order(by_name)
    for name in order:
        crs = by_name[name]
        done = await _pass(ctx, client, cluster, crs, entries.get(crs.name), gate)
        result |= _settle(ctx, crs, cluster.name, done, entries.get(crs.name), new_entries)
    # A pair held for the budget early in the pass goes now if the cluster may (another
    # cluster freed a place meanwhile, and a later pair of this one may have taken it):
    # the cluster counts once, whatever the number of CRSs it updates.
    held = [n for n in order if _reason(new_entries.get(n)) == "BudgetExhausted"]
    if held and ctx.budget.may_go((cluster.namespace, cluster.name)):
        for name in held:
            crs = by_name[name]
            done = await _pass(ctx, client, cluster, crs, entries.get(crs.name), gate)
            result |= _settle(ctx, crs, cluster.name, done, entries.get(crs.name), new_entries)
    return result


def _reason(entry: CRSBinding | None) -> str | None:
    outcome = entry.outcome if entry is not None else None
    return outcome.reason if outcome is not None else None


def _settle(
    ctx: ClusterContext,
    crs: CRS,
    cluster: str,
    done: CRSPass,
    previous: CRSBinding | None,
    new_entries: dict[str, CRSBinding],
) -> Result:
    """Record a pass's outcome in its entry and in memory, noting a new failure.
    Every matching CRS gets an entry, even before anything was applied: the binding
    is where every replica reads this pair's outcome from."""
    told = new_entries[crs.name] = _told(ctx, done.entry, previous, done.outcome)
    then = done.then | _budget(ctx, crs, cluster, done.outcome)
    if _set_outcome(ctx, crs, cluster, done.outcome) and _news(previous, told, done.outcome):
        then |= _warn(ctx, crs, cluster, done.outcome)
    return then


def _budget(ctx: ClusterContext, crs: CRS, cluster: str, outcome: Outcome) -> Result:
    """A pair that no longer takes a new revision (done, failed, held for another
    reason) gives its place in the fleet-wide budget back, or leaves the line; the
    Result wakes the clusters first in line for the places freed. Applied and not
    Ready yet, it still updates."""
    woken: tuple[tuple[str, str], ...] = ()
    if outcome.reason != "BudgetExhausted" and (outcome.state != "Applied" or outcome.ready):
        woken = ctx.budget.release((crs.namespace, cluster), crs.name)
    return _woken(ctx, woken)


def _woken(ctx: ClusterContext, woken: tuple[tuple[str, str], ...]) -> Result:
    """Wake the clusters a budget release lets go. The gauge is set on every pair, not
    only on a release: the gate may have granted a place just now."""
    metrics.UPDATING_CLUSTERS.set(ctx.budget.updating)
    return Result.waking(*(Wake(cluster_key(*key)) for key in woken))


async def _prune(
    ctx: ClusterContext,
    client: KubeAPI | None,
    cluster: Cluster,
    crss: list[CRS],
    entries: dict[str, CRSBinding],
    new_entries: dict[str, CRSBinding],
) -> Pruned:
    """deletionPolicy Delete: remove what left the desired set. Every CRS that still
    exists has a say, including those being deleted or no longer matching."""
    namespace, name = cluster.namespace, cluster.name
    present = ctx.caches.crss_in(namespace)
    policies = {c.name: c.valid.spec.deletion_policy for c in present if not c.left_alone}
    if not any(policies.get(n) == "Delete" for n in entries):
        return Pruned(new_entries)
    wanted = await wanted_by(ctx, namespace, crss, ctx.control_planes.of(cluster))
    order = removal_order(entries, ctx.caches.dependencies(namespace))
    pruned = await prune(
        client,
        entries,
        new_entries,
        policies,
        wanted,
        order,
        field_manager=ctx.settings.field_manager,
    )
    for crs_name, refused in pruned.refused.items():
        # A binding entry naming objects we cannot show we applied: forged or stale.
        if owner := ctx.caches.crs(namespace, crs_name):
            await ctx.events.emit(owner, "Warning", "DeletionRefused", f"cluster {name}: {refused}")
    for crs_name, errors in pruned.errors.items():
        message = f"cluster {name}: deletion incomplete: " + "; ".join(errors)
        log.warning("deletion incomplete", crs=crs_name, cluster=f"{namespace}/{name}")
        if owner := ctx.caches.crs(namespace, crs_name):
            await ctx.events.emit(owner, "Warning", "DeleteFailed", message)
    return pruned


async def _pass(
    ctx: ClusterContext,
    client: KubeAPI,
    cluster: Cluster,
    crs: CRS,
    entry: CRSBinding | None,
    gate: Gate,
) -> CRSPass:
    """One CRS's pass, if the gate lets it go; whatever goes wrong in it becomes this
    pair's outcome, so one odd server or object never leaves the CRS without a
    status."""
    try:
        admitted = await gate.admit(crs, entry)
        if isinstance(admitted, Held):
            kept = entry or CRSBinding(cluster_resource_set_name=crs.name)
            return CRSPass(kept, admitted.outcome)
        done = await reconcile_pair(
            ctx, client, cluster, crs, entry, admitted.target, keep=admitted.keep_installed
        )
        return await validated(ctx, client, cluster, crs, entry, admitted, done)
    except Unreachable as exc:
        # The cluster stopped answering, or answered more than we read, mid-pass (a
        # health or drift LIST): that is this cluster's outcome, said as such.
        outcome = Outcome("Failed", exc.reason, str(exc), crs.generation)
        kept = entry or CRSBinding(cluster_resource_set_name=crs.name)
        return CRSPass(kept, outcome, RETRY)
    except Exception as exc:
        log.exception(
            "cluster pass failed",
            crs=crs.name,
            cluster=f"{cluster.namespace}/{cluster.name}",
        )
        message = f"unexpected {type(exc).__name__}; see the controller log"
        outcome = Outcome("Failed", "ApplyFailed", message, crs.generation)
        kept = entry or CRSBinding(cluster_resource_set_name=crs.name)
        return CRSPass(kept, outcome, RETRY)


async def _clean_up(
    ctx: ClusterContext, cluster: Cluster, binding: ClusterResourceSetBinding | None
) -> Result:
    """A Cluster being deleted: uninstall what CRSs asked to clean up; the binding
    itself goes once the Cluster is gone."""
    if binding is None:
        return Result()
    crss = uninstall_targets(ctx.caches, cluster, binding, ctx.clock.wall())
    if not crss:
        return Result()
    client, _ = await _workload_client(ctx, cluster)
    cleanup = await uninstall(ctx, client, cluster, binding, crss)
    await _record(ctx, cluster, binding, cleanup.remaining)
    return cleanup.then


async def _workload_client(
    ctx: ClusterContext, cluster: Cluster
) -> tuple[KubeAPI | None, Outcome | None]:
    """The cluster's client, or None and the outcome that says why not."""
    namespace, name = cluster.namespace, cluster.name
    secret_name = kubeconfig_secret_name(name)
    if not cluster.initialized:
        return None, Outcome("Pending", "WaitingForCluster", "control plane not initialized", 0)
    secret = await ctx.sources.content(namespace, "Secret", secret_name)
    if secret is None:
        message = f"kubeconfig Secret {secret_name} not found"
        return None, Outcome("Pending", "WaitingForCluster", message, 0)
    try:
        return await ctx.workloads.get(namespace, name, secret), None
    except Unreachable as exc:
        return None, Outcome("Failed", exc.reason, str(exc), 0)


async def forget_cluster(ctx: ClusterContext, namespace: str, name: str) -> None:
    """Forget what this process kept for a Cluster: its outcomes, its drift timers
    and its client (a Cluster gone, or now another replica's)."""
    ctx.outcomes.drop_cluster(namespace, name)
    ctx.drift.forget_cluster(namespace, name)
    ctx.budget.forget_cluster((namespace, name))
    metrics.UPDATING_CLUSTERS.set(ctx.budget.updating)
    await ctx.workloads.forget(namespace, name)


async def _forget_cluster(
    ctx: ClusterContext, namespace: str, name: str, binding: ClusterResourceSetBinding | None
) -> None:
    await forget_cluster(ctx, namespace, name)
    if binding is not None:
        await ctx.bindings.delete(namespace, name)


def _set_outcome(ctx: ClusterContext, crs: CRS, cluster: str, outcome: Outcome) -> bool:
    return ctx.outcomes.record(crs.namespace, crs.name, cluster, outcome)


def _told(
    ctx: ClusterContext, entry: CRSBinding, previous: CRSBinding | None, outcome: Outcome
) -> CRSBinding:
    """The entry with its outcome, as the binding records it for this CRS."""
    return with_outcome(entry, previous, outcome, ctx.clock.wall())


def _warn(ctx: ClusterContext, crs: CRS, cluster: str, outcome: Outcome) -> Result:
    """Note a failure, told with the other clusters' as one event for the CRS, which
    the Result wakes once they settle."""
    note = Note("Warning", outcome.reason, cluster, message=outcome.message)
    quiet = ctx.announcements.note(crs.namespace, crs.name, note)
    return Result.waking(Wake(crs_key(crs.namespace, crs.name), quiet))


def _news(previous: CRSBinding | None, told: CRSBinding, outcome: Outcome) -> bool:
    """Is a failure worth a Warning event? Not when the binding already recorded it
    (after a restart, which forgets the outcomes in memory, or a hand-over from
    another replica): the binding is where every replica reads a pair's outcome."""
    after = told.outcome
    if outcome.state != "Failed" or after is None:
        return False
    before = previous.outcome if previous is not None else None
    return before is None or (before.reason, before.message) != (after.reason, after.message)
