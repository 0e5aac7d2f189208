"""The reference: Cluster API's own ClusterResourceSet controller, measured on the
same control plane and by the same code (common.measure) as crs-controller.

It runs after the crs-controller phase, in its own namespace, with its own N
Clusters (pointing at the same three workload servers), its own identities (so the
audit log tells its requests apart) and the same add-on under other object names
(so the two phases never own the same objects on a workload server).

Cluster API's manager is run as built (``core/main.go``), with its real CRDs minus
the conversion webhooks: no webhook service exists here, and every object this
phase writes uses the storage version (v1beta2), so no conversion is ever needed.
Its admission webhooks are not registered either (nothing would call them); the
manager still serves them, so it gets a self-signed certificate.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from common import Figures, addon, measure, objects_in, warm_up

from crs_controller.testbed import ControlPlane, Server, TestbedClient, wait_for
from crs_controller.testbed.certs import CertificateAuthority
from crs_controller.testbed.clusters import CRD_API, V1BETA2, install_crds, register_cluster
from crs_controller.testbed.controller import terminate
from crs_controller.testbed.controlplane import ADMIN_GROUPS

NS = "bench-capi"
MANAGER_USER = "bench-capi-manager"
WORKLOAD_USER = "bench-capi-workload-admin"
USERS = (MANAGER_USER, WORKLOAD_USER)
ADDONS_API = "addons.cluster.x-k8s.io/v1beta2"
CLUSTER_CRD = "clusters.cluster.x-k8s.io"
SUFFIX = "-capi"
MIGRATED = "crd-migration.cluster.x-k8s.io/observed-generation"
UNLIMITED = "100000"  # client-side rate limits out of the way: measure the controller


def distinct(text: str) -> str:
    """The same add-on with every object renamed (``kindnet`` -> ``kindnet-capi``),
    references and labels included, so it never collides with crs-controller's."""
    names = {doc["metadata"]["name"] for doc in yaml.safe_load_all(text) if doc}
    renamed = text
    for name in sorted(names, key=len, reverse=True):
        renamed = re.sub(rf"(?m)(?<=\s){re.escape(name)}$", name + SUFFIX, renamed)
    assert objects_in(renamed) == objects_in(text), "renaming changed the add-on"
    return renamed


# --- CRDs -------------------------------------------------------------------------


def _without_webhooks(crd: dict[str, Any]) -> dict[str, Any]:
    """No conversion webhook (no service to call) and no cert-manager CA injection."""
    crd["spec"]["conversion"] = {"strategy": "None"}
    annotations = crd["metadata"].get("annotations") or {}
    annotations.pop("cert-manager.io/inject-ca-from", None)
    return crd


def _stripped_crds(bases: Path, into: Path) -> list[Path]:
    paths = []
    for path in sorted(bases.glob("*.yaml")):
        docs = [_without_webhooks(d) for d in yaml.safe_load_all(path.read_text()) if d]
        target = into / path.name
        target.write_text(yaml.safe_dump_all(docs))
        paths.append(target)
    return paths


def _crd_names(paths: list[Path]) -> list[str]:
    return [d["metadata"]["name"] for p in paths for d in yaml.safe_load_all(p.read_text()) if d]


def _mark_migrated(mgmt: TestbedClient, name: str) -> None:
    """Record this CRD generation as seen by CAPI's CRD migrator.

    The migrator runs once per CRD generation (after an install or an upgrade) and
    records it in this annotation; in a management cluster where CAPI ran before it
    is there, so a restart migrates nothing. The benchmark starts from that steady
    state rather than charging a one-off migration (a write per CRD) to first apply.
    """
    crd = mgmt.get(CRD_API, "CustomResourceDefinition", name)
    assert crd is not None
    annotations = {MIGRATED: str(crd["metadata"]["generation"])}
    mgmt.patch_merge(
        CRD_API, "CustomResourceDefinition", name, {"metadata": {"annotations": annotations}}
    )


def install(mgmt: TestbedClient, bases: Path) -> None:
    """Put Cluster API's CRDs in place of the test bed's minimal Cluster CRD.

    The test bed's CRD (config/testing) stores v1beta1 objects in a loose schema
    shared by both versions (conversion None), for crs-controller's phase. Cluster
    API's CRD stores v1beta2 with a strict schema and converts through a webhook we
    cannot run. Replacing the CRD in place would leave the first phase's Clusters in
    etcd as v1beta1 objects served through the v1beta2 schema without conversion,
    and CAPI's CRD migrator would rewrite every one of them (counted as its writes).
    So the test bed's CRD is deleted first (the API server deletes its objects
    itself; crs-controller is stopped by then and no finalizer holds them), and CAPI's
    CRD is installed fresh, storing only v1beta2: nothing left to migrate or convert.
    Running this phase first would need the same swap the other way round, and the
    crs-controller phase would no longer run on the set-up its past figures came from.
    """
    mgmt.delete(CRD_API, "CustomResourceDefinition", CLUSTER_CRD)
    wait_for(
        lambda: mgmt.get(CRD_API, "CustomResourceDefinition", CLUSTER_CRD) is None,
        300,
        interval=0.5,
        message="test bed Cluster CRD deleted",
    )
    install_stripped(mgmt, bases)


def install_stripped(mgmt: TestbedClient, bases: Path) -> None:
    """Cluster API's CRDs from ``bases`` without their webhooks, each recorded as
    migrated and its resource served before this returns."""
    with tempfile.TemporaryDirectory(prefix="bench-capi-crds-") as tmp:
        paths = _stripped_crds(bases, Path(tmp))
        install_crds(mgmt, paths, timeout=120)
        for name in _crd_names(paths):
            _mark_migrated(mgmt, name)
        warm_up(mgmt, paths)


# --- objects ----------------------------------------------------------------------


def _register(mgmt: TestbedClient, workload: Server, name: str) -> None:
    """A Cluster as a provider would have left it: no infrastructure or control-plane
    reference (the Cluster controller then has nothing external to wait for), the
    ``<name>-kubeconfig`` Secret, and status saying infrastructure is provisioned
    (the ClusterCache connects only then) and the control plane initialized."""
    register_cluster(
        mgmt,
        workload,
        name=name,
        namespace=NS,
        labels={"bench": "yes"},
        api_version=V1BETA2,
        initialized=False,
        kubeconfig_user=WORKLOAD_USER,
    )
    status = {
        "initialization": {"infrastructureProvisioned": True, "controlPlaneInitialized": True}
    }
    mgmt.patch_merge(
        V1BETA2, "Cluster", name, {"status": status}, namespace=NS, subresource="status"
    )


def populate(mgmt: TestbedClient, plane: ControlPlane, n: int) -> None:
    mgmt.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    mgmt.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "addon", "namespace": NS},
            "data": {"addon.yaml": distinct(addon("1"))},
        }
    )
    mgmt.create(
        {
            "apiVersion": ADDONS_API,
            "kind": "ClusterResourceSet",
            "metadata": {"name": "addon", "namespace": NS},
            "spec": {
                "clusterSelector": {"matchLabels": {"bench": "yes"}},
                "resources": [{"kind": "ConfigMap", "name": "addon"}],
                "strategy": "Reconcile",
            },
        }
    )
    for i in range(n):
        _register(mgmt, plane.workloads[i % len(plane.workloads)], f"c{i:04d}")


def hashes(mgmt: TestbedClient) -> list[str]:
    """Applied hashes of the add-on ConfigMap, one per binding once applied
    (``spec.bindings[].resources[].hash`` in v1beta2)."""
    out = []
    for binding in mgmt.list(ADDONS_API, "ClusterResourceSetBinding", NS):
        for entry in binding["spec"].get("bindings") or []:
            out += [
                r["hash"]
                for r in entry.get("resources") or []
                if r.get("applied") and r.get("hash") and r["name"] == "addon"
            ]
    return out


def edit(mgmt: TestbedClient) -> None:
    live = mgmt.get("v1", "ConfigMap", "addon", NS)
    assert live is not None
    live["data"]["addon.yaml"] = distinct(addon("2"))
    mgmt.update(live)


# --- the manager process ----------------------------------------------------------


def _die_with_parent() -> None:
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _free_ports(count: int) -> list[int]:
    # All sockets held until every port is chosen, so the ports are distinct.
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


class CapiManager:
    """Cluster API's core manager against the management server, as cluster-admin
    under its own user name (``bench-capi-manager``) for the audit log."""

    def __init__(self, binary: Path, management: Server, *extra: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="bench-capi-"))
        self.log_path = self.dir / "manager.log"
        kubeconfig = management.write_kubeconfig(
            self.dir / "kubeconfig", user=MANAGER_USER, groups=ADMIN_GROUPS
        )
        webhook, self.health_port, diagnostics = _free_ports(3)
        self.argv = [
            str(binary),
            f"--kubeconfig={kubeconfig}",
            f"--webhook-cert-dir={self._webhook_certs()}",
            f"--webhook-port={webhook}",
            f"--health-addr=127.0.0.1:{self.health_port}",
            f"--diagnostics-address=127.0.0.1:{diagnostics}",
            "--insecure-diagnostics",
            *extra,
        ]
        self._proc: subprocess.Popen[bytes] | None = None

    def _webhook_certs(self) -> Path:
        certs = self.dir / "webhook-certs"
        certs.mkdir()
        pair = CertificateAuthority.generate("bench-capi-webhook-ca").issue_serving()
        (certs / "tls.crt").write_bytes(pair.cert_pem)
        (certs / "tls.key").write_bytes(pair.key_pem)
        (certs / "tls.key").chmod(0o600)
        return certs

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self, timeout: float = 120.0) -> None:
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - no threads are started here
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"Cluster API manager exited early:\n{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                url = f"http://127.0.0.1:{self.health_port}/readyz"
                if httpx.get(url, timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"Cluster API manager not ready after {timeout}s:\n{self.log_tail()}")

    def stop(self, timeout: float = 15.0) -> int | None:
        if self._proc is None:
            return None
        proc, self._proc = self._proc, None
        return terminate(proc, timeout)

    def log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    def cleanup(self) -> None:
        """Remove the kubeconfig (cluster-admin key), certificates and log."""
        shutil.rmtree(self.dir, ignore_errors=True)


def _flags(concurrency: int) -> tuple[str, ...]:
    return (
        # Its own namespace only, so its caches hold what crs-controller's held: the
        # first phase's Secrets, ConfigMap and bindings stay behind in `bench`.
        f"--namespace={NS}",
        f"--clusterresourceset-concurrency={concurrency}",
        f"--kube-api-qps={UNLIMITED}",
        f"--kube-api-burst={UNLIMITED}",
        f"--clustercache-client-qps={UNLIMITED}",
        f"--clustercache-client-burst={UNLIMITED}",
        "--v=0",  # crs-controller runs at log level warning
    )


def run(plane: ControlPlane, binary: Path, crds: Path, n: int, concurrency: int) -> Figures:
    """Install, populate, then measure Cluster API's manager like crs-controller."""
    with TestbedClient(plane.management, timeout=30) as mgmt:
        install(mgmt, crds)
        populate(mgmt, plane, n)
        return {"manager": str(binary), **_measure(plane, mgmt, binary, n, concurrency)}


def _measure(
    plane: ControlPlane, mgmt: TestbedClient, binary: Path, n: int, concurrency: int
) -> Figures:
    manager = CapiManager(binary, plane.management, *_flags(concurrency))
    try:
        return measure(
            plane,
            manager,
            n=n,
            users=USERS,
            hashes=functools.partial(hashes, mgmt),
            edit=functools.partial(edit, mgmt),
        )
    except (TimeoutError, RuntimeError) as exc:
        raise RuntimeError(f"Cluster API phase: {exc}\nmanager log:\n{manager.log_tail()}") from exc
    finally:
        manager.cleanup()
