"""Kubeconfigs as connection settings (``clients.kubeconfig``): the allow-list for a
workload cluster's untrusted kubeconfig (each refused field is
``UnsupportedKubeconfig`` naming the field, never its value), context selection, the
operator's own kubeconfig file (relative paths, tokenFile, an exec plugin read but not
run), the namespace its context names, several files of $KUBECONFIG merged as
kubectl merges them, in-cluster settings (the pod's namespace), and fuzzing:
whatever a tenant writes gives an endpoint or our error, never another exception and
never a value in the message."""

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
    in_cluster_namespace,
    kubeconfig_paths,
    management_access,
    management_endpoint,
    merge_kubeconfigs,
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
    ({"server": f"https://10.0.0.1:{MARKER}"}, "server"),
    ({"server": "https://10.0.0.1:99999"}, "server"),
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
    bad_port = config({**SERVER, "proxy-url": "http://proxy.local:99999"}, {"token": "t"})
    with pytest.raises(UnsupportedKubeconfig, match="proxy-url must be an http"):
        workload_endpoint(bad_port, allow_proxy=True)


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


def test_the_operators_kubeconfig_may_name_an_exec_plugin_read_not_run(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    plugin = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": "bin/get-token",
        "args": ["--touch", str(ran)],
        "env": [{"name": "REGION", "value": "eu"}],
        "interactiveMode": "Never",
        "installHint": "install get-token",
        "provideClusterInfo": True,
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config(SERVER, {"exec": plugin})))
    endpoint = management_endpoint(str(path))
    assert endpoint.exec is not None
    assert endpoint.exec.command == str(tmp_path / "bin" / "get-token")
    assert endpoint.exec.args == ("--touch", str(ran))
    assert endpoint.exec.env == (("REGION", "eu"),)
    assert endpoint.exec.where == "users[0].user.exec"
    assert yaml.safe_load(endpoint.exec.cluster_info or "") == {
        "server": SERVER["server"],
        "certificate-authority-data": CA,
    }
    assert not ran.exists()  # reading a kubeconfig runs nothing


def test_a_bare_exec_command_is_looked_up_in_path_not_in_the_folder(tmp_path: Path) -> None:
    plugin = {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws"}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config(SERVER, {"exec": plugin})))
    endpoint = management_endpoint(str(path))
    assert endpoint.exec is not None and endpoint.exec.command == "aws"
    assert endpoint.exec.interactive_mode == "IfAvailable"  # v1beta1's default


def test_the_operators_kubeconfig_still_refuses_auth_provider(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    provider = {"auth-provider": {"name": "oidc", "config": {"id-token": MARKER}}}
    path.write_text(yaml.safe_dump(config(SERVER, provider)))
    with pytest.raises(Unreachable, match=r"users\[0\]\.user\.auth-provider is not") as caught:
        management_endpoint(str(path))
    assert MARKER not in str(caught.value)


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


@pytest.mark.parametrize(
    ("context", "chosen", "namespace"),
    [({"namespace": "fleet"}, None, "fleet"),
     ({}, None, None),
     ({"namespace": ""}, None, None),
     ({"namespace": "fleet"}, "other", "apps"),   # --context: that context's
     ({}, "other", "apps")],
)  # fmt: skip
def test_the_operators_context_names_the_namespace(
    tmp_path: Path, context: dict[str, Any], chosen: str | None, namespace: str | None
) -> None:
    data = config(SERVER, {"token": "t"})
    data["contexts"][0]["context"].update(context)
    data["contexts"].append(
        {"name": "other", "context": {"cluster": "c", "user": "u", "namespace": "apps"}}
    )
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(data))
    access = management_access(str(path), chosen)
    assert access.namespace == namespace
    assert access.endpoint.server == SERVER["server"]


def test_a_context_namespace_that_is_not_text_is_named(tmp_path: Path) -> None:
    data = config(SERVER, {"token": "t"})
    data["contexts"][0]["context"]["namespace"] = ["fleet"]
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(Unreachable, match=r"contexts\[0\]\.context\.namespace must be a string"):
        management_access(str(path))


@pytest.mark.parametrize(
    ("environ", "file", "namespace"),
    [({"POD_NAMESPACE": "from-env"}, "from-file\n", "from-env"),
     ({}, "from-file\n", "from-file"),
     ({}, "", None),
     ({}, None, None)],
)  # fmt: skip
def test_in_a_pod_the_namespace_is_the_pods(
    tmp_path: Path, environ: dict[str, str], file: str | None, namespace: str | None
) -> None:
    if file is not None:
        (tmp_path / "namespace").write_text(file)
    assert in_cluster_namespace(tmp_path, environ) == namespace


# --- $KUBECONFIG: several files merged -----------------------------------------------


def named(field: str, name: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, field: value}


def kubeconfig_file(
    path: Path, contexts: dict[str, tuple[str, str]], current: str | None = None
) -> Path:
    """A kubeconfig whose contexts name (cluster, user); each cluster's server and each
    user's token is the name, so the test sees which file an entry came from."""
    clusters = {c for c, _ in contexts.values()}
    users = {u for _, u in contexts.values()}
    data: dict[str, Any] = {
        "clusters": [named("cluster", c, {"server": f"https://{c}:6443"}) for c in clusters],
        "users": [named("user", u, {"token": f"{u}-{path.stem}"}) for u in users],
        "contexts": [
            named("context", n, {"cluster": c, "user": u}) for n, (c, u) in contexts.items()
        ],
    }
    if current:
        data["current-context"] = current
    path.write_text(yaml.safe_dump(data))
    return path


def test_kubeconfig_files_are_merged_and_context_may_name_one_in_the_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = kubeconfig_file(tmp_path / "a.yaml", {"dev": ("dev", "alice")}, current="dev")
    b = kubeconfig_file(tmp_path / "b.yaml", {"mgmt": ("mgmt", "bob")}, current="mgmt")
    monkeypatch.setenv("KUBECONFIG", f"{a}:{b}")
    assert management_endpoint(None).server == "https://dev:6443"  # a's current-context
    assert management_endpoint(None, "mgmt").server == "https://mgmt:6443"
    assert management_endpoint(None, "mgmt").token == "bob-b"


def test_the_first_file_to_name_an_entry_wins_and_current_context_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = kubeconfig_file(tmp_path / "a.yaml", {"x": ("c1", "u1")})  # no current-context
    b = kubeconfig_file(tmp_path / "b.yaml", {"x": ("c2", "u1"), "y": ("c1", "u2")}, "y")
    monkeypatch.setenv("KUBECONFIG", f"{a}:{tmp_path / 'absent'}::{b}:{a}")
    endpoint = management_endpoint(None)
    assert endpoint.server == "https://c1:6443"  # context y from b, cluster c1 from a
    assert endpoint.token == "u2-b"
    assert management_endpoint(None, "x").token == "u1-a"  # a's context x, a's user u1


def test_the_namespace_comes_with_the_context_the_merge_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = kubeconfig_file(tmp_path / "a.yaml", {"x": ("c1", "u1")}, current="x")
    b = kubeconfig_file(tmp_path / "b.yaml", {"x": ("c1", "u1"), "y": ("c1", "u1")})
    for path, namespaces in ((a, {"x": "from-a"}), (b, {"x": "from-b", "y": "from-b"})):
        data = yaml.safe_load(path.read_text())
        for context in data["contexts"]:
            context["context"]["namespace"] = namespaces[context["name"]]
        path.write_text(yaml.safe_dump(data))
    monkeypatch.setenv("KUBECONFIG", f"{a}:{b}")
    assert management_access(None).namespace == "from-a"  # a's context x wins
    assert management_access(None, "y").namespace == "from-b"


def test_relative_paths_are_relative_to_the_file_that_names_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    (tmp_path / "two" / "ca.crt").write_bytes(b"CA-TWO")
    (tmp_path / "two" / "token").write_text("tok")
    first = config({"server": "https://one:6443"}, {"token": "t"})
    second = config(
        {"server": "https://two:6443", "certificate-authority": "ca.crt"},
        {
            "tokenFile": "token",
            "exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "./p"},
        },
    )
    second["contexts"][0]["name"] = "second"
    second["clusters"][0]["name"] = "c2"
    second["users"][0]["name"] = "u2"
    second["contexts"][0]["context"] = {"cluster": "c2", "user": "u2"}
    (tmp_path / "one" / "config").write_text(yaml.safe_dump(first))
    (tmp_path / "two" / "config").write_text(yaml.safe_dump(second))
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'one' / 'config'}:{tmp_path / 'two' / 'config'}")
    endpoint = management_endpoint(None, "second")
    assert endpoint.ca_pem == b"CA-TWO"
    assert endpoint.token_file == tmp_path / "two" / "token"
    assert endpoint.exec is not None and endpoint.exec.command == str(tmp_path / "two" / "p")


def test_kubeconfig_files_all_missing_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    with pytest.raises(Unreachable, match=r"cannot read kubeconfig .*a:.*b"):
        management_endpoint(None)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", []),
        ("a", ["a"]),
        ("a:b", ["a", "b"]),
        (":a::b:", ["a", "b"]),
        ("a:b:a", ["a", "b"]),
    ],
)
def test_kubeconfig_paths_drop_empty_and_repeated_entries(value: str, expected: list[str]) -> None:
    assert kubeconfig_paths(value) == [Path(p) for p in expected]


NAMES = st.sampled_from(["a", "b", "c"])
FILES = st.lists(
    st.fixed_dictionaries(
        {
            "clusters": st.lists(NAMES, max_size=3),
            "users": st.lists(NAMES, max_size=3),
            "contexts": st.lists(NAMES, max_size=3),
            "current-context": st.one_of(st.none(), st.just(""), NAMES),
        }
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=200, deadline=None)
@given(FILES)
def test_the_merge_keeps_each_name_once_from_the_first_file_naming_it(
    files: list[dict[str, Any]],
) -> None:
    configs = [
        {
            **{
                field: [{"name": n, field[:-1]: {"file": i}} for n in f[field]]
                for field in ("clusters", "users", "contexts")
            },
            "current-context": f["current-context"],
        }
        for i, f in enumerate(files)
    ]
    merged = merge_kubeconfigs(configs)
    for field in ("clusters", "users", "contexts"):
        names = [e["name"] for e in merged[field]]
        assert len(names) == len(set(names))
        for entry in merged[field]:
            first = next(i for i, f in enumerate(files) if entry["name"] in f[field])
            assert entry[field[:-1]] == {"file": first}
        assert set(names) == {n for f in files for n in f[field]}
    currents = [f["current-context"] for f in files if f["current-context"]]
    assert merged["current-context"] == (currents[0] if currents else None)
