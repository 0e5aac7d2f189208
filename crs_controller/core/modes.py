"""The mode of a ClusterResourceSet as a tiny strategy: does a resource need applying?

Each strategy answers from what the binding recorded and the current hash only, so
the decision is a pure function that tables can test and a restart cannot change.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from crs_controller.core.durations import parse_duration
from crs_controller.core.errors import InvalidSpec
from crs_controller.core.models import DEFAULT_DRIFT_CHECK_INTERVAL

__all__ = [
    "Apply",
    "ApplyOnce",
    "CheckDrift",
    "Drift",
    "DriftSchedule",
    "Plan",
    "Reconcile",
    "RecordedResource",
    "Scope",
    "Skip",
    "drift_for",
    "plan",
    "strategy_for",
]

DriftMode = Literal["None", "Generation", "Content"]
# Which of a resource's objects an apply sends: every one, or only those whose own
# content changed since their last successful apply to the cluster.
Scope = Literal["All", "Changed"]


class RecordedResource(Protocol):
    """What a binding remembers about one resource on one cluster."""

    @property
    def hash(self) -> str: ...

    @property
    def applied(self) -> bool: ...

    @property
    def last_applied_time(self) -> datetime | None: ...


class ApplyOnce:
    """Apply each resource once per cluster; later changes are ignored (CAPI's default)."""

    name = "ApplyOnce"
    # Objects already on the workload cluster are left untouched, so the applier only
    # creates what is missing instead of taking ownership of existing objects.
    applies_only_missing = True

    def needs_apply(
        self, recorded: RecordedResource | None, current_hash: str, now: datetime
    ) -> bool:
        return recorded is None or not recorded.applied

    def scope(self, recorded: RecordedResource | None, now: datetime) -> Scope:
        # Only what is missing is created anyway.
        return "All"

    def next_due(self, recorded: RecordedResource | None, now: datetime) -> float | None:
        return None


class Reconcile:
    """Reapply when the content changed, and every ``reapply_interval`` seconds if set."""

    name = "Reconcile"
    applies_only_missing = False

    def __init__(self, reapply_interval: float | None = None) -> None:
        if reapply_interval is not None and reapply_interval <= 0:
            raise ValueError("reapply_interval must be positive (None disables it)")
        self.reapply_interval = reapply_interval

    def __repr__(self) -> str:
        return f"Reconcile(reapply_interval={self.reapply_interval!r})"

    def needs_apply(
        self, recorded: RecordedResource | None, current_hash: str, now: datetime
    ) -> bool:
        return (
            recorded is None
            or not recorded.applied
            or recorded.hash != current_hash
            or self.next_due(recorded, now) == 0
        )

    def scope(self, recorded: RecordedResource | None, now: datetime) -> Scope:
        """An interval reapply sends everything; a change or a retry only what changed
        (a failed object kept its old hash, so it is sent again)."""
        if recorded is None or self.next_due(recorded, now) == 0:
            return "All"
        return "Changed"

    def next_due(self, recorded: RecordedResource | None, now: datetime) -> float | None:
        """Seconds until the interval reapply is due: 0 if due now, None without interval."""
        if self.reapply_interval is None:
            return None
        if recorded is None or recorded.last_applied_time is None:
            return 0.0  # never applied, or the time was lost: due now
        elapsed = (now - recorded.last_applied_time).total_seconds()
        return max(0.0, self.reapply_interval - elapsed)


def strategy_for(mode: str, reapply_interval: str | None) -> ApplyOnce | Reconcile:
    """The strategy of a CRS spec; raises InvalidSpec for an unknown mode or bad interval.

    ``reapplyInterval: 0`` disables interval reapplies, like ``0`` periods elsewhere in
    Kubernetes.
    """
    if mode == "ApplyOnce":
        if reapply_interval is not None:
            # Refused rather than ignored: the user expects reapplies that would never come.
            raise InvalidSpec("reapplyInterval only applies to mode Reconcile")
        return ApplyOnce()
    if mode == "Reconcile":
        seconds = None if reapply_interval is None else parse_duration(reapply_interval)
        return Reconcile(seconds or None)
    raise InvalidSpec(f"invalid mode {mode!r} (expected ApplyOnce or Reconcile)")


# --- drift and the per-resource plan ----------------------------------------------


@dataclass(frozen=True)
class Drift:
    """How a CRS checks for drift: the mode (None outside Reconcile) and how often."""

    mode: DriftMode
    interval: float


def drift_for(mode: str, drift_detection: str, check_interval: str | None) -> Drift:
    """Only Reconcile mode detects drift; an interval of 0 means the default."""
    interval = parse_duration(check_interval or DEFAULT_DRIFT_CHECK_INTERVAL)
    interval = interval or parse_duration(DEFAULT_DRIFT_CHECK_INTERVAL)
    if mode != "Reconcile" or drift_detection not in ("Generation", "Content"):
        return Drift("None", interval)
    return Drift("Content" if drift_detection == "Content" else "Generation", interval)


@dataclass(frozen=True)
class Skip:
    """Leave the resource as it is on this cluster."""


@dataclass(frozen=True)
class Apply:
    """Send the resource's objects: all of them (never applied, or an interval
    reapply), or only the changed ones (its content changed, or a retry)."""

    scope: Scope = "All"


@dataclass(frozen=True)
class CheckDrift:
    """Read what the resource put on the cluster; reapply if someone changed it."""

    mode: Literal["Generation", "Content"]


Plan = Skip | Apply | CheckDrift


def plan(
    strategy: ApplyOnce | Reconcile,
    recorded: RecordedResource | None,
    current_hash: str,
    now: datetime,
    drift_due: DriftMode,
) -> Plan:
    """What to do with one resource on one cluster in this pass. ``drift_due`` is the
    drift mode when a check is due in this pass, "None" otherwise."""
    if strategy.needs_apply(recorded, current_hash, now):
        return Apply(strategy.scope(recorded, now))
    if drift_due != "None":
        return CheckDrift(drift_due)
    return Skip()


PairKey = tuple[str, str, str]  # namespace, CRS name, cluster name


class DriftSchedule:
    """When each (CRS, cluster) pair is next due for a drift check, in the seconds of
    an injected clock. Asking never changes it; ``checked`` does."""

    def __init__(self) -> None:
        self._due: dict[PairKey, float] = {}

    def wait(self, key: PairKey, now: float) -> float:
        """Seconds until the next check is due; 0 when due now (or never checked)."""
        return max(self._due.get(key, now) - now, 0.0)

    def checked(self, key: PairKey, now: float, interval: float) -> None:
        self._due[key] = now + interval

    def forget_cluster(self, namespace: str, cluster: str) -> None:
        for key in [k for k in self._due if k[0] == namespace and k[2] == cluster]:
            del self._due[key]
