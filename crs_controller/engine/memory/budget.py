"""The fleet-wide budget of clusters taking a new revision at once
(``run --max-updating-clusters``).

Before a CRS applies a new revision to a cluster where it is installed already, the
cluster reconcile asks here; first installs never ask. A cluster holds one place
however many CRSs it is updating. The others wait, each namespace in a line of its
own, in rollout-step order and, within a step, oldest first ask first. Namespaces take
turns as places free up: the one holding the fewest places goes next, then the one
served longest ago, so one tenant's thousands of waiters put another tenant's cluster
no further back than the next place given out. A holder whose passes keep failing
gives its place back once it has failed for ``FAILING_HOLD`` while its namespace holds
more than its share of the places and another namespace waits. ``release`` and
``forget_cluster`` answer which waiting clusters may go now, for the reconcile to put
in its Result: nobody here sees the queue.

Process state, kept in memory on purpose: a restart starts with every place free, and
the pairs part-way through a revision ask again on their first reconcile, in the order
they come (one with all of it, not Ready yet, is not counted again).
Times are the seconds of the injected clock, so tests drive the line without waiting.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections import Counter
from collections.abc import Callable

from crs_controller.core.clock import Clock

__all__ = ["FAILING_HOLD", "Budget", "ClusterKey"]

ClusterKey = tuple[str, str]  # namespace, cluster name

# How long a holder may keep failing before its place can go to another namespace:
# longer than the retry backoff's cap (5 minutes), so it has had several retries.
FAILING_HOLD = 600.0

# A waiting pair's place in line: its rollout step, its first ask, and its arrival
# number (two asks in one clock tick still queue in the order they came).
_Place = tuple[int, float, int]
# A waiting cluster in its namespace's line: the place of its best pair, the cluster.
_Entry = tuple[int, float, int, ClusterKey]
# A namespace's turn: places it holds, when last served, its next waiter, where that is.
_Turn = tuple[int, int, _Entry, int]


class Budget:
    """At most ``limit`` clusters hold a place (``None``: no limit); a cluster holding
    one is granted every further pair at once.

    Within a namespace the line is ordered by rollout step, then first ask: a waiter
    keeps its first ask while it waits, so nobody of its namespace and step gets ahead
    of it, and it moves up only as those ahead are granted or withdraw (a waiter whose
    pass fails steps aside, and asks again behind the others). Between namespaces,
    places go in turns (fewest held first), never by step or age: a tenant starting
    rollout after rollout holds back only its own later steps.
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
        self._holding: Counter[str] = Counter()  # namespace -> places held (never 0)
        self._failing: dict[ClusterKey, float] = {}  # holder -> its first failure in a row
        # waiting cluster -> CRS -> its place (never empty; never a holding cluster)
        self._asks: dict[ClusterKey, dict[str, _Place]] = {}
        # namespace -> one entry per waiting cluster, sorted (never empty): the lines
        self._lines: dict[str, list[_Entry]] = {}
        self._entries: dict[ClusterKey, _Entry] = {}
        self._turns = itertools.count(1)
        self._served: dict[str, int] = {}  # namespace holding or waiting -> its last turn

    @property
    def updating(self) -> int:
        """Clusters holding a place now (the gauge ``crs_updating_clusters``)."""
        return len(self._held)

    @property
    def waiting(self) -> int:
        """Clusters waiting for a place."""
        return len(self._entries)

    def may_go(self, cluster: ClusterKey) -> bool:
        """Would the cluster's next ask be granted now (it holds a place, or one is free
        and comes to it before those waiting)? Changes nothing."""
        if cluster in self._held or self._limit is None:
            return True
        if cluster not in self._entries:
            return len(self._entries) < self._free()
        return cluster in self._next_up()

    def pairs(self, cluster: ClusterKey) -> frozenset[str]:
        """The CRSs the cluster holds its place for or waits for."""
        return frozenset(self._held.get(cluster, ())) | frozenset(self._asks.get(cluster, ()))

    def ask(self, cluster: ClusterKey, crs: str, step: int) -> bool:
        """May this pair start (or go on) taking a new revision now?

        True: the cluster holds a place (it did already, for this CRS or another, or a
        place was free and came to it before those waiting). False: it waits,
        remembered from its first ask. ``step`` is the pair's rollout step: a later ask
        may change it, and its first ask's time stays."""
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
            if cluster not in self._next_up():
                if was is not None and was != self._entries[cluster]:
                    # Moved back in line (a later step): those now ahead of it may go.
                    self._next()
                return False
        # Its other waiting pairs go too once they ask again: the cluster holds a place.
        self._dequeue(cluster)
        self._hold(cluster, crs)
        return True

    def release(self, cluster: ClusterKey, crs: str) -> tuple[ClusterKey, ...]:
        """This pair no longer updates (done, failed, no longer needs the revision, or
        gone); a waiting pair withdraws from the line. The cluster's place frees when
        it holds it for no pair any more; while it holds it for others, it no longer
        counts as failing.

        Wakes (and returns) the waiting clusters to look at now: the first ones in turn,
        as many as there are free places. A pair that holds nothing and waits for
        nothing changes nothing and wakes nobody."""
        changed = False
        holding = self._held.get(cluster)
        if holding is not None and crs in holding:
            holding.remove(crs)
            self._failing.pop(cluster, None)
            if not holding:
                self._unhold(cluster)
                changed = True
        left = self._leave_line(cluster, crs)
        return self._next() if changed or left else ()

    def going(self, cluster: ClusterKey) -> None:
        """A pass of the cluster ended with a pair still updating, not failed (applied,
        not Ready yet): a place it holds is no longer held by a failure."""
        self._failing.pop(cluster, None)

    def failed(self, cluster: ClusterKey, crs: str) -> tuple[ClusterKey, ...]:
        """A pass of this pair failed. A waiting pair steps aside (``step_aside``). A
        cluster holding a place keeps it for its retry, as a Deployment's failing Pod
        counts against maxUnavailable, unless it has been failing for ``FAILING_HOLD``
        while its namespace holds more than its share and another namespace waits:
        then the place goes back, and its retry asks again, behind the others. Wakes
        (and returns) the clusters to look at now, as ``release`` does."""
        if cluster in self._held:
            return self._failing_holder(cluster)
        return self.step_aside(cluster, crs)

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
        A place the cluster holds stays held, as after a failed pass (``failed``)."""
        if cluster in self._held:
            return self._failing_holder(cluster)
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
        changed = cluster in self._held
        if changed:
            self._unhold(cluster)
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

    def _failing_holder(self, cluster: ClusterKey) -> tuple[ClusterKey, ...]:
        """A holder's pass failed: it gives its place back once it has failed for
        ``FAILING_HOLD`` while its namespace holds more than its share (the places over
        the namespaces holding or waiting, rounded down) and another namespace waits."""
        now = self._clock.now()
        since = self._failing.setdefault(cluster, now)
        if now - since < FAILING_HOLD or not self._over_share(cluster[0]):
            return ()
        self._unhold(cluster)
        return self._next()

    def _over_share(self, namespace: str) -> bool:
        if self._limit is None or not self._lines.keys() - {namespace}:
            return False
        share = self._limit // len(self._holding.keys() | self._lines.keys())
        return self._holding[namespace] > share

    def _free(self) -> int:
        return 0 if self._limit is None else max(self._limit - len(self._held), 0)

    def _next(self) -> tuple[ClusterKey, ...]:
        woken = tuple(self._next_up())
        if self._wake is not None:
            for namespace, name in woken:
                self._wake(namespace, name)
        return woken

    def _next_up(self) -> list[ClusterKey]:
        """The waiting clusters the free places go to, in turn: the namespace holding
        the fewest places, then the one served longest ago (never yet: first), then
        the one whose next waiter came first; within a namespace, its line's order."""
        count = len(self._entries) if self._limit is None else self._free()
        if count <= 0:
            return []
        turns: list[_Turn] = [
            (self._holding[ns], self._served.get(ns, 0), line[0], 0)
            for ns, line in self._lines.items()
        ]
        heapq.heapify(turns)
        tick, up = max(self._served.values(), default=0), list[ClusterKey]()
        while turns and len(up) < count:
            held, _, entry, at = heapq.heappop(turns)
            up.append(entry[3])
            line, tick = self._lines[entry[3][0]], tick + 1
            if at + 1 < len(line):
                heapq.heappush(turns, (held + 1, tick, line[at + 1], at + 1))
        return up

    def _hold(self, cluster: ClusterKey, crs: str) -> None:
        self._held[cluster] = {crs}
        self._holding[cluster[0]] += 1
        self._served[cluster[0]] = next(self._turns)

    def _unhold(self, cluster: ClusterKey) -> None:
        del self._held[cluster]
        self._failing.pop(cluster, None)
        namespace = cluster[0]
        self._holding[namespace] -= 1
        if not self._holding[namespace]:
            del self._holding[namespace]
        self._tidy(namespace)

    def _tidy(self, namespace: str) -> None:
        """A namespace holding and waiting for nothing is forgotten: back, it is served
        before namespaces already served."""
        if namespace not in self._holding and namespace not in self._lines:
            self._served.pop(namespace, None)

    def _enqueue(self, cluster: ClusterKey) -> None:
        """Put a waiting cluster in its namespace's line (again) at the place of its
        best pair."""
        self._remove_entry(cluster)
        entry = (*min(self._asks[cluster].values()), cluster)
        self._entries[cluster] = entry
        bisect.insort(self._lines.setdefault(cluster[0], []), entry)

    def _dequeue(self, cluster: ClusterKey) -> None:
        self._asks.pop(cluster, None)
        self._remove_entry(cluster)
        self._tidy(cluster[0])

    def _remove_entry(self, cluster: ClusterKey) -> None:
        entry = self._entries.pop(cluster, None)
        if entry is None:
            return
        line = self._lines[cluster[0]]
        del line[bisect.bisect_left(line, entry)]
        if not line:
            del self._lines[cluster[0]]


def _checked(limit: int | None) -> int | None:
    if limit is not None and limit < 1:
        raise ValueError(f"the number of clusters updating at once must be at least 1, not {limit}")
    return limit
