"""Health rules in CEL (spec.healthCheck.rules) on real servers: a custom kind the
kstatus rules know nothing of is Ready only once its rule says so (the test writes
its status, the workload servers run no controllers); a rule that does not compile
makes its CRS InvalidSpec naming the rule, while another CRS keeps working."""

from __future__ import annotations

from typing import Any

from crs_controller.testbed import TestbedClient
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    add_cluster,
    configmap_obj,
    crs_obj,
    loose_crd,
    manifests,
    source_configmap,
    unique,
    wait_condition,
    wait_object,
)

Obj = dict[str, Any]


def _rule_crs(
    mgmt: TestbedClient, namespace: str, name: str, doc: str, rules: list[Obj], label: str
) -> None:
    mgmt.create(source_configmap(namespace, name, {"a": doc}))
    crs = crs_obj(namespace, name, [("ConfigMap", name)], {"rules": label}, mode="Reconcile")
    crs["spec"]["healthCheck"] = {"wait": True, "timeout": "5m", "rules": rules}
    mgmt.create(crs)


def test_a_custom_kind_is_ready_when_its_rule_says_so(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    group = f"{unique('g')}.example.com"
    wl = workload_clients[0]
    wl.create(loose_crd(group, "Widget", status=True))
    wait_object(
        wl,
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        f"widgets.{group}",
        predicate=lambda crd: any(
            c["type"] == "Established" and c["status"] == "True"
            # Just created, a CRD's status may say "conditions: null".
            for c in (crd.get("status") or {}).get("conditions") or []
        ),
    )
    name = unique("widget")
    widget = {
        "apiVersion": f"{group}/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"size": 3},
    }
    rule = {
        "apiVersion": f"{group}/v1",
        "kind": "Widget",
        "ready": "has(self.status) && self.status.phase == 'Ready'",
        "failed": "has(self.status) && self.status.phase == 'Broken'",
    }
    _rule_crs(mgmt, namespace, "widgets", manifests(widget), [rule], "widgets")
    add_cluster(mgmt, workloads[0], namespace, "r1", {"rules": "widgets"})
    live = wait_object(wl, f"{group}/v1", "Widget", name, "default")
    # kstatus alone would call it Ready: it exists and has no conditions.
    cond = wait_condition(mgmt, namespace, "widgets", "Ready", "False", "Progressing")
    assert f"Widget default/{name}" in cond["message"], cond["message"]
    assert "spec.healthCheck.rules[0].ready is false" in cond["message"], cond["message"]

    live["status"] = {"phase": "Starting"}
    live = wl.update_status(live)
    wait_condition(mgmt, namespace, "widgets", "Ready", "False", "Progressing")
    live["status"] = {"phase": "Ready"}
    wl.update_status(live)
    wait_condition(mgmt, namespace, "widgets", "Ready", "True", "Applied")


def test_a_rule_that_does_not_compile_is_invalid_spec_and_others_go_on(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    good, bad = unique("good"), unique("bad")
    broken = {"apiVersion": "v1", "kind": "ConfigMap", "ready": "self.data.size() >"}
    fine = {"apiVersion": "v1", "kind": "ConfigMap", "ready": "has(self.data)"}
    _rule_crs(mgmt, namespace, "bad", manifests(configmap_obj(bad, a="1")), [fine, broken], "r")
    _rule_crs(mgmt, namespace, "good", manifests(configmap_obj(good, a="1")), [fine], "r")
    add_cluster(mgmt, workloads[1], namespace, "r2", {"rules": "r"})

    cond = wait_condition(mgmt, namespace, "bad", "Ready", "False", "InvalidSpec")
    assert "spec.healthCheck.rules[1].ready: does not compile" in cond["message"], cond
    assert "self.data.size()" not in cond["message"]
    wait_condition(mgmt, namespace, "good", "Ready", "True", "Applied")
    wait_object(workload_clients[1], "v1", "ConfigMap", good, "default")
    assert workload_clients[1].get("v1", "ConfigMap", bad, "default") is None
