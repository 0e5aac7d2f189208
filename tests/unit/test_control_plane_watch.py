"""The control plane watch (engine/io/control_planes) against an in-memory API server
that serves some kinds of the control plane group: served kinds are watched and give
each Cluster its version, kinds not served say so and are looked up again (a provider
installed later is picked up), only served kinds count against the cap, made-up
kinds never keep a served kind from being read and are forgotten with their Clusters,
looking kinds up costs a bounded number of discovery requests, and a change to a
control plane object looks at the Clusters naming it again."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest

from crs_controller.clients.api import Obj, ResourceInfo
from crs_controller.core.errors import NotFound
from crs_controller.core.spec.objects import Cluster, parse_cluster
from crs_controller.core.versions.cluster_version import CONTROL_PLANE_GROUP
from crs_controller.core.versions.ranges import parse_version
from crs_controller.engine.io.control_planes import (
    MAX_KINDS,
    MAX_LOOKUPS,
    REDISCOVER_SECONDS,
    ControlPlanes,
    in_turns,
)

from .fake_clock import FakeClock
from .memory_kube import MemoryKube

API = f"{CONTROL_PLANE_GROUP}/v1beta2"
NS = "fleet"


class ProviderServer(MemoryKube):
    """Serves the control plane kinds in ``served``; its watches wait for ever."""

    def __init__(self, *served: str) -> None:
        super().__init__("management")
        self.served = set(served)
        self.lookups = 0  # of the group's version
        self.asked: Counter[str] = Counter()  # kind -> look-ups

    async def preferred_version(self, group: str) -> str | None:
        await asyncio.sleep(0)
        self.lookups += 1
        return API if group == CONTROL_PLANE_GROUP else None

    async def resource_info(self, api_version: str, kind: str) -> ResourceInfo:
        self.asked[kind] += 1
        if api_version == API and kind not in self.served:
            raise NotFound(f"no kind {kind}", status=404)
        return await super().resource_info(api_version, kind)

    async def watch(self, *args: Any, **kwargs: Any) -> AsyncIterator[tuple[str, Obj]]:
        await asyncio.Event().wait()
        yield ("BOOKMARK", {})


def cluster(name: str, kind: str = "KubeadmControlPlane", namespace: str = NS) -> Cluster:
    ref = {"apiGroup": CONTROL_PLANE_GROUP, "kind": kind, "name": f"{name}-cp"}
    return parse_cluster(
        {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": namespace},
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
    server: ProviderServer,
    tasks: list[asyncio.Task[Any]],
    changed: list[tuple[str, str]],
    clock: FakeClock | None = None,
) -> ControlPlanes:
    """Looks kinds up again at once, or every ``REDISCOVER_SECONDS`` on ``clock``."""
    planes = ControlPlanes(
        server,
        None,
        lambda ns, name: changed.append((ns, name)),
        rediscover=0 if clock is None else REDISCOVER_SECONDS,
        clock=clock,
    )

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


async def idle(clock: FakeClock) -> None:
    """Until the watcher waits on the clock: it did all it may do by now."""
    await until(lambda: bool(clock.deadlines()))


def made_up(count: int, prefix: str = "Bogus", namespace: str = "tenant") -> list[Cluster]:
    """Clusters of one tenant, each naming a control plane kind nobody serves."""
    return [cluster(f"{prefix}{n}".lower(), f"{prefix}{n}", namespace) for n in range(count)]


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


async def test_made_up_kinds_never_keep_a_served_kind_from_being_read(
    tasks: list[asyncio.Task[Any]],
) -> None:
    server = ProviderServer("KubeadmControlPlane")
    await server.create(control_plane("real", "v1.34.0"))
    clock = FakeClock()
    planes = watcher(server, tasks, [], clock)
    fakes = made_up(MAX_LOOKUPS * 3)
    for fake in fakes:
        planes.track(None, fake)
    await idle(clock)
    async with asyncio.timeout(1):  # the kinds put off for want of room hold nobody up
        await planes.settled(timeout=REDISCOVER_SECONDS)
    assert "is not served" in planes.of(fakes[0]).unknown
    # A neighbour's Cluster names a served kind nobody named before: it is read once
    # there is room, ahead of the tenant's kinds not looked up yet.
    real = cluster("real")
    planes.track(None, real)
    clock.advance(REDISCOVER_SECONDS)
    await until(lambda: planes.of(real).version is not None)
    assert planes.of(real).version == parse_version("v1.34.0")
    assert "has not been read yet" in planes.of(fakes[-1]).unknown


async def test_made_up_kinds_are_forgotten_with_the_clusters_naming_them(
    tasks: list[asyncio.Task[Any]],
) -> None:
    server = ProviderServer("KubeadmControlPlane")
    await server.create(control_plane("real", "v1.34.0"))
    clock = FakeClock()
    planes = watcher(server, tasks, [], clock)
    waiting = cluster("waiting", "K3sControlPlane")  # its provider comes later
    fakes = made_up(MAX_LOOKUPS)
    for named in (waiting, *fakes):
        planes.track(None, named)
    await idle(clock)
    planes.track(cluster("ghost", "K3sControlPlane"), None)  # never seen: changes nothing
    for fake in fakes:
        planes.track(fake, fake)  # still naming it: nothing new to look up
        planes.track(fake, None)
    asked = Counter(server.asked)
    clock.advance(REDISCOVER_SECONDS)
    await until(lambda: server.asked["K3sControlPlane"] > asked["K3sControlPlane"])
    await idle(clock)
    assert server.asked - asked == Counter({"K3sControlPlane": 1})  # the fakes: never again
    # A served kind named afterwards is read, as is a forgotten kind named again.
    real, again = cluster("real"), fakes[0]
    planes.track(None, real)
    planes.track(None, again)
    await until(lambda: planes.of(real).version is not None)
    await until(lambda: "is not served" in planes.of(again).unknown)


async def test_looking_kinds_up_costs_at_most_max_lookups_requests_a_window(
    tasks: list[asyncio.Task[Any]],
) -> None:
    server = ProviderServer()
    clock = FakeClock()
    planes = watcher(server, tasks, [], clock)

    def requests() -> int:
        return server.lookups + sum(server.asked.values())

    kept = made_up(3, prefix="Kept")
    for named in kept:
        planes.track(None, named)
    await idle(clock)
    assert requests() == 1 + len(kept)  # the group's version, then each kind
    # Clusters naming ever new made-up kinds come and go, far more than the budget.
    for churned in made_up(MAX_LOOKUPS * 5, prefix="Churn"):
        planes.track(None, churned)
        await idle(clock)
        planes.track(churned, None)
    assert requests() <= MAX_LOOKUPS
    # Each kind still named is looked up again once a window, no more.
    for window in range(1, 4):
        clock.advance(REDISCOVER_SECONDS)
        looked = 1 + window
        await until(lambda: server.asked["Kept2"] == looked)  # noqa: B023 (awaited here)
        await idle(clock)
        assert [server.asked[f"Kept{n}"] for n in range(3)] == [looked] * 3
        assert requests() <= MAX_LOOKUPS * looked


def test_namespaces_take_turns() -> None:
    named_in = {"A1": ["a"], "A2": ["a"], "A3": ["a"], "B1": ["b"], "AB": ["a", "b"]}
    assert in_turns(["A1", "A2", "A3", "B1"], named_in) == ["A1", "B1", "A2", "A3"]
    assert in_turns(["A1", "AB", "B1"], named_in) == ["A1", "AB", "B1"]
    assert in_turns(["A1", "B1", "AB"], named_in) == ["A1", "B1", "AB"]
    assert in_turns(["X"], {}) == ["X"]
