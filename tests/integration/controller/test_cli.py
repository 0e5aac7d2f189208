"""The operators' commands against the real servers: `render` gives the hashes the
controller records in the bindings, in the same object order, and the revision its
status shows; `render -o manifests` piped into kubectl is what the controller
applied; `status` lists every matching cluster with its revision and outcome from
the bindings; `diff` shows only what the controller would change."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from crs_controller.app.cli import main
from crs_controller.testbed import ControlPlane, Server, TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    CRS_API,
    TIMEOUT,
    add_cluster,
    admin_kubeconfig,
    binding_entry,
    configmap_obj,
    crs_obj,
    manifests,
    source_configmap,
    unique,
    wait_condition,
)

SAMPLES = Path(__file__).resolve().parents[3] / "config" / "samples"
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(
    KUBECTL is None, reason="kubectl is not on PATH: the pipe into kubectl cannot be tried"
)


def kubectl(kubeconfig: Path, stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    command = [KUBECTL, "--kubeconfig", str(kubeconfig), *args]
    return subprocess.run(
        command, input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


def sample_documents(namespace: str) -> list[dict]:
    docs = []
    for path in sorted(SAMPLES.glob("*.yaml")):
        for loaded in yaml.safe_load_all(path.read_text()):
            if loaded and loaded.get("kind") != "Kustomization":
                doc = copy.deepcopy(loaded)
                doc["metadata"]["namespace"] = namespace
                docs.append(doc)
    return docs


def samples_applied(mgmt: TestbedClient, namespace: str, clusters: dict[str, Server]) -> list[dict]:
    """The samples created in ``namespace`` and applied by the controller to a Cluster
    of each name on its workload server; returns the documents."""
    docs = sample_documents(namespace)
    for doc in docs:
        mgmt.create(doc)
    for name, workload in clusters.items():
        add_cluster(mgmt, workload, namespace, name, {"crs-demo": "true"})
    wait_condition(mgmt, namespace, "demo", "Ready", "True", "Applied")
    for name in clusters:
        wait_for(lambda name=name: binding_entry(mgmt, namespace, name, "demo"), TIMEOUT)
    return docs


def test_render_and_status_agree_with_the_controller(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workloads,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = samples_applied(mgmt, namespace, {"cli-1": workloads[0], "cli-2": workloads[1]})

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

    kubeconfig = admin_kubeconfig(control_plane, tmp_path)
    args = ["status", "demo", "-n", namespace, "--kubeconfig", kubeconfig]
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
    assert main(["status", "absent", "-n", namespace, "--kubeconfig", kubeconfig]) == 2


def changed_lines(out: str) -> list[str]:
    return [
        line for line in out.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")
    ]


def test_diff_shows_what_the_controller_would_change_and_exits_1(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workloads,
    workload_clients,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = unique("diffed")
    mgmt.create(source_configmap(namespace, "diffed", {"a": manifests(configmap_obj(name, v="1"))}))
    mgmt.create(crs_obj(namespace, "diffed", [("ConfigMap", "diffed")], {"diff": "1"}))
    add_cluster(mgmt, workloads[1], namespace, "d1", {"diff": "1"})
    wait_condition(mgmt, namespace, "diffed", "Ready", "True", "Applied")
    kubeconfig = admin_kubeconfig(control_plane, tmp_path)
    args = ["diff", "diffed", "--cluster", "d1", "-n", namespace, "--kubeconfig", kubeconfig]
    assert main(args) == 0, capsys.readouterr()
    assert capsys.readouterr().out == ""

    # ApplyOnce never applies an applied resource again: its edit is no change.
    source = mgmt.get("v1", "ConfigMap", "diffed", namespace)
    source["data"] = {"a": manifests(configmap_obj(name, v="2"))}
    mgmt.update(source)
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert f"v1.ConfigMap.default.{name} differs from its manifest, not applied" in err
    assert "ApplyOnce applied ConfigMap diffed here already" in err
    assert main([*args, "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["changes"] == []
    assert [o["object"] for o in report["notApplied"]] == [f"v1.ConfigMap.default.{name}"]

    # Reconcile would apply it (paused meanwhile, so that the diff has something to show).
    crs = mgmt.get(CRS_API, "ClusterResourceSet", "diffed", namespace)
    crs["metadata"].setdefault("annotations", {})["cluster.x-k8s.io/paused"] = ""
    crs["spec"]["mode"] = "Reconcile"
    mgmt.update(crs)
    assert main(args) == 1
    out = capsys.readouterr().out
    assert changed_lines(out) == ["-  v: '1'", "+  v: '2'"], out
    assert f"live/v1.ConfigMap.default.{name}" in out
    assert main([*args, "-o", "json"]) == 1
    (change,) = json.loads(capsys.readouterr().out)["changes"]
    assert change["object"] == f"v1.ConfigMap.default.{name}"
    # Nothing was stored: the dry run left the object as it was.
    assert workload_clients[1].get("v1", "ConfigMap", name, "default")["data"] == {"v": "1"}

    # The controller wrote the paused CRS's status meanwhile: no resourceVersion here.
    unpause = {"metadata": {"annotations": {"cluster.x-k8s.io/paused": None}}}
    mgmt.patch_merge(CRS_API, "ClusterResourceSet", "diffed", unpause, namespace=namespace)
    wait_for(
        lambda: workload_clients[1].get("v1", "ConfigMap", name, "default")["data"] == {"v": "2"},
        TIMEOUT,
    )
    assert main(args) == 0
    assert capsys.readouterr().out == ""

    # Changed on the cluster since (drift): without driftDetection nor reapplyInterval
    # the controller leaves it so until the sources change, and diff says so.
    tampered = {"data": {"v": "by hand"}}
    workload_clients[1].patch_merge("v1", "ConfigMap", name, tampered, namespace="default")
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert f"v1.ConfigMap.default.{name} differs from its manifest, not applied" in err
    assert "reapplies it only when its sources change (driftDetection: None" in err
    assert main([*args[:3], "absent", *args[4:]]) == 2


def test_diff_of_a_cluster_the_crs_does_not_select_is_no_change(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workloads,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = unique("unselected")
    mgmt.create(source_configmap(namespace, "s", {"a": manifests(configmap_obj(name))}))
    mgmt.create(crs_obj(namespace, "picky", [("ConfigMap", "s")], {"tier": "gold"}))
    add_cluster(mgmt, workloads[1], namespace, "bronze", {"tier": "bronze"})
    kubeconfig = admin_kubeconfig(control_plane, tmp_path)
    args = [
        "diff",
        "picky",
        "--cluster",
        "bronze",
        "-n",
        namespace,
        "--kubeconfig",
        kubeconfig,
    ]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert f"ClusterResourceSet {namespace}/picky does not select Cluster bronze" in err
    assert err.count("\n") == 1


def test_diff_under_apply_once_shows_only_what_would_be_created(
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workloads,
    workload_clients,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    there, missing = unique("there"), unique("missing")
    workload_clients[2].create(configmap_obj(there, v="theirs"))
    content = manifests(configmap_obj(there, v="ours"), configmap_obj(missing, v="ours"))
    mgmt.create(source_configmap(namespace, "once", {"a": content}))
    mgmt.create(crs_obj(namespace, "once", [("ConfigMap", "once")], {"once": "1"}))
    # Not initialized: no controller applies anything there yet, whichever runs.
    add_cluster(mgmt, workloads[2], namespace, "fresh", {"once": "1"}, initialized=False)
    kubeconfig = admin_kubeconfig(control_plane, tmp_path)
    args = ["diff", "once", "--cluster", "fresh", "-n", namespace, "--kubeconfig", kubeconfig]
    assert main(args) == 1
    out, err = capsys.readouterr()
    assert f"--- live/v1.ConfigMap.default.{missing}" in out and there not in out
    assert f"v1.ConfigMap.default.{there} differs from its manifest, not applied" in err
    assert "ApplyOnce never changes an existing object" in err
    assert main([*args, "-o", "yaml"]) == 1
    report = yaml.safe_load(capsys.readouterr().out)
    assert [c["object"] for c in report["changes"]] == [f"v1.ConfigMap.default.{missing}"]
    assert [o["object"] for o in report["notApplied"]] == [f"v1.ConfigMap.default.{there}"]
    assert workload_clients[2].get("v1", "ConfigMap", missing, "default") is None


@needs_kubectl
def test_render_manifests_is_what_the_controller_applied(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workloads,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = samples_applied(mgmt, namespace, {"piped": workloads[2]})
    given = tmp_path / "manifests.yaml"
    given.write_text(yaml.safe_dump_all(docs))
    assert main(["render", "-f", str(given), "-o", "manifests"]) == 0
    stream = capsys.readouterr().out
    objects = list(yaml.safe_load_all(stream))
    assert len(objects) == 4 and stream.count("# Source: ClusterResourceSet ") == 4
    status = mgmt.get(CRS_API, "ClusterResourceSet", "demo", namespace)["status"]
    assert f"revision {status['revision']}\n" in stream

    kubeconfig = control_plane.workloads[2].write_kubeconfig(tmp_path / "workload.kubeconfig")
    applied = kubectl(kubeconfig, stream, "apply", "--dry-run=server", "-f", "-")
    assert applied.returncode == 0, applied.stderr
    lines = applied.stdout.splitlines()
    assert len(lines) == 4 and all(line.endswith("(server dry run)") for line in lines), lines
    # As the controller's own field manager: nothing differs from what it applied.
    same = kubectl(
        kubeconfig, stream, "diff", "--server-side", "--field-manager=crs-controller", "-f", "-"
    )
    assert (same.returncode, same.stdout) == (0, ""), same.stdout + same.stderr


@needs_kubectl
def test_render_manifests_pipes_into_a_server_side_dry_run(
    control_plane: ControlPlane,
    workload_clients,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = unique("piped")
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        },
    ]
    # No namespace: the controller and kubectl both put it in "default". Quoted, the
    # placeholder's value stays a string (plain, it would be read as YAML: a number).
    configmap = (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata:\n  mtu: '${{MTU}}'\n"
    )
    source = source_configmap(
        "fleet", "addon", {"addon.yaml": manifests(*objects), "cm.yaml": configmap}
    )
    crs = crs_obj("fleet", "addon", [("ConfigMap", "addon")], {"cni": "x"})
    crs["spec"]["resources"][0]["substitute"] = True
    cluster = {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Cluster",
        "metadata": {"name": "c", "namespace": "fleet", "labels": {"cni": "x"}},
    }
    (tmp_path / "in.yaml").write_text(manifests(crs, source))
    (tmp_path / "cluster.yaml").write_text(manifests(cluster))
    args = ["render", "-f", str(tmp_path / "in.yaml"), "--cluster", str(tmp_path / "cluster.yaml")]
    assert main([*args, "--set", "MTU=1400", "-o", "manifests"]) == 0
    stream = capsys.readouterr().out
    kubeconfig = control_plane.workloads[0].write_kubeconfig(tmp_path / "workload.kubeconfig")
    result = kubectl(kubeconfig, stream, "apply", "--dry-run=server", "-o", "json", "-f", "-")
    assert result.returncode == 0, result.stderr
    answered = json.loads(result.stdout)["items"]
    assert [(o["kind"], o["metadata"].get("namespace")) for o in answered] == [
        ("Namespace", None),
        ("ClusterRole", None),
        ("ConfigMap", "default"),
    ]
    assert answered[2]["data"] == {"mtu": "1400"}
    assert all(
        o["metadata"]["labels"]["addons.crs.dev/applied-by"] == "crs-controller" for o in answered
    )
    # A dry run: nothing was stored.
    assert workload_clients[0].get("v1", "ConfigMap", name, "default") is None
    assert workload_clients[0].get("v1", "Namespace", name) is None
