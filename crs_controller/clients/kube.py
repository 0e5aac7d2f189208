"""The only code that talks to a Kubernetes API server.

A small typed client on httpcore (the connection pool under httpx, without httpx's
per-request URL and model layers, which cost more CPU than the request): raw dict
payloads in and out, discovery cached per
group-version, and every failure mapped onto our own error tree (``NotFound``,
``Conflict``, ``Unreachable``, ``APIError``) with response bodies truncated, so
nothing large or secret travels up into logs or conditions.

It reads nothing from the environment (no proxy variables, no netrc, no default
kubeconfig): a client knows only the ``Endpoint`` it was built from. Only an endpoint
from the operator's own kubeconfig can name an exec plugin, which the client runs when
it needs a credential, again once that expires or the server refuses it (401: the
request is sent once more), with new connections for a new client certificate. Key
material is loaded into the TLS context in memory and never written to disk, and a
server that does not answer as a Kubernetes API server is reported as such, whatever
it sends.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import os
import re
import ssl
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, urlencode, urlsplit

import httpcore

from crs_controller.clients.api import KubeAPI, Obj, ResourceInfo
from crs_controller.clients.exec_credentials import ExecCredential, ExecCredentials
from crs_controller.clients.kubeconfig import Endpoint
from crs_controller.core.errors import (
    AnswerTooLarge,
    APIError,
    Conflict,
    InvalidObjectName,
    NotFound,
    Unreachable,
    UnsupportedKubeconfig,
)

__all__ = [
    "MANAGEMENT_LIMITS",
    "USER_AGENT",
    "WORKLOAD_LIMITS",
    "AnswerLimits",
    "Connect",
    "KubeClient",
    "Obj",  # from clients.api, for the modules that read payloads
    "ResourceInfo",
    "Transport",
    "connection_pool",
    "json_nodes",
    "ssl_context",
]

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
KEEPALIVE_SECONDS = 90.0
WATCH_TIMEOUT_SECONDS = 290
METADATA_LIST = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"
METADATA_ITEM = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io,application/json"
MiB = 1024 * 1024
TOKEN_FILE_REFRESH = 60.0  # seconds; client-go re-reads a token file as often
# A pool left behind when an exec plugin's client certificate changed is closed this
# long after: longer than any request on it can last (a watch: 290 + 30 s).
RETIRED_POOL_SECONDS = 600.0
# An apply body this many nodes or larger is JSON-encoded in a worker thread: the
# parser allows up to 500,000 (aliases expanded), which takes tens of milliseconds
# to encode, and the event loop serves every other cluster meanwhile. Counting up to
# this costs well under a millisecond.
ENCODE_IN_THREAD_NODES = 20_000
USER_AGENT = "crs-controller"
LIST_PAGE = 500  # items per LIST request, as kubectl asks


@dataclass(frozen=True)
class AnswerLimits:
    """What the client decodes of one server: per answer, and per ``list()`` call in
    total (every page of a LIST stays decoded until the call returns).

    ``values`` bounds the JSON values and object keys, counted from the raw bytes
    before decoding (``json_nodes``): each costs at most ~80 bytes once decoded
    (measured on CPython 3.11: 72 for ``[{"a":0},...]``, 79 for nested one-key
    objects, 80 for distinct keys), strings at most their own bytes again. Nesting is
    bounded by the interpreter's recursion limit (1000)."""

    bytes: int  # per answer
    values: int  # per answer, and per list() call in total
    items: int  # per list() call
    pages: int  # requests per list() call


# Workload clusters are the tenants' (a kubeconfig in a tenant's Secret names any
# server). One object's JSON stays under 4 MiB: kube-apiserver refuses request bodies
# over 3 MiB and etcd values over 1.5 MiB. 250,000 values are ~20 MiB decoded at
# worst, so one request peaks near 4 + 4 + 20 MiB, and 8 workers at once below
# 230 MiB: under the Deployment's 512 Mi limit with a baseline up to 260 MiB. That
# is also every object of a 500-item page of ordinary Deployments (~300 values each),
# and 100 pages of 500 names (metadata-only) in one LIST.
WORKLOAD_LIMITS = AnswerLimits(bytes=4 * MiB, values=250_000, items=50_000, pages=200)
# The management cluster is the operator's own API server, behind its API Priority and
# Fairness and quotas: its LISTs are the fleet itself (Clusters, CRSs, bindings), which
# the controller must hold anyway, so the limits only stop a broken server.
MANAGEMENT_LIMITS = AnswerLimits(bytes=64 * MiB, values=4_000_000, items=1_000_000, pages=10_000)
# A watch line is one object: never longer than a management answer.
MAX_RESPONSE_BYTES = MANAGEMENT_LIMITS.bytes


class KubeClient:
    """Async client for one API server (the management cluster or a workload cluster):
    the ``KubeAPI`` the engine depends on, over HTTP."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        name: str,
        timeout: float = 30.0,
        user_agent: str = USER_AGENT,
        limits: AnswerLimits = WORKLOAD_LIMITS,
        transport: Connect | None = None,
    ) -> None:
        """``timeout``: seconds for each whole request, from connecting to the answer's
        last byte (one page of a LIST each); watches have their own. ``limits``: the
        workload's unless the server is the operator's own. ``transport``: how to
        reach the server (default: ``connection_pool``, the network); a test passes
        one that answers from memory."""
        self.name = name
        self.limits = limits
        self._deadline = timeout
        # A replica of a shard set says which it is, so audit logs tell them apart.
        self._headers = {**BASE_HEADERS, "User-Agent": user_agent}
        self._endpoint = endpoint
        self._token = _TokenSource(endpoint)
        # The operator's exec plugin (never set for a workload cluster's kubeconfig).
        self._exec = ExecCredentials(endpoint.exec) if endpoint.exec else None
        self._extensions: dict[str, Any] = (
            {"sni_hostname": endpoint.tls_server_name} if endpoint.tls_server_name else {}
        )
        self._timeout = _timeouts(timeout, connect=min(timeout, 5.0))
        self._target = _Target.of(endpoint.server)
        self._connect = transport or connection_pool
        self._pool = self._connect(endpoint, ssl_context(endpoint, name))
        self._pool_pair = (endpoint.cert_pem, endpoint.key_pem)
        self._retired: list[tuple[float, Transport]] = []
        self._discovery: dict[str, dict[str, ResourceInfo]] = {}
        self._unserved: set[str] = set()

    async def close(self) -> None:
        for _, pool in self._retired:
            await pool.aclose()
        await self._pool.aclose()

    async def _authorize(self) -> _Auth:
        """The credentials of the next request: the endpoint's, or the exec plugin's
        (run here, outside any request's deadline, when none is cached)."""
        if self._exec is None:
            return _Auth(self._token.get(), None)
        credential = await self._exec.get()
        if credential.cert_pem and (credential.cert_pem, credential.key_pem) != self._pool_pair:
            await self._renew_pool(credential)
        return _Auth(credential.token or self._token.get(), credential)

    async def _renew_pool(self, credential: ExecCredential) -> None:
        """New connections for the plugin's new client certificate (it is part of the
        TLS handshake). Requests under way finish on the old pool, closed later."""
        endpoint = replace(self._endpoint, cert_pem=credential.cert_pem, key_pem=credential.key_pem)
        try:
            context = ssl_context(endpoint, self.name)
        except Unreachable as exc:
            plugin = self._endpoint.exec
            where = f"{plugin.where}: {plugin.command}" if plugin else "exec"
            reason = str(exc).removeprefix(f"{self.name}: ")
            raise type(exc)(
                f"{self.name}: {where} printed an unusable credential: {reason}"
            ) from None
        now = time.monotonic()
        # Swapped before the first await: a concurrent request sees the new pool.
        self._retired.append((now, self._pool))
        self._pool = self._connect(endpoint, context)
        self._pool_pair = (credential.cert_pem, credential.key_pem)
        for retired in [r for r in self._retired if now - r[0] > RETIRED_POOL_SECONDS]:
            self._retired.remove(retired)
            await retired[1].aclose()

    # -- plumbing -----------------------------------------------------------------

    @asynccontextmanager
    async def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: Mapping[str, float] | None = None,
        auth: _Auth | None = None,
    ) -> AsyncIterator[_Response]:
        """A streamed response with a 2xx status; errors mapped onto ours. ``auth``:
        the credentials to send (default: the current ones)."""
        auth = auth or await self._authorize()
        where = f"{self.name}: {method} {path}"
        try:
            request = self._request_for(method, path, params, content, headers, timeout, auth)
            async with _answer(self._pool, request) as raw:
                response = _Response(raw)
                if response.status_code == 401 and auth.credential and self._exec:
                    self._exec.refused(auth.credential)
                if response.status_code >= 300:
                    body = await _read(response, where, self.limits.bytes)
                    raise _api_error(where, response, body, _Budget(self.limits.values))
                yield response
        except TRANSPORT_ERRORS as exc:
            # Every transport failure, whatever its type, means "cannot talk to it".
            raise Unreachable(f"{where}: {type(exc).__name__}") from exc

    def _request_for(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        content: bytes | None,
        headers: Mapping[str, str] | None,
        timeout: Mapping[str, float] | None,
        auth: _Auth,
    ) -> httpcore.Request:
        """The request as the transport takes it: our headers and credentials, the
        server's URL, the deadlines. Raises ValueError for what cannot be sent."""
        all_headers = {**self._headers, "Host": self._target.host_header, **(headers or {})}
        if auth.token:
            all_headers["Authorization"] = f"Bearer {auth.token}"
        if content is not None:
            all_headers["Content-Length"] = str(len(content))
        target = self._target.prefix + path + (f"?{urlencode(params)}" if params else "")
        url = httpcore.URL(
            scheme=self._target.scheme,
            host=self._target.host,
            port=self._target.port,
            target=target,
        )
        extensions = {**self._extensions, "timeout": timeout or self._timeout}
        headers_list = list(all_headers.items())
        return httpcore.Request(
            method, url, headers=headers_list, content=content, extensions=extensions
        )

    async def _request(
        self, method: str, path: str, *, budget: _Budget | None = None, **kwargs: Any
    ) -> Obj:
        """One request under one deadline, connect to last byte: a server dripping its
        answer cannot hold a worker longer than ``timeout``. ``budget``: the JSON
        values the answer may decode to (default: the limit per answer). An exec
        plugin's credential the server refuses (401) is fetched again, and the
        request sent once more with the new one."""
        auth = await self._authorize()
        try:
            return await self._request_once(method, path, auth, budget, kwargs)
        except Unreachable as exc:
            if exc.status != 401 or auth.credential is None:
                raise
        return await self._request_once(method, path, await self._authorize(), budget, kwargs)

    async def _request_once(
        self,
        method: str,
        path: str,
        auth: _Auth,
        budget: _Budget | None,
        kwargs: Mapping[str, Any],
    ) -> Obj:
        where = f"{self.name}: {method} {path}"
        try:
            async with asyncio.timeout(self._deadline):
                async with self._send(method, path, auth=auth, **kwargs) as response:
                    raw = await _read(response, where, self.limits.bytes)
        except TimeoutError:
            message = f"{where}: no complete answer within {self._deadline:g}s"
            raise Unreachable(message) from None
        if not _is_json(response):
            raise Unreachable(f"{where}: {_not_kubernetes(response)}")
        body = _decode(raw, where, budget or _Budget(self.limits.values))
        if not isinstance(body, dict):
            raise Unreachable(f"{where}: {_not_kubernetes(response)}")
        return body

    # -- discovery ----------------------------------------------------------------

    async def resource_info(self, api_version: str, kind: str) -> ResourceInfo:
        """Plural and scope of a kind; rediscovers once on a miss (a CRD may be new)."""
        known = self._discovery.get(api_version)
        if known is None or kind not in known:
            known = await self._discover(api_version)
        if kind not in known:
            message = f"{self.name}: no kind {kind} in {api_version}"
            if api_version in self._unserved:
                message += f" ({api_version} is not served: is its CRD installed?)"
            raise NotFound(message, status=404)
        return known[kind]

    async def _discover(self, api_version: str) -> dict[str, ResourceInfo]:
        base = _api_base(api_version)
        self._unserved.discard(api_version)
        try:
            listing = await self._request("GET", base)
        except NotFound as exc:
            if api_version == "v1":  # every Kubernetes API server serves it
                raise Unreachable(
                    f"{self.name}: GET {base}: the server did not answer as a Kubernetes"
                    " API server (HTTP 404)",
                    status=404,
                ) from exc
            # kube-apiserver answers a group/version it does not serve with a plain
            # text 404: a kind whose CRD is not installed, that object's failure only.
            self._unserved.add(api_version)
            listing = {"resources": []}
        resources = listing.get("resources")
        if not isinstance(resources, list):
            raise Unreachable(f"{self.name}: GET {base}: not an API resource list")
        found = {}
        for entry in resources:
            info = _resource_info(api_version, entry)
            if info is not None:
                found[info.kind] = info
        self._discovery[api_version] = found
        return found

    def forget_discovery(self, api_version: str) -> None:
        self._discovery.pop(api_version, None)

    async def preferred_version(self, group: str) -> str | None:
        """The server's preferred version of an API group, e.g. ``cluster.x-k8s.io/v1beta2``."""
        try:
            info = await self._request("GET", f"/apis/{_segment(group, 'API group')}")
        except NotFound:
            return None
        preferred = info.get("preferredVersion", {}).get("groupVersion")
        return str(preferred) if preferred else None

    async def path(
        self, api_version: str, kind: str, namespace: str | None = None, name: str | None = None
    ) -> str:
        """The REST path of a kind, or of one object. Every segment is checked, so a
        name or namespace from a manifest (or a binding) can only ever name an object
        of this kind: never a path elsewhere, nor a request that cannot be sent."""
        info = await self.resource_info(api_version, kind)
        parts = [_api_base(api_version)]
        if info.namespaced and namespace:
            parts += ["namespaces", _segment(namespace, "namespace")]
        parts.append(info.plural)
        if name:
            parts.append(_segment(name, "name"))
        return "/".join(parts)

    # -- verbs --------------------------------------------------------------------

    async def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        try:
            return await self._request("GET", await self.path(api_version, kind, namespace, name))
        except NotFound:
            return None

    async def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        metadata_only: bool = False,
    ) -> tuple[list[Obj], str]:
        """All items (paged) and the list's resourceVersion, for starting a watch.

        ``metadata_only`` asks for PartialObjectMetadata: names, labels and
        resourceVersions without the content (no Secret data crosses the wire)."""
        headers = {"Accept": METADATA_LIST} if metadata_only else {}
        params: dict[str, Any] = {"limit": LIST_PAGE}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        path = await self.path(api_version, kind, namespace)
        return await self._pages(path, params, headers)

    async def _pages(
        self, path: str, params: dict[str, Any], headers: Mapping[str, str]
    ) -> tuple[builtins.list[Obj], str]:
        """Every page of a LIST, within the limits per call: pages, items, and JSON
        values of all pages together. A page over the byte limit is asked again with
        a tenth of the items (large objects are legitimate, only not 500 at once)."""
        limits, where = self.limits, f"{self.name}: LIST {path}"
        items: builtins.list[Obj] = []
        budget = _Budget(limits.values, per="in total")
        pages = 0
        while True:
            pages += 1
            if pages > limits.pages:
                raise AnswerTooLarge(f"{where}: more than {limits.pages} pages", limit="pages")
            try:
                page = await self._request(
                    "GET", path, params=params, headers=headers, budget=budget
                )
            except AnswerTooLarge as exc:
                if exc.limit != "bytes" or params["limit"] == 1:
                    raise
                params["limit"] = max(1, params["limit"] // 10)
                continue
            found = page.get("items") or []
            meta = page.get("metadata") or {}
            if not isinstance(found, list) or not all(isinstance(i, dict) for i in found):
                raise Unreachable(f"{where}: items is not a list of objects")
            if not isinstance(meta, dict):
                raise Unreachable(f"{where}: metadata is not an object")
            items.extend(found)
            if len(items) > limits.items:
                raise AnswerTooLarge(f"{where}: more than {limits.items} items", limit="items")
            if not meta.get("continue"):
                return items, str(meta.get("resourceVersion", ""))
            params["continue"] = meta["continue"]

    async def watch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        resource_version: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        metadata_only: bool = False,
    ) -> AsyncIterator[tuple[str, Obj]]:
        """Yield (type, object) events; ends when the server closes the watch.

        A 410 Gone arrives as an ERROR event; the caller re-lists.
        """
        params: dict[str, Any] = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": WATCH_TIMEOUT_SECONDS,
        }
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        path = await self.path(api_version, kind, namespace)
        timeout = _timeouts(WATCH_TIMEOUT_SECONDS + 30, connect=5.0)
        headers = {"Accept": METADATA_ITEM} if metadata_only else {}
        async with self._send("GET", path, params=params, timeout=timeout, headers=headers) as resp:
            try:
                async for line in resp.aiter_lines():
                    if line:
                        event = _watch_event(line, f"{self.name}: watch {path}", self.limits)
                        if event is None:
                            raise Unreachable(f"{self.name}: watch {path}: {_not_kubernetes(resp)}")
                        yield event
            except TRANSPORT_ERRORS as exc:
                raise Unreachable(f"{self.name}: watch {path}: {type(exc).__name__}") from exc

    async def create(self, obj: Mapping[str, Any]) -> Obj:
        meta = obj["metadata"]
        path = await self.path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        return await self._request("POST", path, content=_encode(obj))

    async def replace(self, obj: Mapping[str, Any], *, subresource: str | None = None) -> Obj:
        """PUT with the object's resourceVersion: optimistic concurrency, Conflict on a race."""
        meta = obj["metadata"]
        path = await self.path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        if subresource:
            path += f"/{subresource}"
        return await self._request("PUT", path, content=_encode(obj))

    async def merge_patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None,
        patch: Mapping[str, Any],
    ) -> Obj:
        """JSON merge patch; with ``metadata.resourceVersion`` in it, a Conflict on a race."""
        path = await self.path(api_version, kind, namespace, name)
        return await self._request(
            "PATCH", path, content=_encode(patch), headers={"Content-Type": MERGE_PATCH}
        )

    async def apply(
        self,
        obj: Mapping[str, Any],
        *,
        field_manager: str,
        force: bool = True,
        dry_run: bool = False,
    ) -> Obj:
        """Server-side apply of one object; the body is JSON, which is valid YAML.
        ``dry_run``: the server answers with what it would store, and stores nothing."""
        meta = obj["metadata"]
        path = await self.path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        params = {"fieldManager": field_manager, "force": "true" if force else "false"}
        if dry_run:
            params["dryRun"] = "All"
        if _has_nodes(obj, ENCODE_IN_THREAD_NODES):
            content = await asyncio.to_thread(_encode, obj)
        else:
            content = _encode(obj)
        return await self._request(
            "PATCH", path, params=params, content=content, headers={"Content-Type": APPLY_PATCH}
        )

    async def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
    ) -> bool:
        """Delete with background propagation; False when it was already gone. With
        ``uid``, only that very object: one recreated under the same name since it was
        read is a Conflict, not a deletion."""
        path = await self.path(api_version, kind, namespace, name)
        options: dict[str, Any] = {"propagationPolicy": "Background"}
        if uid:
            options["preconditions"] = {"uid": uid}
        try:
            await self._request("DELETE", path, content=_encode(options))
        except NotFound:
            return False
        return True


# RFC 3986 path characters without '%' (no escapes: Kubernetes refuses '%' in names)
# and without '/'; names of built-in kinds are narrower still (DNS subdomains, RBAC's
# ':'), which the server checks. 253 is the longest name Kubernetes accepts.
_SEGMENT = re.compile(r"[A-Za-z0-9._~:@!$&'()*+,;=-]{1,253}")


def _segment(value: str, what: str) -> str:
    """``value`` as one path segment, or InvalidObjectName (never quoting it)."""
    if not isinstance(value, str) or not _SEGMENT.fullmatch(value) or value in (".", ".."):
        raise InvalidObjectName(
            f"the {what} cannot be part of a Kubernetes API path (1-253 characters of"
            " letters, digits and -._~:@!$&'()*+,;=, not '.' or '..')"
        )
    return value


def _api_base(api_version: str) -> str:
    """``/api/v1`` or ``/apis/<group>/<version>``, each part a valid segment."""
    if api_version == "v1":
        return "/api/v1"
    group, slash, version = api_version.partition("/")
    if not slash:
        raise InvalidObjectName("the apiVersion is not <group>/<version> nor v1")
    return f"/apis/{_segment(group, 'API group')}/{_segment(version, 'API version')}"


def _resource_info(api_version: str, entry: Any) -> ResourceInfo | None:
    """One discovery entry; subresources and malformed entries are skipped."""
    if not isinstance(entry, dict):
        return None
    kind, plural, namespaced = entry.get("kind"), entry.get("name"), entry.get("namespaced")
    if not (isinstance(kind, str) and isinstance(plural, str) and _SEGMENT.fullmatch(plural)):
        return None
    if plural in (".", ".."):
        return None
    return ResourceInfo(api_version, kind, plural, bool(namespaced))


# --- transport ------------------------------------------------------------------------

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
BASE_HEADERS = {"User-Agent": USER_AGENT, "Accept": "application/json"}
# The pool of the management client also carries a watch per kind and a request per
# worker; httpcore's default of 10 connections would queue them.
MAX_CONNECTIONS = 100
MAX_IDLE_CONNECTIONS = 20


def _timeouts(seconds: float, *, connect: float) -> dict[str, float]:
    return {"connect": connect, "read": seconds, "write": seconds, "pool": seconds}


@dataclass(frozen=True)
class _Target:
    """The server's URL, split once: every request only appends its path."""

    scheme: bytes
    host: bytes
    port: int
    prefix: str  # a path the server is served under, e.g. behind a gateway
    host_header: str

    @classmethod
    def of(cls, server: str) -> _Target:
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
async def _answer(
    transport: Transport, request: httpcore.Request
) -> AsyncIterator[httpcore.Response]:
    """The answer to ``request``, closed (its connection given back) on leaving."""
    response = await transport.handle_async_request(request)
    try:
        yield response
    finally:
        await response.aclose()


def connection_pool(endpoint: Endpoint, context: ssl.SSLContext) -> Transport:
    """Connections to one server. Idle ones are kept as long as client-go keeps them
    (90 s), not 5 s: a TLS handshake costs more CPU than the request it carries."""
    limits: dict[str, Any] = {
        "max_connections": MAX_CONNECTIONS,
        "max_keepalive_connections": MAX_IDLE_CONNECTIONS,
        "keepalive_expiry": KEEPALIVE_SECONDS,
    }
    if endpoint.proxy is None:
        return httpcore.AsyncConnectionPool(ssl_context=context, **limits)
    proxy = urlsplit(endpoint.proxy)
    auth = (unquote(proxy.username), unquote(proxy.password or "")) if proxy.username else None
    bare = proxy._replace(netloc=proxy.netloc.rpartition("@")[2]).geturl()
    return httpcore.AsyncHTTPProxy(bare, proxy_auth=auth, ssl_context=context, **limits)


class _Response:
    """What the client reads of an answer: status, headers, body chunks."""

    def __init__(self, raw: httpcore.Response) -> None:
        self._raw = raw
        self.status_code = raw.status
        self.headers: dict[str, str] = {}
        for name, value in raw.headers:
            self.headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        return self._raw.aiter_stream()

    async def aiter_lines(self) -> AsyncIterator[str]:
        """Lines of a streamed answer (a watch); one longer than any answer we accept
        means the server is not one we should listen to."""
        pending = b""
        async for chunk in self._raw.aiter_stream():
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if len(pending) > MAX_RESPONSE_BYTES:
                raise Unreachable(f"a line longer than {MAX_RESPONSE_BYTES} bytes")
            for line in lines:
                yield line.decode("utf-8", errors="replace").rstrip("\r")
        if pending:
            yield pending.decode("utf-8", errors="replace")


# --- TLS and credentials ------------------------------------------------------------


def ssl_context(endpoint: Endpoint, name: str) -> ssl.SSLContext:
    """The TLS context of an endpoint, built in memory from its inline data."""
    try:
        if endpoint.ca_pem:
            context = ssl.create_default_context(cadata=endpoint.ca_pem.decode("ascii"))
        else:
            context = ssl.create_default_context()
    except (ssl.SSLError, ValueError) as exc:
        raise Unreachable(f"{name}: certificate-authority data is not a PEM certificate") from exc
    if endpoint.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if bool(endpoint.cert_pem) != bool(endpoint.key_pem):
        raise Unreachable(f"{name}: a client certificate needs both its certificate and key")
    if endpoint.cert_pem and endpoint.key_pem:
        try:
            _load_chain(context, endpoint.cert_pem + b"\n" + endpoint.key_pem)
        except _EncryptedKey:
            raise UnsupportedKubeconfig(
                f"{name}: users[].user.client-key-data is encrypted: not supported"
                " (no pass phrase is ever asked for)"
            ) from None
        except (ssl.SSLError, ValueError, OSError) as exc:
            raise Unreachable(f"{name}: client certificate or key is not valid PEM") from exc
    return context


class _EncryptedKey(Exception):
    """The key asked for a pass phrase."""


def _no_pass_phrase() -> bytes:
    """The password callback of ``load_cert_chain``: without one, OpenSSL asks for an
    encrypted key's pass phrase on the terminal and blocks the whole process."""
    raise _EncryptedKey


def _load_chain(context: ssl.SSLContext, pem: bytes) -> None:
    """``load_cert_chain`` only reads files: give it an anonymous in-memory file
    (Linux memfd), else a private temp file removed at once. Either way, only the
    file written here is ever removed."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("crs-client-cert", os.MFD_CLOEXEC)
        try:
            _write_all(fd, pem)
            context.load_cert_chain(f"/proc/self/fd/{fd}", password=_no_pass_phrase)
        finally:
            os.close(fd)
        return
    directory = Path(tempfile.mkdtemp(prefix="crs-tls-"))  # mode 0700
    path = directory / "chain.pem"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _write_all(fd, pem)
        finally:
            os.close(fd)
        context.load_cert_chain(str(path), password=_no_pass_phrase)
    finally:
        path.unlink(missing_ok=True)
        directory.rmdir()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@dataclass(frozen=True, repr=False)
class _Auth:
    """What one request authenticates with; ``credential``: the exec plugin's, if any."""

    token: str | None
    credential: ExecCredential | None


class _TokenSource:
    """The bearer token: inline, or read from a file and re-read as it rotates."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._inline = endpoint.token
        self._file = endpoint.token_file
        self._cached: tuple[float, str | None] | None = None

    def get(self) -> str | None:
        if self._file is None:
            return self._inline
        now = time.monotonic()
        if self._cached is None or now - self._cached[0] > TOKEN_FILE_REFRESH:
            try:
                token = self._file.read_text(encoding="utf-8").strip() or None
            except OSError:
                token = self._cached[1] if self._cached else None
            self._cached = (now, token)
        return self._cached[1]


# --- responses ----------------------------------------------------------------------


def _encode(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _has_nodes(value: Any, limit: int) -> bool:
    """Does ``value`` hold at least ``limit`` nodes (shared sub-objects counted each
    time, as encoding would)? Stops counting at ``limit``."""
    stack, count = [value], 0
    while stack:
        item = stack.pop()
        count += 1
        if count >= limit:
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


async def _read(response: _Response, where: str, limit: int) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise AnswerTooLarge(f"{where}: response larger than {limit} bytes", limit="bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise AnswerTooLarge(f"{where}: response larger than {limit} bytes", limit="bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def json_nodes(raw: bytes) -> int:
    """An upper bound of the JSON values and object keys ``raw`` decodes to, in four
    C-speed passes and no decoding: a container of k > 0 children holds k - 1 commas,
    so values <= 1 + containers + commas; each key has its colon. The same bytes
    inside strings only count too many, never too few (also in UTF-16/32)."""
    return 1 + raw.count(b"{") + raw.count(b"[") + raw.count(b",") + raw.count(b":")


class _Budget:
    """The JSON values a request (or a whole paged LIST) may still decode to."""

    def __init__(self, values: int, *, per: str = "in one answer") -> None:
        self.limit = values
        self.left = values
        self._per = per

    def take(self, raw: bytes, where: str) -> None:
        nodes = json_nodes(raw)
        if nodes > self.left:
            message = f"{where}: more than {self.limit} JSON values {self._per}"
            raise AnswerTooLarge(message, limit="values")
        self.left -= nodes


def _decode(raw: bytes, where: str, budget: _Budget) -> Any:
    """The decoded answer, its cost bounded before decoding. Not in a thread: the C
    decoder holds the GIL throughout (measured: the event loop stood still as long),
    so the bound on values is what bounds the time too (~60 ms for the workload's)."""
    budget.take(raw, where)
    try:
        return json.loads(raw)
    except RecursionError:
        depth = sys.getrecursionlimit()
        raise AnswerTooLarge(f"{where}: nested deeper than {depth} levels", limit="depth") from None
    except ValueError:
        return None


def _is_json(response: _Response) -> bool:
    return "json" in response.headers.get("content-type", "")


def _not_kubernetes(response: _Response) -> str:
    content_type = response.headers.get("content-type", "none").split(";")[0][:60]
    return (
        f"the server did not answer as a Kubernetes API server "
        f"(HTTP {response.status_code}, content type {content_type})"
    )


def _watch_event(line: str, where: str, limits: AnswerLimits) -> tuple[str, Obj] | None:
    event = _decode(line.encode(), where, _Budget(limits.values))
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        return None
    return str(event.get("type")), event["object"]


def _api_error(where: str, response: _Response, raw: bytes, budget: _Budget) -> APIError:
    code = response.status_code
    status = _decode(raw, where, budget) if _is_json(response) else None
    if code == 404 and not (isinstance(status, dict) and status.get("kind") == "Status"):
        # kube-apiserver's answer for a path it does not serve (plain text): a kind
        # whose CRD is not installed, that object's failure only. Discovery of v1,
        # which every API server serves, still tells a server that is not one.
        return NotFound(f"{where}: 404 (not served)", status=code)
    if not isinstance(status, dict) or status.get("kind") != "Status":
        # Not an API server's Status: a proxy, a load balancer, or not Kubernetes.
        return Unreachable(f"{where}: {_not_kubernetes(response)}", status=code)
    # The Status is the server's to write, and a hostile one could make it long.
    reason = str(status.get("reason", ""))[:100] or str(code)
    # The server's message can quote object content (e.g. an invalid Secret), so
    # callers decide whether to show it; we keep it truncated on the side, next to
    # the value-free (field, reason) causes.
    message = f"{where}: {code} {reason}"
    detail = str(status.get("message", ""))[:300]
    causes = _causes(status)
    if code == 404:
        return NotFound(message, status=code, body=detail, causes=causes)
    if code == 409:
        return Conflict(message, status=code, body=detail, causes=causes)
    if code == 401:
        message += ": the credentials were refused"
        return Unreachable(message, status=code, body=detail, causes=causes)
    if code == 429 or code >= 500:
        return Unreachable(message, status=code, body=detail, causes=causes)
    return APIError(message, status=code, body=detail, causes=causes)


def _causes(status: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, Mapping) else None
    found = []
    for cause in causes if isinstance(causes, list) else []:
        if isinstance(cause, Mapping):
            found.append((str(cause.get("field", ""))[:200], str(cause.get("reason", ""))[:100]))
    return tuple(found)


if TYPE_CHECKING:
    # KubeClient is the engine's KubeAPI: mypy says so here, where it would break.
    _implements: type[KubeAPI] = KubeClient
