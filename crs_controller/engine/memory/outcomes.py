"""Per (CRS, cluster) outcomes of this process's last reconcile, kept in memory.

They spare a Warning for an outcome this process has noted already (the binding
spares it across a restart), tell whether a missing source's Warning still holds,
and say what a health check saw last. Neither the CRS status nor the admission gate
reads them: both read the bindings, which record every pair's outcome for every
replica. A restart loses these on purpose: the first reconcile of every pair
rebuilds them.
"""

from __future__ import annotations

from crs_controller.core.models import PairKey
from crs_controller.core.status import Outcome


class Outcomes:
    def __init__(self) -> None:
        self._by_pair: dict[PairKey, Outcome] = {}

    def get(self, namespace: str, crs: str, cluster: str) -> Outcome | None:
        return self._by_pair.get((namespace, crs, cluster))

    def record(self, namespace: str, crs: str, cluster: str, outcome: Outcome) -> bool:
        """Record; True when it differs from what was there."""
        key = (namespace, crs, cluster)
        changed = self._by_pair.get(key) != outcome
        self._by_pair[key] = outcome
        return changed

    def drop_cluster(self, namespace: str, cluster: str) -> None:
        """Forget a cluster (deleted, or handed to another replica)."""
        for key in [k for k in self._by_pair if k[0] == namespace and k[2] == cluster]:
            del self._by_pair[key]

    def drop_pair(self, namespace: str, crs: str, cluster: str) -> None:
        self._by_pair.pop((namespace, crs, cluster), None)

    def drop_crs(self, namespace: str, crs: str) -> None:
        for key in [k for k in self._by_pair if k[0] == namespace and k[1] == crs]:
            del self._by_pair[key]
