"""The API client (``clients.kube``) against small TLS servers on loopback standing in
for odd or hostile API servers: client certificates are presented from memory and no
key is written to disk; a server that answers with HTML, a redirect, a truncated or
oversized body, or non-Status errors is ``Unreachable`` saying it is not a Kubernetes
API; Status errors map onto our tree with (field, reason) causes; 401 means the
credentials were refused; proxy variables in the environment are ignored; a group's
served versions come preferred first."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpcore
import pytest

from crs_controller.clients import answers, kube
from crs_controller.clients.kube import KubeClient
from crs_controller.clients.kubeconfig import Endpoint
from crs_controller.clients.transport import Transport
from crs_controller.clients.tunnel import ProxyPool, Via
from crs_controller.core.errors import APIError, Conflict, NotFound, Unreachable
from crs_controller.testbed.certs import CertificateAuthority, KeyPair

from .tls import CA, CLIENT, NAMED, SERVING, serving_context

Reply = Callable[[str, str], tuple[int, str, bytes]]  # (method, path) -> status, type, body


def status_body(code: int, reason: str, message: str, causes: list[dict] | None = None) -> bytes:
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}
    status.update(reason=reason, message=message, details={"causes": causes or []})
    return json.dumps(status).encode()


def key_files() -> set[Path]:
    """Files in the temp directory that hold a private key."""
    return {
        p
        for p in Path(tempfile.gettempdir()).iterdir()
        if p.is_file() and b"PRIVATE KEY" in p.read_bytes()
    }


@asynccontextmanager
async def server(
    reply: Reply,
    *,
    require_client_cert: bool = False,
    pair: KeyPair = SERVING,
    server_names: list[str | None] | None = None,
) -> AsyncIterator[list[str]]:
    """A TLS server on 127.0.0.1 serving ``pair``, answering each request with
    ``reply``; yields the list of client certificate subjects seen (one per
    connection). ``server_names``: where to keep the name each client asked for (SNI)."""
    context = serving_context(pair)
    if server_names is not None:
        context.sni_callback = lambda _, name, __: server_names.append(name)
    if require_client_cert:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=CA.cert_pem.decode())
    peers: list[str] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        cert = writer.get_extra_info("peercert")
        peers.append(str(cert.get("subject")) if cert else "")
        try:
            code, ctype, body = reply(*await _read_request(reader))
            head = f"HTTP/1.1 {code} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            writer.write((head + "Connection: close\r\n\r\n").encode() + body)
            await writer.drain()
        finally:
            writer.close()

    listener = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    port = listener.sockets[0].getsockname()[1]
    peers.append(f"https://127.0.0.1:{port}")
    try:
        yield peers
    finally:
        listener.close()


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str]:
    """One HTTP/1.1 request's method and path; its headers and body are read and
    dropped."""
    request = (await reader.readline()).decode().split()
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    await reader.readexactly(length)
    return request[0], request[1]


def client_for(url: str, **extra: object) -> KubeClient:
    endpoint = Endpoint(server=url, ca_pem=CA.cert_pem, **extra)  # type: ignore[arg-type]
    return KubeClient(endpoint, name="cluster ns/c1", timeout=5)


def answer(code: int, body: bytes, ctype: str = "application/json") -> Reply:
    return lambda method, path: (code, ctype, body)


async def test_a_client_certificate_is_presented_from_memory_only() -> None:
    before = key_files()
    async with server(answer(200, b'{"kind": "APIVersions"}'), require_client_cert=True) as peers:
        url = peers.pop(0)
        client = client_for(url, cert_pem=CLIENT.cert_pem, key_pem=CLIENT.key_pem)
        try:
            assert await client._request("GET", "/api") == {"kind": "APIVersions"}
        finally:
            await client.close()
    assert any("tenant-admin" in peer for peer in peers)
    assert key_files() - before == set()


@pytest.mark.parametrize(
    ("code", "ctype", "body"),
    [
        (200, "text/html", b"<html>Welcome to nginx!</html>"),
        (200, "application/json", b"<html>not json</html>"),
        (200, "application/json", b"[1, 2, 3]"),
        (200, "application/json", b'{"truncated": '),
        (302, "text/html", b"moved"),
        (404, "text/html", b"<html>Not Found</html>"),
        (403, "application/json", b'{"error": "forbidden"}'),
        (502, "text/plain", b"bad gateway"),
    ],
)
async def test_a_server_that_is_not_a_kubernetes_api_is_reported_as_such(
    code: int, ctype: str, body: bytes
) -> None:
    async with server(answer(code, body, ctype)) as peers:
        client = client_for(peers.pop(0))
        try:
            with pytest.raises(Unreachable, match="did not answer as a Kubernetes API server"):
                await client.get("v1", "ConfigMap", "x", "default")
        finally:
            await client.close()


async def test_status_errors_map_onto_our_tree_with_causes_and_no_values_in_the_message() -> None:
    secret_value = "s3cr3t-label-value"
    invalid = status_body(
        422,
        "Invalid",
        f'ConfigMap "x" is invalid: metadata.labels: Invalid value: "{secret_value}"',
        [{"field": "metadata.labels", "reason": "FieldValueInvalid", "message": secret_value}],
    )
    replies = {
        "/api/v1": (200, "application/json", json.dumps(DISCOVERY).encode()),
        "/api/v1/namespaces/default/configmaps/invalid": (422, "application/json", invalid),
        "/api/v1/namespaces/default/configmaps/gone": (
            404,
            "application/json",
            status_body(404, "NotFound", "not found"),
        ),
        "/api/v1/namespaces/default/configmaps/race": (
            409,
            "application/json",
            status_body(409, "Conflict", "modified"),
        ),
        "/api/v1/namespaces/default/configmaps/denied": (
            401,
            "application/json",
            status_body(401, "Unauthorized", "Unauthorized"),
        ),
    }

    def reply(method: str, path: str) -> tuple[int, str, bytes]:
        return replies[path.split("?", maxsplit=1)[0]]

    async with server(reply) as peers:
        client = client_for(peers.pop(0))
        try:
            obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "default"}}
            with pytest.raises(APIError) as caught:
                await client.apply(
                    {**obj, "metadata": {**obj["metadata"], "name": "invalid"}},
                    field_manager="crs-controller",
                )
            assert caught.value.causes == (("metadata.labels", "FieldValueInvalid"),)
            assert secret_value not in str(caught.value)
            assert type(caught.value) is APIError
            assert await client.get("v1", "ConfigMap", "gone", "default") is None
            with pytest.raises(Conflict):
                await client.replace({**obj, "metadata": {**obj["metadata"], "name": "race"}})
            with pytest.raises(Unreachable, match="credentials were refused"):
                await client.get("v1", "ConfigMap", "denied", "default")
        finally:
            await client.close()


DISCOVERY = {
    "kind": "APIResourceList",
    "resources": [
        {"name": "configmaps", "kind": "ConfigMap", "namespaced": True},
        {"name": "configmaps/status", "kind": "ConfigMap", "namespaced": True},
        "not-an-entry",
        {"name": 5, "kind": None},
    ],
}


async def test_malformed_discovery_entries_are_skipped() -> None:
    async with server(answer(200, json.dumps(DISCOVERY).encode())) as peers:
        client = client_for(peers.pop(0))
        try:
            info = await client.resource_info("v1", "ConfigMap")
            assert (info.plural, info.namespaced) == ("configmaps", True)
            with pytest.raises(NotFound):
                await client.resource_info("v1", "Secret")
        finally:
            await client.close()


POLICY_GROUP = {
    "kind": "APIGroup",
    "name": "policy",
    "versions": [
        {"groupVersion": "policy/v1beta1", "version": "v1beta1"},
        {"groupVersion": "policy/v1", "version": "v1"},
        {"groupVersion": "other.io/v1", "version": "v1"},
        "not-a-version",
        {"groupVersion": 5},
    ],
    "preferredVersion": {"groupVersion": "policy/v1", "version": "v1"},
}


async def test_the_served_versions_of_a_group_come_preferred_first() -> None:
    asked: list[str] = []

    def reply(method: str, path: str) -> tuple[int, str, bytes]:
        asked.append(path)
        if path == "/apis/policy":
            return 200, "application/json", json.dumps(POLICY_GROUP).encode()
        if path == "/apis/odd.io":  # an odd server's APIGroup: no versions, never a crash
            odd = {"kind": "APIGroup", "versions": "v1", "preferredVersion": "v1"}
            return 200, "application/json", json.dumps(odd).encode()
        return 404, "text/plain", b"404 page not found"

    async with server(reply) as peers:
        client = client_for(peers.pop(0))
        try:
            assert await client.served_versions("policy") == ["policy/v1", "policy/v1beta1"]
            # A group the server serves no more (its last CRD went): no version.
            assert await client.served_versions("odd.io") == []
            assert await client.served_versions("gone.io") == []
            # The core group is v1 only; nothing to ask.
            assert await client.served_versions("") == ["v1"]
        finally:
            await client.close()
    assert asked == ["/apis/policy", "/apis/odd.io", "/apis/gone.io"]


async def test_an_oversized_answer_is_refused() -> None:
    limits = kube.AnswerLimits(bytes=1000, values=100, items=10, pages=10)
    async with server(answer(200, b'{"a": "' + b"x" * 5000 + b'"}')) as peers:
        endpoint = Endpoint(server=peers.pop(0), ca_pem=CA.cert_pem)
        client = KubeClient(endpoint, name="cluster ns/c1", timeout=5, limits=limits)
        try:
            with pytest.raises(Unreachable, match="response larger than 1000 bytes"):
                await client._request("GET", "/api")
        finally:
            await client.close()


async def test_proxy_variables_in_the_environment_are_ignored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens there
    async with server(answer(200, b"{}")) as peers:
        client = client_for(peers.pop(0))
        try:
            assert await client._request("GET", "/api") == {}
        finally:
            await client.close()


@asynccontextmanager
async def connect_proxy() -> AsyncIterator[tuple[str, list[str]]]:
    """A plain-HTTP CONNECT proxy on 127.0.0.1; yields its URL and the request lines
    and Proxy-Authorization headers it saw."""
    seen: list[str] = []

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = (await reader.readline()).decode().strip()
        seen.append(request)
        while (line := await reader.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"proxy-authorization:"):
                seen.append(line.decode().strip())
        host, _, port = request.split()[1].rpartition(":")
        upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    listener = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        yield f"http://user:p%40ss@127.0.0.1:{port}", seen
    finally:
        listener.close()


async def test_a_proxy_url_tunnels_to_the_server_with_its_credentials() -> None:
    async with (
        server(answer(200, b'{"kind": "APIVersions"}')) as peers,
        connect_proxy() as (
            proxy,
            seen,
        ),
    ):
        url = peers.pop(0)
        client = client_for(url, proxy=proxy)
        try:
            assert await client._request("GET", "/api") == {"kind": "APIVersions"}
        finally:
            await client.close()
    target = url.removeprefix("https://")
    assert seen[0] == f"CONNECT {target} HTTP/1.1"
    assert seen[1] == "Proxy-Authorization: Basic " + base64.b64encode(b"user:p@ss").decode()


class NamingStream(httpcore.AsyncMockStream):
    """httpcore's in-memory stream, keeping the name each TLS handshake asks for."""

    def __init__(self, buffer: list[bytes], names: list[str | None]) -> None:
        super().__init__(buffer)
        self.names = names

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.names.append(server_hostname)
        return self


class NamingBackend(httpcore.AsyncMockBackend):
    """An in-memory network: every connection reads ``buffer``; TLS names are kept."""

    def __init__(self, buffer: list[bytes]) -> None:
        super().__init__(buffer)
        self.names: list[str | None] = []

    async def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        return NamingStream(list(self._buffer), self.names)


def through(backend: NamingBackend, proxy: str) -> KubeClient:
    """A client of a server known by address, its ``tls-server-name`` ``kubernetes``,
    through ``proxy`` over ``backend``."""

    def connect(endpoint: Endpoint, context: ssl.SSLContext) -> Transport:
        via = Via.of(proxy, context, "kubernetes", keepalive_expiry=90, backend=backend)
        return ProxyPool(via)

    endpoint = Endpoint(server="https://10.0.0.1:6443", tls_server_name="kubernetes", proxy=proxy)
    return KubeClient(endpoint, name="cluster ns/c1", timeout=5, transport=connect)


ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"
EMPTY_JSON = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


async def test_an_https_proxy_is_named_in_its_handshake_and_the_server_in_the_tunnel() -> None:
    backend = NamingBackend([ESTABLISHED, EMPTY_JSON])
    client = through(backend, "https://user:pw@proxy.example:3128")
    try:
        assert await client._request("GET", "/api") == {}
    finally:
        await client.close()
    assert backend.names == ["proxy.example", "kubernetes"]


async def test_a_proxy_refusing_the_tunnel_leaves_the_server_unreachable() -> None:
    refused = b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"
    client = through(NamingBackend([refused]), "http://proxy.example:3128")
    try:
        with pytest.raises(Unreachable, match="ProxyError"):
            await client._request("GET", "/api")
    finally:
        await client.close()


@pytest.mark.parametrize("through_proxy", [False, True], ids=["direct", "proxy-url"])
async def test_tls_server_name_is_the_name_sent_and_checked_directly_or_through_a_proxy(
    through_proxy: bool,
) -> None:
    """The server's certificate names only the ``tls-server-name``, not the address
    in its URL: the client asks for that name and accepts that certificate, whether it
    connects directly or tunnels through a ``proxy-url``."""
    names: list[str | None] = []
    async with (
        server(answer(200, b'{"kind": "APIVersions"}'), pair=NAMED, server_names=names) as peers,
        connect_proxy() as (proxy, _),
    ):
        via = proxy if through_proxy else None
        client = client_for(peers.pop(0), tls_server_name="kubernetes", proxy=via)
        try:
            assert await client._request("GET", "/api") == {"kind": "APIVersions"}
        finally:
            await client.close()
    assert names == ["kubernetes"]


@pytest.mark.parametrize("through_proxy", [False, True], ids=["direct", "proxy-url"])
async def test_a_certificate_naming_only_the_address_fails_a_tls_server_name(
    through_proxy: bool,
) -> None:
    """The ``tls-server-name`` is what the certificate is checked against: one naming
    the URL's address but not that name is refused, through a proxy as directly."""
    async with server(answer(200, b"{}")) as peers, connect_proxy() as (proxy, _):
        via = proxy if through_proxy else None
        client = client_for(peers.pop(0), tls_server_name="kubernetes", proxy=via)
        try:
            with pytest.raises(Unreachable, match="ConnectError"):
                await client._request("GET", "/api")
        finally:
            await client.close()


async def test_a_server_with_a_certificate_from_another_ca_is_unreachable() -> None:
    other = CertificateAuthority.generate("someone-else")
    async with server(answer(200, b"{}")) as peers:
        client = KubeClient(
            Endpoint(server=peers.pop(0), ca_pem=other.cert_pem), name="cluster ns/c1", timeout=5
        )
        try:
            with pytest.raises(Unreachable, match="ConnectError"):
                await client._request("GET", "/api")
        finally:
            await client.close()


def test_key_material_that_is_not_pem_is_named_not_quoted() -> None:
    endpoint = Endpoint(server="https://127.0.0.1:1", cert_pem=b"secret-ish", key_pem=b"junk")
    with pytest.raises(Unreachable, match="client certificate or key is not valid PEM") as caught:
        KubeClient(endpoint, name="cluster ns/c1")
    assert "secret-ish" not in str(caught.value)
    with pytest.raises(Unreachable, match="needs both its certificate and key"):
        KubeClient(Endpoint(server="https://127.0.0.1:1", cert_pem=CLIENT.cert_pem), name="c")


def test_large_bodies_are_counted_without_walking_them_whole() -> None:
    shared = ["x"] * 100
    big = {"data": [shared] * 300}  # 30,000 leaves through shared lists
    assert answers.has_nodes(big, answers.ENCODE_IN_THREAD_NODES)
    assert not answers.has_nodes({"data": shared}, answers.ENCODE_IN_THREAD_NODES)


async def test_a_large_apply_body_is_encoded_off_the_loop_and_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threaded: list[object] = []
    to_thread = asyncio.to_thread

    async def recording(func: Callable[..., object], *args: object) -> object:
        threaded.append(func)
        return await to_thread(func, *args)

    monkeypatch.setattr(kube.asyncio, "to_thread", recording)

    def reply(method: str, path: str) -> tuple[int, str, bytes]:
        if path.startswith("/api/v1/namespaces"):
            return 200, "application/json", b'{"kind": "ConfigMap"}'
        return 200, "application/json", json.dumps(DISCOVERY).encode()

    async with server(reply) as peers:
        client = client_for(peers.pop(0))
        try:
            data = {f"k{i}": "v" for i in range(answers.ENCODE_IN_THREAD_NODES)}
            obj = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "big", "namespace": "default"},
                "data": data,
            }
            assert await client.apply(obj, field_manager="m") == {"kind": "ConfigMap"}
            small = {**obj, "data": {"k": "v"}}
            assert await client.apply(small, field_manager="m") == {"kind": "ConfigMap"}
        finally:
            await client.close()
    assert threaded == [answers.encode]  # the large body only
