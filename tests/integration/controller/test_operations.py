"""Operating the controller: health and metrics endpoints, graceful SIGTERM, leader
election on a Lease with a standby taking over, and a one-namespace watch."""

from __future__ import annotations

import httpx

from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.controller import SYSTEM_NAMESPACE, ControllerProcess

from .support import (
    TIMEOUT,
    add_cluster,
    configmap_obj,
    crs_obj,
    manifests,
    metric,
    source_configmap,
    unique,
    wait_condition,
    wait_object,
)

LEASE_API = "coordination.k8s.io/v1"


def leading(process: ControllerProcess) -> float:
    return metric(httpx.get(process.url("/metrics")).text, "crs_leader")


def test_health_and_metrics_endpoints(controller: ControllerProcess) -> None:
    assert httpx.get(controller.url("/healthz")).status_code == 200
    assert httpx.get(controller.url("/readyz")).status_code == 200
    metrics = httpx.get(controller.url("/metrics")).text
    assert "# TYPE crs_reconciles_total counter" in metrics
    assert "# TYPE crs_reconcile_duration_seconds histogram" in metrics
    assert "# TYPE crs_objects_applied_total counter" in metrics


def test_leader_election_standby_takes_over_after_sigterm(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    workloads,
    namespace: str,
) -> None:
    # Both candidates watch only this test's namespace, so they leave the session's
    # controller and the other tests alone.
    args = ("--leader-elect", "--namespace", namespace)
    first = ControllerProcess(control_plane.management, *args)
    second = ControllerProcess(control_plane.management, *args)
    try:
        first.start()  # ready already while standing by: the Lease may come a moment later

        def held() -> str | None:
            lease = mgmt.get(LEASE_API, "Lease", "crs-controller", SYSTEM_NAMESPACE)
            return ((lease or {}).get("spec") or {}).get("holderIdentity") or None

        holder = wait_for(held, TIMEOUT, message="the first candidate holds the Lease")
        wait_for(lambda: leading(first) == 1.0, TIMEOUT)

        second.start()
        # The standby is ready (so a rolling update can proceed) but not acting.
        assert leading(second) == 0.0
        assert leading(first) == 1.0

        assert first.stop() == 0  # SIGTERM: a clean exit that releases the lease
        wait_for(lambda: leading(second) == 1.0, TIMEOUT)
        lease = mgmt.get(LEASE_API, "Lease", "crs-controller", SYSTEM_NAMESPACE)
        assert lease["spec"]["holderIdentity"] not in ("", holder)

        # The new leader does the work.
        name = unique("leader")
        mgmt.create(source_configmap(namespace, "led", {"a": manifests(configmap_obj(name))}))
        mgmt.create(crs_obj(namespace, "led", [("ConfigMap", "led")], {"l": "e"}))
        add_cluster(mgmt, workloads[0], namespace, "led-1", {"l": "e"})
        wait_object(workload_clients[0], "v1", "ConfigMap", name, "default")
        wait_condition(mgmt, namespace, "led", "Ready", "True", "Applied")
        assert second.stop() == 0
    finally:
        first.close()
        second.close()
