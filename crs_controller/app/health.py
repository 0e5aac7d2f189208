"""/healthz, /readyz and Prometheus /metrics over plain HTTP, served with the limits
of ``app.serving``."""

from __future__ import annotations

from collections.abc import Callable

from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, Scope
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from crs_controller.app.serving import (
    KEEP_ALIVE_TIMEOUT,
    READ_TIMEOUT,
    Headers,
    Served,
    config,
    launch,
    lifespan,
    respond,
)


async def serve(
    host: str,
    port: int,
    ready: Callable[[], bool],
    keep_alive: float = KEEP_ALIVE_TIMEOUT,
    read_timeout: int = READ_TIMEOUT,
) -> Served:
    """Serve the health and metrics endpoints; ``/readyz`` answers 503 until ``ready()``."""

    async def app(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
        elif scope["type"] == "http":
            # Probes and scrapes carry no body, so none is read: if some is still to
            # come when the answer goes out, hypercorn closes the connection.
            await respond(send, *_route(scope["method"], scope["path"], ready))
        else:  # a WebSocket upgrade: refused with 403
            await send({"type": "websocket.close", "code": 1000, "reason": None})

    return await launch(app, config(keep_alive, read_timeout), host, port, "health-http")


def _route(method: str, path: str, ready: Callable[[], bool]) -> tuple[int, bytes, str, Headers]:
    if path not in ("/healthz", "/readyz", "/metrics"):
        return 404, b"not found", "text/plain", ()
    if method not in ("GET", "HEAD"):
        return 405, b"method not allowed", "text/plain", [(b"allow", b"GET, HEAD")]
    if path == "/metrics":
        return 200, generate_latest(), CONTENT_TYPE_LATEST, ()
    if path == "/readyz" and not ready():
        return 503, b"caches not synced", "text/plain", ()
    return 200, b"ok", "text/plain", ()
