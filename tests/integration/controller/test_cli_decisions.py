"""`render` and `diff` decide as the controller and the API server do, on the real
servers: they refuse the unknown fields the API server's strict field validation
refuses, naming them as it does; fields left to others (spec.ignore) are no change in
`diff` (a real add-on's Deployment scaled by another manager), and are sent when an
object is created; and a change the controller would hold (a paused Cluster or CRS,
a Cluster that holds updates, a paused rollout, Cluster API upgrading the cluster) is
still shown, and stderr says that the controller holds it and why."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from crs_controller.app.cli import main
from crs_controller.app.commands.common import dump_manifests
from crs_controller.core.api.clusters import HOLD_UPDATES_ANNOTATION, PAUSED_ANNOTATION
from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.clusters import set_control_plane_version
from crs_controller.testbed.controller import ControllerProcess
from tests.addons import ADDONS, needs_addons

from .support import (
    CLUSTER_API,
    CRS_API,
    TIMEOUT,
    add_cluster,
    admin_kubeconfig,
    binding_entry,
    configmap_obj,
    crs_obj,
    log_records,
    manifests,
    reconciles,
    source_configmap,
    unique,
    wait_condition,
    wait_object,
)

CRD_NAME = "clusterresourcesets.addons.crs.dev"


def changed_lines(out: str) -> list[str]:
    return [
        line for line in out.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")
    ]


def diff_args(kubeconfig: str, namespace: str, crs: str, cluster: str) -> list[str]:
    return ["diff", crs, "--cluster", cluster, "-n", namespace, "--kubeconfig", kubeconfig]


# --- unknown fields ------------------------------------------------------------------


def _server_refuses(mgmt: TestbedClient, namespace: str, crs: dict[str, Any]) -> str:
    """What the API server answers to ``crs`` under strict field validation (a dry
    run: nothing stored)."""
    response = mgmt.http.request(
        "POST",
        mgmt.path(CRS_API, "ClusterResourceSet", namespace=namespace),
        json=crs,
        params={"fieldValidation": "Strict", "dryRun": "All"},
    )
    assert response.status_code == 400, response.text
    message: str = response.json()["message"]
    return message


def test_render_refuses_the_unknown_fields_the_api_server_refuses(
    mgmt: TestbedClient, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = source_configmap(namespace, "typo", {"a": manifests(configmap_obj("typo"))})
    crs = crs_obj(namespace, "typo", [("ConfigMap", "typo")], {"a": "b"}, mode="Reconcile")
    crs["metadata"]["lables"] = {"team": "a"}
    crs["spec"]["healthCheck"] = {"wiat": True}
    crs["spec"]["resources"][0]["substitue"] = True
    crs["spec"]["rollout"] = {"steps": [{"clusterSelector": {}, "pauseAftr": "1m"}]}
    given = tmp_path / "crs.yaml"
    given.write_text(manifests(crs, source))
    assert main(["render", "-f", str(given)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    said = err.removeprefix(f"crs-controller render: {given} document 1: ").strip()
    server = _server_refuses(mgmt, namespace, crs)
    expected = (
        'strict decoding error: unknown field "metadata.lables", '
        'unknown field "spec.healthCheck.wiat", '
        'unknown field "spec.resources[0].substitue", '
        'unknown field "spec.rollout.steps[0].pauseAftr"'
    )
    assert said == f"ClusterResourceSet typo: {expected}"
    assert server.endswith(expected), server

    # The user's own typo: clusterSelecter, and no clusterSelector.
    crs = crs_obj(namespace, "typo", [("ConfigMap", "typo")], {"a": "b"})
    crs["spec"]["clusterSelecter"] = crs["spec"].pop("clusterSelector")
    given.write_text(manifests(crs, source))
    assert main(["render", "-f", str(given), "-o", "manifests"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert 'strict decoding error: unknown field "spec.clusterSelecter"' in err
    assert 'unknown field "spec.clusterSelecter"' in _server_refuses(mgmt, namespace, crs)
    # Labels, annotations and the rest of metadata are the API server's: no unknown field.
    crs = crs_obj(namespace, "typo", [("ConfigMap", "typo")], {"a": "b"})
    crs["metadata"].update(labels={"x": "y"}, annotations={"z": "w"}, generateName="t-")
    given.write_text(dump_manifests([crs, source]))  # "y" quoted: kubectl reads y as true
    assert main(["render", "-f", str(given)]) == 0, capsys.readouterr().err


@pytest.fixture
def newer_crd(mgmt: TestbedClient) -> Iterator[None]:
    """The CRD of a newer release on the management cluster: spec.healthCheck has a
    field this crs-controller does not know. Put back as it was afterwards."""
    before = mgmt.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", CRD_NAME)
    newer = copy.deepcopy(before)
    spec = newer["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["healthCheck"]["properties"]["wiat"] = {"type": "boolean"}
    mgmt.update(newer)
    try:
        yield
    finally:
        current = mgmt.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", CRD_NAME)
        current["spec"] = before["spec"]
        mgmt.update(current)


def test_diff_refuses_a_crs_with_a_field_this_version_does_not_know(
    newer_crd: None,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workloads,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    mgmt.create(source_configmap(namespace, "nw", {"a": manifests(configmap_obj(unique("nw")))}))
    crs = crs_obj(namespace, "nw", [("ConfigMap", "nw")], {"nw": "1"}, mode="Reconcile")
    crs["spec"]["healthCheck"] = {"wiat": True}

    def stored() -> bool:
        try:
            mgmt.create(copy.deepcopy(crs))
        except Exception:  # the newer schema is not served yet
            return False
        return True

    wait_for(stored, TIMEOUT)
    live = mgmt.get(CRS_API, "ClusterResourceSet", "nw", namespace)
    assert live["spec"]["healthCheck"]["wiat"] is True
    add_cluster(mgmt, workloads[0], namespace, "nw-1", {"nw": "1"}, initialized=False)
    kubeconfig = admin_kubeconfig(control_plane, tmp_path)
    assert main(diff_args(kubeconfig, namespace, "nw", "nw-1")) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"crs-controller diff: ClusterResourceSet {namespace}/nw: strict decoding error: "
        'unknown field "spec.healthCheck.wiat" (not in this crs-controller\'s schema: the CRD '
        "installed is another version's)\n"
    )


# --- fields left to others ---------------------------------------------------------

REPLICAS_RULE = {"target": {"group": "apps", "kind": "Deployment"}, "paths": ["/spec/replicas"]}


def calico_controllers() -> dict[str, Any]:
    """calico-kube-controllers, the Deployment of the real Calico manifest."""
    for doc in yaml.safe_load_all((ADDONS / "calico.yaml").read_text()):
        if doc and doc["kind"] == "Deployment":
            return dict(doc)
    raise AssertionError("calico.yaml has no Deployment")


def scale(wl: TestbedClient, name: str, namespace: str, replicas: int) -> None:
    """What an HPA does: the scale subresource, under a field manager of its own."""
    response = wl.http.request(
        "PATCH",
        wl.path("apps/v1", "Deployment", name, namespace, "scale"),
        content=json.dumps({"spec": {"replicas": replicas}}),
        headers={"Content-Type": "application/merge-patch+json"},
        params={"fieldManager": "hpa-like"},
    )
    assert response.status_code == 200, response.text


@needs_addons
def test_diff_leaves_out_ignored_paths_as_the_controller_does(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workloads,
    workload_clients,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    addon = calico_controllers()
    name, where = addon["metadata"]["name"], addon["metadata"]["namespace"]
    assert addon["spec"]["replicas"] == 1
    mgmt.create(source_configmap(namespace, "kc", {"calico.yaml": manifests(addon)}))
    crs = crs_obj(namespace, "kc", [("ConfigMap", "kc")], {"kc": "1"}, mode="Reconcile")
    crs["spec"]["ignore"] = [REPLICAS_RULE]
    mgmt.create(crs)
    add_cluster(mgmt, workloads[0], namespace, "kc-1", {"kc": "1"})
    wl = workload_clients[0]
    wait_object(wl, "apps/v1", "Deployment", name, where)
    wait_for(lambda: binding_entry(mgmt, namespace, "kc-1", "kc"), TIMEOUT)
    kubeconfig = admin_kubeconfig(control_plane, tmp_path)
    args = diff_args(kubeconfig, namespace, "kc", "kc-1")
    try:
        # Another manager scales it: the controller keeps 5, and so does the diff.
        scale(wl, name, where, 5)
        assert main(args) == 0, capsys.readouterr()
        assert capsys.readouterr().out == ""
        assert main([*args, "-o", "json"]) == 0
        assert json.loads(capsys.readouterr().out)["changes"] == []
        assert wl.get("apps/v1", "Deployment", name, where)["spec"]["replicas"] == 5

        # On a cluster where it is still to be created, replicas are sent with it.
        add_cluster(mgmt, workloads[1], namespace, "kc-2", {"kc": "1"}, initialized=False)
        assert main(diff_args(kubeconfig, namespace, "kc", "kc-2")) == 1
        out = capsys.readouterr().out
        assert f"+++ applied/apps.v1.Deployment.{where}.{name}" in out
        assert "+  replicas: 1" in changed_lines(out), out
    finally:
        wl.delete("apps/v1", "Deployment", name, where)


# --- what holds a change -------------------------------------------------------------


def _installed(
    mgmt: TestbedClient,
    workload: Any,
    namespace: str,
    crs: str,
    cluster: str,
    name: str,
    **options: Any,
) -> None:
    """ConfigMap ``name`` (v: "1") applied by CRS ``crs`` (Reconcile, its source of
    the same name) to a new Cluster ``cluster`` on ``workload`` (``options``: the
    Cluster's, as add_cluster takes them)."""
    mgmt.create(source_configmap(namespace, crs, {"a": manifests(configmap_obj(name, v="1"))}))
    mgmt.create(crs_obj(namespace, crs, [("ConfigMap", crs)], {crs: "1"}, mode="Reconcile"))
    add_cluster(mgmt, workload, namespace, cluster, {crs: "1"}, **options)
    wait_condition(mgmt, namespace, crs, "Ready", "True", "Applied")
    wait_for(lambda: binding_entry(mgmt, namespace, cluster, crs), TIMEOUT)


def _edit(mgmt: TestbedClient, namespace: str, crs: str, name: str) -> None:
    """The source of ``crs`` edited: ConfigMap ``name`` gets v: "2"."""
    edited = {"data": {"a": manifests(configmap_obj(name, v="2"))}}
    mgmt.patch_merge("v1", "ConfigMap", crs, edited, namespace=namespace)


PAUSED = {"metadata": {"annotations": {PAUSED_ANNOTATION: ""}}}


def test_diff_says_the_controller_holds_a_paused_cluster(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workloads,
    workload_clients,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = unique("paused")
    _installed(mgmt, workloads[2], namespace, "pz", "pz-1", name)
    mgmt.patch_merge(CLUSTER_API, "Cluster", "pz-1", PAUSED, namespace=namespace)
    wait_for(lambda: _left_alone(controller, f"{namespace}/pz-1"), TIMEOUT)
    _edit(mgmt, namespace, "pz", name)
    args = diff_args(admin_kubeconfig(control_plane, tmp_path), namespace, "pz", "pz-1")

    # Still a change (exit 1), shown; stderr says the controller holds it, and why.
    assert main(args) == 1
    out, err = capsys.readouterr()
    assert changed_lines(out) == ["-  v: '1'", "+  v: '2'"], out
    assert f"the controller holds this change: Cluster {namespace}/pz-1 is paused" in err
    assert main([*args, "-o", "json"]) == 1
    (change,) = json.loads(capsys.readouterr().out)["changes"]
    assert change["held"].startswith(f"Cluster {namespace}/pz-1 is paused")
    # spec.paused pauses a Cluster as the annotation does.
    unpaused = {"metadata": {"annotations": {PAUSED_ANNOTATION: None}}, "spec": {"paused": True}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", "pz-1", unpaused, namespace=namespace)
    assert main(args) == 1
    assert f"Cluster {namespace}/pz-1 is paused" in capsys.readouterr().err
    assert workload_clients[2].get("v1", "ConfigMap", name, "default")["data"] == {"v": "1"}


def test_diff_says_the_controller_holds_a_paused_crs(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workloads,
    workload_clients,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = unique("paused")
    _installed(mgmt, workloads[2], namespace, "pc", "pc-1", name)
    done = reconciles(controller, "crs", f"{namespace}/pc")
    mgmt.patch_merge(CRS_API, "ClusterResourceSet", "pc", PAUSED, namespace=namespace)
    # The CRS reconcile read it paused: the cluster's will too.
    wait_for(lambda: reconciles(controller, "crs", f"{namespace}/pc") > done, TIMEOUT)
    _edit(mgmt, namespace, "pc", name)

    assert main(diff_args(admin_kubeconfig(control_plane, tmp_path), namespace, "pc", "pc-1")) == 1
    out, err = capsys.readouterr()
    assert changed_lines(out) == ["-  v: '1'", "+  v: '2'"], out
    assert f"the controller holds this change: ClusterResourceSet {namespace}/pc is paused" in err
    assert workload_clients[2].get("v1", "ConfigMap", name, "default")["data"] == {"v": "1"}


def _left_alone(controller: ControllerProcess, cluster: str) -> bool:
    """The controller has seen the Cluster paused."""
    records = log_records(controller, "cluster paused: left alone")
    return any(r.get("cluster") == cluster for r in records)


def _reason(mgmt: TestbedClient, namespace: str, cluster: str, crs: str) -> str | None:
    """The reason of the outcome the binding records for ``crs`` on ``cluster``."""
    entry = binding_entry(mgmt, namespace, cluster, crs) or {}
    return (entry.get("outcome") or {}).get("reason")


def test_diff_says_the_controller_holds_updates_on_a_cluster_that_holds_them(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workloads,
    workload_clients,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = unique("held")
    _installed(mgmt, workloads[0], namespace, "hu", "hu-1", name)
    done = reconciles(controller, "cluster", f"{namespace}/hu-1")
    hold = {"metadata": {"annotations": {HOLD_UPDATES_ANNOTATION: "true"}}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", "hu-1", hold, namespace=namespace)
    wait_for(lambda: reconciles(controller, "cluster", f"{namespace}/hu-1") > done, TIMEOUT)
    _edit(mgmt, namespace, "hu", name)
    wait_for(lambda: _reason(mgmt, namespace, "hu-1", "hu") == "UpdateHeld", TIMEOUT)
    kubeconfig = admin_kubeconfig(control_plane, tmp_path)

    assert main(diff_args(kubeconfig, namespace, "hu", "hu-1")) == 1
    out, err = capsys.readouterr()
    assert changed_lines(out) == ["-  v: '1'", "+  v: '2'"], out
    assert "the controller holds this change: Cluster hu-1 holds updates" in err
    assert "(UpdateHeld)" in err
    assert workload_clients[0].get("v1", "ConfigMap", name, "default")["data"] == {"v": "1"}


def _observed(mgmt: TestbedClient, namespace: str, crs: str) -> bool:
    live = mgmt.get(CRS_API, "ClusterResourceSet", crs, namespace)
    return bool(live["status"].get("observedGeneration") == live["metadata"]["generation"])


def _phase(mgmt: TestbedClient, namespace: str, crs: str) -> str | None:
    live = mgmt.get(CRS_API, "ClusterResourceSet", crs, namespace)
    return (live["status"].get("rollout") or {}).get("phase")


def test_diff_says_the_controller_holds_a_paused_rollout(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workloads,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = unique("frozen")
    _installed(mgmt, workloads[1], namespace, "rp", "rp-1", name)
    frozen = {"spec": {"rollout": {"paused": True}}}
    mgmt.patch_merge(CRS_API, "ClusterResourceSet", "rp", frozen, namespace=namespace)
    wait_for(lambda: _observed(mgmt, namespace, "rp"), TIMEOUT)
    _edit(mgmt, namespace, "rp", name)
    wait_for(lambda: _phase(mgmt, namespace, "rp") == "Paused", TIMEOUT)
    kubeconfig = admin_kubeconfig(control_plane, tmp_path)

    assert main(diff_args(kubeconfig, namespace, "rp", "rp-1")) == 1
    err = capsys.readouterr().err
    why = f"the rollout of ClusterResourceSet {namespace}/rp is paused (spec.rollout.paused)"
    assert f"the controller holds this change: {why}" in err


def test_diff_says_the_controller_holds_an_installed_resource_while_the_cluster_upgrades(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workloads,
    workload_clients,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name, fresh = unique("upgrading"), unique("first")
    _installed(mgmt, workloads[2], namespace, "up", "up-1", name, version="v1.33.2")
    # Cluster API asks the control plane for v1.34.0: an upgrade is under way.
    done = reconciles(controller, "cluster", f"{namespace}/up-1")
    set_control_plane_version(
        mgmt, name="up-1", namespace=namespace, version="v1.33.2", desired="v1.34.0"
    )
    wait_for(lambda: reconciles(controller, "cluster", f"{namespace}/up-1") > done, TIMEOUT)
    _edit(mgmt, namespace, "up", name)
    # A resource not installed yet is no update: it goes, upgrade or not.
    mgmt.create(source_configmap(namespace, "up-new", {"a": manifests(configmap_obj(fresh))}))
    resources = [{"kind": "ConfigMap", "name": "up"}, {"kind": "ConfigMap", "name": "up-new"}]
    mgmt.patch_merge(
        CRS_API, "ClusterResourceSet", "up", {"spec": {"resources": resources}}, namespace=namespace
    )
    wait_object(workload_clients[2], "v1", "ConfigMap", fresh, "default")
    wait_for(lambda: _reason(mgmt, namespace, "up-1", "up") == "UpgradeInProgress", TIMEOUT)
    kubeconfig = admin_kubeconfig(control_plane, tmp_path)

    assert main(diff_args(kubeconfig, namespace, "up", "up-1")) == 1
    out, err = capsys.readouterr()
    assert changed_lines(out) == ["-  v: '1'", "+  v: '2'"], out
    assert (
        "the controller holds this change: Cluster API is upgrading cluster up-1: "
        "the new revision of ConfigMap/up waits until the upgrade is done (UpgradeInProgress)"
    ) in err
    assert workload_clients[2].get("v1", "ConfigMap", name, "default")["data"] == {"v": "1"}
