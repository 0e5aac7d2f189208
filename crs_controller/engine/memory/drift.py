"""When each CRS on each cluster is next due for a drift check.

Process state, kept in memory on purpose: a restart checks every pair at once, which
is what a check after an unknown pause should do anyway. Times are the seconds of
the injected clock, so tests drive the schedule without waiting.
"""

from __future__ import annotations

from crs_controller.core.api.models import PairKey


class DriftSchedule:
    """Asking never changes the schedule; ``checked`` does. Kept per namespace, so
    forgetting a cluster only looks through its own namespace's pairs.

    The time of the last check is kept, not the time the next one is due: the next
    is due one interval after the last, the interval the CRS asks for now, so an
    edited ``driftCheckInterval`` takes effect at once (a shorter one does not wait
    for the end of the longer one)."""

    def __init__(self) -> None:
        # namespace -> (CRS, cluster) -> when it was last checked
        self._last: dict[str, dict[tuple[str, str], float]] = {}

    def wait(self, key: PairKey, now: float, interval: float) -> float:
        """Seconds until the next check is due, ``interval`` after the last one; 0 when
        due now (or never checked)."""
        namespace, crs, cluster = key
        last = self._last.get(namespace, {}).get((crs, cluster))
        return 0.0 if last is None else max(last + interval - now, 0.0)

    def checked(self, key: PairKey, now: float) -> None:
        namespace, crs, cluster = key
        self._last.setdefault(namespace, {})[(crs, cluster)] = now

    def forget_pair(self, key: PairKey) -> None:
        """Forget one CRS on one cluster (it no longer selects it, or it is gone)."""
        namespace, crs, cluster = key
        last = self._last.get(namespace)
        if last is not None:
            last.pop((crs, cluster), None)
            if not last:
                del self._last[namespace]

    def forget_cluster(self, namespace: str, cluster: str) -> None:
        """Forget a cluster (deleted, or handed to another replica)."""
        last = self._last.get(namespace)
        if last is None:
            return
        for pair in [p for p in last if p[1] == cluster]:
            del last[pair]
        if not last:
            del self._last[namespace]
