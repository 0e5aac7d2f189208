"""Deletes that cannot take a fleet down, on real servers: under deletionPolicy
Delete a removed CustomResourceDefinition (Velero's BackupStorageLocation CRD) or
Namespace stays on the workload cluster, with a DeletionSkipped Event and the CRS
status naming it, while a ConfigMap removed in the same change is deleted; with the
kind in the resource's allowDelete it is deleted; a version-matched resource leaving
as the cluster's version moves, a deleted CRS and uninstall before a Cluster's
deletion keep them too; and `crs-controller diff` shows each deletion,
and each keep with why, before it is made."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crs_controller.app.cli import main
from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.clusters import set_control_plane_version
from crs_controller.testbed.controller import ControllerProcess
from tests.addons import ADDONS, needs_addons

from .support import (
    CLUSTER_API,
    CRS_API,
    HOLD,
    TIMEOUT,
    add_cluster,
    admin_kubeconfig,
    binding_entry,
    configmap_obj,
    crs_obj,
    crs_status,
    manifests,
    source_configmap,
    unique,
    wait_object,
)
from .test_deletion import gone

Obj = dict[str, Any]

VELERO_CRD = ADDONS / "velero-backupstoragelocations-crd.yaml"
CRD_API = "apiextensions.k8s.io/v1"
CRD_KIND = "CustomResourceDefinition"
BSL_CRD = "backupstoragelocations.velero.io"
PAUSED = "cluster.x-k8s.io/paused"
# Velero's CRD is cluster-scoped: this module uses a server no other module puts it on.
SERVER = 2


def _crs(mgmt: TestbedClient, namespace: str, name: str, data: dict[str, str]) -> None:
    mgmt.create(source_configmap(namespace, name, data))
    crs = crs_obj(namespace, name, [("ConfigMap", name)], {"guard": name}, mode="Reconcile")
    crs["spec"]["deletionPolicy"] = "Delete"
    mgmt.create(crs)


def _edit(mgmt: TestbedClient, namespace: str, name: str, data: dict[str, str]) -> None:
    source = mgmt.get("v1", "ConfigMap", name, namespace)
    source["data"] = data
    mgmt.update(source)


def _pause(mgmt: TestbedClient, namespace: str, name: str, paused: bool) -> None:
    patch = {"metadata": {"annotations": {PAUSED: "" if paused else None}}}
    mgmt.patch_merge(CRS_API, "ClusterResourceSet", name, patch, namespace=namespace)


def _allow(mgmt: TestbedClient, namespace: str, name: str, kinds: list[str] | None) -> None:
    resource = {"kind": "ConfigMap", "name": name, "allowDelete": kinds}
    patch = {"spec": {"resources": [{k: v for k, v in resource.items() if v is not None}]}}
    mgmt.patch_merge(CRS_API, "ClusterResourceSet", name, patch, namespace=namespace)


def _inventory(mgmt: TestbedClient, namespace: str, cluster: str, crs: str) -> set[str]:
    entry = binding_entry(mgmt, namespace, cluster, crs) or {}
    return {o["name"] for r in entry.get("resources", []) for o in r.get("objects", [])}


def _skipped_events(mgmt: TestbedClient, namespace: str, crs: str) -> list[Obj]:
    return [
        e
        for e in mgmt.list("v1", "Event", namespace)
        if e["reason"] == "DeletionSkipped" and e["involvedObject"]["name"] == crs
    ]


def _skipped_event(mgmt: TestbedClient, namespace: str, crs: str, naming: str) -> Obj:
    def check() -> Obj | None:
        found = [e for e in _skipped_events(mgmt, namespace, crs) if naming in e["message"]]
        return found[0] if found else None

    return wait_for(check, TIMEOUT, message=f"DeletionSkipped naming {naming}")


def _diff(kubeconfig: str, namespace: str, crs: str, cluster: str, *extra: str) -> list[str]:
    return ["diff", crs, "--cluster", cluster, "-n", namespace, "--kubeconfig", kubeconfig, *extra]


@needs_addons
def test_a_removed_crd_is_kept_unless_allowed_and_diff_says_so_first(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    workloads,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    wl, cm = workload_clients[SERVER], unique("cm")
    full = {"crd.yaml": VELERO_CRD.read_text(), "cm.yaml": manifests(configmap_obj(cm))}
    _crs(mgmt, namespace, "velero", full)
    add_cluster(mgmt, workloads[SERVER], namespace, "vel1", {"guard": "velero"})
    wait_object(wl, "v1", "ConfigMap", cm, "default")
    wait_for(lambda: _inventory(mgmt, namespace, "vel1", "velero") == {BSL_CRD, cm}, TIMEOUT)

    # Held (paused), the change is shown before it is made: the ConfigMap would go,
    # the CRD would stay, and stderr says why.
    _pause(mgmt, namespace, "velero", True)
    _edit(mgmt, namespace, "velero", {})
    kubeconfig = admin_kubeconfig(control_plane, tmp_path)
    assert main(_diff(kubeconfig, namespace, "velero", "vel1")) == 1
    out, err = capsys.readouterr()
    assert f"live/v1.ConfigMap.default.{cm}" in out and BSL_CRD not in out, out
    crd_name = f"apiextensions.k8s.io.v1.{CRD_KIND}.-.{BSL_CRD}"
    why = f"{CRD_KIND} is not in allowDelete of ConfigMap/velero"
    assert f"{crd_name} would be kept, not deleted: {why}" in err, err
    assert main(_diff(kubeconfig, namespace, "velero", "vel1", "-o", "json")) == 1
    report = json.loads(capsys.readouterr().out)
    assert [c["object"] for c in report["changes"]] == [f"v1.ConfigMap.default.{cm}"]
    assert report["kept"] == [{"object": crd_name, "reason": why}]
    assert wl.get("v1", "ConfigMap", cm, "default") is not None

    # Made: the ConfigMap goes in the pass that keeps the CRD and says so.
    _pause(mgmt, namespace, "velero", False)
    gone(wl, "v1", "ConfigMap", cm, "default")
    event = _skipped_event(mgmt, namespace, "velero", BSL_CRD)
    # Told as one Event for every cluster the change reached.
    assert event["type"] == "Warning" and "on 1 cluster: vel1: kept" in event["message"], event
    assert wl.get(CRD_API, CRD_KIND, BSL_CRD) is not None

    def skipped() -> list[Obj]:
        return list(crs_status(mgmt, namespace, "velero").get("deletionsSkipped") or [])

    wait_for(skipped, TIMEOUT, message="status.deletionsSkipped")
    named = {"cluster": "vel1", "apiVersion": CRD_API, "kind": CRD_KIND, "name": BSL_CRD}
    assert skipped() == [named]
    assert _inventory(mgmt, namespace, "vel1", "velero") == set()  # forgotten

    # Allowed: put back (applied again, so no longer named as kept), then removed.
    _allow(mgmt, namespace, "velero", [CRD_KIND])
    _edit(mgmt, namespace, "velero", {"crd.yaml": VELERO_CRD.read_text()})
    wait_for(lambda: _inventory(mgmt, namespace, "vel1", "velero") == {BSL_CRD}, TIMEOUT)
    wait_for(lambda: not skipped(), TIMEOUT, message="status.deletionsSkipped cleared")
    _pause(mgmt, namespace, "velero", True)
    _edit(mgmt, namespace, "velero", {})
    assert main(_diff(kubeconfig, namespace, "velero", "vel1", "-o", "json")) == 1
    report = json.loads(capsys.readouterr().out)
    assert [c["object"] for c in report["changes"]] == [crd_name]
    assert report["kept"] == []
    _pause(mgmt, namespace, "velero", False)
    gone(wl, CRD_API, CRD_KIND, BSL_CRD)
    assert len(_skipped_events(mgmt, namespace, "velero")) == 1


def _namespace(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def test_a_removed_namespace_is_kept_unless_allowed_also_when_the_crs_goes(
    controller: ControllerProcess,
    mgmt: TestbedClient,
    workload_clients,
    workloads,
    namespace: str,
) -> None:
    wl = workload_clients[SERVER]
    kept, allowed, last, cm = unique("kept"), unique("allowed"), unique("last"), unique("cm")
    data = {
        "a.yaml": manifests(_namespace(kept)),
        "b.yaml": manifests(_namespace(allowed)),
        "c.yaml": manifests(_namespace(last), configmap_obj(cm)),
    }
    _crs(mgmt, namespace, "spaces", data)
    add_cluster(mgmt, workloads[SERVER], namespace, "n1", {"guard": "spaces"})
    everything = {kept, allowed, last, cm}
    wait_for(lambda: _inventory(mgmt, namespace, "n1", "spaces") == everything, TIMEOUT)

    # Removed without allowDelete: kept, told, named, forgotten.
    _edit(mgmt, namespace, "spaces", {k: v for k, v in data.items() if k != "a.yaml"})
    event = _skipped_event(mgmt, namespace, "spaces", f"v1 Namespace {kept}")
    assert "Namespace is not in allowDelete of ConfigMap/spaces" in event["message"], event
    assert _inventory(mgmt, namespace, "n1", "spaces") == {allowed, last, cm}
    assert wl.get("v1", "Namespace", kept)["metadata"].get("deletionTimestamp") is None

    # Allowed: the next removed Namespace is deleted; the one kept before stays
    # forgotten (a later allowDelete does not reach back).
    _allow(mgmt, namespace, "spaces", ["Namespace"])
    _edit(mgmt, namespace, "spaces", {"c.yaml": data["c.yaml"]})
    gone(wl, "v1", "Namespace", allowed)
    wait_for(lambda: _inventory(mgmt, namespace, "n1", "spaces") == {last, cm}, TIMEOUT)
    assert wl.get("v1", "Namespace", kept)["metadata"].get("deletionTimestamp") is None

    # The CRS deleted, allowDelete gone again: its ConfigMap goes, its Namespace stays.
    _allow(mgmt, namespace, "spaces", None)
    wait_for(
        lambda: (
            "allowDelete"
            not in mgmt.get(CRS_API, "ClusterResourceSet", "spaces", namespace)["spec"][
                "resources"
            ][0]
        ),
        TIMEOUT,
    )
    mgmt.delete(CRS_API, "ClusterResourceSet", "spaces", namespace)
    gone(wl, "v1", "ConfigMap", cm, "default")
    _skipped_event(mgmt, namespace, "spaces", f"v1 Namespace {last}")
    wait_for(lambda: mgmt.get(CRS_API, "ClusterResourceSet", "spaces", namespace) is None, TIMEOUT)
    for name in (kept, last):
        assert wl.get("v1", "Namespace", name)["metadata"].get("deletionTimestamp") is None


def test_uninstall_before_a_cluster_is_deleted_keeps_an_unallowed_namespace(
    controller: ControllerProcess,
    mgmt: TestbedClient,
    workload_clients,
    workloads,
    namespace: str,
) -> None:
    wl = workload_clients[SERVER]
    kept, allowed, cm = unique("kept"), unique("allowed"), unique("cm")
    data = {"a.yaml": manifests(_namespace(kept), configmap_obj(cm))}
    mgmt.create(source_configmap(namespace, "a", data))
    mgmt.create(source_configmap(namespace, "b", {"b.yaml": manifests(_namespace(allowed))}))
    crs = crs_obj(namespace, "un", [("ConfigMap", "a"), ("ConfigMap", "b")], {"guard": "un"})
    crs["spec"]["resources"][1]["allowDelete"] = ["Namespace"]
    crs["spec"]["uninstall"] = {"ensure": True}
    mgmt.create(crs)
    add_cluster(mgmt, workloads[SERVER], namespace, "u1", {"guard": "un"})
    patch = {"metadata": {"finalizers": [HOLD]}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", "u1", patch, namespace=namespace)
    wait_for(lambda: _inventory(mgmt, namespace, "u1", "un") == {kept, allowed, cm}, TIMEOUT)

    mgmt.delete(CLUSTER_API, "Cluster", "u1", namespace)
    gone(wl, "v1", "ConfigMap", cm, "default")
    gone(wl, "v1", "Namespace", allowed)
    event = _skipped_event(mgmt, namespace, "un", f"v1 Namespace {kept}")
    assert "cluster u1" in event["message"] and allowed not in event["message"], event
    assert wl.get("v1", "Namespace", kept)["metadata"].get("deletionTimestamp") is None
    mgmt.patch_merge(
        CLUSTER_API, "Cluster", "u1", {"metadata": {"finalizers": None}}, namespace=namespace
    )
    wait_for(lambda: mgmt.get(CLUSTER_API, "Cluster", "u1", namespace) is None, TIMEOUT)


def test_a_version_matched_namespace_is_kept_when_the_version_moves(
    controller: ControllerProcess,
    mgmt: TestbedClient,
    workload_clients,
    workloads,
    namespace: str,
) -> None:
    wl = workload_clients[SERVER]
    space, old, new = unique("cpi-ns"), unique("cpi-v133"), unique("cpi-v134")
    mgmt.create(
        source_configmap(namespace, "v133", {"a": manifests(_namespace(space), configmap_obj(old))})
    )
    mgmt.create(source_configmap(namespace, "v134", {"a": manifests(configmap_obj(new))}))
    crs = crs_obj(
        namespace,
        "cpi",
        [("ConfigMap", "v133"), ("ConfigMap", "v134")],
        {"guard": "cpi"},
        mode="Reconcile",
        deletionPolicy="Delete",
    )
    crs["spec"]["resources"][0]["kubernetesVersions"] = ">=1.33.0, <1.34.0"
    crs["spec"]["resources"][1]["kubernetesVersions"] = ">=1.34.0, <1.35.0"
    mgmt.create(crs)
    add_cluster(mgmt, workloads[SERVER], namespace, "cp1", {"guard": "cpi"}, version="v1.33.2")
    wait_for(lambda: _inventory(mgmt, namespace, "cp1", "cpi") == {space, old}, TIMEOUT)

    set_control_plane_version(mgmt, name="cp1", namespace=namespace, version="v1.34.0")
    wait_object(wl, "v1", "ConfigMap", new, "default")
    gone(wl, "v1", "ConfigMap", old, "default")
    event = _skipped_event(mgmt, namespace, "cpi", f"v1 Namespace {space}")
    assert "ConfigMap/v133" in event["message"], event
    wait_for(lambda: _inventory(mgmt, namespace, "cp1", "cpi") == {new}, TIMEOUT)
    assert wl.get("v1", "Namespace", space)["metadata"].get("deletionTimestamp") is None
