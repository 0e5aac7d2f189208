"""How the client's requests reach a server: httpcore's connection pool (the pool
under httpx, without httpx's per-request URL and model layers, which cost more CPU
than the request).

It reads nothing from the environment (no proxy variables, no netrc, no default
kubeconfig): a pool knows only the ``Endpoint`` it was built from, and a test swaps
the whole network for an in-memory server (``Transport``) without mocking functions.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpcore

from crs_controller.clients.kubeconfig import Endpoint
from crs_controller.clients.network import Backend
from crs_controller.clients.tunnel import ProxyPool, Via

KEEPALIVE_SECONDS = 90.0
# The pool of the management client also carries a watch per kind and a request per
# worker; httpcore's default of 10 connections would queue them.
MAX_CONNECTIONS = 100
MAX_IDLE_CONNECTIONS = 20
# One write per request, and a cheap look at idle connections (``clients.network``).
NETWORK = Backend()
# Every failure of these types, whatever it is, means "cannot talk to it".
TRANSPORT_ERRORS = (
    httpcore.TimeoutException,
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.ProxyError,
    httpcore.UnsupportedProtocol,
    ssl.SSLError,
    OSError,
    ValueError,
)


def timeouts(seconds: float, *, connect: float) -> dict[str, float]:
    return {"connect": connect, "read": seconds, "write": seconds, "pool": seconds}


@dataclass(frozen=True)
class Target:
    """The server's URL, split once: every request only appends its path."""

    scheme: bytes
    host: bytes
    port: int
    prefix: str  # a path the server is served under, e.g. behind a gateway
    host_header: str

    @classmethod
    def of(cls, server: str) -> Target:
        parts = urlsplit(server)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        host = parts.hostname or ""
        return cls(parts.scheme.encode(), host.encode(), port, parts.path.rstrip("/"), parts.netloc)


class Transport(Protocol):
    """What carries the client's requests: httpcore's interface under its connection
    pools (as httpx's transports), so a test can swap the network for an in-memory
    server without mocking functions."""

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        """Send ``request``; the answer's body is streamed (``aiter_stream``)."""
        ...

    async def aclose(self) -> None: ...


# Builds the transport of an endpoint with its TLS context; called again for a new
# client certificate (an exec plugin's).
Connect = Callable[[Endpoint, ssl.SSLContext], Transport]


@asynccontextmanager
async def exchange(
    transport: Transport, request: httpcore.Request
) -> AsyncIterator[httpcore.Response]:
    """The answer to ``request``, closed (its connection given back) on leaving."""
    response = await transport.handle_async_request(request)
    try:
        yield response
    finally:
        await response.aclose()


def connection_pool(
    endpoint: Endpoint, context: ssl.SSLContext, *, lane: str | None = None
) -> Transport:
    """Connections to one server, over ``clients.network`` (a tenant's ``lane`` for
    its name lookups). Idle ones are kept as long as client-go keeps them (90 s), not
    5 s: a TLS handshake costs more CPU than the request it carries."""
    backend = NETWORK if lane is None else NETWORK.for_lane(lane)
    limits: dict[str, Any] = {
        "max_connections": MAX_CONNECTIONS,
        "max_keepalive_connections": MAX_IDLE_CONNECTIONS,
    }
    if endpoint.proxy is None:
        return httpcore.AsyncConnectionPool(
            ssl_context=context,
            keepalive_expiry=KEEPALIVE_SECONDS,
            network_backend=backend,
            **limits,
        )
    # Through a proxy, TLS to the server names it as a direct connection does.
    via = Via.of(
        endpoint.proxy,
        context,
        endpoint.tls_server_name,
        keepalive_expiry=KEEPALIVE_SECONDS,
        backend=backend,
    )
    return ProxyPool(via, **limits)


def lane_pool(lane: str) -> Connect:
    """``connection_pool`` looking names up in a tenant's ``lane``."""
    return functools.partial(connection_pool, lane=lane)


class Response:
    """What the client reads of an answer: status, headers, body chunks."""

    def __init__(self, raw: httpcore.Response) -> None:
        self._raw = raw
        self.status_code = raw.status
        self.headers: dict[str, str] = {}
        for name, value in raw.headers:
            self.headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        return self._raw.aiter_stream()
