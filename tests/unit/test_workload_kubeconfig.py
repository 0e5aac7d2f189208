"""Reading a workload cluster's kubeconfig from its Cluster API Secret
(``clients.workload.decode_kubeconfig``): a valid Secret gives the kubeconfig; a Secret
without the ``value`` key, with data that is not base64, or with YAML that is not a
kubeconfig is ``Unreachable`` with a message that names the cluster and never repeats
anything the Secret holds."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Callable
from typing import Any

import httpcore
import pytest
import yaml
from hypothesis import assume, given
from hypothesis import strategies as st

from crs_controller.clients.kubeconfig import Endpoint
from crs_controller.clients.workload import (
    MAX_KUBECONFIG_BYTES,
    WorkloadClients,
    decode_kubeconfig,
    kubeconfig_secret_name,
)
from crs_controller.core.errors import Unreachable, UnsupportedKubeconfig

CLUSTER = "work-1"
TOKEN = "s3cr3t-t0ken-abcdef"
KUBECONFIG: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [
        {
            "name": CLUSTER,
            "cluster": {"server": "https://10.0.0.1:6443", "certificate-authority-data": "Q0E="},
        }
    ],
    "users": [{"name": "admin", "user": {"token": TOKEN}}],
    "contexts": [{"name": "admin@work-1", "context": {"cluster": CLUSTER, "user": "admin"}}],
    "current-context": "admin@work-1",
}
# Every message decode_kubeconfig may give, with no Secret content in it.
MESSAGES = (
    f"cluster {CLUSTER}: kubeconfig Secret has no 'value' key",
    f"cluster {CLUSTER}: kubeconfig Secret is not a kubeconfig",
)


def b64(raw: bytes | str) -> str:
    return base64.b64encode(raw.encode() if isinstance(raw, str) else raw).decode()


def secret(data: dict[str, str] | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "cluster.x-k8s.io/secret",
        "metadata": {"name": kubeconfig_secret_name(CLUSTER), "namespace": "default"},
    }
    if data is not None:
        body["data"] = data
    return body


def refused(obj: dict[str, Any]) -> Unreachable:
    with pytest.raises(Unreachable) as caught:
        decode_kubeconfig(obj, CLUSTER)
    return caught.value


def test_secret_name_follows_cluster_api() -> None:
    assert kubeconfig_secret_name(CLUSTER) == "work-1-kubeconfig"


@pytest.mark.parametrize(
    "text",
    [yaml.safe_dump(KUBECONFIG), json.dumps(KUBECONFIG)],
    ids=["yaml", "json"],
)
def test_a_valid_secret_gives_the_kubeconfig(text: str) -> None:
    assert decode_kubeconfig(secret({"value": b64(text)}), CLUSTER) == KUBECONFIG


def test_other_keys_of_the_secret_are_ignored() -> None:
    data = {"value": b64(yaml.safe_dump(KUBECONFIG)), "extra": b64("ignored")}
    assert decode_kubeconfig(secret(data), CLUSTER) == KUBECONFIG


@pytest.mark.parametrize(
    "data",
    [None, {}, {"value": ""}, {"kubeconfig": b64(yaml.safe_dump(KUBECONFIG))}],
    ids=["no-data", "empty-data", "empty-value", "other-key"],
)
def test_a_secret_without_the_value_key_is_unreachable(data: dict[str, str] | None) -> None:
    error = refused(secret(data))
    assert str(error) == MESSAGES[0]
    assert error.reason == "ClusterUnreachable"


@pytest.mark.parametrize(
    "value",
    [
        "not base64!",
        "YWJj=",  # bad padding
        "YWJj\nZGVm",  # line breaks are not in Secret data
        yaml.safe_dump(KUBECONFIG),  # the kubeconfig itself, not encoded
    ],
    ids=["punctuation", "padding", "newline", "plain-yaml"],
)
def test_data_that_is_not_base64_is_unreachable(value: str) -> None:
    error = refused(secret({"value": value}))
    assert str(error) == MESSAGES[1]
    assert error.reason == "ClusterUnreachable"


@pytest.mark.parametrize("value", ["kübeconfig", "токен", "YWJj\u00e9"])
def test_non_ascii_data_is_unreachable(value: str) -> None:
    assert str(refused(secret({"value": value}))) == MESSAGES[1]


@pytest.mark.parametrize(
    "decoded",
    [
        b"just a string",
        b"42",
        b"[]",
        b"{}",
        b"null",
        b"clusters: []",
        b"clusters: null",
        b"apiVersion: v1\nkind: Config\nusers: []\n",
        b"- clusters: [a]\n",
        b"clusters: [unclosed\n",
        b"key: value\n  bad: indent\n",
        b"\x80\x81 not utf-8",
        b"a: 1\n---\nclusters: [x]\n",
    ],
    ids=[
        "scalar",
        "number",
        "list",
        "empty-map",
        "null",
        "no-clusters",
        "null-clusters",
        "config-without-clusters",
        "list-of-maps",
        "broken-flow",
        "broken-indent",
        "not-utf8",
        "two-documents",
    ],
)
def test_yaml_that_is_not_a_kubeconfig_is_unreachable(decoded: bytes) -> None:
    error = refused(secret({"value": b64(decoded)}))
    assert str(error) == MESSAGES[1]
    assert error.reason == "ClusterUnreachable"


@pytest.mark.parametrize(
    "cluster", ["work-1", "prod-eu-west-7", "a"], ids=["short", "long", "one-letter"]
)
def test_the_message_names_the_cluster(cluster: str) -> None:
    with pytest.raises(Unreachable, match=f"^cluster {cluster}: "):
        decode_kubeconfig(secret({"value": b64("clusters: []")}), cluster)


# Secrets in which random text sits where a careless error message could echo it.
PLACEMENTS: dict[str, Callable[[str], dict[str, str]]] = {
    "not-a-kubeconfig": lambda t: {"value": b64(yaml.safe_dump({"token": t, "users": [t]}))},
    "broken-yaml": lambda t: {"value": b64("clusters: [" + json.dumps(t) + ", {")},
    "not-utf8": lambda t: {"value": b64(b"\x80" + t.encode())},
    "other-key-only": lambda t: {"token": b64(t)},
    "text-beside-a-bad-value": lambda t: {"value": "%%%", "token": t},
}


@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
@given(text=st.text(min_size=4, max_size=80))
def test_secret_content_never_reaches_the_message(placement: str, text: str) -> None:
    assume(not any(text in message for message in MESSAGES))
    error = refused(secret(PLACEMENTS[placement](text)))
    assert text not in str(error)
    assert b64(text) not in str(error)
    assert error.body == ""


@given(value=st.text(alphabet=st.characters(max_codepoint=127), min_size=4, max_size=80))
def test_ascii_garbage_as_the_value_never_reaches_the_message(value: str) -> None:
    assume(not any(value in message for message in MESSAGES))
    error = refused(secret({"value": value}))
    assert value not in str(error)
    assert error.body == ""


# --- size limit and the cache of refusals ------------------------------------------


# KUBECONFIG without its made-up CA: a client can be built from it.
USABLE = {
    **KUBECONFIG,
    "clusters": [{"name": CLUSTER, "cluster": {"server": "https://10.0.0.1:6443"}}],
}


def padded_kubeconfig(size: int, config: dict[str, Any] = KUBECONFIG) -> bytes:
    """A valid kubeconfig of exactly ``size`` bytes (a YAML comment pads it)."""
    text = yaml.safe_dump(config).encode()
    assert size >= len(text) + 2
    return text + b"#" + b"x" * (size - len(text) - 2) + b"\n"


@pytest.mark.parametrize(
    ("size", "too_large"),
    [
        (MAX_KUBECONFIG_BYTES - 1, False),
        (MAX_KUBECONFIG_BYTES, False),
        (MAX_KUBECONFIG_BYTES + 1, True),
        (1024 * 1024, True),
    ],
    ids=["under", "at", "one-over", "one-mib"],
)
def test_a_kubeconfig_over_the_size_limit_is_refused_naming_the_limit(
    size: int, too_large: bool
) -> None:
    value = padded_kubeconfig(size)
    if not too_large:
        assert decode_kubeconfig(secret({"value": b64(value)}), CLUSTER) == KUBECONFIG
        return
    error = refused(secret({"value": b64(value)}))
    assert isinstance(error, UnsupportedKubeconfig)
    assert str(error) == (
        f"cluster {CLUSTER}: kubeconfig Secret key 'value' is larger than "
        f"{MAX_KUBECONFIG_BYTES // 1024} KiB"
    )


@given(size=st.integers(min_value=400, max_value=2 * MAX_KUBECONFIG_BYTES))
def test_the_size_limit_holds_for_any_size(size: int) -> None:
    """Checked on the base64 length, before decoding: refused exactly when the
    decoded kubeconfig would be over the limit."""
    obj = secret({"value": b64(padded_kubeconfig(size))})
    try:
        decode_kubeconfig(obj, CLUSTER)
    except UnsupportedKubeconfig:
        assert size > MAX_KUBECONFIG_BYTES
    else:
        assert size <= MAX_KUBECONFIG_BYTES


class CountingDecode:
    """decode_kubeconfig, counting its calls: each is one parse."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, obj: Any, cluster: str) -> dict[str, Any]:
        self.calls += 1
        return decode_kubeconfig(obj, cluster)


REFUSED_SECRETS = {
    "not-yaml": {"value": b64("clusters: [unclosed\n")},
    "not-a-kubeconfig": {"value": b64("a: 1\n")},
    "exec": {
        "value": b64(
            yaml.safe_dump({**KUBECONFIG, "users": [{"name": "admin", "user": {"exec": {}}}]})
        )
    },
    "http-server": {
        "value": b64(
            yaml.safe_dump(
                {**KUBECONFIG, "clusters": [{"name": CLUSTER, "cluster": {"server": "http://x"}}]}
            )
        )
    },
}


@pytest.mark.parametrize("case", sorted(REFUSED_SECRETS))
async def test_a_refused_kubeconfig_is_parsed_once_however_often_it_is_retried(
    case: str,
) -> None:
    decode = CountingDecode()
    clients = WorkloadClients(decode=decode)
    obj = secret(REFUSED_SECRETS[case])
    messages = []
    for _ in range(3):
        with pytest.raises(Unreachable) as caught:
            await clients.get("ns", CLUSTER, obj)
        messages.append((type(caught.value), str(caught.value)))
    assert decode.calls == 1
    assert len(set(messages)) == 1  # the same refusal each time
    # A new content is parsed again; forgetting the cluster drops what was kept.
    changed = secret({"value": b64("b: 2\n")})
    with pytest.raises(Unreachable):
        await clients.get("ns", CLUSTER, changed)
    assert decode.calls == 2
    await clients.forget("ns", CLUSTER)
    with pytest.raises(Unreachable):
        await clients.get("ns", CLUSTER, changed)
    assert decode.calls == 3
    await clients.close()


async def test_an_oversized_kubeconfig_is_refused_without_being_decoded() -> None:
    decode = CountingDecode()
    clients = WorkloadClients(decode=decode)
    obj = secret({"value": b64(padded_kubeconfig(1024 * 1024))})
    for _ in range(2):
        with pytest.raises(UnsupportedKubeconfig, match="larger than 64 KiB"):
            await clients.get("ns", CLUSTER, obj)
    assert decode.calls == 0


@pytest.mark.parametrize("size", [400, 32 * 1024], ids=["inline", "in-a-thread"])
async def test_a_valid_kubeconfig_gives_one_client_until_its_content_changes(size: int) -> None:
    decode = CountingDecode()
    clients = WorkloadClients(decode=decode)
    obj = secret({"value": b64(padded_kubeconfig(size, USABLE))})
    first = await clients.get("ns", CLUSTER, obj)
    assert await clients.get("ns", CLUSTER, obj) is first
    assert await clients.get("ns", CLUSTER, secret({**obj["data"], "other": "eA=="})) is first
    assert decode.calls == 1
    assert (
        await clients.get("ns", CLUSTER, secret({"value": b64(padded_kubeconfig(500, USABLE))}))
        is not first
    )
    assert decode.calls == 2
    await clients.close()


def with_cluster(**cluster: str) -> dict[str, Any]:
    """A Secret holding KUBECONFIG with its cluster's fields replaced by ``cluster``."""
    config = {**KUBECONFIG, "clusters": [{"name": CLUSTER, "cluster": cluster}]}
    return secret({"value": b64(yaml.safe_dump(config))})


class Recorded:
    """A transport answering every request from memory, keeping what it was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []  # (Host header, target)

    def connect(self, endpoint: Endpoint, context: ssl.SSLContext) -> Recorded:
        return self

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        headers = {k.decode().lower(): v.decode() for k, v in request.headers}
        target = request.url.target.decode()
        self.sent.append((headers["host"], target))
        body: dict[str, Any] = {"kind": "Namespace", "metadata": {"name": "x"}}
        if target.endswith("/api/v1"):
            body = {"resources": [{"name": "namespaces", "kind": "Namespace", "namespaced": False}]}
        headers_out = [(b"Content-Type", b"application/json")]
        return httpcore.Response(200, headers=headers_out, content=json.dumps(body).encode())

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize(
    "server", ["https://ü.example", "https://Ü.example:6443/p", "https://xn--tda.ü.example"]
)
async def test_a_server_host_that_is_not_ascii_is_refused_naming_the_field(server: str) -> None:
    decode = CountingDecode()
    clients = WorkloadClients(decode=decode, connect=Recorded().connect)
    for _ in range(2):
        with pytest.raises(UnsupportedKubeconfig) as caught:
            await clients.get("ns", CLUSTER, with_cluster(server=server))
        assert "clusters[0].cluster.server" in str(caught.value)
        assert "ü" not in str(caught.value).lower()
    assert decode.calls == 1
    await clients.close()


@pytest.mark.parametrize(
    ("server", "prefix"),
    [
        ("https://a.example/ü", "/%C3%BC"),
        ("https://a.example/gw%2Fx/é è", "/gw%2Fx/%C3%A9%20%C3%A8"),
        ("https://a.example/plain/", "/plain"),
    ],
)
async def test_a_server_path_is_sent_percent_encoded(server: str, prefix: str) -> None:
    net = Recorded()
    clients = WorkloadClients(connect=net.connect)
    client = await clients.get("ns", CLUSTER, with_cluster(server=server))
    assert await client.get("v1", "Namespace", "x") is not None
    assert net.sent == [
        ("a.example", f"{prefix}/api/v1"),
        ("a.example", f"{prefix}/api/v1/namespaces/x"),
    ]
    await clients.close()


@pytest.mark.parametrize("proxy", ["http://ü.example", "http://p.example:3128/ü", "http://p/?q=ü"])
async def test_a_proxy_url_that_is_not_ascii_is_refused_once(proxy: str) -> None:
    decode = CountingDecode()
    clients = WorkloadClients(decode=decode, allow_proxy=True)  # the network's own pool
    obj = with_cluster(server="https://a.example", **{"proxy-url": proxy})
    for _ in range(2):
        with pytest.raises(UnsupportedKubeconfig) as caught:
            await clients.get("ns", CLUSTER, obj)
        assert "clusters[0].cluster.proxy-url" in str(caught.value)
        assert "ü" not in str(caught.value).lower()
    assert decode.calls == 1
    await clients.close()


class FailingOnce(CountingDecode):
    """decode_kubeconfig whose first call fails as a passing condition would."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def __call__(self, obj: Any, cluster: str) -> dict[str, Any]:
        if self.calls == 0:
            self.calls += 1
            raise self.error
        return super().__call__(obj, cluster)


@pytest.mark.parametrize("error", [RuntimeError("can't start new thread"), MemoryError()])
async def test_a_passing_failure_to_decode_is_not_kept_for_the_next_pass(
    error: Exception,
) -> None:
    decode = FailingOnce(error)
    clients = WorkloadClients(decode=decode, connect=Recorded().connect)
    obj = with_cluster(server="https://a.example")
    with pytest.raises(type(error)):
        await clients.get("ns", CLUSTER, obj)
    client = await clients.get("ns", CLUSTER, obj)
    assert await clients.get("ns", CLUSTER, obj) is client
    assert decode.calls == 2
    await clients.close()


async def test_an_error_building_the_client_escapes_and_is_not_kept() -> None:
    def broken(endpoint: Endpoint, context: ssl.SSLContext) -> Recorded:
        raise TypeError("not a transport")

    decode = CountingDecode()
    clients = WorkloadClients(decode=decode, connect=broken)
    obj = with_cluster(server="https://a.example")
    for _ in range(2):
        with pytest.raises(TypeError):
            await clients.get("ns", CLUSTER, obj)
    assert decode.calls == 2
    await clients.close()
