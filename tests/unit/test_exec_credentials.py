"""Exec credentials for the operator's kubeconfig (``clients.exec_credentials``): the
exec stanza checked field by field, the ExecCredential a plugin prints (v1 and
v1beta1, token and client certificate, expiry), the interactiveMode decision, the
cache with an injected clock (fetched again once expired or refused), and the plugin
run as a process: no shell, stdin /dev/null unless interactive, env, args and
$KUBERNETES_EXEC_INFO, the installHint when it is missing, a deadline and bounded
output. No message ever holds what the plugin printed."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.clients.exec_credentials import (
    V1,
    V1BETA1,
    ExecConfig,
    ExecCredential,
    ExecCredentials,
    exec_config,
    exec_info,
    expired,
    interactive,
    not_found,
    parse_credential,
    run_plugin,
    stop_plugin,
)
from crs_controller.clients.kube import KubeClient
from crs_controller.clients.kubeconfig import Endpoint
from crs_controller.core.errors import Unreachable

MARKER = "s3cr3t" + secrets.token_hex(8)
WHERE = "users[0].user.exec"
CERT = "-----BEGIN CERTIFICATE-----\nCERT\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nKEY\n-----END PRIVATE KEY-----\n"
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def plugin(**fields: Any) -> ExecConfig:
    entry = {"apiVersion": V1, "command": "get-token", "interactiveMode": "Never", **fields}
    return exec_config(entry, WHERE, {"server": "https://mgmt:6443"})


# --- the exec stanza ----------------------------------------------------------------


def test_an_exec_stanza_gives_its_command_args_env_and_cluster_info() -> None:
    config = exec_config(
        {
            "apiVersion": V1BETA1,
            "command": "aws",
            "args": ["eks", "get-token"],
            "env": [{"name": "AWS_PROFILE", "value": "ops"}],
            "installHint": "brew install awscli",
            "provideClusterInfo": True,
        },
        WHERE,
        {"server": "https://mgmt:6443", "config": {"region": "eu"}},
    )
    assert (config.command, config.args, config.env) == (
        "aws",
        ("eks", "get-token"),
        (("AWS_PROFILE", "ops"),),
    )
    assert config.interactive_mode == "IfAvailable"
    assert config.install_hint == "brew install awscli"
    assert json.loads(config.cluster_info or "") == {
        "server": "https://mgmt:6443",
        "config": {"region": "eu"},
    }
    assert repr(config) == "ExecConfig(command='aws')"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"command": None}, "command is required"),
        ({"command": [MARKER]}, "command must be a string"),
        ({"apiVersion": None}, "apiVersion is required"),
        ({"apiVersion": "client.authentication.k8s.io/v1alpha1"}, "apiVersion must be"),
        ({"apiVersion": MARKER}, "apiVersion must be"),
        ({"interactiveMode": None}, "interactiveMode is required for"),
        ({"interactiveMode": MARKER}, "interactiveMode must be one of"),
        ({"args": MARKER}, "args must be a list of strings"),
        ({"args": [MARKER, 1]}, "args must be a list of strings"),
        ({"env": {"name": MARKER}}, "env must be a list"),
        ({"env": [{"name": "A", "value": 1}]}, r"env\[0\] must have a name"),
        ({"env": [{"value": MARKER}]}, r"env\[0\] must have a name"),
        ({"env": [{"name": "A=B", "value": MARKER}]}, r"env\[0\] must have a name"),
        ({"provideClusterInfo": MARKER}, "provideClusterInfo must be true or false"),
        ({"installHint": [MARKER]}, "installHint must be a string"),
    ],
)
def test_an_unusable_exec_stanza_names_the_field_not_the_value(
    change: dict[str, Any], field: str
) -> None:
    entry = {"apiVersion": V1, "command": "c", "interactiveMode": "Never", **change}
    with pytest.raises(Unreachable, match=re.escape(WHERE) + r"\." + field) as caught:
        exec_config({k: v for k, v in entry.items() if v is not None}, WHERE, {})
    assert MARKER not in str(caught.value)


def test_exec_that_is_not_a_map_is_named() -> None:
    with pytest.raises(Unreachable, match=re.escape(f"{WHERE} must be a map")):
        exec_config([MARKER], WHERE, {})


# --- the ExecCredential -------------------------------------------------------------


def answer(status: Any, api_version: str = V1, kind: str = "ExecCredential") -> bytes:
    return json.dumps({"apiVersion": api_version, "kind": kind, "status": status}).encode()


@pytest.mark.parametrize(
    ("status", "token", "cert", "expires"),
    [
        ({"token": MARKER}, MARKER, None, None),
        ({"clientCertificateData": CERT, "clientKeyData": KEY}, None, CERT, None),
        ({"token": "t", "clientCertificateData": CERT, "clientKeyData": KEY}, "t", CERT, None),
        ({"token": "t", "expirationTimestamp": "2026-01-01T12:00:00Z"}, "t", None, T0),
        ({"token": "t", "expirationTimestamp": "2026-01-01T14:00:00+02:00"}, "t", None, T0),
        ({"token": "t", "expirationTimestamp": ""}, "t", None, None),
    ],
)
def test_an_exec_credential_gives_its_token_certificate_and_expiry(
    status: dict[str, Any], token: str | None, cert: str | None, expires: datetime | None
) -> None:
    credential = parse_credential(answer(status), plugin())
    assert credential.token == token
    assert credential.cert_pem == (cert.encode() if cert else None)
    assert credential.key_pem == (KEY.encode() if cert else None)
    assert credential.expires == expires
    assert MARKER not in repr(credential) and "KEY" not in repr(credential)


def test_both_api_versions_are_read_when_they_match_the_kubeconfig() -> None:
    config = plugin(apiVersion=V1BETA1)
    assert parse_credential(answer({"token": "t"}, V1BETA1), config).token == "t"
    with pytest.raises(Unreachable, match="another apiVersion"):
        parse_credential(answer({"token": "t"}, V1), config)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "did not print an ExecCredential"),
        (MARKER.encode(), "did not print an ExecCredential"),
        (b"[" * 5000, "did not print an ExecCredential"),
        (answer({"token": MARKER}, kind="Secret"), "did not print an ExecCredential"),
        (answer({"token": MARKER}, api_version=MARKER), "another apiVersion"),
        (answer(MARKER), "without a status"),
        (answer({}), "neither a token nor clientCertificateData"),
        (answer({"token": 1}), "status.token must be a string"),
        (answer({"token": f"{MARKER}\r\nX-Injected: 1"}), "token holds unprintable"),
        (answer({"token": "t", "clientCertificateData": CERT}), "go together"),
        (answer({"clientKeyData": MARKER}), "go together"),
        (answer({"token": "t", "expirationTimestamp": MARKER}), "not an RFC 3339 time"),
        (answer({"token": "t", "expirationTimestamp": "2026-01-01T12:00:00"}), "RFC 3339"),
        (answer({"token": "t", "expirationTimestamp": 5}), "not an RFC 3339 time"),
    ],
)
def test_an_unusable_answer_names_the_command_and_field_never_the_output(
    raw: bytes, message: str
) -> None:
    with pytest.raises(Unreachable, match=message) as caught:
        parse_credential(raw, plugin())
    assert f"{WHERE}: get-token" in str(caught.value)
    assert MARKER not in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__context__ is None


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=10).map(lambda t: t + MARKER),
    st.sampled_from([V1, "ExecCredential", CERT, KEY, "2026-01-01T12:00:00Z", ""]),
)
KEYS = st.sampled_from(
    [
        "apiVersion",
        "kind",
        "status",
        "token",
        "clientCertificateData",
        "clientKeyData",
        "expirationTimestamp",
        MARKER,
    ]
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_any_output_gives_a_credential_or_our_error_without_the_output(value: Any) -> None:
    try:
        credential = parse_credential(json.dumps(value).encode(), plugin())
    except Unreachable as exc:
        assert MARKER not in str(exc)
        return
    assert isinstance(credential, ExecCredential)
    assert credential.token or credential.cert_pem


# --- expiry, interactiveMode, KUBERNETES_EXEC_INFO, installHint ----------------------


@given(st.integers(-10_000, 10_000), st.integers(-10_000, 10_000))
def test_a_credential_is_expired_from_its_expiration_timestamp_on(
    expires_in: int, now_in: int
) -> None:
    credential = ExecCredential("t", None, None, T0 + timedelta(seconds=expires_in))
    assert expired(credential, T0 + timedelta(seconds=now_in)) == (now_in >= expires_in)
    assert not expired(ExecCredential("t", None, None, None), T0 + timedelta(days=3650))


@pytest.mark.parametrize(
    ("mode", "terminal", "expected"),
    [
        ("Never", False, False),
        ("Never", True, False),
        ("IfAvailable", False, False),
        ("IfAvailable", True, True),
        ("Always", True, True),
        ("Always", False, None),  # an error: nobody could answer the plugin
    ],
)
def test_the_plugin_gets_the_terminal_only_as_interactive_mode_allows(
    mode: str, terminal: bool, expected: bool | None
) -> None:
    config = plugin(interactiveMode=mode)
    if expected is None:
        with pytest.raises(Unreachable, match="interactiveMode is Always, but stdin is not"):
            interactive(config, terminal)
    else:
        assert interactive(config, terminal) is expected


def test_exec_info_says_interactive_and_the_cluster_only_when_asked() -> None:
    assert json.loads(exec_info(plugin(), False)) == {
        "apiVersion": V1,
        "kind": "ExecCredential",
        "spec": {"interactive": False},
    }
    info = json.loads(exec_info(plugin(provideClusterInfo=True), True))
    assert info["spec"] == {"interactive": True, "cluster": {"server": "https://mgmt:6443"}}


def test_the_install_hint_is_given_on_one_line() -> None:
    config = plugin(installHint="Install it:\n\n  brew install\tget-token\n")
    assert not_found(config) == (
        f"{WHERE}.command: get-token not found; Install it: brew install get-token"
    )
    assert not_found(plugin()) == f"{WHERE}.command: get-token not found"


# --- the cache ----------------------------------------------------------------------


class FakePlugin:
    """A runner answering a fresh token per call, expiring ``lifetime`` after the clock."""

    def __init__(self, clock: list[datetime], lifetime: timedelta | None) -> None:
        self.clock = clock
        self.lifetime = lifetime
        self.calls: list[bool] = []

    async def __call__(self, config: ExecConfig, *, is_interactive: bool, timeout: float) -> bytes:
        self.calls.append(is_interactive)
        await asyncio.sleep(0)  # let concurrent callers pile up on the lock
        status: dict[str, Any] = {"token": f"token-{len(self.calls)}"}
        if self.lifetime is not None:
            status["expirationTimestamp"] = (self.clock[0] + self.lifetime).isoformat()
        return answer(status)


def source(
    fake: FakePlugin, config: ExecConfig | None = None, terminal: bool = False
) -> ExecCredentials:
    return ExecCredentials(
        config or plugin(),
        clock=lambda: fake.clock[0],
        terminal=lambda: terminal,
        runner=fake,
    )


async def test_a_credential_is_cached_until_it_expires() -> None:
    clock = [T0]
    fake = FakePlugin(clock, timedelta(minutes=15))
    credentials = source(fake)
    assert (await credentials.get()).token == "token-1"
    clock[0] = T0 + timedelta(minutes=14, seconds=59)
    assert (await credentials.get()).token == "token-1"
    clock[0] = T0 + timedelta(minutes=15)
    assert (await credentials.get()).token == "token-2"
    assert len(fake.calls) == 2


async def test_a_refused_credential_is_fetched_again_but_only_once() -> None:
    fake = FakePlugin([T0], None)  # no expiry: kept until refused
    credentials = source(fake)
    first = await credentials.get()
    assert (await credentials.get()) is first
    credentials.refused(first)
    second = await credentials.get()
    assert second.token == "token-2"
    credentials.refused(first)  # a late 401 for the old one drops nothing
    assert (await credentials.get()) is second
    assert len(fake.calls) == 2


async def test_concurrent_requests_run_the_plugin_once() -> None:
    fake = FakePlugin([T0], None)
    credentials = source(fake)
    tokens = await asyncio.gather(*(credentials.get() for _ in range(5)))
    assert {c.token for c in tokens} == {"token-1"} and len(fake.calls) == 1


async def test_the_interactive_decision_reaches_the_plugin() -> None:
    fake = FakePlugin([T0], None)
    await source(fake, plugin(interactiveMode="IfAvailable"), terminal=True).get()
    await source(fake, plugin(interactiveMode="Never"), terminal=True).get()
    assert fake.calls == [True, False]
    with pytest.raises(Unreachable, match="Always"):
        await source(fake, plugin(interactiveMode="Always"), terminal=False).get()
    assert len(fake.calls) == 2  # refused before running anything


# --- the process --------------------------------------------------------------------


def script(tmp_path: Path, body: str) -> str:
    """An executable Python plugin (run directly: no shell in between)."""
    path = tmp_path / "plugin"
    path.write_text(f"#!{sys.executable}\nimport json, os, sys, time\n{body}\n")
    path.chmod(0o755)
    return str(path)


async def test_the_plugin_runs_with_args_env_exec_info_and_no_stdin(tmp_path: Path) -> None:
    seen = tmp_path / "seen.json"
    command = script(
        tmp_path,
        f"json.dump({{'argv': sys.argv[1:], 'env': os.environ.get('REGION'),"
        f" 'info': os.environ['KUBERNETES_EXEC_INFO'],"
        f" 'stdin': os.path.realpath('/proc/self/fd/0')}}, open({str(seen)!r}, 'w'))\n"
        f"print(json.dumps({{'apiVersion': {V1!r}, 'kind': 'ExecCredential',"
        f" 'status': {{'token': 'tok'}}}}))",
    )
    config = plugin(
        command=command, args=["--a", "$HOME;x"], env=[{"name": "REGION", "value": "eu"}]
    )
    raw = await run_plugin(config, is_interactive=False, timeout=30)
    assert parse_credential(raw, config).token == "tok"
    found = json.loads(seen.read_text())
    assert found["argv"] == ["--a", "$HOME;x"]  # as given: no shell expanded them
    assert found["env"] == "eu"
    assert json.loads(found["info"])["spec"] == {"interactive": False}
    assert found["stdin"] == "/dev/null"


async def test_a_missing_plugin_gives_its_install_hint(tmp_path: Path) -> None:
    config = plugin(command=str(tmp_path / "absent"), installHint="get it from example.org")
    with pytest.raises(Unreachable, match=r"absent not found; get it from example\.org"):
        await run_plugin(config, is_interactive=False, timeout=30)
    with pytest.raises(Unreachable, match="not found; get it"):
        await run_plugin(
            plugin(command="crs-no-such-plugin", installHint="get it"),
            is_interactive=False,
            timeout=30,
        )


async def test_a_file_that_cannot_be_run_is_named(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("not a program")
    with pytest.raises(Unreachable, match=r"plain cannot be run \(Permission denied\)"):
        await run_plugin(plugin(command=str(tmp_path / "plain")), is_interactive=False, timeout=30)


@pytest.mark.parametrize(
    ("body", "timeout", "message"),
    [
        (f"print({MARKER!r}); sys.exit(3)", 30.0, "exited with status 3"),
        ("sys.stdout.write('x' * (2 * 1024 * 1024))", 30.0, "printed more than 1048576 bytes"),
        ("time.sleep(30)", 0.3, "gave no credential within 0.3s"),
    ],
)
async def test_a_failing_plugin_is_named_and_stopped(
    tmp_path: Path, body: str, timeout: float, message: str
) -> None:
    config = plugin(command=script(tmp_path, body))
    with pytest.raises(Unreachable, match=message) as caught:
        await run_plugin(config, is_interactive=False, timeout=timeout)
    assert MARKER not in str(caught.value)


async def test_a_plugin_stopped_with_output_left_unread_is_reaped() -> None:
    """A reader stopped at the output limit with its buffer full no longer reads the
    pipe, and asyncio's wait() returns only once the pipe is closed: the leftover
    output is read and dropped, or the reconcile waiting for the credential hangs."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import sys; sys.stdout.write('x' * 2 * 1024 * 1024)",
        stdout=subprocess.PIPE,
    )
    reader = process.stdout
    assert reader is not None and await reader.read(64 * 1024)
    # What asyncio's reader does once its buffer holds more than twice its limit.
    reader._transport.pause_reading()  # type: ignore[attr-defined]
    reader._paused = True  # type: ignore[attr-defined]
    await asyncio.wait_for(stop_plugin(process), timeout=30)
    assert process.returncode is not None


async def test_a_certificate_the_client_cannot_load_names_the_plugin(tmp_path: Path) -> None:
    status = {"clientCertificateData": f"{MARKER}\n", "clientKeyData": f"{MARKER}\n"}
    printed = {"apiVersion": V1, "kind": "ExecCredential", "status": status}
    body = f"print(json.dumps({printed!r}))"
    config = plugin(command=script(tmp_path, body))
    client = KubeClient(Endpoint(server="https://127.0.0.1:1", exec=config), name="management")
    try:
        with pytest.raises(Unreachable, match="printed an unusable credential") as caught:
            await client.get("v1", "Namespace", "default")  # fails before connecting
    finally:
        await client.close()
    assert f"management: {WHERE}: {config.command} printed" in str(caught.value)
    assert MARKER not in str(caught.value)
