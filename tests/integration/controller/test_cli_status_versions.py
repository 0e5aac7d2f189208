"""`crs-controller status` of a CRS whose resources follow the Kubernetes version (the
real vSphere CPI builds for 1.33 and 1.34), on the real servers with the controller:
a cluster is on the revision exactly when the controller counts it so — the other
version's build, which it never gets, never keeps it off — both when every cluster
is current and when a held cluster keeps an older build of its own version."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crs_controller.app.cli import main
from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess
from tests.addons import ADDONS, needs_addons

from .support import (
    CLUSTER_API,
    CRS_API,
    TIMEOUT,
    add_cluster,
    admin_kubeconfig,
    source_configmap,
    source_secret,
    until_no_conflict,
)
from .test_versions import V133, V134

HOLD_UPDATES = "addons.crs.dev/hold-updates"
LABELS = {"cpi": "vsphere"}


def cpi_set(mgmt: TestbedClient, namespace: str) -> None:
    """One CRS, a CPI build per minor: 1.33's in a ConfigMap, 1.34's in a resource-set
    Secret (the build carries the vCenter credentials Secret), so status hashes
    either kind as the controller does."""
    cpi33 = (ADDONS / "vsphere-cpi-v1.33.yaml").read_text()
    cpi34 = (ADDONS / "vsphere-cpi-v1.34.yaml").read_text()
    mgmt.create(source_configmap(namespace, "cpi-1-33", {"cpi.yaml": cpi33}))
    mgmt.create(source_secret(namespace, "cpi-1-34", {"cpi.yaml": cpi34}))
    resources = [
        {"kind": "ConfigMap", "name": "cpi-1-33", "kubernetesVersions": V133},
        {"kind": "Secret", "name": "cpi-1-34", "kubernetesVersions": V134},
    ]
    spec = {
        "clusterSelector": {"matchLabels": LABELS},
        "resources": resources,
        "mode": "Reconcile",
        "rollout": {"maxConcurrent": 1},
    }
    crs = {"apiVersion": CRS_API, "kind": "ClusterResourceSet", "spec": spec}
    mgmt.create({**crs, "metadata": {"name": "cpi", "namespace": namespace}})


def rollout(mgmt: TestbedClient, namespace: str) -> dict[str, Any]:
    crs = mgmt.get(CRS_API, "ClusterResourceSet", "cpi", namespace) or {}
    return dict((crs.get("status") or {}).get("rollout") or {})


def current(capsys: pytest.CaptureFixture[str], namespace: str, kubeconfig: str) -> dict:
    """Each cluster's CURRENT in the table, after checking that -o json agrees."""
    args = ["status", "cpi", "-n", namespace, "--kubeconfig", kubeconfig]
    assert main([*args, "-o", "json"]) == 0
    (crs,) = json.loads(capsys.readouterr().out)["clusterResourceSets"]
    on = {row["cluster"]: row["revision"] == crs["revision"] for row in crs["clusters"]}
    assert main(args) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    column = header.split().index("CURRENT")
    table = {row.split()[1]: row.split()[column] == "true" for row in rows}
    assert table == on
    return table


@needs_addons
def test_status_counts_a_cluster_on_the_revision_as_the_controller_does(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workloads,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cpi_set(mgmt, namespace)
    add_cluster(mgmt, workloads[0], namespace, "on-1-33", LABELS, version="v1.33.2")
    add_cluster(mgmt, workloads[1], namespace, "on-1-34", LABELS, version="v1.34.1")
    done = {"phase": "Complete", "updatedClusters": 2}
    wait_for(lambda: done.items() <= rollout(mgmt, namespace).items(), TIMEOUT)
    kubeconfig = admin_kubeconfig(control_plane, tmp_path)
    # Both applied, each its own build: both on the revision, as the controller says.
    assert current(capsys, namespace, kubeconfig) == {"on-1-33": True, "on-1-34": True}

    # A new 1.33 build while the 1.33 cluster holds updates: it stays on the old
    # revision; the 1.34 cluster is on the new one without any apply.
    def hold() -> None:
        cluster = mgmt.get(CLUSTER_API, "Cluster", "on-1-33", namespace)
        cluster["metadata"].setdefault("annotations", {})[HOLD_UPDATES] = "true"
        mgmt.update(cluster)

    until_no_conflict(hold)
    source = mgmt.get("v1", "ConfigMap", "cpi-1-33", namespace)
    source["data"]["cpi.yaml"] = source["data"]["cpi.yaml"].replace(":v1.33.0", ":v1.33.1")
    mgmt.update(source)
    held = {"phase": "Complete", "updatedClusters": 1, "heldClusters": 1}
    wait_for(lambda: held.items() <= rollout(mgmt, namespace).items(), TIMEOUT)
    assert current(capsys, namespace, kubeconfig) == {"on-1-33": False, "on-1-34": True}
