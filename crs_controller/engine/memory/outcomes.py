"""Per (CRS, cluster) outcomes of this process's last reconcile, kept in memory.

They spare a Warning for an outcome this process has noted already (the binding
spares it across a restart), tell whether a missing source's Warning still holds,
and say what a health check saw last. Neither the CRS status nor the admission gate
reads them: both read the bindings, which record every pair's outcome for every
replica. A restart loses these on purpose: the first reconcile of every pair
rebuilds them.
"""

from __future__ import annotations

from crs_controller.core.state.status import Outcome
from crs_controller.engine.memory.pairs import PairTable


class Outcomes:
    """Forgetting a cluster or a CRS looks only at its own pairs (see ``PairTable``),
    never at the rest of its namespace's or at other tenants'."""

    def __init__(self) -> None:
        self._pairs: PairTable[Outcome] = PairTable()

    def get(self, namespace: str, crs: str, cluster: str) -> Outcome | None:
        return self._pairs.get((namespace, crs, cluster))

    def record(self, namespace: str, crs: str, cluster: str, outcome: Outcome) -> bool:
        """Record; True when it differs from what was there."""
        key = (namespace, crs, cluster)
        changed = self._pairs.get(key) != outcome
        self._pairs.put(key, outcome)
        return changed

    def drop_cluster(self, namespace: str, cluster: str) -> None:
        """Forget a cluster (deleted, or handed to another replica)."""
        self._pairs.drop_cluster(namespace, cluster)

    def drop_pair(self, namespace: str, crs: str, cluster: str) -> None:
        self._pairs.pop((namespace, crs, cluster))

    def drop_crs(self, namespace: str, crs: str) -> None:
        self._pairs.drop_crs(namespace, crs)

    def __len__(self) -> int:
        return len(self._pairs)
