"""The HTTP serving both endpoints share (``app.health``, ``app.extension``): tiny
hand-written ASGI apps served by hypercorn, which parses HTTP/1.1 (with h11) and
enforces the connection limits below; each limit is set deliberately rather than
taken from defaults meant for a public web server behind a proxy.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import structlog
from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope

log = structlog.get_logger(__name__)

# A connection that has not completed a request head this long after it opened (after
# the TLS handshake) or after its last response is closed. hypercorn's idle timer is
# stopped only by a complete head — bytes alone do not reset it — so this also bounds a
# client dribbling its head a byte at a time (slowloris). Kubelet and Prometheus send
# their request at once; Go clients retry a request on a connection closed while idle.
KEEP_ALIVE_TIMEOUT = 5.0
# A connection on which no byte at all arrives for this long is closed, even mid-request.
# It is per read — each byte restarts it — so the idle timer above and the extension's
# body deadline do the real bounding. It is all that bounds an HTTP/2 connection (see
# ``config``). Longer than the hook's answer takes (``extension.STATUS_TIMEOUT``), as
# hypercorn keeps reading while the app works and would close the connection after it.
READ_TIMEOUT = 10
# Request line plus headers, in bytes: a too-large head is refused with 431 and the
# connection closed. h11 checks it while the head is incomplete, so a head arriving
# whole in one read (hypercorn reads up to 64 KiB) still passes: a connection buffers
# at most this plus 64 KiB. Our clients send well under 1 KiB.
MAX_HEAD = 8 * 1024
# Requests at once on one HTTP/2 connection (hypercorn's default is 100).
H2_MAX_STREAMS = 4
# How long a stopping server lets requests in flight finish before cancelling them.
GRACEFUL_TIMEOUT = 3.0
# Connections the kernel queues before hypercorn accepts them. hypercorn has no cap on
# open connections: each holds a socket and a task until the timers above close it.
BACKLOG = 128

# hypercorn's "Running on …" and error lines, through the standard library (configured
# in ``app.logs``) rather than hypercorn's own stderr handler.
HTTP_LOG = logging.getLogger("crs_controller.http")

Headers = Iterable[tuple[bytes, bytes]]
App = Callable[[Scope, ASGIReceiveCallable, ASGISendCallable], Awaitable[None]]
# An answer: status code, body, content type, extra headers.
Answer = tuple[int, bytes, str, Headers]
Handler = Callable[[HTTPScope, ASGIReceiveCallable], Awaitable[Answer]]


@dataclass
class Served:
    """A running server: the port it listens on, and how to stop it."""

    port: int
    _stop: asyncio.Event
    _task: asyncio.Task[None]

    async def close(self) -> None:
        """Stop accepting, let requests in flight finish (``GRACEFUL_TIMEOUT``), return.
        A server that already died was logged when it did; closing it does not raise."""
        self._stop.set()
        await asyncio.gather(self._task, return_exceptions=True)


class ServerConfig(Config):
    """hypercorn's configuration, which may carry the TLS context to serve with:
    hypercorn builds its own once, when it starts, from ``certfile`` and ``keyfile``;
    one given here can change what it serves while it runs (``app.tls``)."""

    ssl_context: ssl.SSLContext | None = None

    def create_ssl_context(self) -> ssl.SSLContext | None:
        if self.ssl_context is not None:
            return self.ssl_context
        return self.new_ssl_context()

    def new_ssl_context(self) -> ssl.SSLContext | None:
        """A context built as hypercorn builds it, from the files as they are now."""
        return super().create_ssl_context()


def config(
    keep_alive: float = KEEP_ALIVE_TIMEOUT, read_timeout: int | None = READ_TIMEOUT
) -> ServerConfig:
    """The hypercorn configuration both servers start from."""
    conf = ServerConfig()
    conf.keep_alive_timeout = keep_alive
    conf.read_timeout = read_timeout
    conf.h11_max_incomplete_size = MAX_HEAD
    # ALPN offers HTTP/1.1 only, but hypercorn still switches to HTTP/2 for a client that
    # opens with the h2 preface (or asks for h2c) and has no setting to refuse it. Such a
    # connection escapes the idle timer (READ_TIMEOUT bounds it); cap what it may ask.
    conf.h2_max_header_list_size = MAX_HEAD
    conf.h2_max_concurrent_streams = H2_MAX_STREAMS
    conf.alpn_protocols = ["http/1.1"]
    conf.graceful_timeout = GRACEFUL_TIMEOUT
    conf.backlog = BACKLOG
    conf.accesslog = None
    conf.errorlog = HTTP_LOG
    conf.include_server_header = False
    return conf


async def launch(app: App, conf: Config, host: str, port: int, name: str) -> Served:
    """Serve ``app`` with hypercorn on ``host:port`` (0: any free port) until closed.

    The socket is bound and listening before this returns, so clients may connect at
    once (the kernel queues them until hypercorn accepts) and port 0 can be read back.
    """
    sock = _listen(host, port)
    bound = int(sock.getsockname()[1])
    conf.bind = [f"fd://{sock.detach()}"]
    stop = asyncio.Event()
    # With a shutdown_trigger hypercorn installs no signal handlers: the runner owns them.
    task = asyncio.create_task(
        hypercorn_serve(app, conf, shutdown_trigger=stop.wait, mode="asgi"), name=f"{name}:{bound}"
    )
    task.add_done_callback(_report)
    return Served(bound, stop, task)


def _listen(host: str, port: int) -> socket.socket:
    """An empty host listens on every address of both stacks, as Go's ``:8080`` does
    (the kubelet probes the pod's IPv6 address on an IPv6 cluster), or on IPv4 alone
    where the host has no IPv6. Any other host is bound as given: ``[::]`` is IPv6 only,
    ``0.0.0.0`` IPv4 only."""
    host = host.strip("[]")
    if not host and socket.has_dualstack_ipv6():
        try:
            return socket.create_server(
                ("::", port), family=socket.AF_INET6, backlog=BACKLOG, dualstack_ipv6=True
            )
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise
            # IPv6 present but unusable (no address on a host with IPv6 turned off).
    host = host or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=BACKLOG)


def _report(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and (error := task.exception()) is not None:
        log.error("HTTP server died", server=task.get_name(), error=type(error).__name__)


def http_app(handler: Handler) -> App:
    """The ASGI app both servers run: ``handler`` answers each HTTP request, lifespan
    messages are acknowledged, and a WebSocket upgrade is refused (403)."""

    async def app(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
        elif scope["type"] == "http":
            await respond(send, *await handler(scope, receive))
        else:
            await send({"type": "websocket.close", "code": 1000, "reason": None})

    return app


async def lifespan(receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
    """Acknowledge hypercorn's start-up and shutdown: neither server has anything to do."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def respond(
    send: ASGISendCallable, status: int, body: bytes, content_type: str, extra: Headers = ()
) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
        *extra,
    ]
    try:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})
    except ssl.SSLError:
        # A TLS client still sending (the rest of a refused body) when hypercorn closes
        # the connection after the answer: the answer went out; nothing is wrong here.
        pass
