"""When each CRS on each cluster is next due for a drift check.

Process state, kept in memory on purpose: a restart checks every pair at once, which
is what a check after an unknown pause should do anyway. Times are the seconds of
the injected clock, so tests drive the schedule without waiting.
"""

from __future__ import annotations

from crs_controller.core.api.models import PairKey
from crs_controller.engine.memory.pairs import PairTable


class DriftSchedule:
    """Asking never changes the schedule; ``checked`` does. Forgetting a cluster looks
    only at its own pairs (see ``PairTable``).

    The time of the last check is kept, not the time the next one is due: the next
    is due one interval after the last, the interval the CRS asks for now, so an
    edited ``driftCheckInterval`` takes effect at once (a shorter one does not wait
    for the end of the longer one). The interval asked with is the pair's own
    (``core.spec.modes.jittered``): the pairs checked in one pass are not all due in
    the same later one."""

    def __init__(self) -> None:
        # (namespace, CRS, cluster) -> when it was last checked
        self._last: PairTable[float] = PairTable()

    def wait(self, key: PairKey, now: float, interval: float) -> float:
        """Seconds until the next check is due, ``interval`` after the last one; 0 when
        due now (or never checked)."""
        last = self._last.get(key)
        return 0.0 if last is None else max(last + interval - now, 0.0)

    def checked(self, key: PairKey, now: float) -> None:
        self._last.put(key, now)

    def forget_pair(self, key: PairKey) -> None:
        """Forget one CRS on one cluster (it no longer selects it, or it is gone)."""
        self._last.pop(key)

    def forget_cluster(self, namespace: str, cluster: str) -> None:
        """Forget a cluster (deleted, or handed to another replica)."""
        self._last.drop_cluster(namespace, cluster)

    def __len__(self) -> int:
        return len(self._last)
