"""Per (CRS, cluster) outcomes of the last reconcile, kept in memory.

They feed the CRS status and decide when a Warning event is new. A restart loses
them on purpose: the first reconcile of every pair rebuilds them.
"""

from __future__ import annotations

from crs_controller.core.status import Outcome

PairKey = tuple[str, str, str]  # namespace, CRS name, cluster name


class Outcomes:
    def __init__(self) -> None:
        self._by_pair: dict[PairKey, Outcome] = {}

    def get(self, namespace: str, crs: str, cluster: str) -> Outcome | None:
        return self._by_pair.get((namespace, crs, cluster))

    def record(self, namespace: str, crs: str, cluster: str, outcome: Outcome) -> bool:
        """Record; True when it differs from what was there (so status must change)."""
        key = (namespace, crs, cluster)
        changed = self._by_pair.get(key) != outcome
        self._by_pair[key] = outcome
        return changed

    def drop_cluster(self, namespace: str, cluster: str) -> list[str]:
        """Forget a cluster; returns the CRS names that had an outcome for it."""
        keys = [k for k in self._by_pair if k[0] == namespace and k[2] == cluster]
        for key in keys:
            del self._by_pair[key]
        return sorted({k[1] for k in keys})

    def drop_pair(self, namespace: str, crs: str, cluster: str) -> bool:
        return self._by_pair.pop((namespace, crs, cluster), None) is not None

    def drop_crs(self, namespace: str, crs: str) -> None:
        for key in [k for k in self._by_pair if k[0] == namespace and k[1] == crs]:
            del self._by_pair[key]
