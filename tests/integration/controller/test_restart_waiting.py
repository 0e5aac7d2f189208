"""A restart writes nothing where everything is in place, clusters waiting for a
rollout step's approval included: no binding is rewritten."""

from __future__ import annotations

import time

from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    TIMEOUT,
    audit_caught_up,
    binding_entry,
    configmap_obj,
    manifests,
    reconciles,
    source_configmap,
    unique,
    wait_condition,
    writes_by,
)
from .test_rollout import add, edit
from .test_rollout_controls import REST, canary, moved_on, revision, rollout_crs
from .test_steady_state import CONTROLLER_USERS

CLUSTERS = {"w1": "canary", "w2": "rest", "w3": "rest"}


def awaiting_approval(mgmt: TestbedClient, control_plane: ControlPlane, namespace: str) -> None:
    marker = unique("waiting")
    mgmt.create(source_configmap(namespace, "wait", {"a": manifests(configmap_obj(marker, v="1"))}))
    mgmt.create(rollout_crs(namespace, "wait", [canary(), {**REST, "approval": "Manual"}]))
    for index, (name, ring) in enumerate(CLUSTERS.items()):
        add(mgmt, control_plane, namespace, index, name, ring=ring)
    wait_condition(mgmt, namespace, "wait", "Ready", "True", "Applied")
    before = revision(mgmt, namespace, "wait")
    edit(mgmt, namespace, "wait", configmap_obj(marker, v="2"))
    moved_on(mgmt, namespace, "wait", before, "AwaitingApproval")
    # The status says AwaitingApproval in the pass that wakes the held clusters; their
    # bindings say so a moment later: settled only once they do.
    waiting = [name for name, ring in CLUSTERS.items() if ring == "rest"]
    wait_for(
        lambda: all(says_approval(mgmt, namespace, name) for name in waiting),
        TIMEOUT,
        message="the held clusters' bindings waiting for approval",
    )


def says_approval(mgmt: TestbedClient, namespace: str, cluster: str) -> bool:
    entry = binding_entry(mgmt, namespace, cluster, "wait") or {}
    return "to be approved" in str((entry.get("outcome") or {}).get("message"))


def binding_writes_after_restart(
    controller: ControllerProcess, control_plane: ControlPlane, namespace: str
) -> list[str]:
    since = controller_restarted(controller)
    keys = [f"{namespace}/{name}" for name in CLUSTERS]
    wait_for(
        lambda: all(reconciles(controller, "cluster", k) > 0 for k in keys),
        TIMEOUT,
        message="every cluster looked at after the restart",
    )
    audit_caught_up(control_plane.servers)
    writes = writes_by(control_plane.servers, CONTROLLER_USERS, since)
    return [w for w in writes if "clusterresourcesetbindings/w" in w]


def controller_restarted(controller: ControllerProcess) -> float:
    since = time.time()
    controller.restart()
    return since


def test_a_restart_writes_nothing_for_clusters_waiting_for_approval(
    controller: ControllerProcess, control_plane: ControlPlane, mgmt: TestbedClient, namespace: str
) -> None:
    awaiting_approval(mgmt, control_plane, namespace)
    assert binding_writes_after_restart(controller, control_plane, namespace) == []
    mgmt.delete("addons.crs.dev/v1alpha1", "ClusterResourceSet", "wait", namespace)
