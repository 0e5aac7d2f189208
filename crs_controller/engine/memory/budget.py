"""The fleet-wide budget of clusters taking a new revision at once
(``run --max-updating-clusters``).

Before a CRS applies a new revision to a cluster where it is installed already, the
cluster reconcile asks here; first installs never ask. A cluster holds one place
however many CRSs it is updating. The others wait in one line for the whole fleet and
go, as places free up, in rollout-step order and, within a step, oldest first ask
first. ``release`` and ``forget_cluster`` answer which waiting clusters may go now,
for the reconcile to put in its Result: nobody here sees the queue.

Process state, kept in memory on purpose: a restart starts with every place free, and
the pairs part-way through a revision ask again on their first reconcile, in the order
they come (one with all of it, not Ready yet, is not counted again).
Times are the seconds of the injected clock, so tests drive the line without waiting.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable

from crs_controller.core.clock import Clock

__all__ = ["Budget", "ClusterKey"]

ClusterKey = tuple[str, str]  # namespace, cluster name

# A waiting pair's place in line: its rollout step, its first ask, and its arrival
# number (two asks in one clock tick still queue in the order they came).
_Place = tuple[int, float, int]
# A waiting cluster in line: the place of its best pair, then the cluster.
_Entry = tuple[int, float, int, ClusterKey]


class Budget:
    """At most ``limit`` clusters hold a place (``None``: no limit); a cluster holding
    one is granted every further pair at once.

    The line is ordered by rollout step, then first ask. A waiter keeps its first ask
    while it waits, so nobody of its own step gets ahead of it, and it moves up only as
    those ahead are granted or withdraw (a waiter whose pass fails steps aside, and asks
    again behind the others). Rollout-step order is the contract, though: a
    newcomer at an earlier step goes ahead of an older waiter at a later step, so a
    fleet that keeps starting new rollouts can hold later steps back for as long as it
    does.
    """

    def __init__(
        self, limit: int | None, clock: Clock, *, wake: Callable[[str, str], None] | None = None
    ) -> None:
        self._limit = _checked(limit)
        self._clock = clock
        self._wake = wake  # (namespace, name) of a waiting cluster that may go now
        self._arrivals = itertools.count()
        # cluster -> the CRSs it holds its place for (never empty)
        self._held: dict[ClusterKey, set[str]] = {}
        # waiting cluster -> CRS -> its place (never empty; never a holding cluster)
        self._asks: dict[ClusterKey, dict[str, _Place]] = {}
        # one entry per waiting cluster, sorted: the line itself
        self._line: list[_Entry] = []
        self._entries: dict[ClusterKey, _Entry] = {}

    @property
    def updating(self) -> int:
        """Clusters holding a place now (the gauge ``crs_updating_clusters``)."""
        return len(self._held)

    @property
    def waiting(self) -> int:
        """Clusters waiting for a place."""
        return len(self._line)

    def may_go(self, cluster: ClusterKey) -> bool:
        """Would the cluster's next ask be granted now (it holds a place, or one is free
        and nobody waiting is ahead of it)? Changes nothing."""
        if cluster in self._held or self._limit is None:
            return True
        free = self._limit - len(self._held)
        entry = self._entries.get(cluster)
        ahead = len(self._line) if entry is None else bisect.bisect_left(self._line, entry)
        return ahead < free

    def pairs(self, cluster: ClusterKey) -> frozenset[str]:
        """The CRSs the cluster holds its place for or waits for."""
        return frozenset(self._held.get(cluster, ())) | frozenset(self._asks.get(cluster, ()))

    def ask(self, cluster: ClusterKey, crs: str, step: int) -> bool:
        """May this pair start (or go on) taking a new revision now?

        True: the cluster holds a place (it did already, for this CRS or another, or a
        place was free and nobody waiting is ahead of it). False: it waits, remembered
        from its first ask. ``step`` is the pair's rollout step: a later ask may change
        it, and its first ask's time stays."""
        holding = self._held.get(cluster)
        if holding is not None:
            holding.add(crs)
            return True
        if self._limit is not None:
            asks = self._asks.setdefault(cluster, {})
            before = asks.get(crs)
            if before is None:
                asks[crs] = (step, self._clock.now(), next(self._arrivals))
            else:
                asks[crs] = (step, before[1], before[2])
            was = self._entries.get(cluster)
            self._enqueue(cluster)
            entry = self._entries[cluster]
            if bisect.bisect_left(self._line, entry) >= self._limit - len(self._held):
                if was is not None and was != entry:
                    # Moved back in line (a later step): those now ahead of it may go.
                    self._next()
                return False
        # Its other waiting pairs go too once they ask again: the cluster holds a place.
        self._dequeue(cluster)
        self._held[cluster] = {crs}
        return True

    def release(self, cluster: ClusterKey, crs: str) -> tuple[ClusterKey, ...]:
        """This pair no longer updates (done, failed, no longer needs the revision, or
        gone); a waiting pair withdraws from the line. The cluster's place frees when
        it holds it for no pair any more.

        Wakes (and returns) the waiting clusters to look at now: the first ones in line,
        as many as there are free places. A pair that holds nothing and waits for
        nothing changes nothing and wakes nobody."""
        changed = False
        holding = self._held.get(cluster)
        if holding is not None and crs in holding:
            holding.remove(crs)
            if not holding:
                del self._held[cluster]
                changed = True
        left = self._leave_line(cluster, crs)
        return self._next() if changed or left else ()

    def step_aside(self, cluster: ClusterKey, crs: str) -> tuple[ClusterKey, ...]:
        """A waiting pair whose pass failed before it could ask again (its cluster could
        not be contacted, say) leaves the line, so it never holds back those behind it
        while a place is free; its retry asks again, behind them. A pair the cluster
        holds its place for keeps it. Wakes (and returns) the clusters to look at now,
        as ``release`` does."""
        return self._next() if self._leave_line(cluster, crs) else ()

    def step_aside_cluster(self, cluster: ClusterKey) -> tuple[ClusterKey, ...]:
        """Every waiting pair of a cluster steps aside, as ``step_aside`` does: its pass
        ended (timed out, crashed, cancelled) before those pairs recorded an outcome.
        A place the cluster holds stays held."""
        if cluster not in self._asks:
            return ()
        self._dequeue(cluster)
        return self._next()

    def _leave_line(self, cluster: ClusterKey, crs: str) -> bool:
        """The pair no longer waits: did it?"""
        asks = self._asks.get(cluster)
        if asks is None or crs not in asks:
            return False
        del asks[crs]
        if asks:
            self._enqueue(cluster)
        else:
            self._dequeue(cluster)
        return True

    def forget_cluster(self, cluster: ClusterKey) -> tuple[ClusterKey, ...]:
        """Every pair of a cluster is gone (the cluster was deleted, or handed to
        another replica). Wakes the clusters to look at now, as ``release`` does."""
        changed = self._held.pop(cluster, None) is not None
        if cluster in self._asks:
            self._dequeue(cluster)
            changed = True
        return self._next() if changed else ()

    def set_limit(self, limit: int | None) -> tuple[ClusterKey, ...]:
        """A new limit (a shard set's member count changed). Lowering it takes no place
        back: the holders finish, and nobody new goes until they are under the limit.
        Wakes (and returns) the waiting clusters that may go now."""
        self._limit = _checked(limit)
        return self._next()

    def _next(self) -> tuple[ClusterKey, ...]:
        free = len(self._line) if self._limit is None else self._limit - len(self._held)
        woken = tuple(entry[3] for entry in self._line[: max(free, 0)])
        if self._wake is not None:
            for namespace, name in woken:
                self._wake(namespace, name)
        return woken

    def _enqueue(self, cluster: ClusterKey) -> None:
        """Put a waiting cluster in line (again) at the place of its best pair."""
        self._remove_entry(cluster)
        entry = (*min(self._asks[cluster].values()), cluster)
        self._entries[cluster] = entry
        bisect.insort(self._line, entry)

    def _dequeue(self, cluster: ClusterKey) -> None:
        self._asks.pop(cluster, None)
        self._remove_entry(cluster)

    def _remove_entry(self, cluster: ClusterKey) -> None:
        entry = self._entries.pop(cluster, None)
        if entry is not None:
            del self._line[bisect.bisect_left(self._line, entry)]


def _checked(limit: int | None) -> int | None:
    if limit is not None and limit < 1:
        raise ValueError(f"the number of clusters updating at once must be at least 1, not {limit}")
    return limit
