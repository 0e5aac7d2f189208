"""Cleanup before a Cluster is deleted (uninstall.ensure) on real servers: the
BeforeClusterDelete Runtime Extension over TLS holds a topology Cluster's deletion
until the beforeDelete Job completed and the add-ons are gone; a failed Job aborts
(nothing deleted); the timeout lets deletion go on; plain Clusters are cleaned up
as soon as they are being deleted; a CRS with nothing to clean up, deleted while its
Cluster's deletion is held, goes without waiting for the Cluster."""

from __future__ import annotations

import ssl
from datetime import UTC, datetime

import httpx

from crs_controller.testbed import TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    CLUSTER_API,
    CRS_API,
    HOLD,
    HOOKS,
    TIMEOUT,
    add_cluster,
    binding_entry,
    configmap_obj,
    crs_obj,
    hook,
    job,
    manifests,
    source_configmap,
    unique,
    until_no_conflict,
    wait_condition,
    wait_object,
)


def finish_job(client: TestbedClient, name: str, *, failed: bool = False) -> None:
    """Play the Job controller (none runs on the test servers). The controller may
    re-apply the hook Job meanwhile: retry on a Conflict, as a controller would."""
    until_no_conflict(lambda: _finish_job(client, name, failed=failed))


def _finish_job(client: TestbedClient, name: str, *, failed: bool) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    live = client.get("batch/v1", "Job", name, "default")
    if failed:
        conditions = [
            {"type": "FailureTarget", "status": "True", "lastTransitionTime": now},
            {"type": "Failed", "status": "True", "lastTransitionTime": now},
        ]
        status = {"startTime": now, "failed": 1, "conditions": conditions}
    else:
        conditions = [
            {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now},
            {"type": "Complete", "status": "True", "lastTransitionTime": now},
        ]
        status = {"startTime": now, "completionTime": now, "succeeded": 1, "conditions": conditions}
    live["status"] = status
    client.update_status(live)


def _setup(
    mgmt: TestbedClient, workloads, namespace: str, cluster: str, *, timeout: str = "5m", index=0
) -> tuple[str, str]:
    addon, drain = unique("addon"), unique("drain")
    mgmt.create(source_configmap(namespace, "addon", {"a": manifests(configmap_obj(addon))}))
    mgmt.create(source_configmap(namespace, "drain", {"a": manifests(job(drain))}))
    crs = crs_obj(namespace, "un", [("ConfigMap", "addon")], {"un": "1"}, mode="Reconcile")
    crs["spec"]["uninstall"] = {
        "ensure": True,
        "timeout": timeout,
        "beforeDelete": [{"kind": "ConfigMap", "name": "drain"}],
    }
    mgmt.create(crs)
    add_cluster(mgmt, workloads[index], namespace, cluster, {"un": "1"})
    patch = {"metadata": {"finalizers": [HOLD]}, "spec": {"topology": {"class": "demo"}}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", cluster, patch, namespace=namespace)
    wait_condition(mgmt, namespace, "un", "Ready", "True", "Applied")
    return addon, drain


def _release(mgmt: TestbedClient, namespace: str, cluster: str) -> None:
    patch = {"metadata": {"finalizers": None}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", cluster, patch, namespace=namespace)


def test_hook_holds_deletion_until_the_job_completed_and_addons_are_gone(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    addon, drain = _setup(mgmt, workloads, namespace, "u1")
    wl = workload_clients[0]
    discovery = httpx.post(
        controller.extension_url(f"{HOOKS}/discovery"),
        verify=ssl.create_default_context(cadata=controller.extension_ca_pem.decode()),
    ).json()
    assert discovery["handlers"][0]["requestHook"]["hook"] == "BeforeClusterDelete"

    mgmt.delete(CLUSTER_API, "Cluster", "u1", namespace)
    cluster = mgmt.get(CLUSTER_API, "Cluster", "u1", namespace)
    assert cluster["metadata"]["deletionTimestamp"]
    answer = hook(controller, cluster)
    assert answer["status"] == "Success" and answer["retryAfterSeconds"] > 0

    wait_object(wl, "batch/v1", "Job", drain, "default")
    # The hook Job still runs: nothing may be deleted yet.
    assert wl.get("v1", "ConfigMap", addon, "default") is not None
    assert hook(controller, cluster)["retryAfterSeconds"] > 0

    finish_job(wl, drain)
    wait_for(lambda: wl.get("v1", "ConfigMap", addon, "default") is None, TIMEOUT)
    wait_for(lambda: hook(controller, cluster)["retryAfterSeconds"] == 0, TIMEOUT)
    assert binding_entry(mgmt, namespace, "u1", "un") is None
    _release(mgmt, namespace, "u1")


def test_a_failed_hook_job_aborts_and_the_timeout_lets_deletion_go_on(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    addon, drain = _setup(mgmt, workloads, namespace, "u2", timeout="8s", index=1)
    wl = workload_clients[1]
    mgmt.delete(CLUSTER_API, "Cluster", "u2", namespace)
    cluster = mgmt.get(CLUSTER_API, "Cluster", "u2", namespace)
    wait_object(wl, "batch/v1", "Job", drain, "default")
    finish_job(wl, drain, failed=True)

    wait_for(
        lambda: any(e["reason"] == "UninstallFailed" for e in mgmt.list("v1", "Event", namespace)),
        TIMEOUT,
    )
    assert wl.get("v1", "ConfigMap", addon, "default") is not None
    assert hook(controller, cluster)["retryAfterSeconds"] > 0
    # After uninstall.timeout the hook stops holding the deletion; nothing was deleted.
    wait_for(lambda: hook(controller, cluster)["retryAfterSeconds"] == 0, TIMEOUT)
    assert wl.get("v1", "ConfigMap", addon, "default") is not None
    _release(mgmt, namespace, "u2")


def test_a_plain_cluster_is_cleaned_up_once_it_is_being_deleted(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    addon = unique("plain")
    mgmt.create(source_configmap(namespace, "plain", {"a": manifests(configmap_obj(addon))}))
    crs = crs_obj(namespace, "plain", [("ConfigMap", "plain")], {"pl": "1"})
    crs["spec"]["uninstall"] = {"ensure": True}
    mgmt.create(crs)
    add_cluster(mgmt, workloads[2], namespace, "u3", {"pl": "1"})
    patch = {"metadata": {"finalizers": [HOLD]}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", "u3", patch, namespace=namespace)
    wl = workload_clients[2]
    wait_object(wl, "v1", "ConfigMap", addon, "default")
    wait_for(lambda: binding_entry(mgmt, namespace, "u3", "plain"), TIMEOUT)

    mgmt.delete(CLUSTER_API, "Cluster", "u3", namespace)
    wait_for(lambda: wl.get("v1", "ConfigMap", addon, "default") is None, TIMEOUT)
    _release(mgmt, namespace, "u3")
    wait_for(lambda: mgmt.get(CLUSTER_API, "Cluster", "u3", namespace) is None, TIMEOUT)
    # The cleanup's last binding write and the Cluster's going away race on a busy
    # machine: the binding goes with the Cluster, soon after if not before.
    wait_for(
        lambda: mgmt.get(CRS_API, "ClusterResourceSetBinding", "u3", namespace) is None, TIMEOUT
    )


def test_a_crs_with_nothing_to_clean_up_goes_while_its_cluster_is_held_in_deletion(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    """Orphan, and Delete without uninstall.ensure: deleted while the Cluster they are
    applied to is being deleted (held there by another finalizer), they go at once,
    deleting nothing on the workload cluster; the Cluster's deletion goes on as is."""
    kept, dropped = unique("kept"), unique("dropped")
    mgmt.create(source_configmap(namespace, "kept", {"a": manifests(configmap_obj(kept))}))
    mgmt.create(source_configmap(namespace, "dropped", {"a": manifests(configmap_obj(dropped))}))
    mgmt.create(crs_obj(namespace, "orphan", [("ConfigMap", "kept")], {"held": "1"}))
    delete = crs_obj(namespace, "delete", [("ConfigMap", "dropped")], {"held": "1"})
    delete["spec"]["deletionPolicy"] = "Delete"
    mgmt.create(delete)
    add_cluster(mgmt, workloads[2], namespace, "u4", {"held": "1"})
    patch = {"metadata": {"finalizers": [HOLD]}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", "u4", patch, namespace=namespace)
    for name in ("orphan", "delete"):
        wait_condition(mgmt, namespace, name, "Ready", "True", "Applied")

    mgmt.delete(CLUSTER_API, "Cluster", "u4", namespace)
    for name in ("orphan", "delete"):
        mgmt.delete(CRS_API, "ClusterResourceSet", name, namespace)
    for name in ("orphan", "delete"):
        wait_for(
            lambda n=name: mgmt.get(CRS_API, "ClusterResourceSet", n, namespace) is None, TIMEOUT
        )
    assert mgmt.get(CLUSTER_API, "Cluster", "u4", namespace) is not None  # still held
    wl = workload_clients[2]
    for name in (kept, dropped):
        assert wl.get("v1", "ConfigMap", name, "default") is not None
    _release(mgmt, namespace, "u4")
    wait_for(lambda: mgmt.get(CLUSTER_API, "Cluster", "u4", namespace) is None, TIMEOUT)
