"""Pure status decisions: per-cluster outcomes folded into a CRS's status.

Which reason is told first is ``reasons.rank``'s order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, TypeVar

from crs_controller.core.api.clusters import PAUSED_ANNOTATION
from crs_controller.core.api.models import (
    MESSAGE_LIMIT,
    BindingOutcome,
    ClusterResourceSetStatus,
    Condition,
    ConditionStatus,
    CRSBinding,
    rfc3339,
)
from crs_controller.core.state.reasons import (
    HELD_REASONS,
    NO_BUILD,
    REASON_ORDER,
    WARNING_REASONS,
    Outcome,
    State,
    rank,
)
from crs_controller.core.text import safe

__all__ = [
    "HELD_REASONS",
    "NO_BUILD",
    "PAUSED",
    "PAUSED_MESSAGE",
    "READY",
    "REASON_ORDER",
    "RESOURCES_APPLIED",
    "ROLLOUT_REASONS",
    "WARNING_REASONS",
    "Outcome",
    "Problem",
    "State",
    "invalid_spec",
    "new_problem",
    "not_paused",
    "outcome_of",
    "paused",
    "rank",
    "recorded_reason",
    "summarize",
]

RESOURCES_APPLIED = "ResourcesApplied"
READY = "Ready"
# Cluster API v1beta2's condition for paused objects: True (reason Paused) while the
# CRS has the cluster.x-k8s.io/paused annotation, else False (reason NotPaused).
PAUSED = "Paused"
PAUSED_MESSAGE = (
    f"annotation {PAUSED_ANNOTATION} is set: nothing is applied, checked or deleted "
    "for this ClusterResourceSet until it is removed"
)

_T = TypeVar("_T")

# ResourcesApplied's reason while clusters are held back, by the rollout's phase.
ROLLOUT_REASONS = {
    "Paused": "RolloutPaused",
    "Halted": "RolloutHalted",
    "AwaitingApproval": "AwaitingApproval",
    "RolledBack": "RolledBack",
}


def _first(pairs: Sequence[tuple[str, _T]], reason: Callable[[_T], str]) -> tuple[str, _T]:
    """The pair whose reason ranks first; of those, the first given (cluster order)."""
    return min(pairs, key=lambda pair: rank(reason(pair[1])))


def recorded_reason(outcome: Outcome) -> tuple[str, bool | None]:
    """How the binding records an outcome: (reason, ready). Pending until the cluster
    can be contacted; Applied with ready False while everything is applied and its
    objects are not Ready yet; else its own reason (Progressing: held by the rollout,
    only that)."""
    if outcome.state == "Pending":
        return "Pending", None
    if outcome.state == "Applied" and not outcome.ready:
        return "Applied", False
    return outcome.reason, None


def outcome_of(entry: CRSBinding | None) -> Outcome | None:
    """The outcome a binding entry records (the inverse of ``recorded_reason``), so a
    status can be computed from bindings alone; None when it records none."""
    recorded = entry.outcome if entry is not None else None
    if recorded is None:
        return None
    return _from_record(recorded)


def _from_record(recorded: BindingOutcome) -> Outcome:
    reason, message = recorded.reason, recorded.message
    generation = recorded.observed_generation or 0
    match reason:
        case "Applied":
            return Outcome(
                "Applied", reason, message, generation, ready=recorded.ready is not False
            )
        case "Progressing" if recorded.ready is False:
            # As earlier releases recorded applied-but-not-Ready.
            return Outcome("Applied", "Applied", message, generation, ready=False)
        case _ if reason in HELD_REASONS:
            return Outcome("Progressing", reason, message, generation)
        case "Pending":
            return Outcome("Pending", "WaitingForCluster", message, generation)
        case "DependencyNotReady" | "WaitingForVersion" | "NoResourceForVersion":
            return Outcome("Waiting", reason, message, generation)
        case _:
            return Outcome("Failed", reason, message, generation, revision=recorded.revision or "")


@dataclass(frozen=True)
class Problem:
    reason: str
    message: str


def summarize(
    *,
    generation: int,
    outcomes: Sequence[tuple[str, Outcome | None]],
    resource_problems: Sequence[Problem],
    previous: ClusterResourceSetStatus,
    now: datetime,
    rollout: tuple[str, str] | None = None,
) -> ClusterResourceSetStatus:
    """The status for the matching clusters' outcomes (cluster name, outcome), and
    the rollout's (phase, message) when the CRS has one.

    observedGeneration moves only once every matching cluster has been reconciled
    against this generation, so it never claims more than was done.
    """
    tally = _Tally.of(outcomes)
    current = all(o is not None and o.generation == generation for _, o in outcomes)
    reason, message = _applied_reason(outcomes, resource_problems, tally, rollout)
    ok = reason in ("Applied", "NoMatchingClusters")
    status: Literal["True", "False"] = "True" if ok else "False"
    ready_status, ready_reason, ready_message = _readiness(outcomes, rollout, ok)
    if ready_status is None:
        ready_status, ready_reason, ready_message = status, reason, message
    conditions = [
        _condition(previous, RESOURCES_APPLIED, status, reason, message, generation, now),
        _condition(previous, READY, ready_status, ready_reason, ready_message, generation, now),
    ]
    return ClusterResourceSetStatus(
        observed_generation=generation if current else previous.observed_generation,
        conditions=conditions,
        matching_clusters=len(outcomes),
        # Held back by a rollout, a cluster keeps what it had applied (any revision).
        applied_clusters=len(tally.applied) + len(tally.held),
        failed_clusters=len(tally.failed),
    )


@dataclass(frozen=True)
class _Tally:
    """The matching clusters by the state of their outcome."""

    failed: list[tuple[str, Outcome]]
    applied: list[str]
    held: list[tuple[str, Outcome]]
    waiting: list[tuple[str, Outcome]]
    pending: int  # no outcome yet, or Pending

    @classmethod
    def of(cls, outcomes: Sequence[tuple[str, Outcome | None]]) -> _Tally:
        failed = [(c, o) for c, o in outcomes if o is not None and o.state == "Failed"]
        applied = [c for c, o in outcomes if o is not None and o.state == "Applied"]
        held = [(c, o) for c, o in outcomes if o is not None and o.state == "Progressing"]
        waiting = [(c, o) for c, o in outcomes if o is not None and o.state == "Waiting"]
        pending = len(outcomes) - len(failed) - len(applied) - len(held) - len(waiting)
        return cls(failed, applied, held, waiting, pending)


def _applied_reason(
    outcomes: Sequence[tuple[str, Outcome | None]],
    resource_problems: Sequence[Problem],
    tally: _Tally,
    rollout: tuple[str, str] | None,
) -> tuple[str, str]:
    """ResourcesApplied's reason and message: the first that applies, where clusters
    held back or waiting say why rather than "WaitingForClusters" or "Applied"."""
    reason, message = _reason(
        outcomes, resource_problems, tally.failed, tally.applied, tally.pending
    )
    if reason not in ("WaitingForClusters", "Applied"):
        return reason, message
    told = [_held_reason(tally.held, rollout)] if tally.held else []
    told += [_waiting_reason(tally.waiting)] if tally.waiting else []
    return _earliest(told, (reason, message))


def _earliest(told: Sequence[tuple[str, str]], otherwise: tuple[str, str]) -> tuple[str, str]:
    """The (reason, message) whose reason ranks first; ``otherwise`` when none."""
    return min(told, key=lambda said: rank(said[0])) if told else otherwise


def _waiting_reason(waiting: Sequence[tuple[str, Outcome]]) -> tuple[str, str]:
    # DependencyNotReady, WaitingForVersion or NoResourceForVersion: the reason that
    # ranks first, said with the first cluster that has it.
    cluster, outcome = _first(waiting, lambda o: o.reason)
    more = f" (and {len(waiting) - 1} more clusters)" if len(waiting) > 1 else ""
    return outcome.reason, f"cluster {cluster}: {outcome.message}{more}"


def _held_reason(
    held: Sequence[tuple[str, Outcome]], rollout: tuple[str, str] | None
) -> tuple[str, str]:
    """Clusters held back from the revision: the rollout's phase says why (paused,
    halted, awaiting approval), else the held clusters' own reason that ranks first,
    naming the clusters held for it."""
    phase, message = rollout or ("Progressing", "")
    reason = ROLLOUT_REASONS.get(phase)
    if reason is None:
        reason = _first(held, lambda o: o.reason)[1].reason
        held = [(c, o) for c, o in held if o.reason == reason]
    names = [c for c, _ in held]
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    if reason == "UpdateHeld" or (rollout is not None and rollout[0] == "Complete"):
        return reason, f"{len(names)} clusters hold updates ({shown})"
    if reason == "UpgradeInProgress":
        return reason, f"{len(names)} clusters wait for Cluster API's upgrade to end ({shown})"
    return reason, f"{len(names)} clusters wait for the rollout ({shown}): {message}"


def _readiness(
    outcomes: Sequence[tuple[str, Outcome | None]], rollout: tuple[str, str] | None, ok: bool
) -> tuple[Literal["True", "False"] | None, str, str]:
    """Ready's own verdict when everything is applied: False while objects are not
    Ready yet or a rollout is not Complete; (None, ...) to follow ResourcesApplied."""
    if not ok:
        return None, "", ""
    waiting = [(c, o) for c, o in outcomes if o is not None and o.state == "Applied"]
    waiting = [(c, o) for c, o in waiting if not o.ready]
    if waiting:
        cluster, outcome = waiting[0]
        more = f" (and {len(waiting) - 1} more clusters)" if len(waiting) > 1 else ""
        return "False", "Progressing", f"cluster {cluster}: {outcome.message}{more}"
    if rollout is not None and rollout[0] != "Complete":
        return "False", ROLLOUT_REASONS.get(rollout[0], "Progressing"), rollout[1]
    return None, "", ""


def _reason(
    outcomes: Sequence[tuple[str, Outcome | None]],
    resource_problems: Sequence[Problem],
    failed: Sequence[tuple[str, Outcome]],
    applied: Sequence[str],
    pending: int,
) -> tuple[str, str]:
    """The first reason that applies, and its message."""
    if resource_problems:
        reason = min((p.reason for p in resource_problems), key=rank)
        message = "; ".join(p.message for p in resource_problems)
    elif failed:
        cluster, outcome = _first(failed, lambda o: o.reason)
        reason = outcome.reason
        more = f" (and {len(failed) - 1} more clusters)" if len(failed) > 1 else ""
        message = f"cluster {cluster}: {outcome.message}{more}"
    elif pending:
        reason, message = "WaitingForClusters", f"{pending} matching clusters not applied yet"
    elif not outcomes:
        reason, message = "NoMatchingClusters", "no Cluster matches the selector"
    else:
        reason, message = "Applied", f"applied to {len(applied)} clusters"
    return reason, message


def invalid_spec(
    previous: ClusterResourceSetStatus, generation: int, message: str, now: datetime
) -> ClusterResourceSetStatus:
    """The status of a CRS whose spec the model refuses: both conditions False with
    reason InvalidSpec; the cluster counts stay as they were (nothing was done)."""
    conditions = [
        _condition(previous, kind, "False", "InvalidSpec", message, generation, now)
        for kind in (RESOURCES_APPLIED, READY)
    ]
    return previous.model_copy(update={"conditions": conditions, "observed_generation": generation})


def paused(
    previous: ClusterResourceSetStatus, generation: int, now: datetime
) -> ClusterResourceSetStatus:
    """The status of a paused CRS: ``Paused`` True, and ``Ready`` Unknown with reason
    Paused — nobody looks at its clusters, so it can claim neither True nor False (and
    a deliberate pause is no failure to alert on). Everything else stays as it was:
    nothing is applied, checked or counted meanwhile (observedGeneration included)."""
    kept = [c for c in previous.conditions if c.type not in (READY, PAUSED)]
    ready = _condition(previous, READY, "Unknown", "Paused", PAUSED_MESSAGE, generation, now)
    told = _condition(previous, PAUSED, "True", "Paused", PAUSED_MESSAGE, generation, now)
    return previous.model_copy(update={"conditions": [*kept, ready, told]})


def not_paused(
    status: ClusterResourceSetStatus,
    previous: ClusterResourceSetStatus,
    generation: int,
    now: datetime,
) -> ClusterResourceSetStatus:
    """``status`` (folded, or InvalidSpec) with ``Paused`` False, reason NotPaused, as
    Cluster API v1beta2 writes it on every object it reconciles."""
    kept = [c for c in status.conditions if c.type != PAUSED]
    told = _condition(previous, PAUSED, "False", "NotPaused", "", generation, now)
    return status.model_copy(update={"conditions": [*kept, told]})


def new_problem(before: ClusterResourceSetStatus, after: ClusterResourceSetStatus) -> str | None:
    """The spec problem ``after`` records and ``before`` did not (its Ready condition's
    InvalidSpec message), to be told once; None when there is none new. Judged from the
    status, where a CRS's own problem is recorded (as a pair's outcome is in the
    binding), so neither a restart nor a new leader tells it again."""
    now, was = _find(after, READY), _find(before, READY)
    if now is None or now.reason != "InvalidSpec":
        return None
    if was is not None and (was.reason, was.message) == (now.reason, now.message):
        return None
    return now.message


def _find(status: ClusterResourceSetStatus, kind: str) -> Condition | None:
    return next((c for c in status.conditions if c.type == kind), None)


def _condition(
    previous: ClusterResourceSetStatus,
    kind: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    generation: int,
    now: datetime,
) -> Condition:
    old = next((c for c in previous.conditions if c.type == kind), None)
    changed = old is None or old.status != status
    # The message can quote tenants' names and servers' answers: made safe here, where
    # every condition is built. Reasons need nothing: metav1's pattern (checked on
    # every reason read from a binding) leaves no room for a control character.
    return Condition(
        type=kind,
        status=status,
        reason=reason,
        message=safe(message, MESSAGE_LIMIT),
        last_transition_time=rfc3339(now) if changed or old is None else old.last_transition_time,
        observed_generation=generation,
    )
