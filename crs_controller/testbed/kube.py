"""A small synchronous Kubernetes client for tests and the demo.

Deliberately separate from the controller's own async client: tests check the
controller's effects through an independent path, so a bug in one cannot hide in
the other.
"""

from __future__ import annotations

import base64
import builtins
import json
import ssl
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import httpx

Obj = dict[str, Any]
T = TypeVar("T")
# The names of the namespaces tests make on the management server begin so.
TEST_NAMESPACE_PREFIX = "test-"


class HasKubeconfig(Protocol):
    def kubeconfig(self) -> Obj: ...


class KubeError(Exception):
    """The API server refused a request; ``message`` is the server's own text."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


def _named(entries: list[Obj], name: str) -> Obj:
    for entry in entries:
        if entry["name"] == name:
            return dict(entry)
    raise ValueError(f"kubeconfig has no entry named {name!r}")


def _ssl_context(cluster: Obj, user: Obj) -> ssl.SSLContext:
    context = ssl.create_default_context(
        cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
    )
    if "client-certificate-data" in user:
        # The ssl module only loads key material from files; keep them briefly.
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
            key.write_bytes(base64.b64decode(user["client-key-data"]))
            context.load_cert_chain(cert, key)
    return context


def http_client(kubeconfig: Obj, timeout: float = 10.0) -> httpx.Client:
    """An httpx client for the current context of a kubeconfig given as a dict."""
    context = _named(kubeconfig["contexts"], kubeconfig["current-context"])["context"]
    cluster = _named(kubeconfig["clusters"], context["cluster"])["cluster"]
    user = _named(kubeconfig["users"], context["user"])["user"]
    headers = {"Authorization": f"Bearer {user['token']}"} if "token" in user else {}
    return httpx.Client(
        base_url=cluster["server"],
        verify=_ssl_context(cluster, user),
        headers=headers,
        timeout=timeout,
    )


def _raise_for(response: httpx.Response) -> None:
    if response.is_success:
        return
    try:
        body = response.json()
        reason, message = body.get("reason", ""), body.get("message", "")
    except json.JSONDecodeError:
        reason, message = response.reason_phrase, response.text[:300]
    raise KubeError(response.status_code, reason, message)


def _group_path(api_version: str) -> str:
    return "/api/v1" if api_version == "v1" else f"/apis/{api_version}"


class TestbedClient:
    """Admin-style CRUD by apiVersion and kind; plurals come from discovery. The test
    bed's own synchronous client, for tests, the demo and the benchmarks; the
    controller talks through ``clients.kube.KubeClient``."""

    __test__ = False  # a helper, not a test class, whatever pytest makes of its name

    def __init__(self, source: HasKubeconfig | Obj, timeout: float = 10.0) -> None:
        kubeconfig = source if isinstance(source, dict) else source.kubeconfig()
        self.http = http_client(kubeconfig, timeout)
        self._resources: dict[str, dict[str, tuple[str, bool]]] = {}

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> TestbedClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _discover(self, api_version: str) -> dict[str, tuple[str, bool]]:
        response = self.http.get(_group_path(api_version))
        if response.status_code == 404:
            return {}  # the group is not served (yet), e.g. a CRD still being installed
        _raise_for(response)
        return {
            r["kind"]: (r["name"], r["namespaced"])
            for r in response.json()["resources"]
            if "/" not in r["name"]
        }

    def resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """``(plural, namespaced)`` for a kind, rediscovering once on a miss."""
        known = self._resources.get(api_version, {})
        if kind not in known:
            known = self._resources[api_version] = self._discover(api_version)
        if kind not in known:
            raise KubeError(404, "NotFound", f"the server does not serve {kind} {api_version}")
        return known[kind]

    def path(
        self,
        api_version: str,
        kind: str,
        name: str | None = None,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> str:
        plural, namespaced = self.resource(api_version, kind)
        parts = [_group_path(api_version)]
        if namespaced and namespace:
            parts += ["namespaces", namespace]
        parts.append(plural)
        if name:
            parts.append(name)
        if subresource:
            parts.append(subresource)
        return "/".join(parts)

    def _object_path(self, obj: Obj, subresource: str | None = None) -> str:
        meta = obj["metadata"]
        return self.path(
            obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"), subresource
        )

    def _send(self, method: str, path: str, **kwargs: Any) -> Obj:
        response = self.http.request(method, path, **kwargs)
        _raise_for(response)
        result: Obj = response.json()
        return result

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        response = self.http.get(self.path(api_version, kind, name, namespace))
        if response.status_code == 404:
            return None
        _raise_for(response)
        result: Obj = response.json()
        return result

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> builtins.list[Obj]:
        params = {"labelSelector": label_selector} if label_selector else {}
        body = self._send("GET", self.path(api_version, kind, namespace=namespace), params=params)
        # List items omit apiVersion/kind; put them back so items can be sent again.
        return [{"apiVersion": api_version, "kind": kind, **item} for item in body["items"]]

    def create(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        path = self.path(obj["apiVersion"], obj["kind"], namespace=meta.get("namespace"))
        return self._send("POST", path, json=obj)

    def apply(self, obj: Obj, field_manager: str = "testbed", force: bool = True) -> Obj:
        """Server-side apply; the body is JSON, which is valid YAML."""
        return self._send(
            "PATCH",
            self._object_path(obj),
            content=json.dumps(obj),
            headers={"Content-Type": "application/apply-patch+yaml"},
            params={"fieldManager": field_manager, "force": str(force).lower()},
        )

    def patch_merge(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Obj,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        return self._send(
            "PATCH",
            self.path(api_version, kind, name, namespace, subresource),
            content=json.dumps(patch),
            headers={"Content-Type": "application/merge-patch+json"},
        )

    def update(self, obj: Obj) -> Obj:
        return self._send("PUT", self._object_path(obj), json=obj)

    def update_status(self, obj: Obj) -> Obj:
        """PUT the status subresource; fills in resourceVersion if the caller had none."""
        if not obj["metadata"].get("resourceVersion"):
            meta = obj["metadata"]
            current = self.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
            if current is None:
                raise KubeError(404, "NotFound", f"{obj['kind']} {meta['name']} not found")
            obj = {
                **obj,
                "metadata": {**meta, "resourceVersion": current["metadata"]["resourceVersion"]},
            }
        return self._send("PUT", self._object_path(obj, "status"), json=obj)

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        response = self.http.delete(self.path(api_version, kind, name, namespace))
        if response.status_code != 404:
            _raise_for(response)


def wait_for(
    predicate: Callable[[], T | None],
    timeout: float = 30.0,
    interval: float = 0.2,
    message: str = "condition",
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"{message} not met within {timeout}s")
        time.sleep(interval)
