"""Decisions for cleaning up before a Cluster is deleted (``core.state.uninstall_decisions``): when
deletion started, the deadline for holding it (``uninstall.timeout``, 10m by default),
a beforeDelete Job's verdict from its conditions, and which hook objects are Jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from crs_controller.core.api.models import Uninstall
from crs_controller.core.errors import InvalidSpec
from crs_controller.core.spec.objects import parse_cluster
from crs_controller.core.state.uninstall_decisions import cleanup_due, deadline, is_job, job_state

STAMP = "2026-11-22T10:00:00Z"
STARTED = datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC)


def cluster(deletion_timestamp: str | None = STAMP) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "work-1", "namespace": "default"}
    if deletion_timestamp is not None:
        metadata["deletionTimestamp"] = deletion_timestamp
    return {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": metadata}


def job(*conditions: tuple[str, str], status: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "h"}}
    if status:
        body["status"] = {"conditions": [{"type": t, "status": s} for t, s in conditions]}
    return body


@pytest.mark.parametrize(
    ("stamp", "started"),
    [
        (STAMP, STARTED),
        ("2026-11-22T10:00:00+00:00", STARTED),
        ("2026-11-22T12:00:00+02:00", STARTED),
        (None, None),
    ],
    ids=["zulu", "utc-offset", "other-offset", "absent"],
)
def test_deletion_started_is_read_in_utc(stamp: str | None, started: datetime | None) -> None:
    got = parse_cluster(cluster(stamp)).meta.deletion_timestamp
    assert got == started
    assert got is None or got.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    ("timeout", "held_for"),
    [
        (None, timedelta(minutes=10)),
        ("", timedelta(minutes=10)),
        ("90s", timedelta(seconds=90)),
        ("10m", timedelta(minutes=10)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1.5h", timedelta(hours=1, minutes=30)),
        ("500ms", timedelta(milliseconds=500)),
        ("0s", timedelta(0)),
    ],
)
def test_deadline_runs_from_the_deletion_timestamp(
    timeout: str | None, held_for: timedelta
) -> None:
    assert deadline(STARTED, timeout) == STARTED + held_for


@pytest.mark.parametrize("timeout", [None, "10m", "1h"])
def test_no_deadline_for_a_cluster_not_being_deleted(timeout: str | None) -> None:
    assert deadline(None, timeout) is None


@pytest.mark.parametrize(
    ("uninstall", "now", "due"),
    [
        (None, STARTED, False),
        (Uninstall(), STARTED, False),
        (Uninstall(ensure=True), STARTED, True),
        (Uninstall(ensure=True), STARTED + timedelta(minutes=10), False),
        (Uninstall(ensure=True, timeout="1h"), STARTED + timedelta(minutes=59), True),
        (Uninstall(ensure=True, timeout="0s"), STARTED, False),
    ],
    ids=["gone", "not-asked", "asked", "default-timeout-passed", "own-timeout", "zero"],
)
def test_cleanup_holds_the_deletion_until_its_deadline(
    uninstall: Uninstall | None, now: datetime, due: bool
) -> None:
    assert cleanup_due(uninstall, STARTED, now) is due
    assert cleanup_due(uninstall, None, now) is False


@pytest.mark.parametrize("timeout", ["10", "5d", "ten minutes", "-1m"])
def test_an_invalid_timeout_is_an_invalid_spec(timeout: str) -> None:
    with pytest.raises(InvalidSpec, match="invalid duration"):
        deadline(STARTED, timeout)


@pytest.mark.parametrize(
    ("obj", "state"),
    [
        (job(status=False), "Running"),
        ({"kind": "Job", "status": None}, "Running"),
        ({"kind": "Job", "status": {}}, "Running"),
        ({"kind": "Job", "status": {"conditions": None}}, "Running"),
        (job(), "Running"),
        (job(("Complete", "True")), "Complete"),
        (job(("SuccessCriteriaMet", "True")), "Complete"),
        (job(("SuccessCriteriaMet", "True"), ("Complete", "True")), "Complete"),
        (job(("Failed", "True")), "Failed"),
        (job(("FailureTarget", "True")), "Failed"),
        (job(("FailureTarget", "True"), ("Failed", "True")), "Failed"),
        (job(("Complete", "False")), "Running"),
        (job(("SuccessCriteriaMet", "False")), "Running"),
        (job(("Failed", "False")), "Running"),
        (job(("FailureTarget", "False")), "Running"),
        (job(("Complete", "Unknown")), "Running"),
        (job(("Failed", "False"), ("Complete", "True")), "Complete"),
        (job(("Complete", "False"), ("Failed", "True")), "Failed"),
        (job(("Suspended", "True")), "Running"),
    ],
    ids=[
        "no-status",
        "null-status",
        "empty-status",
        "null-conditions",
        "no-conditions",
        "complete",
        "success-criteria-met",
        "success-criteria-then-complete",
        "failed",
        "failure-target",
        "failure-target-then-failed",
        "complete-false",
        "success-criteria-false",
        "failed-false",
        "failure-target-false",
        "complete-unknown",
        "failed-false-complete-true",
        "complete-false-failed-true",
        "suspended",
    ],
)
def test_job_state(obj: dict[str, Any], state: str) -> None:
    assert job_state(obj) == state


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ({"apiVersion": "batch/v1", "kind": "Job"}, True),
        ({"apiVersion": "batch/v1beta1", "kind": "Job"}, True),
        ({"apiVersion": "batch/v1", "kind": "CronJob"}, False),
        ({"apiVersion": "v1", "kind": "Job"}, False),
        ({"apiVersion": "example.com/v1", "kind": "Job"}, False),
        ({"apiVersion": "batchjobs.example.com/v1", "kind": "Job"}, False),
        ({"apiVersion": "batch/v1", "kind": "job"}, False),
        ({"kind": "Job"}, False),
        ({"apiVersion": "batch/v1"}, False),
        ({"apiVersion": "v1", "kind": "ConfigMap"}, False),
    ],
)
def test_is_job(obj: dict[str, Any], expected: bool) -> None:
    assert is_job(obj) is expected
