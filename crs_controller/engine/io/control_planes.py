"""The control plane objects Clusters name: watched per kind, started when a Cluster
first names that kind, so a management cluster with one provider watches one kind.

Cluster API's control plane kinds are the providers' own CRDs (KubeadmControlPlane,
and others), so the kinds are found from the Clusters, in the control plane group
only (core/versions/cluster_version). Only kinds the API server serves are watched, at most
``MAX_KINDS`` (CRDs the operator installed: a tenant cannot add one). Kinds named
but not served are looked up again (one discovery of the group each) every
``REDISCOVER_SECONDS`` while any is left, so a provider installed after its first
Cluster is picked up; at most ``MAX_NAMED`` such names are remembered, so made-up
kinds cost a tenant's neighbours little and never take a served kind's place. The
cache keeps two version strings per object. A change to one enqueues the Clusters
naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Callable, Coroutine
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
from crs_controller.engine.io.waiting import WaitingClock

log = structlog.get_logger(__name__)

MAX_KINDS = 10
MAX_NAMED = 20
REDISCOVER_SECONDS = 60.0
Start = Callable[[Coroutine[Any, Any, None], str], object]


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
        self._clock = clock
        self._namespace = namespace
        self._changed = changed  # (namespace, cluster name): look at this cluster again
        self._rediscover = rediscover
        self._informers: dict[str, Informer[ControlPlane]] = {}  # served kinds
        self._unserved: dict[str, str] = {}  # kind named, not watched -> why
        self._settled: dict[str, asyncio.Event] = {}  # kind -> read, or looked up
        self._named_by: dict[tuple[str, str, str], set[str]] = defaultdict(set)
        self._start: Start | None = None
        self._new = asyncio.Event()  # a kind was named that is not watched yet

    def attach(self, start: Start) -> None:
        """Discover and watch through ``start`` from now on."""
        self._start = start
        start(self._discovering(), "discover-control-planes")

    async def settled(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) until every kind named so far is read or
        known not to be served: at start, so that no cluster is first reconciled as if
        its version were unknown (which would write its binding twice for nothing)."""
        waits = [event.wait() for event in self._settled.values()]
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(*waits)
        except TimeoutError:
            unread = sorted(k for k, e in self._settled.items() if not e.is_set())
            log.warning("control plane kinds not read in time", kinds=unread)

    def track(self, old: Cluster | None, new: Cluster | None) -> None:
        """A Cluster changed: remember which control plane it names, and look up that
        kind if it is new."""
        for cluster, keep in ((old, False), (new, True)):
            if cluster is None or not isinstance(cluster.control_plane, ControlPlaneRef):
                continue
            key = (cluster.namespace, cluster.control_plane.kind, cluster.control_plane.name)
            if keep:
                self._named_by[key].add(cluster.name)
                self._name(cluster.control_plane.kind)
            else:
                self._named_by[key].discard(cluster.name)
                if not self._named_by[key]:
                    del self._named_by[key]

    def of(self, cluster: Cluster) -> ClusterVersion:
        ref = cluster.control_plane
        if ref is None:
            return ClusterVersion(upgrading=cluster.upgrading)
        if isinstance(ref, RefProblem):
            return ClusterVersion(None, ref.message, cluster.upgrading)
        informer = self._informers.get(ref.kind)
        if informer is None or not informer.synced.is_set():
            why = self._unserved.get(ref.kind) or f"its {ref.kind} has not been read yet"
            return ClusterVersion(None, why, cluster.upgrading)
        return cluster_version(
            upgrading_condition=cluster.upgrading,
            wanted=cluster.topology_version,
            control_plane=informer.get(cluster.namespace, ref.name),
        )

    def _name(self, kind: str) -> None:
        if kind in self._informers or kind in self._unserved:
            return
        if len(self._unserved) >= MAX_NAMED:
            return  # not looked up: its Clusters say "not read yet"
        self._unserved[kind] = f"its {kind} has not been read yet"
        self._settled[kind] = asyncio.Event()
        self._new.set()

    async def _discovering(self) -> None:
        """Look up the named kinds that are not watched yet: at once when one is named,
        and again every ``rediscover`` seconds while any is not served."""
        while True:
            await self._new.wait()
            self._new.clear()
            await self._look_up()
            if self._unserved:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._rediscover):
                        await self._new.wait()
                self._new.set()

    async def _look_up(self) -> None:
        try:
            api_version = await self._client.preferred_version(CONTROL_PLANE_GROUP)
            if api_version is not None:
                self._client.forget_discovery(api_version)  # CRDs may have come
        except CRSError as exc:
            log.warning("control plane group not discovered", error=str(exc))
            return  # retried at the next round
        for kind in list(self._unserved):
            served = api_version is not None and await self._serves(api_version, kind)
            if served and len(self._informers) < MAX_KINDS:
                assert api_version is not None
                self._watch(api_version, kind)
                continue
            why = (
                f"more than {MAX_KINDS} control plane kinds are served"
                if served
                else f"{kind} is not served in {CONTROL_PLANE_GROUP}"
            )
            if self._unserved[kind] != why:  # their outcomes say why, once
                self._unserved[kind] = why
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
