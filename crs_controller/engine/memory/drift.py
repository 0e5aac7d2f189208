"""When each CRS on each cluster is next due for a drift check.

Process state, kept in memory on purpose: a restart checks every pair at once, which
is what a check after an unknown pause should do anyway. Times are the seconds of
the injected clock, so tests drive the schedule without waiting.
"""

from __future__ import annotations

from crs_controller.core.api.models import PairKey


class DriftSchedule:
    """Asking never changes the schedule; ``checked`` does. Kept per namespace, so
    forgetting a cluster only looks through its own namespace's pairs."""

    def __init__(self) -> None:
        # namespace -> (CRS, cluster) -> when the next check is due
        self._due: dict[str, dict[tuple[str, str], float]] = {}

    def wait(self, key: PairKey, now: float) -> float:
        """Seconds until the next check is due; 0 when due now (or never checked)."""
        namespace, crs, cluster = key
        return max(self._due.get(namespace, {}).get((crs, cluster), now) - now, 0.0)

    def checked(self, key: PairKey, now: float, interval: float) -> None:
        namespace, crs, cluster = key
        self._due.setdefault(namespace, {})[(crs, cluster)] = now + interval

    def forget_pair(self, key: PairKey) -> None:
        """Forget one CRS on one cluster (it no longer selects it, or it is gone)."""
        namespace, crs, cluster = key
        due = self._due.get(namespace)
        if due is not None:
            due.pop((crs, cluster), None)
            if not due:
                del self._due[namespace]

    def forget_cluster(self, namespace: str, cluster: str) -> None:
        """Forget a cluster (deleted, or handed to another replica)."""
        due = self._due.get(namespace)
        if due is None:
            return
        for pair in [p for p in due if p[1] == cluster]:
            del due[pair]
        if not due:
            del self._due[namespace]
