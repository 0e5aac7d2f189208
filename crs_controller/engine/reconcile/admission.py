"""The one gate of a CRS on a cluster: may its pass run now, or what holds it back.

Five things can hold a CRS back on one cluster, and all are asked here, in this
order: its dependencies (``core.values.dependencies``: a CRS it depends on is not done on
this cluster yet, missing, or on a cycle); a rollback in force whose snapshot this
process cannot read (``RolledOut.held``: nothing runs, a first install neither, and
never the revision rolled back from instead); then, for a new revision on a cluster
that has the CRS installed, the cluster itself (annotation
``addons.crs.dev/hold-updates``), the CRS's rollout (``core.rollout.plan``: this
cluster's step has not come yet, the change windows are closed, the step awaits
approval), and the fleet-wide budget of clusters updating at once
(``memory.budget``). A first install is never held by the last three. The answer
is a value, ``Go`` or ``Held``, and ``describe`` is the one place a held CRS's
outcome is made. A held pass records it unless the outcome before says more: a
cluster whose failed pass was taking the revision its rollout rolls out keeps that
failure while its retry is held by what lifts on its own (a CRS it depends on not
done yet, its rollout, a hold, the budget, a rollback it cannot read), so its
rollout still counts it failed (a halted rollout stays halted until the failure is
cured or the operator acts); a dependency missing or on a cycle records its own
failure, with the same revision, so it is counted the same (and once that no longer
holds, whatever holds the retry then says its own, with the revision). The sources are read
only once the dependencies let the pass go, or to find that revision for a pass
they hold: a read failing then changes nothing, the pass waits as it would.

"Done" is read from one source of truth, the cluster's binding, through the pass's
scope (``reconcile.scope``): the entry this pass has recorded so far (a dependency
applied earlier in the same pass lets its dependents go at once), else the one the
binding had. Never from this process's
memory, so a restart or a shard hand-over answers the same. The rollout's plan is
the CRS reconcile's, kept in memory (``memory.plans``) because it is computed there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from crs_controller.core.api.models import CRSBinding
from crs_controller.core.errors import APIError
from crs_controller.core.spec.objects import CRS
from crs_controller.core.state.status import HELD_REASONS, Outcome, outcome_of
from crs_controller.core.values.dependencies import Cycle, Missing, Wait
from crs_controller.core.values.dependencies import Go as DependenciesDone
from crs_controller.core.values.dependencies import describe as describe_dependency
from crs_controller.engine.reconcile.rollout import RolledOut, entry_revision, on_revision
from crs_controller.engine.reconcile.scope import ClusterScope

__all__ = [
    "Admission",
    "BudgetExhausted",
    "Gate",
    "Go",
    "Held",
    "RollbackHeld",
    "RolloutStep",
    "UpdateHeld",
    "describe",
]


@dataclass(frozen=True)
class Go:
    """The pass may run; ``target`` is the revision the rollout lets this cluster
    take (None: the CRS has no rollout, or its revision cannot be read yet), and
    ``validate`` says the plan asks this cluster to run its step's validation."""

    target: str | None = None
    validate: bool = False
    # The sources' revision could not be read, so whether this is an update the rollout,
    # a hold or the budget would keep back is unknown: installed resources whose content
    # changed keep what they have in this pass (a retry decides).
    keep_installed: bool = False


@dataclass(frozen=True)
class RolloutStep:
    """The sources changed and the rollout does not let this cluster take them yet
    (``waiting_for``: what the rollout waits for, as the plan says); it keeps what
    it has. ``planned`` is False while the CRS reconcile has not planned this
    revision yet (a restart, a new leader, a revision just seen): what the rollout
    waits for is not known, so the cluster keeps the outcome it recorded until the
    plan wakes it."""

    waiting_for: str | None = None
    planned: bool = True


@dataclass(frozen=True)
class RollbackHeld:
    """A rollback to ``target`` is in force and its snapshot cannot be read here
    (``why``): the cluster keeps what it has until it can."""

    target: str
    why: str


@dataclass(frozen=True)
class UpdateHeld:
    """The cluster holds updates (annotation ``addons.crs.dev/hold-updates``)."""


@dataclass(frozen=True)
class BudgetExhausted:
    """As many clusters as ``run --max-updating-clusters`` allows are updating."""

    limit: int


Hold = Wait | Missing | Cycle | RollbackHeld | RolloutStep | UpdateHeld | BudgetExhausted


@dataclass(frozen=True)
class Held:
    """The pass does not run: ``why``, for the CRS at ``generation``; ``retrying`` is
    the revision whose retry it holds, the one its rollout rolls out, on a cluster
    whose last pass failed taking it ("": none), whatever holds it."""

    why: Hold
    generation: int
    retrying: str = ""

    def outcome(self, recorded: CRSBinding | None) -> Outcome:
        """The outcome to record, ``recorded`` being the CRS's entry before the pass:
        a hold whose plan is not known yet keeps the recorded outcome, so a restart
        rewrites no binding of a cluster waiting for its step; a held retry keeps the
        failure it retries (``keeps``). A dependency missing or on a cycle, which
        lifts only when the operator acts, says so instead, failed taking the same
        revision: its rollout still counts it failed. What such a hold recorded (or a
        hold after it) is never kept: it is no failure of the retry's own, and may no
        longer be true (a dependency back but not done yet is no longer missing), so
        the hold holding the retry now says what it is, failed taking the revision."""
        kept = outcome_of(recorded)
        if kept is not None and isinstance(self.why, RolloutStep) and not self.why.planned:
            return kept
        if kept is not None and self.keeps(kept):
            if isinstance(self.why, Missing | Cycle) or kept.reason in _HOLDS_OWN:
                return replace(describe(self), state="Failed", revision=kept.revision)
            return replace(kept, generation=self.generation)
        return describe(self)

    def keeps(self, recorded: Outcome | None) -> bool:
        """Does the pass keep ``recorded``, the failure of taking the revision whose
        retry this holds, whatever holds it (its rollout, a hold, the budget, a CRS it
        depends on, a rollback it cannot read; a dependency missing or on a cycle keeps
        the revision alone, see ``outcome``)? Waiting, the cluster has not stopped
        failing that revision: recorded as held instead, its rollout would count it
        failed no more, and a halted rollout would go on until the retry failed again."""
        return (
            bool(self.retrying)
            and recorded is not None
            and recorded.state == "Failed"
            and recorded.revision == self.retrying
        )

    def hold(self, recorded: CRSBinding | None) -> Outcome | None:
        """The hold's own outcome when the pass records another (a failure it
        keeps): what the fleet-wide budget goes by, as it waits or gives a place back."""
        return describe(self) if self.keeps(outcome_of(recorded)) else None


# The reasons a hold records over a held retry's failure (``Held.outcome``).
_HOLDS_OWN = frozenset(
    {"DependencyNotFound", "DependencyCycle", "DependencyNotReady", *HELD_REASONS}
)

Admission = Go | Held
Question = Callable[[str], bool]


def describe(held: Held) -> Outcome:
    """The outcome a held CRS records on the cluster."""
    generation = held.generation
    match held.why:
        case RolloutStep(waiting_for="Window"):
            message = "outside the change windows of its rollout"
            return Outcome("Progressing", "OutsideWindow", message, generation)
        case RolloutStep(waiting_for="Approval"):
            message = "waiting for its rollout step to be approved"
            return Outcome("Progressing", "Progressing", message, generation)
        case RolloutStep():
            message = "waiting for its rollout step"
            return Outcome("Progressing", "Progressing", message, generation)
        case RollbackHeld(target=target, why=why):
            message = f"held by its rollback to {target}: {why}"
            return Outcome("Progressing", "Progressing", message, generation)
        case UpdateHeld():
            message = "the cluster holds updates (addons.crs.dev/hold-updates)"
            return Outcome("Progressing", "UpdateHeld", message, generation)
        case BudgetExhausted(limit=limit):
            message = f"waiting for one of the {limit} places of clusters updating at once"
            return Outcome("Progressing", "BudgetExhausted", message, generation)
        case Wait():
            reason, message = describe_dependency(held.why)
            return Outcome("Waiting", reason, message, held.generation)
        case _:
            reason, message = describe_dependency(held.why)
            return Outcome("Failed", reason, message, held.generation)


class Gate:
    """The gate of one cluster's pass: what it knows of the cluster, it reads from
    the pass's scope."""

    def __init__(self, scope: ClusterScope) -> None:
        self._scope = scope
        # Built once per change of the namespace's CRSs; each answer is then
        # O(dependencies), worked out once per pass.
        graph = scope.ctx.caches.dependencies(scope.cluster.namespace)
        self._dependencies = graph.gates(*_questions(scope))

    async def admit(self, crs: CRS) -> Admission:
        """May ``crs`` run its pass on this cluster now? Whatever holds it, a held
        retry of the revision the cluster failed taking keeps that failure as its
        outcome (``Held.retrying``)."""
        scope = self._scope
        ctx, cluster, entry = scope.ctx, scope.cluster, scope.before(crs.name)
        if (waits := self._dependency(crs)) is not None:
            return Held(waits, crs.generation, await self._retrying_unread(crs, entry))
        rolled = await scope.rolled(crs)  # once per pass: the pair reads it too
        retrying = _retrying(entry, rolled)
        if rolled is not None and rolled.held:
            return Held(RollbackHeld(rolled.target, rolled.refused or ""), crs.generation, retrying)
        limit = ctx.settings.max_updating_clusters
        if crs.policy is None and not cluster.holds_updates and limit is None:
            return Go()
        if rolled is None:
            return Go(keep_installed=entry_revision(crs, entry) is not None)
        now, target = rolled.hashes, rolled.target
        rollout_target = target if crs.policy is not None else None
        on = on_revision(crs, entry, now)
        if on is None or on == target:
            # A first install, or a cluster on the revision: retries, drift and
            # health checks go on there, and its step's validation. One whose failed
            # pass was taking it, and has not all of it, is still updating: its retry
            # passes the same gates as an update (the hold, its rollout's admission:
            # steps, change windows, approvals; and its budget place).
            partly = on is not None and entry_revision(crs, entry, now) != target
            if partly and (why := self._update_held(crs, target, limit)) is not None:
                return Held(why, crs.generation, retrying)
            validate = ctx.rollouts.validating(crs.namespace, crs.name, cluster.name, target)
            return Go(rollout_target, validate)
        why = self._update_held(crs, target, limit)
        return Go(rollout_target) if why is None else Held(why, crs.generation, retrying)

    def _dependency(self, crs: CRS) -> Hold | None:
        """What holds every pass of ``crs`` here, a first install too, before anything
        is read: a CRS it depends on that is not done (or missing, or on a cycle)."""
        if crs.valid.spec.depends_on:
            decided = self._dependencies(crs.name)
            if not isinstance(decided, DependenciesDone):
                return decided
        return None

    async def _retrying_unread(self, crs: CRS, entry: CRSBinding | None) -> str:
        """``_retrying`` for a pass a dependency holds: the sources are read only when
        the cluster's last pass failed taking a revision. A read that fails (the API
        server erring, refusing, slow) says nothing new, so the failure recorded stays
        as it is, and the pass waits quietly: the dependency holds it either way."""
        outcome = outcome_of(entry)
        if outcome is None or outcome.state != "Failed" or not outcome.revision:
            return ""
        try:
            rolled = await self._scope.rolled(crs)
        except APIError:
            return outcome.revision
        return _retrying(entry, rolled)

    def _update_held(self, crs: CRS, target: str, limit: int | None) -> Hold | None:
        """What holds a new revision back on this cluster, which has the CRS."""
        scope = self._scope
        ctx, cluster, ns = scope.ctx, scope.cluster, crs.namespace
        if cluster.holds_updates:
            return UpdateHeld()
        if crs.policy is not None and not ctx.rollouts.admitted(ns, crs.name, cluster.name, target):
            planned = ctx.rollouts.planned(ns, crs.name, target)
            return RolloutStep(ctx.rollouts.waiting_for(ns, crs.name, target), planned)
        if limit is not None and not scope.ask_budget(crs.name, self._step(crs)):
            return BudgetExhausted(limit)
        return None

    def _step(self, crs: CRS) -> int:
        """The rollout step the cluster's update of ``crs`` is at (1 without a plan):
        the budget's line is ordered by it."""
        if crs.policy is None:
            return 1
        made = self._scope.ctx.rollouts.plan(crs.namespace, crs.name)
        return made[1].step if made is not None else 1


def _retrying(entry: CRSBinding | None, rolled: RolledOut | None) -> str:
    """The revision whose retry a held pass holds: the one its rollout rolls out, if
    the cluster's last pass failed taking it ("": none)."""
    outcome = outcome_of(entry)
    if rolled is None or outcome is None or outcome.state != "Failed":
        return ""
    return rolled.target if outcome.revision == rolled.target else ""


def _questions(scope: ClusterScope) -> tuple[Question, Question, Question]:
    """What the dependency gate asks about this cluster: does CRS ``name`` select
    it, is it done there (applied at its generation, and Ready), as the binding
    records it, and is its spec one the controller refuses (it selects nothing it
    could say, so it is waited for wherever its dependents go)."""
    ctx, cluster = scope.ctx, scope.cluster

    def selects(name: str) -> bool:
        other = ctx.caches.crs(cluster.namespace, name)
        return other is not None and other.selects(cluster)

    def done(name: str) -> bool:
        other = ctx.caches.crs(cluster.namespace, name)
        outcome = outcome_of(scope.recorded(name))
        return (
            other is not None
            and outcome is not None
            and outcome.state == "Applied"
            and outcome.ready
            and outcome.generation == other.generation
        )

    def refused(name: str) -> bool:
        other = ctx.caches.crs(cluster.namespace, name)
        return other is not None and other.model is None

    return selects, done, refused
