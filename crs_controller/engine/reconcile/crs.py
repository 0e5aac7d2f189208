"""Reconcile one ClusterResourceSet: its finalizer and its status.

Applying happens per cluster (``reconcile/cluster``); this folds the per-cluster
outcomes and the state of the referenced resources into the status, written once and
only when it changed. On deletion (Orphan) the finalizer goes once no binding names
the CRS any more; the cluster reconciles remove the entries. A paused CRS only says
so (``Paused`` True, ``Ready`` Unknown); a spec the model refuses is told once. A
refused spec does not hold a deletion (its deletionPolicy is read alone), unless the
deletionPolicy itself cannot be read: the status says the deletion waits, and why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import structlog

from crs_controller.core.api.models import (
    FINALIZER,
    ClusterResourceSet,
    ClusterResourceSetStatus,
    to_api,
)
from crs_controller.core.errors import APIError, CRSError, failure_level
from crs_controller.core.rollout.plan import Plan
from crs_controller.core.rollout.shares import ClusterState, Share
from crs_controller.core.spec.objects import CRS, Cluster
from crs_controller.core.state.contribution import MAX_WAITING, Combined, Contribution, Waiting
from crs_controller.core.state.deletion_guard import skipped_status
from crs_controller.core.state.status import (
    DELETION_WAITS_FOR,
    READY,
    Problem,
    deletion_goes_on,
    deletion_waits,
    invalid_spec,
    new_problem,
    not_paused,
    outcome_of,
    paused,
    status_of,
)
from crs_controller.core.state.tally import Tally, tally_of
from crs_controller.engine.io import fleet_metrics, metrics
from crs_controller.engine.reconcile.context import CRSContext
from crs_controller.engine.reconcile.result import NOTHING, RETRY, Result, Wake, cluster_key
from crs_controller.engine.reconcile.revisions import (
    by_itself,
    drop_stale_request,
    history,
    snapshot,
    sweep,
)
from crs_controller.engine.reconcile.rollout import (
    RolledOut,
    concerned,
    failure_of,
    halting,
    on_revision,
    plan_rollout,
    rolled_out,
    rolling_back,
    rollout_status,
    share_for,
    whole_plan,
)

log = structlog.get_logger(__name__)

DELETION_POLL = 2.0


def _log_failure(event: str, crs: CRS, error: CRSError) -> None:
    """A failed write, retried later: at info, unless the controller's rights are
    missing (error: a retry will not bring them back)."""
    level = failure_level(error, otherwise=logging.INFO)
    status = error.status if isinstance(error, APIError) else None
    log.log(level, event, crs=f"{crs.namespace}/{crs.name}", status=status, error=str(error))


async def reconcile_crs(ctx: CRSContext, namespace: str, name: str) -> Result:
    crs = ctx.caches.crs(namespace, name)
    if crs is None:
        ctx.outcomes.drop_crs(namespace, name)
        ctx.deletion_waits.drop_crs(namespace, name)
        ctx.announcements.drop(namespace, name)
        ctx.rollouts.drop(namespace, name)
        fleet_metrics.forget_crs(namespace, name)
        return Result()
    if not ctx.leading():
        return await _follow(ctx, crs)
    if crs.deleting or crs.paused or crs.model is None:
        # Nothing is rolled out: the status's rollout is left as it was, or (refused)
        # cleared, and no plan keeps the rollout series.
        fleet_metrics.clear_rollout(namespace, name)
    if crs.paused:
        # Being deleted too, its Paused condition says why its deletion is held.
        await _write_paused_status(ctx, crs)
    if crs.deleting:
        return await _finalize(ctx, crs)
    if crs.paused:
        return Result()
    then = NOTHING
    if FINALIZER not in crs.meta.finalizers:
        then = _clusters_of(ctx, crs) if crs.awaits_finalizer else NOTHING
        crs = await ctx.crss.set_finalizers(crs, [*crs.meta.finalizers, FINALIZER])
    if crs.model is None:
        await _write_invalid_status(ctx, crs)
    else:
        then |= await _write_status(ctx, crs, crs.model)
    return then | await _tell(ctx, crs)


def _clusters_of(ctx: CRSContext, crs: CRS) -> Result:
    """Wakes the clusters ``crs`` selects, which left it alone while it awaited its
    finalizer: the finalizer's write goes into the cache at once, so the watch's copy
    of it changes nothing there and would wake nobody."""
    matching = ctx.caches.matching_clusters(crs)
    return Result.waking(*(Wake(cluster_key(crs.namespace, c.name)) for c in matching))


async def _follow(ctx: CRSContext, crs: CRS) -> Result:
    """A replica that does not write the status: it contributes what its own
    clusters say, as the leader does (to a deletion while the CRS is being deleted),
    plans the rollout its own clusters follow (the same plan the leader makes, from
    the same contributions) and tells what its own passes did. Planning none, it
    shows none (``clear_rollout``). A paused CRS, or one whose spec is refused, gets
    no contribution: the leader's status of it says only that, from no count; nor
    does one being deleted without our finalizer: the leader waits on no count then
    (``_finalize``), and waiting for its members would look again for ever."""
    then = NOTHING
    if crs.deleting and FINALIZER in crs.meta.finalizers:
        then = _counted(ctx, crs, await _holding(ctx, crs))
    elif not crs.deleting and not crs.paused and crs.model is not None:
        then = await _contribute(ctx, crs)
    if crs.deleting or crs.paused or crs.model is None:
        fleet_metrics.clear_rollout(crs.namespace, crs.name)
    return then | await _tell(ctx, crs)


async def _contribute(ctx: CRSContext, crs: CRS) -> Result:
    """A follower's contribution to a CRS that is neither paused nor refused, made as
    the leader makes its own (``_write_status``), and the plan it then follows."""
    matching = ctx.caches.matching_clusters(crs)
    rolled = await rolled_out(ctx, crs) if matching else None
    await _tell_held(ctx, crs, rolled)
    planning = rolled if rolled is not None and _plans(crs, rolled) else None
    whole, states = await _combined(ctx, crs, _own(ctx, crs, matching), planning)
    if isinstance(whole, Waiting):
        return _waiting(ctx, crs, whole)
    if planning is None:
        fleet_metrics.clear_rollout(crs.namespace, crs.name)
        return NOTHING
    return plan_rollout(ctx, crs, planning, whole, states)[1]


async def _tell_held(ctx: CRSContext, crs: CRS, rolled: RolledOut | None) -> None:
    """A rollback this process holds (``RolledOut.held``: its snapshot cannot be read
    here) is told once per reason, at warning, and again once a pass that held none
    came between. A follower also gives the Warning Event a refused rollback gives
    (``RollbackRefused``), naming itself: the leader's status may not say it, as the
    leader's own view of the snapshot may be fine."""
    why = rolled.refused if rolled is not None and rolled.held else None
    news = ctx.rollouts.refusal(crs.namespace, crs.name, why)  # None: forgotten
    if rolled is None or why is None or not news:
        return
    where, me = f"{crs.namespace}/{crs.name}", ctx.combining.me
    log.warning("rollback held", crs=where, to=rolled.target, reason=why, member=me)
    if not ctx.leading():
        message = f"{why}: replica {me}'s clusters keep what they have until it can be read"
        await ctx.events.emit(crs, "Warning", "RollbackRefused", message)


def _own(ctx: CRSContext, crs: CRS, matching: list[Cluster]) -> list[Cluster]:
    """The matching clusters this process contributes for."""
    return [c for c in matching if ctx.combining.owns(crs.namespace, c.name)]


async def _combined(
    ctx: CRSContext, crs: CRS, own: list[Cluster], rolled: RolledOut | None
) -> tuple[Combined | Waiting, list[ClusterState]]:
    """This process's contribution (its ``own`` clusters' tally, kept objects and,
    with a rollout ``rolled`` out, share) combined with the other members', and the
    states of its clusters in that rollout."""
    entries = [(c.name, ctx.caches.entry(crs.namespace, c.name, crs.name)) for c in own]
    share: Share | None = None
    states: list[ClusterState] = []
    if rolled is not None:
        share, states = share_for(ctx, crs, rolled, own)
    seam = ctx.combining
    mine = Contribution(
        seam.me,
        seam.stamp(),
        crs.meta.uid or "",
        crs.generation,
        tally_of((name, outcome_of(entry)) for name, entry in entries),
        share,
        tuple(skipped_status(entries)),
        halted=None if rolled is None else ctx.rollouts.halted(crs.namespace, crs.name),
    )
    whole = await seam.combined(crs, mine)
    if isinstance(whole, Combined) and rolled is not None:
        whole = halting(ctx, crs, whole)
    return whole, states


def _waiting(ctx: CRSContext, crs: CRS, waiting: Waiting) -> Result:
    """Not every member's contribution is in: nothing is planned or written yet. A
    contribution that changes wakes the pass (``Controller.contribution_moved``);
    meanwhile it looks again spaced as a status wake (by what its last pass took),
    so a wait that lasts costs no more than the status passes do."""
    log.info("status waits", crs=f"{crs.namespace}/{crs.name}", waiting=str(waiting))
    return Result.after(ctx.status_settle(crs.namespace, crs.name))


def _counted(ctx: CRSContext, crs: CRS, whole: Combined | Waiting) -> Result:
    """A follower's count of its Clusters holding a CRS being deleted, published: it
    counts again after DELETION_POLL while it counted some, as the leader looks
    again until it counts none (what a cluster pass settles without a binding write,
    its notes of objects applied and not recorded, wakes no CRS pass)."""
    if isinstance(whole, Waiting):
        return _waiting(ctx, crs, whole)
    mine = whole.parts.get(ctx.combining.me)
    return Result.after(DELETION_POLL) if mine is not None and mine.holding else NOTHING


async def _tell(ctx: CRSContext, crs: CRS) -> Result:
    """Emit what the cluster passes did once their notes have settled: one event per
    type and reason. Asks to look again while they are still coming in."""
    wait = ctx.announcements.wait(crs.namespace, crs.name)
    if wait is None or wait > 0:
        return Result.after(wait)

    def current(cluster: str) -> str | None:
        outcome = ctx.outcomes.get(crs.namespace, crs.name, cluster)
        return None if outcome is None else outcome.reason

    # A missing source's Warning is told only if the source is still missing now.
    for told in ctx.announcements.take(crs.namespace, crs.name, current):
        await ctx.events.emit(crs, told.type, told.reason, told.message, clusters=told.clusters)
    return NOTHING


async def _write_paused_status(ctx: CRSContext, crs: CRS) -> None:
    """Paused: say so (``Paused`` True, ``Ready`` Unknown), and leave all else alone."""
    status = paused(crs.status, crs.generation, ctx.clock.wall())
    if to_api(status) != to_api(crs.status):
        await ctx.crss.put_status(crs, status)
        log.info("paused", crs=f"{crs.namespace}/{crs.name}")


async def _write_invalid_status(ctx: CRSContext, crs: CRS, message: str = "") -> None:
    """The model refuses the spec: say so on this CRS alone (``message``, else the
    problem), nothing else changes. A problem the status did not hold yet is told
    once, as a Warning, once written."""
    when = ctx.clock.wall()
    status = invalid_spec(crs.status, crs.generation, message or str(crs.problem), when)
    status = not_paused(status, crs.status, crs.generation, when)
    if to_api(status) == to_api(crs.status):
        return
    await ctx.crss.put_status(crs, status)
    log.warning("invalid spec", crs=f"{crs.namespace}/{crs.name}")
    problem = new_problem(crs.status, status)
    if problem is not None:
        await ctx.events.emit(crs, "Warning", "InvalidSpec", problem)


async def _finalize(ctx: CRSContext, crs: CRS) -> Result:
    if FINALIZER not in crs.meta.finalizers:
        return Result()
    if crs.model is None and crs.deletion_policy is None and not crs.paused:
        # Whether to delete what it applied cannot be read: nothing is deleted or
        # released (an edit of the spec wakes this pass and its clusters).
        await _write_invalid_status(ctx, crs, _deletion_waits(crs))
        return Result()
    # What the clusters' cleanups deleted (or kept) is told as for any pass; the
    # finalizer stays until it is, since the CRS's memory goes with it.
    told = await _tell(ctx, crs)
    whole = await _holding(ctx, crs)
    if isinstance(whole, Waiting):
        return _waiting(ctx, crs, whole) | told
    if whole.holding is None or whole.holding > 0:
        # The deletion's watch event brought those clusters' reconciles (see
        # Controller._on_crs); check back until their bindings let go, and until
        # what their passes applied and did not record is recorded or deleted, on
        # every member (None: one has not counted since it saw the deletion).
        await _write_deletion_waits(ctx, crs, whole)
        return Result.after(DELETION_POLL) | told
    if told != NOTHING:
        return told
    try:
        # The garbage collector would, from their owner reference, where one runs.
        await ctx.snapshots.delete_all(crs)
    except CRSError as exc:
        _log_failure("snapshot deletion failed", crs, exc)
        return RETRY
    await ctx.crss.set_finalizers(crs, [f for f in crs.meta.finalizers if f != FINALIZER])
    ctx.outcomes.drop_crs(crs.namespace, crs.name)
    return Result()


async def _write_deletion_waits(ctx: CRSContext, crs: CRS, whole: Combined) -> None:
    """A deletion held behind dependents being deleted too says so (``Ready`` False,
    DependencyNotReady): which, why (paused, their own deletion waiting, or their
    deletes failing) and on how many clusters. Once none holds it (nor a pause),
    ``Ready`` says it waits for its clusters alone and ``Paused`` is False. A paused
    CRS's says it is paused."""
    if crs.paused:
        return
    now = ctx.clock.wall()
    if whole.waiting:
        message = DELETION_WAITS_FOR + ", ".join(_held_by(ctx, crs, whole.waiting))
        status = deletion_waits(crs.status, crs.generation, message, now)
    else:
        status = deletion_goes_on(crs.status, crs.generation, now)
    status = not_paused(status, crs.status, crs.generation, now)
    if to_api(status) == to_api(crs.status):
        return
    try:
        await ctx.crss.put_status(crs, status)
    except CRSError as exc:  # said again at the next look
        _log_failure("status write failed", crs, exc)
        return
    log.info("deletion waits", crs=f"{crs.namespace}/{crs.name}", waiting=whole.waiting)


def _held_by(ctx: CRSContext, crs: CRS, waiting: dict[str, int]) -> list[str]:
    """Each dependent a deletion waits for, why and on how many clusters."""
    said = []
    for name, clusters in waiting.items():
        dependent = ctx.caches.crs(crs.namespace, name)
        said.append(f"{name} ({_why_held(dependent)}) on {clusters} clusters")
    return said


def _why_held(dependent: CRS | None) -> str:
    """Why a dependent being deleted still holds objects: paused, its own deletion
    waiting (its deletionPolicy cannot be read), or else its deletes failing."""
    if dependent is not None and dependent.paused:
        return "paused"
    if dependent is not None and dependent.left_alone:
        return "deletion waits"
    return "failing"


def _deletion_waits(crs: CRS) -> str:
    """The InvalidSpec message of a CRS being deleted whose deletionPolicy cannot be
    read: its deletion is blocked, and why."""
    why = crs.refused.problem if crs.refused is not None else "spec.deletionPolicy: unreadable"
    return (
        f"deletion waits: {why}: nothing is deleted or released until it is set "
        f"(removing the finalizer {FINALIZER} by hand leaves every object behind); {crs.problem}"
    )


async def _holding(ctx: CRSContext, crs: CRS) -> Combined | Waiting:
    """How many of this member's clusters still hold something of ``crs``, which is
    being deleted (an entry in their binding, or objects applied and not recorded
    yet), contributed and combined with the other members' counts."""
    seam = ctx.combining
    uid_of = _uid_of(ctx, crs.namespace)
    held = set(ctx.caches.holders(crs.namespace, crs.name))
    held |= set(ctx.unrecorded.holders(crs.namespace, crs.name, uid_of))
    count = sum(seam.owns(crs.namespace, name) for name in held)
    uid = crs.meta.uid or ""
    waits = ctx.deletion_waits.of(crs.namespace, crs.name)
    per: dict[str, int] = {}
    for cluster, dependent in waits.items():
        if cluster in held and seam.owns(crs.namespace, cluster):
            per[dependent] = per.get(dependent, 0) + 1
    waiting = tuple(sorted(per.items())[:MAX_WAITING])
    mine = Contribution(
        seam.me, seam.stamp(), uid, crs.generation, Tally(), holding=count, waiting=waiting
    )
    return await seam.combined(crs, mine)


def _uid_of(ctx: CRSContext, namespace: str) -> Callable[[str], str | None]:
    """The uid each Cluster of ``namespace`` has now (None: not in the cache)."""

    def uid(name: str) -> str | None:
        cluster = ctx.caches.cluster(namespace, name)
        return None if cluster is None else cluster.meta.uid or ""

    return uid


async def _problems(ctx: CRSContext, crs: CRS, model: ClusterResourceSet) -> list[Problem]:
    """What is wrong with the referenced resources themselves: from each content's
    verdict, kept when its parsed objects are evicted (engine/sources)."""
    problems: list[Problem] = []
    for ref in model.spec.resources:
        source = await ctx.sources.load(crs.namespace, ref)
        error = source.error or await ctx.sources.problem(source)
        if error is not None:
            problems.append(Problem(error.reason, str(error)))
    return problems


async def _write_status(ctx: CRSContext, crs: CRS, model: ClusterResourceSet) -> Result:
    """Write the status if it changed; the Result wakes this CRS again when its soak
    ends (the clusters a rollout admits are woken as it is planned)."""
    matching = ctx.caches.matching_clusters(crs)
    problems: list[Problem] = []
    rolled = None
    # With no Cluster matching, no source is needed: none is fetched, hashed or parsed
    # (a tenant's CRS naming large sources costs nothing until a Cluster matches). The
    # status says NoMatchingClusters, as the spec has it, and carries no revision:
    # nothing is rolled out. A Cluster that starts matching requeues this CRS.
    if matching:
        problems = await _problems(ctx, crs, model)
        rolled = await rolled_out(ctx, crs)
    # The plan before this one, as this process made it (None after a restart).
    previous = ctx.rollouts.plan(crs.namespace, crs.name)
    planner = crs if rolled is None else await drop_stale_request(ctx, crs, rolled)
    own = _own(ctx, crs, matching)
    settled = await _settled(ctx, planner, own, rolled)
    if isinstance(settled, Waiting):
        return _waiting(ctx, crs, settled)
    rolled, planning = settled.rolled, settled.planning
    await _tell_held(ctx, crs, rolled)
    if rolled is not None:
        await snapshot(ctx, planner, rolled)
    made, then = None, NOTHING
    if planning is not None:
        made, then = _made(ctx, planner, planning, settled)
        await _tell_rollout(ctx, planner, (planning.target, made), previous, settled.states)
    status = _status(ctx, crs, settled.whole, problems, made, rolled)
    status.history = history(ctx, crs, rolled, made, status)
    _show_fleet(ctx, crs, own, rolled, planned=made is not None)
    return then | await _put_status(ctx, crs, status, rolled, matching)


@dataclass(frozen=True)
class _Settled:
    """What a leader's pass writes the status from: what is rolled out (a rollback by
    itself decided), that again when it has a plan (``planning``), the members'
    contributions combined and the states of this process's clusters. ``starting``:
    a rollback by itself starts, and the members' shares of its target are not in
    yet (they make them once the status says so)."""

    rolled: RolledOut | None
    planning: RolledOut | None
    whole: Combined
    states: list[ClusterState]
    starting: bool = False


async def _settled(
    ctx: CRSContext, crs: CRS, own: list[Cluster], rolled: RolledOut | None
) -> _Settled | Waiting:
    """Combine the contributions; a halted rollout under ``onFailure: Rollback``
    decides its rollback from the plan of them all (``by_itself``), and combines
    them again for its target. With no rollback in force, planned or not, why this
    process last rolled back by itself is forgotten (a later one by hand is not it)."""
    if rolled is not None and not rolled.undo.rolled_back_from:
        ctx.rollouts.rolled_back(crs.namespace, crs.name, None)
    planning = rolled if rolled is not None and _plans(crs, rolled) else None
    whole, states = await _combined(ctx, crs, own, planning)
    if isinstance(whole, Waiting) or planning is None:
        return whole if isinstance(whole, Waiting) else _Settled(rolled, None, whole, states)
    back = await by_itself(ctx, crs, planning, whole_plan(ctx, crs, whole)[0])
    if back.target == planning.target:
        return _Settled(back, back, whole, states)
    again, states = await _combined(ctx, crs, own, back)
    if isinstance(again, Waiting):
        return _Settled(back, back, whole, states, starting=True)
    return _Settled(back, back, again, states)


def _made(ctx: CRSContext, crs: CRS, planning: RolledOut, settled: _Settled) -> tuple[Plan, Result]:
    """The plan of ``planning`` from the contributions; a rollback by itself that
    starts before the members' shares of its target are in says so, admits nobody
    and looks again as a pass waiting for contributions does (``_waiting``)."""
    if not settled.starting:
        return plan_rollout(ctx, crs, planning, settled.whole, settled.states)
    back = planning.undo.rolled_back_from or ""
    waiting = Plan(frozenset(), "Progressing", 1, 0, "waiting for the members' shares", None)
    made = rolling_back(waiting, back, planning.target, failure_of(ctx, crs, back))
    return made, Result.after(ctx.status_settle(crs.namespace, crs.name))


async def _put_status(
    ctx: CRSContext,
    crs: CRS,
    status: ClusterResourceSetStatus,
    rolled: RolledOut | None,
    matching: list[Cluster],
) -> Result:
    """Write ``status`` if it changed, then what follows a write."""
    if to_api(status) == to_api(crs.status):
        await sweep(ctx, crs, rolled, status, confirmed=False)
        return NOTHING
    try:
        written = await ctx.crss.put_status(crs, status)
    except CRSError as exc:
        # The plan is kept already, and the clusters it admits were woken with it.
        _log_failure("status write failed", crs, exc)
        return RETRY
    _log_status(crs, status)
    then = await _after_write(ctx, crs, rolled, matching)
    await sweep(ctx, crs, rolled, written.status, confirmed=True)
    return then


def _plans(crs: CRS, rolled: RolledOut) -> bool:
    """Whether ``rolled`` has a plan: under spec.rollout; a rollback (or one refused)
    has a rollout status of its own even without it: every cluster at once."""
    return crs.policy is not None or bool(rolled.undo.rolled_back_from) or bool(rolled.refused)


async def _after_write(
    ctx: CRSContext, crs: CRS, rolled: RolledOut | None, matching: list[Cluster]
) -> Result:
    """Once the status says so: a rollback that starts is counted (and a refused one
    told). A rollback that starts or ends wakes the clusters: they take another
    revision."""
    before = crs.status.rollout.rolled_back_from if crs.status.rollout else None
    back = rolled.undo.rolled_back_from if rolled is not None else None
    if back is not None and back != before:
        trigger = "OnFailure" if ctx.rollouts.because(crs.namespace, crs.name) else "Manual"
        metrics.ROLLBACKS.labels(trigger).inc()
    then = NOTHING
    if back != before:
        then = Result.waking(*(Wake(cluster_key(crs.namespace, c.name)) for c in matching))
    told = crs.status.rollout.message if crs.status.rollout else ""
    if rolled is not None and rolled.refused is not None and rolled.refused not in told:
        await ctx.events.emit(crs, "Warning", "RollbackRefused", rolled.refused)
    return then


def _show_fleet(
    ctx: CRSContext, crs: CRS, own: list[Cluster], rolled: RolledOut | None, planned: bool
) -> None:
    """The fleet gauges: each matching cluster this process contributes for, its state
    as ``status`` and the fleet page tell it (on the revision or not, as they count
    it). Without a rollout ``planned`` (the status has none), the rollout gauges show
    none either."""
    if not planned:
        fleet_metrics.clear_rollout(crs.namespace, crs.name)
    now = None if rolled is None else rolled.hashes
    target = None if rolled is None else rolled.target
    states = []
    for cluster in own:
        entry = ctx.caches.entry(crs.namespace, cluster.name, crs.name)
        revision = None if target is None else on_revision(crs, entry, now)
        states.append((entry, None if revision is None else revision == target))
    fleet_metrics.show_fleet(crs.namespace, crs.name, states)


def _log_status(crs: CRS, status: ClusterResourceSetStatus) -> None:
    ready = next(c for c in status.conditions if c.type == READY)
    log.info(
        "status updated",
        crs=f"{crs.namespace}/{crs.name}",
        ready=ready.status,
        reason=ready.reason,
        matching=status.matching_clusters,
        applied=status.applied_clusters,
        failed=status.failed_clusters,
    )


def _status(
    ctx: CRSContext,
    crs: CRS,
    whole: Combined,
    problems: list[Problem],
    made: Plan | None,
    rolled: RolledOut | None,
) -> ClusterResourceSetStatus:
    """From the bindings (as the members' contributions count them), not from what
    this process did: any replica computes the same status, also right after a
    restart. A cluster with no outcome recorded yet counts as not applied, and holds
    observedGeneration back."""
    when = ctx.clock.wall()
    status = status_of(
        whole.tally,
        generation=crs.generation,
        resource_problems=problems,
        previous=crs.status,
        now=when,
        rollout=None if made is None else (made.phase, made.message),
    )
    back = None if rolled is None else rolled.undo.rolled_back_from
    status.rollout = None if made is None else rollout_status(made, back)
    if status.rollout is not None and rolled is not None and rolled.refused is not None:
        status.rollout.message += f"; rollback refused: {rolled.refused}"
    status.revision = None if rolled is None else rolled.target
    status.deletions_skipped = list(whole.skipped) or None
    return not_paused(status, crs.status, crs.generation, when)


async def _tell_rollout(
    ctx: CRSContext,
    crs: CRS,
    planned: tuple[str, Plan],
    previous: tuple[str, Plan] | None,
    states: list[ClusterState],
) -> None:
    """Events a person can follow: started, step done, soaking, a new phase (awaiting
        approval, paused, halted, complete). Told from the plan before ``made`` as this
        process made it, never from the status it wrote: right after a restart (or on a
        new leader) there is none, and nothing is told until the next change, which the
        status shows meanwhile. Each names the clusters it is about (``concerned``) of those
    this process contributes for (``states``)."""
    if previous is None:
        return
    (target, made), (revision, before) = planned, previous
    told: list[tuple[str, str]] = []
    if revision != target and made.phase == "RolledBack":  # back at once
        told.append(("RolloutRolledBack", made.message))
    elif revision != target and made.phase != "Complete":
        told.append(("RolloutStarted", f"rolling out revision {target}"))
        if made.phase == "AwaitingApproval":  # its first step asks at once
            told.append(("RolloutAwaitingApproval", made.message))
    elif before.phase != made.phase:
        told.append((f"Rollout{made.phase}", made.message))
    elif made.step > before.step:
        told.append(("RolloutStepDone", f"step {before.step} done; {made.message}"))
    elif made.soaking and not (before.soaking and before.step == made.step):
        told.append(("RolloutSoaking", made.message))
    about = concerned(states, target, made.phase) if told else []
    # A rollback by itself: the plan's message names the failure it answers.
    for reason, said in told:
        kind: Literal["Normal", "Warning"] = "Warning" if reason == "RolloutHalted" else "Normal"
        await ctx.events.emit(crs, kind, reason, said, clusters=about, revision=target)
