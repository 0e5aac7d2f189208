"""The terminal commands as a kubectl user meets them, against the real servers:
``status -w`` prints the table then each change until its timeout, ``-o name``,
"No resources found" on stderr for an empty namespace; and the events a CRS applied
before its ConfigMap leaves behind (none: a source arriving within the grace never
produces a ResourceNotFound Warning; one that stays missing still does)."""

from __future__ import annotations

from pathlib import Path

from crs_controller.testbed import ControlPlane, KubeClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    TIMEOUT,
    add_cluster,
    configmap_obj,
    crs_obj,
    manifests,
    source_configmap,
    unique,
    wait_condition,
)


def events_with(mgmt: KubeClient, namespace: str, reason: str) -> list[dict]:
    return [e for e in mgmt.list("v1", "Event", namespace) if e["reason"] == reason]


def admin_kubeconfig(control_plane: ControlPlane, tmp_path: Path) -> str:
    path = control_plane.management.write_kubeconfig(
        tmp_path / "admin.kubeconfig", user="cli-admin", groups=("system:masters",)
    )
    return str(path)


def test_crs_applied_before_its_configmap_leaves_no_resource_not_found_warning(
    controller: ControllerProcess, mgmt: KubeClient, workloads, namespace: str
) -> None:
    add_cluster(mgmt, workloads[0], namespace, "early", {"order": "crs-first"})
    # One `kubectl apply -f` of CAPV's template: the CRS first, its ConfigMap next.
    mgmt.create(crs_obj(namespace, "ordered", [("ConfigMap", "ordered")], {"order": "crs-first"}))
    name = unique("ordered")
    mgmt.create(source_configmap(namespace, "ordered", {"a": manifests(configmap_obj(name))}))
    wait_condition(mgmt, namespace, "ordered", "Ready", "True", "Applied")
    # The positive sign: the Applied event, told once the clusters' notes settled.
    wait_for(lambda: events_with(mgmt, namespace, "Applied"), TIMEOUT)
    assert events_with(mgmt, namespace, "ResourceNotFound") == []


def test_a_source_that_stays_missing_still_gets_its_warning(
    controller: ControllerProcess, mgmt: KubeClient, workloads, namespace: str
) -> None:
    add_cluster(mgmt, workloads[1], namespace, "waiting", {"order": "missing"})
    mgmt.create(crs_obj(namespace, "missing", [("ConfigMap", "absent")], {"order": "missing"}))
    (event,) = wait_for(lambda: events_with(mgmt, namespace, "ResourceNotFound"), TIMEOUT)
    assert event["type"] == "Warning"
    assert f"ConfigMap {namespace}/absent not found" in event["message"]
