"""Add-ons that follow the cluster's version, on real servers: resources with
``kubernetesVersions`` go to the clusters whose control plane runs a version in their
range, swap when the version moves (deletionPolicy Delete removes the old), wait for
a version not known yet, and a new revision waits while Cluster API upgrades a
cluster."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from crs_controller.app.cli import main
from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.clusters import (
    control_plane_ref,
    create_control_plane,
    set_control_plane_version,
)
from crs_controller.testbed.controller import SA_USER, ControllerProcess

from .support import (
    CLUSTER_API,
    CRS_API,
    TIMEOUT,
    add_cluster,
    admin_kubeconfig,
    audit_caught_up,
    binding_entry,
    configmap_obj,
    crs_obj,
    manifests,
    reconciles,
    source_configmap,
    unique,
    wait_object,
    writes_by,
)
from .test_deletion import gone

V133 = ">=1.33.0, <1.34.0"
V134 = ">=1.34.0, <1.35.0"


def _resources(mgmt: TestbedClient, namespace: str, crs: str, cluster: str) -> list[str]:
    entry = binding_entry(mgmt, namespace, cluster, crs) or {}
    return sorted(r["name"] for r in entry.get("resources", []) if r.get("applied"))


def _reason(mgmt: TestbedClient, namespace: str, crs: str, cluster: str) -> str:
    entry = binding_entry(mgmt, namespace, cluster, crs) or {}
    return str((entry.get("outcome") or {}).get("reason", ""))


def test_each_cluster_gets_the_resources_of_the_version_it_runs(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    workloads,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    common, cpi33, cpi34 = unique("common"), unique("cpi-v133"), unique("cpi-v134")
    mgmt.create(source_configmap(namespace, "common", {"a": manifests(configmap_obj(common))}))
    mgmt.create(source_configmap(namespace, "cpi-1-33", {"a": manifests(configmap_obj(cpi33))}))
    mgmt.create(source_configmap(namespace, "cpi-1-34", {"a": manifests(configmap_obj(cpi34))}))
    crs = crs_obj(
        namespace,
        "cpi",
        [("ConfigMap", "common"), ("ConfigMap", "cpi-1-33"), ("ConfigMap", "cpi-1-34")],
        {"cpi": "yes"},
        mode="Reconcile",
        deletionPolicy="Delete",
    )
    crs["spec"]["resources"][1]["kubernetesVersions"] = V133
    crs["spec"]["resources"][2]["kubernetesVersions"] = V134
    mgmt.create(crs)
    old, new, unknown = workload_clients
    add_cluster(mgmt, workloads[0], namespace, "old", {"cpi": "yes"}, version="v1.33.2")
    add_cluster(mgmt, workloads[1], namespace, "new", {"cpi": "yes"}, version="v1.34.1")
    # A Cluster naming no control plane: its version is unknown.
    add_cluster(mgmt, workloads[2], namespace, "unknown", {"cpi": "yes"})

    # Two clusters at different versions: one CRS, different CPI objects.
    wait_for(lambda: _resources(mgmt, namespace, "cpi", "old") == ["common", "cpi-1-33"], TIMEOUT)
    wait_for(lambda: _resources(mgmt, namespace, "cpi", "new") == ["common", "cpi-1-34"], TIMEOUT)
    wait_object(old, "v1", "ConfigMap", cpi33, "default")
    wait_object(new, "v1", "ConfigMap", cpi34, "default")
    # Recorded right after the applies: the other version's object was never sent.
    assert old.get("v1", "ConfigMap", cpi34, "default") is None
    assert new.get("v1", "ConfigMap", cpi33, "default") is None

    # Unknown version: the others apply, the version-matched ones wait, and say so.
    wait_for(lambda: _reason(mgmt, namespace, "cpi", "unknown") == "WaitingForVersion", TIMEOUT)
    assert _resources(mgmt, namespace, "cpi", "unknown") == ["common"]
    wait_object(unknown, "v1", "ConfigMap", common, "default")
    assert unknown.get("v1", "ConfigMap", cpi33, "default") is None
    message = binding_entry(mgmt, namespace, "unknown", "cpi")["outcome"]["message"]
    assert "spec.controlPlaneRef" in message

    # The version moves: the 1.34 object goes on, the 1.33 one is removed (Delete).
    set_control_plane_version(mgmt, name="old", namespace=namespace, version="v1.34.0")
    wait_object(old, "v1", "ConfigMap", cpi34, "default")
    gone(old, "v1", "ConfigMap", cpi33, "default")
    # The binding is written after the pass (its deletions included): wait for it.
    wait_for(lambda: _resources(mgmt, namespace, "cpi", "old") == ["common", "cpi-1-34"], TIMEOUT)
    assert old.get("v1", "ConfigMap", common, "default") is not None
    # diff reads the version as the controller does: nothing left to change.
    kubeconfig = admin_kubeconfig(control_plane, tmp_path)
    diff = ["diff", "cpi", "--cluster", "old", "-n", namespace, "--kubeconfig", kubeconfig]
    assert main(diff) == 0, capsys.readouterr()
    assert cpi33 not in capsys.readouterr().out

    # The unknown cluster gets a control plane that reports its version: it follows.
    create_control_plane(mgmt, name="unknown", namespace=namespace, version="v1.33.0")
    cluster = mgmt.get(CLUSTER_API, "Cluster", "unknown", namespace)
    cluster["spec"]["controlPlaneRef"] = control_plane_ref(CLUSTER_API, "unknown-control-plane")
    mgmt.update(cluster)
    wait_object(unknown, "v1", "ConfigMap", cpi33, "default")
    wait_for(lambda: _reason(mgmt, namespace, "cpi", "unknown") == "Applied", TIMEOUT)


def test_orphan_policy_leaves_the_old_version_in_place(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    workloads,
    namespace: str,
) -> None:
    cpi33, cpi34 = unique("keep-v133"), unique("keep-v134")
    mgmt.create(source_configmap(namespace, "cpi-1-33", {"a": manifests(configmap_obj(cpi33))}))
    mgmt.create(source_configmap(namespace, "cpi-1-34", {"a": manifests(configmap_obj(cpi34))}))
    crs = crs_obj(
        namespace,
        "cpi",
        [("ConfigMap", "cpi-1-33"), ("ConfigMap", "cpi-1-34")],
        {"orphan": "yes"},
        mode="Reconcile",
    )
    crs["spec"]["resources"][0]["kubernetesVersions"] = V133
    crs["spec"]["resources"][1]["kubernetesVersions"] = V134
    mgmt.create(crs)
    add_cluster(mgmt, workloads[0], namespace, "orphan", {"orphan": "yes"}, version="v1.33.9")
    wl = workload_clients[0]
    wait_object(wl, "v1", "ConfigMap", cpi33, "default")
    set_control_plane_version(mgmt, name="orphan", namespace=namespace, version="v1.34.0")
    wait_object(wl, "v1", "ConfigMap", cpi34, "default")
    wait_for(lambda: _resources(mgmt, namespace, "cpi", "orphan") == ["cpi-1-34"], TIMEOUT)
    # Orphan: the 1.33 object left the binding and stays on the cluster.
    assert wl.get("v1", "ConfigMap", cpi33, "default") is not None

    # A restart reads the control plane before the first pass: the version is known
    # at once, so the binding is not written (no WaitingForVersion in between). Read
    # while no controller runs: no write of the last pass can land after it.
    controller.stop()
    before = binding_entry(mgmt, namespace, "orphan", "cpi")
    restarted = time.time()
    controller.start()
    key = f"{namespace}/orphan"
    wait_for(lambda: reconciles(controller, "cluster", key) >= 1, TIMEOUT)
    audit_caught_up([control_plane.management])
    writes = writes_by([control_plane.management], {SA_USER}, restarted)
    assert "management update clusterresourcesetbindings/orphan" not in writes, writes
    assert binding_entry(mgmt, namespace, "orphan", "cpi") == before


def test_a_new_revision_waits_while_cluster_api_upgrades_the_cluster(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    addon, later = unique("addon"), unique("later")
    mgmt.create(
        source_configmap(namespace, "addon", {"a": manifests(configmap_obj(addon, rev="1"))})
    )
    mgmt.create(
        crs_obj(namespace, "addon", [("ConfigMap", "addon")], {"up": "yes"}, mode="Reconcile")
    )
    add_cluster(mgmt, workloads[1], namespace, "up", {"up": "yes"}, version="v1.34.0")
    wl = workload_clients[1]
    wait_object(wl, "v1", "ConfigMap", addon, "default", lambda o: o["data"]["rev"] == "1")

    # Cluster API starts an upgrade: the control plane is asked for v1.35.0.
    set_control_plane_version(
        mgmt, name="up", namespace=namespace, version="v1.34.0", desired="v1.35.0"
    )
    source = mgmt.get("v1", "ConfigMap", "addon", namespace)
    source["data"] = {"a": manifests(configmap_obj(addon, rev="2"))}
    mgmt.update(source)
    wait_for(lambda: _reason(mgmt, namespace, "addon", "up") == "UpgradeInProgress", TIMEOUT)
    message = binding_entry(mgmt, namespace, "up", "addon")["outcome"]["message"]
    assert "ConfigMap/addon" in message and "upgrading" in message
    # Recorded after the pass that held it: the cluster still has revision 1.
    assert wl.get("v1", "ConfigMap", addon, "default")["data"]["rev"] == "1"
    crs = mgmt.get(CRS_API, "ClusterResourceSet", "addon", namespace)
    assert crs is not None

    # A first install still goes during the upgrade.
    mgmt.create(source_configmap(namespace, "later", {"a": manifests(configmap_obj(later))}))
    mgmt.create(
        crs_obj(namespace, "later", [("ConfigMap", "later")], {"up": "yes"}, mode="Reconcile")
    )
    wait_object(wl, "v1", "ConfigMap", later, "default")

    # The upgrade is done: the new revision goes on.
    set_control_plane_version(mgmt, name="up", namespace=namespace, version="v1.35.0")
    wait_object(wl, "v1", "ConfigMap", addon, "default", lambda o: o["data"]["rev"] == "2")
    wait_for(lambda: _reason(mgmt, namespace, "addon", "up") == "Applied", TIMEOUT)
