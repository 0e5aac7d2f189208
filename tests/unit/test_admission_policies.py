"""The shipped ValidatingAdmissionPolicies cannot hold the cluster's ConfigMaps and
Secrets hostage to their parameter.

The API server looks a binding's parameter up before it evaluates the policy's
matchConditions; with `parameterNotFoundAction: Deny` every request the policy's
matchConstraints (and the binding's matchResources) match is refused while the
parameter is missing. Covers: no policy bound with Deny matches ConfigMaps or Secrets
without an objectSelector (the snapshot label, checked before the parameter lookup);
the snapshot policy selects the snapshot label; the policy that only identifies the
controller lets its requests through when the parameter is missing; every policy
binding names a policy that exists; the namespaced policy names the controller's
Leases (the leader Lease, the shard members' prefix and label) as the code does, for
every write and delete, and leaves the node heartbeats' namespace alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from crs_controller.core.membership.shard import LEASE_PREFIX
from crs_controller.core.rollout.snapshots import SNAPSHOT_LABEL
from crs_controller.engine.runtime.membership import LEADER_LEASE, MEMBER_LABEL

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config"
CORE_RESOURCES = {"configmaps", "secrets", "*"}

Obj = dict[str, Any]


def documents(kind: str) -> dict[str, Obj]:
    found = {}
    for path in sorted(CONFIG.rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(document, dict) and document.get("kind") == kind:
                found[document["metadata"]["name"]] = document
    return found


def touches_configmaps_or_secrets(match: Obj) -> bool:
    return any(
        set(rule.get("apiGroups", [])) & {"", "*"}
        and {r.split("/")[0] for r in rule.get("resources", [])} & CORE_RESOURCES
        for rule in match.get("resourceRules", [])
    )


def selected(*matches: Obj) -> bool:
    return any(
        (m.get("objectSelector") or {}).get("matchExpressions")
        or (m.get("objectSelector") or {}).get("matchLabels")
        for m in matches
    )


def test_the_admission_documents_are_found() -> None:
    policies = documents("ValidatingAdmissionPolicy")
    assert {
        "crs-controller-binding-writers",
        "crs-controller-snapshot-writers",
        "crs-controller-own-writes",
    } <= set(policies)
    bindings = documents("ValidatingAdmissionPolicyBinding")
    assert [b["spec"]["policyName"] for b in bindings.values()
            if b["spec"]["policyName"] not in policies] == []  # fmt: skip


def test_no_policy_denying_without_its_parameter_matches_every_configmap_or_secret() -> None:
    policies = documents("ValidatingAdmissionPolicy")
    unselected = []
    for name, binding in documents("ValidatingAdmissionPolicyBinding").items():
        spec = binding["spec"]
        if (spec.get("paramRef") or {}).get("parameterNotFoundAction") != "Deny":
            continue
        constraints = policies[spec["policyName"]]["spec"]["matchConstraints"]
        resources = spec.get("matchResources") or {}
        if touches_configmaps_or_secrets(constraints) and not selected(constraints, resources):
            unselected.append(name)
    assert unselected == []


def test_the_snapshot_policy_selects_the_snapshot_label() -> None:
    policy = documents("ValidatingAdmissionPolicy")["crs-controller-snapshot-writers"]
    assert policy["spec"]["matchConstraints"]["objectSelector"] == {
        "matchExpressions": [{"key": SNAPSHOT_LABEL, "operator": "Exists"}]
    }


def test_the_controllers_own_writes_pass_without_the_parameter() -> None:
    binding = documents("ValidatingAdmissionPolicyBinding")["crs-controller-own-writes"]
    assert binding["spec"]["paramRef"]["parameterNotFoundAction"] == "Allow"


def test_the_namespaced_policy_names_the_leases_as_the_controller_does() -> None:
    policies = documents("ValidatingAdmissionPolicy")
    spec = policies["crs-controller-namespaced-binding-writers"]["spec"]
    (leases,) = [
        rule
        for rule in spec["matchConstraints"]["resourceRules"]
        if rule["resources"] == ["leases"]
    ]
    assert leases["apiGroups"] == ["coordination.k8s.io"]
    assert set(leases["operations"]) == {"CREATE", "UPDATE", "DELETE"}
    conditions = " ".join(c["expression"] for c in spec["matchConditions"])
    assert f"request.name == '{LEADER_LEASE}'" in conditions
    assert f"request.name.startsWith('{LEASE_PREFIX}')" in conditions
    assert f"generateName.startsWith('{LEASE_PREFIX}')" in conditions
    for side in ("object", "oldObject"):
        assert f"'{MEMBER_LABEL}' in {side}.metadata.labels" in conditions
    assert spec["matchConstraints"]["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-node-lease"]}
    ]
