"""/healthz, /readyz and Prometheus /metrics over plain HTTP, served with the limits
of ``app.serving``."""

from __future__ import annotations

from collections.abc import Callable

from hypercorn.typing import ASGIReceiveCallable, HTTPScope
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from crs_controller.app import serving
from crs_controller.app.serving import KEEP_ALIVE_TIMEOUT, READ_TIMEOUT, Answer, Served


async def serve(
    host: str,
    port: int,
    ready: Callable[[], bool],
    keep_alive: float = KEEP_ALIVE_TIMEOUT,
    read_timeout: int = READ_TIMEOUT,
) -> Served:
    """Serve the health and metrics endpoints; ``/readyz`` answers 503 until ``ready()``."""

    async def handler(scope: HTTPScope, _: ASGIReceiveCallable) -> Answer:
        # Probes and scrapes carry no body, so none is read: if some is still to come
        # when the answer goes out, hypercorn closes the connection.
        return _route(scope["method"], scope["path"], ready)

    conf = serving.config(keep_alive, read_timeout)
    return await serving.launch(serving.http_app(handler), conf, host, port, "health-http")


def _route(method: str, path: str, ready: Callable[[], bool]) -> Answer:
    if path not in ("/healthz", "/readyz", "/metrics"):
        return 404, b"not found", "text/plain", ()
    if method not in ("GET", "HEAD"):
        return 405, b"method not allowed", "text/plain", [(b"allow", b"GET, HEAD")]
    if path == "/metrics":
        return 200, generate_latest(), CONTENT_TYPE_LATEST, ()
    if path == "/readyz" and not ready():
        return 503, b"caches not synced", "text/plain", ()
    return 200, b"ok", "text/plain", ()
