"""Cost of the steady state, counted in the API servers' audit logs: no writes when
nothing changed, none after a restart, and each ConfigMap hashed once per change."""

from __future__ import annotations

import time

import httpx

from crs_controller.testbed import ControlPlane, KubeClient, wait_for
from crs_controller.testbed.controller import SA_USER, ControllerProcess

from .support import (
    TIMEOUT,
    WORKLOAD_USER,
    add_cluster,
    binding_entry,
    configmap_obj,
    crs_obj,
    manifests,
    metric,
    settle,
    source_configmap,
    source_secret,
    unique,
    wait_condition,
    wait_object,
    writes_by,
)

CONTROLLER_USERS = {SA_USER, WORKLOAD_USER}


def _setup(mgmt: KubeClient, workloads, workload_clients, namespace: str) -> str:
    name = unique("steady")
    doc = manifests(configmap_obj(name, v="1"))
    mgmt.create(source_configmap(namespace, "steady", {"a": doc}))
    mgmt.create(source_secret(namespace, "steady", {"b": manifests(configmap_obj(name + "-s"))}))
    resources = [("ConfigMap", "steady"), ("Secret", "steady")]
    mgmt.create(crs_obj(namespace, "steady", resources, {"s": "1"}, mode="Reconcile"))
    for i, server in enumerate(workloads):
        add_cluster(mgmt, server, namespace, f"s{i}", {"s": "1"})
    for wl in workload_clients:
        wait_object(wl, "v1", "ConfigMap", name + "-s", "default")
    wait_condition(mgmt, namespace, "steady", "Ready", "True", "Applied")
    return name


def reconciled_clusters(controller: ControllerProcess) -> float:
    text = httpx.get(controller.url("/metrics")).text
    return metric(text, 'crs_reconciles_total{kind="cluster",result="ok"}')


def test_no_writes_in_steady_state_nor_after_restart(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: KubeClient,
    workloads,
    workload_clients,
    namespace: str,
) -> None:
    _setup(mgmt, workloads, workload_clients, namespace)
    since = settle(3)
    time.sleep(5)
    assert writes_by(control_plane.servers, CONTROLLER_USERS, since) == []

    controller.restart()
    restarted = time.time() - 1
    # Once the restarted controller has re-listed and reconciled every pair, it
    # must have written nothing: everything is already in place.
    wait_for(lambda: reconciled_clusters(controller) >= len(workloads), TIMEOUT)
    time.sleep(5)
    writes = writes_by(control_plane.servers, CONTROLLER_USERS, restarted)
    assert writes == [], "\n".join(writes)
    wait_condition(mgmt, namespace, "steady", "Ready", "True", "Applied")


def test_a_change_is_hashed_once_for_all_clusters(
    controller: ControllerProcess, mgmt: KubeClient, workloads, workload_clients, namespace: str
) -> None:
    name = _setup(mgmt, workloads, workload_clients, namespace)
    settle(2)
    before = metric(httpx.get(controller.url("/metrics")).text, "crs_source_hashes_total")

    source = mgmt.get("v1", "ConfigMap", "steady", namespace)
    source["data"] = {"a": manifests(configmap_obj(name, v="2"))}
    mgmt.update(source)
    for wl in workload_clients:
        wait_object(wl, "v1", "ConfigMap", name, "default", lambda o: o["data"] == {"v": "2"})
    wait_for(
        lambda: (
            len(
                {
                    binding_entry(mgmt, namespace, f"s{i}", "steady")["resources"][0]["hash"]
                    for i in range(3)
                }
            )
            == 1
        ),
        TIMEOUT,
    )
    settle(2)
    after = metric(httpx.get(controller.url("/metrics")).text, "crs_source_hashes_total")
    assert after - before == 1
