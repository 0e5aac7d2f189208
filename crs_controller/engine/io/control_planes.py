"""The control plane objects Clusters name: watched per kind, started when a Cluster
first names that kind, so a management cluster with one provider watches one kind.

Cluster API's control plane kinds are the providers' own CRDs (KubeadmControlPlane,
and others), so the kinds are found from the Clusters, in the control plane group
only (core/versions/cluster_version). Only kinds the API server serves are watched, at most
``MAX_KINDS`` (CRDs the operator installed: a tenant cannot add one). A kind named
but not served is remembered while a cached Cluster names it, and looked up again
every ``REDISCOVER_SECONDS`` (later when more are owed than the budget allows), so a
provider installed after its first Cluster is picked up. Looking kinds up costs at
most ``MAX_LOOKUPS`` discovery requests per ``REDISCOVER_SECONDS`` (one for the
group per round, one per kind), whatever the Clusters name: kinds never looked up go
first, then the longest waiting, taken in turns across the namespaces naming them,
so made-up kinds cost a tenant's neighbours little and never keep a served kind from
being read. The cache keeps two version strings per object. A change to one
enqueues the Clusters naming it.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter, deque
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from crs_controller.clients.api import KubeAPI
from crs_controller.core.errors import CRSError
from crs_controller.core.spec.objects import Cluster
from crs_controller.core.versions.cluster_version import (
    CONTROL_PLANE_GROUP,
    ClusterVersion,
    ControlPlane,
    ControlPlaneRef,
    RefProblem,
    cluster_version,
    parse_control_plane,
)
from crs_controller.engine.io.informer import Informer, WatchSpec
from crs_controller.engine.io.waiting import LoopClock, WaitingClock

log = structlog.get_logger(__name__)

MAX_KINDS = 10
MAX_LOOKUPS = 20  # discovery requests per REDISCOVER_SECONDS for kinds not watched
REDISCOVER_SECONDS = 60.0
Start = Callable[[Coroutine[Any, Any, None], str], object]
Key = tuple[str, str, str]  # namespace, kind, name of a control plane object


@dataclass
class _Lookup:
    """A kind named but not watched: why, and when it is looked up next."""

    why: str
    due: float
    order: int  # when it was named, among the kinds named
    looked: bool = False  # looked up at least once


def in_turns(kinds: Iterable[str], namespaces: Mapping[str, Iterable[str]]) -> list[str]:
    """``kinds`` (in the order they are owed a look-up) reordered so that the
    namespaces naming them take turns: however many kinds one namespace names, another
    namespace's first kind comes among the first."""
    turns: Counter[str] = Counter()
    ranked = []
    for order, kind in enumerate(kinds):
        spaces = list(namespaces.get(kind, ())) or [""]
        ranked.append((min(turns[namespace] for namespace in spaces), order, kind))
        turns.update(spaces)
    return [kind for _, _, kind in sorted(ranked)]


class ControlPlaneVersions(Protocol):
    """What a cluster reconcile reads: the version a cluster's control plane runs."""

    def of(self, cluster: Cluster) -> ClusterVersion: ...


class NoControlPlanes:
    """Every cluster's version is unknown (for worlds that watch no control planes)."""

    def of(self, cluster: Cluster) -> ClusterVersion:
        return ClusterVersion(upgrading=cluster.upgrading)


class ControlPlanes:
    """The watched control plane objects, and which Clusters name each."""

    def __init__(
        self,
        client: KubeAPI,
        namespace: str | None,
        changed: Callable[[str, str], None],
        *,
        rediscover: float = REDISCOVER_SECONDS,
        clock: WaitingClock | None = None,
    ) -> None:
        self._client = client
        self._clock: WaitingClock = clock if clock is not None else LoopClock()
        self._namespace = namespace
        self._changed = changed  # (namespace, cluster name): look at this cluster again
        self._rediscover = rediscover
        self._informers: dict[str, Informer[ControlPlane]] = {}  # served kinds
        self._unserved: dict[str, _Lookup] = {}  # kind named, not watched
        self._settled: dict[str, asyncio.Event] = {}  # kind -> read, or looked up
        self._named_by: dict[Key, set[str]] = {}  # control plane -> Clusters naming it
        self._naming: dict[str, Counter[str]] = {}  # kind -> namespace -> objects named
        self._spent: deque[float] = deque()  # when each recent discovery request went
        self._order = itertools.count()
        self._start: Start | None = None
        self._new = asyncio.Event()  # a kind was named that is not watched yet

    def attach(self, start: Start) -> None:
        """Discover and watch through ``start`` from now on."""
        self._start = start
        start(self._discovering(), "discover-control-planes")

    async def settled(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) until every kind named so far is read,
        known not to be served, or put off until there is room to look it up: at start,
        so that no cluster is first reconciled as if its version were unknown (which
        would write its binding twice for nothing)."""
        waits = [event.wait() for event in self._settled.values()]
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(*waits)
        except TimeoutError:
            unread = sorted(k for k, e in self._settled.items() if not e.is_set())
            log.warning("control plane kinds not read in time", kinds=unread[:MAX_KINDS])

    def track(self, old: Cluster | None, new: Cluster | None) -> None:
        """A Cluster changed: remember which control plane it names, and look up that
        kind if it is new; a kind no cached Cluster names any more is forgotten."""
        before, after = _named(old), _named(new)
        if after is not None:
            self._add(*after)
        if before is not None and before != after:
            self._remove(*before)

    def of(self, cluster: Cluster) -> ClusterVersion:
        ref = cluster.control_plane
        if ref is None:
            return ClusterVersion(upgrading=cluster.upgrading)
        if isinstance(ref, RefProblem):
            return ClusterVersion(None, ref.message, cluster.upgrading)
        informer = self._informers.get(ref.kind)
        if informer is None or not informer.synced.is_set():
            lookup = self._unserved.get(ref.kind)
            why = lookup.why if lookup else f"its {ref.kind} has not been read yet"
            return ClusterVersion(None, why, cluster.upgrading)
        return cluster_version(
            upgrading_condition=cluster.upgrading,
            wanted=cluster.topology_version,
            control_plane=informer.get(cluster.namespace, ref.name),
        )

    def _add(self, key: Key, cluster: str) -> None:
        named = self._named_by.setdefault(key, set())
        if not named:
            namespace, kind, _ = key
            self._naming.setdefault(kind, Counter())[namespace] += 1
        named.add(cluster)
        self._name(key[1])

    def _remove(self, key: Key, cluster: str) -> None:
        named = self._named_by.get(key)
        if named is None:
            return
        named.discard(cluster)
        if named:
            return
        del self._named_by[key]
        namespace, kind, _ = key
        naming = self._naming.get(kind, Counter())
        naming[namespace] -= 1
        if naming[namespace] <= 0:
            del naming[namespace]
        if not naming:
            self._naming.pop(kind, None)
            self._forget(kind)

    def _name(self, kind: str) -> None:
        if kind in self._informers or kind in self._unserved:
            return
        why = f"its {kind} has not been read yet"
        self._unserved[kind] = _Lookup(why, self._clock.now(), next(self._order))
        self._settled[kind] = asyncio.Event()
        self._new.set()

    def _forget(self, kind: str) -> None:
        """No cached Cluster names ``kind``: stop looking it up (a served kind stays
        watched: the operator installed it, and there are few)."""
        if self._unserved.pop(kind, None) is not None:
            self._settled.pop(kind).set()  # nobody waits for it any more

    async def _discovering(self) -> None:
        """Look up the kinds owed a look-up (named and never looked up, or not served
        ``rediscover`` seconds ago) as soon as the budget of discovery requests lets."""
        while True:
            self._new.clear()
            now = self._clock.now()
            owed = [kind for kind, lookup in self._unserved.items() if lookup.due <= now]
            room = self._room(now) - 1  # one request finds the group's version
            if owed and room > 0:
                kinds = self._in_order(owed)[:room]
                self._spent.extend([now] * (1 + len(kinds)))
                await self._look_up(kinds)
                continue
            for kind in owed:  # put off for want of room: nothing to wait for now
                self._settled[kind].set()
            wake = self._spent[0] + self._rediscover if owed else self._next_due()
            await self._clock.sleep_until(wake, self._new)

    def _room(self, now: float) -> int:
        """How many discovery requests may go now."""
        while self._spent and self._spent[0] <= now - self._rediscover:
            self._spent.popleft()
        return MAX_LOOKUPS - len(self._spent)

    def _in_order(self, kinds: list[str]) -> list[str]:
        """Kinds never looked up first, then the longest waiting; namespaces in turns."""
        first = sorted((k for k in kinds if not self._unserved[k].looked), key=self._waited)
        again = sorted((k for k in kinds if self._unserved[k].looked), key=self._waited)
        return in_turns(first, self._naming) + in_turns(again, self._naming)

    def _waited(self, kind: str) -> tuple[float, int]:
        lookup = self._unserved[kind]
        return lookup.due, lookup.order

    def _next_due(self) -> float | None:
        return min((lookup.due for lookup in self._unserved.values()), default=None)

    async def _look_up(self, kinds: list[str]) -> None:
        try:
            api_version = await self._client.preferred_version(CONTROL_PLANE_GROUP)
            if api_version is not None:
                self._client.forget_discovery(api_version)  # CRDs may have come
        except CRSError as exc:
            log.warning("control plane group not discovered", error=str(exc))
            later = self._clock.now() + self._rediscover  # retried then
            for lookup in self._unserved.values():
                lookup.due = max(lookup.due, later)
            return
        for kind in kinds:
            served = api_version is not None and await self._serves(api_version, kind)
            if kind in self._unserved:  # still named
                self._found(api_version, kind, served)

    def _found(self, api_version: str | None, kind: str, served: bool) -> None:
        if served and len(self._informers) < MAX_KINDS:
            assert api_version is not None
            self._watch(api_version, kind)
            return
        lookup = self._unserved[kind]
        lookup.looked, lookup.due = True, self._clock.now() + self._rediscover
        why = (
            f"more than {MAX_KINDS} control plane kinds are served"
            if served
            else f"{kind} is not served in {CONTROL_PLANE_GROUP}"
        )
        if lookup.why != why:  # their outcomes say why, once
            lookup.why = why
            self._enqueue_kind(kind)
        self._settled[kind].set()

    async def _serves(self, api_version: str, kind: str) -> bool:
        try:
            await self._client.resource_info(api_version, kind)
        except CRSError:
            return False
        return True

    def _watch(self, api_version: str, kind: str) -> None:
        del self._unserved[kind]
        informer = Informer(
            self._client,
            WatchSpec(api_version, kind, self._namespace),
            parse_control_plane,
            self._on_change(kind),
            clock=self._clock,
        )
        self._informers[kind] = informer
        assert self._start is not None
        self._start(self._run(kind, informer), f"watch-{kind}")

    async def _run(self, kind: str, informer: Informer[ControlPlane]) -> None:
        await asyncio.gather(informer.run(), self._read(kind, informer))

    async def _read(self, kind: str, informer: Informer[ControlPlane]) -> None:
        """Once the kind is read, clusters told "not read yet" (also those whose
        control plane object does not exist) are looked at again."""
        await informer.synced.wait()
        self._settled[kind].set()
        self._enqueue_kind(kind)

    def _on_change(self, kind: str) -> Callable[[ControlPlane | None, ControlPlane | None], None]:
        def handler(old: ControlPlane | None, new: ControlPlane | None) -> None:
            cp = new or old
            assert cp is not None
            for cluster in sorted(self._named_by.get((cp.namespace, kind, cp.name), ())):
                self._changed(cp.namespace, cluster)

        return handler

    def _enqueue_kind(self, kind: str) -> None:
        for (namespace, named_kind, _), clusters in list(self._named_by.items()):
            if named_kind == kind:
                for cluster in sorted(clusters):
                    self._changed(namespace, cluster)


def _named(cluster: Cluster | None) -> tuple[Key, str] | None:
    """The control plane object a Cluster names, and the Cluster's name."""
    if cluster is None or not isinstance(cluster.control_plane, ControlPlaneRef):
        return None
    ref = cluster.control_plane
    return (cluster.namespace, ref.kind, ref.name), cluster.name
