"""Rollouts seen from the engine: the revision of a CRS's sources and the one each
cluster is on, and the plan the CRS reconcile makes from them (``core.rollout.plan``)
for the cluster reconciles to follow (``engine.rollouts``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from crs_controller.core.api.models import CRSBinding, RolloutStatus
from crs_controller.core.render import source_hash
from crs_controller.core.rollout import shares
from crs_controller.core.rollout.history import Undo, failure_in, failure_note
from crs_controller.core.rollout.plan import (
    Gate,
    Plan,
    admit,
    halted_of,
    later,
    planned,
    revision,
)
from crs_controller.core.rollout.policy import Policy
from crs_controller.core.rollout.shares import ClusterState, Share, share_of
from crs_controller.core.rollout.snapshots import SnapshotRefused
from crs_controller.core.spec.objects import CRS, Cluster
from crs_controller.core.state.contribution import Combined
from crs_controller.core.state.status import Outcome, outcome_of
from crs_controller.engine.io import fleet_metrics
from crs_controller.engine.io.sources import Source
from crs_controller.engine.reconcile.context import ClusterContext, CRSContext
from crs_controller.engine.reconcile.result import Result

Hashes = Mapping[tuple[str, str], str]  # (kind, name) -> a source's hash now
Key = tuple[str, str]  # kind, name of a source


@dataclass(frozen=True)
class RolledOut:
    """What a CRS rolls out now: ``undo`` says the target (and the sources' revision a
    rollback replaces), ``hashes`` are the target's sources' hashes, ``snapshot`` its
    sources when they come from a snapshot (None: the sources as they are), and
    ``refused`` why a rollback asked for could not be used: its snapshot (it is
    ``held`` then), or a request to a revision not in the history (``Undo.refused``:
    refused, never held). ``current`` are the sources as they are, as loaded when
    their revision (``sources``) was hashed: what that revision's snapshot is written
    from."""

    undo: Undo
    hashes: Hashes
    snapshot: Mapping[Key, Source] | None = None
    refused: str | None = None
    current: Mapping[Key, Source] = field(kw_only=True)

    @property
    def target(self) -> str:
        return self.undo.target

    @property
    def sources(self) -> str:
        """The revision of the sources as they are."""
        return self.undo.rolled_back_from or self.undo.target

    @property
    def held(self) -> bool:
        """A rollback in force whose snapshot cannot be read here (not in this
        process's watch yet, deleted, refused): its clusters are held, nothing
        admitted, first installs neither, and the revision rolled back from is never
        applied in its place; ``hashes`` are then the sources', for counting alone."""
        return self.undo.rolled_back_from is not None and self.snapshot is None


async def rolled_out(ctx: ClusterContext | CRSContext, crs: CRS) -> RolledOut | None:
    """What ``crs`` rolls out now (None while a source cannot be read): its sources,
    or the snapshot of the revision a rollback in force returns to."""
    current = await current_sources(ctx, crs)
    if current is None:
        return None
    live = {key: source.hash for key, source in current.items()}
    return await roll_to(ctx, crs, crs.undo(revision_of(live)), live, current)


async def roll_to(
    ctx: ClusterContext | CRSContext,
    crs: CRS,
    undo: Undo,
    live: Hashes,
    current: Mapping[Key, Source],
) -> RolledOut:
    """``undo`` with its snapshot read and checked; a snapshot refused keeps the
    rollback, ``held`` (saying why), with the hashes of the sources as they are
    (``current``, hashed to ``live``): never the revision rolled back from instead.
    A request ``undo`` refused is said too (``refused``)."""
    if undo.rolled_back_from is None:
        return RolledOut(undo, live, refused=undo.refused, current=current)
    try:
        snapshot = await ctx.snapshots.sources_of(crs, undo.target)
    except SnapshotRefused as exc:
        return RolledOut(undo, live, refused=str(exc), current=current)
    hashes = {key: source.hash for key, source in snapshot.items()}
    return RolledOut(undo, hashes, snapshot, refused=undo.refused, current=current)


async def current_sources(ctx: ClusterContext | CRSContext, crs: CRS) -> dict[Key, Source] | None:
    """Each source as it is now, in spec order (None while one cannot be read)."""
    current: dict[Key, Source] = {}
    for ref in crs.valid.spec.resources:
        source = await ctx.sources.load(crs.namespace, ref)
        if source.error is not None:
            return None
        current[(ref.kind, ref.name)] = source
    return current


async def source_hashes(ctx: ClusterContext | CRSContext, crs: CRS) -> Hashes | None:
    """Each source's hash now, in spec order (None while one cannot be read)."""
    current = await current_sources(ctx, crs)
    return None if current is None else {key: s.hash for key, s in current.items()}


def revision_of(hashes: Hashes) -> str:
    return revision([(kind, name, digest) for (kind, name), digest in hashes.items()])


def entry_revision(crs: CRS, entry: CRSBinding | None, now: Hashes | None = None) -> str | None:
    """The revision a cluster is on, from the hashes its binding recorded; None when
    nothing was ever applied there (a first install). A resource that follows the
    Kubernetes version and is not in the binding (outside its range there, or the
    version is not known yet) is taken as on its source's hash ``now``: it has nothing
    to take, so it never keeps the cluster off the revision."""
    if entry is None or not any(r.objects or r.applied for r in entry.resources):
        return None
    # A substituted resource records its source's hash and the values it used.
    recorded_ = {(r.kind, r.name): source_hash(r.hash) for r in entry.resources}
    parts = []
    for index, ref in enumerate(crs.valid.spec.resources):
        key = (ref.kind, ref.name)
        on = recorded_.get(key)
        if on is None and now is not None and crs.version_range(index) is not None:
            on = now.get(key)
        parts.append((ref.kind, ref.name, on or ""))
    return revision(parts)


def on_revision(crs: CRS, entry: CRSBinding | None, now: Hashes | None = None) -> str | None:
    """The revision a cluster is on for its rollout: the one a failed pass was taking,
    as its binding's outcome records it (what it has of it may be partly applied; it
    is retried there), else the one its hashes make (``entry_revision``)."""
    outcome = outcome_of(entry)
    if outcome is not None and outcome.state == "Failed" and outcome.revision:
        return outcome.revision
    return entry_revision(crs, entry, now)


def taking(
    ctx: ClusterContext,
    crs: CRS,
    entry: CRSBinding | None,
    rolled: RolledOut,
    *,
    admitted: bool = True,
) -> str:
    """The revision a failed pass of ``crs`` was taking on a cluster whose binding had
    ``entry`` before it ("": none), which its rollout counts the failure against: the
    target, unless this is a first install (nothing applied yet), an update the pass
    was not ``admitted`` to, or the cluster had the target (on it, done or failed
    since) and its rollout is complete (or not planned here yet): the failure is then
    the cluster's alone."""
    if entry_revision(crs, entry, rolled.hashes) is None:
        return ""
    target = rolled.target
    if on_revision(crs, entry, rolled.hashes) != target:
        return target if admitted else ""
    outcome = outcome_of(entry)
    had = outcome is not None and (
        (outcome.state == "Applied" and outcome.ready)
        or (outcome.state == "Failed" and not outcome.revision)
    )
    made = ctx.rollouts.plan(crs.namespace, crs.name)
    going = made is not None and made[0] == target and made[1].phase not in _OVER
    return target if going or not had else ""


_OVER = ("Complete", "RolledBack")


def plan_rollout(
    ctx: CRSContext, crs: CRS, rolled: RolledOut, whole: Combined, own: list[ClusterState]
) -> tuple[Plan, Result]:
    """Plan what ``crs`` rolls out from the share of every matching cluster
    (``whole``, the members' contributions combined), letting through the clusters of
    ``own`` (this process's, as ``share_for`` counted them) within its part of the
    budget; the plan is kept for the cluster reconciles, and the clusters it newly
    admits are woken as it is (memory/plans), whatever the rest of the pass does. The
    Result wakes this CRS when time alone changes the plan (a soak's end, a change
    window opening or closing). A rollback's clusters on the revision rolled back
    from go first; a rollback ``held`` here admits none of them."""
    target, back = rolled.target, rolled.undo.rolled_back_from
    made, gate = whole_plan(ctx, crs, whole)
    made = admit(made, gate, own, whole.admissions(gate, ctx.combining.me))
    if rolled.held:
        made = replace(made, admit=frozenset(), validate=frozenset())
    if back is not None:
        made = rolling_back(made, back, target, failure_of(ctx, crs, back))
    # Those it holds back look again too when what it waits for changed.
    behind = {s.name for s in own if s.revision not in (None, target)}
    ctx.rollouts.set(crs.namespace, crs.name, target, made, behind)
    on = Counter(state.revision or fleet_metrics.NOT_INSTALLED for state in own)
    known = _known(ctx, crs)
    fleet_metrics.show_rollout(crs.namespace, crs.name, on, made.phase, (target, back), known)
    return made, Result.after(made.wake_after)


def whole_plan(ctx: CRSContext, crs: CRS, whole: Combined) -> tuple[Plan, Gate]:
    """The plan every matching cluster makes (``whole``: the members' shares
    combined, ``halting``), naming none of them yet, and its gate."""
    if whole.share is None:
        raise ValueError("a rollout is planned from a share")
    policy, target = crs.policy or Policy(), whole.share.target
    return planned(whole.share, policy, ctx.clock.wall(), crs.approved(target))


def halting(ctx: CRSContext, crs: CRS, whole: Combined) -> Combined:
    """``whole`` with the revision whose clusters take the target first: the one a
    rollback in force returns from (each member's share has it already, from the
    status), else the one a member saw halt last (``Combined.halted``: each carries
    its memory in its contribution, so all of them plan from the same one; alone,
    this process's), else the one the clusters of every member halt (``halted_of``
    their shares combined). Never from a member's own clusters alone: its shares
    would be unlike the others' for ever."""
    share = whole.share
    if share is None or share.halted is not None:
        return whole
    halted = whole.halted or halted_of(share, crs.policy or Policy())
    if halted is None or halted == share.target:
        return whole
    return replace(whole, share=shares.combine([replace(share, halted=halted)]))


def _known(ctx: CRSContext, crs: CRS) -> set[str | None]:
    """The revisions of ``crs`` the controller computed besides its target: those its
    status's history keeps, and the one its rollout halted on. A binding's (which a
    tenant can write) may name any other text."""
    kept = {record.revision for record in crs.status.history or ()}
    return kept | {ctx.rollouts.halted(crs.namespace, crs.name)}


def concerned(states: list[ClusterState], target: str, phase: str) -> list[str]:
    """The clusters an Event about the rollout's ``phase`` is about, of ``states``:
    those failed on ``target`` when it halted, those on it when complete, else those
    not on it yet."""
    if phase == "Halted":
        return [s.name for s in states if s.failed and s.revision == target]
    if phase in ("Complete", "RolledBack"):
        return [s.name for s in states if s.revision == target]
    return [s.name for s in states if s.revision != target]


def _states_of(
    ctx: CRSContext, crs: CRS, target: str, clusters: list[Cluster], hashes: Hashes | None
) -> list[ClusterState]:
    """What each of ``clusters`` is on in the rollout of ``target``, from its binding."""
    return [
        _state(crs, ctx.caches.entry(crs.namespace, c.name, crs.name), c, target, hashes)
        for c in clusters
    ]


def share_for(
    ctx: CRSContext, crs: CRS, rolled: RolledOut, clusters: list[Cluster]
) -> tuple[Share, list[ClusterState]]:
    """The share of ``clusters`` in the rollout of what ``crs`` rolls out, and their
    states; its halted revision is the one a rollback in force returns from (the
    others are found once the members' shares are combined: ``halting``). Without
    ``spec.rollout`` (a rollback), every cluster at once. A Cluster being deleted
    has left the rollout: it takes no revision any more (its passes only clean up),
    so it is in no step, counts toward neither ``maxConcurrent`` nor ``maxFailures``
    (a failure of its own no longer halts), and is never admitted, however long
    finalizers keep it."""
    staying = [c for c in clusters if not c.deleting]
    states = _states_of(ctx, crs, rolled.target, staying, rolled.hashes)
    halted = rolled.undo.rolled_back_from
    return share_of(rolled.target, states, crs.policy or Policy(), halted), states


def failure_of(ctx: CRSContext, crs: CRS, back: str) -> str | None:
    """The failure a rollback by itself from ``back`` answers: as this process saw it
    halt, else (a restart, a new leader) as the status's rollout message kept it.
    None: a rollback by hand."""
    kept = crs.status.rollout.message if crs.status.rollout is not None else None
    return ctx.rollouts.because(crs.namespace, crs.name) or failure_in(kept, back)


def rolling_back(made: Plan, back: str, target: str, because: str | None = None) -> Plan:
    """The plan of a rollback: RolledBack once its clusters are back, naming the
    revision rolled back from and the failure it answers (``because``), if any."""
    note = failure_note(back, because)
    if made.phase != "Complete":
        return replace(made, message=f"rolling back from {back}: {made.message}{note}")
    message = f"rolled back from {back} to {target}{note}"
    return replace(made, phase="RolledBack", message=message)


def _state(
    crs: CRS, entry: CRSBinding | None, cluster: Cluster, target: str, hashes: Hashes | None
) -> ClusterState:
    """From the binding alone, so every replica plans the same rollout. ``failed``: the
    last pass failed taking the revision the cluster is on; a cluster that failed after
    it had that revision (no revision recorded with the failure) is done there."""
    on = on_revision(crs, entry, hashes)
    outcome = outcome_of(entry) or Outcome("Pending", "Pending", "", 0)
    failed = outcome.state == "Failed" and bool(outcome.revision)
    alone = outcome.state == "Failed" and not outcome.revision
    done = on == target and ((outcome.state == "Applied" and outcome.ready) or alone)
    since = None if entry is None or entry.outcome is None else entry.outcome.time
    check = None if entry is None else entry.validation
    validated = check is not None and check.revision == target and check.phase == "Succeeded"
    if validated and check is not None and check.finished is not None:
        since = check.finished  # a validated step soaks from the validation's end
    if since is not None:
        # Recorded to the whole second: count a soak from the next one, so that it
        # never ends early.
        since = later(since, 1)
    labels = dict(cluster.meta.labels)
    return ClusterState(
        cluster.name, labels, on, done, failed, since, cluster.holds_updates, validated
    )


def rollout_status(made: Plan, rolled_back_from: str | None = None) -> RolloutStatus:
    return RolloutStatus(
        rolled_back_from=rolled_back_from,
        phase=made.phase,
        step=made.step,
        updated_clusters=made.updated,
        message=made.message,
        held_clusters=made.held or None,
        waiting_for=made.waiting_for,
        next_window=made.next_window,
    )
