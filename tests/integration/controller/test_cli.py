"""The operators' commands against the real servers: `render` gives the hashes the
controller records in the bindings, in the same object order; `status` lists every
matching cluster with its revision and outcome from the bindings."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from crs_controller.app.cli import main
from crs_controller.testbed import ControlPlane, KubeClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    CRS_API,
    TIMEOUT,
    add_cluster,
    binding_entry,
    configmap_obj,
    crs_obj,
    manifests,
    source_configmap,
    unique,
    wait_condition,
)

SAMPLES = Path(__file__).resolve().parents[3] / "config" / "samples"


def sample_documents(namespace: str) -> list[dict]:
    docs = []
    for path in sorted(SAMPLES.glob("*.yaml")):
        for loaded in yaml.safe_load_all(path.read_text()):
            if loaded and loaded.get("kind") != "Kustomization":
                doc = copy.deepcopy(loaded)
                doc["metadata"]["namespace"] = namespace
                docs.append(doc)
    return docs


def test_render_and_status_agree_with_the_controller(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: KubeClient,
    workloads,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = sample_documents(namespace)
    for doc in docs:
        mgmt.create(doc)
    for index, name in enumerate(["cli-1", "cli-2"]):
        add_cluster(mgmt, workloads[index], namespace, name, {"crs-demo": "true"})
    wait_condition(mgmt, namespace, "demo", "Ready", "True", "Applied")
    wait_for(lambda: binding_entry(mgmt, namespace, "cli-2", "demo"), TIMEOUT)

    manifests = tmp_path / "manifests.yaml"
    manifests.write_text(yaml.safe_dump_all(docs))
    assert main(["render", "-f", str(manifests), "-o", "json"]) == 0
    rendered = json.loads(capsys.readouterr().out)["clusterResourceSets"][0]["resources"]
    for cluster in ("cli-1", "cli-2"):
        recorded = binding_entry(mgmt, namespace, cluster, "demo")["resources"]
        assert [(r["kind"], r["name"], r["hash"]) for r in recorded] == [
            (r["kind"], r["name"], r["hash"]) for r in rendered
        ]
        names = [o["name"] for r in recorded for o in r["objects"]]
        assert names == [o["metadata"]["name"] for r in rendered for o in r["objects"]]

    kubeconfig = control_plane.management.write_kubeconfig(
        tmp_path / "admin.kubeconfig", user="cli-admin", groups=("system:masters",)
    )
    args = ["status", "demo", "-n", namespace, "--kubeconfig", str(kubeconfig)]
    assert main([*args, "-o", "json"]) == 0
    (crs,) = json.loads(capsys.readouterr().out)["clusterResourceSets"]
    revision = mgmt.get(CRS_API, "ClusterResourceSet", "demo", namespace)["status"]["revision"]
    assert crs["revision"] == revision and crs["ready"] == "True"
    assert [c["cluster"] for c in crs["clusters"]] == ["cli-1", "cli-2"]
    for row in crs["clusters"]:
        assert (row["revision"], row["applied"], row["reason"]) == (revision, True, "Applied")
    assert main([*args, "-o", "wide"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["CRS", "CLUSTER", "REVISION"]
    assert len(table) == 3 and all("Applied" in line for line in table[1:])
    assert main(["status", "absent", "-n", namespace, "--kubeconfig", str(kubeconfig)]) == 2


def test_diff_shows_what_an_apply_would_change_and_exits_1(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: KubeClient,
    workloads,
    workload_clients,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = unique("diffed")
    mgmt.create(source_configmap(namespace, "diffed", {"a": manifests(configmap_obj(name, v="1"))}))
    # ApplyOnce: the controller leaves later edits alone, so the diff has something to show.
    mgmt.create(crs_obj(namespace, "diffed", [("ConfigMap", "diffed")], {"diff": "1"}))
    add_cluster(mgmt, workloads[1], namespace, "d1", {"diff": "1"})
    wait_condition(mgmt, namespace, "diffed", "Ready", "True", "Applied")
    kubeconfig = control_plane.management.write_kubeconfig(
        tmp_path / "admin.kubeconfig", user="cli-admin", groups=("system:masters",)
    )
    args = ["diff", "diffed", "--cluster", "d1", "-n", namespace, "--kubeconfig", str(kubeconfig)]
    assert main(args) == 0, capsys.readouterr()
    assert capsys.readouterr().out == ""

    source = mgmt.get("v1", "ConfigMap", "diffed", namespace)
    source["data"] = {"a": manifests(configmap_obj(name, v="2"))}
    mgmt.update(source)
    assert main(args) == 1
    out = capsys.readouterr().out
    changed = [
        line for line in out.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")
    ]
    assert changed == ["-  v: '1'", "+  v: '2'"], out
    assert f"live/v1.ConfigMap.default.{name}" in out
    assert main([*args, "-o", "json"]) == 1
    (change,) = json.loads(capsys.readouterr().out)["changes"]
    assert change["object"] == f"v1.ConfigMap.default.{name}"
    # Nothing was stored: the dry run left the object as it was.
    assert workload_clients[1].get("v1", "ConfigMap", name, "default")["data"] == {"v": "1"}

    crs = mgmt.get(CRS_API, "ClusterResourceSet", "diffed", namespace)
    crs["spec"]["mode"] = "Reconcile"
    mgmt.update(crs)
    wait_for(
        lambda: workload_clients[1].get("v1", "ConfigMap", name, "default")["data"] == {"v": "2"},
        TIMEOUT,
    )
    assert main(args) == 0
    assert capsys.readouterr().out == ""
    assert main([*args[:3], "absent", *args[4:]]) == 2
