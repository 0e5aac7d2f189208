"""A binding's inventory is a claim, not a proof, on real servers: a tenant forges its
own ClusterResourceSetBinding to list objects the controller never applied (another
team's ConfigMap, a kube-system Deployment); neither pruning (deletionPolicy: Delete)
nor uninstall (Cluster deleted with uninstall.ensure) deletes them, the refusal is
reported and the legitimately applied objects are still deleted."""

from __future__ import annotations

import json
from typing import Any

from crs_controller.testbed import KubeClient, KubeError, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    CLUSTER_API,
    TIMEOUT,
    add_cluster,
    binding,
    binding_entry,
    configmap_obj,
    crs_obj,
    deployment,
    manifests,
    source_configmap,
    unique,
    wait_condition,
    wait_object,
)

HOLD = "test.crs.dev/hold"


def foreign_objects(wl: KubeClient) -> list[dict[str, str]]:
    """Objects created on the workload cluster directly, never through the controller:
    another team's ConfigMap in its own namespace and a Deployment in kube-system.
    Returned as the inventory entries a forger would write."""
    team, config, system = unique("team-b"), unique("their-config"), unique("dns")
    wl.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team}})
    wl.create(configmap_obj(config, team, owner="team-b"))
    dep = deployment(system)
    dep["metadata"]["namespace"] = "kube-system"
    wl.create(dep)
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "namespace": team, "name": config},
        {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "kube-system", "name": system},
    ]


def still_there(wl: KubeClient, refs: list[dict[str, str]]) -> list[str]:
    return [
        r["name"]
        for r in refs
        if (live := wl.get(r["apiVersion"], r["kind"], r["name"], r["namespace"])) is not None
        and not live["metadata"].get("deletionTimestamp")
    ]


def forge(mgmt: KubeClient, namespace: str, cluster: str, crs: str, refs: list[Any]) -> None:
    """Add ``refs`` to the first resource of ``crs``'s entry, as the tenant (an admin
    here) would; retried when the controller wrote the binding in between."""

    def attempt() -> bool:
        live = binding(mgmt, namespace, cluster)
        assert live is not None
        for entry in live["spec"]["bindings"]:
            if entry["clusterResourceSetName"] == crs:
                entry["resources"][0]["objects"] += refs
        try:
            mgmt.update(live)
        except KubeError as exc:
            if exc.status != 409:
                raise
            return False
        return True

    wait_for(attempt, TIMEOUT)


def inventory_names(mgmt: KubeClient, namespace: str, cluster: str, crs: str) -> list[str]:
    entry = binding_entry(mgmt, namespace, cluster, crs) or {}
    return sorted(o["name"] for r in entry.get("resources", []) for o in r.get("objects", []))


def refused_in_log(controller: ControllerProcess, name: str) -> bool:
    for line in controller.log_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "deletion refused" and name in str(record.get("object")):
            return True
    return False


def refusal_events(mgmt: KubeClient, namespace: str) -> str:
    events = mgmt.list("v1", "Event", namespace)
    return "\n".join(e["message"] for e in events if e["reason"] == "DeletionRefused")


def test_pruning_refuses_forged_inventory_entries(
    controller: ControllerProcess, mgmt: KubeClient, workload_clients, workloads, namespace: str
) -> None:
    wl = workload_clients[0]
    foreign = foreign_objects(wl)
    keep, drop = unique("keep"), unique("drop")
    doc = manifests(configmap_obj(keep), configmap_obj(drop))
    mgmt.create(source_configmap(namespace, "addon", {"a": doc}))
    crs = crs_obj(namespace, "own", [("ConfigMap", "addon")], {"own": "1"}, mode="Reconcile")
    crs["spec"]["deletionPolicy"] = "Delete"
    mgmt.create(crs)
    add_cluster(mgmt, workloads[0], namespace, "own1", {"own": "1"})
    wait_condition(mgmt, namespace, "own", "Ready", "True", "Applied")
    wait_for(lambda: inventory_names(mgmt, namespace, "own1", "own") == sorted([keep, drop]))

    forge(mgmt, namespace, "own1", "own", foreign)
    # The next pass: an object leaves the source, so the resource's old inventory
    # (forged entries included) is what it prunes from.
    source = mgmt.get("v1", "ConfigMap", "addon", namespace)
    source["data"] = {"a": manifests(configmap_obj(keep))}
    mgmt.update(source)

    # The positive sign: the binding is written after the pruning finished.
    wait_for(lambda: inventory_names(mgmt, namespace, "own1", "own") == [keep], TIMEOUT)
    assert wl.get("v1", "ConfigMap", drop, "default") is None
    assert wl.get("v1", "ConfigMap", keep, "default") is not None
    assert still_there(wl, foreign) == [r["name"] for r in foreign]
    for ref in foreign:
        wait_for(lambda ref=ref: refused_in_log(controller, ref["name"]), TIMEOUT)


def test_uninstall_refuses_forged_inventory_entries(
    controller: ControllerProcess, mgmt: KubeClient, workload_clients, workloads, namespace: str
) -> None:
    wl = workload_clients[2]
    foreign = foreign_objects(wl)
    addon = unique("addon")
    mgmt.create(source_configmap(namespace, "addon", {"a": manifests(configmap_obj(addon))}))
    crs = crs_obj(namespace, "un", [("ConfigMap", "addon")], {"unf": "1"}, mode="Reconcile")
    crs["spec"]["uninstall"] = {"ensure": True}
    mgmt.create(crs)
    add_cluster(mgmt, workloads[2], namespace, "unf1", {"unf": "1"})
    hold = {"metadata": {"finalizers": [HOLD]}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", "unf1", hold, namespace=namespace)
    wait_object(wl, "v1", "ConfigMap", addon, "default")
    wait_for(lambda: inventory_names(mgmt, namespace, "unf1", "un") == [addon], TIMEOUT)

    # Paused, the controller leaves the Cluster and its binding alone: the forged
    # entry is what the cleanup finds once the Cluster is being deleted.
    paused = {"spec": {"paused": True}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", "unf1", paused, namespace=namespace)
    forge(mgmt, namespace, "unf1", "un", foreign)
    mgmt.delete(CLUSTER_API, "Cluster", "unf1", namespace)
    resume = {"spec": {"paused": False}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", "unf1", resume, namespace=namespace)

    # The positive sign: the cleanup removed what the CRS applied, and its entry.
    wait_for(lambda: wl.get("v1", "ConfigMap", addon, "default") is None, TIMEOUT)
    wait_for(lambda: binding_entry(mgmt, namespace, "unf1", "un") is None, TIMEOUT)
    assert still_there(wl, foreign) == [r["name"] for r in foreign]
    events = wait_for(lambda: refusal_events(mgmt, namespace), TIMEOUT)
    for ref in foreign:
        assert f"{ref['namespace']}/{ref['name']}" in events

    release = {"metadata": {"finalizers": None}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", "unf1", release, namespace=namespace)
    wait_for(lambda: mgmt.get(CLUSTER_API, "Cluster", "unf1", namespace) is None, TIMEOUT)
