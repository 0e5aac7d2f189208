"""Per (CRS, cluster) outcomes of the last reconcile, kept in memory.

They feed the CRS status and decide when a Warning event is new. A restart loses
them on purpose: the first reconcile of every pair rebuilds them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from crs_controller.core.status import Outcome

PairKey = tuple[str, str, str]  # namespace, CRS name, cluster name
Changed = Callable[[str, str], None]  # namespace, CRS name


def _ignore(namespace: str, crs: str) -> None:
    pass


class Outcomes:
    """``on_change(namespace, crs)`` is told of every change, so the runtime can map
    it to the CRS's key the way it maps watch events; reconcilers never see the queue."""

    def __init__(self, on_change: Changed = _ignore) -> None:
        self._by_pair: dict[PairKey, Outcome] = {}
        self._since: dict[PairKey, datetime] = {}
        self._on_change = on_change

    def get(self, namespace: str, crs: str, cluster: str) -> Outcome | None:
        return self._by_pair.get((namespace, crs, cluster))

    def since(self, namespace: str, crs: str, cluster: str) -> datetime | None:
        """When the pair's outcome last changed (a rollout's soak counts from it)."""
        return self._since.get((namespace, crs, cluster))

    def record(
        self, namespace: str, crs: str, cluster: str, outcome: Outcome, at: datetime | None = None
    ) -> bool:
        """Record; True when it differs from what was there (so status must change)."""
        key = (namespace, crs, cluster)
        changed = self._by_pair.get(key) != outcome
        self._by_pair[key] = outcome
        if changed:
            if at is not None:
                self._since[key] = at
            self._on_change(namespace, crs)
        return changed

    def drop_cluster(self, namespace: str, cluster: str) -> list[str]:
        """Forget a cluster; returns the CRS names that had an outcome for it."""
        keys = [k for k in self._by_pair if k[0] == namespace and k[2] == cluster]
        for key in keys:
            del self._by_pair[key]
            self._since.pop(key, None)
        names = sorted({k[1] for k in keys})
        for name in names:
            self._on_change(namespace, name)
        return names

    def drop_pair(self, namespace: str, crs: str, cluster: str) -> bool:
        self._since.pop((namespace, crs, cluster), None)
        dropped = self._by_pair.pop((namespace, crs, cluster), None) is not None
        if dropped:
            self._on_change(namespace, crs)
        return dropped

    def drop_crs(self, namespace: str, crs: str) -> None:
        for key in [k for k in self._by_pair if k[0] == namespace and k[1] == crs]:
            del self._by_pair[key]
            self._since.pop(key, None)
