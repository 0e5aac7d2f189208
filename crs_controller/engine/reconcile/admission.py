"""The one gate of a CRS on a cluster: may its pass run now, or what holds it back.

Two things can hold a CRS back on one cluster, and both are asked here, in this
order: its dependencies (``core.dependencies``: a CRS it depends on is not done on
this cluster yet, missing, or on a cycle), then its rollout (``core.rollout``: the
sources changed and this cluster's step has not come yet). The answer is a value,
``Go`` or ``Held``, and ``describe`` is the one place a held CRS's outcome is made.

"Done" is read from one source of truth, the cluster's binding: the entries this
pass has recorded so far (a dependency applied earlier in the same pass lets its
dependents go at once), else the ones the binding had. Never from this process's
memory, so a restart or a shard hand-over answers the same. The rollout's plan is
the CRS reconcile's, kept in memory (``memory.plans``) because it is computed there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from crs_controller.core.dependencies import Cycle, Missing, Wait
from crs_controller.core.dependencies import Go as DependenciesDone
from crs_controller.core.dependencies import describe as describe_dependency
from crs_controller.core.models import CRSBinding
from crs_controller.core.objects import CRS, Cluster
from crs_controller.core.status import Outcome, outcome_of
from crs_controller.engine.reconcile.context import ClusterContext
from crs_controller.engine.reconcile.rollout import entry_revision, target_revision

__all__ = ["Admission", "Gate", "Go", "Held", "RolloutStep", "describe"]


@dataclass(frozen=True)
class Go:
    """The pass may run; ``target`` is the revision the rollout lets this cluster
    take (None: the CRS has no rollout, or its revision cannot be read yet)."""

    target: str | None = None


@dataclass(frozen=True)
class RolloutStep:
    """``Progressing``: the sources changed and this cluster's rollout step has not
    come yet; it keeps what it has."""


Hold = Wait | Missing | Cycle | RolloutStep


@dataclass(frozen=True)
class Held:
    """The pass does not run: ``why``, for the CRS at ``generation``."""

    why: Hold
    generation: int

    @property
    def outcome(self) -> Outcome:
        return describe(self)


Admission = Go | Held


def describe(held: Held) -> Outcome:
    """The outcome a held CRS records on the cluster."""
    match held.why:
        case RolloutStep():
            message = "waiting for its rollout step"
            return Outcome("Progressing", "Progressing", message, held.generation)
        case Wait():
            reason, message = describe_dependency(held.why)
            return Outcome("Waiting", reason, message, held.generation)
        case _:
            reason, message = describe_dependency(held.why)
            return Outcome("Failed", reason, message, held.generation)


class Gate:
    """The gate of one cluster's pass. ``recorded`` is the binding's entries as this
    pass writes them (filled in as CRSs are done, in dependency order); ``before``
    the entries the binding had."""

    def __init__(
        self,
        ctx: ClusterContext,
        cluster: Cluster,
        before: Mapping[str, CRSBinding],
        recorded: Mapping[str, CRSBinding],
    ) -> None:
        self._ctx = ctx
        self._cluster = cluster
        # Built once per change of the namespace's CRSs; each answer is then
        # O(dependencies), worked out once per pass.
        graph = ctx.caches.dependencies(cluster.namespace)
        self._dependencies = graph.gates(*_questions(ctx, cluster, before, recorded))

    async def admit(self, crs: CRS, entry: CRSBinding | None) -> Admission:
        """May ``crs`` run its pass on this cluster now? ``entry`` is its binding
        entry before this pass."""
        if crs.valid.spec.depends_on:
            decided = self._dependencies(crs.name)
            if not isinstance(decided, DependenciesDone):
                return Held(decided, crs.generation)
        if crs.valid.spec.rollout is None:
            return Go()
        target = await target_revision(self._ctx, crs)
        if target is not None and self._rollout_holds(crs, entry, target):
            return Held(RolloutStep(), crs.generation)
        return Go(target)

    def _rollout_holds(self, crs: CRS, entry: CRSBinding | None, target: str) -> bool:
        """Never a first install, nor a cluster already on the revision (retries,
        drift and health checks go on there); else only once the plan admits it."""
        on = entry_revision(crs, entry)
        if on is None or on == target:
            return False
        admitted = self._ctx.rollouts.admitted
        return not admitted(crs.namespace, crs.name, self._cluster.name, target)


def _questions(
    ctx: ClusterContext,
    cluster: Cluster,
    before: Mapping[str, CRSBinding],
    recorded: Mapping[str, CRSBinding],
) -> tuple[Callable[[str], bool], Callable[[str], bool]]:
    """What the dependency gate asks about this cluster: does CRS ``name`` select
    it, and is it done there (applied at its generation, and Ready), as the binding
    records it."""

    def selects(name: str) -> bool:
        other = ctx.caches.crs(cluster.namespace, name)
        return other is not None and other.selects(cluster)

    def done(name: str) -> bool:
        other = ctx.caches.crs(cluster.namespace, name)
        outcome = outcome_of(recorded.get(name) or before.get(name))
        return (
            other is not None
            and outcome is not None
            and outcome.state == "Applied"
            and outcome.ready
            and outcome.generation == other.generation
        )

    return selects, done
