"""Rollout controls on real servers. A cluster annotated hold-updates takes no new
revision (UpdateHeld, counted in heldClusters, the rollout Complete without it, Ready
False naming it) yet gets a first install, and takes the revision once the
annotation goes. A Manual step waits (AwaitingApproval, Ready False, an Event) until
`crs-controller approve`, and a new revision asks again."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from crs_controller.app.cli import main
from crs_controller.core.clusters import HOLD_UPDATES_ANNOTATION
from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.clusters import set_cluster_initialized
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    CLUSTER_API,
    CRS_API,
    TIMEOUT,
    add_cluster,
    admin_kubeconfig,
    binding_entry,
    configmap_obj,
    crs_obj,
    manifests,
    source_configmap,
    unique,
    wait_condition,
)
from .test_rollout import add, applies, cluster_user, edit, on_hash, rollout

Obj = dict[str, Any]


def revision(mgmt: TestbedClient, namespace: str, name: str) -> str | None:
    crs = mgmt.get(CRS_API, "ClusterResourceSet", name, namespace)
    return (crs or {}).get("status", {}).get("revision")


def moved_on(mgmt: TestbedClient, namespace: str, name: str, before: str | None, phase: str) -> Obj:
    """Wait until the status is about a revision other than ``before``, in ``phase``."""

    def check() -> Obj | None:
        now = rollout(mgmt, namespace, name)
        fresh = revision(mgmt, namespace, name) not in (None, before)
        return now if fresh and now.get("phase") == phase else None

    return wait_for(check, TIMEOUT, message=f"{name}: a new revision {phase}")


def outcome(mgmt: TestbedClient, namespace: str, cluster: str, crs: str) -> Obj:
    return (binding_entry(mgmt, namespace, cluster, crs) or {}).get("outcome") or {}


def value(client: TestbedClient, name: str) -> str | None:
    """The ``v`` a workload cluster's ConfigMap holds."""
    live = client.get("v1", "ConfigMap", name, "default")
    return (live or {}).get("data", {}).get("v")


def hold_updates(mgmt: TestbedClient, namespace: str, cluster: str, hold: bool) -> None:
    patch = {"metadata": {"annotations": {HOLD_UPDATES_ANNOTATION: "true" if hold else None}}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", cluster, patch, namespace=namespace)


def awaiting_events(mgmt: TestbedClient, namespace: str) -> int:
    """How many RolloutAwaitingApproval Events the namespace has."""
    events = mgmt.list("v1", "Event", namespace)
    return sum(e["reason"] == "RolloutAwaitingApproval" for e in events)


@pytest.fixture
def kubeconfig(control_plane: ControlPlane, tmp_path: Path) -> str:
    return admin_kubeconfig(control_plane, tmp_path)


def rollout_crs(namespace: str, name: str, steps: list[Obj]) -> Obj:
    crs = crs_obj(
        namespace, name, [("ConfigMap", name)], {"roll": namespace[-6:]}, mode="Reconcile"
    )
    crs["spec"]["rollout"] = {"steps": steps}
    return crs


def canary(**step: Any) -> Obj:
    return {"clusterSelector": {"matchLabels": {"ring": "canary"}}, **step}


REST = {"clusterSelector": {"matchLabels": {"ring": "rest"}}}


def test_a_held_cluster_keeps_its_revision_until_released_and_still_gets_a_first_install(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients: list[TestbedClient],
    namespace: str,
) -> None:
    marker = unique("held")
    mgmt.create(source_configmap(namespace, "held", {"a": manifests(configmap_obj(marker, v="1"))}))
    mgmt.create(rollout_crs(namespace, "held", [canary(), REST]))
    clusters = {"u1": "canary", "u2": "rest", "u3": "rest"}  # one per workload server
    for index, (name, ring) in enumerate(clusters.items()):
        add(mgmt, control_plane, namespace, index, name, ring=ring)
    wait_condition(mgmt, namespace, "held", "Ready", "True", "Applied")
    first = on_hash(mgmt, namespace, "u3", "held")
    hold_updates(mgmt, namespace, "u3", hold=True)
    wait_for(lambda: rollout(mgmt, namespace, "held").get("heldClusters") == 1, TIMEOUT)
    before = revision(mgmt, namespace, "held")

    edit(mgmt, namespace, "held", configmap_obj(marker, v="2"))
    wait_for(lambda: outcome(mgmt, namespace, "u3", "held").get("reason") == "UpdateHeld", TIMEOUT)
    status = moved_on(mgmt, namespace, "held", before, "Complete")
    assert status["heldClusters"] == 1, status
    assert status["updatedClusters"] == 2, status
    assert [value(client, marker) for client in workload_clients] == ["2", "2", "1"]
    assert on_hash(mgmt, namespace, "u3", "held") == first
    # Not everything is on the revision: Ready says which cluster holds it back.
    cond = wait_condition(mgmt, namespace, "held", "Ready", "False", "UpdateHeld")
    assert "(u3)" in cond["message"], cond

    # A cluster that holds updates from its start still gets its first install. It
    # shares u1's workload server, so its own applies are read from the audit log.
    added = time.time()
    labels = {"roll": namespace[-6:], "ring": "rest"}
    workload = control_plane.workloads[0]
    # Annotated before it is initialized, so the controller never sees it without.
    add_cluster(mgmt, workload, namespace, "u4", labels, user=cluster_user("u4"), initialized=False)
    hold_updates(mgmt, namespace, "u4", hold=True)
    set_cluster_initialized(mgmt, name="u4", namespace=namespace)
    updated = on_hash(mgmt, namespace, "u1", "held")
    wait_for(lambda: on_hash(mgmt, namespace, "u4", "held") == updated, TIMEOUT)
    wait_for(lambda: applies(control_plane, ["u4"], added, f"configmaps/{marker}"), TIMEOUT)
    wait_for(lambda: rollout(mgmt, namespace, "held").get("heldClusters") == 2, TIMEOUT)

    hold_updates(mgmt, namespace, "u3", hold=False)
    wait_for(lambda: value(workload_clients[2], marker) == "2", TIMEOUT)
    wait_for(lambda: on_hash(mgmt, namespace, "u3", "held") == updated, TIMEOUT)
    status = wait_for(
        lambda: (
            (r := rollout(mgmt, namespace, "held")).get("phase") == "Complete"
            and r.get("heldClusters") == 1
            and r
        ),
        TIMEOUT,
        message="complete, with u4 held",
    )
    assert status["updatedClusters"] == 4, status  # u4 counts: it is on the revision


def test_a_manual_step_waits_for_approve_and_a_new_revision_asks_again(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients: list[TestbedClient],
    namespace: str,
    kubeconfig: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    marker = unique("gate")
    mgmt.create(source_configmap(namespace, "gate", {"a": manifests(configmap_obj(marker, v="1"))}))
    mgmt.create(rollout_crs(namespace, "gate", [canary(approval="Manual"), REST]))
    for index, (name, ring) in enumerate({"m1": "canary", "m2": "rest", "m3": "rest"}.items()):
        add(mgmt, control_plane, namespace, index, name, ring=ring)
    # First installs ask nobody.
    wait_condition(mgmt, namespace, "gate", "Ready", "True", "Applied")
    assert rollout(mgmt, namespace, "gate")["phase"] == "Complete"

    # The approval is for one revision: the next one asks again.
    for v in ("2", "3"):
        before = awaits_approval(mgmt, workload_clients, namespace, marker, v)
        args = ["approve", "gate", "-n", namespace, "--kubeconfig", kubeconfig]
        assert main(args) == 0
        assert capsys.readouterr().out.startswith("approved step 1 of revision")
        moved_on(mgmt, namespace, "gate", before, "Complete")
        assert [value(client, marker) for client in workload_clients] == [v] * 3
        wait_condition(mgmt, namespace, "gate", "Ready", "True", "Applied")


def awaits_approval(
    mgmt: TestbedClient, workload_clients: list[TestbedClient], namespace: str, marker: str, v: str
) -> str | None:
    """Edit the source to ``v``: the rollout waits for step 1's approval and nobody
    takes it. Returns the revision before."""
    before, told = revision(mgmt, namespace, "gate"), awaiting_events(mgmt, namespace)
    edit(mgmt, namespace, "gate", configmap_obj(marker, v=v))
    status = moved_on(mgmt, namespace, "gate", before, "AwaitingApproval")
    assert (status["step"], status["waitingFor"]) == (1, "Approval"), status
    cond = wait_condition(mgmt, namespace, "gate", "Ready", "False", "AwaitingApproval")
    assert "approval" in cond["message"], cond
    # Each cluster has looked at the new revision, and keeps what it has.
    for cluster in ("m1", "m2", "m3"):
        wait_for(
            lambda c=cluster: outcome(mgmt, namespace, c, "gate").get("reason") == "Progressing",
            TIMEOUT,
            message=f"{cluster} held by the rollout",
        )
    was = str(int(v) - 1)
    assert [value(client, marker) for client in workload_clients] == [was] * 3
    wait_for(lambda: awaiting_events(mgmt, namespace) > told, TIMEOUT, message="an Event")
    return before
