"""Rollout controls on real servers. A cluster annotated hold-updates takes no new
revision (UpdateHeld, counted in heldClusters, the rollout Complete without it) yet
gets a first install, and takes the revision once the annotation goes. A Manual
step waits (AwaitingApproval, Ready False, an Event) until `crs-controller approve`,
and a new revision asks again. A step's validation Job gates the next step: once
Complete it is deleted and the rollout goes on; once Failed the rollout halts
(ValidationFailed naming the cluster and the Job) and the Job is kept.

The workload servers run no Job controller: the tests write the Jobs' status."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from crs_controller.app.cli import main
from crs_controller.core.api.clusters import HOLD_UPDATES_ANNOTATION
from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.clusters import set_cluster_initialized
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    CLUSTER_API,
    TIMEOUT,
    add_cluster,
    admin_kubeconfig,
    binding_entry,
    configmap_obj,
    crs_obj,
    crs_status,
    job,
    manifests,
    source_configmap,
    unique,
    until_no_conflict,
    wait_condition,
    wait_object,
    wait_rollout,
)
from .test_rollout import add, applies, cluster_user, edit, on_hash, rollout

Obj = dict[str, Any]


def revision(mgmt: TestbedClient, namespace: str, name: str) -> str | None:
    return crs_status(mgmt, namespace, name).get("revision")


def moved_on(mgmt: TestbedClient, namespace: str, name: str, before: str | None, phase: str) -> Obj:
    """Wait until the status is about a revision other than ``before``, in ``phase``
    (the revision and the phase from one read: two could pair the last revision's
    phase with the new revision)."""
    return wait_rollout(mgmt, namespace, name, after=before, phase=phase)


def outcome(mgmt: TestbedClient, namespace: str, cluster: str, crs: str) -> Obj:
    return (binding_entry(mgmt, namespace, cluster, crs) or {}).get("outcome") or {}


def value(client: TestbedClient, name: str) -> str | None:
    """The ``v`` a workload cluster's ConfigMap holds."""
    live = client.get("v1", "ConfigMap", name, "default")
    return (live or {}).get("data", {}).get("v")


def hold_updates(mgmt: TestbedClient, namespace: str, cluster: str, hold: bool) -> None:
    patch = {"metadata": {"annotations": {HOLD_UPDATES_ANNOTATION: "true" if hold else None}}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", cluster, patch, namespace=namespace)


def finish_job(client: TestbedClient, name: str, verdict: str) -> None:
    """Play the Job controller: once the Job exists, mark it Complete or Failed. The API
    server takes Complete only after SuccessCriteriaMet and with completionTime, Failed
    only after FailureTarget, and either only with startTime."""
    wait_object(client, "batch/v1", "Job", name, "default")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if verdict == "Complete":
        first, reason, message = "SuccessCriteriaMet", "CompletionsReached", "Reached 1 of 1"
        counts: Obj = {"succeeded": 1, "completionTime": now}
    else:
        first, reason, message = "FailureTarget", "BackoffLimitExceeded", "smoke test exited 3"
        counts = {"failed": 1}
    conditions = [
        {"type": kind, "status": "True", "reason": reason, "message": message}
        | {"lastTransitionTime": now}
        for kind in (first, verdict)
    ]

    def write() -> None:
        live = client.get("batch/v1", "Job", name, "default")
        assert live is not None
        live["status"] = {"startTime": now, "conditions": conditions, **counts}
        client.update_status(live)

    until_no_conflict(write)


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
    # The server writes an audit entry just after its response: wait for it.
    wait_for(
        lambda: applies(control_plane, ["u4"], added, f"configmaps/{marker}"),
        TIMEOUT,
        message="u4's own apply in the audit log",
    )
    wait_for(lambda: rollout(mgmt, namespace, "held").get("heldClusters") == 2, TIMEOUT)

    hold_updates(mgmt, namespace, "u3", hold=False)
    wait_for(lambda: value(workload_clients[2], marker) == "2", TIMEOUT)
    wait_for(lambda: on_hash(mgmt, namespace, "u3", "held") == updated, TIMEOUT)
    # The status may be written once with u3 released and not recorded on the
    # revision yet (Progressing); it settles at Complete with u4 still holding.
    wait_for(
        lambda: (
            (r := rollout(mgmt, namespace, "held")).get("phase") == "Complete"
            and r.get("heldClusters") == 1
        ),
        TIMEOUT,
    )


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

    for v in ("2", "3"):
        before = revision(mgmt, namespace, "gate")
        edit(mgmt, namespace, "gate", configmap_obj(marker, v=v))
        status = moved_on(mgmt, namespace, "gate", before, "AwaitingApproval")
        assert (status["step"], status["waitingFor"]) == (1, "Approval"), status
        cond = wait_condition(mgmt, namespace, "gate", "Ready", "False", "AwaitingApproval")
        assert "approval" in cond["message"], cond
        was = str(int(v) - 1)
        assert [value(client, marker) for client in workload_clients] == [was] * 3
        wait_for(
            lambda: any(
                e["reason"] == "RolloutAwaitingApproval" and e["involvedObject"]["name"] == "gate"
                for e in mgmt.list("v1", "Event", namespace)
            ),
            TIMEOUT,
            message="a RolloutAwaitingApproval Event",
        )

        args = ["approve", "gate", "-n", namespace, "--kubeconfig", kubeconfig]
        assert main(args) == 0
        assert capsys.readouterr().out.startswith("approved step 1 of revision")
        moved_on(mgmt, namespace, "gate", before, "Complete")
        assert [value(client, marker) for client in workload_clients] == [v] * 3
        wait_condition(mgmt, namespace, "gate", "Ready", "True", "Applied")


SMOKE = "smoke"


def validated_rollout(
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients: list[TestbedClient],
    namespace: str,
    marker: str,
    smoke: str,
) -> None:
    """A CRS whose canary step (cluster v1, on the first workload server) runs Job
    ``smoke`` before the rest (v2, v3) go, installed and validated once."""
    mgmt.create(
        source_configmap(namespace, "check", {"a": manifests(configmap_obj(marker, v="1"))})
    )
    mgmt.create(source_configmap(namespace, SMOKE, {"job": manifests(job(smoke))}))
    validation = {"resources": [{"kind": "ConfigMap", "name": SMOKE}], "timeout": "2m"}
    mgmt.create(rollout_crs(namespace, "check", [canary(validation=validation), REST]))
    for index, (name, ring) in enumerate({"v1": "canary", "v2": "rest", "v3": "rest"}.items()):
        add(mgmt, control_plane, namespace, index, name, ring=ring)
    # The first installs are validated on the canary too.
    finish_job(workload_clients[0], smoke, "Complete")
    wait_for(lambda: rollout(mgmt, namespace, "check").get("phase") == "Complete", TIMEOUT)
    assert workload_clients[0].get("batch/v1", "Job", smoke, "default") is None


def new_revision_on_the_canary(
    mgmt: TestbedClient, workload_clients: list[TestbedClient], namespace: str, marker: str
) -> tuple[str | None, dict[str, str | None]]:
    """Edit the source; once the canary has it and validates, the revision before and
    what each other cluster was on."""
    before = revision(mgmt, namespace, "check")
    kept = {c: on_hash(mgmt, namespace, c, "check") for c in ("v2", "v3")}
    edit(mgmt, namespace, "check", configmap_obj(marker, v="2"))
    status = moved_on(mgmt, namespace, "check", before, "Progressing")
    wait_for(lambda: rollout(mgmt, namespace, "check").get("waitingFor") == "Validation", TIMEOUT)
    assert rollout(mgmt, namespace, "check")["step"] == 1, status
    assert value(workload_clients[0], marker) == "2"
    return before, kept


def test_a_validation_job_that_completes_lets_the_rollout_go_on_and_is_removed(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients: list[TestbedClient],
    namespace: str,
) -> None:
    marker, smoke = unique("checked"), unique("smoke")
    validated_rollout(control_plane, mgmt, workload_clients, namespace, marker, smoke)

    before, kept = new_revision_on_the_canary(mgmt, workload_clients, namespace, marker)
    wait_object(workload_clients[0], "batch/v1", "Job", smoke, "default")
    # The rest wait for the validation.
    assert {c: on_hash(mgmt, namespace, c, "check") for c in kept} == kept
    assert [value(client, marker) for client in workload_clients[1:]] == ["1", "1"]

    finish_job(workload_clients[0], smoke, "Complete")
    moved_on(mgmt, namespace, "check", before, "Complete")
    assert workload_clients[0].get("batch/v1", "Job", smoke, "default") is None
    assert [value(client, marker) for client in workload_clients] == ["2", "2", "2"]
    wait_condition(mgmt, namespace, "check", "Ready", "True", "Applied")


def test_a_validation_job_that_fails_halts_the_rollout_and_is_kept(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients: list[TestbedClient],
    namespace: str,
) -> None:
    marker, smoke = unique("refused"), unique("smoke")
    validated_rollout(control_plane, mgmt, workload_clients, namespace, marker, smoke)

    before, kept = new_revision_on_the_canary(mgmt, workload_clients, namespace, marker)
    finish_job(workload_clients[0], smoke, "Failed")
    status = moved_on(mgmt, namespace, "check", before, "Halted")
    assert "v1" in status["message"], status
    failed = outcome(mgmt, namespace, "v1", "check")
    assert failed["reason"] == "ValidationFailed", failed
    assert f"cluster v1: Job default/{smoke} failed: BackoffLimitExceeded" in failed["message"]
    # Kept for whoever looks into it; the rest never took the revision.
    assert workload_clients[0].get("batch/v1", "Job", smoke, "default") is not None
    assert {c: on_hash(mgmt, namespace, c, "check") for c in kept} == kept
    assert [value(client, marker) for client in workload_clients] == ["2", "1", "1"]


def test_a_finished_job_someone_else_made_never_passes_a_validation(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients: list[TestbedClient],
    namespace: str,
) -> None:
    """A Complete Job of the validation's name, made before the CRS by another tool,
    decides nothing: the canary's validation fails at its timeout naming the Job as
    already present, and the Job is kept as it was."""
    marker, smoke = unique("stale"), unique("smoke")
    theirs = workload_clients[0].create(job(smoke))["metadata"]["uid"]
    finish_job(workload_clients[0], smoke, "Complete")
    mgmt.create(
        source_configmap(namespace, "check", {"a": manifests(configmap_obj(marker, v="1"))})
    )
    mgmt.create(source_configmap(namespace, SMOKE, {"job": manifests(job(smoke))}))
    validation = {"resources": [{"kind": "ConfigMap", "name": SMOKE}], "timeout": "10s"}
    mgmt.create(rollout_crs(namespace, "check", [canary(validation=validation), REST]))
    for index, (name, ring) in enumerate({"v1": "canary", "v2": "rest"}.items()):
        add(mgmt, control_plane, namespace, index, name, ring=ring)

    def failed() -> bool:
        return outcome(mgmt, namespace, "v1", "check").get("reason") == "ValidationFailed"

    wait_for(failed, TIMEOUT)
    message = outcome(mgmt, namespace, "v1", "check")["message"]
    assert f"Job default/{smoke} already present, not created by this validation" in message
    live = workload_clients[0].get("batch/v1", "Job", smoke, "default")
    assert live is not None and live["metadata"]["uid"] == theirs
