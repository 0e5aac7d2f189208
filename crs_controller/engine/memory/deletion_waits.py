"""Per (CRS, cluster): the dependent a CRS being deleted waits for there, as this
process's last pruning of that cluster found it (``Pruned.waiting``).

The CRS pass counts them for the clusters it contributes for, so that a deletion
held behind a dependent says so in its status. A restart loses them: the cluster's
next pass, retried while it waits, finds them again.
"""

from __future__ import annotations

from collections.abc import Mapping


class DeletionWaits:
    def __init__(self) -> None:
        # (namespace, CRS) -> cluster -> the dependent it waits for there.
        self._waits: dict[tuple[str, str], dict[str, str]] = {}

    def settle(self, namespace: str, cluster: str, waiting: Mapping[str, str]) -> None:
        """A pruning of ``cluster`` found ``waiting`` (CRS -> dependent): every other
        wait of that cluster is over."""
        for key, clusters in list(self._waits.items()):
            if key[0] == namespace and key[1] not in waiting:
                clusters.pop(cluster, None)
                if not clusters:
                    del self._waits[key]
        for crs, dependent in waiting.items():
            self._waits.setdefault((namespace, crs), {})[cluster] = dependent

    def of(self, namespace: str, crs: str) -> dict[str, str]:
        """Cluster -> the dependent ``crs`` waits for there."""
        return dict(self._waits.get((namespace, crs), {}))

    def drop_cluster(self, namespace: str, cluster: str) -> None:
        self.settle(namespace, cluster, {})

    def drop_crs(self, namespace: str, crs: str) -> None:
        self._waits.pop((namespace, crs), None)
