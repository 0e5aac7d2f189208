"""Per (CRS, cluster) outcomes of this process's last reconcile, kept in memory.

They spare a Warning for an outcome this process has noted already (the binding
spares it across a restart), tell whether a missing source's Warning still holds,
and say what a health check saw last. Neither the CRS status nor the admission gate
reads them: both read the bindings, which record every pair's outcome for every
replica. A restart loses these on purpose: the first reconcile of every pair
rebuilds them.
"""

from __future__ import annotations

from collections.abc import Callable

from crs_controller.core.state.status import Outcome


class Outcomes:
    """Kept per namespace, so forgetting a cluster or a CRS only looks through its own
    namespace's pairs, never every tenant's."""

    def __init__(self) -> None:
        # namespace -> (CRS, cluster) -> outcome
        self._by_pair: dict[str, dict[tuple[str, str], Outcome]] = {}

    def get(self, namespace: str, crs: str, cluster: str) -> Outcome | None:
        return self._by_pair.get(namespace, {}).get((crs, cluster))

    def record(self, namespace: str, crs: str, cluster: str, outcome: Outcome) -> bool:
        """Record; True when it differs from what was there."""
        pairs = self._by_pair.setdefault(namespace, {})
        changed = pairs.get((crs, cluster)) != outcome
        pairs[(crs, cluster)] = outcome
        return changed

    def drop_cluster(self, namespace: str, cluster: str) -> None:
        """Forget a cluster (deleted, or handed to another replica)."""
        self._drop(namespace, lambda pair: pair[1] == cluster)

    def drop_pair(self, namespace: str, crs: str, cluster: str) -> None:
        pairs = self._by_pair.get(namespace)
        if pairs is not None:
            pairs.pop((crs, cluster), None)
            if not pairs:
                del self._by_pair[namespace]

    def drop_crs(self, namespace: str, crs: str) -> None:
        self._drop(namespace, lambda pair: pair[0] == crs)

    def _drop(self, namespace: str, which: Callable[[tuple[str, str]], bool]) -> None:
        pairs = self._by_pair.get(namespace)
        if pairs is None:
            return
        for pair in [p for p in pairs if which(p)]:
            del pairs[pair]
        if not pairs:
            del self._by_pair[namespace]
