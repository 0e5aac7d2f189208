"""The Cluster API Runtime Extension, served over TLS only: BeforeClusterDelete,
BeforeClusterUpgrade, AfterControlPlaneUpgrade and BeforeWorkersUpgrade.

Discovery lists a handler per hook served. BeforeClusterDelete answers
``retryAfterSeconds > 0`` while the cluster still has add-ons to clean up (and
``uninstall.timeout`` has not passed), so Cluster API holds the deletion of a
topology-managed Cluster until then. AfterControlPlaneUpgrade and BeforeWorkersUpgrade
answer > 0 while a CRS with ``gateUpgrades`` has not put in place what the version the
request names needs; BeforeClusterUpgrade while such a CRS has no resource for it.

hypercorn serves it (limits in ``app.health``, which shares the set-up); this module
adds what is particular to the hooks: TLS, the body limit and the body deadline, which
hook a path is and which version its request asks about. The answers themselves come
from the callables ``serve`` is given, at most ``ANSWERS_AT_ONCE`` at a time (a request
past them is answered "retry" at once). Request bodies carry cluster objects: they are
never logged.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from hypercorn.typing import ASGIReceiveCallable, HTTPScope
from semver import Version

from crs_controller.app import serving, tls
from crs_controller.app.serving import KEEP_ALIVE_TIMEOUT, READ_TIMEOUT, Answer, Headers, Served
from crs_controller.core.clock import Clock, MonotonicClock
from crs_controller.core.versions.ranges import parse_version
from crs_controller.engine.io import metrics

log = structlog.get_logger(__name__)

HOOKS_API = "hooks.runtime.cluster.x-k8s.io/v1alpha1"
PREFIX = f"/{HOOKS_API}"
DISCOVERY_PATH = f"{PREFIX}/discovery"
# Cluster API gives up on a hook call after this long (the handler's timeoutSeconds).
HOOK_TIMEOUT_SECONDS = 10
# A hook request is one Cluster object and a few versions: a few KB, some tens with
# large topology variables, and never more than the largest object the API server
# stores (1.5 MiB) with its envelope: a smaller bound could refuse a real Cluster's
# request, and with failurePolicy Fail hold its deletion or upgrade for ever. A larger
# Content-Length is refused (413) before any of the body is read. The bound is also
# what a client may make the process hold per open connection while its body arrives,
# and parse on the event loop (up to about 0.2 s at the bound; docs/security.md).
MAX_BODY = 2 * 1024 * 1024
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
# Hook answers read at once, across the hooks. Each reads the API through the management
# client the watches, the reconciles and the leader Lease use (an upgrade hook's answer
# lists the CRSs of the Cluster's namespace), and anyone on the pod network may open
# connections: past this many, a request is answered "retry" at once, unread. An answer
# takes a few reads (tens of ms), and Cluster API asks again after retryAfterSeconds,
# so 8 at once serve hundreds of Clusters deleting or upgrading together.
ANSWERS_AT_ONCE = 8
RETRY_WHEN_BUSY_SECONDS = 5  # > 0: a busy answer never lets a deletion or upgrade go
BUSY = "crs-controller: busy answering other hook requests; retrying"

# BeforeClusterDelete: (retryAfterSeconds, message) for the Cluster object.
# Every answer closes its connection. Cluster API asks again after ``retryAfterSeconds``
# (5 s), just when the idle timer (``serving.KEEP_ALIVE_TIMEOUT``, 5 s) closes a kept-alive
# connection: Go's client then reuses a connection the server is closing, and a POST is
# not retried, so the call fails with EOF and Cluster API reports ReconcileFailed. A
# new TLS connection per call (a few per Cluster per minute, during an upgrade or a
# deletion) costs little and keeps the idle timer short for slow clients.
ONE_REQUEST: Headers = [(b"connection", b"close")]

Status = Callable[[dict[str, Any]], Awaitable[tuple[int, str]]]
# The upgrade hooks: (retryAfterSeconds, message) for the Cluster object, the version,
# and whether the upgrade is about to start (BeforeClusterUpgrade).
Gate = Callable[[dict[str, Any], Version, bool], Awaitable[tuple[int, str]]]
# What a hook's request is answered from: the Cluster object, and the version it asks
# about (None for a hook that names none).
Ask = Callable[[dict[str, Any], Version | None], Awaitable[tuple[int, str]]]


@dataclass(frozen=True)
class Hook:
    """A hook served: its name in the Runtime SDK catalog, the handler's name, and
    which version a request asks about (None: the hook is about the cluster alone)."""

    name: str
    handler: str
    version_of: Callable[[Mapping[str, Any]], object] | None = None

    @property
    def path(self) -> str:
        # Cluster API calls <prefix>/<hook in lower case>/<handler name>.
        return f"{PREFIX}/{self.name.lower()}/{self.handler}"


def _control_plane_version(request: Mapping[str, Any]) -> object:
    """The version the control plane now runs."""
    return request.get("kubernetesVersion")


def _workers_version(request: Mapping[str, Any]) -> object:
    """The version workers are about to take: the first of the upgrade steps left to
    them when the request lists them, else the step's target."""
    steps = request.get("workersUpgrades")
    if isinstance(steps, list) and steps and isinstance(steps[0], dict):
        return steps[0].get("version")
    return request.get("toKubernetesVersion")


def _target_version(request: Mapping[str, Any]) -> object:
    """The version the cluster is about to be upgraded to."""
    return request.get("toKubernetesVersion")


BEFORE_CLUSTER_DELETE = Hook("BeforeClusterDelete", "before-cluster-delete")
BEFORE_CLUSTER_UPGRADE = Hook("BeforeClusterUpgrade", "before-cluster-upgrade", _target_version)
AFTER_CONTROL_PLANE_UPGRADE = Hook(
    "AfterControlPlaneUpgrade", "after-control-plane-upgrade", _control_plane_version
)
BEFORE_WORKERS_UPGRADE = Hook("BeforeWorkersUpgrade", "before-workers-upgrade", _workers_version)
UPGRADE_HOOKS = (BEFORE_CLUSTER_UPGRADE, AFTER_CONTROL_PLANE_UPGRADE, BEFORE_WORKERS_UPGRADE)
HOOKS = (BEFORE_CLUSTER_DELETE, *UPGRADE_HOOKS)
HANDLER = BEFORE_CLUSTER_DELETE.handler
HOOK_PATH = BEFORE_CLUSTER_DELETE.path


class _Refused(Exception):
    """A request answered with an error before (or instead of) reading all its body."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def discovery(hooks: tuple[Hook, ...] = HOOKS) -> dict[str, Any]:
    return {
        "apiVersion": HOOKS_API,
        "kind": "DiscoveryResponse",
        "status": "Success",
        "handlers": [
            {
                "name": hook.handler,
                "requestHook": {"apiVersion": HOOKS_API, "hook": hook.name},
                "timeoutSeconds": HOOK_TIMEOUT_SECONDS,
                "failurePolicy": "Fail",
            }
            for hook in hooks
        ],
    }


async def answer(
    request: dict[str, Any], hook: Hook, ask: Ask, timeout: float = STATUS_TIMEOUT
) -> dict[str, Any]:
    """The ``<hook>Response`` for a request (pure, given ``ask``)."""
    cluster = request.get("cluster")
    base = {"apiVersion": HOOKS_API, "kind": f"{hook.name}Response"}
    expected = f"{hook.name}Request"
    if request.get("kind") != expected or not isinstance(cluster, dict):
        return {**base, "status": "Failure", "message": f"expected a {expected}"}
    version = None
    if hook.version_of is not None:
        text = hook.version_of(request)
        version = parse_version(text) if isinstance(text, str) else None
        if version is None:
            return {
                **base,
                "status": "Failure",
                "message": f"{expected} names no Kubernetes version",
            }
    retry_after, message = await _status(hook, ask, cluster, version, timeout)
    return {**base, "status": "Success", "message": message, "retryAfterSeconds": retry_after}


async def _status(
    hook: Hook, ask: Ask, cluster: dict[str, Any], version: Version | None, timeout: float
) -> tuple[int, str]:
    try:
        async with asyncio.timeout(timeout):
            return await ask(cluster, version)
    except Exception as error:  # any failure means "not yet", never a crash
        # The type only: a message could quote the cluster object.
        log.warning(f"{hook.name}: add-on state unreadable", error=type(error).__name__)
        return RETRY_ON_ERROR_SECONDS, "could not read the cluster's add-on state; retrying"


def asks(status: Status, gate: Gate | None, at_once: int = ANSWERS_AT_ONCE) -> dict[Hook, Ask]:
    """What each hook served is answered from: BeforeClusterDelete always, the upgrade
    hooks with a ``gate``; at most ``at_once`` answers read at a time among them."""

    async def deleting(cluster: dict[str, Any], version: Version | None) -> tuple[int, str]:
        return await status(cluster)

    served: dict[Hook, Ask] = {BEFORE_CLUSTER_DELETE: deleting}
    if gate is not None:
        served.update({hook: _upgrading(gate, hook) for hook in UPGRADE_HOOKS})
    slots = _Slots(at_once)
    return {hook: slots.limit(hook, ask) for hook, ask in served.items()}


class _Slots:
    """The hook answers being read, at most ``size`` at once: a request past them is
    answered "retry" at once (every hook's retry is > 0, so it holds what it asks about),
    counted, and logged once per spell of turning requests away."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.taken = 0
        self.turning_away = False

    def limit(self, hook: Hook, ask: Ask) -> Ask:
        async def within(cluster: dict[str, Any], version: Version | None) -> tuple[int, str]:
            if self.taken >= self.size:
                self._turn_away(hook)
                return RETRY_WHEN_BUSY_SECONDS, BUSY
            self.taken += 1
            self.turning_away = False
            try:
                return await ask(cluster, version)
            finally:
                self.taken -= 1

        return within

    def _turn_away(self, hook: Hook) -> None:
        metrics.HOOK_REQUESTS_TURNED_AWAY.labels(hook=hook.name).inc()
        if not self.turning_away:
            self.turning_away = True
            log.warning("hook answers at their limit; answering retry", at_once=self.size)


def _upgrading(gate: Gate, hook: Hook) -> Ask:
    before = hook is BEFORE_CLUSTER_UPGRADE

    async def upgrading(cluster: dict[str, Any], version: Version | None) -> tuple[int, str]:
        if version is None:  # answer() refuses an upgrade request without one
            raise ValueError("no Kubernetes version")
        return await gate(cluster, version, before)

    return upgrading


async def serve(
    host: str,
    port: int,
    cert_dir: str,
    status: Status,
    gate: Gate | None = None,
    hooks: Collection[str] | None = None,
    keep_alive: float = KEEP_ALIVE_TIMEOUT,
    read_timeout: int = READ_TIMEOUT,
    handshake_timeout: float = SSL_HANDSHAKE_TIMEOUT,
    body_timeout: float = BODY_TIMEOUT,
    clock: Clock | None = None,
) -> Served:
    """Serve discovery and the hooks over TLS 1.2+ with ``<cert_dir>/tls.crt``,
    ``tls.key``: BeforeClusterDelete from ``status``, the upgrade hooks from ``gate``
    (not served, nor listed by discovery, without one). ``hooks`` names the hooks to
    serve (None: all): Cluster API refuses a discovery answer naming a hook its release
    does not know, BeforeWorkersUpgrade before chained upgrades. A renewed pair is
    served without a restart (``app.tls``)."""
    conf = serving.config(keep_alive, read_timeout)
    conf.certfile = str(Path(cert_dir) / "tls.crt")
    conf.keyfile = str(Path(cert_dir) / "tls.key")
    conf.ssl_handshake_timeout = handshake_timeout
    conf.ssl_context = _reloading(conf, clock or MonotonicClock()).context
    _quiet_tls_disconnects(asyncio.get_running_loop())
    served = {h: a for h, a in asks(status, gate).items() if hooks is None or h.name in hooks}

    async def handler(scope: HTTPScope, receive: ASGIReceiveCallable) -> Answer:
        code, body, extra = await _handle(scope, receive, served, body_timeout)
        return code, json.dumps(body).encode(), "application/json", extra

    return await serving.launch(serving.http_app(handler), conf, host, port, "runtime-extension")


def _reloading(conf: serving.ServerConfig, clock: Clock) -> tls.ReloadingCertificate:
    """Contexts as hypercorn builds them (TLS 1.2 at least), the first one now: a
    missing or bad certificate fails ``serve`` rather than the server after it began."""

    def make() -> ssl.SSLContext:
        context = conf.new_ssl_context()
        assert context is not None  # certfile and keyfile are set
        return context

    assert conf.certfile is not None and conf.keyfile is not None
    return tls.ReloadingCertificate(Path(conf.certfile), Path(conf.keyfile), make, clock)


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
    scope: HTTPScope, receive: ASGIReceiveCallable, served: dict[Hook, Ask], body_timeout: float
) -> tuple[int, dict[str, Any], Headers]:
    path, method = scope["path"], scope["method"]
    hook = next((h for h in served if h.path == path), None)
    if path != DISCOVERY_PATH and hook is None:
        return 404, {"message": f"no handler at {path}"}, ()
    allowed = ("GET", "POST") if path == DISCOVERY_PATH else ("POST",)
    if method not in allowed:
        return 405, {"message": f"{method} not allowed"}, [(b"allow", ", ".join(allowed).encode())]
    try:
        raw = await _read_body(scope, receive, body_timeout)
    except _Refused as refused:
        # The rest of the body is not read: tell the client this connection is done.
        return refused.code, {"message": refused.message}, [(b"connection", b"close")]
    if hook is None:
        return 200, discovery(tuple(served)), ONE_REQUEST
    try:
        request = json.loads(raw or b"{}")
    except ValueError:
        return 400, {"message": "body is not JSON"}, ONE_REQUEST
    except RecursionError:  # "[[[[…": a cheap body, which must not reach the server's log
        return 400, {"message": "body is JSON nested too deep"}, ONE_REQUEST
    body = request if isinstance(request, dict) else {}
    response = await answer(body, hook, served[hook])
    log.info(hook.name, retry_after=response.get("retryAfterSeconds"))
    return 200, response, ONE_REQUEST


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
