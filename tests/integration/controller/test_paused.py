"""A paused ClusterResourceSet (annotation ``cluster.x-k8s.io/paused``) says so: its
``Paused`` condition is True and ``Ready`` is Unknown with reason ``Paused`` while an
edit of its sources waits; ``crs-controller status`` shows STATE ``Paused`` and the
API server's table (what ``kubectl get -o wide`` prints) a Paused column. Unpaused,
``Paused`` is False (``NotPaused``) and the edit goes out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crs_controller.app.cli import main
from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    CRS_API,
    TIMEOUT,
    add_cluster,
    admin_kubeconfig,
    condition,
    configmap_obj,
    crs_obj,
    manifests,
    reconciles,
    source_configmap,
    unique,
    wait_condition,
    wait_object,
)

PAUSED = "cluster.x-k8s.io/paused"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def _table(mgmt: TestbedClient, namespace: str, name: str) -> dict[str, Any]:
    """The CRS's row as the API server renders it for kubectl, by column name."""
    path = mgmt.path(CRS_API, "ClusterResourceSet", name, namespace)
    response = mgmt.http.get(path, headers={"Accept": TABLE})
    response.raise_for_status()
    table = response.json()
    names = [c["name"] for c in table["columnDefinitions"]]
    (row,) = table["rows"]
    return dict(zip(names, row["cells"], strict=True))


def _annotate(mgmt: TestbedClient, namespace: str, name: str, value: str | None) -> None:
    """Set (or with None, remove) the paused annotation."""
    change = {"metadata": {"annotations": {PAUSED: value}}}
    mgmt.patch_merge(CRS_API, "ClusterResourceSet", name, change, namespace=namespace)


def _shown_paused(
    mgmt: TestbedClient, namespace: str, capsys: pytest.CaptureFixture[str], kubeconfig: str
) -> None:
    """kubectl's table (Paused, Ready) and ``crs-controller status`` say "held" is paused."""
    row = _table(mgmt, namespace, "held")
    assert (row["Paused"], row["Ready"]) == ("True", "Unknown"), row
    args = ["status", "held", "-n", namespace, "--kubeconfig", kubeconfig]
    assert main([*args, "-o", "json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)["clusterResourceSets"]
    assert (shown["paused"], shown["ready"], shown["reason"]) == (True, "Unknown", "Paused")
    assert main(args) == 0
    header, line = capsys.readouterr().out.splitlines()
    assert line[header.index("STATE") :].split()[0] == "Paused", line


def test_a_paused_crs_says_so_until_unpaused(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    workloads,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = unique("held")
    mgmt.create(source_configmap(namespace, "src", {"a": manifests(configmap_obj(name, v="1"))}))
    mgmt.create(crs_obj(namespace, "held", [("ConfigMap", "src")], {"pz": "1"}, mode="Reconcile"))
    add_cluster(mgmt, workloads[2], namespace, "pz1", {"pz": "1"})
    wait_condition(mgmt, namespace, "held", "Ready", "True", "Applied")
    revision = mgmt.get(CRS_API, "ClusterResourceSet", "held", namespace)["status"]["revision"]

    _annotate(mgmt, namespace, "held", "")
    for kind, status in (("Paused", "True"), ("Ready", "Unknown")):
        said = wait_condition(mgmt, namespace, "held", kind, status, "Paused")
        assert PAUSED in said["message"], said
    # An edit of the source: the cluster is looked at, and nothing goes out.
    looked = reconciles(controller, "cluster", f"{namespace}/pz1")
    mgmt.update(source_configmap(namespace, "src", {"a": manifests(configmap_obj(name, v="2"))}))
    wait_for(lambda: reconciles(controller, "cluster", f"{namespace}/pz1") > looked, TIMEOUT)
    assert workload_clients[2].get("v1", "ConfigMap", name, "default")["data"] == {"v": "1"}
    crs = mgmt.get(CRS_API, "ClusterResourceSet", "held", namespace)
    assert crs["status"]["revision"] == revision
    applies = condition(crs, "ResourcesApplied")
    assert applies is not None and applies["reason"] == "Applied", applies
    _shown_paused(mgmt, namespace, capsys, admin_kubeconfig(control_plane, tmp_path))

    _annotate(mgmt, namespace, "held", None)
    wait_condition(mgmt, namespace, "held", "Paused", "False", "NotPaused")
    wait_object(
        workload_clients[2], "v1", "ConfigMap", name, "default", lambda o: o["data"] == {"v": "2"}
    )
    wait_condition(mgmt, namespace, "held", "Ready", "True", "Applied")
    assert _table(mgmt, namespace, "held")["Paused"] == "False"
