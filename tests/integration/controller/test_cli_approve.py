"""`crs-controller approve` and the rollout columns of `status`, on the real
management server: the CRS status is written here as the controller writes it
(a rollout waiting for the approval of step 2), no controller runs. Approve writes
the annotation "<revision>/<step>" for the step that waits and refuses, with exit
code 2 and the annotation unchanged, another step, a rollout that waits for nothing,
an unknown CRS, and a CRS that changed between its read and its write; status shows
the phase, the step, what the rollout waits for and the held clusters."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from crs_controller.app.cli import main
from crs_controller.clients.kube import KubeClient
from crs_controller.core.api.clusters import PAUSED_ANNOTATION
from crs_controller.core.rollout.plan import APPROVE_ANNOTATION
from crs_controller.testbed import ControlPlane, TestbedClient

from .support import (
    CRS_API,
    admin_kubeconfig,
    audit_caught_up,
    crs_obj,
    unique,
    until_no_conflict,
    writes_by,
)

REVISION = "xxh3:0123456789abcdef"
KIND = "ClusterResourceSet"
CLI_USER = "cli-admin"  # the user of admin_kubeconfig's certificate


def awaiting_approval(mgmt: TestbedClient, namespace: str, **rollout: Any) -> str:
    """A CRS with a Manual second step whose rollout waits for that step's approval."""
    name = unique("approve")
    steps = [
        {"clusterSelector": {"matchLabels": {"ring": "canary"}}},
        {"clusterSelector": {"matchLabels": {"ring": "prod"}}, "approval": "Manual"},
    ]
    crs = crs_obj(
        namespace,
        name,
        [("ConfigMap", "addon")],
        {"cni": "calico"},
        mode="Reconcile",
        rollout={"steps": steps},
    )
    # Paused (Cluster API's annotation), so that the session's controller, when it
    # runs, leaves this CRS and the status the test writes alone.
    crs["metadata"]["annotations"] = {PAUSED_ANNOTATION: "true"}
    created = mgmt.create(crs)
    set_rollout(mgmt, created, phase="AwaitingApproval", step=2, **rollout)
    return name


def set_rollout(mgmt: TestbedClient, crs: dict[str, Any], **rollout: Any) -> None:
    """The rollout as the controller would write it, beside what the status holds: the
    session's controller, when it runs, marks the paused CRS Paused (and keeps the rest
    of the status), so a write may meet its write (409, tried again)."""
    meta = crs["metadata"]

    def write() -> None:
        live = mgmt.get(CRS_API, KIND, meta["name"], meta["namespace"])
        assert live is not None
        live["status"] = {**(live.get("status") or {}), "revision": REVISION, "rollout": rollout}
        written = mgmt.update_status(live)
        # Read back: the server keeps every field (none pruned by the CRD's schema).
        assert written["status"]["rollout"] == rollout

    until_no_conflict(write)


def annotation(mgmt: TestbedClient, namespace: str, name: str) -> str | None:
    live = mgmt.get(CRS_API, KIND, name, namespace)
    assert live is not None
    annotations: dict[str, str] = live["metadata"].get("annotations") or {}
    return annotations.get(APPROVE_ANNOTATION)


@pytest.fixture
def kubeconfig(control_plane: ControlPlane, tmp_path: Path) -> str:
    return admin_kubeconfig(control_plane, tmp_path)


def test_approve_writes_the_waiting_step_of_the_current_revision(
    mgmt: TestbedClient, namespace: str, kubeconfig: str, capsys: pytest.CaptureFixture[str]
) -> None:
    name = awaiting_approval(mgmt, namespace)
    assert main(["approve", name, "-n", namespace, "--kubeconfig", kubeconfig]) == 0
    out, err = capsys.readouterr()
    assert out == f"approved step 2 of revision {REVISION} for {namespace}/{name}\n"
    assert err == ""
    assert annotation(mgmt, namespace, name) == f"{REVISION}/2"

    # Once more: nothing to write, and it says so.
    assert main(["approve", name, "-n", namespace, "--kubeconfig", kubeconfig]) == 0
    assert capsys.readouterr().out.startswith("already approved: step 2 of revision")


def test_approve_twice_after_the_rollout_went_on_is_already_approved(
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    namespace: str,
    kubeconfig: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Run back to back, the controller moves the rollout on in between (step 2
    Progressing): the second run finds the same approval and writes nothing."""
    name = awaiting_approval(mgmt, namespace)
    argv = ["approve", name, "-n", namespace, "--kubeconfig", kubeconfig]
    assert main(argv) == 0
    capsys.readouterr()
    crs = mgmt.get(CRS_API, KIND, name, namespace)
    assert crs is not None
    set_rollout(mgmt, crs, phase="Progressing", step=2)
    since = time.time()

    for again in (argv, [*argv, "--step", "2"]):
        assert main(again) == 0
        assert capsys.readouterr() == (
            f"already approved: step 2 of revision {REVISION} for {namespace}/{name}\n",
            "",
        )
    # Nothing written by the CLI (the session's controller may write the status).
    audit_caught_up([control_plane.management])
    assert writes_by([control_plane.management], {CLI_USER}, since) == []

    # The rollout at step 3 now: that approval was for step 2, not for this one.
    set_rollout(mgmt, crs, phase="Progressing", step=3)
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"crs-controller approve: ClusterResourceSet {namespace}/{name}: "
        "the rollout is Progressing, not AwaitingApproval\n"
    )
    assert annotation(mgmt, namespace, name) == f"{REVISION}/2"


def test_approve_with_the_waiting_step(
    mgmt: TestbedClient, namespace: str, kubeconfig: str, capsys: pytest.CaptureFixture[str]
) -> None:
    name = awaiting_approval(mgmt, namespace)
    argv = ["approve", name, "-n", namespace, "--step", "2", "--kubeconfig", kubeconfig]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("approved step 2 ")
    assert annotation(mgmt, namespace, name) == f"{REVISION}/2"


def test_approve_refuses_another_step(
    mgmt: TestbedClient, namespace: str, kubeconfig: str, capsys: pytest.CaptureFixture[str]
) -> None:
    name = awaiting_approval(mgmt, namespace)
    argv = ["approve", name, "-n", namespace, "--step", "3", "--kubeconfig", kubeconfig]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"crs-controller approve: ClusterResourceSet {namespace}/{name}: "
        "step 2 waits for approval, not step 3\n"
    )
    assert annotation(mgmt, namespace, name) is None


def test_approve_refuses_a_rollout_that_waits_for_no_approval(
    mgmt: TestbedClient, namespace: str, kubeconfig: str, capsys: pytest.CaptureFixture[str]
) -> None:
    name = awaiting_approval(mgmt, namespace)
    crs = mgmt.get(CRS_API, KIND, name, namespace)
    assert crs is not None
    set_rollout(mgmt, crs, phase="Progressing", step=2)
    assert main(["approve", name, "-n", namespace, "--kubeconfig", kubeconfig]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"crs-controller approve: ClusterResourceSet {namespace}/{name}: "
        "the rollout is Progressing, not AwaitingApproval\n"
    )
    assert annotation(mgmt, namespace, name) is None


def test_approve_refuses_an_unknown_crs(
    mgmt: TestbedClient, namespace: str, kubeconfig: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["approve", "absent", "-n", namespace, "--kubeconfig", kubeconfig]) == 2
    assert capsys.readouterr() == (
        "",
        f"crs-controller approve: ClusterResourceSet {namespace}/absent not found\n",
    )


def test_approve_refuses_a_crs_changed_after_it_was_read(
    mgmt: TestbedClient,
    namespace: str,
    kubeconfig: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The status moves on (a new revision waits) between the read and the write:
    the approval read for the old revision is not written."""
    name = awaiting_approval(mgmt, namespace)
    patch = KubeClient.merge_patch

    async def after_a_change(self: KubeClient, *args: Any, **kwargs: Any) -> Any:
        def change() -> None:
            live = mgmt.get(CRS_API, KIND, name, namespace)
            assert live is not None
            live["status"]["revision"] = "xxh3:ffffffffffffffff"
            mgmt.update_status(live)

        until_no_conflict(change)
        return await patch(self, *args, **kwargs)

    monkeypatch.setattr(KubeClient, "merge_patch", after_a_change)
    assert main(["approve", name, "-n", namespace, "--kubeconfig", kubeconfig]) == 2
    assert capsys.readouterr().err == (
        f"crs-controller approve: ClusterResourceSet {namespace}/{name} "
        "changed meanwhile, run again\n"
    )
    assert annotation(mgmt, namespace, name) is None


def test_status_shows_the_rollout(
    mgmt: TestbedClient, namespace: str, kubeconfig: str, capsys: pytest.CaptureFixture[str]
) -> None:
    message = "step 2 waits for approval"
    name = awaiting_approval(
        mgmt, namespace, waitingFor="Approval", heldClusters=1, message=message
    )
    args = ["status", name, "-n", namespace, "--kubeconfig", kubeconfig]
    assert main(args) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[-4:] == ["ROLLOUT", "STEP", "WAITING", "HELD"]
    assert row.split()[-4:] == ["AwaitingApproval", "2", "approval", "1"]

    assert main([*args, "-o", "json"]) == 0
    (crs,) = json.loads(capsys.readouterr().out)["clusterResourceSets"]
    assert crs["revision"] == REVISION
    assert crs["rollout"] == {
        "phase": "AwaitingApproval",
        "step": 2,
        "waitingFor": "Approval",
        "nextWindow": None,
        "heldClusters": 1,
        "rolledBackFrom": None,
        "message": message,
    }


def test_status_shows_when_the_next_window_opens(
    mgmt: TestbedClient, namespace: str, kubeconfig: str, capsys: pytest.CaptureFixture[str]
) -> None:
    name = awaiting_approval(mgmt, namespace)
    crs = mgmt.get(CRS_API, KIND, name, namespace)
    assert crs is not None
    opens = "2020-01-02T22:00:00Z"  # in the past: shown with its date
    set_rollout(mgmt, crs, phase="Progressing", step=1, waitingFor="Window", nextWindow=opens)
    assert main(["status", name, "-n", namespace, "--kubeconfig", kubeconfig]) == 0
    _, row = capsys.readouterr().out.splitlines()
    # No heldClusters written (no cluster holds): HELD shows '-'.
    assert row.split()[-6:] == ["Progressing", "1", "window", "until", "2020-01-02T22:00Z", "-"]
