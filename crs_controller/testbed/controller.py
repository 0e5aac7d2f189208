"""Run ``crs-controller run`` as a real process against a test control plane.

The process authenticates as the controller's ServiceAccount user, so it gets exactly
the RBAC in ``config/rbac`` — never cluster-admin.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx
import yaml

from crs_controller.testbed.certs import CertificateAuthority
from crs_controller.testbed.controlplane import Server
from crs_controller.testbed.kube import TestbedClient

REPO_ROOT = Path(__file__).resolve().parents[2]
RBAC_DIR = REPO_ROOT / "config" / "rbac"
SYSTEM_NAMESPACE = "crs-system"
SA_USER = f"system:serviceaccount:{SYSTEM_NAMESPACE}:crs-controller"
SA_GROUPS = ("system:serviceaccounts", f"system:serviceaccounts:{SYSTEM_NAMESPACE}")


def install_rbac(mgmt: TestbedClient, *, users: Iterable[str] = ()) -> None:
    """The controller's namespace, ServiceAccount and (least) RBAC from config/rbac.
    ``users`` are bound to the same roles beside the ServiceAccount: replicas that
    each have a client certificate of their own, so the audit log tells them apart."""
    mgmt.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}})
    paths = [p for p in sorted(RBAC_DIR.glob("*.yaml")) if p.name != "kustomization.yaml"]
    subjects = [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": u} for u in users]
    for path in paths:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                doc.setdefault("metadata", {})
                if doc["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
                    doc["metadata"].setdefault("namespace", SYSTEM_NAMESPACE)
                if doc["kind"] in ("RoleBinding", "ClusterRoleBinding"):
                    doc["subjects"] = [*doc.get("subjects", []), *subjects]
                mgmt.apply(doc)


def terminate(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> int:
    """SIGTERM, then SIGKILL after ``timeout`` seconds; returns the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ControllerProcess:
    def __init__(
        self,
        management: Server,
        *extra_args: str,
        extension: bool = False,
        user: str = SA_USER,
        env: Mapping[str, str] | None = None,
        stdin: int | None = None,
    ) -> None:
        self._management = management
        self._extra = extra_args
        self._env = dict(env or {})
        # ``subprocess.PIPE`` runs it as a supervisor with a pipe would: no terminal
        # (a session of its own) and a stdin that stays open and silent, so anything
        # that prompts blocks instead of failing at once (None: inherit, as before).
        self._stdin = stdin
        self._dir = Path(tempfile.mkdtemp(prefix="crs-controller-"))
        self.kubeconfig = management.write_kubeconfig(
            self._dir / "kubeconfig", user=user, groups=SA_GROUPS
        )
        self.log_path = self._dir / "controller.log"
        # Its own TMPDIR, so tests can check that no key material is left on disk.
        self.tmpdir = self._dir / "tmp"
        self.tmpdir.mkdir()
        self.health_port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self.extension_ca_pem = b""
        self.extension_port = 0
        if extension:
            self._serve_extension()

    def _serve_extension(self) -> None:
        """Have the process serve the Runtime Extension. It serves TLS only: a CA of
        its own for the tests, whose certificate the tests trust."""
        ca = CertificateAuthority.generate("crs-controller-extension-ca")
        pair = ca.issue_serving()
        certs = self._dir / "extension-certs"
        certs.mkdir()
        (certs / "tls.crt").write_bytes(pair.cert_pem)
        (certs / "tls.key").write_bytes(pair.key_pem)
        (certs / "tls.key").chmod(0o600)
        self.extension_ca_pem = ca.cert_pem
        self.extension_port = _free_port()
        self._extra = (
            *self._extra,
            "--extension-addr",
            f"127.0.0.1:{self.extension_port}",
            "--extension-cert-dir",
            str(certs),
        )

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop for good. The kubeconfig and the extension's certificates hold keys:
        they go with the process; the log stays, for whoever reads it after a failure."""
        self.stop()
        self.kubeconfig.unlink(missing_ok=True)
        shutil.rmtree(self.tmpdir, ignore_errors=True)
        shutil.rmtree(self._dir / "extension-certs", ignore_errors=True)

    def start(self, timeout: float = 60.0, *, wait_ready: bool = True) -> None:
        self.health_port = _free_port()
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                self._command(),
                stdin=self._stdin,
                start_new_session=self._stdin is not None,
                stdout=log,
                stderr=subprocess.STDOUT,
                # As in its pod: the Downward API names the namespace it runs in.
                env={
                    **os.environ,
                    "TMPDIR": str(self.tmpdir),
                    "POD_NAMESPACE": SYSTEM_NAMESPACE,
                    **self._env,
                },
            )
        self._wait_up(self._proc, timeout, "/readyz" if wait_ready else "/healthz")

    def _command(self) -> list[str]:
        """``crs-controller run`` with the kubeconfig, both endpoints on the health
        port, JSON logs, and the extra arguments."""
        return [
            sys.executable,
            "-m",
            "crs_controller",
            "run",
            "--kubeconfig",
            str(self.kubeconfig),
            "--metrics-addr",
            f"127.0.0.1:{self.health_port}",
            "--health-addr",
            f"127.0.0.1:{self.health_port}",
            "--log-format",
            "json",
            *self._extra,
        ]

    def _wait_up(self, proc: subprocess.Popen[bytes], timeout: float, path: str) -> None:
        """Poll ``path`` until it answers 200; raises when the process exits first or
        ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"controller exited early:\n{self.log_tail()}")
            try:
                if httpx.get(self.url(path), timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"controller not ready after {timeout}s:\n{self.log_tail()}")

    @property
    def management(self) -> Server:
        return self._management

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def extension_url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.extension_port}{path}"

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.health_port}{path}"

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL; returns the exit code."""
        if self._proc is None:
            return None
        proc, self._proc = self._proc, None
        return terminate(proc, timeout)

    def kill(self) -> None:
        """SIGKILL: no shutdown at all, as when a node dies."""
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        proc.kill()
        proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def files_with_private_keys(self) -> list[Path]:
        """Files in the process's TMPDIR holding a private key (there should be none)."""
        return [
            p for p in self.tmpdir.rglob("*") if p.is_file() and b"PRIVATE KEY" in p.read_bytes()
        ]

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")
