"""A Cluster that holds updates (``addons.crs.dev/hold-updates``) takes no new revision,
whatever its passes met before: a pass that cannot contact it records no revision it
was taking, and a cluster whose failed pass was taking one when the hold was set stays
where it is until the hold is lifted. The same holds for its rollout: a retry part-way
through a revision goes only while the plan admits the cluster (its step, a change
window, an approval). Held, the retry keeps the failure it retries as the cluster's
outcome: its rollout still counts it failed."""

from __future__ import annotations

from typing import Any

import pytest

from crs_controller.core.api.clusters import HOLD_UPDATES_ANNOTATION
from crs_controller.core.errors import Unreachable
from crs_controller.core.rollout.plan import Plan
from crs_controller.engine.reconcile.admission import Held, RolloutStep, UpdateHeld
from crs_controller.engine.reconcile.cluster import reconcile_cluster

from .memory_kube import CLUSTER_API, World
from .test_admission import NS, admit_c1, edited_world


def unreachable(*args: Any, **kwargs: Any) -> Any:
    raise Unreachable("c1: GET /version: ConnectError")


async def set_hold(world: World, on: bool) -> None:
    cluster = await world.mgmt.get(CLUSTER_API, "Cluster", "c1", NS)
    assert cluster is not None
    cluster["metadata"]["annotations"] = {HOLD_UPDATES_ANNOTATION: "true"} if on else {}
    await world.update(cluster)


async def fail_one_pass(world: World) -> None:
    """One pass of c1 that cannot reach its workload cluster."""
    workloads = world.ctx.workloads
    get = workloads.get
    workloads.get = unreachable  # type: ignore[method-assign]
    await reconcile_cluster(world.ctx, NS, "c1")
    workloads.get = get  # type: ignore[method-assign]
    found = world.ctx.outcomes.get(NS, "a", "c1")
    assert found is not None and found.state == "Failed", found


async def addon_value(world: World) -> str:
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    live = await workload.get("v1", "ConfigMap", "addon", NS)
    assert live is not None
    return str(live["data"]["v"])


async def test_a_held_cluster_that_could_not_be_contacted_takes_no_new_revision() -> None:
    world = await edited_world(hold=True)
    await fail_one_pass(world)
    outcome = world.ctx.outcomes.get(NS, "a", "c1")
    assert outcome is not None and outcome.revision == ""  # it was taking none
    await reconcile_cluster(world.ctx, NS, "c1")
    found = world.ctx.outcomes.get(NS, "a", "c1")
    assert found is not None and found.reason == "UpdateHeld", found  # it looked
    assert await addon_value(world) == "1"


async def test_a_cluster_held_part_way_through_a_revision_stays_until_released() -> None:
    world = await edited_world()
    await fail_one_pass(world)  # admitted, it was taking the new revision
    outcome = world.ctx.outcomes.get(NS, "a", "c1")
    assert outcome is not None and outcome.revision != ""
    await set_hold(world, True)
    assert await admit_c1(world) == Held(UpdateHeld(), 1, retrying=outcome.revision)
    await reconcile_cluster(world.ctx, NS, "c1")
    assert world.ctx.outcomes.get(NS, "a", "c1") == outcome  # the failure it retries
    assert await addon_value(world) == "1"
    await set_hold(world, False)
    await reconcile_cluster(world.ctx, NS, "c1")
    assert await addon_value(world) == "2"


@pytest.mark.parametrize("waiting_for", ["Window", "Approval", "Step"])
async def test_a_retry_part_way_through_a_revision_waits_for_the_plan(waiting_for: str) -> None:
    world = await edited_world()
    await fail_one_pass(world)  # admitted, it was taking the new revision
    outcome = world.ctx.outcomes.get(NS, "a", "c1")
    assert outcome is not None and outcome.revision != ""
    closed = Plan(frozenset(), "Progressing", 1, 0, "waiting", None, waiting_for=waiting_for)
    world.ctx.rollouts.set(NS, "a", outcome.revision, closed)
    held = Held(RolloutStep(waiting_for), 1, retrying=outcome.revision)
    assert await admit_c1(world) == held
    await reconcile_cluster(world.ctx, NS, "c1")
    assert world.ctx.outcomes.get(NS, "a", "c1") == outcome  # the failure it retries
    assert await addon_value(world) == "1"
