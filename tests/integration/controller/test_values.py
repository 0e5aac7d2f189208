"""Per-cluster values on real servers: one CRS gives two clusters their own pod CIDRs;
a label edit reapplies that cluster only; a hostile annotation lands as one string
and adds nothing; an unresolved variable fails that cluster alone until the label
appears; a resource without substitute keeps ${HOME} as it is; a value that makes an
object's name a number fails that resource alone, before any of its objects goes
out. Each cluster reaches
its workload server as its own user, so the audit logs tell them apart."""

from __future__ import annotations

import time
from typing import Any

import yaml

from crs_controller.testbed import ControlPlane, TestbedClient
from crs_controller.testbed.clusters import register_cluster, set_cluster_initialized

from .support import (
    CLUSTER_API,
    audit_caught_up,
    crs_obj,
    manifests,
    requests_by,
    source_configmap,
    unique,
    wait_condition,
    wait_object,
)

Obj = dict[str, Any]


def add(
    mgmt: TestbedClient,
    plane: ControlPlane,
    namespace: str,
    index: int,
    name: str,
    labels: dict[str, str],
    spec: Obj | None = None,
    annotations: dict[str, str] | None = None,
) -> None:
    register_cluster(
        mgmt,
        plane.workloads[index % len(plane.workloads)],
        name=name,
        namespace=namespace,
        labels=labels,
        initialized=False,
        kubeconfig_user=f"values-{name}",
        kubeconfig_groups=("system:masters",),
    )
    patch: Obj = {"spec": spec or {}, "metadata": {"annotations": annotations or {}}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", name, patch, namespace=namespace)
    set_cluster_initialized(mgmt, name=name, namespace=namespace, api_version=CLUSTER_API)


def network(cidr: str) -> Obj:
    return {"clusterNetwork": {"pods": {"cidrBlocks": [cidr, "fd00::/48"]}}}


def settings(name: str, data: Obj) -> str:
    meta = {"name": name, "namespace": "default"}
    return manifests({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})


def test_each_cluster_gets_its_own_values_and_a_label_edit_reapplies_it_alone(
    controller: Any,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    namespace: str,
) -> None:
    name = unique("cidr")
    text = settings(name, {"podCIDR": "${POD_CIDR}", "region": "${REGION}", "home": "$${HOME}"})
    mgmt.create(source_configmap(namespace, "net", {"a": text}))
    crs = crs_obj(namespace, "net", [("ConfigMap", "net")], {"net": "1"}, mode="Reconcile")
    crs["spec"]["resources"][0]["substitute"] = True
    crs["spec"]["variables"] = [
        {
            "name": "REGION",
            "valueFrom": {"clusterField": "metadata.labels['topology.kubernetes.io/region']"},
            "default": "west",
        }
    ]
    mgmt.create(crs)
    add(mgmt, control_plane, namespace, 0, "v1", {"net": "1"}, network("10.1.0.0/16"))
    add(
        mgmt,
        control_plane,
        namespace,
        1,
        "v2",
        {"net": "1", "topology.kubernetes.io/region": "east"},
        network("10.2.0.0/16"),
    )
    first = wait_object(workload_clients[0], "v1", "ConfigMap", name, "default")
    second = wait_object(workload_clients[1], "v1", "ConfigMap", name, "default")
    assert first["data"] == {"podCIDR": "10.1.0.0/16", "region": "west", "home": "${HOME}"}
    assert second["data"] == {"podCIDR": "10.2.0.0/16", "region": "east", "home": "${HOME}"}
    wait_condition(mgmt, namespace, "net", "Ready", "True", "Applied")

    edited = time.time()
    mgmt.patch_merge(
        CLUSTER_API,
        "Cluster",
        "v1",
        {"metadata": {"labels": {"topology.kubernetes.io/region": "north"}}},
        namespace=namespace,
    )
    wait_object(
        workload_clients[0],
        "v1",
        "ConfigMap",
        name,
        "default",
        lambda o: o["data"]["region"] == "north",
    )
    audit_caught_up(control_plane.workloads)
    writes = requests_by(
        control_plane.workloads, {"values-v1", "values-v2"}, edited, {"patch", "create", "update"}
    )
    assert [w.split()[1:] for w in writes] == [["patch", f"configmaps/{name}"]], writes


def test_a_hostile_annotation_lands_as_one_string(
    controller: Any,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    namespace: str,
) -> None:
    name, intruder = unique("note"), unique("intruder")
    hostile = (
        yaml.safe_dump({"x": 1})
        + f"---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {intruder}\n"
    )
    text = settings(name, {"note": "${NOTE}"})
    mgmt.create(source_configmap(namespace, "note", {"a": text}))
    crs = crs_obj(namespace, "note", [("ConfigMap", "note")], {"note": "1"}, mode="Reconcile")
    crs["spec"]["resources"][0]["substitute"] = True
    crs["spec"]["variables"] = [
        {"name": "NOTE", "valueFrom": {"clusterField": "metadata.annotations['example.com/note']"}}
    ]
    mgmt.create(crs)
    add(
        mgmt,
        control_plane,
        namespace,
        2,
        "n1",
        {"note": "1"},
        annotations={"example.com/note": hostile},
    )
    live = wait_object(workload_clients[2], "v1", "ConfigMap", name, "default")
    assert live["data"] == {"note": hostile}
    wait_condition(mgmt, namespace, "note", "Ready", "True", "Applied")
    assert workload_clients[2].get("v1", "ConfigMap", intruder, "default") is None


def test_an_unresolved_variable_fails_that_cluster_alone_until_the_label_appears(
    controller: Any,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    namespace: str,
) -> None:
    name, verbatim = unique("tier"), unique("verbatim")
    mgmt.create(source_configmap(namespace, "tier", {"a": settings(name, {"tier": "${TIER}"})}))
    mgmt.create(
        source_configmap(namespace, "plain", {"a": settings(verbatim, {"home": "${HOME}"})})
    )
    crs = crs_obj(
        namespace,
        "tier",
        [("ConfigMap", "tier"), ("ConfigMap", "plain")],
        {"tier": "1"},
        mode="Reconcile",
    )
    crs["spec"]["resources"][0]["substitute"] = True
    crs["spec"]["variables"] = [
        {"name": "TIER", "valueFrom": {"clusterField": "metadata.labels['example.com/tier']"}}
    ]
    mgmt.create(crs)
    add(mgmt, control_plane, namespace, 0, "t1", {"tier": "1"})
    add(mgmt, control_plane, namespace, 1, "t2", {"tier": "1"})
    mgmt.patch_merge(
        CLUSTER_API,
        "Cluster",
        "t2",
        {"metadata": {"labels": {"example.com/tier": "gold"}}},
        namespace=namespace,
    )
    wait_object(
        workload_clients[1],
        "v1",
        "ConfigMap",
        name,
        "default",
        lambda o: o["data"] == {"tier": "gold"},
    )
    cond = wait_condition(mgmt, namespace, "tier", "Ready", "False", "UnresolvedVariable")
    assert (
        "TIER" in cond["message"]
        and "ConfigMap/tier" in cond["message"]
        and "t1" in cond["message"]
    )
    assert "label example.com/tier" in cond["message"], cond["message"]
    # The resource without substitute went out verbatim, on both clusters.
    plain = wait_object(workload_clients[0], "v1", "ConfigMap", verbatim, "default")
    assert plain["data"] == {"home": "${HOME}"}
    assert workload_clients[0].get("v1", "ConfigMap", name, "default") is None

    mgmt.patch_merge(
        CLUSTER_API,
        "Cluster",
        "t1",
        {"metadata": {"labels": {"example.com/tier": "silver"}}},
        namespace=namespace,
    )
    wait_object(
        workload_clients[0],
        "v1",
        "ConfigMap",
        name,
        "default",
        lambda o: o["data"] == {"tier": "silver"},
    )
    wait_condition(mgmt, namespace, "tier", "Ready", "True", "Applied")


def test_a_name_a_value_makes_a_number_fails_that_resource_before_any_object_goes_out(
    controller: Any,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    namespace: str,
) -> None:
    # A Cluster named 0755 makes an unquoted ${CLUSTER_NAME} the number 493.
    first, plain = unique("named"), unique("plain")
    text = settings(f"{first}-${{CLUSTER_NAME}}", {}) + settings("${CLUSTER_NAME}", {})
    mgmt.create(source_configmap(namespace, "named", {"a": text}))
    mgmt.create(source_configmap(namespace, "plain", {"a": settings(plain, {"k": "v"})}))
    refs = [("ConfigMap", "named"), ("ConfigMap", "plain")]
    crs = crs_obj(namespace, "named", refs, {"named": "1"}, mode="Reconcile")
    crs["spec"]["resources"][0]["substitute"] = True
    mgmt.create(crs)
    add(mgmt, control_plane, namespace, 0, "0755", {"named": "1"})
    cond = wait_condition(mgmt, namespace, "named", "Ready", "False", "InvalidManifest")
    assert "metadata.name must be a non-empty string" in cond["message"], cond["message"]
    assert "ConfigMap/named" in cond["message"] and "493" not in cond["message"]
    # The pass went on past it, and recorded what it applied; nothing of it went out.
    wait_object(workload_clients[0], "v1", "ConfigMap", plain, "default")
    assert workload_clients[0].get("v1", "ConfigMap", f"{first}-0755", "default") is None
