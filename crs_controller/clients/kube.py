"""The only code that talks to a Kubernetes API server: ``KubeClient``, its verbs.

A small typed client on httpcore: raw dict payloads in and out, and every failure one
of our own errors. It reads nothing from the environment: a client knows only the
``Endpoint`` it was built from. What lies under the verbs has a module each:
``transport`` (the connection pool, reached only through the endpoint), ``tls`` (key
material in memory only), ``auth`` (tokens, and the operator's exec plugin),
``answers`` (what an answer may cost to read and decode), ``http_errors`` (a refusal
as our errors, bodies truncated) and ``discovery`` (kinds and the paths to them).
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import httpcore

from crs_controller.clients.answers import (
    ENCODE_IN_THREAD_NODES,
    MANAGEMENT_LIMITS,
    WORKLOAD_LIMITS,
    AnswerLimits,
    Budget,
    answer_lines,
    decode,
    encode,
    has_nodes,
    json_nodes,
    read_answer,
    watch_event,
)
from crs_controller.clients.api import KubeAPI, Obj, ResourceInfo
from crs_controller.clients.auth import Auth, Credentials
from crs_controller.clients.discovery import Discovery
from crs_controller.clients.http_errors import api_error, is_json, not_kubernetes
from crs_controller.clients.kubeconfig import Endpoint
from crs_controller.clients.tls import ssl_context
from crs_controller.clients.transport import (
    TRANSPORT_ERRORS,
    Connect,
    Response,
    Target,
    Transport,
    connection_pool,
    exchange,
    timeouts,
)
from crs_controller.core.errors import AnswerTooLarge, NotFound, Unreachable

__all__ = [
    "MANAGEMENT_LIMITS",  # from clients.answers
    "USER_AGENT",
    "WORKLOAD_LIMITS",  # from clients.answers
    "AnswerLimits",  # from clients.answers
    "Connect",  # from clients.transport
    "KubeClient",
    "Obj",  # from clients.api, for the modules that read payloads
    "ResourceInfo",  # from clients.api
    "Transport",  # from clients.transport
    "connection_pool",  # from clients.transport
    "json_nodes",  # from clients.answers
    "ssl_context",  # from clients.tls
]

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
WATCH_TIMEOUT_SECONDS = 290
REQUEST_TIMEOUT = 30.0  # seconds for each whole request, unless a client is given another
METADATA_LIST = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"
METADATA_ITEM = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io,application/json"
USER_AGENT = "crs-controller"
BASE_HEADERS = {"User-Agent": USER_AGENT, "Accept": "application/json"}
LIST_PAGE = 500  # items per LIST request, as kubectl asks


def list_params(label_selector: str | None, field_selector: str | None) -> dict[str, Any]:
    """The query of a LIST's first page."""
    params: dict[str, Any] = {"limit": LIST_PAGE}
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector
    return params


def page_parts(page: Obj, where: str) -> tuple[list[Obj], Obj]:
    """The items and the list metadata of one page of a LIST."""
    found = page.get("items") or []
    meta = page.get("metadata") or {}
    if not isinstance(found, list) or not all(isinstance(i, dict) for i in found):
        raise Unreachable(f"{where}: items is not a list of objects")
    if not isinstance(meta, dict):
        raise Unreachable(f"{where}: metadata is not an object")
    return found, meta


class KubeClient:
    """Async client for one API server (the management cluster or a workload cluster):
    the ``KubeAPI`` the engine depends on, over HTTP."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        name: str,
        timeout: float = REQUEST_TIMEOUT,
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
        self._extensions: dict[str, Any] = (
            {"sni_hostname": endpoint.tls_server_name} if endpoint.tls_server_name else {}
        )
        self._timeout = timeouts(timeout, connect=min(timeout, 5.0))
        self._target = Target.of(endpoint.server)
        self._credentials = Credentials(endpoint, name, transport or connection_pool)
        self._discovery = Discovery(name, self._get)
        self._in_flight = 0  # requests under way, answers being read included

    async def close(self) -> None:
        await self._credentials.close()

    @property
    def busy(self) -> bool:
        return self._in_flight > 0

    @property
    def connected(self) -> bool:
        """Whether the client holds its connections and TLS context now."""
        return self._credentials.holds_pool

    async def release(self) -> None:
        """Let go of the connections and the TLS context while no request is under
        way (else nothing is done); the next request builds them again. What was
        discovered of the server is kept."""
        if not self.busy:
            await self._credentials.release()

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
        auth: Auth | None = None,
    ) -> AsyncIterator[Response]:
        """A streamed response with a 2xx status; errors mapped onto ours. ``auth``:
        the credentials to send (default: the current ones)."""
        auth = auth or await self._credentials.authorize()
        where = f"{self.name}: {method} {path}"
        self._in_flight += 1
        try:
            request = self._request_for(method, path, params, content, headers, timeout, auth)
            async with exchange(self._credentials.pool, request) as raw:
                response = Response(raw)
                if response.status_code == 401:
                    self._credentials.refused(auth)
                if response.status_code >= 300:
                    body = await read_answer(response, where, self.limits.bytes)
                    raise api_error(where, response, body, Budget(self.limits.values))
                yield response
        except TRANSPORT_ERRORS as exc:
            # Every transport failure, whatever its type, means "cannot talk to it".
            raise Unreachable(f"{where}: {type(exc).__name__}") from exc
        finally:
            self._in_flight -= 1

    def _request_for(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        content: bytes | None,
        headers: Mapping[str, str] | None,
        timeout: Mapping[str, float] | None,
        auth: Auth,
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
        self, method: str, path: str, *, budget: Budget | None = None, **kwargs: Any
    ) -> Obj:
        """One request under one deadline, connect to last byte: a server dripping its
        answer cannot hold a worker longer than ``timeout``. ``budget``: the JSON
        values the answer may decode to (default: the limit per answer). An exec
        plugin's credential the server refuses (401) is fetched again, and the
        request sent once more with the new one."""
        auth = await self._credentials.authorize()
        try:
            return await self._request_once(method, path, auth, budget, kwargs)
        except Unreachable as exc:
            if exc.status != 401 or auth.credential is None:
                raise
        return await self._request_once(
            method, path, await self._credentials.authorize(), budget, kwargs
        )

    async def _request_once(
        self,
        method: str,
        path: str,
        auth: Auth,
        budget: Budget | None,
        kwargs: Mapping[str, Any],
    ) -> Obj:
        where = f"{self.name}: {method} {path}"
        try:
            async with asyncio.timeout(self._deadline):
                async with self._send(method, path, auth=auth, **kwargs) as response:
                    raw = await read_answer(response, where, self.limits.bytes)
        except TimeoutError:
            message = f"{where}: no complete answer within {self._deadline:g}s"
            raise Unreachable(message) from None
        if not is_json(response):
            raise Unreachable(f"{where}: {not_kubernetes(response)}")
        body = decode(raw, where, budget or Budget(self.limits.values))
        if not isinstance(body, dict):
            raise Unreachable(f"{where}: {not_kubernetes(response)}")
        return body

    async def _get(self, path: str) -> Obj:
        """GET of a path (discovery's)."""
        return await self._request("GET", path)

    # -- discovery (``clients.discovery``) --------------------------------------------

    async def resource_info(self, api_version: str, kind: str) -> ResourceInfo:
        """Plural and scope of a kind; rediscovers once on a miss (a CRD may be new)."""
        return await self._discovery.resource_info(api_version, kind)

    def forget_discovery(self, api_version: str) -> None:
        self._discovery.forget(api_version)

    async def preferred_version(self, group: str) -> str | None:
        """The server's preferred version of an API group, e.g. ``cluster.x-k8s.io/v1beta2``."""
        return await self._discovery.preferred_version(group)

    async def served_versions(self, group: str) -> list[str]:
        """The ``group/version``s the server serves of an API group, its preferred first."""
        return await self._discovery.served_versions(group)

    async def path(
        self, api_version: str, kind: str, namespace: str | None = None, name: str | None = None
    ) -> str:
        """The REST path of a kind, or of one object, every segment checked."""
        return await self._discovery.path(api_version, kind, namespace, name)

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
        items: builtins.list[Obj] = []
        version = ""
        pages = self._pages(
            await self.path(api_version, kind, namespace),
            list_params(label_selector, field_selector),
            {"Accept": METADATA_LIST} if metadata_only else {},
            Budget(self.limits.values, total=True),
        )
        async for page, listed in pages:
            items.extend(page)
            version = listed
        return items, version

    async def pages(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        metadata_only: bool = False,
    ) -> AsyncIterator[tuple[builtins.list[Obj], str]]:
        """Every page of a LIST as it comes, each bounded on its own in JSON values:
        the caller holds one page at a time, so a fleet-wide LIST is not refused for
        what one namespace's objects add up to."""
        path = await self.path(api_version, kind, namespace)
        params = list_params(label_selector, field_selector)
        headers = {"Accept": METADATA_LIST} if metadata_only else {}
        async for page in self._pages(path, params, headers, None):
            yield page

    async def _pages(
        self,
        path: str,
        params: dict[str, Any],
        headers: Mapping[str, str],
        total: Budget | None,
    ) -> AsyncIterator[tuple[builtins.list[Obj], str]]:
        """Every page of a LIST, within the limits per call: pages, items, and (with
        ``total``) JSON values of all pages together. A page over the byte or value
        limit of one answer is asked again with a tenth of the items (large objects
        are legitimate, only not 500 at once), and ten pages that fit let it grow back
        tenfold; one object alone over it is refused."""
        limits, where = self.limits, f"{self.name}: LIST {path}"
        count = pages = 0
        size = _PageSize(params["limit"])
        while True:
            pages += 1
            if pages > limits.pages:
                raise AnswerTooLarge(f"{where}: more than {limits.pages} pages", limit="pages")
            try:
                budget = Budget(limits.values, within=total)
                page = await self._request(
                    "GET", path, params=params, headers=headers, budget=budget
                )
            except AnswerTooLarge as exc:
                if exc.limit not in ("bytes", "values") or params["limit"] == 1:
                    raise
                params["limit"] = size.smaller()
                continue
            params["limit"] = size.fitted()
            found, meta = page_parts(page, where)
            count += len(found)
            if count > limits.items:
                raise AnswerTooLarge(f"{where}: more than {limits.items} items", limit="items")
            if not meta.get("continue"):
                yield found, str(meta.get("resourceVersion", ""))
                return
            yield found, ""
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
        timeout = timeouts(WATCH_TIMEOUT_SECONDS + 30, connect=5.0)
        headers = {"Accept": METADATA_ITEM} if metadata_only else {}
        async with self._send("GET", path, params=params, timeout=timeout, headers=headers) as resp:
            try:
                async for line in answer_lines(resp):
                    if line:
                        event = watch_event(line, f"{self.name}: watch {path}", self.limits)
                        if event is None:
                            raise Unreachable(f"{self.name}: watch {path}: {not_kubernetes(resp)}")
                        yield event
            except TRANSPORT_ERRORS as exc:
                raise Unreachable(f"{self.name}: watch {path}: {type(exc).__name__}") from exc

    async def create(self, obj: Mapping[str, Any]) -> Obj:
        meta = obj["metadata"]
        path = await self.path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        return await self._request("POST", path, content=encode(obj))

    async def replace(self, obj: Mapping[str, Any], *, subresource: str | None = None) -> Obj:
        """PUT with the object's resourceVersion: optimistic concurrency, Conflict on a race."""
        meta = obj["metadata"]
        path = await self.path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        if subresource:
            path += f"/{subresource}"
        return await self._request("PUT", path, content=encode(obj))

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
            "PATCH", path, content=encode(patch), headers={"Content-Type": MERGE_PATCH}
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
        if has_nodes(obj, ENCODE_IN_THREAD_NODES):
            content = await asyncio.to_thread(encode, obj)
        else:
            content = encode(obj)
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
        resource_version: str | None = None,
    ) -> bool:
        """Delete with background propagation; False when it was already gone. With
        ``uid``, only that very object: one recreated under the same name since it was
        read is a Conflict, not a deletion. With ``resource_version``, only the version
        read: one written since is a Conflict too."""
        path = await self.path(api_version, kind, namespace, name)
        options: dict[str, Any] = {"propagationPolicy": "Background"}
        preconditions = {"uid": uid, "resourceVersion": resource_version}
        if any(preconditions.values()):
            options["preconditions"] = {k: v for k, v in preconditions.items() if v}
        try:
            await self._request("DELETE", path, content=encode(options))
        except NotFound:
            return False
        return True


if TYPE_CHECKING:
    # KubeClient is the engine's KubeAPI: mypy says so here, where it would break.
    _implements: type[KubeAPI] = KubeClient


class _PageSize:
    """The items a LIST asks for per page: a tenth after a page too large, and
    tenfold again (up to the first size) after ten pages in a row that fit, so that
    a few large objects do not leave the rest of a fleet-wide LIST read five at a
    time (and past its page limit). Each page refused after growing back doubles the
    pages that must fit before the next try: a namespace of large objects costs a
    refused page now and then, not every eleventh request."""

    GROW_AFTER = 10

    def __init__(self, first: int) -> None:
        self.first = self.now = first
        self._fitting, self._after, self._grew = 0, self.GROW_AFTER, False

    def smaller(self) -> int:
        self.now, self._fitting = max(1, self.now // 10), 0
        if self._grew:
            self._after, self._grew = self._after * 2, False
        return self.now

    def fitted(self) -> int:
        self._fitting += 1
        if self._fitting >= self._after and self.now < self.first:
            self.now, self._fitting, self._grew = min(self.first, self.now * 10), 0, True
        return self.now
