"""The CRS status is read from the bindings, not from the memory of the process that
applied: a replica that reconciled none of the clusters (another shard member, or
this one right after a restart) writes the same status; a cluster with no outcome
recorded yet counts as not applied and holds observedGeneration back; a replica
that does not hold the leader Lease writes nothing. A spec problem is told once; a
paused CRS says so (Paused True, Ready Unknown) and keeps the rest. A status write
the server refuses (401, 403: rights missing) is logged at error, one another writer
got to first (409) or a server trouble at info, and retried either way. A rollback by
itself names its failure in the status, where a restarted process reads it back. The
time of a CRS's last pass (which spaces its status writes) is kept only while the CRS
exists."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from structlog.testing import capture_logs

from crs_controller.core.api.clusters import PAUSED_ANNOTATION as PAUSED
from crs_controller.core.api.models import API_VERSION
from crs_controller.core.errors import APIError, Conflict
from crs_controller.engine.io.stores import CRSStore
from crs_controller.engine.memory.outcomes import Outcomes
from crs_controller.engine.memory.plans import Rollouts
from crs_controller.engine.reconcile.cluster import reconcile_cluster
from crs_controller.engine.reconcile.context import ClusterContext, CRSContext, Settings
from crs_controller.engine.reconcile.crs import reconcile_crs
from crs_controller.engine.reconcile.result import crs_key
from crs_controller.engine.runtime.controller import Controller, status_settle

from .builders import NS, cluster, configmap_source, crs, payload, reconcile, world_with
from .fake_clock import FakeClock
from .memory_kube import CLUSTER_API, MemoryKube, World


def status(world: World) -> dict[str, Any]:
    stored = world.mgmt.objects[(API_VERSION, "ClusterResourceSet", NS, "a")]
    return dict(stored.get("status") or {})


async def test_a_replica_that_applied_nothing_writes_the_status_from_the_bindings() -> None:
    world = await world_with(crs("a", "src"))
    await reconcile(world)  # "another replica" applies and records the binding
    await reconcile_crs(world.crs_context(), NS, "a")
    written = status(world)
    assert (written["matchingClusters"], written["appliedClusters"]) == (1, 1)
    assert written["observedGeneration"] == 1
    ready = next(c for c in written["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Applied")


async def test_a_cluster_without_a_recorded_outcome_counts_as_not_applied() -> None:
    world = await world_with(crs("a", "src"))
    await reconcile(world)
    await world.add(cluster("c2"))  # matches, never reconciled
    await reconcile_crs(world.crs_context(), NS, "a")
    written = status(world)
    assert (written["matchingClusters"], written["appliedClusters"]) == (2, 1)
    assert "observedGeneration" not in written
    applied = next(c for c in written["conditions"] if c["type"] == "ResourcesApplied")
    assert (applied["reason"], applied["message"]) == (
        "WaitingForClusters",
        "1 matching clusters not applied yet",
    )


async def test_a_replica_without_the_leader_lease_writes_no_status_nor_finalizer() -> None:
    world = await world_with(crs("a", "src"))
    await reconcile(world)
    world.mgmt.requests.clear()
    await reconcile_crs(world.crs_context(leading=False), NS, "a")
    assert [w for w in world.mgmt.writes() if "ClusterResourceSet/" in w[1]] == []
    assert status(world) == {}


@pytest.mark.parametrize(
    ("error", "level"),
    [
        (APIError("put ClusterResourceSet/a: 403 Forbidden", status=403), "error"),
        (APIError("put ClusterResourceSet/a: 401 Unauthorized", status=401), "error"),
        (Conflict("put ClusterResourceSet/a: 409 Conflict", status=409), "info"),
        (APIError("put ClusterResourceSet/a: 500 Internal Server Error", status=500), "info"),
    ],
    ids=["403", "401", "conflict", "500"],
)
async def test_a_refused_status_write_is_logged_at_error(error: APIError, level: str) -> None:
    # An alert on warnings and errors must see rights that are missing: no retry
    # brings them back.
    world = await world_with(crs("a", "src"))
    await reconcile(world)
    store = world.mgmt.replace

    async def refuse(obj: Any, *, subresource: str | None = None) -> Any:
        if subresource == "status":
            raise error
        return await store(obj, subresource=subresource)

    world.mgmt.replace = refuse  # type: ignore[method-assign]
    with capture_logs() as records:
        result = await reconcile_crs(world.crs_context(), NS, "a")
    (record,) = [r for r in records if r["event"] == "status write failed"]
    assert (record["log_level"], record["status"]) == (level, error.status)
    assert record["crs"] == f"{NS}/a"
    assert result.retry
    assert status(world) == {}


async def test_a_forged_outcome_in_a_binding_cannot_break_the_status() -> None:
    """The API server refuses a condition reason outside metav1's pattern: taken from
    a binding as is, one tenant-written entry would make every status write fail.
    The model refuses such a binding; its cluster counts as not applied yet."""
    world = await world_with(crs("a", "src"))
    await reconcile(world)
    await world.add(cluster("c2"))
    forged = {
        "apiVersion": API_VERSION,
        "kind": "ClusterResourceSetBinding",
        "metadata": {"name": "c2", "namespace": NS},
        "spec": {
            "clusterName": "c2",
            "bindings": [
                {
                    "clusterResourceSetName": "a",
                    "outcome": {"reason": "not a reason!", "message": "x" * 5000},
                }
            ],
        },
    }
    await world.mgmt.create(forged)
    world.sync_bindings()
    await reconcile_crs(world.crs_context(), NS, "a")
    written = status(world)
    assert (written["matchingClusters"], written["appliedClusters"]) == (2, 1)
    reasons = {c["reason"] for c in written["conditions"] if c["type"] != "Paused"}
    assert reasons == {"WaitingForClusters"}, written["conditions"]


def rollout_events(world: World) -> list[str]:
    events = [o for k, o in world.mgmt.objects.items() if k[1] == "Event"]
    return sorted(e["reason"] for e in events if e["reason"].startswith("Rollout"))


async def test_rollout_events_are_told_from_the_plan_before_never_from_the_status() -> None:
    """A new revision is told once by the process that planned the one before; a
    replica with no plan of its own yet (a restart, a new leader) tells nothing, even
    though the stored status shows an older revision."""
    world = await world_with(crs("a", "src", rollout={"maxConcurrent": 1}))
    await reconcile(world)
    ctx = world.crs_context()
    await reconcile_crs(ctx, NS, "a")  # the first plan: nothing before it to compare
    assert rollout_events(world) == []
    source = world.mgmt.objects[("v1", "ConfigMap", NS, "src")]
    await world.update({**source, "data": configmap_source("src", payload("addon", "2"))["data"]})
    await reconcile_crs(world.crs_context(), NS, "a")  # a restarted replica: silent
    assert rollout_events(world) == []
    await reconcile_crs(ctx, NS, "a")
    assert rollout_events(world) == ["RolloutStarted"]
    await reconcile_crs(ctx, NS, "a")  # nothing changed: nothing told again
    assert rollout_events(world) == ["RolloutStarted"]


def invalid_spec_events(world: World) -> list[str]:
    events = [o for k, o in world.mgmt.objects.items() if k[1] == "Event"]
    return [e["message"] for e in events if e["reason"] == "InvalidSpec" and e["type"] == "Warning"]


async def edit_window(world: World, **window: str) -> None:
    stored = world.mgmt.objects[(API_VERSION, "ClusterResourceSet", NS, "a")]
    changed = {**stored, "metadata": {**stored["metadata"]}, "spec": {**stored["spec"]}}
    changed["metadata"]["generation"] += 1
    first = {**changed["spec"]["rollout"]["windows"][0], **window}
    changed["spec"]["rollout"] = {"windows": [first]}
    await world.update(changed)


async def test_an_invalid_spec_is_told_once_per_problem_from_the_status() -> None:
    """A Warning when the status takes a problem it did not hold: not on every look,
    not by another replica or after a restart (the status holds it), not for the same
    problem at a new generation; again for another problem, or once fixed and back."""
    window = {"kind": "Allow", "schedule": "0 99 * * *", "duration": "1h"}
    world = await world_with(crs("a", "src", rollout={"windows": [window]}))
    hour = "spec.rollout.windows[0]: schedule: Bad hour"
    await reconcile_crs(world.crs_context(), NS, "a")
    await reconcile_crs(world.crs_context(), NS, "a")
    assert invalid_spec_events(world) == [hour]
    await edit_window(world, duration="2h")  # the same problem, another generation
    await reconcile_crs(world.crs_context(), NS, "a")
    assert status(world)["observedGeneration"] == 2
    assert invalid_spec_events(world) == [hour]
    await edit_window(world, schedule="99 0 * * *")
    await reconcile_crs(world.crs_context(), NS, "a")
    assert invalid_spec_events(world) == [hour, "spec.rollout.windows[0]: schedule: Bad minute"]
    await edit_window(world, schedule="0 22 * * *")  # fixed
    await reconcile(world)
    await reconcile_crs(world.crs_context(), NS, "a")
    await edit_window(world, schedule="0 99 * * *")  # and broken again
    await reconcile_crs(world.crs_context(), NS, "a")
    assert invalid_spec_events(world)[-1] == hour and len(invalid_spec_events(world)) == 3


def conditions(world: World) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status(world)["conditions"]}


async def test_a_paused_crs_says_so_and_is_written_once() -> None:
    world = await world_with(crs("a", "src"))
    await reconcile(world)
    await reconcile_crs(world.crs_context(), NS, "a")
    assert conditions(world)["Paused"] == ("False", "NotPaused")
    applied = status(world)
    stored = world.mgmt.objects[(API_VERSION, "ClusterResourceSet", NS, "a")]
    annotated = {**stored, "metadata": {**stored["metadata"], "annotations": {PAUSED: ""}}}
    await world.update(annotated)
    await reconcile_crs(world.crs_context(), NS, "a")
    assert conditions(world) == {
        "ResourcesApplied": ("True", "Applied"),
        "Ready": ("Unknown", "Paused"),
        "Paused": ("True", "Paused"),
    }
    kept = ("revision", "observedGeneration", "appliedClusters", "matchingClusters")
    assert {k: status(world).get(k) for k in kept} == {k: applied.get(k) for k in kept}
    writes = len(world.mgmt.writes())
    await reconcile_crs(world.crs_context(), NS, "a")
    assert len(world.mgmt.writes()) == writes  # nothing new to say

    stored = world.mgmt.objects[(API_VERSION, "ClusterResourceSet", NS, "a")]
    await world.update({**stored, "metadata": {**stored["metadata"], "annotations": {}}})
    await reconcile_crs(world.crs_context(), NS, "a")
    assert conditions(world)["Paused"] == ("False", "NotPaused")
    assert conditions(world)["Ready"] == ("True", "Applied")


@pytest.mark.parametrize(
    ("pass_seconds", "settle"),
    [
        pytest.param(0.0, 1.0, id="small-fleet-a-second"),
        pytest.param(0.04, 1.0, id="2000-clusters-still-a-second"),
        pytest.param(0.2, 4.0, id="10000-clusters-spaced"),
        pytest.param(5.0, 30.0, id="capped"),
    ],
)
def test_status_passes_are_spaced_by_what_they_cost(pass_seconds: float, settle: float) -> None:
    """A CRS's pass reads every matching binding: spaced by twenty times its cost, it
    takes at most a twentieth of the time during a burst of binding writes, however
    large the fleet, so the CPU of an edit grows linearly with it."""
    assert status_settle(pass_seconds) == pytest.approx(settle)


async def test_the_pass_time_of_a_deleted_crs_is_not_kept() -> None:
    # A tenant creating and deleting sets under ever new names grows no memory.
    mgmt = MemoryKube("management")
    controller = Controller(mgmt, Settings(), CLUSTER_API, clock=FakeClock())
    crss = controller.informers[0]
    for n in range(50):
        name = f"set-{n}"
        controller._on_crs(None, crss.put(await mgmt.create(crs(name, "src"))))
        with capture_logs() as logs:
            await controller._process(crs_key(NS, name))
        assert [e["event"] for e in logs if e["log_level"] in ("warning", "error")] == []
        assert controller._pass_times.seconds(NS, name) is not None  # its pass was timed
        await mgmt.delete(API_VERSION, "ClusterResourceSet", name, NS)
        controller._on_crs(crss.remove(NS, name), None)
        await controller._process(crs_key(NS, name))
    assert len(controller._pass_times) == 0


def restarted(world: World) -> tuple[CRSContext, ClusterContext]:
    """The CRS and cluster contexts of one process with nothing in memory yet: this
    one after a restart, or a new leader."""
    memory = replace(world.shared, outcomes=Outcomes(), rollouts=Rollouts())
    crss = CRSStore(world.mgmt, world.crss)
    crs_ctx = CRSContext.over(memory, crss=crss, leading=lambda: True)
    return crs_ctx, replace(world.ctx, outcomes=memory.outcomes, rollouts=memory.rollouts)


async def passes(world: World, crs_ctx: CRSContext, cluster_ctx: ClusterContext) -> None:
    """A cluster pass between two CRS passes, the snapshots written shown to the caches."""
    await reconcile_crs(crs_ctx, NS, "a")
    for key, obj in list(world.mgmt.objects.items()):
        if key[1] == "ConfigMap":
            world.sync(obj)
    await reconcile_cluster(cluster_ctx, NS, "c1")
    world.sync_bindings()
    await reconcile_crs(crs_ctx, NS, "a")


async def test_a_rollback_by_itself_names_its_failure_also_after_a_restart() -> None:
    """The process that rolled back forgets the failure when it restarts: the status's
    rollout message keeps it, so the status stays as it was and the RolloutRolledBack
    Event told once the clusters are back still names it."""
    rollout = {"maxConcurrent": 1, "onFailure": "Rollback"}
    world = await world_with(crs("a", "src", rollout=rollout))
    first = restarted(world)
    await passes(world, *first)
    source = world.mgmt.objects[("v1", "ConfigMap", NS, "src")]
    await world.update({**source, "data": configmap_source("src", payload("addon", "2"))["data"]})
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    workload.fail_with = APIError("apply refused", status=422, body="{}")
    await passes(world, *first)  # the new revision fails on c1: back by itself
    rolling = status(world)["rollout"]
    failure = "the rollout of {} halted: 1 cluster failed (maximum 0): c1"
    assert rolling["message"].endswith(failure.format(rolling["rolledBackFrom"]))
    workload.fail_with = None

    second = restarted(world)
    await reconcile_crs(second[0], NS, "a")
    assert status(world)["rollout"] == rolling  # nothing of it forgotten
    await passes(world, *second)
    assert status(world)["rollout"]["phase"] == "RolledBack"
    told = [o for k, o in world.mgmt.objects.items() if k[1] == "Event"]
    said = [e["message"] for e in told if e["reason"] == "RolloutRolledBack"]
    assert len(said) == 1 and said[0].endswith(failure.format(rolling["rolledBackFrom"]))


async def test_what_a_deleted_crs_removed_is_told_before_its_finalizer_goes() -> None:
    world = await world_with(crs("a", "src", deletionPolicy="Delete"))
    ctx = world.crs_context()
    await reconcile(world)
    await reconcile_crs(ctx, NS, "a")  # the finalizer
    stored = world.mgmt.objects[(API_VERSION, "ClusterResourceSet", NS, "a")]
    deleting = {**stored["metadata"], "deletionTimestamp": "2099-01-01T00:00:00Z"}
    await world.update({**stored, "metadata": deleting})
    await reconcile(world)  # each cluster's cleanup deletes what it applied
    assert world.bindings.get(NS, "c1") is None
    then = await reconcile_crs(ctx, NS, "a")
    finalizers = world.mgmt.objects[(API_VERSION, "ClusterResourceSet", NS, "a")]["metadata"]
    assert then.requeue_after and "finalizers" in finalizers and finalizers["finalizers"]
    world.ctx.clock.advance(then.requeue_after)  # type: ignore[attr-defined]
    await reconcile_crs(ctx, NS, "a")
    events = [o for k, o in world.mgmt.objects.items() if k[1] == "Event"]
    deleted = [e["message"] for e in events if e["reason"] == "Deleted"]
    assert len(deleted) == 1 and deleted[0].startswith("deleted "), deleted
    assert "c1" in deleted[0]
