"""The Cluster API Runtime Extension: BeforeClusterDelete, served over TLS only.

Discovery lists one handler; the hook answers ``retryAfterSeconds > 0`` while the
cluster still has add-ons to clean up (and ``uninstall.timeout`` has not passed), so
Cluster API holds the deletion of a topology-managed Cluster until then.

hypercorn serves it (limits in ``app.health``, which shares the set-up); this module
adds what is particular to the hook: TLS, the body limit and the body deadline.
Request bodies carry cluster objects: they are never logged.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog
from hypercorn.typing import ASGIReceiveCallable, HTTPScope

from crs_controller.app import serving
from crs_controller.app.serving import KEEP_ALIVE_TIMEOUT, READ_TIMEOUT, Answer, Headers, Served

log = structlog.get_logger(__name__)

HOOKS_API = "hooks.runtime.cluster.x-k8s.io/v1alpha1"
PREFIX = f"/{HOOKS_API}"
HANDLER = "before-cluster-delete"
DISCOVERY_PATH = f"{PREFIX}/discovery"
HOOK_PATH = f"{PREFIX}/beforeclusterdelete/{HANDLER}"
# Cluster API gives up on a hook call after this long (the handler's timeoutSeconds).
HOOK_TIMEOUT_SECONDS = 10
# A BeforeClusterDeleteRequest is one Cluster object: far below this. A larger
# Content-Length is refused (413) before any of the body is read.
MAX_BODY = 4 * 1024 * 1024
# The whole body must arrive within this long. hypercorn's idle timer stops once the
# request head is complete and its read timeout restarts with every byte, so without
# this deadline a client could dribble a body for as long as it liked.
BODY_TIMEOUT = 5.0
# asyncio closes a connection whose TLS handshake takes longer (hypercorn's default is 60).
SSL_HANDSHAKE_TIMEOUT = 5.0
# Answer "retry" in time when the add-on state is slow to read, rather than let the call
# time out (with failurePolicy Fail Cluster API reports that as an error, then backs off).
STATUS_TIMEOUT = 7.0
# The answer when the add-on state could not be read: never 0, which would let the
# deletion go ahead before the clean-up.
RETRY_ON_ERROR_SECONDS = 5

Status = Callable[[dict[str, Any]], Awaitable[tuple[int, str]]]


class _Refused(Exception):
    """A request answered with an error before (or instead of) reading all its body."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def discovery() -> dict[str, Any]:
    return {
        "apiVersion": HOOKS_API,
        "kind": "DiscoveryResponse",
        "status": "Success",
        "handlers": [
            {
                "name": HANDLER,
                "requestHook": {"apiVersion": HOOKS_API, "hook": "BeforeClusterDelete"},
                "timeoutSeconds": HOOK_TIMEOUT_SECONDS,
                "failurePolicy": "Fail",
            }
        ],
    }


async def answer(
    request: dict[str, Any], status: Status, timeout: float = STATUS_TIMEOUT
) -> dict[str, Any]:
    """The BeforeClusterDeleteResponse for a request (pure, given ``status``)."""
    cluster = request.get("cluster")
    base = {"apiVersion": HOOKS_API, "kind": "BeforeClusterDeleteResponse"}
    if request.get("kind") != "BeforeClusterDeleteRequest" or not isinstance(cluster, dict):
        return {**base, "status": "Failure", "message": "expected a BeforeClusterDeleteRequest"}
    retry_after, message = await _status(status, cluster, timeout)
    return {**base, "status": "Success", "message": message, "retryAfterSeconds": retry_after}


async def _status(status: Status, cluster: dict[str, Any], timeout: float) -> tuple[int, str]:
    try:
        async with asyncio.timeout(timeout):
            return await status(cluster)
    except Exception as error:  # any failure means "not yet", never a crash
        # The type only: a message could quote the cluster object.
        log.warning("BeforeClusterDelete: add-on state unreadable", error=type(error).__name__)
        return RETRY_ON_ERROR_SECONDS, "could not read the cluster's add-on state; retrying"


async def serve(
    host: str,
    port: int,
    cert_dir: str,
    status: Status,
    keep_alive: float = KEEP_ALIVE_TIMEOUT,
    read_timeout: int = READ_TIMEOUT,
    handshake_timeout: float = SSL_HANDSHAKE_TIMEOUT,
    body_timeout: float = BODY_TIMEOUT,
) -> Served:
    """Serve discovery and the hook over TLS 1.2+ with ``<cert_dir>/tls.crt``, ``tls.key``."""
    conf = serving.config(keep_alive, read_timeout)
    conf.certfile = str(Path(cert_dir) / "tls.crt")
    conf.keyfile = str(Path(cert_dir) / "tls.key")
    conf.ssl_handshake_timeout = handshake_timeout
    # Build it once now (hypercorn builds its own, TLS 1.2 at least): a missing or bad
    # certificate fails ``serve`` rather than the server task after it returned.
    conf.create_ssl_context()
    _quiet_tls_disconnects(asyncio.get_running_loop())

    async def handler(scope: HTTPScope, receive: ASGIReceiveCallable) -> Answer:
        code, body, extra = await _handle(scope, receive, status, body_timeout)
        return code, json.dumps(body).encode(), "application/json", extra

    return await serving.launch(serving.http_app(handler), conf, host, port, "runtime-extension")


def _quiet_tls_disconnects(loop: asyncio.AbstractEventLoop) -> None:
    """Drop the ``ssl.SSLError`` asyncio reports when a TLS client keeps sending after
    the server closed (the rest of a refused body): a traceback at ERROR per such client
    would let anyone flood the logs. hypercorn's own runner does the same; ``serve``
    runs in our loop instead, so it is set here — unless the loop already has a handler.
    """
    if loop.get_exception_handler() is None:
        loop.set_exception_handler(_drop_ssl_errors)


def _drop_ssl_errors(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    # Only from a server connection's handler: an SSLError elsewhere (a client of the
    # API server, say) is still reported.
    from_server = context.get("message") == "Unhandled exception in client_connected_cb"
    if not (from_server and isinstance(context.get("exception"), ssl.SSLError)):
        loop.default_exception_handler(context)


async def _handle(
    scope: HTTPScope, receive: ASGIReceiveCallable, status: Status, body_timeout: float
) -> tuple[int, dict[str, Any], Headers]:
    path, method = scope["path"], scope["method"]
    if path not in (DISCOVERY_PATH, HOOK_PATH):
        return 404, {"message": f"no handler at {path}"}, ()
    allowed = ("GET", "POST") if path == DISCOVERY_PATH else ("POST",)
    if method not in allowed:
        return 405, {"message": f"{method} not allowed"}, [(b"allow", ", ".join(allowed).encode())]
    try:
        raw = await _read_body(scope, receive, body_timeout)
    except _Refused as refused:
        # The rest of the body is not read: tell the client this connection is done.
        return refused.code, {"message": refused.message}, [(b"connection", b"close")]
    if path == DISCOVERY_PATH:
        return 200, discovery(), ()
    try:
        request = json.loads(raw or b"{}")
    except ValueError:
        return 400, {"message": "body is not JSON"}, ()
    response = await answer(request if isinstance(request, dict) else {}, status)
    log.info("BeforeClusterDelete", retry_after=response.get("retryAfterSeconds"))
    return 200, response, ()


async def _read_body(scope: HTTPScope, receive: ASGIReceiveCallable, timeout: float) -> bytes:
    """The request body, up to ``MAX_BODY`` bytes and ``timeout`` seconds."""
    for name, value in scope["headers"]:
        # h11 has already refused a Content-Length that is not a number; h2 may not have.
        if name == b"content-length" and value.isdigit() and int(value) > MAX_BODY:
            raise _Refused(413, f"body over {MAX_BODY} bytes")
    body = bytearray()
    try:
        async with asyncio.timeout(timeout):
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    raise _Refused(400, "client went away")
                body += message["body"]
                if len(body) > MAX_BODY:  # chunked: no Content-Length to check first
                    raise _Refused(413, f"body over {MAX_BODY} bytes")
                if not message["more_body"]:
                    return bytes(body)
    except TimeoutError:
        raise _Refused(408, f"body not received within {timeout:g} s") from None
