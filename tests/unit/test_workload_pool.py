"""The bound on workload clients holding connections and a TLS context: never more
than the bound besides those with a request under way, released ones built again from
their own cluster's kubeconfig when used next. Time is a fake clock."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from dataclasses import dataclass, field
from typing import Any

import httpcore
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.clients.kube import Transport
from crs_controller.clients.kubeconfig import Endpoint
from crs_controller.clients.transport import KEEPALIVE_SECONDS
from crs_controller.clients.workload import WorkloadClients, kubeconfig_secret_name

DISCOVERY = {"resources": [{"name": "namespaces", "kind": "Namespace", "namespaced": False}]}


def kubeconfig_secret(index: int) -> dict[str, Any]:
    """Cluster ``index``'s kubeconfig Secret: its own server and token."""
    name = f"c{index}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": f"https://{name}.example:6443"}}],
        "users": [{"name": "admin", "user": {"token": f"token-{name}"}}],
        "contexts": [{"name": "admin", "context": {"cluster": name, "user": "admin"}}],
        "current-context": "admin",
    }
    value = base64.b64encode(yaml.safe_dump(config).encode()).decode()
    return {"metadata": {"name": kubeconfig_secret_name(name)}, "data": {"value": value}}


@dataclass(eq=False)
class Pool:
    """One client's connections, answering from memory."""

    net: Net
    server: str
    open: bool = True
    hold: asyncio.Event | None = None  # a request waits for it when set
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        assert self.open, "a request on a closed pool"
        headers = {k.decode().lower(): v.decode() for k, v in request.headers}
        self.net.seen.append((self.server, headers["host"], headers["authorization"]))
        self.arrived.set()
        if self.hold is not None:
            await self.hold.wait()
        target = request.url.target.decode()
        body = DISCOVERY if target == "/api/v1" else {"kind": "Namespace", "metadata": {}}
        headers = [(b"Content-Type", b"application/json")]
        return httpcore.Response(200, headers=headers, content=json.dumps(body).encode())

    async def aclose(self) -> None:
        self.open = False


@dataclass
class Net:
    """Every pool built, with the server and TLS context it was built for."""

    pools: list[Pool] = field(default_factory=list)
    contexts: list[ssl.SSLContext] = field(default_factory=list)
    seen: list[tuple[str, str, str]] = field(default_factory=list)

    def connect(self, endpoint: Endpoint, context: ssl.SSLContext) -> Transport:
        self.contexts.append(context)
        self.pools.append(Pool(self, endpoint.server))
        return self.pools[-1]

    def open(self) -> int:
        return sum(pool.open for pool in self.pools)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def clients(net: Net, warm: int, clock: Clock | None = None) -> WorkloadClients:
    return WorkloadClients(warm=warm, connect=net.connect, clock=clock or Clock())


async def use(workloads: WorkloadClients, index: int) -> None:
    client = await workloads.get("ns", f"c{index}", kubeconfig_secret(index))
    assert await client.get("v1", "Namespace", "x") is not None


async def test_past_the_bound_the_least_recently_used_release_their_connections() -> None:
    net = Net()
    workloads = clients(net, warm=3)
    for index in range(10):
        await use(workloads, index)
        assert net.open() <= 3
    await use(workloads, 10)
    assert workloads.warm == 3
    assert [pool.server for pool in net.pools if pool.open] == [
        f"https://c{i}.example:6443" for i in (8, 9, 10)
    ]
    await workloads.close()
    assert net.open() == 0


async def test_a_released_client_is_built_again_from_its_own_kubeconfig() -> None:
    net = Net()
    workloads = clients(net, warm=1)
    first = await workloads.get("ns", "c0", kubeconfig_secret(0))
    await use(workloads, 0)
    await use(workloads, 1)  # c0 lets go of its connections and TLS context
    assert not first.connected
    built = len(net.contexts)
    net.seen.clear()
    await use(workloads, 0)
    again = await workloads.get("ns", "c0", kubeconfig_secret(0))
    assert again is first  # the same client: its discovery kept, nothing parsed again
    assert len(net.contexts) == built + 1  # a new TLS context for it
    # Discovery is not asked again; the request went to c0's server with c0's token.
    assert net.seen == [("https://c0.example:6443", "c0.example:6443", "Bearer token-c0")]
    await workloads.close()


async def test_a_client_idle_past_the_keep_alive_releases_its_connections() -> None:
    net, clock = Net(), Clock()
    workloads = clients(net, warm=10, clock=clock)
    await use(workloads, 0)
    clock.now += KEEPALIVE_SECONDS / 2
    await use(workloads, 1)
    assert net.open() == 2
    clock.now += KEEPALIVE_SECONDS / 2 + 1
    await use(workloads, 2)
    assert [pool.server for pool in net.pools if pool.open] == [
        "https://c1.example:6443",
        "https://c2.example:6443",
    ]
    await workloads.close()


async def test_a_client_with_a_request_under_way_keeps_its_connections() -> None:
    net = Net()
    workloads = clients(net, warm=1)
    slow = await workloads.get("ns", "c0", kubeconfig_secret(0))
    await use(workloads, 0)  # discovered: the next request is the held one
    hold = asyncio.Event()
    net.pools[0].hold, net.pools[0].arrived = hold, asyncio.Event()
    request = asyncio.create_task(slow.get("v1", "Namespace", "x"))
    await net.pools[0].arrived.wait()
    assert slow.busy
    for index in range(1, 4):
        await use(workloads, index)
    assert net.pools[0].open  # past the bound, but under way
    hold.set()
    assert await request is not None
    await use(workloads, 4)  # now it is released
    assert not net.pools[0].open
    assert net.open() == 1
    await workloads.close()


async def test_forgetting_a_cluster_closes_its_connections_and_its_place() -> None:
    net = Net()
    workloads = clients(net, warm=2)
    await use(workloads, 0)
    await workloads.forget("ns", "c0")
    assert workloads.warm == 0
    assert net.open() == 0
    await workloads.close()


@settings(max_examples=50, deadline=None)
@given(
    warm=st.integers(1, 5),
    uses=st.lists(st.tuples(st.integers(0, 12), st.floats(0, 2 * KEEPALIVE_SECONDS)), max_size=40),
)
def test_never_more_than_the_bound_hold_connections(
    warm: int, uses: list[tuple[int, float]]
) -> None:
    async def run() -> None:
        net, clock = Net(), Clock()
        workloads = clients(net, warm=warm, clock=clock)
        for index, later in uses:
            clock.now += later
            await use(workloads, index)
            assert net.open() <= warm
            assert workloads.warm <= warm
            # Every request went to its own cluster's server with its own token.
            server, host, token = net.seen[-1]
            assert (host, token) == (f"c{index}.example:6443", f"Bearer token-c{index}")
            assert server == f"https://{host}"
        await workloads.close()
        assert net.open() == 0

    asyncio.run(run())
