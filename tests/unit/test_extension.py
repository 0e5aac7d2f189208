"""The BeforeClusterDelete Runtime Extension (``app.extension``): what discovery lists,
how a hook request is answered (``answer``, including "retry" when the status cannot be
read in time), and the real TLS server on loopback — discovery (GET or POST), the hook,
404 for other paths, 405 for other methods, 400 for a body that is not JSON or badly
framed, 413 for one over ``MAX_BODY``, and no answer at all over plain HTTP.

Connection limits (timeouts, header size, idle connections) are in test_http_limits."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog.testing

from crs_controller.app import extension
from crs_controller.app.extension import (
    DISCOVERY_PATH,
    HOOK_PATH,
    HOOKS_API,
    MAX_BODY,
    RETRY_ON_ERROR_SECONDS,
    answer,
    discovery,
)
from crs_controller.testbed.certs import CertificateAuthority

CLUSTER = {
    "apiVersion": "cluster.x-k8s.io/v1beta1",
    "kind": "Cluster",
    "metadata": {"name": "work-1", "namespace": "default"},
}


def hook_request(
    cluster: Any = CLUSTER, kind: str = "BeforeClusterDeleteRequest"
) -> dict[str, Any]:
    return {"apiVersion": HOOKS_API, "kind": kind, "cluster": cluster}


@dataclass
class Recorder:
    """A ``status`` callable that answers a fixed verdict and remembers its calls."""

    retry_after: int = 30
    message: str = "removing 3 add-on objects"
    calls: list[dict[str, Any]] = field(default_factory=list)

    async def __call__(self, cluster: dict[str, Any]) -> tuple[int, str]:
        self.calls.append(cluster)
        return self.retry_after, self.message


def test_discovery_lists_exactly_one_before_cluster_delete_handler() -> None:
    response = discovery()
    assert response["kind"] == "DiscoveryResponse"
    assert response["status"] == "Success"
    [handler] = response["handlers"]
    assert handler["requestHook"] == {"apiVersion": HOOKS_API, "hook": "BeforeClusterDelete"}
    # Cluster API calls <prefix>/<hook in lower case>/<handler name>.
    assert handler["name"] == HOOK_PATH.rsplit("/", 1)[-1]
    assert HOOK_PATH.startswith(f"/{HOOKS_API}/beforeclusterdelete/")


@pytest.mark.parametrize(
    ("retry_after", "message"),
    [(30, "removing 3 add-on objects"), (5, "waiting for hook Job"), (0, "cleanup done")],
)
async def test_answer_relays_the_status_for_the_requested_cluster(
    retry_after: int, message: str
) -> None:
    status = Recorder(retry_after, message)
    response = await answer(hook_request(), status)
    assert response == {
        "apiVersion": HOOKS_API,
        "kind": "BeforeClusterDeleteResponse",
        "status": "Success",
        "message": message,
        "retryAfterSeconds": retry_after,
    }
    assert status.calls == [CLUSTER]


@pytest.mark.parametrize(
    "request_body",
    [
        hook_request(kind="AfterControlPlaneInitializedRequest"),
        hook_request(kind="DiscoveryRequest"),
        {"apiVersion": HOOKS_API, "cluster": CLUSTER},
        hook_request(cluster=None),
        hook_request(cluster="work-1"),
        hook_request(cluster=["work-1"]),
        {"apiVersion": HOOKS_API, "kind": "BeforeClusterDeleteRequest"},
        {},
    ],
    ids=[
        "other-hook",
        "discovery-kind",
        "no-kind",
        "null-cluster",
        "cluster-as-string",
        "cluster-as-list",
        "no-cluster",
        "empty",
    ],
)
async def test_answer_fails_a_request_that_is_not_a_before_cluster_delete(
    request_body: dict[str, Any],
) -> None:
    status = Recorder()
    response = await answer(request_body, status)
    assert response["kind"] == "BeforeClusterDeleteResponse"
    assert response["status"] == "Failure"
    assert "retryAfterSeconds" not in response
    assert status.calls == []


@dataclass
class Failing:
    """A ``status`` callable that raises, with a message that must never reach the log."""

    error: Exception

    async def __call__(self, cluster: dict[str, Any]) -> tuple[int, str]:
        raise self.error


@pytest.mark.parametrize(
    "error",
    [RuntimeError("cluster work-1 token=s3cret"), TimeoutError(), KeyError("s3cret")],
    ids=["runtime-error", "timeout", "key-error"],
)
async def test_answer_asks_to_retry_when_the_status_cannot_be_read(error: Exception) -> None:
    with structlog.testing.capture_logs() as logs:
        response = await answer(hook_request(), Failing(error))
    assert response["status"] == "Success"
    assert response["retryAfterSeconds"] == RETRY_ON_ERROR_SECONDS > 0
    assert "could not" in response["message"]
    # The error type is logged, never its message (it may quote the cluster).
    assert [entry.get("error") for entry in logs] == [type(error).__name__]
    assert "s3cret" not in repr(logs)


async def test_answer_asks_to_retry_when_the_status_takes_too_long() -> None:
    async def never(cluster: dict[str, Any]) -> tuple[int, str]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    response = await asyncio.wait_for(answer(hook_request(), never, timeout=0.05), 5)
    assert response["retryAfterSeconds"] == RETRY_ON_ERROR_SECONDS


@dataclass
class Served:
    url: str
    plain_url: str
    verify: ssl.SSLContext
    status: Recorder


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    ca = CertificateAuthority.generate("extension-ca")
    serving = ca.issue_serving(("127.0.0.1", "localhost"))
    (tmp_path / "tls.crt").write_bytes(serving.cert_pem)
    (tmp_path / "tls.key").write_bytes(serving.key_pem)
    status = Recorder()
    server = await extension.serve("127.0.0.1", 0, str(tmp_path), status)
    port = server.port
    verify = ssl.create_default_context(cadata=ca.cert_pem.decode())
    try:
        yield Served(f"https://127.0.0.1:{port}", f"http://127.0.0.1:{port}", verify, status)
    finally:
        await asyncio.wait_for(server.close(), 5)


async def test_server_answers_discovery(served: Served) -> None:
    async with httpx.AsyncClient(verify=served.verify, timeout=5) as client:
        response = await client.post(
            served.url + DISCOVERY_PATH,
            json={"apiVersion": HOOKS_API, "kind": "DiscoveryRequest"},
        )
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == discovery()


async def test_server_answers_the_hook_with_the_status_of_the_cluster(served: Served) -> None:
    async with httpx.AsyncClient(verify=served.verify, timeout=5) as client:
        response = await client.post(served.url + HOOK_PATH, json=hook_request())
    assert response.status_code == 200
    body = response.json()
    assert body["kind"] == "BeforeClusterDeleteResponse"
    assert body["status"] == "Success"
    assert body["retryAfterSeconds"] == served.status.retry_after
    assert body["message"] == served.status.message
    assert served.status.calls == [CLUSTER]


async def test_server_fails_a_hook_request_of_another_kind(served: Served) -> None:
    async with httpx.AsyncClient(verify=served.verify, timeout=5) as client:
        response = await client.post(
            served.url + HOOK_PATH, json=hook_request(kind="AfterClusterUpgradeRequest")
        )
    assert response.status_code == 200
    assert response.json()["status"] == "Failure"
    assert served.status.calls == []


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/"),
        ("GET", "/"),
        ("POST", "/healthz"),
        ("POST", f"/{HOOKS_API}/beforeclusterdelete/another-handler"),
        ("POST", f"/{HOOKS_API}/afterclusterupgrade/before-cluster-delete"),
        ("POST", HOOK_PATH + "/extra"),
    ],
)
async def test_server_has_no_handler_elsewhere(served: Served, method: str, path: str) -> None:
    async with httpx.AsyncClient(verify=served.verify, timeout=5) as client:
        response = await client.request(method, served.url + path, json=hook_request())
    assert response.status_code == 404
    assert served.status.calls == []


async def test_server_answers_discovery_on_get(served: Served) -> None:
    async with httpx.AsyncClient(verify=served.verify, timeout=5) as client:
        response = await client.get(served.url + DISCOVERY_PATH)
    assert response.status_code == 200
    assert response.json() == discovery()


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", HOOK_PATH, "POST"),
        ("PUT", HOOK_PATH, "POST"),
        ("DELETE", HOOK_PATH, "POST"),
        ("PUT", DISCOVERY_PATH, "GET, POST"),
    ],
)
async def test_server_refuses_other_methods_on_its_paths(
    served: Served, method: str, path: str, allow: str
) -> None:
    # 405 with Allow, as HTTP asks for a path that exists (the hand-written server
    # answered 404).
    async with httpx.AsyncClient(verify=served.verify, timeout=5) as client:
        response = await client.request(method, served.url + path, json=hook_request())
    assert response.status_code == 405
    assert response.headers["allow"] == allow
    assert served.status.calls == []


async def test_the_hook_path_matches_whatever_the_query_string(served: Served) -> None:
    async with httpx.AsyncClient(verify=served.verify, timeout=5) as client:
        response = await client.post(
            served.url + HOOK_PATH, params={"timeout": "10s"}, json=hook_request()
        )
    assert response.status_code == 200
    assert response.json()["status"] == "Success"


@pytest.mark.parametrize(
    "body",
    [b"not json", b"{", b"\xff\xfe", b"<xml/>"],
    ids=["text", "truncated", "not-utf8", "xml"],
)
async def test_server_refuses_a_body_that_is_not_json(served: Served, body: bytes) -> None:
    async with httpx.AsyncClient(verify=served.verify, timeout=5) as client:
        response = await client.post(
            served.url + HOOK_PATH, content=body, headers={"content-type": "application/json"}
        )
    assert response.status_code == 400
    assert served.status.calls == []


async def test_server_refuses_plain_http(served: Served) -> None:
    async with httpx.AsyncClient(timeout=5) as client:
        with pytest.raises(httpx.TransportError):
            await client.post(served.plain_url + HOOK_PATH, json=hook_request())
    assert served.status.calls == []


async def exchange(served: Served, head: str, body: bytes = b"") -> bytes:
    """Send a hand-written request over TLS and read until the server hangs up."""
    port = int(served.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=served.verify)
    try:
        writer.write(head.encode() + b"\r\n\r\n" + body)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


async def test_server_refuses_a_body_larger_than_its_limit(served: Served) -> None:
    head = f"POST {HOOK_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {MAX_BODY + 1}"
    reply = await exchange(served, head)
    # Refused on the declared length alone: no body was sent, and none is waited for.
    assert reply.startswith(b"HTTP/1.1 413 ")
    assert served.status.calls == []


@pytest.mark.parametrize("length", ["abc", "-5", "1.5"])
async def test_server_refuses_a_malformed_content_length(served: Served, length: str) -> None:
    head = f"POST {HOOK_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}"
    reply = await exchange(served, head, b"{}")
    assert reply.startswith(b"HTTP/1.1 400 ")
