"""Waiting for the applied objects to be Ready (``workload/observing.check_health``) on
an in-memory workload cluster: the outcome names the first object not Ready at the
latest look (a message kept only while that same object blocks, so moving counts do
not rewrite the binding), and the health timeout counts from the apply whatever
blocks; the binding keeps the time the wait began while its message follows."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from crs_controller.core.api.models import CRSBinding, HealthCheck, HealthRule, ObjectRef
from crs_controller.core.api.models import ResourceBinding as Resource
from crs_controller.core.health.cel_rules import compile_rules
from crs_controller.core.state.bindings import with_outcome
from crs_controller.core.state.status import Outcome
from crs_controller.engine.reconcile.result import NOTHING
from crs_controller.engine.reconcile.workload.observing import Checked, Observer, check_health

from .memory_kube import MemoryKube

APPLIED_AT = datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC)
APPLIED = Outcome("Applied", "Applied", "all resources applied", 2, revision="xxh3:1")
LOCATION = ObjectRef("velero.io/v1", "BackupStorageLocation", "velero", "default")
WEB = ObjectRef("apps/v1", "Deployment", "default", "web")
RULES = compile_rules(
    [
        HealthRule(
            api_version="velero.io/v1",
            kind="BackupStorageLocation",
            ready="has(self.status) && self.status.phase == 'Available'",
        )
    ]
)


def _location(phase: str | None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": LOCATION.api_version,
        "kind": LOCATION.kind,
        "metadata": {"name": LOCATION.name, "namespace": LOCATION.namespace, "generation": 1},
    }
    if phase is not None:
        obj["status"] = {"phase": phase}
    return obj


def _web(available: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "generation": 1},
        "spec": {"replicas": 3},
        "status": {
            "observedGeneration": 1,
            "replicas": 3,
            "updatedReplicas": 3,
            "readyReplicas": available,
            "availableReplicas": available,
            "conditions": [{"type": "Available", "status": str(available == 3)}],
        },
    }


def _cluster(phase: str | None, available: int) -> MemoryKube:
    """The location (in ``phase``) and the Deployment (``available`` of 3)."""
    kube = MemoryKube("w1")
    kube.objects[(LOCATION.api_version, LOCATION.kind, "velero", "default")] = _location(phase)
    kube.objects[("apps/v1", "Deployment", "default", "web")] = _web(available)
    return kube


async def _look(kube: MemoryKube, previous: Outcome | None, after: float = 10.0) -> Checked:
    resource = Resource(
        kind="ConfigMap",
        name="backup",
        hash="xxh3:a",
        applied=True,
        last_applied_time=APPLIED_AT,
        objects=[LOCATION, WEB],
    )
    return await check_health(
        Observer(kube, "crs-controller"),
        HealthCheck(wait=True, timeout="5m"),
        [resource],
        applied=APPLIED,
        limit=300.0,
        previous=previous,
        sent_now=False,
        now=APPLIED_AT + timedelta(seconds=after),
        rules=RULES,
    )


async def test_the_wait_names_the_object_that_blocks_at_the_latest_look() -> None:
    first = await _look(_cluster(None, 0), None)
    assert first.outcome.ready is False and first.outcome.state == "Applied"
    assert first.outcome.blocker == "BackupStorageLocation velero/default"
    assert first.outcome.message.startswith("waiting for BackupStorageLocation velero/default: ")
    assert "spec.healthCheck.rules[0].ready is false" in first.outcome.message
    assert first.then != NOTHING  # looks again

    # Velero says Available: the Deployment blocks now, and the outcome says so.
    second = await _look(_cluster("Available", 0), first.outcome, after=95.0)
    assert second.outcome.blocker == "Deployment default/web"
    assert second.outcome.message == "waiting for Deployment default/web: 0/3 replicas available"
    assert "BackupStorageLocation" not in second.outcome.message


async def test_the_same_object_blocking_keeps_its_message_as_counts_move() -> None:
    first = await _look(_cluster("Available", 1), None)
    moved = await _look(_cluster("Available", 2), first.outcome, after=20.0)
    assert moved.outcome == first.outcome  # nothing new to record in the binding
    # Another generation (or revision) is another wait: told afresh.
    newer = replace(first.outcome, generation=1)
    again = await _look(_cluster("Available", 2), newer, after=20.0)
    assert again.outcome.message.endswith("2/3 replicas available")


async def test_the_timeout_counts_from_the_apply_whatever_blocks() -> None:
    first = await _look(_cluster(None, 0), None, after=200.0)
    # The location blocked for 200 s; the Deployment takes over, and the wait is not
    # started again: past 300 s after the apply, the cluster is Unhealthy.
    late = await _look(_cluster("Available", 0), first.outcome, after=301.0)
    assert (late.outcome.state, late.outcome.reason) == ("Failed", "Unhealthy")
    assert late.outcome.message.startswith("Deployment default/web: 0/3 replicas available")
    assert "(not Ready after 5m)" in late.outcome.message


async def test_all_ready_is_the_applied_outcome() -> None:
    done = await _look(_cluster("Available", 3), None)
    assert done == Checked(APPLIED)


def test_the_binding_keeps_when_the_wait_began_and_names_what_blocks_now() -> None:
    entry = CRSBinding(cluster_resource_set_name="backup")
    began = Outcome("Applied", "Applied", "waiting for BackupStorageLocation x", 2, ready=False)
    now = Outcome("Applied", "Applied", "waiting for Deployment default/web", 2, ready=False)
    first = with_outcome(entry, None, began, APPLIED_AT)
    later = with_outcome(entry, first, now, APPLIED_AT + timedelta(seconds=95))
    assert first.outcome is not None and later.outcome is not None
    assert later.outcome.message == "waiting for Deployment default/web"
    assert (later.outcome.time, later.outcome.ready) == (APPLIED_AT, False)
