"""A cluster upgraded past the newest build of a version-matched add-on, on real
servers with the vSphere cloud provider's own 1.33 and 1.34 manifests: under
``deletionPolicy: Delete`` the cloud provider stays on the cluster, the pair says
``NoResourceForVersion`` (binding, CRS conditions, a Warning Event), and once a build
for the version exists the cluster takes it."""

from __future__ import annotations

from crs_controller.testbed import TestbedClient, wait_for
from crs_controller.testbed.clusters import set_control_plane_version
from crs_controller.testbed.controller import ControllerProcess
from tests.addons import ADDONS, needs_addons

from .support import (
    CRS_API,
    TIMEOUT,
    add_cluster,
    binding_entry,
    crs_obj,
    source_configmap,
    until_no_conflict,
    wait_condition,
)

V133 = ">=1.33.0, <1.34.0"
V134 = ">=1.34.0, <1.35.0"
CPI = ("apps/v1", "DaemonSet", "vsphere-cloud-controller-manager", "kube-system")


def _entry(mgmt: TestbedClient, namespace: str, cluster: str) -> dict:
    return binding_entry(mgmt, namespace, cluster, "cpi") or {}


def _reason(mgmt: TestbedClient, namespace: str, cluster: str) -> str:
    return str((_entry(mgmt, namespace, cluster).get("outcome") or {}).get("reason", ""))


def _applied(mgmt: TestbedClient, namespace: str, cluster: str) -> list[str]:
    resources = _entry(mgmt, namespace, cluster).get("resources", [])
    return sorted(r["name"] for r in resources if r.get("applied"))


def _warnings(mgmt: TestbedClient, namespace: str, reason: str) -> list[dict]:
    events = mgmt.list("v1", "Event", namespace)
    return [e for e in events if e["reason"] == reason and e["type"] == "Warning"]


@needs_addons
def test_an_upgrade_past_the_newest_build_keeps_the_cloud_provider_and_says_so(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    for minor in ("1.33", "1.34"):
        data = {"cpi.yaml": (ADDONS / f"vsphere-cpi-v{minor}.yaml").read_text()}
        mgmt.create(source_configmap(namespace, f"cpi-{minor.replace('.', '-')}", data))
    crs = crs_obj(
        namespace,
        "cpi",
        [("ConfigMap", "cpi-1-33"), ("ConfigMap", "cpi-1-34")],
        {"cpi": "vsphere"},
        mode="Reconcile",
        deletionPolicy="Delete",
    )
    crs["spec"]["resources"][0]["kubernetesVersions"] = V133
    crs["spec"]["resources"][1]["kubernetesVersions"] = V134
    mgmt.create(crs)
    # Workload 2: no other test applies the vSphere CPI there under Delete (objects of
    # one name on one server are shared by every test's Clusters on it).
    wl = workload_clients[2]
    add_cluster(mgmt, workloads[2], namespace, "vs", {"cpi": "vsphere"}, version="v1.34.1")
    wait_for(lambda: _applied(mgmt, namespace, "vs") == ["cpi-1-34"], TIMEOUT)
    assert wl.get(*CPI) is not None

    # A routine minor upgrade before the 1.35 build exists.
    set_control_plane_version(mgmt, name="vs", namespace=namespace, version="v1.35.0")
    wait_for(lambda: _reason(mgmt, namespace, "vs") == "NoResourceForVersion", TIMEOUT)
    message = _entry(mgmt, namespace, "vs")["outcome"]["message"]
    assert "v1.35.0" in message and "ConfigMap/cpi-1-34" in message
    assert _applied(mgmt, namespace, "vs") == ["cpi-1-34"]
    for kind in (CPI, ("v1", "Secret", "vsphere-cloud-secret", "kube-system")):
        assert wl.get(*kind) is not None, f"{kind} was deleted"
    wait_condition(mgmt, namespace, "cpi", "Ready", "False", "NoResourceForVersion")
    warned = wait_for(lambda: _warnings(mgmt, namespace, "NoResourceForVersion"), TIMEOUT)
    assert "v1.35.0" in warned[0]["message"]

    # The 1.34 build declared good for 1.35 too: the cluster follows, nothing deleted.
    def widen() -> None:
        live = mgmt.get(CRS_API, "ClusterResourceSet", "cpi", namespace)
        live["spec"]["resources"][1]["kubernetesVersions"] = ">=1.34.0, <1.36.0"
        mgmt.update(live)

    until_no_conflict(widen)
    wait_for(lambda: _reason(mgmt, namespace, "vs") == "Applied", TIMEOUT)
    wait_condition(mgmt, namespace, "cpi", "Ready", "True")
    assert wl.get(*CPI) is not None
