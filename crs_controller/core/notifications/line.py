"""One receiver's line of waiting notices: bounded, fair between tenants, repeats
merged. Pure: the sender (``engine.runtime.notifying``) adds, takes and counts.

A notice for a CRS and reason already waiting is merged into the waiting one: the
newer message and revision, the clusters of both. A CRS's notices leave in the order
they came, and its last to leave is its newest: the merged one keeps its place when
it is its CRS's last waiting, else it moves right behind that CRS's last (its later
notices of other reasons must not go after it), never to the end of the line: a CRS
changing reasons faster than the receiver takes would else be put behind every
other notice each time, and never sent. So a CRS holds at most one place per
reason, however often it is told, and its places move up as the line is taken.

A full line drops from the tenant (namespace) holding the most notices, and within
it from the CRS holding the most, its oldest. A tie with the new notice's namespace
drops from that namespace: a tenant cannot push out a notice of another holding as
many, so the only notice of another tenant is never dropped while this one holds
more than one; when every tenant holds one, the new notice is the one dropped.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Hashable, Sequence

from crs_controller.core.notifications.payloads import CLUSTERS_SHOWN, Notice


class Line:
    def __init__(self, limit: int) -> None:
        self._limit = max(limit, 1)
        self._waiting: list[Notice] = []  # oldest first

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, told: Notice) -> Notice | None:
        """Queue ``told`` (or merge it into the notice of its CRS and reason); the
        notice dropped to make room, if one was (``told`` itself, maybe)."""
        for at, waiting in enumerate(self._waiting):
            if same_subject(waiting, told):
                self._move_behind_its_crs(at, merged(waiting, told))
                return None
        self._waiting.append(told)
        if len(self._waiting) <= self._limit:
            return None
        return self._waiting.pop(victim(self._waiting, told))

    def _move_behind_its_crs(self, at: int, notice: Notice) -> None:
        """Put ``notice``, merged into the one waiting ``at``, right behind its CRS's
        last waiting notice (where it is, when that is itself): never at the end of the
        line, so a CRS told faster than the receiver takes still moves up."""
        last = max(i for i, n in enumerate(self._waiting) if same_crs(n, notice))
        del self._waiting[at]
        self._waiting.insert(last, notice)

    def take(self) -> Notice:
        """The oldest waiting notice, which leaves the line (IndexError when none)."""
        return self._waiting.pop(0)


def same_crs(a: Notice, b: Notice) -> bool:
    return (a.namespace, a.crs) == (b.namespace, b.crs)


def same_subject(a: Notice, b: Notice) -> bool:
    return same_crs(a, b) and a.reason == b.reason


def merged(older: Notice, newer: Notice) -> Notice:
    """``newer`` naming the clusters of both (bounded as a notice's are); the clusters
    each left out are added up, so one left out of both may count twice."""
    names = sorted(set(older.clusters) | set(newer.clusters))
    shown = tuple(names[:CLUSTERS_SHOWN])
    omitted = older.clusters_omitted + newer.clusters_omitted + len(names) - len(shown)
    return dataclasses.replace(newer, clusters=shown, clusters_omitted=omitted)


def victim(waiting: Sequence[Notice], told: Notice) -> int:
    """Where in ``waiting`` (``told`` last among them) the notice to drop is: the
    oldest of the CRS holding the most in the namespace holding the most (see the
    module's docstring for ties)."""
    namespace = _most(waiting, lambda n: n.namespace, prefer=told.namespace)
    mine = [n for n in waiting if n.namespace == namespace]
    crs = _most(mine, lambda n: n.crs, prefer=None)
    return next(at for at, n in enumerate(waiting) if (n.namespace, n.crs) == (namespace, crs))


def _most(
    notices: Sequence[Notice], key: Callable[[Notice], Hashable], prefer: Hashable | None
) -> Hashable:
    """The key most ``notices`` have: ``prefer`` among those tied, else the one whose
    first notice is the oldest."""
    counts = Counter(key(n) for n in notices)
    most = max(counts.values())
    if prefer is not None and counts[prefer] == most:
        return prefer
    return next(key(n) for n in notices if counts[key(n)] == most)
