"""How the last pass of one (CRS, cluster) pair ended (``Outcome``, its state and
reason), and which reason a CRS's status tells first (``rank``).

Condition reasons are the ones a user acts on: ``WrongSecretType``,
``ResourceNotFound``, ``InvalidManifest`` (fix the source), ``ApplyFailed`` (look at
the event for the object), ``ClusterUnreachable`` (check the kubeconfig/cluster),
``WaitingForClusters`` (clusters not initialized yet), ``Applied``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "HELD_REASONS",
    "NO_BUILD",
    "REASON_ORDER",
    "WARNING_REASONS",
    "Outcome",
    "State",
    "rank",
]

# Progressing: held back by the CRS's rollout (its step has not come yet).
# Waiting: held back by a CRS it depends on, not applied or Ready on the cluster yet,
# or (its resources that follow the Kubernetes version) by a version not known yet or
# one none of them is for.
State = Literal["Applied", "Failed", "Pending", "Progressing", "Waiting"]
# A cluster whose Kubernetes version none of a CRS's version-matched resources is for
# keeps what it has of them (state Waiting, Ready False, a Warning Event).
NO_BUILD = "NoResourceForVersion"
# Outcomes told as a Warning Event although their state is not Failed.
WARNING_REASONS = frozenset({NO_BUILD})
# Held back from a new revision (state Progressing, keeping what it has): by the
# rollout's step, outside its change windows, by the cluster itself, by the
# fleet-wide budget of clusters updating at once, or while Cluster API upgrades it.
HELD_REASONS = (
    "Progressing",
    "OutsideWindow",
    "UpdateHeld",
    "BudgetExhausted",
    "UpgradeInProgress",
)
# ResourcesApplied's False reasons, first first: the one that applies first wins,
# whichever cluster it comes from and whatever the clusters are called (SPEC.md:
# source problems, cluster failures, UnresolvedVariable, DependencyNotFound,
# DependencyCycle, RolloutPaused, RolloutHalted, DependencyNotReady, Progressing,
# WaitingForClusters). The rollout's other phases follow its Paused and Halted, the
# other waiting reasons DependencyNotReady, the other held reasons Progressing.
REASON_ORDER = (
    "ResourceNotFound",
    "WrongSecretType",
    "InvalidManifest",
    "ApplyFailed",
    "ClusterUnreachable",
    "UnsupportedKubeconfig",
    "Unhealthy",
    "UnresolvedVariable",
    "DependencyNotFound",
    "DependencyCycle",
    "RolloutPaused",
    "RolloutHalted",
    "AwaitingApproval",
    "RolledBack",
    "DependencyNotReady",
    NO_BUILD,
    "WaitingForVersion",
    *HELD_REASONS,
    "WaitingForClusters",
)
# Any other reason is a cluster failure (ValidationFailed, or one a later release
# records): after those named, before UnresolvedVariable, by name among themselves.
_OTHER_FAILURES = REASON_ORDER.index("Unhealthy")


def rank(reason: str) -> tuple[int, int, str]:
    """Where ``reason`` stands in ``REASON_ORDER``: the lower, the sooner it is told.
    No two reasons rank alike."""
    if reason in REASON_ORDER:
        return (REASON_ORDER.index(reason), 0, "")
    return (_OTHER_FAILURES, 1, reason)


@dataclass(frozen=True)
class Outcome:
    """How the last reconcile of one (CRS, cluster) pair ended. ``ready`` is False
    while an applied cluster waits for its objects to be Ready (healthCheck.wait);
    ``message`` then says which object it waits for, and ``blocker`` names that
    object (``Kind namespace/name``) for the next look to compare with."""

    state: State
    reason: str
    message: str
    generation: int
    ready: bool = True
    # The sources' revision it is for, when a rollout needs to know; on a failure, the
    # revision the pass was taking ("": none, the cluster had it and failed afterwards).
    revision: str = ""
    blocker: str = ""
