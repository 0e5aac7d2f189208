"""The namespace of the commands that take ``-n`` (``status``, ``approve``, ``diff``)
as kubectl picks it, on the real management server: without ``-n``, the namespace of
the kubeconfig's current context (or the ``--context`` one), else ``default``; ``-n``
always wins. No controller runs: the CRS is paused, its status written here."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from crs_controller.app.cli import main
from crs_controller.testbed import ControlPlane, TestbedClient

from .support import (
    add_cluster,
    admin_kubeconfig,
    configmap_obj,
    manifests,
    source_configmap,
    unique,
)
from .test_cli_approve import REVISION, annotation, awaiting_approval

PLAIN, FLEET = "plain", "fleet"


def with_contexts(path: str, namespace: str, current: str) -> str:
    """The admin kubeconfig with two contexts on the same cluster and user: ``fleet``
    names ``namespace``, ``plain`` names none; ``current`` is the current one."""
    config = yaml.safe_load(Path(path).read_text())
    cluster, user = config["clusters"][0]["name"], config["users"][0]["name"]
    config["contexts"] = [
        {"name": PLAIN, "context": {"cluster": cluster, "user": user}},
        {"name": FLEET, "context": {"cluster": cluster, "user": user, "namespace": namespace}},
    ]
    config["current-context"] = current
    Path(path).write_text(yaml.safe_dump(config))
    return path


def test_without_n_every_command_works_in_the_context_namespace(
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workloads,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = awaiting_approval(mgmt, namespace)
    kubeconfig = with_contexts(admin_kubeconfig(control_plane, tmp_path), namespace, FLEET)
    access = ["--kubeconfig", kubeconfig]

    # As `kubectl get crs` reads it.
    assert main(["status", name, *access, "-o", "name"]) == 0
    assert capsys.readouterr() == (f"clusterresourceset.addons.crs.dev/{name}\n", "")
    assert main(["approve", name, *access]) == 0
    approved = f"approved step 2 of revision {REVISION} for {namespace}/{name}\n"
    assert capsys.readouterr() == (approved, "")
    assert annotation(mgmt, namespace, name) == f"{REVISION}/2"
    # diff finds the CRS, the Cluster and its kubeconfig Secret there too: the
    # ConfigMap would be created on the workload cluster (exit 1).
    made = unique("ns-diff")
    mgmt.create(source_configmap(namespace, "addon", {"a": manifests(configmap_obj(made))}))
    add_cluster(mgmt, workloads[0], namespace, "in-context", {"cni": "calico"})
    assert main(["diff", name, "--cluster", "in-context", *access]) == 1
    assert f"+  name: {made}" in capsys.readouterr().out


def test_n_wins_and_context_picks_the_context_with_its_namespace(
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = awaiting_approval(mgmt, namespace)
    kubeconfig = with_contexts(admin_kubeconfig(control_plane, tmp_path), namespace, FLEET)

    assert main(["status", name, "-n", "default", "--kubeconfig", kubeconfig]) == 2
    missing = f"ClusterResourceSet default/{name} not found\n"
    assert capsys.readouterr().err == f"crs-controller status: {missing}"

    plain = with_contexts(kubeconfig, namespace, PLAIN)
    assert main(["approve", name, "--kubeconfig", plain, "--context", FLEET]) == 0
    assert capsys.readouterr().out.startswith("approved step 2 ")
    # A context that names no namespace: default.
    assert main(["approve", name, "--kubeconfig", plain]) == 2
    assert capsys.readouterr().err == f"crs-controller approve: {missing}"
    assert main(["approve", name, "--kubeconfig", plain, "-n", namespace]) == 0
    assert capsys.readouterr().out.startswith("already approved: step 2 ")
