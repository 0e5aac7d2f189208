"""Health rules in CEL (spec.healthCheck.rules) on real servers: a custom kind the
kstatus rules know nothing of is Ready only once its rule says so (the test writes
its status, the workload servers run no controllers); a rule that does not compile
makes its CRS InvalidSpec naming the rule, while another CRS keeps working; while
a cluster waits, its outcome names the object that blocks at the latest look (Velero's
real BackupStorageLocation CRD, Ready by a rule, then a Deployment that is not), and
keeps the time the wait began."""

from __future__ import annotations

from typing import Any

from crs_controller.testbed import TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess
from tests.addons import ADDONS, needs_addons

from .support import (
    CRS_API,
    TIMEOUT,
    add_cluster,
    available,
    binding_entry,
    condition,
    configmap_obj,
    crs_obj,
    deployment,
    loose_crd,
    manifests,
    source_configmap,
    unique,
    wait_condition,
    wait_object,
)

Obj = dict[str, Any]

VELERO_CRD = ADDONS / "velero-backupstoragelocations-crd.yaml"


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


def _outcome(mgmt: TestbedClient, namespace: str, cluster: str, crs: str) -> Obj:
    entry = binding_entry(mgmt, namespace, cluster, crs) or {}
    return dict(entry.get("outcome") or {})


def _backup_crs(mgmt: TestbedClient, namespace: str, velero: str, web: str) -> None:
    """CRS "backup": Velero's CRD, a BackupStorageLocation in ``velero`` Ready by a
    rule, then the Deployment ``web``, which apply order (and so the health check)
    takes in that order."""
    location = {
        "apiVersion": "velero.io/v1",
        "kind": "BackupStorageLocation",
        "metadata": {"name": "default", "namespace": velero},
        "spec": {"provider": "aws", "objectStorage": {"bucket": "backups"}},
    }
    space = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": velero}}
    phase = "has(self.status) && has(self.status.phase) && self.status.phase"
    rule = {
        "apiVersion": "velero.io/v1",
        "kind": "BackupStorageLocation",
        "ready": f"{phase} == 'Available'",
        "failed": f"{phase} == 'Unavailable'",
    }
    data = {"a-crd.yaml": VELERO_CRD.read_text(), "b-objects.yaml": manifests(space, location)}
    data["c-web.yaml"] = manifests(deployment(web))
    mgmt.create(source_configmap(namespace, "backup", data))
    crs = crs_obj(namespace, "backup", [("ConfigMap", "backup")], {"bsl": "1"}, mode="Reconcile")
    crs["spec"]["healthCheck"] = {"wait": True, "timeout": "10m", "rules": [rule]}
    mgmt.create(crs)


def _ready_naming(mgmt: TestbedClient, namespace: str, crs: str, text: str) -> Obj:
    def check() -> Obj | None:
        ready = condition(mgmt.get(CRS_API, "ClusterResourceSet", crs, namespace), "Ready")
        return ready if ready and text in ready["message"] else None

    return wait_for(check, TIMEOUT, message=f"{crs} Ready naming {text}")


@needs_addons
def test_a_wait_names_what_blocks_now_and_keeps_when_it_began(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    wl, velero, web = workload_clients[1], unique("velero"), unique("web")
    _backup_crs(mgmt, namespace, velero, web)
    add_cluster(mgmt, workloads[1], namespace, "bsl1", {"bsl": "1"})

    first = f"BackupStorageLocation {velero}/default"
    cond = wait_condition(mgmt, namespace, "backup", "Ready", "False", "Progressing")
    assert first in cond["message"], cond["message"]
    began = _outcome(mgmt, namespace, "bsl1", "backup")
    assert first in began["message"] and began["ready"] is False, began

    # Velero marks the location Available (no status subresource in its CRD).
    live = wait_object(wl, "velero.io/v1", "BackupStorageLocation", "default", velero)
    live["status"] = {"phase": "Available"}
    wl.update(live)

    blocker = f"Deployment default/{web}"
    cond = _ready_naming(mgmt, namespace, "backup", blocker)
    assert cond["reason"] == "Progressing" and first not in cond["message"], cond
    now = _outcome(mgmt, namespace, "bsl1", "backup")
    assert blocker in now["message"] and first not in now["message"], now
    # Still the same wait: the outcome keeps the time it began.
    assert (now["reason"], now["ready"], now["time"]) == ("Applied", False, began["time"]), now

    deployed = wait_object(wl, "apps/v1", "Deployment", web, "default")
    deployed["status"] = available(deployed)
    wl.update_status(deployed)
    wait_condition(mgmt, namespace, "backup", "Ready", "True", "Applied")
