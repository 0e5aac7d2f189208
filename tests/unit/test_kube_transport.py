"""The API client's transport seam (``KubeClient(transport=...)``): the network is
swapped for an in-memory server, so the client's own work (paths from discovery,
headers, paging, watch lines, errors mapped onto ours, closing) is checked without a
socket and without mocking a function. The TLS and hostile-server cases stay on real
loopback servers (test_kube_client.py)."""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable
from typing import Any

import httpcore
import pytest

from crs_controller.clients.kube import Connect, KubeClient, Transport
from crs_controller.clients.kubeconfig import Endpoint
from crs_controller.core.errors import Conflict, Unreachable

Answer = tuple[int, Any]  # status, JSON body (bytes: sent as they are)
Handler = Callable[[str, str], Answer]  # (method, path with query) -> answer

DISCOVERY = {
    "resources": [
        {"name": "configmaps", "kind": "ConfigMap", "namespaced": True},
        {"name": "configmaps/status", "kind": "ConfigMap", "namespaced": True},
        {"name": "namespaces", "kind": "Namespace", "namespaced": False},
    ]
}


class MemoryTransport:
    """A ``clients.kube.Transport`` answering from ``handler``; keeps every request."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[httpcore.Request] = []
        self.closed = False

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        self.requests.append(request)
        code, body = self.handler(request.method.decode(), request.url.target.decode())
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = [(b"Content-Type", b"application/json")]
        return httpcore.Response(code, headers=headers, content=content)

    async def aclose(self) -> None:
        self.closed = True


def client(handler: Handler) -> tuple[KubeClient, MemoryTransport]:
    memory = MemoryTransport(handler)
    contexts: list[ssl.SSLContext] = []

    def connect(endpoint: Endpoint, context: ssl.SSLContext) -> Transport:
        contexts.append(context)
        return memory

    seam: Connect = connect
    endpoint = Endpoint(server="https://api.example:6443/prefix", token="t0ken")
    built = KubeClient(endpoint, name="memory", transport=seam)
    assert len(contexts) == 1  # built once, with the endpoint's TLS context
    return built, memory


def routes(table: dict[tuple[str, str], Answer]) -> Handler:
    def handler(method: str, target: str) -> Answer:
        return table.get((method, target), (404, b"404 page not found"))

    return handler


async def test_a_get_finds_its_path_by_discovery_and_sends_the_client_headers() -> None:
    cm = {"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}}
    kube, memory = client(
        routes(
            {
                ("GET", "/prefix/api/v1"): (200, DISCOVERY),
                ("GET", "/prefix/api/v1/namespaces/ns/configmaps/a"): (200, cm),
            }
        )
    )
    assert await kube.get("v1", "ConfigMap", "a", "ns") == cm
    assert await kube.get("v1", "ConfigMap", "b", "ns") is None  # a plain 404: none
    sent = memory.requests[1]
    headers = {k.decode().lower(): v.decode() for k, v in sent.headers}
    assert headers["authorization"] == "Bearer t0ken"
    assert headers["host"] == "api.example:6443"
    assert headers["user-agent"] == "crs-controller"
    assert (sent.url.scheme, sent.url.host, sent.url.port) == (b"https", b"api.example", 6443)
    # Discovery is asked once and kept.
    assert [r.url.target for r in memory.requests].count(b"/prefix/api/v1") == 1


async def test_a_list_follows_continue_tokens_and_a_status_error_maps_onto_ours() -> None:
    def handler(method: str, target: str) -> Answer:
        if target == "/prefix/api/v1":
            return 200, DISCOVERY
        if method == "POST":
            status = {"kind": "Status", "code": 409, "reason": "AlreadyExists", "message": "x"}
            return 409, status
        if "continue=next" in target:
            return 200, {"items": [{"n": 2}], "metadata": {"resourceVersion": "9"}}
        return 200, {"items": [{"n": 1}], "metadata": {"continue": "next"}}

    kube, memory = client(handler)
    items, version = await kube.list("v1", "ConfigMap", "ns", label_selector="app=x")
    assert (items, version) == ([{"n": 1}, {"n": 2}], "9")
    first = memory.requests[1].url.target.decode()
    assert first.startswith("/prefix/api/v1/namespaces/ns/configmaps?")
    assert "labelSelector=app%3Dx" in first and "limit=500" in first
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}}
    with pytest.raises(Conflict, match="409 AlreadyExists"):
        await kube.create(obj)


async def test_watch_events_arrive_line_by_line() -> None:
    lines = [
        {"type": "ADDED", "object": {"metadata": {"name": "a"}}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
    ]
    body = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    kube, memory = client(
        lambda method, target: (200, DISCOVERY) if target == "/prefix/api/v1" else (200, body)
    )
    events = [event async for event in kube.watch("v1", "ConfigMap", "ns", "10")]
    assert events == [(str(line["type"]), line["object"]) for line in lines]
    assert "resourceVersion=10" in memory.requests[-1].url.target.decode()


async def test_a_failing_transport_is_unreachable_and_close_closes_it() -> None:
    def handler(method: str, target: str) -> Answer:
        raise httpcore.ConnectError("refused")

    kube, memory = client(handler)
    with pytest.raises(Unreachable, match="memory: GET /api/v1: ConnectError"):
        await kube.get("v1", "ConfigMap", "a", "ns")
    await kube.close()
    assert memory.closed
