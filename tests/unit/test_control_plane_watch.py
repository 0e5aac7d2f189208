"""The control plane watch (engine/io/control_planes) against an in-memory API server
that serves some kinds of the control plane group: served kinds are watched and give
each Cluster its version, kinds not served say so and are looked up again (a provider
installed later is picked up), only served kinds count against the cap, and a change
to a control plane object looks at the Clusters naming it again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest

from crs_controller.clients.api import Obj, ResourceInfo
from crs_controller.core.errors import NotFound
from crs_controller.core.spec.objects import Cluster, parse_cluster
from crs_controller.core.versions.cluster_version import CONTROL_PLANE_GROUP
from crs_controller.core.versions.ranges import parse_version
from crs_controller.engine.io.control_planes import MAX_KINDS, ControlPlanes

from .memory_kube import MemoryKube

API = f"{CONTROL_PLANE_GROUP}/v1beta2"
NS = "fleet"


class ProviderServer(MemoryKube):
    """Serves the control plane kinds in ``served``; its watches wait for ever."""

    def __init__(self, *served: str) -> None:
        super().__init__("management")
        self.served = set(served)
        self.lookups = 0

    async def preferred_version(self, group: str) -> str | None:
        await asyncio.sleep(0)
        self.lookups += 1
        return API if group == CONTROL_PLANE_GROUP else None

    async def resource_info(self, api_version: str, kind: str) -> ResourceInfo:
        if api_version == API and kind not in self.served:
            raise NotFound(f"no kind {kind}", status=404)
        return await super().resource_info(api_version, kind)

    async def watch(self, *args: Any, **kwargs: Any) -> AsyncIterator[tuple[str, Obj]]:
        await asyncio.Event().wait()
        yield ("BOOKMARK", {})


def cluster(name: str, kind: str = "KubeadmControlPlane") -> Cluster:
    ref = {"apiGroup": CONTROL_PLANE_GROUP, "kind": kind, "name": f"{name}-cp"}
    return parse_cluster(
        {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"controlPlaneRef": ref},
        }
    )


def control_plane(name: str, version: str, kind: str = "KubeadmControlPlane") -> Obj:
    return {
        "apiVersion": API,
        "kind": kind,
        "metadata": {"name": f"{name}-cp", "namespace": NS},
        "spec": {"version": version},
        "status": {"version": version},
    }


@pytest.fixture
async def tasks() -> AsyncIterator[list[asyncio.Task[Any]]]:
    started: list[asyncio.Task[Any]] = []
    yield started
    for task in started:
        task.cancel()
    await asyncio.gather(*started, return_exceptions=True)


def watcher(
    server: ProviderServer, tasks: list[asyncio.Task[Any]], changed: list[tuple[str, str]]
) -> ControlPlanes:
    planes = ControlPlanes(server, None, lambda ns, name: changed.append((ns, name)), rediscover=0)

    def start(coro: Coroutine[Any, Any, None], name: str) -> None:
        tasks.append(asyncio.create_task(coro, name=name))

    planes.attach(start)
    return planes


async def until(check: Any, rounds: int = 1000) -> None:
    """Let the watcher's tasks run until ``check()`` holds (a positive sign)."""
    for _ in range(rounds):
        if check():
            return
        await asyncio.sleep(0)
    raise AssertionError("not reached")


async def test_a_served_kind_gives_each_cluster_the_version_it_runs(
    tasks: list[asyncio.Task[Any]],
) -> None:
    server = ProviderServer("KubeadmControlPlane")
    await server.create(control_plane("a", "v1.34.2"))
    changed: list[tuple[str, str]] = []
    planes = watcher(server, tasks, changed)
    a = cluster("a")
    assert planes.of(a).version is None  # not read yet
    planes.track(None, a)
    await planes.settled(timeout=5)
    assert planes.of(a).version == parse_version("v1.34.2")
    assert (NS, "a") in changed  # looked at again once the kind was read
    # A Cluster whose object does not exist: unknown, and why.
    missing = cluster("b")
    planes.track(None, missing)
    assert planes.of(missing).version is None
    assert "not found" in planes.of(missing).unknown


async def test_a_kind_not_served_says_so_and_is_watched_once_it_is(
    tasks: list[asyncio.Task[Any]],
) -> None:
    server = ProviderServer()
    await server.create(control_plane("a", "v1.33.0", kind="K3sControlPlane"))
    changed: list[tuple[str, str]] = []
    planes = watcher(server, tasks, changed)
    a = cluster("a", kind="K3sControlPlane")
    planes.track(None, a)
    await planes.settled(timeout=5)
    assert planes.of(a).unknown == f"K3sControlPlane is not served in {CONTROL_PLANE_GROUP}"
    told = changed.count((NS, "a"))
    assert told == 1
    # Looked up again (every rediscovery interval; 0 here): told once, not every round.
    lookups = server.lookups
    await until(lambda: server.lookups > lookups + 2)
    assert changed.count((NS, "a")) == told
    # The provider is installed: the kind is watched and the version known.
    server.served.add("K3sControlPlane")
    await until(lambda: planes.of(a).version is not None)
    assert planes.of(a).version == parse_version("v1.33.0")


async def test_only_served_kinds_count_against_the_cap(tasks: list[asyncio.Task[Any]]) -> None:
    kinds = [f"Made{n}ControlPlane" for n in range(MAX_KINDS + 5)]
    server = ProviderServer("KubeadmControlPlane", *kinds[:MAX_KINDS])
    await server.create(control_plane("real", "v1.34.0"))
    changed: list[tuple[str, str]] = []
    planes = watcher(server, tasks, changed)
    # Made-up kinds a tenant names first do not keep a served kind out...
    for n, kind in enumerate(kinds[MAX_KINDS:]):
        planes.track(None, cluster(f"fake{n}", kind=kind))
    real = cluster("real")
    planes.track(None, real)
    await planes.settled(timeout=5)
    assert planes.of(real).version == parse_version("v1.34.0")
    # ...but served kinds beyond the cap are not watched.
    for n, kind in enumerate(kinds[:MAX_KINDS]):
        planes.track(None, cluster(f"served{n}", kind=kind))
    await planes.settled(timeout=5)
    refused = [
        k
        for n, k in enumerate(kinds[:MAX_KINDS])
        if "more than" in planes.of(cluster(f"served{n}", kind=k)).unknown
    ]
    assert refused == [kinds[MAX_KINDS - 1]]


async def test_a_changed_control_plane_looks_at_its_clusters_again(
    tasks: list[asyncio.Task[Any]],
) -> None:
    server = ProviderServer("KubeadmControlPlane")
    changed: list[tuple[str, str]] = []
    planes = watcher(server, tasks, changed)
    a = cluster("a")
    planes.track(None, a)
    await planes.settled(timeout=5)
    changed.clear()
    informer = planes._informers["KubeadmControlPlane"]
    new, old = informer.put(control_plane("a", "v1.35.0")), None
    informer._handler(old, new)
    assert changed == [(NS, "a")]
    assert planes.of(a).version == parse_version("v1.35.0")
    # A Cluster that no longer names it is not looked at for it.
    planes.track(a, None)
    changed.clear()
    informer._handler(new, new)
    assert changed == []
