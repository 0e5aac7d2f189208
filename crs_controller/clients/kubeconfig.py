"""Kubeconfigs turned into connection settings, trusted or not.

A workload cluster's kubeconfig comes from a Secret that anyone allowed to create
Secrets in a namespace can write, so it is read through an allow-list: an ``https``
server, inline CA data, inline client certificate and key data, an inline token,
``tls-server-name``, and ``proxy-url`` only when the operator allows it. Anything that
would make the controller run a command (``exec``, ``auth-provider``), read a local
file (``tokenFile``, ``client-certificate``, ``client-key``, ``certificate-authority``),
send its own credentials (an empty server) or talk unverified is refused with
``UnsupportedKubeconfig``, naming the field and never its value.

The management cluster's kubeconfig is the operator's own, read as kubectl reads it:
it may name files (relative to the kubeconfig's folder), ``tokenFile``, and an
``exec`` plugin (``aws eks get-token``, ``gke-gcloud-auth-plugin``, ``kubelogin``),
which the client runs when it needs a credential (``exec_credentials``). Several
files in ``$KUBECONFIG`` are merged as kubectl merges them. ``auth-provider`` (removed
from kubectl) stays refused. Its context's ``namespace`` is the CLI's namespace when
``-n`` is not given, as kubectl's.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import yaml

from crs_controller.clients.exec_credentials import (
    ExecConfig,
    cluster_info,
    exec_config,
    optional_text,
)
from crs_controller.core.errors import Unreachable, UnsupportedKubeconfig

# Refused in any workload kubeconfig: each makes the controller run a command, read a
# file of its own host, or authenticate in a way we cannot check.
_USER_REFUSED = (
    "exec",
    "auth-provider",
    "tokenFile",
    "client-certificate",
    "client-key",
    "username",
    "password",
    "as",
    "as-uid",
    "as-groups",
    "as-user-extra",
)
_CLUSTER_REFUSED = ("certificate-authority", "insecure-skip-tls-verify")
_PROXY_SCHEMES = ("http", "https")
# A host an HTTP client can send is ASCII: an internationalized name is refused, not
# encoded here (docs/decisions.md, "Applying").
_IDNA_HINT = "(an internationalized host name as its xn-- form)"
# Left as they are in a server's path: what a path may hold, and escapes already made.
_PATH_SAFE = "/%!$&'()*+,;=:@"

IN_CLUSTER_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True, repr=False)
class Endpoint:
    """Where and how to reach one API server. Holds key material: no repr."""

    server: str
    ca_pem: bytes | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    token: str | None = None
    token_file: Path | None = None  # re-read as it rotates (in-cluster, operator's file)
    tls_server_name: str | None = None
    proxy: str | None = None
    insecure: bool = False  # only ever set from the operator's own kubeconfig
    exec: ExecConfig | None = None  # likewise: a plugin is only ever run for the operator

    def __repr__(self) -> str:
        return f"Endpoint(server={self.server!r})"


@dataclass(frozen=True)
class Management:
    """The management cluster as the operator's kubeconfig gives it: how to reach it,
    and the namespace its context names (None: none), where the CLI works when ``-n``
    is not given, as kubectl does."""

    endpoint: Endpoint
    namespace: str | None = None


@dataclass(frozen=True)
class _Selected:
    """The context, cluster and user entries of the kubeconfig's current context."""

    context: Mapping[str, Any]
    cluster: Mapping[str, Any]
    user: Mapping[str, Any]
    context_field: str  # e.g. "contexts[0].context", for messages
    cluster_field: str  # e.g. "clusters[0].cluster"
    user_field: str


# --- workload clusters (untrusted) ---------------------------------------------------


def workload_endpoint(config: Any, *, allow_proxy: bool = False) -> Endpoint:
    """The endpoint of an untrusted kubeconfig, or UnsupportedKubeconfig / Unreachable."""
    selected = _select(config)
    user, cluster = selected.user, selected.cluster
    for key in _USER_REFUSED:
        if key in user:
            raise UnsupportedKubeconfig(
                f"{selected.user_field}.{key} is not supported: only inline credentials "
                "(client-certificate-data, client-key-data, token) are used"
            )
    for key in _CLUSTER_REFUSED:
        if key in cluster and cluster[key] not in (None, False):
            raise UnsupportedKubeconfig(
                f"{selected.cluster_field}.{key} is not supported: "
                "only inline certificate-authority-data is used"
            )
    proxy = _text(cluster, "proxy-url", selected.cluster_field)
    if proxy and not allow_proxy:
        raise UnsupportedKubeconfig(
            f"{selected.cluster_field}.proxy-url is not allowed (see --allow-proxy-url)"
        )
    return Endpoint(
        server=_server(cluster, selected.cluster_field),
        ca_pem=_pem(cluster, "certificate-authority-data", selected.cluster_field),
        cert_pem=_pem(user, "client-certificate-data", selected.user_field),
        key_pem=_pem(user, "client-key-data", selected.user_field),
        token=_token(user, selected.user_field),
        tls_server_name=_text(cluster, "tls-server-name", selected.cluster_field),
        proxy=_proxy(proxy, selected.cluster_field) if proxy else None,
    )


# --- the management cluster (the operator's) -----------------------------------------


def management_endpoint(path: str | None, context: str | None = None) -> Endpoint:
    """The management cluster: ``path`` (that file only), else the files of
    $KUBECONFIG merged as kubectl merges them, else in-cluster, else ~/.kube/config;
    ``context`` instead of the current one (like kubectl). Errors are Unreachable
    with a message naming the source."""
    return management_access(path, context).endpoint


def management_access(path: str | None, context: str | None = None) -> Management:
    """The management cluster's endpoint, found as ``management_endpoint`` finds it,
    and the namespace of the context used; in a pod, the pod's namespace, as the
    kubectl of a pod reads it."""
    if path is not None:
        return _files_access([Path(path)], context)
    listed = kubeconfig_paths(os.environ.get("KUBECONFIG", ""))
    if listed:
        return _files_access(listed, context)
    if os.environ.get("KUBERNETES_SERVICE_HOST") and context is None:
        return Management(in_cluster_endpoint(), in_cluster_namespace())
    return _files_access([Path.home() / ".kube" / "config"], context)


def kubeconfig_paths(value: str) -> list[Path]:
    """The files of a $KUBECONFIG value, in order: empty entries dropped, each once."""
    found: list[Path] = []
    for part in value.split(os.pathsep):
        if part and Path(part) not in found:
            found.append(Path(part))
    return found


def merge_kubeconfigs(configs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Kubeconfigs merged as kubectl merges $KUBECONFIG: the first file to name a
    cluster, user or context wins (its entry is never changed by a later one), and
    current-context comes from the first file that sets one."""
    merged: dict[str, Any] = {
        field: _merged_entries(configs, field) for field in ("clusters", "users", "contexts")
    }
    merged["current-context"] = next(
        (c["current-context"] for c in configs if c.get("current-context")), None
    )
    return merged


def _merged_entries(configs: Sequence[Mapping[str, Any]], field: str) -> list[Any]:
    entries: list[Any] = []
    names: set[str] = set()
    for config in configs:
        listed = config.get(field) or []
        if not isinstance(listed, list):
            raise Unreachable(f"invalid kubeconfig: {field} is not a list")
        for entry in listed:
            name = entry.get("name") if isinstance(entry, Mapping) else None
            if isinstance(name, str):
                if name in names:
                    continue
                names.add(name)
            entries.append(entry)  # one without a name is refused when selected
    return entries


def in_cluster_endpoint(
    directory: Path = IN_CLUSTER_DIR, environ: Mapping[str, str] | None = None
) -> Endpoint:
    """The pod's ServiceAccount: token (re-read as the kubelet rotates it) and CA."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
    token_file = directory / "token"
    if not host or not token_file.exists():
        raise Unreachable("management cluster: not running in a pod and no kubeconfig given")
    host = f"[{host}]" if ":" in host else host
    return Endpoint(
        server=f"https://{host}:{port}",
        ca_pem=(directory / "ca.crt").read_bytes(),
        token_file=token_file,
    )


def in_cluster_namespace(
    directory: Path = IN_CLUSTER_DIR, environ: Mapping[str, str] | None = None
) -> str | None:
    """The pod's namespace, as client-go reads it in a pod: $POD_NAMESPACE, else the
    ServiceAccount's namespace file; None when neither says."""
    env = os.environ if environ is None else environ
    if env.get("POD_NAMESPACE"):
        return env["POD_NAMESPACE"]
    try:
        return (directory / "namespace").read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def _files_access(paths: Sequence[Path], context: str | None) -> Management:
    """The endpoint and namespace of one kubeconfig file, or of several merged; of
    several, a missing one is skipped (as kubectl does), but not all of them."""
    loaded = []
    for path in paths:
        config = _read(path, missing_ok=len(paths) > 1)
        if config is not None:
            loaded.append(_absolute(config, path.parent))
    if not loaded:
        listed = os.pathsep.join(str(p) for p in paths)
        raise Unreachable(f"management cluster: cannot read kubeconfig {listed}")
    selected = _select(merge_kubeconfigs(loaded), context)
    namespace = _text(selected.context, "namespace", selected.context_field)
    return Management(_operator_endpoint(selected), namespace)


def _read(path: Path, *, missing_ok: bool) -> Mapping[str, Any] | None:
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        if missing_ok:
            return None
        raise Unreachable(f"management cluster: cannot read kubeconfig {path}") from exc
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise Unreachable(f"management cluster: cannot read kubeconfig {path}") from exc
    if config is None:
        return {}  # an empty file is an empty kubeconfig
    if not isinstance(config, Mapping):
        raise Unreachable(f"invalid kubeconfig {path}: not a mapping")
    return config


_FILE_FIELDS = {
    "clusters": ("certificate-authority",),
    "users": ("client-certificate", "client-key", "tokenFile"),
}


def _absolute(config: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """``config`` with its file references made absolute: each is relative to the
    file that names it, whichever file of $KUBECONFIG the entry is finally used from.
    So is an exec command holding a path separator (a bare name is looked up in
    $PATH), as kubectl resolves them."""
    resolved = dict(config)
    for field, keys in _FILE_FIELDS.items():
        entries = config.get(field)
        if isinstance(entries, list):
            resolved[field] = [_absolute_entry(e, field[:-1], keys, base) for e in entries]
    return resolved


def _absolute_entry(entry: Any, singular: str, keys: tuple[str, ...], base: Path) -> Any:
    inner = entry.get(singular) if isinstance(entry, Mapping) else None
    if not isinstance(inner, Mapping):
        return entry  # refused, naming the field, if it is ever selected
    inner = dict(inner)
    for key in keys:
        if isinstance(inner.get(key), str) and inner[key]:
            inner[key] = str(base / inner[key])  # an absolute path stays as it is
    plugin = inner.get("exec")
    command = plugin.get("command") if isinstance(plugin, Mapping) else None
    if isinstance(plugin, Mapping) and isinstance(command, str) and os.sep in command:
        inner["exec"] = {**plugin, "command": str(base / command)}
    return {**entry, singular: inner}


def _operator_endpoint(selected: _Selected) -> Endpoint:
    user, cluster = selected.user, selected.cluster
    if "auth-provider" in user:
        raise Unreachable(
            f"management cluster: {selected.user_field}.auth-provider is not supported"
            " (kubectl dropped it too): use the provider's exec plugin, a token, a token"
            " file or a client certificate"
        )
    where = selected.cluster_field
    server = _server(cluster, where)
    ca_pem = _pem_or_file(cluster, "certificate-authority", where)
    tls_server_name = _text(cluster, "tls-server-name", where)
    proxy = _text(cluster, "proxy-url", where)
    insecure = cluster.get("insecure-skip-tls-verify") is True
    plugin = None
    if user.get("exec") is not None:
        info = cluster_info(
            cluster,
            server=server,
            ca_pem=ca_pem,
            tls_server_name=tls_server_name,
            proxy=proxy,
            insecure=insecure,
        )
        plugin = exec_config(user["exec"], f"{selected.user_field}.exec", info)
    return Endpoint(
        server=server,
        ca_pem=ca_pem,
        cert_pem=_pem_or_file(user, "client-certificate", selected.user_field),
        key_pem=_pem_or_file(user, "client-key", selected.user_field),
        token=_token(user, selected.user_field),
        token_file=Path(user["tokenFile"]) if user.get("tokenFile") else None,
        tls_server_name=tls_server_name,
        proxy=proxy,
        insecure=insecure,
        exec=plugin,
    )


def _pem_or_file(entry: Mapping[str, Any], key: str, where: str) -> bytes | None:
    inline = _pem(entry, f"{key}-data", where)
    if inline is not None or not entry.get(key):
        return inline
    try:
        return Path(str(entry[key])).read_bytes()
    except OSError as exc:
        raise Unreachable(f"management cluster: cannot read {where}.{key}") from exc


# --- shared --------------------------------------------------------------------------


def _select(config: Any, context_name: str | None = None) -> _Selected:
    """The current context's cluster and user (the only context when there is one),
    or those of ``context_name``."""
    if not isinstance(config, Mapping):
        raise Unreachable("invalid kubeconfig: not a mapping")
    contexts = _named(config, "contexts")
    current = context_name or config.get("current-context")
    if current:
        index = next((i for i, (n, _) in enumerate(contexts) if n == current), None)
        if index is None:
            field = "--context" if context_name else "current-context"
            raise Unreachable(f"invalid kubeconfig: {field} names no context")
    elif len(contexts) == 1:
        index = 0
    else:
        raise Unreachable("invalid kubeconfig: no current-context")
    context = contexts[index][1]
    cluster_index, cluster = _find(config, "clusters", context.get("cluster"), "cluster")
    user_index, user = _find(config, "users", context.get("user"), "user")
    return _Selected(
        context=context,
        cluster=cluster,
        user=user,
        context_field=f"contexts[{index}].context",
        cluster_field=f"clusters[{cluster_index}].cluster",
        user_field=f"users[{user_index}].user" if user_index >= 0 else "user",
    )


def _named(config: Mapping[str, Any], field: str) -> list[tuple[Any, Mapping[str, Any]]]:
    entries = config.get(field) or []
    if not isinstance(entries, list):
        raise Unreachable(f"invalid kubeconfig: {field} is not a list")
    found = []
    for index, entry in enumerate(entries):
        inner = entry.get(field[:-1]) if isinstance(entry, Mapping) else None
        if not isinstance(inner, Mapping):
            raise Unreachable(f"invalid kubeconfig: {field}[{index}] has no {field[:-1]} map")
        found.append((entry.get("name"), inner))
    return found


def _find(
    config: Mapping[str, Any], field: str, name: Any, singular: str
) -> tuple[int, Mapping[str, Any]]:
    entries = _named(config, field)
    for index, (entry_name, inner) in enumerate(entries):
        if entry_name == name:
            return index, inner
    if singular == "user" and not name:
        return -1, {}  # a context without a user: anonymous (e.g. token-less CA-only)
    raise Unreachable(f"invalid kubeconfig: the current context's {singular} is not in {field}")


def _text(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    return optional_text(entry, key, f"invalid kubeconfig: {where}.{key}")


def _server(cluster: Mapping[str, Any], where: str) -> str:
    server = _text(cluster, "server", where)
    if server is None:
        # kubectl (and kr8s) fall back to in-cluster credentials here: never for us.
        raise UnsupportedKubeconfig(f"{where}.server is empty")
    try:
        parts = urlsplit(server)
        host = parts.hostname
        _ = parts.port  # a port that is not a number from 0 to 65535 raises here
    except ValueError:  # e.g. an unbalanced "[" in the host, or port 99999
        host = None
    if host is None or parts.scheme != "https":
        raise UnsupportedKubeconfig(f"{where}.server must be an https:// URL")
    if parts.username or parts.password:
        raise UnsupportedKubeconfig(f"{where}.server must not hold credentials")
    if not parts.netloc.isascii():
        raise UnsupportedKubeconfig(f"{where}.server must name its host in ASCII {_IDNA_HINT}")
    # A path is sent percent-encoded (as kubectl sends it): each request appends to it.
    path = quote(parts.path, safe=_PATH_SAFE)
    if path != parts.path:
        server = parts._replace(path=path).geturl()
    return server.rstrip("/")


def _proxy(proxy: str, where: str) -> str:
    try:
        parts = urlsplit(proxy)
        scheme = parts.scheme
        _ = parts.port  # a port that is not a number from 0 to 65535 raises here
    except ValueError:
        scheme = ""
    if scheme not in _PROXY_SCHEMES:
        raise UnsupportedKubeconfig(f"{where}.proxy-url must be an http:// or https:// URL")
    if not proxy.isascii():
        raise UnsupportedKubeconfig(f"{where}.proxy-url must be ASCII {_IDNA_HINT}")
    return proxy


def _pem(entry: Mapping[str, Any], key: str, where: str) -> bytes | None:
    value = _text(entry, key, where)
    if value is None:
        return None
    decoded: bytes | None
    try:
        decoded = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        decoded = None
    if not decoded:  # raised outside the except: the decoder's error may quote input
        raise Unreachable(f"invalid kubeconfig: {where}.{key} is not base64")
    return decoded


def _token(user: Mapping[str, Any], where: str) -> str | None:
    token = _text(user, "token", where)
    if token is not None and (not token.isprintable() or not token.isascii()):
        raise Unreachable(f"invalid kubeconfig: {where}.token holds unprintable characters")
    return token
