"""A tenant's name lookups take threads of its own lane only (clients.resolver), and
its connections try each address it resolves to (clients.network)."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterable
from typing import Any

import httpcore
import pytest

from crs_controller.clients.network import Backend, Stream
from crs_controller.clients.resolver import Address, Resolver, is_address


class Names:
    """A resolver's lookup whose ``slow.*`` names wait until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started: list[str] = []
        self._lock = threading.Lock()
        self._count = threading.Condition(self._lock)

    def __call__(self, host: str, port: int) -> list[Address]:
        with self._count:
            self.started.append(host)
            self._count.notify_all()
        if host.startswith("slow."):
            self.release.wait(30)
        if host.startswith("missing."):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, "192.0.2.1"), (socket.AF_INET, "192.0.2.2")]

    def wait_started(self, count: int) -> None:
        with self._count:
            assert self._count.wait_for(lambda: len(self.started) >= count, 10)


async def started(names: Names, count: int) -> None:
    await asyncio.to_thread(names.wait_started, count)


async def test_a_lane_holds_at_most_its_threads_and_others_keep_theirs() -> None:
    names = Names()
    resolver = Resolver(threads=4, per_lane=2, lookup=names)
    slow = [asyncio.create_task(resolver.resolve("a", f"slow.{i}", 443)) for i in range(3)]
    await started(names, 2)
    # Lane a's third lookup waits for its own; lane b's runs at once.
    assert await resolver.resolve("b", "fast.b", 443) == [
        (socket.AF_INET, "192.0.2.1"),
        (socket.AF_INET, "192.0.2.2"),
    ]
    assert sorted(names.started) == ["fast.b", "slow.0", "slow.1"]
    names.release.set()
    assert all(len(found) == 2 for found in await asyncio.gather(*slow))
    assert sorted(names.started)[-1] == "slow.2"
    assert resolver.lanes == 0  # nothing kept for lanes without lookups


async def test_a_caller_that_gives_up_keeps_its_thread_counted_until_it_is_free() -> None:
    names = Names()
    resolver = Resolver(threads=4, per_lane=2, lookup=names)
    first = [asyncio.create_task(resolver.resolve("a", f"slow.{i}", 443)) for i in range(2)]
    await started(names, 2)
    for task in first:
        task.cancel()
    await asyncio.gather(*first, return_exceptions=True)
    third = asyncio.create_task(resolver.resolve("a", "fast.a", 443))
    await resolver.resolve("b", "fast.b", 443)  # a look that lane a's wait lets pass
    assert "fast.a" not in names.started and not third.done()
    names.release.set()
    assert len(await third) == 2


class Network(httpcore.AsyncNetworkBackend):
    """Connects to the addresses in ``up``; refuses the others."""

    def __init__(self, up: Iterable[str]) -> None:
        self.up = set(up)
        self.tried: list[tuple[str, float | None]] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.tried.append((host, timeout))
        if host not in self.up:
            raise httpcore.ConnectError(f"{host}: connection refused")
        return httpcore.AsyncMockStream([])

    async def sleep(self, seconds: float) -> None:
        raise AssertionError("not used")


async def test_a_name_in_a_lane_is_looked_up_and_its_addresses_tried_in_order() -> None:
    names, network = Names(), Network(up={"192.0.2.2"})
    backend = Backend(resolver=Resolver(lookup=names), inner=network).for_lane("tenant")
    stream = await backend.connect_tcp("api.tenant.example", 6443, timeout=10.0)
    assert isinstance(stream, Stream)
    assert names.started == ["api.tenant.example"]
    tried = [host for host, _ in network.tried]
    assert tried == ["192.0.2.1", "192.0.2.2"]
    first_share, last_share = (t for _, t in network.tried)
    assert first_share is not None and last_share is not None
    assert first_share <= 5.0 < last_share <= 10.0  # an equal share, then what is left


async def test_an_address_or_a_client_without_a_lane_is_not_looked_up_here() -> None:
    names, network = Names(), Network(up={"192.0.2.7", "api.example"})
    backend = Backend(resolver=Resolver(lookup=names), inner=network)
    await backend.for_lane("tenant").connect_tcp("192.0.2.7", 443, timeout=5.0)
    await backend.connect_tcp("api.example", 443, timeout=5.0)  # the operator's own
    assert names.started == []
    assert [host for host, _ in network.tried] == ["192.0.2.7", "api.example"]


async def test_a_failed_or_late_lookup_is_a_connect_error_not_naming_the_host() -> None:
    names = Names()
    backend = Backend(resolver=Resolver(lookup=names), inner=Network(up=())).for_lane("t")
    with pytest.raises(httpcore.ConnectError, match=r"^name lookup failed: Name or service not"):
        await backend.connect_tcp("missing.example", 443, timeout=5.0)
    with pytest.raises(httpcore.ConnectTimeout, match=r"^name lookup took over 0s$"):
        await backend.connect_tcp("slow.example", 443, timeout=0)
    names.release.set()
    with pytest.raises(httpcore.ConnectError, match=r"192\.0\.2\.2: connection refused"):
        await backend.connect_tcp("api.example", 443, timeout=5.0)  # every address refused


async def test_localhost_reaches_a_real_listener_through_the_system_lookup() -> None:
    served = asyncio.Event()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served.set()
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        stream = await Backend().for_lane("tenant").connect_tcp("localhost", port, timeout=10.0)
        await asyncio.wait_for(served.wait(), 10)
        await stream.aclose()


@pytest.mark.parametrize(
    ("host", "address"),
    [("10.0.0.1", True), ("::1", True), ("fd00::5", True), ("localhost", False), ("a.b", False)],
)
def test_an_ip_address_needs_no_lookup(host: str, address: bool) -> None:
    assert is_address(host) is address
