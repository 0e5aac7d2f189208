"""``crs-controller demo``: the controller against a local control plane.

Starts real kube-apiservers (one management, N workload clusters) on one etcd,
installs the CRDs, RBAC and ``config/samples``, registers the workload servers as
Cluster API Clusters (all but the last labelled ``crs-demo=true``), runs the
controller as its ServiceAccount with leader election (as installed, so ``uninstall``
finds it), then edits the sample ConfigMap and shows the change reaching every
matching cluster — and not the others. With ``keep`` it then
leaves all of it running as a sandbox (kubeconfigs written, commands to try printed)
until interrupted (Ctrl-C or SIGTERM).
"""

from __future__ import annotations

import signal
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.clusters import install_crds, register_cluster
from crs_controller.testbed.controller import ControllerProcess, install_rbac

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG = REPO_ROOT / "config"
NAMESPACE = "default"
CRS_API = "addons.crs.dev/v1alpha1"


def _say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _greeting(client: TestbedClient) -> str | None:
    settings = client.get("v1", "ConfigMap", "demo-settings", "demo-addon")
    return None if settings is None else str(settings["data"].get("greeting"))


def _wait_all(
    clients: list[TestbedClient], check: Callable[[TestbedClient], bool], what: str
) -> float:
    started = time.monotonic()
    wait_for(lambda: all(check(c) for c in clients), 60, message=what)
    return time.monotonic() - started


def demo(workloads: int = 3, *, keep: bool = False) -> int:
    workloads = max(2, workloads)
    _say(f"starting etcd, a management kube-apiserver and {workloads} workload ones")
    with ControlPlane.start(workloads=workloads, audit=False) as plane:
        _say(f"control plane up: Kubernetes {plane.version}")
        mgmt = TestbedClient(plane.management)
        _install(mgmt, plane)
        clients = [TestbedClient(s) for s in plane.workloads]
        matching, other = clients[:-1], clients[-1]
        started = time.monotonic()
        # As installed (config/manager): holding the leader Lease, which `uninstall`
        # looks for before it deletes anything.
        with ControllerProcess(plane.management, "--leader-elect") as controller:
            _say(f"controller running (log: {controller.log_path})")
            _wait_all(matching, lambda c: _greeting(c) is not None, "first apply")
            took = time.monotonic() - started
            _say(
                f"demo-addon is on all {len(matching)} matching clusters "
                f"{took:.1f}s after the controller started"
            )
            new = _edit_greeting(mgmt)
            took = _wait_all(matching, lambda c: _greeting(c) == new, "the edit")
            _say(f"the edit reached all {len(matching)} matching clusters in {took:.1f}s")
            _say(f"non-matching cluster has it: {_greeting(other) is not None}")
            _show_status(mgmt)
            if keep:
                _keep(plane)
        for client in [mgmt, *clients]:
            client.close()
    _say("stopped everything; done")
    return 0


def _install(mgmt: TestbedClient, plane: ControlPlane) -> None:
    """The CRDs, RBAC, one Cluster per workload server (all but the last labelled
    crs-demo=true) and config/samples, on the management server."""
    install_crds(mgmt, sorted((CONFIG / "crd" / "bases").glob("*.yaml")))
    install_crds(mgmt, sorted((CONFIG / "testing").glob("*.yaml")))
    install_rbac(mgmt)
    last = len(plane.workloads) - 1
    for i, server in enumerate(plane.workloads):
        labels = {"crs-demo": "true"} if i < last else {"crs-demo": "false"}
        register_cluster(mgmt, server, name=f"workload-{i}", namespace=NAMESPACE, labels=labels)
        _say(f"Cluster workload-{i} -> {server.url} labels={labels}")
    for path in (
        "demo-addon.yaml",
        "demo-secret.yaml",
        "addons_v1alpha1_clusterresourceset.yaml",
    ):
        for doc in _docs(CONFIG / "samples" / path):
            mgmt.apply(doc)
    _say("applied config/samples: ConfigMap demo-addon, Secret demo-secret, CRS demo")


def _edit_greeting(mgmt: TestbedClient) -> str:
    """Edit the greeting in the demo-addon ConfigMap; the new greeting."""
    source = mgmt.get("v1", "ConfigMap", "demo-addon", NAMESPACE)
    assert source is not None
    new = "hello again, edited on the management cluster"
    source["data"]["demo-addon.yaml"] = source["data"]["demo-addon.yaml"].replace(
        "hello from crs-controller", new
    )
    mgmt.update(source)
    _say(f"edited ConfigMap demo-addon: greeting -> {new!r}")
    return new


def _show_status(mgmt: TestbedClient) -> None:
    """The demo CRS's Ready condition and counts, and workload-0's binding."""
    crs = mgmt.get(CRS_API, "ClusterResourceSet", "demo", NAMESPACE) or {}
    status = crs.get("status", {})
    conditions = status.get("conditions", [])
    ready: dict[str, Any] = next((c for c in conditions if c["type"] == "Ready"), {})
    _say(
        f"CRS demo: Ready={ready.get('status')} ({ready.get('reason')}), "
        f"matching={status.get('matchingClusters')} "
        f"applied={status.get('appliedClusters')} failed={status.get('failedClusters')}"
    )
    binding = mgmt.get(CRS_API, "ClusterResourceSetBinding", "workload-0", NAMESPACE)
    print(yaml.safe_dump({"binding workload-0": (binding or {}).get("spec")}))


SANDBOX = """
The sandbox stays up until Ctrl-C. Kubeconfigs (cluster-admin) in {where}:
  management   {where}/management.kubeconfig
  workloads    {where}/workload-<N>.kubeconfig (workload-0 .. workload-{last})

Try (docs/sandbox.md walks through them):
  export KUBECONFIG={where}/management.kubeconfig
  crs-controller status demo -o wide
  crs-controller diff demo --cluster workload-0
  crs-controller render -f config/samples --cluster-labels crs-demo=true
  kubectl get crs,clusters -o wide
  kubectl --kubeconfig {where}/workload-0.kubeconfig -n demo-addon get configmap -o yaml
"""


def _keep(plane: ControlPlane) -> None:
    """Leave the control plane and the controller running for the user: write the
    kubeconfigs, print what to try, and return once interrupted."""
    where = Path(tempfile.mkdtemp(prefix="crs-demo-"))
    plane.management.write_kubeconfig(where / "management.kubeconfig")
    for i, server in enumerate(plane.workloads):
        server.write_kubeconfig(where / f"workload-{i}.kubeconfig")
    print(SANDBOX.format(where=where, last=len(plane.workloads) - 1), flush=True)
    _until_interrupted()
    _say("interrupted: stopping the controller and the control plane")


def _until_interrupted() -> None:
    """Block until SIGINT or SIGTERM; the previous handlers are put back after."""
    stop = threading.Event()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda *_: stop.set())
    try:
        while not stop.wait(1.0):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
