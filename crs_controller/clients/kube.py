"""The only code that talks to a Kubernetes API server.

A thin, typed layer over kr8s's low-level ``call_api``: raw dict payloads in and out,
discovery cached per group-version, and every failure mapped onto our own error tree
(``NotFound``, ``Conflict``, ``Unreachable``, ``APIError``) with response bodies
truncated, so nothing large or secret travels up into logs or conditions.
"""

from __future__ import annotations

import json
import ssl
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import kr8s
import kr8s.asyncio
import yaml

from crs_controller.core.errors import APIError, Conflict, NotFound, Unreachable

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
WATCH_TIMEOUT_SECONDS = 290
METADATA_LIST = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"
METADATA_ITEM = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io,application/json"

Obj = dict[str, Any]


@dataclass(frozen=True)
class ResourceInfo:
    """Where a kind lives in the REST tree."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool


class KubeClient:
    """Async client for one API server (the management cluster or a workload cluster)."""

    def __init__(self, api: Any, *, name: str) -> None:
        self._api = api
        self.name = name
        self._discovery: dict[str, dict[str, ResourceInfo]] = {}

    @classmethod
    async def connect(
        cls,
        kubeconfig: str | Mapping[str, Any] | None,
        *,
        name: str,
        timeout: float = 30.0,
    ) -> KubeClient:
        """Build a client from a kubeconfig path or dict; None means in-cluster/default."""
        if isinstance(kubeconfig, str):
            kubeconfig = _inline_kubeconfig(kubeconfig)
        try:
            # Bypass kr8s's instance factory: with all-None arguments it hands back
            # whichever instance already exists, which could be a workload cluster's.
            api = kr8s.asyncio.Api(
                bypass_factory=True,
                kubeconfig=dict(kubeconfig) if isinstance(kubeconfig, Mapping) else kubeconfig,
            )
            api.timeout = httpx.Timeout(timeout, connect=min(timeout, 5.0))
            await api.auth
            if isinstance(kubeconfig, Mapping):
                _keep_keys_off_disk(api.auth)
                await api._create_session()  # read the key material now, then drop it
        except (OSError, ValueError, KeyError, TypeError, ssl.SSLError) as exc:
            raise Unreachable(f"{name}: invalid kubeconfig ({type(exc).__name__})") from exc
        return cls(api, name=name)

    async def close(self) -> None:
        session = getattr(self._api, "_session", None)
        if session is not None:
            await session.aclose()

    # -- plumbing -----------------------------------------------------------------

    @asynccontextmanager
    async def _call(
        self, method: str, path: str, *, stream: bool = False, **kwargs: Any
    ) -> AsyncIterator[httpx.Response]:
        try:
            async with self._api.call_api(
                method, version="", base=path, stream=stream, **kwargs
            ) as response:
                yield response
        except kr8s.ServerError as exc:
            raise _api_error(self.name, method, path, exc) from exc
        except (httpx.TransportError, ssl.SSLError, OSError, kr8s.APITimeoutError) as exc:
            raise Unreachable(f"{self.name}: {method} {path}: {type(exc).__name__}") from exc

    async def _request(self, method: str, path: str, **kwargs: Any) -> Obj:
        async with self._call(method, path, **kwargs) as response:
            body: Obj = response.json()
            return body

    # -- discovery ----------------------------------------------------------------

    async def resource_info(self, api_version: str, kind: str) -> ResourceInfo:
        """Plural and scope of a kind; rediscovers once on a miss (a CRD may be new)."""
        known = self._discovery.get(api_version)
        if known is None or kind not in known:
            known = await self._discover(api_version)
        if kind not in known:
            raise NotFound(f"{self.name}: no kind {kind} in {api_version}", status=404)
        return known[kind]

    async def _discover(self, api_version: str) -> dict[str, ResourceInfo]:
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        try:
            listing = await self._request("GET", base)
        except NotFound:
            listing = {"resources": []}
        found = {
            r["kind"]: ResourceInfo(api_version, r["kind"], r["name"], bool(r["namespaced"]))
            for r in listing.get("resources", [])
            if "/" not in r["name"]
        }
        self._discovery[api_version] = found
        return found

    def forget_discovery(self, api_version: str) -> None:
        self._discovery.pop(api_version, None)

    async def preferred_version(self, group: str) -> str | None:
        """The server's preferred version of an API group, e.g. ``cluster.x-k8s.io/v1beta2``."""
        try:
            info = await self._request("GET", f"/apis/{group}")
        except NotFound:
            return None
        preferred = info.get("preferredVersion", {}).get("groupVersion")
        return str(preferred) if preferred else None

    async def path(
        self, api_version: str, kind: str, namespace: str | None = None, name: str | None = None
    ) -> str:
        info = await self.resource_info(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        parts = [base]
        if info.namespaced and namespace:
            parts += ["namespaces", namespace]
        parts.append(info.plural)
        if name:
            parts.append(name)
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
        params: dict[str, Any] = {"limit": 500}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        path = await self.path(api_version, kind, namespace)
        items: list[Obj] = []
        while True:
            page = await self._request("GET", path, params=params, headers=headers)
            items.extend(page.get("items") or [])
            meta = page.get("metadata", {})
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
        timeout = httpx.Timeout(WATCH_TIMEOUT_SECONDS + 30, connect=5.0)
        headers = {"Accept": METADATA_ITEM} if metadata_only else {}
        async with self._call(
            "GET", path, stream=True, params=params, timeout=timeout, headers=headers
        ) as resp:
            try:
                async for line in resp.aiter_lines():
                    if line:
                        event = json.loads(line)
                        yield str(event["type"]), event["object"]
            except (httpx.TransportError, ssl.SSLError, OSError) as exc:
                raise Unreachable(f"{self.name}: watch {path}: {type(exc).__name__}") from exc

    async def create(self, obj: Mapping[str, Any]) -> Obj:
        meta = obj["metadata"]
        path = await self.path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        return await self._request("POST", path, content=json.dumps(obj))

    async def replace(self, obj: Mapping[str, Any], *, subresource: str | None = None) -> Obj:
        """PUT with the object's resourceVersion: optimistic concurrency, Conflict on a race."""
        meta = obj["metadata"]
        path = await self.path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        if subresource:
            path += f"/{subresource}"
        return await self._request("PUT", path, content=json.dumps(obj))

    async def patch_merge(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Mapping[str, Any],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> Obj:
        path = await self.path(api_version, kind, namespace, name)
        if subresource:
            path += f"/{subresource}"
        return await self._request(
            "PATCH", path, content=json.dumps(patch), headers={"Content-Type": MERGE_PATCH}
        )

    async def apply(self, obj: Mapping[str, Any], *, field_manager: str, force: bool = True) -> Obj:
        """Server-side apply of one object; the body is JSON, which is valid YAML."""
        meta = obj["metadata"]
        path = await self.path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        params = {"fieldManager": field_manager, "force": "true" if force else "false"}
        return await self._request(
            "PATCH",
            path,
            params=params,
            content=json.dumps(obj),
            headers={"Content-Type": APPLY_PATCH},
        )

    async def delete(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> bool:
        """Delete with background propagation; False when it was already gone."""
        path = await self.path(api_version, kind, namespace, name)
        try:
            await self._request(
                "DELETE", path, content=json.dumps({"propagationPolicy": "Background"})
            )
        except NotFound:
            return False
        return True


PATH_FIELDS = ("client-key", "client-certificate", "certificate-authority")


def _inline_kubeconfig(path: str) -> str | dict[str, Any]:
    """A kubeconfig file whose credentials are all inline (``*-data``) is loaded as a
    dict, so its key material gets the same no-temp-files treatment as a workload
    cluster's. Files that reference other files keep kr8s's path handling."""
    try:
        with open(path, encoding="utf-8") as handle:
            loaded = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError):
        return path  # kr8s reports the problem with its own message
    if not isinstance(loaded, dict):
        return path
    entries = [e.get("user") or {} for e in loaded.get("users") or []]
    entries += [e.get("cluster") or {} for e in loaded.get("clusters") or []]
    if any(field in entry for entry in entries for field in PATH_FIELDS):
        return path
    return loaded


def _keep_keys_off_disk(auth: Any) -> None:
    """kr8s writes ``*-data`` certificates and keys from a kubeconfig dict to temp
    files and never removes them. Wrap its SSL context factory so those files are
    read once into the context and deleted at once: a workload cluster's private key
    must not stay on disk."""
    build = auth.ssl_context
    cached: list[Any] = []

    async def ssl_context() -> Any:
        paths = [auth.client_key_file, auth.client_cert_file, auth.server_ca_file]
        temp = [Path(str(p)) for p in paths if p and str(p).startswith(tempfile.gettempdir())]
        if cached and not any(p.exists() for p in temp):
            return cached[0]  # nothing new was written (no re-authentication)
        context = await build()
        cached[:] = [context]
        for path in temp:
            path.unlink(missing_ok=True)
        return context

    auth.ssl_context = ssl_context


def _api_error(cluster: str, method: str, path: str, exc: kr8s.ServerError) -> APIError:
    response = exc.response
    code = response.status_code if response is not None else None
    status: dict[str, Any] = exc.status if isinstance(exc.status, dict) else {}
    reason = str(status.get("reason", "")) or (str(code) if code else "Error")
    # The server's message can quote object content (e.g. an invalid Secret), so
    # callers decide whether to show it; we keep it truncated on the side.
    message = f"{cluster}: {method} {path}: {code} {reason}"
    detail = str(status.get("message", ""))[:300]
    if code == 404:
        return NotFound(message, status=code, body=detail)
    if code == 409:
        return Conflict(message, status=code, body=detail)
    if code is not None and code >= 500:
        return Unreachable(message, status=code, body=detail)
    return APIError(message, status=code, body=detail)
