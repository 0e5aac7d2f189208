"""Kubeconfigs as connection settings (``clients.kubeconfig``): the allow-list for a
workload cluster's untrusted kubeconfig (each refused field is
``UnsupportedKubeconfig`` naming the field, never its value), context selection, the
operator's own kubeconfig file (relative paths, tokenFile; no exec either), in-cluster
settings, and fuzzing: whatever a tenant writes gives an endpoint or our error, never
another exception and never a value in the message."""

from __future__ import annotations

import base64
import secrets
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.clients.kubeconfig import (
    Endpoint,
    in_cluster_endpoint,
    management_endpoint,
    workload_endpoint,
)
from crs_controller.core.errors import Unreachable, UnsupportedKubeconfig

MARKER = "m4rk3r" + secrets.token_hex(8)
CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nCA\n").decode()
CERT = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nCERT\n").decode()
KEY = base64.b64encode(b"-----BEGIN PRIVATE KEY-----\nKEY\n").decode()
SERVER = {"server": "https://10.0.0.1:6443", "certificate-authority-data": CA}


def config(cluster: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }


def test_inline_credentials_give_an_endpoint() -> None:
    user = {"client-certificate-data": CERT, "client-key-data": KEY, "token": "abc"}
    endpoint = workload_endpoint(config({**SERVER, "tls-server-name": "api.local"}, user))
    assert endpoint.server == "https://10.0.0.1:6443"
    assert endpoint.ca_pem == base64.b64decode(CA)
    assert endpoint.cert_pem == base64.b64decode(CERT)
    assert endpoint.key_pem == base64.b64decode(KEY)
    assert endpoint.token == "abc"
    assert endpoint.tls_server_name == "api.local"
    assert endpoint.proxy is None and not endpoint.insecure and endpoint.token_file is None
    assert "KEY" not in repr(endpoint) and "abc" not in repr(endpoint)


REFUSED_USER = [
    ("exec", {"command": "/bin/sh", "args": ["-c", MARKER]}),
    ("auth-provider", {"name": "oidc", "config": {"id-token": MARKER}}),
    ("tokenFile", f"/etc/{MARKER}"),
    ("client-certificate", f"/etc/{MARKER}.crt"),
    ("client-key", f"/etc/{MARKER}.key"),
    ("username", MARKER),
    ("password", MARKER),
    ("as", MARKER),
    ("as-groups", [MARKER]),
]


@pytest.mark.parametrize(("field", "value"), REFUSED_USER)
def test_user_fields_that_run_read_or_impersonate_are_refused(field: str, value: Any) -> None:
    with pytest.raises(UnsupportedKubeconfig) as caught:
        workload_endpoint(config(SERVER, {"token": "t", field: value}))
    assert f"users[0].user.{field} " in str(caught.value)
    assert MARKER not in str(caught.value)
    assert caught.value.reason == "UnsupportedKubeconfig"


REFUSED_CLUSTER = [
    ({"certificate-authority": f"/etc/{MARKER}"}, "certificate-authority"),
    ({"insecure-skip-tls-verify": True}, "insecure-skip-tls-verify"),
    ({"server": ""}, "server"),
    ({"server": None}, "server"),
    ({"server": f"http://{MARKER}:80"}, "server"),
    ({"server": f"https://user:{MARKER}@10.0.0.1"}, "server"),
    ({"server": f"file:///{MARKER}"}, "server"),
    ({"server": f"https://[{MARKER}"}, "server"),
    ({"proxy-url": f"http://{MARKER}:3128"}, "proxy-url"),
]


@pytest.mark.parametrize(("change", "field"), REFUSED_CLUSTER)
def test_cluster_fields_that_read_files_or_skip_checks_are_refused(
    change: dict[str, Any], field: str
) -> None:
    with pytest.raises(UnsupportedKubeconfig) as caught:
        workload_endpoint(config({**SERVER, **change}, {"token": "t"}))
    assert f"clusters[0].cluster.{field} " in str(caught.value)
    assert MARKER not in str(caught.value)


def test_a_missing_server_never_falls_back_to_other_credentials() -> None:
    no_server = {"certificate-authority-data": CA}
    with pytest.raises(UnsupportedKubeconfig, match=r"clusters\[0\]\.cluster\.server is empty"):
        workload_endpoint(config(no_server, {}))


def test_proxy_url_is_used_only_when_the_operator_allows_it() -> None:
    proxied = config({**SERVER, "proxy-url": "http://proxy.local:3128"}, {"token": "t"})
    assert workload_endpoint(proxied, allow_proxy=True).proxy == "http://proxy.local:3128"
    socks = config({**SERVER, "proxy-url": "socks5://proxy.local:1080"}, {"token": "t"})
    with pytest.raises(UnsupportedKubeconfig, match="proxy-url must be an http"):
        workload_endpoint(socks, allow_proxy=True)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"current-context": "other"}, "current-context names no context"),
        ({"current-context": None, "contexts": []}, "no current-context"),
        ({"users": []}, "user is not in users"),
        ({"clusters": "x"}, "clusters is not a list"),
        ({"contexts": [{"name": "x"}]}, r"contexts\[0\] has no context map"),
    ],
)
def test_a_malformed_kubeconfig_is_unreachable_and_says_what(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(Unreachable, match=message) as caught:
        workload_endpoint({**config(SERVER, {"token": "t"}), **change})
    assert not isinstance(caught.value, UnsupportedKubeconfig)


def test_the_only_context_is_used_without_current_context() -> None:
    only = {**config(SERVER, {"token": "t"}), "current-context": ""}
    assert workload_endpoint(only).token == "t"


def test_data_that_is_not_base64_is_named_not_quoted() -> None:
    bad = config({**SERVER, "certificate-authority-data": f"{MARKER}!!"}, {})
    with pytest.raises(Unreachable, match=r"certificate-authority-data is not base64") as caught:
        workload_endpoint(bad)
    assert MARKER not in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__context__ is None


def test_a_token_with_control_characters_is_refused() -> None:
    with pytest.raises(Unreachable, match="token holds unprintable characters"):
        workload_endpoint(config(SERVER, {"token": "abc\r\nX-Injected: 1"}))


# --- fuzzing --------------------------------------------------------------------------

KEYS = st.sampled_from(
    [
        "server",
        "certificate-authority-data",
        "certificate-authority",
        "client-certificate-data",
        "client-key-data",
        "token",
        "tokenFile",
        "exec",
        "proxy-url",
        "tls-server-name",
        "insecure-skip-tls-verify",
        "name",
        "cluster",
        "user",
        "context",
        "clusters",
        "users",
        "contexts",
        "current-context",
        MARKER,
    ]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=20).map(lambda t: t + MARKER),
    st.sampled_from(["https://10.0.0.1", "x", "c", "u", CA, ""]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=25,
)


def _check(candidate: Any) -> None:
    try:
        endpoint = workload_endpoint(candidate)
    except Unreachable as exc:
        assert MARKER not in str(exc)
        return
    assert isinstance(endpoint, Endpoint)
    assert endpoint.server.startswith("https://")


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_any_structure_gives_an_endpoint_or_our_error(candidate: Any) -> None:
    _check(candidate)


@settings(max_examples=300, deadline=None)
@given(
    cluster=st.dictionaries(KEYS, VALUES, max_size=5),
    user=st.dictionaries(KEYS, VALUES, max_size=5),
)
def test_any_cluster_and_user_entries_give_an_endpoint_or_our_error(
    cluster: dict[str, Any], user: dict[str, Any]
) -> None:
    _check(config(cluster, user))


# --- the management cluster -----------------------------------------------------------


def test_the_operators_kubeconfig_may_name_files_relative_to_itself(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_bytes(b"CA")
    (tmp_path / "token").write_text("tok\n")
    user = {"tokenFile": "token", "client-certificate": "tls.crt", "client-key-data": KEY}
    (tmp_path / "tls.crt").write_bytes(b"CERT")
    cluster = {"server": "https://mgmt:6443", "certificate-authority": "ca.crt"}
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config(cluster, user)))
    endpoint = management_endpoint(str(tmp_path / "kubeconfig"))
    assert endpoint.ca_pem == b"CA"
    assert endpoint.cert_pem == b"CERT"
    assert endpoint.key_pem == base64.b64decode(KEY)
    assert endpoint.token_file == tmp_path / "token"


def test_the_operators_kubeconfig_runs_no_command_either(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config(SERVER, {"exec": {"command": "aws"}})))
    with pytest.raises(Unreachable, match=r"users\[0\]\.user\.exec is not supported"):
        management_endpoint(str(path))


def test_a_missing_kubeconfig_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(Unreachable, match="cannot read kubeconfig"):
        management_endpoint(str(tmp_path / "absent"))


def test_in_cluster_uses_the_service_account_and_the_service_host(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_bytes(b"CA")
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    endpoint = in_cluster_endpoint(tmp_path, env)
    assert endpoint.server == "https://[fd00::1]:443"
    assert endpoint.token_file == tmp_path / "token"
    assert endpoint.ca_pem == b"CA"
    with pytest.raises(Unreachable, match="not running in a pod"):
        in_cluster_endpoint(tmp_path, {})
