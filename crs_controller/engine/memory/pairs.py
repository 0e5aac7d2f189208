"""A value per CRS on a cluster, that forgets a whole cluster or a whole CRS at the
cost of that cluster's or that CRS's own pairs.

A namespace may hold 10,000 Clusters under 100 CRSs: a million pairs. Each deleted
Cluster (or each one handed to another replica) and each deleted CRS is forgotten
here, on the event loop; a scan of the namespace's pairs for each would block it for
minutes while a namespace's Clusters go. So each pair is filed twice more, under its
cluster and under its CRS, and every change keeps the three in step.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from crs_controller.core.api.models import PairKey

V = TypeVar("V")


class PairTable(Generic[V]):
    def __init__(self) -> None:
        self._values: dict[PairKey, V] = {}
        # (namespace, cluster) -> the CRSs with a value on it
        self._by_cluster: dict[tuple[str, str], set[str]] = {}
        # (namespace, CRS) -> the clusters it has a value on
        self._by_crs: dict[tuple[str, str], set[str]] = {}

    def get(self, key: PairKey) -> V | None:
        return self._values.get(key)

    def put(self, key: PairKey, value: V) -> None:
        namespace, crs, cluster = key
        self._values[key] = value
        self._by_cluster.setdefault((namespace, cluster), set()).add(crs)
        self._by_crs.setdefault((namespace, crs), set()).add(cluster)

    def pop(self, key: PairKey) -> None:
        if key not in self._values:
            return
        del self._values[key]
        namespace, crs, cluster = key
        self._unfile(self._by_cluster, (namespace, cluster), crs)
        self._unfile(self._by_crs, (namespace, crs), cluster)

    def drop_cluster(self, namespace: str, cluster: str) -> None:
        for crs in self._by_cluster.pop((namespace, cluster), ()):
            del self._values[(namespace, crs, cluster)]
            self._unfile(self._by_crs, (namespace, crs), cluster)

    def drop_crs(self, namespace: str, crs: str) -> None:
        for cluster in self._by_crs.pop((namespace, crs), ()):
            del self._values[(namespace, crs, cluster)]
            self._unfile(self._by_cluster, (namespace, cluster), crs)

    def __len__(self) -> int:
        return len(self._values)

    @staticmethod
    def _unfile(index: dict[tuple[str, str], set[str]], under: tuple[str, str], name: str) -> None:
        names = index.get(under)
        if names is not None:
            names.discard(name)
            if not names:
                del index[under]
