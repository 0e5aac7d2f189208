"""Pure status decisions: per-cluster outcomes folded into a CRS's status.

The status is made from a tally of the matching clusters' outcomes (``tally``):
``status_of`` from a tally, which may be the tallies of parts of the clusters
combined, and ``summarize`` from the outcomes themselves, as one tally of them all.
Which reason is told first is ``reasons.rank``'s order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

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
from crs_controller.core.state.tally import NAMES_SHOWN, Held, Sample, Tally, tally_of
from crs_controller.core.text import safe

__all__ = [
    "DELETION_GOES_ON",
    "DELETION_WAITS_FOR",
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
    "deletion_goes_on",
    "deletion_waits",
    "invalid_spec",
    "new_problem",
    "not_paused",
    "outcome_of",
    "paused",
    "rank",
    "recorded_reason",
    "status_of",
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

# ResourcesApplied's reason while clusters are held back, by the rollout's phase.
ROLLOUT_REASONS = {
    "Paused": "RolloutPaused",
    "Halted": "RolloutHalted",
    "AwaitingApproval": "AwaitingApproval",
    "RolledBack": "RolledBack",
}


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
        case _ if recorded.revision is not None:
            # Only a failure records the revision it was taking: a held retry's, whose
            # hold says what holds it (``Held.outcome``), is a failure all the same.
            return Outcome("Failed", reason, message, generation, revision=recorded.revision)
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
    the rollout's (phase, message) when the CRS has one: ``status_of`` their tally.
    Among clusters alike, the message names the first by name, whatever their order.
    """
    return status_of(
        tally_of(outcomes),
        generation=generation,
        resource_problems=resource_problems,
        previous=previous,
        now=now,
        rollout=rollout,
    )


def status_of(
    tally: Tally,
    *,
    generation: int,
    resource_problems: Sequence[Problem],
    previous: ClusterResourceSetStatus,
    now: datetime,
    rollout: tuple[str, str] | None = None,
) -> ClusterResourceSetStatus:
    """The status for the matching clusters' tally, and the rollout's (phase, message)
    when the CRS has one.

    observedGeneration moves only once every matching cluster has been reconciled
    against this generation, so it never claims more than was done.
    """
    reason, message = _applied_reason(tally, resource_problems, rollout)
    ok = reason in ("Applied", "NoMatchingClusters")
    status: Literal["True", "False"] = "True" if ok else "False"
    ready_status, ready_reason, ready_message = _readiness(tally, rollout, ok)
    if ready_status is None:
        ready_status, ready_reason, ready_message = status, reason, message
    conditions = [
        _condition(previous, RESOURCES_APPLIED, status, reason, message, generation, now),
        _condition(previous, READY, ready_status, ready_reason, ready_message, generation, now),
    ]
    current = tally.current(generation)
    return ClusterResourceSetStatus(
        observed_generation=generation if current else previous.observed_generation,
        conditions=conditions,
        matching_clusters=tally.clusters,
        # Held back by a rollout, a cluster keeps what it had applied (any revision).
        applied_clusters=tally.applied + tally.held,
        failed_clusters=tally.failed,
    )


def _applied_reason(
    tally: Tally, resource_problems: Sequence[Problem], rollout: tuple[str, str] | None
) -> tuple[str, str]:
    """ResourcesApplied's reason and message: the first that applies, where clusters
    held back or waiting say why rather than "WaitingForClusters" or "Applied"."""
    reason, message = _reason(tally, resource_problems)
    if reason not in ("WaitingForClusters", "Applied"):
        return reason, message
    told: list[tuple[str, str]] = []
    if tally.first_held is not None:
        told.append(_held_reason(tally, tally.first_held, rollout))
    if tally.first_waiting is not None:
        # DependencyNotReady, WaitingForVersion or NoResourceForVersion: the reason
        # that ranks first, said with the first cluster that has it.
        told.append((tally.first_waiting.reason, _said(tally.first_waiting, tally.waiting)))
    return _earliest(told, (reason, message))


def _said(first: Sample, clusters: int) -> str:
    """A message naming the first of ``clusters`` clusters and counting the others."""
    more = f" (and {clusters - 1} more clusters)" if clusters > 1 else ""
    return f"cluster {first.cluster}: {first.message}{more}"


def _earliest(told: Sequence[tuple[str, str]], otherwise: tuple[str, str]) -> tuple[str, str]:
    """The (reason, message) whose reason ranks first; ``otherwise`` when none."""
    return min(told, key=lambda said: rank(said[0])) if told else otherwise


def _held_reason(tally: Tally, first: Held, rollout: tuple[str, str] | None) -> tuple[str, str]:
    """Clusters held back from the revision: the rollout's phase says why (paused,
    halted, awaiting approval), else the held clusters' own reason that ranks first
    (``first``), naming the clusters held for it."""
    phase, message = rollout or ("Progressing", "")
    reason = ROLLOUT_REASONS.get(phase)
    count, names = tally.held, tally.held_names
    if reason is None:
        reason, count, names = first.reason, first.clusters, first.names
    more = f" and {count - NAMES_SHOWN} more" if count > NAMES_SHOWN else ""
    shown = ", ".join(names) + more
    if reason == "UpdateHeld" or (rollout is not None and rollout[0] == "Complete"):
        return reason, f"{count} clusters hold updates ({shown})"
    if reason == "UpgradeInProgress":
        return reason, f"{count} clusters wait for Cluster API's upgrade to end ({shown})"
    return reason, f"{count} clusters wait for the rollout ({shown}): {message}"


def _readiness(
    tally: Tally, rollout: tuple[str, str] | None, ok: bool
) -> tuple[Literal["True", "False"] | None, str, str]:
    """Ready's own verdict when everything is applied: False while objects are not
    Ready yet or a rollout is not Complete; (None, ...) to follow ResourcesApplied."""
    if not ok:
        return None, "", ""
    first = tally.first_unready
    if first is not None:
        return "False", "Progressing", _said(first, tally.unready)
    if rollout is not None and rollout[0] != "Complete":
        return "False", ROLLOUT_REASONS.get(rollout[0], "Progressing"), rollout[1]
    return None, "", ""


def _reason(tally: Tally, resource_problems: Sequence[Problem]) -> tuple[str, str]:
    """The first reason that applies, and its message."""
    first = tally.first_failed
    if resource_problems:
        reason = min((p.reason for p in resource_problems), key=rank)
        message = "; ".join(p.message for p in resource_problems)
    elif first is not None:
        reason = first.reason
        message = _said(first, tally.failed)
    elif tally.pending:
        reason, message = "WaitingForClusters", f"{tally.pending} matching clusters not applied yet"
    elif not tally.clusters:
        reason, message = "NoMatchingClusters", "no Cluster matches the selector"
    else:
        reason, message = "Applied", f"applied to {tally.applied} clusters"
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


# How the Ready message of a CRS whose deletion waits for dependents begins.
DELETION_WAITS_FOR = "deletion waits for "
# The Ready message of a CRS being deleted once nothing but its clusters holds it.
DELETION_GOES_ON = "deletion waits for its clusters to let go of it"


def deletion_waits(
    previous: ClusterResourceSetStatus, generation: int, message: str, now: datetime
) -> ClusterResourceSetStatus:
    """The status of a CRS whose deletion waits for dependents being deleted too:
    ``Ready`` False, reason DependencyNotReady (it waits for another CRS), ``message``
    saying which; everything else as it was (nothing of it is applied any more)."""
    kept = [c for c in previous.conditions if c.type != READY]
    ready = _condition(previous, READY, "False", "DependencyNotReady", message, generation, now)
    return previous.model_copy(update={"conditions": [*kept, ready]})


def deletion_goes_on(
    previous: ClusterResourceSetStatus, generation: int, now: datetime
) -> ClusterResourceSetStatus:
    """The status of a CRS being deleted that no dependent and no pause holds any more:
    a ``Ready`` that said one did (DependencyNotReady from ``deletion_waits``, or
    Unknown Paused) becomes False, reason WaitingForClusters, ``DELETION_GOES_ON``;
    any other stays as it was, like everything else (a deletion changes no status)."""
    ready = _find(previous, READY)
    if ready is None or not _deletion_held(ready):
        return previous
    kept = [c for c in previous.conditions if c.type != READY]
    told = _condition(
        previous, READY, "False", "WaitingForClusters", DELETION_GOES_ON, generation, now
    )
    return previous.model_copy(update={"conditions": [*kept, told]})


def _deletion_held(ready: Condition) -> bool:
    """Does this ``Ready`` say a dependent or a pause holds the deletion?"""
    if ready.reason == "Paused":
        return True
    return ready.reason == "DependencyNotReady" and ready.message.startswith(DELETION_WAITS_FOR)


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
