"""The Runtime Extension (``app.extension``): what discovery lists (BeforeClusterDelete,
AfterControlPlaneUpgrade, BeforeWorkersUpgrade), how a hook request is answered
(``answer``, including "retry" when the status cannot be read in time, and which
version an upgrade request asks about), and the real TLS server on loopback —
discovery (GET or POST), the hooks driven with Cluster API's request JSON, 404 for
other paths, 405 for other methods, 400 for a body that is not JSON, nested too deep
to parse or badly framed, 413 for one over ``MAX_BODY``, and no answer at all over
plain HTTP; at most ``ANSWERS_AT_ONCE`` answers read at once, the requests past them
answered "retry" at once.

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
from prometheus_client import REGISTRY

from crs_controller.app import extension
from crs_controller.app.extension import (
    AFTER_CONTROL_PLANE_UPGRADE,
    BEFORE_CLUSTER_DELETE,
    BEFORE_CLUSTER_UPGRADE,
    BEFORE_WORKERS_UPGRADE,
    DISCOVERY_PATH,
    HOOK_PATH,
    HOOKS_API,
    MAX_BODY,
    RETRY_ON_ERROR_SECONDS,
    Ask,
    Status,
    answer,
    asks,
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


# A Cluster as Cluster API sends it in an upgrade hook's request: a managed topology.
TOPOLOGY_CLUSTER = {
    "apiVersion": "cluster.x-k8s.io/v1beta1",
    "kind": "Cluster",
    "metadata": {
        "name": "work-1",
        "namespace": "default",
        "uid": "6f1c2f4e-3d4b-4b8e-9a51-2b7c1d0e9f10",
        "resourceVersion": "48213",
        "generation": 4,
        "labels": {"cni": "calico", "topology.cluster.x-k8s.io/owned": ""},
    },
    "spec": {
        "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}},
        "controlPlaneEndpoint": {"host": "10.0.0.10", "port": 6443},
        "controlPlaneRef": {
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta1",
            "kind": "KubeadmControlPlane",
            "name": "work-1-cp-x7k2p",
            "namespace": "default",
        },
        "topology": {
            "class": "quick-start",
            "version": "v1.34.0",
            "controlPlane": {"replicas": 3},
            "workers": {
                "machineDeployments": [{"class": "default-worker", "name": "md-0", "replicas": 2}]
            },
        },
    },
    "status": {
        "phase": "Provisioned",
        "controlPlaneReady": True,
        "infrastructureReady": True,
        "conditions": [{"type": "Ready", "status": "True"}],
    },
}


def after_control_plane_upgrade(version: Any = "v1.34.0", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": HOOKS_API,
        "kind": "AfterControlPlaneUpgradeRequest",
        "settings": {"owner": "platform"},
        "cluster": TOPOLOGY_CLUSTER,
        "kubernetesVersion": version,
        **extra,
    }


def before_workers_upgrade(**fields: Any) -> dict[str, Any]:
    base = {
        "apiVersion": HOOKS_API,
        "kind": "BeforeWorkersUpgradeRequest",
        "cluster": TOPOLOGY_CLUSTER,
        "fromKubernetesVersion": "v1.33.2",
        "toKubernetesVersion": "v1.34.0",
    }
    return {**base, **fields}


@dataclass
class GateRecorder:
    """A ``gate`` callable that answers a fixed verdict and remembers what it was asked."""

    retry_after: int = 0
    message: str = "add-ons in place"
    calls: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    before: list[bool] = field(default_factory=list)  # asked before the upgrade starts

    async def __call__(
        self, cluster: dict[str, Any], version: Any, before: bool
    ) -> tuple[int, str]:
        self.calls.append((cluster, str(version)))
        self.before.append(before)
        return self.retry_after, self.message


def deleting(status: Status) -> Ask:
    return asks(status, None)[BEFORE_CLUSTER_DELETE]


def test_discovery_lists_the_four_hooks_at_the_paths_they_are_served() -> None:
    response = discovery()
    assert response["kind"] == "DiscoveryResponse"
    assert response["status"] == "Success"
    listed = {h["requestHook"]["hook"]: h for h in response["handlers"]}
    assert set(listed) == {
        "BeforeClusterDelete",
        "BeforeClusterUpgrade",
        "AfterControlPlaneUpgrade",
        "BeforeWorkersUpgrade",
    }
    hooks = (
        BEFORE_CLUSTER_DELETE,
        BEFORE_CLUSTER_UPGRADE,
        AFTER_CONTROL_PLANE_UPGRADE,
        BEFORE_WORKERS_UPGRADE,
    )
    for hook in hooks:
        handler = listed[hook.name]
        assert handler["requestHook"]["apiVersion"] == HOOKS_API
        assert handler["failurePolicy"] == "Fail"
        # Cluster API calls <prefix>/<hook in lower case>/<handler name>.
        assert hook.path == f"/{HOOKS_API}/{hook.name.lower()}/{handler['name']}"
    assert HOOK_PATH.endswith("/beforeclusterdelete/before-cluster-delete")
    assert AFTER_CONTROL_PLANE_UPGRADE.path.endswith(
        "/aftercontrolplaneupgrade/after-control-plane-upgrade"
    )
    assert BEFORE_WORKERS_UPGRADE.path.endswith("/beforeworkersupgrade/before-workers-upgrade")
    assert BEFORE_CLUSTER_UPGRADE.path.endswith("/beforeclusterupgrade/before-cluster-upgrade")


@pytest.mark.parametrize(
    ("retry_after", "message"),
    [(30, "removing 3 add-on objects"), (5, "waiting for hook Job"), (0, "cleanup done")],
)
async def test_answer_relays_the_status_for_the_requested_cluster(
    retry_after: int, message: str
) -> None:
    status = Recorder(retry_after, message)
    response = await answer(hook_request(), BEFORE_CLUSTER_DELETE, deleting(status))
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
    response = await answer(request_body, BEFORE_CLUSTER_DELETE, deleting(status))
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
        response = await answer(hook_request(), BEFORE_CLUSTER_DELETE, deleting(Failing(error)))
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

    response = await asyncio.wait_for(
        answer(hook_request(), BEFORE_CLUSTER_DELETE, deleting(never), timeout=0.05), 5
    )
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
    assert response.json() == discovery((BEFORE_CLUSTER_DELETE,))


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
    assert response.json() == discovery((BEFORE_CLUSTER_DELETE,))


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


def receiving(body: bytes, chunk: int = 64 * 1024) -> Any:
    """An ASGI ``receive`` handing ``body`` over in chunks, as a server does."""
    parts = [body[at : at + chunk] for at in range(0, len(body), chunk)] or [b""]
    left = iter(enumerate(parts, 1))

    async def receive() -> dict[str, Any]:
        n, part = next(left)
        return {"type": "http.request", "body": part, "more_body": n < len(parts)}

    return receive


async def handle(body: bytes, *, declared: bool) -> tuple[int, dict[str, Any]]:
    """``_handle`` a BeforeClusterDelete POST carrying ``body`` (with its Content-Length
    when ``declared``, else as a chunked body is: no length to check first)."""
    headers = [(b"content-length", str(len(body)).encode())] if declared else []
    scope: Any = {"path": HOOK_PATH, "method": "POST", "headers": headers}
    status = Recorder()
    code, reply, _ = await extension._handle(scope, receiving(body), asks(status, None), 5.0)
    assert status.calls == []  # never asked: the request was not read
    return code, reply


async def test_a_body_nested_too_deep_is_refused_as_not_json() -> None:
    """200 KB of brackets nest past the interpreter's recursion limit: a 400, not an
    exception (the server would log a traceback per such request and answer 500)."""
    code, reply = await handle(b"[" * 100_000 + b"]" * 100_000, declared=True)
    assert code == 400
    assert "JSON" in reply["message"]


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
async def test_a_body_far_larger_than_a_hook_request_is_refused(declared: bool) -> None:
    """A hook request is one Cluster object and a few versions, never more than the
    largest object the API server stores."""
    body = b'{"kind": "BeforeClusterDeleteRequest", "pad": "' + b"x" * MAX_BODY + b'"}'
    code, reply = await handle(body, declared=declared)
    assert code == 413
    assert reply["message"] == f"body over {MAX_BODY} bytes"


# -- the upgrade hooks --------------------------------------------------------------


def upgrading(gate: GateRecorder | Any) -> Ask:
    return asks(Recorder(), gate)[AFTER_CONTROL_PLANE_UPGRADE]


@pytest.mark.parametrize(
    ("hook", "request_body", "version"),
    [
        (AFTER_CONTROL_PLANE_UPGRADE, after_control_plane_upgrade("v1.34.0"), "1.34.0"),
        (
            AFTER_CONTROL_PLANE_UPGRADE,
            after_control_plane_upgrade(
                "v1.33.5",
                controlPlaneUpgrades=[{"version": "v1.34.0"}],
                workersUpgrades=[{"version": "v1.34.0"}],
            ),
            "1.33.5",
        ),
        (BEFORE_WORKERS_UPGRADE, before_workers_upgrade(), "1.34.0"),
        (
            BEFORE_CLUSTER_UPGRADE,
            {**before_workers_upgrade(), "kind": "BeforeClusterUpgradeRequest"},
            "1.34.0",
        ),
        (
            BEFORE_WORKERS_UPGRADE,
            before_workers_upgrade(
                toKubernetesVersion="v1.35.1",
                workersUpgrades=[{"version": "v1.34.0"}, {"version": "v1.35.1"}],
            ),
            "1.34.0",
        ),
        (
            BEFORE_WORKERS_UPGRADE,
            before_workers_upgrade(toKubernetesVersion="v1.34.0+vmware.1"),
            "1.34.0+vmware.1",
        ),
    ],
    ids=[
        "cp-version",
        "cp-with-plan",
        "workers-target",
        "before-upgrade-target",
        "workers-first-step",
        "build-metadata",
    ],
)
async def test_an_upgrade_hook_asks_the_gate_about_the_version_it_names(
    hook: Any, request_body: dict[str, Any], version: str
) -> None:
    gate = GateRecorder(retry_after=10, message="waiting for add-ons of cpi")
    response = await answer(request_body, hook, asks(Recorder(), gate)[hook])
    assert response == {
        "apiVersion": HOOKS_API,
        "kind": f"{hook.name}Response",
        "status": "Success",
        "message": "waiting for add-ons of cpi",
        "retryAfterSeconds": 10,
    }
    assert gate.calls == [(TOPOLOGY_CLUSTER, version)]
    assert gate.before == [hook is BEFORE_CLUSTER_UPGRADE]


@pytest.mark.parametrize(
    ("hook", "request_body"),
    [
        (AFTER_CONTROL_PLANE_UPGRADE, after_control_plane_upgrade(None)),
        (AFTER_CONTROL_PLANE_UPGRADE, after_control_plane_upgrade("latest")),
        (AFTER_CONTROL_PLANE_UPGRADE, after_control_plane_upgrade("v1.34")),
        (AFTER_CONTROL_PLANE_UPGRADE, after_control_plane_upgrade(134)),
        (AFTER_CONTROL_PLANE_UPGRADE, before_workers_upgrade()),
        (BEFORE_WORKERS_UPGRADE, before_workers_upgrade(toKubernetesVersion="")),
        (BEFORE_WORKERS_UPGRADE, before_workers_upgrade(workersUpgrades=[{"version": "x"}])),
        (BEFORE_WORKERS_UPGRADE, after_control_plane_upgrade()),
        (BEFORE_WORKERS_UPGRADE, {**before_workers_upgrade(), "cluster": "work-1"}),
    ],
    ids=[
        "cp-null",
        "cp-word",
        "cp-minor-only",
        "cp-number",
        "cp-other-kind",
        "workers-empty",
        "workers-bad-step",
        "workers-other-kind",
        "workers-cluster-string",
    ],
)
async def test_an_upgrade_request_without_a_version_or_cluster_fails(
    hook: Any, request_body: dict[str, Any]
) -> None:
    gate = GateRecorder()
    response = await answer(request_body, hook, asks(Recorder(), gate)[hook])
    assert response["kind"] == f"{hook.name}Response"
    assert response["status"] == "Failure"
    assert response["message"]
    assert "retryAfterSeconds" not in response
    assert gate.calls == []


async def test_an_upgrade_hook_asks_to_retry_when_the_gate_cannot_be_read() -> None:
    async def failing(cluster: dict[str, Any], version: Any) -> tuple[int, str]:
        raise RuntimeError("token=s3cret")

    with structlog.testing.capture_logs() as logs:
        response = await answer(
            after_control_plane_upgrade(), AFTER_CONTROL_PLANE_UPGRADE, upgrading(failing)
        )
    assert response["status"] == "Success"
    assert response["retryAfterSeconds"] == RETRY_ON_ERROR_SECONDS > 0
    assert "s3cret" not in repr(logs)


def test_without_a_gate_only_before_cluster_delete_is_served_and_listed() -> None:
    assert list(asks(Recorder(), None)) == [BEFORE_CLUSTER_DELETE]
    [handler] = discovery((BEFORE_CLUSTER_DELETE,))["handlers"]
    assert handler["requestHook"]["hook"] == "BeforeClusterDelete"


@pytest.fixture
async def gated(tmp_path: Path) -> AsyncIterator[tuple[Served, GateRecorder]]:
    ca = CertificateAuthority.generate("extension-ca")
    serving = ca.issue_serving(("127.0.0.1",))
    (tmp_path / "tls.crt").write_bytes(serving.cert_pem)
    (tmp_path / "tls.key").write_bytes(serving.key_pem)
    status, gate = Recorder(), GateRecorder(retry_after=15, message="waiting for add-ons of cpi")
    server = await extension.serve("127.0.0.1", 0, str(tmp_path), status, gate)
    verify = ssl.create_default_context(cadata=ca.cert_pem.decode())
    url = f"https://127.0.0.1:{server.port}"
    try:
        yield Served(url, url.replace("https", "http"), verify, status), gate
    finally:
        await asyncio.wait_for(server.close(), 5)


async def test_server_answers_the_upgrade_hooks_from_the_gate(
    gated: tuple[Served, GateRecorder],
) -> None:
    served, gate = gated
    async with httpx.AsyncClient(verify=served.verify, timeout=5) as client:
        listed = (await client.get(served.url + DISCOVERY_PATH)).json()
        control_plane = await client.post(
            served.url + AFTER_CONTROL_PLANE_UPGRADE.path, json=after_control_plane_upgrade()
        )
        workers = await client.post(
            served.url + BEFORE_WORKERS_UPGRADE.path,
            json=before_workers_upgrade(workersUpgrades=[{"version": "v1.34.0"}]),
        )
        # A request for one hook at another hook's path is not that hook's request.
        crossed = await client.post(
            served.url + BEFORE_WORKERS_UPGRADE.path, json=after_control_plane_upgrade()
        )
    assert listed == discovery()
    assert control_plane.json()["kind"] == "AfterControlPlaneUpgradeResponse"
    assert workers.json()["kind"] == "BeforeWorkersUpgradeResponse"
    for response in (control_plane, workers):
        assert response.status_code == 200
        assert response.json()["retryAfterSeconds"] == 15
        assert response.json()["message"] == "waiting for add-ons of cpi"
    assert crossed.json()["status"] == "Failure"
    assert gate.calls == [(TOPOLOGY_CLUSTER, "1.34.0"), (TOPOLOGY_CLUSTER, "1.34.0")]
    assert served.status.calls == []


async def test_server_without_a_gate_has_no_upgrade_handlers(served: Served) -> None:
    async with httpx.AsyncClient(verify=served.verify, timeout=5) as client:
        listed = (await client.get(served.url + DISCOVERY_PATH)).json()
        response = await client.post(
            served.url + AFTER_CONTROL_PLANE_UPGRADE.path, json=after_control_plane_upgrade()
        )
    assert [h["requestHook"]["hook"] for h in listed["handlers"]] == ["BeforeClusterDelete"]
    assert response.status_code == 404


async def test_a_server_serves_only_the_hooks_it_is_told(tmp_path: Path) -> None:
    # Before chained upgrades Cluster API refuses a discovery answer naming
    # BeforeWorkersUpgrade: an operator leaves it out (run --extension-hooks).
    ca = CertificateAuthority.generate("extension-ca")
    pair = ca.issue_serving(("127.0.0.1",))
    (tmp_path / "tls.crt").write_bytes(pair.cert_pem)
    (tmp_path / "tls.key").write_bytes(pair.key_pem)
    status, gate = Recorder(), GateRecorder(retry_after=0, message="ok")
    hooks = ("BeforeClusterDelete", "AfterControlPlaneUpgrade")
    server = await extension.serve("127.0.0.1", 0, str(tmp_path), status, gate, hooks)
    verify = ssl.create_default_context(cadata=ca.cert_pem.decode())
    url = f"https://127.0.0.1:{server.port}"
    try:
        async with httpx.AsyncClient(verify=verify, timeout=5) as client:
            listed = (await client.get(url + DISCOVERY_PATH)).json()
            workers = await client.post(
                url + BEFORE_WORKERS_UPGRADE.path, json=before_workers_upgrade()
            )
    finally:
        await asyncio.wait_for(server.close(), 5)
    assert [h["requestHook"]["hook"] for h in listed["handlers"]] == list(hooks)
    assert workers.status_code == 404
    assert gate.calls == []


async def test_every_answer_closes_its_connection(gated: tuple[Served, GateRecorder]) -> None:
    # Cluster API asks again after retryAfterSeconds, as long as the idle timer: a
    # kept-alive connection could be closed under its next POST (EOF, not retried).
    served, _ = gated
    async with httpx.AsyncClient(verify=served.verify, timeout=5) as client:
        listed = await client.get(served.url + DISCOVERY_PATH)
        hook = await client.post(
            served.url + AFTER_CONTROL_PLANE_UPGRADE.path, json=after_control_plane_upgrade()
        )
        bad = await client.post(served.url + AFTER_CONTROL_PLANE_UPGRADE.path, content=b"{")
    for response in (listed, hook, bad):
        assert response.headers["connection"] == "close"


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
async def test_a_request_as_large_as_an_object_the_api_server_stores_is_read(
    declared: bool,
) -> None:
    """An object of 1.5 MiB (etcd's limit) in its request: refusing it would fail the
    hook, and with failurePolicy Fail hold the Cluster's deletion for ever. This one
    lacks its apiVersion, so it is read and then refused for that, not for its size."""
    pad = b"x" * (1536 * 1024)
    body = b'{"kind": "BeforeClusterDeleteRequest", "pad": "' + pad + b'"}'
    code, reply = await handle(body, declared=declared)
    assert code == 200
    assert reply["message"] == "expected a BeforeClusterDeleteRequest"


# -- at most ANSWERS_AT_ONCE answers read at once ------------------------------------


@dataclass
class Holding:
    """A ``status`` and a ``gate`` that hold every caller until ``release``, and count
    the callers held at once."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    now: int = 0
    peak: int = 0

    async def status(self, cluster: dict[str, Any]) -> tuple[int, str]:
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await self.release.wait()
            return 30, "held"
        finally:
            self.now -= 1

    async def gate(self, cluster: dict[str, Any], version: Any, before: bool) -> tuple[int, str]:
        return await self.status(cluster)


def turned_away() -> float:
    """Requests counted in crs_hook_requests_turned_away_total, every hook."""
    return sum(
        REGISTRY.get_sample_value("crs_hook_requests_turned_away_total", {"hook": h.name}) or 0
        for h in extension.HOOKS
    )


async def first_done(tasks: list[asyncio.Future[httpx.Response]], n: int) -> list[Any]:
    """The first ``n`` of ``tasks`` to finish (within 10 s)."""
    done = []
    for next_one in asyncio.as_completed(tasks, timeout=10):
        done.append(await next_one)
        if len(done) == n:
            break
    return done


@pytest.fixture
async def holding(tmp_path: Path) -> AsyncIterator[tuple[Served, Holding]]:
    """A server whose every answer is held until ``Holding.release``."""
    ca = CertificateAuthority.generate("extension-ca")
    pair = ca.issue_serving(("127.0.0.1",))
    (tmp_path / "tls.crt").write_bytes(pair.cert_pem)
    (tmp_path / "tls.key").write_bytes(pair.key_pem)
    held = Holding()
    server = await extension.serve("127.0.0.1", 0, str(tmp_path), held.status, held.gate)
    url = f"https://127.0.0.1:{server.port}"
    verify = ssl.create_default_context(cadata=ca.cert_pem.decode())
    try:
        yield Served(url, url.replace("https", "http"), verify, Recorder()), held
    finally:
        held.release.set()
        await asyncio.wait_for(server.close(), 5)


async def test_requests_past_the_answers_read_at_once_are_answered_retry_at_once(
    holding: tuple[Served, Holding],
) -> None:
    """Four more requests than ANSWERS_AT_ONCE, to BeforeClusterDelete and an upgrade
    hook alike, while every answer read is held: no more than ANSWERS_AT_ONCE reach
    the status, and the others are answered "retry" (never 0: that would let the
    deletion or upgrade go) before any held answer is released."""
    served, held = holding
    requests = [(HOOK_PATH, hook_request())] * 6
    requests += [(AFTER_CONTROL_PLANE_UPGRADE.path, after_control_plane_upgrade())] * 6
    extra, before = len(requests) - extension.ANSWERS_AT_ONCE, turned_away()
    async with httpx.AsyncClient(verify=served.verify, timeout=10) as client:
        with structlog.testing.capture_logs() as logs:
            posts = [
                asyncio.ensure_future(client.post(served.url + path, json=body))
                for path, body in requests
            ]
            early = await first_done(posts, extra)
            assert held.now == extension.ANSWERS_AT_ONCE  # none released yet
            held.release.set()
            answers = [response.json() for response in await asyncio.gather(*posts)]
    assert held.peak == extension.ANSWERS_AT_ONCE
    for response in early:
        assert response.status_code == 200
        assert response.json()["retryAfterSeconds"] == extension.RETRY_WHEN_BUSY_SECONDS > 0
        assert response.json()["message"] == extension.BUSY
    assert len([a for a in answers if a["message"] == "held"]) == extension.ANSWERS_AT_ONCE
    assert turned_away() - before == extra
    warned = [entry["event"] for entry in logs if entry["log_level"] == "warning"]
    assert warned == ["hook answers at their limit; answering retry"]


async def test_an_answer_cut_off_by_its_timeout_frees_its_place() -> None:
    """One answer at a time: an answer that did not come in time (cancelled) leaves
    its place to the next request, which is read, not turned away."""
    calls = []

    async def never(cluster: dict[str, Any]) -> tuple[int, str]:
        calls.append(cluster)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    ask = asks(never, None, at_once=1)[BEFORE_CLUSTER_DELETE]
    for _ in range(2):
        response = await answer(hook_request(), BEFORE_CLUSTER_DELETE, ask, timeout=0)
        assert response["retryAfterSeconds"] == RETRY_ON_ERROR_SECONDS
    assert calls == [CLUSTER, CLUSTER]
