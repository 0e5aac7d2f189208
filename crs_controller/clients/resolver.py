"""Name lookups for tenants' servers, kept from starving everyone else.

A lookup (``getaddrinfo``) blocks a thread until the tenant's DNS answers, and
cannot be called off: a connect timeout leaves the thread waiting. asyncio runs
lookups on its default executor, which also decodes large kubeconfigs and parses
sources for every tenant, so one tenant whose name servers are slow or down (by
accident or on purpose) would hold every thread of it, and other tenants' new
connections and parses would wait behind.

Here lookups run on threads of their own (``THREADS``), and each lane (a tenant: the
namespace of the Cluster) holds at most ``PER_LANE`` of them, from the moment a
lookup starts until its thread is free again, not until its caller gives up. A lane
that asks for more waits for its own lookups; the others keep their threads.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

THREADS = 16
PER_LANE = 2

Address = tuple[int, str]  # (address family, address)
Lookup = Callable[[str, int], list[Address]]


def system_lookup(host: str, port: int) -> list[Address]:
    """The system resolver's addresses for ``host``, in its order of preference,
    each once."""
    found: list[Address] = []
    for family, _, _, _, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        address = (int(family), str(sockaddr[0]))
        if address not in found:
            found.append(address)
    return found


def is_address(host: str) -> bool:
    """An IP address needs no lookup."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class Resolver:
    """Lookups on ``threads`` threads, at most ``per_lane`` of them per lane."""

    def __init__(
        self, *, threads: int = THREADS, per_lane: int = PER_LANE, lookup: Lookup = system_lookup
    ) -> None:
        self._threads, self._per_lane, self._lookup = threads, per_lane, lookup
        self._executor: ThreadPoolExecutor | None = None
        self._held: dict[str, int] = {}  # threads each lane holds now
        self._freed: dict[str, asyncio.Event] = {}  # set when a lane's thread comes free

    async def resolve(self, lane: str, host: str, port: int) -> list[Address]:
        """The addresses of ``host``; raises OSError (socket.gaierror) when it has
        none. The caller bounds the wait (its connect timeout)."""
        await self._take(lane)
        loop = asyncio.get_running_loop()

        def done(_: object) -> None:
            if not loop.is_closed():  # else nothing waits for the lane any more
                loop.call_soon_threadsafe(self._give_back, lane)

        future = self._pool().submit(self._lookup, host, port)
        future.add_done_callback(done)
        return await asyncio.wrap_future(future)

    async def _take(self, lane: str) -> None:
        while self._held.get(lane, 0) >= self._per_lane:
            await self._freed.setdefault(lane, asyncio.Event()).wait()
        self._held[lane] = self._held.get(lane, 0) + 1

    def _give_back(self, lane: str) -> None:
        left = self._held.get(lane, 1) - 1
        if left > 0:
            self._held[lane] = left
        else:  # nothing is kept for a lane without lookups
            self._held.pop(lane, None)
        freed = self._freed.pop(lane, None)
        if freed is not None:
            freed.set()

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._threads, thread_name_prefix="lookup")
        return self._executor

    @property
    def lanes(self) -> int:
        """Lanes with a lookup under way (or a thread not yet free)."""
        return len(self._held)
