"""healthCheck.wait on real servers, readiness set through the status subresource the
way a workload controller would (the test bed runs none): Ready only once the
objects are Ready; a Job that fails is Unhealthy naming it; a CRD counts as Ready
once Established (the API server sets that itself)."""

from __future__ import annotations

from typing import Any

from crs_controller.testbed import TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    TIMEOUT,
    add_cluster,
    available,
    binding_entry,
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


def job(name: str) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "run", "image": "example.invalid/job:1"}],
                }
            },
        },
    }


def _health_crs(mgmt: TestbedClient, namespace: str, name: str, doc: str, timeout: str) -> None:
    mgmt.create(source_configmap(namespace, name, {"a": doc}))
    crs = crs_obj(namespace, name, [("ConfigMap", name)], {"health": name}, mode="Reconcile")
    crs["spec"]["healthCheck"] = {"wait": True, "timeout": timeout}
    mgmt.create(crs)


def test_ready_only_once_the_objects_are_ready(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    name = unique("web")
    group = f"{unique('g')}.example.com"
    _health_crs(
        mgmt,
        namespace,
        "web",
        manifests(loose_crd(group, "Gadget"), deployment(name, replicas=2)),
        "5m",
    )
    add_cluster(mgmt, workloads[0], namespace, "h1", {"health": "web"})
    wl = workload_clients[0]
    live = wait_object(wl, "apps/v1", "Deployment", name, "default")
    # Applied everywhere, but the Deployment has no replicas available yet.
    wait_condition(mgmt, namespace, "web", "ResourcesApplied", "True", "Applied")
    cond = wait_condition(mgmt, namespace, "web", "Ready", "False", "Progressing")
    assert f"Deployment default/{name}" in cond["message"], cond["message"]
    assert "h1" in cond["message"]

    live["status"] = available(live)
    wl.update_status(live)
    # The CRD was Established by the API server itself; the Deployment now is too.
    wait_condition(mgmt, namespace, "web", "Ready", "True", "Applied")


def test_a_failed_job_is_unhealthy_naming_it(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    name = unique("migrate")
    _health_crs(mgmt, namespace, "jobs", manifests(job(name)), "5m")
    add_cluster(mgmt, workloads[1], namespace, "h2", {"health": "jobs"})
    wl = workload_clients[1]
    live = wait_object(wl, "batch/v1", "Job", name, "default")
    wait_condition(mgmt, namespace, "jobs", "Ready", "False", "Progressing")
    live["status"] = {
        "conditions": [
            {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"},
        ],
        "startTime": "2026-11-23T10:00:00Z",
        "failed": 1,
    }
    wl.update_status(live)
    cond = wait_condition(mgmt, namespace, "jobs", "Ready", "False", "Unhealthy")
    assert f"Job default/{name}" in cond["message"], cond["message"]
    assert "BackoffLimitExceeded" in cond["message"]
    status = mgmt.get("addons.crs.dev/v1alpha1", "ClusterResourceSet", "jobs", namespace)["status"]
    assert status["failedClusters"] == 1
    # The binding records it too, for this CRS on this cluster.
    outcome = wait_for(
        lambda: (
            (binding_entry(mgmt, namespace, "h2", "jobs") or {}).get("outcome", {}).get("reason")
            == "Unhealthy"
            and binding_entry(mgmt, namespace, "h2", "jobs")["outcome"]
        ),
        TIMEOUT,
    )
    assert f"Job default/{name}" in outcome["message"] and outcome["time"]


def test_not_ready_within_the_timeout_is_unhealthy(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    name = unique("slow")
    _health_crs(mgmt, namespace, "slow", manifests(deployment(name, replicas=1)), "3s")
    add_cluster(mgmt, workloads[2], namespace, "h3", {"health": "slow"})
    cond = wait_condition(mgmt, namespace, "slow", "Ready", "False", "Unhealthy")
    assert f"Deployment default/{name}" in cond["message"], cond["message"]
    assert "not Ready after 3s" in cond["message"]
