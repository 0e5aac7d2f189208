"""Credentials from an exec plugin: ``users[].user.exec`` of the operator's own
kubeconfig (``aws eks get-token``, ``gke-gcloud-auth-plugin``, ``kubelogin``,
``kubectl oidc-login``), as kubectl runs them.

Only the management cluster's kubeconfig gets here: it is the operator's file, and
running its plugins is what kubectl does with it. A tenant's workload kubeconfig
never does (``kubeconfig.workload_endpoint`` refuses ``exec``).

The plugin is run without a shell, off the event loop (an asyncio subprocess), under
a deadline and with its output bounded; its stderr goes to ours, as kubectl lets it
(a login prompt, a hint), and its stdin is the terminal only when
``interactiveMode`` allows it, else /dev/null. The credential it prints (a token, a
client certificate, or both) is kept in memory until its ``expirationTimestamp`` or
until the server refuses it, and is never logged: messages name the field and the
command, never what the plugin printed.

The pure parts (reading the exec stanza, the ExecCredential, the interactive
decision, expiry) are plain functions; ``ExecCredentials`` is the cache around the
one call that runs a process.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import subprocess
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from crs_controller.core.errors import Unreachable

V1 = "client.authentication.k8s.io/v1"
V1BETA1 = "client.authentication.k8s.io/v1beta1"
API_VERSIONS = (V1, V1BETA1)
INTERACTIVE_MODES = ("Never", "IfAvailable", "Always")
# A cluster extension under this name is handed to the plugin as spec.cluster.config.
EXEC_EXTENSION = "client.authentication.k8s.io/exec"
# A token is a few KiB, a certificate chain and key a few more: 1 MiB is generous.
MAX_OUTPUT = 1024 * 1024
# Seconds a plugin may take: a non-interactive one only fetches a token; one the user
# talks to may wait for a browser login.
TIMEOUT = 60.0
INTERACTIVE_TIMEOUT = 300.0
# How long a killed plugin's leftover output is read and dropped while it is reaped.
REAP_SECONDS = 5.0
HINT_LIMIT = 500


@dataclass(frozen=True, repr=False)
class ExecConfig:
    """A validated ``users[].user.exec``. ``cluster_info`` is the JSON of
    ``spec.cluster`` when ``provideClusterInfo`` is set."""

    command: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    api_version: str
    interactive_mode: str
    install_hint: str | None
    cluster_info: str | None
    where: str  # e.g. "users[0].user.exec", for messages

    def __repr__(self) -> str:
        return f"ExecConfig(command={self.command!r})"


@dataclass(frozen=True, repr=False)
class ExecCredential:
    """What the plugin printed: a bearer token, a client certificate, or both."""

    token: str | None
    cert_pem: bytes | None
    key_pem: bytes | None
    expires: datetime | None

    def __repr__(self) -> str:
        return f"ExecCredential(expires={self.expires!r})"


# --- reading the kubeconfig's exec stanza ---------------------------------------------


def exec_config(entry: Any, where: str, cluster_info: Mapping[str, Any]) -> ExecConfig:
    """``users[].user.exec`` checked field by field (the kubeconfig reader has made a
    relative command path absolute). ``cluster_info``: the cluster as the plugin may
    see it (provideClusterInfo)."""
    if not isinstance(entry, Mapping):
        raise Unreachable(f"invalid kubeconfig: {where} must be a map")
    command = _string(entry, "command", where, required=True) or ""
    api_version = _api_version(entry, where)
    mode = _string(entry, "interactiveMode", where)
    if mode is None and api_version == V1:
        raise Unreachable(f"invalid kubeconfig: {where}.interactiveMode is required for {V1}")
    if (mode or "IfAvailable") not in INTERACTIVE_MODES:
        raise Unreachable(
            f"invalid kubeconfig: {where}.interactiveMode must be one of "
            + ", ".join(INTERACTIVE_MODES)
        )
    provide = entry.get("provideClusterInfo", False)
    if not isinstance(provide, bool):
        raise Unreachable(f"invalid kubeconfig: {where}.provideClusterInfo must be true or false")
    return ExecConfig(
        command=command,
        args=_args(entry.get("args"), where),
        env=_env(entry.get("env"), where),
        api_version=api_version,
        interactive_mode=mode or "IfAvailable",
        install_hint=_string(entry, "installHint", where),
        cluster_info=json.dumps(dict(cluster_info)) if provide else None,
        where=where,
    )


def cluster_info(
    cluster: Mapping[str, Any],
    *,
    server: str,
    ca_pem: bytes | None,
    tls_server_name: str | None,
    proxy: str | None,
    insecure: bool,
) -> dict[str, Any]:
    """``spec.cluster`` of the ExecCredential (provideClusterInfo): the cluster's
    connection settings and its ``client.authentication.k8s.io/exec`` extension."""
    info: dict[str, Any] = {"server": server}
    if ca_pem:
        info["certificate-authority-data"] = base64.b64encode(ca_pem).decode("ascii")
    if tls_server_name:
        info["tls-server-name"] = tls_server_name
    if proxy:
        info["proxy-url"] = proxy
    if insecure:
        info["insecure-skip-tls-verify"] = True
    extensions = cluster.get("extensions")
    for extension in extensions if isinstance(extensions, list) else []:
        if isinstance(extension, Mapping) and extension.get("name") == EXEC_EXTENSION:
            info["config"] = extension.get("extension")
            break
    return info


def _string(
    entry: Mapping[str, Any], key: str, where: str, *, required: bool = False
) -> str | None:
    value = optional_text(entry, key, f"invalid kubeconfig: {where}.{key}")
    if value is None and required:
        raise Unreachable(f"invalid kubeconfig: {where}.{key} is required")
    return value


def _api_version(entry: Mapping[str, Any], where: str) -> str:
    version = _string(entry, "apiVersion", where, required=True)
    if version not in API_VERSIONS:
        raise Unreachable(
            f"invalid kubeconfig: {where}.apiVersion must be {V1} or {V1BETA1}"
            " (v1alpha1 was removed in Kubernetes 1.24)"
        )
    return version


def _args(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise Unreachable(f"invalid kubeconfig: {where}.args must be a list of strings")
    return tuple(value)


def _env(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise Unreachable(f"invalid kubeconfig: {where}.env must be a list")
    found = []
    for index, item in enumerate(value):
        name = item.get("name") if isinstance(item, Mapping) else None
        text = item.get("value") if isinstance(item, Mapping) else None
        if not isinstance(name, str) or not name or "=" in name or not isinstance(text, str):
            raise Unreachable(
                f"invalid kubeconfig: {where}.env[{index}] must have a name and a string value"
            )
        found.append((name, text))
    return tuple(found)


# --- the plugin's answer --------------------------------------------------------------


def parse_credential(raw: bytes, config: ExecConfig) -> ExecCredential:
    """The ExecCredential a plugin printed, or Unreachable naming the field (never a
    value: the output holds the credential)."""
    where = f"{config.where}: {config.command}"
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError):
        document = None
    if not isinstance(document, dict) or document.get("kind") != "ExecCredential":
        raise Unreachable(f"{where} did not print an ExecCredential")
    if document.get("apiVersion") != config.api_version:
        raise Unreachable(
            f"{where} printed an ExecCredential of another apiVersion than {config.api_version}"
        )
    status = document.get("status")
    if not isinstance(status, dict):
        raise Unreachable(f"{where} printed an ExecCredential without a status")
    token = _credential_text(status, "token", where)
    if token is not None and not (token.isascii() and token.isprintable()):
        raise Unreachable(f"{where}: status.token holds unprintable characters")
    cert = _credential_text(status, "clientCertificateData", where)
    key = _credential_text(status, "clientKeyData", where)
    if (cert is None) != (key is None):
        raise Unreachable(f"{where}: status.clientCertificateData and clientKeyData go together")
    if token is None and cert is None:
        raise Unreachable(f"{where}: status has neither a token nor clientCertificateData")
    return ExecCredential(
        token=token,
        cert_pem=cert.encode() if cert else None,
        key_pem=key.encode() if key else None,
        expires=_expiry(status.get("expirationTimestamp"), where),
    )


def optional_text(entry: Mapping[str, Any], key: str, field: str) -> str | None:
    """``entry[key]`` when it is a non-empty string, None when absent or empty;
    anything else is refused, naming ``field`` (never the value)."""
    value = entry.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise Unreachable(f"{field} must be a string")
    return value


def _credential_text(status: Mapping[str, Any], key: str, where: str) -> str | None:
    return optional_text(status, key, f"{where}: status.{key}")


def _expiry(value: Any, where: str) -> datetime | None:
    """An RFC 3339 time; one without a zone is refused rather than guessed."""
    if value is None or value == "":
        return None
    try:
        parsed = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise Unreachable(f"{where}: status.expirationTimestamp is not an RFC 3339 time")
    return parsed.astimezone(UTC)


def expired(credential: ExecCredential, now: datetime) -> bool:
    """Whether a cached credential must be fetched again (client-go: from the
    expirationTimestamp on; one without is kept until the server refuses it)."""
    return credential.expires is not None and now >= credential.expires


def interactive(config: ExecConfig, stdin_is_terminal: bool) -> bool:
    """Whether the plugin gets our terminal as its stdin: never for ``Never``; for
    ``IfAvailable`` and ``Always`` only when stdin is one, and ``Always`` without
    one is an error (the plugin would wait for an answer nobody can give)."""
    if config.interactive_mode == "Never":
        return False
    if config.interactive_mode == "Always" and not stdin_is_terminal:
        raise Unreachable(
            f"{config.where}.interactiveMode is Always, but stdin is not a terminal:"
            f" {config.command} cannot ask for its login here"
        )
    return stdin_is_terminal


def exec_info(config: ExecConfig, is_interactive: bool) -> str:
    """$KUBERNETES_EXEC_INFO: the request the plugin reads, as client-go writes it."""
    spec: dict[str, Any] = {"interactive": is_interactive}
    if config.cluster_info is not None:
        spec["cluster"] = json.loads(config.cluster_info)
    return json.dumps({"apiVersion": config.api_version, "kind": "ExecCredential", "spec": spec})


def not_found(config: ExecConfig) -> str:
    """The message for a command that is not installed: the kubeconfig's installHint
    on one line, as that is how our errors are printed."""
    message = f"{config.where}.command: {config.command} not found"
    if config.install_hint:
        hint = " ".join(config.install_hint.split())
        message += f"; {hint[:HINT_LIMIT]}"
    return message


# --- running it -----------------------------------------------------------------------


class Runner(Protocol):
    def __call__(
        self, config: ExecConfig, *, is_interactive: bool, timeout: float
    ) -> Awaitable[bytes]: ...


async def run_plugin(config: ExecConfig, *, is_interactive: bool, timeout: float) -> bytes:
    """The plugin's stdout, or Unreachable: not found (with its install hint), failed,
    too slow, or printing more than anyone's credential."""
    env = {**os.environ, **dict(config.env)}
    env["KUBERNETES_EXEC_INFO"] = exec_info(config, is_interactive)
    try:
        process = await asyncio.create_subprocess_exec(
            config.command,
            *config.args,
            stdin=None if is_interactive else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=None,  # the plugin talks to the user, as with kubectl
            env=env,
        )
    except FileNotFoundError:
        raise Unreachable(not_found(config)) from None
    except OSError as exc:
        message = f"{config.where}.command: {config.command} cannot be run ({exc.strerror})"
        raise Unreachable(message) from None
    try:
        return await _output(process, config, timeout)
    finally:
        if process.returncode is None:
            await stop_plugin(process)


async def stop_plugin(process: asyncio.subprocess.Process) -> None:
    """Kill the plugin and reap it. asyncio's ``wait()`` returns only once the
    plugin's stdout is closed too, which a reader stopped at ``MAX_OUTPUT`` (its buffer
    full, the pipe no longer read) would never see: what is left is read and dropped,
    for at most ``REAP_SECONDS`` (a child of the plugin may hold the pipe open)."""
    process.kill()
    assert process.stdout is not None
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(REAP_SECONDS):
            while await process.stdout.read(64 * 1024):
                pass
            await process.wait()


async def _output(process: asyncio.subprocess.Process, config: ExecConfig, timeout: float) -> bytes:
    where = f"{config.where}: {config.command}"
    assert process.stdout is not None
    try:
        async with asyncio.timeout(timeout):
            raw = b""
            while chunk := await process.stdout.read(64 * 1024):
                raw += chunk
                if len(raw) > MAX_OUTPUT:
                    raise Unreachable(f"{where} printed more than {MAX_OUTPUT} bytes")
            code = await process.wait()
    except TimeoutError:
        raise Unreachable(f"{where} gave no credential within {timeout:g}s") from None
    if code != 0:
        raise Unreachable(f"{where} exited with status {code}")
    return raw


def stdin_is_terminal() -> bool:
    try:
        return os.isatty(0)
    except OSError:
        return False


class ExecCredentials:
    """One plugin's credential, fetched when first needed and again once it expires
    or the server refuses it. Concurrent requests wait for one run of the plugin."""

    def __init__(
        self,
        config: ExecConfig,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        terminal: Callable[[], bool] = stdin_is_terminal,
        runner: Runner = run_plugin,
    ) -> None:
        self.config = config
        self._clock = clock
        self._terminal = terminal
        self._runner = runner
        self._cached: ExecCredential | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> ExecCredential:
        async with self._lock:
            cached = self._cached
            if cached is not None and not expired(cached, self._clock()):
                return cached
            is_interactive = interactive(self.config, self._terminal())
            timeout = INTERACTIVE_TIMEOUT if is_interactive else TIMEOUT
            raw = await self._runner(self.config, is_interactive=is_interactive, timeout=timeout)
            credential = parse_credential(raw, self.config)
            self._cached = credential
            return credential

    def refused(self, credential: ExecCredential) -> None:
        """The server answered 401 to ``credential``: the next request runs the
        plugin again, unless a newer credential is already cached."""
        if self._cached is credential:
            self._cached = None
