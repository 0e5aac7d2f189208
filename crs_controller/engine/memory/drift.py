"""When each CRS on each cluster is next due for a drift check.

Process state, kept in memory on purpose: a restart checks every pair at once, which
is what a check after an unknown pause should do anyway. Times are the seconds of
the injected clock, so tests drive the schedule without waiting.
"""

from __future__ import annotations

from crs_controller.core.models import PairKey


class DriftSchedule:
    """Asking never changes the schedule; ``checked`` does."""

    def __init__(self) -> None:
        self._due: dict[PairKey, float] = {}

    def wait(self, key: PairKey, now: float) -> float:
        """Seconds until the next check is due; 0 when due now (or never checked)."""
        return max(self._due.get(key, now) - now, 0.0)

    def checked(self, key: PairKey, now: float, interval: float) -> None:
        self._due[key] = now + interval

    def forget_cluster(self, namespace: str, cluster: str) -> None:
        """Forget a cluster (deleted, or handed to another replica)."""
        for key in [k for k in self._due if k[0] == namespace and k[2] == cluster]:
            del self._due[key]
