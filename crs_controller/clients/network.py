"""How a connection's bytes reach the server: httpcore's anyio streams, with two costs
taken out of every request.

- A request goes out in one write: httpcore writes the headers, then the body, each
  its own TLS record and its own ``send``. The stream holds a small write back until
  the next one or until the answer is read (httpcore reads only once the request is
  written), so headers and body leave together. A large write is never held back.
- Whether an idle connection was closed by the server: httpcore asks it of every
  idle connection in the pool before every request and after every answer, and anyio
  builds a table of all the stream's attributes to find its socket each time. The
  socket is looked up once, when the connection is made.

A tenant's connections look the server's name up in the tenant's lane
(``clients.resolver``), so slow name servers of one tenant hold no thread another
needs.
"""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import anyio
import httpcore

from crs_controller.clients.resolver import Resolver, is_address

# Writes up to this size are held back to go out with the next one (request headers
# are a few hundred bytes; a TLS record carries at most 16 KiB).
HOLD_BYTES = 16 * 1024

SocketOption = (
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
)


class Stream(httpcore.AsyncNetworkStream):
    """A connection whose small writes wait for the next write or read."""

    def __init__(self, inner: httpcore.AsyncNetworkStream, sock: socket.socket | None) -> None:
        self._inner = inner
        self._sock = sock
        self._held = b""
        self._held_timeout: float | None = None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        await self.flush()
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        if len(self._held) + len(buffer) <= HOLD_BYTES:
            self._held += buffer
            self._held_timeout = timeout
            return
        if self._held and len(self._held) + len(buffer) <= 4 * HOLD_BYTES:
            buffer, self._held = self._held + buffer, b""
        await self.flush()
        await self._inner.write(buffer, timeout)

    async def flush(self) -> None:
        """Send what is held back, if anything."""
        if self._held:
            held, self._held = self._held, b""
            await self._inner.write(held, self._held_timeout)

    async def aclose(self) -> None:
        self._held = b""
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        await self.flush()
        inner = await self._inner.start_tls(ssl_context, server_hostname, timeout)
        return Stream(inner, self._sock)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return readable(self._sock)
        return self._inner.get_extra_info(info)


def readable(sock: socket.socket | None) -> bool:
    """Whether reading the socket would not wait: for an idle connection, that the
    server closed it (or sent what it should not have). No socket, or a closed one,
    counts as readable, as in httpcore."""
    fd = -1 if sock is None else sock.fileno()
    if fd < 0:
        return True
    poll = select.poll()
    poll.register(fd, select.POLLIN)
    return bool(poll.poll(0))


class Backend(httpcore.AsyncNetworkBackend):
    """httpcore's anyio backend, its streams wrapped in ``Stream``; in a lane (a
    tenant's), names are looked up by ``resolver`` within the connect timeout."""

    def __init__(
        self,
        lane: str | None = None,
        resolver: Resolver | None = None,
        inner: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self._inner = inner or httpcore.AnyIOBackend()
        self._lane = lane
        self._resolver = resolver or Resolver()

    def for_lane(self, lane: str) -> Backend:
        """The same network and resolver, looking names up in ``lane``."""
        return Backend(lane, self._resolver, self._inner)

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        options = (local_address, socket_options)
        if self._lane is None or is_address(host):
            inner = await self._inner.connect_tcp(host, port, timeout, *options)
        else:
            inner = await self._connect_by_name(self._lane, host, port, timeout, options)
        return Stream(inner, inner.get_extra_info("socket"))

    async def _connect_by_name(
        self, lane: str, host: str, port: int, timeout: float | None, options: tuple[Any, Any]
    ) -> httpcore.AsyncNetworkStream:
        """Look ``host`` up in ``lane``, then try its addresses in order, each given
        an equal share of what is left of ``timeout`` (the last one all of it)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        try:
            with anyio.fail_after(timeout):
                addresses = await self._resolver.resolve(lane, host, port)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"name lookup took over {timeout}s") from exc
        except OSError as exc:  # the server's name is kubeconfig data: not repeated
            raise httpcore.ConnectError(f"name lookup failed: {exc.strerror}") from exc
        failure: Exception = httpcore.ConnectError("name lookup found no address")
        for index, (_, address) in enumerate(addresses):
            left = None if deadline is None else deadline - loop.time()
            share = None if left is None else left / (len(addresses) - index)
            try:
                return await self._inner.connect_tcp(address, port, share, *options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        inner = await self._inner.connect_unix_socket(path, timeout, socket_options)
        return Stream(inner, inner.get_extra_info("socket"))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)
