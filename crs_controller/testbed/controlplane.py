"""A real test control plane: one etcd and several kube-apiservers on loopback.

One management server plus N workload servers share a single etcd through distinct
``--etcd-prefix`` values: each behaves as a separate cluster, while the machine only
pays for one etcd. There is no controller manager, so nothing garbage-collects
owned objects and deleted namespaces stay ``Terminating``; tests must not rely on
either.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx
import yaml

from crs_controller.testbed import binaries as binaries_mod
from crs_controller.testbed.certs import CertificateAuthority, KeyPair, service_account_key
from crs_controller.testbed.kube import http_client

ADMIN = "admin"
ADMIN_GROUPS = ("system:masters",)

# Metadata level: who did what to which object, never request or response bodies
# (those would hold Secret data). RequestReceived only duplicates ResponseComplete.
_AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
"""


class ControlPlaneError(RuntimeError):
    """A process of the control plane failed to start or stopped early."""


def _free_ports(count: int) -> list[int]:
    # Hold every socket until all are chosen so the kernel hands out distinct ports.
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _die_with_parent() -> None:
    # If the test process is killed outright, its servers must not linger.
    if sys.platform == "linux":
        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class _Process:
    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("wb") as log:
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - no threads are started here
            )

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def check_alive(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            raise ControlPlaneError(
                f"{self.name} exited with code {self.popen.returncode}; "
                f"last lines of {self.log_path}:\n{_log_tail(self.log_path)}"
            )

    def signal(self, signum: int) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signum)

    def wait(self, timeout: float) -> bool:
        if self.popen is None:
            return True
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True


def _stop_all(processes: list[_Process], grace: float = 10.0) -> None:
    for process in processes:
        process.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in processes:
        if not process.wait(max(0.0, deadline - time.monotonic())):
            process.signal(signal.SIGKILL)
            process.wait(5.0)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _timed_out(process: _Process, timeout: float, what: str) -> ControlPlaneError:
    return ControlPlaneError(
        f"{process.name}: {what} not reached within {timeout:.0f}s; "
        f"last lines of {process.log_path}:\n{_log_tail(process.log_path)}"
    )


@dataclass
class Server:
    """One kube-apiserver, i.e. one cluster as far as a client can tell."""

    name: str
    url: str
    ca: CertificateAuthority = field(repr=False)
    directory: Path
    audit_log_path: Path
    audit: bool
    process: _Process = field(repr=False)
    started_in: float = 0.0
    _client_certs: dict[tuple[str, tuple[str, ...]], KeyPair] = field(
        default_factory=dict, repr=False
    )

    @property
    def ca_pem(self) -> bytes:
        return self.ca.cert_pem

    @property
    def log_path(self) -> Path:
        return self.process.log_path

    @property
    def pid(self) -> int:
        return self.process.pid

    def client_cert(self, user: str = ADMIN, groups: tuple[str, ...] = ADMIN_GROUPS) -> KeyPair:
        key = (user, tuple(groups))
        if key not in self._client_certs:
            self._client_certs[key] = self.ca.issue_client(user, tuple(groups))
        return self._client_certs[key]

    def kubeconfig(
        self, user: str = ADMIN, groups: tuple[str, ...] = ADMIN_GROUPS
    ) -> dict[str, Any]:
        """A client-certificate kubeconfig for ``user`` in ``groups``, as a dict.

        RBAC then decides what that identity may do, so a controller run with the
        service-account user name and groups gets exactly the RBAC bound to it.
        """
        pair = self.client_cert(user, groups)
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": self.name,
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": _b64(self.ca_pem),
                    },
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate-data": _b64(pair.cert_pem),
                        "client-key-data": _b64(pair.key_pem),
                    },
                }
            ],
            "contexts": [{"name": self.name, "context": {"cluster": self.name, "user": user}}],
            "current-context": self.name,
        }

    def write_kubeconfig(
        self, path: Path | str, user: str = ADMIN, groups: tuple[str, ...] = ADMIN_GROUPS
    ) -> Path:
        path = Path(path)
        path.write_text(yaml.safe_dump(self.kubeconfig(user, groups)))
        path.chmod(0o600)
        return path

    def audit_events(self) -> list[dict[str, Any]]:
        """Every completed request so far, oldest first (audit.k8s.io/v1 Events).

        The server writes an event after the response is sent, so poll for the one
        you expect rather than reading once.
        """
        if not self.audit:
            raise ControlPlaneError(f"{self.name} was started without an audit log")
        events = []
        with contextlib.suppress(FileNotFoundError), self.audit_log_path.open() as log:
            for line in log:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line still being written
                if event.get("stage") == "ResponseComplete":
                    events.append(event)
        return events

    def is_ready(self, http: httpx.Client) -> bool:
        # /readyz can pass a moment before the bootstrap controller creates `default`.
        return (
            http.get("/readyz").status_code == 200
            and http.get("/api/v1/namespaces/default").status_code == 200
        )

    def fetch_version(self) -> str:
        with http_client(self.kubeconfig()) as http:
            response = http.get("/version")
            response.raise_for_status()
            return str(response.json()["gitVersion"])


def _etcd(binary: Path, root: Path) -> tuple[_Process, str]:
    client_port, peer_port = _free_ports(2)
    client, peer = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
    argv = [
        str(binary),
        "--name=testbed",
        f"--data-dir={root / 'etcd'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=testbed={peer}",
        # Test data is disposable; fsync would dominate every write on a CI disk.
        "--unsafe-no-fsync=true",
        "--log-level=warn",
    ]
    return _Process("etcd", argv, root / "etcd.log"), client


def _server(binary: Path, root: Path, name: str, etcd_url: str, audit: bool) -> Server:
    directory = root / name
    directory.mkdir()
    ca = _write_credentials(directory, name)
    (port,) = _free_ports(1)
    url = f"https://127.0.0.1:{port}"
    audit_log = directory / "audit.log"
    argv = [str(binary), *_apiserver_flags(directory, name, etcd_url, port, url)]
    if audit:
        argv += [
            f"--audit-policy-file={directory / 'audit-policy.yaml'}",
            f"--audit-log-path={audit_log}",
            "--audit-log-format=json",
        ]
    process = _Process(name, argv, directory / "kube-apiserver.log")
    return Server(name, url, ca, directory, audit_log, audit, process)


def _write_credentials(directory: Path, name: str) -> CertificateAuthority:
    """A fresh CA, a serving certificate, a service account key pair and the audit
    policy, written into directory; the CA (clients' certificates come from it)."""
    ca = CertificateAuthority.generate(f"{name}-ca")
    serving = ca.issue_serving()
    sa = service_account_key()
    files = {
        "ca.crt": ca.cert_pem,
        "tls.crt": serving.cert_pem,
        "tls.key": serving.key_pem,
        "sa.pub": sa.public_pem,
        "sa.key": sa.private_pem,
        "audit-policy.yaml": _AUDIT_POLICY.encode(),
    }
    for filename, content in files.items():
        (directory / filename).write_bytes(content)
    return ca


def _apiserver_flags(directory: Path, name: str, etcd_url: str, port: int, url: str) -> list[str]:
    """kube-apiserver's flags: its own prefix in the shared etcd, the credentials in
    directory, RBAC, and nothing that needs a controller manager."""
    return [
        f"--etcd-servers={etcd_url}",
        f"--etcd-prefix=/{name}/registry",
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        # Without a default route the server cannot pick an address by itself.
        "--advertise-address=127.0.0.1",
        f"--cert-dir={directory}",
        f"--tls-cert-file={directory / 'tls.crt'}",
        f"--tls-private-key-file={directory / 'tls.key'}",
        f"--client-ca-file={directory / 'ca.crt'}",
        f"--service-account-issuer={url}",
        f"--service-account-key-file={directory / 'sa.pub'}",
        f"--service-account-signing-key-file={directory / 'sa.key'}",
        "--service-cluster-ip-range=10.0.0.0/24",
        "--allow-privileged=true",
        "--authorization-mode=RBAC",
        # No controller manager creates default service accounts for it to check.
        "--disable-admission-plugins=ServiceAccount",
    ]


def _await_ready(server: Server, http: httpx.Client, launched: float, timeout: float) -> None:
    while True:
        server.process.check_alive()
        with contextlib.suppress(httpx.HTTPError):
            if server.is_ready(http):
                server.started_in = time.monotonic() - launched
                return
        if time.monotonic() - launched > timeout:
            raise _timed_out(server.process, timeout, "/readyz")
        time.sleep(0.1)


def _etcd_healthy(http: httpx.Client, url: str) -> bool:
    try:
        return bool(http.get(f"{url}/health").json().get("health") == "true")
    except (httpx.HTTPError, ValueError):
        return False


@dataclass
class ControlPlane:
    """etcd plus a management and ``len(workloads)`` workload kube-apiservers."""

    root: Path
    etcd: _Process = field(repr=False)
    management: Server
    workloads: list[Server]
    version: str = ""
    etcd_started_in: float = 0.0
    etcd_url: str = ""
    apiserver_binary: Path | None = None

    @property
    def servers(self) -> list[Server]:
        return [self.management, *self.workloads]

    @classmethod
    def start(
        cls,
        workloads: int,
        *,
        audit: bool = True,
        binaries: binaries_mod.Binaries | None = None,
        timeout: float = 120.0,
        stagger: float = 1.0,
    ) -> Self:
        """Start everything and return once every server serves requests.

        Servers start ``stagger`` seconds apart: all at once, four servers fight over
        two cores during their CPU-heavy start and each gets slower than in turn.
        """
        found = binaries or binaries_mod.locate()
        root = Path(tempfile.mkdtemp(prefix="crs-testbed-"))
        etcd, etcd_url = _etcd(found.etcd, root)
        names = ["management", *(f"workload-{i}" for i in range(workloads))]
        servers = [_server(found.kube_apiserver, root, n, etcd_url, audit) for n in names]
        plane = cls(root, etcd, servers[0], servers[1:], etcd_url=etcd_url)
        plane.apiserver_binary = found.kube_apiserver
        atexit.register(plane.stop)
        try:
            plane._boot(etcd_url, timeout, stagger)
        except BaseException:
            plane.stop()
            raise
        return plane

    def _boot(self, etcd_url: str, timeout: float, stagger: float) -> None:
        begin = time.monotonic()
        self.etcd.start()
        with httpx.Client(timeout=2.0) as http:
            while not _etcd_healthy(http, etcd_url):
                self.etcd.check_alive()
                if time.monotonic() - begin > timeout:
                    raise _timed_out(self.etcd, timeout, "/health")
                time.sleep(0.1)
        self.etcd_started_in = time.monotonic() - begin
        launched: dict[str, float] = {}
        for i, server in enumerate(self.servers):
            if i:
                time.sleep(stagger)
            launched[server.name] = time.monotonic()
            server.process.start()
        self._await_servers(launched, timeout)
        self.version = self.management.fetch_version()

    def _await_servers(self, launched: dict[str, float], timeout: float) -> None:
        # Poll all servers in turn so each one's start-up time is measured fairly.
        clients = {s.name: http_client(s.kubeconfig(), timeout=2.0) for s in self.servers}
        pending = list(self.servers)
        try:
            while pending:
                for server in list(pending):
                    server.process.check_alive()
                    with contextlib.suppress(httpx.HTTPError):
                        if server.is_ready(clients[server.name]):
                            server.started_in = time.monotonic() - launched[server.name]
                            pending.remove(server)
                            continue
                    if time.monotonic() - launched[server.name] > timeout:
                        raise _timed_out(server.process, timeout, "/readyz")
                time.sleep(0.1)
        finally:
            for client in clients.values():
                client.close()

    @contextlib.contextmanager
    def scratch_server(self, name: str, timeout: float = 120.0) -> Iterator[Server]:
        """One more kube-apiserver on the shared etcd, under a prefix of its own: a
        management cluster for a test that deletes what every other test needs (the
        CRDs, the controller's namespace). Stopped when the block ends; its data stays
        in etcd under its prefix until the plane stops."""
        if self.apiserver_binary is None:
            raise ControlPlaneError("the plane was not started by ControlPlane.start")
        server = _server(self.apiserver_binary, self.root, name, self.etcd_url, audit=True)
        server.process.start()
        try:
            with http_client(server.kubeconfig(), timeout=2.0) as http:
                _await_ready(server, http, time.monotonic(), timeout)
            yield server
        finally:
            _stop_all([server.process])

    def stop(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL) and delete all state. Idempotent."""
        atexit.unregister(self.stop)
        # API servers first: they log errors for every request while etcd is gone.
        _stop_all([s.process for s in self.servers])
        _stop_all([self.etcd])
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
