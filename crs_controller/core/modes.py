"""The mode of a ClusterResourceSet as a tiny strategy: does a resource need applying?

Each strategy answers from what the binding recorded and the current hash only, so
the decision is a pure function that tables can test and a restart cannot change.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from crs_controller.core.durations import parse_duration
from crs_controller.core.errors import InvalidSpec

__all__ = ["ApplyOnce", "Reconcile", "RecordedResource", "strategy_for"]


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
