"""Moving from Cluster API's ClusterResourceSet: what ``crs-controller convert`` makes
of a CAPI CRS (v1beta2 as exported with its server metadata, status and paused
annotation; v1beta1 without a strategy) and its sources (a ConfigMap and a
resource-set Secret carrying Cluster API's owner reference) is accepted by the real
API server as is, converges (Ready, Applied) and reaches the workload cluster. In
Reconcile mode it takes over an object Cluster API had created; in ApplyOnce mode
that object is left as it is."""

from __future__ import annotations

import uuid

from crs_controller.app.capi_convert import convert_documents
from crs_controller.testbed import TestbedClient
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    CRS_API,
    add_cluster,
    configmap_obj,
    manifests,
    source_configmap,
    source_secret,
    unique,
    wait_condition,
    wait_object,
)

CAPI_CRS_API = "addons.cluster.x-k8s.io/v1beta2"


def capi_owner(name: str) -> dict[str, str]:
    """The owner reference Cluster API puts on the sources of its CRS."""
    return {"apiVersion": CAPI_CRS_API, "kind": "ClusterResourceSet", "name": name, "uid": ""}


def test_converted_v1beta2_crs_converges_and_takes_over_what_cluster_api_applied(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    taken, fresh, from_secret = unique("capi-applied"), unique("fresh"), unique("from-secret")
    wl = workload_clients[2]
    # Created earlier by Cluster API, under its own field manager.
    wl.create(configmap_obj(taken, mode="old"))

    owner = {**capi_owner("cni"), "uid": str(uuid.uuid4())}
    source = source_configmap(
        namespace,
        "cni",
        {"cni.yaml": manifests(configmap_obj(taken, mode="new"), configmap_obj(fresh, mode="new"))},
    )
    secret = source_secret(
        namespace, "cni-secret", {"token.yaml": manifests(configmap_obj(from_secret, token="t"))}
    )
    for obj in (source, secret):
        obj["metadata"]["ownerReferences"] = [owner]
    exported = {
        "apiVersion": CAPI_CRS_API,
        "kind": "ClusterResourceSet",
        "metadata": {
            "name": "cni",
            "namespace": namespace,
            "uid": owner["uid"],
            "resourceVersion": "4242",
            "generation": 1,
            "creationTimestamp": "2025-09-18T08:01:17Z",
            "finalizers": ["addons.cluster.x-k8s.io"],
            "labels": {"team": "platform"},
            "annotations": {"cluster.x-k8s.io/paused": ""},
        },
        "spec": {
            "strategy": "Reconcile",
            "clusterSelector": {
                "matchExpressions": [{"key": "cni", "operator": "In", "values": ["calico"]}]
            },
            "resources": [
                {"kind": "ConfigMap", "name": "cni"},
                {"kind": "Secret", "name": "cni-secret"},
            ],
        },
        "status": {
            "observedGeneration": 1,
            "conditions": [
                {
                    "type": "Paused",
                    "status": "True",
                    "reason": "Paused",
                    "lastTransitionTime": "2025-09-18T09:00:00Z",
                }
            ],
        },
    }

    converted, warnings = convert_documents([source, secret, exported])
    assert [w.split(":")[0] for w in warnings] == [f"{namespace}/cni"]
    assert "cluster.x-k8s.io/paused" in warnings[0]
    for doc in converted:  # as kubectl apply -f - would, in order
        mgmt.create(doc)
    add_cluster(mgmt, workloads[2], namespace, "prod-1", {"cni": "calico"})

    wait_condition(mgmt, namespace, "cni", "Ready", "True", "Applied")
    for name in (taken, fresh):
        wait_object(
            wl, "v1", "ConfigMap", name, "default", lambda o: o.get("data") == {"mode": "new"}
        )
    wait_object(wl, "v1", "ConfigMap", from_secret, "default")
    managers = {
        m["manager"]
        for m in wl.get("v1", "ConfigMap", taken, "default")["metadata"]["managedFields"]
    }
    assert "crs-controller" in managers

    crs = mgmt.get(CRS_API, "ClusterResourceSet", "cni", namespace)
    assert crs["spec"]["mode"] == "Reconcile"
    assert crs["metadata"]["labels"] == {"team": "platform"}
    assert crs["metadata"]["uid"] != owner["uid"]
    # The sources are used as they are; Cluster API's owner reference stays.
    kept = mgmt.get("v1", "ConfigMap", "cni", namespace)["metadata"]["ownerReferences"]
    assert [ref["uid"] for ref in kept] == [owner["uid"]]


def test_converted_v1beta1_crs_without_strategy_leaves_existing_objects_alone(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    existing, fresh = unique("capi-applied"), unique("fresh")
    wl = workload_clients[1]
    wl.create(configmap_obj(existing, mode="capi"))
    source = source_configmap(
        namespace,
        "csi",
        {
            "csi.yaml": manifests(
                configmap_obj(existing, mode="crs"), configmap_obj(fresh, mode="crs")
            )
        },
    )
    exported = {
        "apiVersion": "addons.cluster.x-k8s.io/v1beta1",
        "kind": "ClusterResourceSet",
        "metadata": {"name": "csi", "namespace": namespace},
        "spec": {
            "clusterSelector": {"matchLabels": {"storage": "ebs"}},
            "resources": [{"kind": "ConfigMap", "name": "csi"}],
        },
    }

    converted, warnings = convert_documents([exported, source])
    assert warnings == []
    assert converted[0]["spec"]["mode"] == "ApplyOnce"
    for doc in converted:
        mgmt.create(doc)
    add_cluster(mgmt, workloads[1], namespace, "dev-1", {"storage": "ebs"})

    wait_object(wl, "v1", "ConfigMap", fresh, "default")
    wait_condition(mgmt, namespace, "csi", "Ready", "True", "Applied")
    assert wl.get("v1", "ConfigMap", existing, "default")["data"] == {"mode": "capi"}
