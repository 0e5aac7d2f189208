"""Which clusters are contacted, and when: paused Clusters and CRSs are left alone,
uninitialized Clusters are pending (not failed), v1beta2 Clusters work, objects
without a namespace land in `default`, and `crs-controller hash` agrees with the
binding."""

from __future__ import annotations

import subprocess
import sys

import yaml

from crs_controller.testbed import TestbedClient, wait_for
from crs_controller.testbed.clusters import V1BETA2, register_cluster, set_cluster_initialized
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    CLUSTER_API,
    CRS_API,
    TIMEOUT,
    WORKLOAD_USER,
    add_cluster,
    binding,
    binding_entry,
    configmap_obj,
    crs_obj,
    manifests,
    source_configmap,
    unique,
    wait_condition,
    wait_object,
)

PAUSED = "cluster.x-k8s.io/paused"


def looked_at(controller: ControllerProcess, event: str, key: str) -> int:
    """How often the controller logged ``event`` for ``key``: the positive sign that
    it reconciled and left the object alone."""
    lines = controller.log_text().splitlines()
    return sum(1 for line in lines if event in line and f'"{key}"' in line)


def test_paused_cluster_is_left_alone_until_unpaused(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    name = unique("paused")
    mgmt.create(source_configmap(namespace, "p", {"a": manifests(configmap_obj(name))}))
    register_cluster(
        mgmt, workloads[0], name="p1", namespace=namespace, labels={"p": "1"},
        kubeconfig_user=WORKLOAD_USER, kubeconfig_groups=("system:masters",),
    )  # fmt: skip
    mgmt.patch_merge(CLUSTER_API, "Cluster", "p1", {"spec": {"paused": True}}, namespace=namespace)
    key = f"{namespace}/p1"
    seen = wait_for(lambda: looked_at(controller, "cluster paused", key), TIMEOUT)
    mgmt.create(crs_obj(namespace, "p", [("ConfigMap", "p")], {"p": "1"}))
    # The controller looked again (and logged so) once the CRS that selects it arrived.
    wait_for(lambda: looked_at(controller, "cluster paused", key) > seen, TIMEOUT)
    assert workload_clients[0].get("v1", "ConfigMap", name, "default") is None
    assert binding(mgmt, namespace, "p1") is None

    mgmt.patch_merge(CLUSTER_API, "Cluster", "p1", {"spec": {"paused": False}}, namespace=namespace)
    wait_object(workload_clients[0], "v1", "ConfigMap", name, "default")


def test_paused_crs_is_left_alone_until_unpaused(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    name = unique("pcrs")
    mgmt.create(source_configmap(namespace, "pc", {"a": manifests(configmap_obj(name))}))
    crs = crs_obj(namespace, "pc", [("ConfigMap", "pc")], {"pc": "1"})
    crs["metadata"]["annotations"] = {PAUSED: "true"}
    mgmt.create(crs)
    add_cluster(mgmt, workloads[1], namespace, "pc1", {"pc": "1"})
    wait_for(
        lambda: looked_at(controller, "paused ClusterResourceSets", f"{namespace}/pc1"), TIMEOUT
    )
    assert workload_clients[1].get("v1", "ConfigMap", name, "default") is None
    # Its status says it is paused, and nothing more: no revision, nothing counted.
    wait_condition(mgmt, namespace, "pc", "Paused", "True", "Paused")
    status = mgmt.get(CRS_API, "ClusterResourceSet", "pc", namespace)["status"]
    assert "revision" not in status and status.get("appliedClusters", 0) == 0, status
    assert binding(mgmt, namespace, "pc1") is None

    unpause = {"metadata": {"annotations": {PAUSED: None}}}
    mgmt.patch_merge(CRS_API, "ClusterResourceSet", "pc", unpause, namespace=namespace)
    wait_object(workload_clients[1], "v1", "ConfigMap", name, "default")
    wait_condition(mgmt, namespace, "pc", "Ready", "True", "Applied")


def test_uninitialized_v1beta2_cluster_is_pending_then_served(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    name = unique("v2")
    mgmt.create(source_configmap(namespace, "v2", {"a": manifests(configmap_obj(name))}))
    mgmt.create(crs_obj(namespace, "v2", [("ConfigMap", "v2")], {"v": "2"}))
    register_cluster(
        mgmt, workloads[2], name="v2c", namespace=namespace, labels={"v": "2"},
        api_version=V1BETA2, initialized=False,
        kubeconfig_user=WORKLOAD_USER, kubeconfig_groups=("system:masters",),
    )  # fmt: skip
    cond = wait_condition(mgmt, namespace, "v2", "Ready", "False", "WaitingForClusters")
    status = mgmt.get(CRS_API, "ClusterResourceSet", "v2", namespace)["status"]
    assert (status["matchingClusters"], status["failedClusters"]) == (1, 0)
    assert "1 matching" in cond["message"]

    set_cluster_initialized(mgmt, name="v2c", namespace=namespace, api_version=V1BETA2)
    wait_object(workload_clients[2], "v1", "ConfigMap", name, "default")
    wait_condition(mgmt, namespace, "v2", "Ready", "True", "Applied")


def test_objects_without_namespace_go_to_default_and_cli_hash_matches_the_binding(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    name = unique("nons")
    doc = manifests(configmap_obj(name, namespace=""))
    source = mgmt.create(source_configmap(namespace, "nons", {"a": doc}))
    mgmt.create(crs_obj(namespace, "nons", [("ConfigMap", "nons")], {"nn": "1"}))
    add_cluster(mgmt, workloads[0], namespace, "nn1", {"nn": "1"})
    wait_object(workload_clients[0], "v1", "ConfigMap", name, "default")

    entry = wait_for(lambda: binding_entry(mgmt, namespace, "nn1", "nons"), TIMEOUT)
    assert entry["resources"][0]["objects"][0]["namespace"] == "default"
    cli = subprocess.run(
        [sys.executable, "-m", "crs_controller", "hash", "-"],
        input=yaml.safe_dump(source),
        capture_output=True,
        text=True,
        check=True,
    )
    assert cli.stdout.strip() == entry["resources"][0]["hash"]
