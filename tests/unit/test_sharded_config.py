"""config/sharded, the shard-set overlay: its JSON patches still hit what they mean
to (the manager's --leader-elect argument becomes --shard, three replicas), it keeps
a PodDisruptionBudget, and the Lease Role in config/rbac grants what a member needs,
on Leases and its contributions' ConfigMaps only, in the controller's namespace; the
namespaced install's one Role grants the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CONFIG = Path(__file__).resolve().parents[2] / "config"
CONTRIBUTION_VERBS = ["get", "list", "watch", "create", "update", "patch", "delete"]


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def patch_ops() -> dict[str, Any]:
    kustomization = documents(CONFIG / "sharded" / "kustomization.yaml")[0]
    (patch,) = kustomization["patches"]
    assert patch["target"] == {"kind": "Deployment", "name": "crs-controller"}
    return {op["path"]: op for op in yaml.safe_load(patch["patch"])}


def test_the_overlay_turns_leader_election_into_a_shard_set_of_three() -> None:
    (manager,) = documents(CONFIG / "manager" / "manager.yaml")
    args = manager["spec"]["template"]["spec"]["containers"][0]["args"]
    ops = patch_ops()
    # The patch replaces by position: the base must still have --leader-elect there.
    assert args[1] == "--leader-elect"
    assert ops["/spec/template/spec/containers/0/args/1"]["value"] == "--shard"
    assert ops["/spec/replicas"]["value"] == 3
    env = {e["name"] for e in manager["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert {"POD_NAME", "POD_NAMESPACE"} <= env  # the identity and the Lease namespace


def test_the_overlay_brings_a_budget_and_the_base_the_lease_rights() -> None:
    kustomization = documents(CONFIG / "sharded" / "kustomization.yaml")[0]
    assert set(kustomization["resources"]) == {"../default", "pdb.yaml"}
    (pdb,) = documents(CONFIG / "sharded" / "pdb.yaml")
    assert (pdb["kind"], pdb["spec"]["maxUnavailable"]) == ("PodDisruptionBudget", 1)
    role, binding = documents(CONFIG / "rbac" / "leader_election_role.yaml")
    assert (role["kind"], role["metadata"]["namespace"]) == ("Role", "crs-system")
    leases, configmaps = role["rules"]
    assert (leases["apiGroups"], leases["resources"]) == (["coordination.k8s.io"], ["leases"])
    # A member watches the others' Leases, applies its own, deletes departed ones.
    assert {"list", "watch", "patch", "delete"} <= set(leases["verbs"])
    # Its contributions: written by it, watched by all, deleted by it or the leader.
    assert (configmaps["apiGroups"], configmaps["resources"]) == ([""], ["configmaps"])
    assert set(CONTRIBUTION_VERBS) <= set(configmaps["verbs"])
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_the_namespaced_role_lets_a_member_write_its_contributions() -> None:
    role, _ = documents(CONFIG / "namespaced" / "role.yaml")
    verbs = {v for r in role["rules"] if "configmaps" in r["resources"] for v in r["verbs"]}
    assert set(CONTRIBUTION_VERBS) <= verbs
