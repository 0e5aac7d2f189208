"""A halted rollout stays halted while its failed clusters merely wait: the retry of
a cluster whose failed pass was part-way through the revision, held by the rollout
(halted, it admits nobody) or by the fleet-wide budget (a failing holder's place
given back), keeps that failure as the cluster's outcome. So the phase does not flap
between Halted and Progressing and ``RolloutHalted`` is told once. The halt ends when
the operator changes the sources, or when the failures are cured: a failed cluster
whose retry runs (it has all of the revision) and succeeds."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from crs_controller.core.api.models import API_VERSION
from crs_controller.engine.memory.budget import FAILING_HOLD, Budget
from crs_controller.engine.reconcile.cluster import reconcile_cluster
from crs_controller.engine.reconcile.context import ClusterContext
from crs_controller.engine.reconcile.crs import reconcile_crs

from .builders import NS, cluster, kubeconfig_secret, payload
from .memory_kube import MemoryKube, Woken, World
from .test_crs_status import restarted
from .test_rollout_failures import (
    CLUSTERS,
    canary_world,
    cut_off,
    edit,
    missing_variable,
    passes,
    status,
    told,
    two_resources,
)

pytestmark = pytest.mark.asyncio

HALTED = "halted: 1 cluster failed (maximum 0): c1"


def reason_on(world: World, name: str) -> str:
    """The reason of CRS ``a``'s outcome the binding of cluster ``name`` records."""
    binding = world.mgmt.objects[(API_VERSION, "ClusterResourceSetBinding", NS, name)]
    return str(binding["spec"]["bindings"][0]["outcome"]["reason"])


def addon_on(world: World, name: str) -> str:
    workload = world.ctx.workloads.clients[name]  # type: ignore[attr-defined]
    return str(workload.objects[("v1", "ConfigMap", "default", "addon")]["data"]["v"])


def reconnect(ctx: ClusterContext) -> None:
    """Undo ``cut_off``: every cluster can be contacted again."""
    vars(ctx.workloads).pop("get", None)


async def three_clusters() -> World:
    """``two_resources("Halt")`` (maxConcurrent 1, maxFailures 0) over c1, c2, c3."""
    world = await two_resources("Halt")
    for name in CLUSTERS[1:]:
        await world.add(cluster(name))
        await world.add(kubeconfig_secret(name))
        world.ctx.workloads.clients[name] = MemoryKube(name)  # type: ignore[attr-defined]
    return world


async def test_a_halted_rollout_stays_halted_while_the_failed_retry_is_held() -> None:
    world = await three_clusters()
    first = restarted(world)
    await passes(world, first, *CLUSTERS)
    await edit(world, "src", payload("addon", "2"))  # applies on c1
    await edit(world, "src2", missing_variable(world))  # then fails there
    for _ in range(6):
        await passes(world, first, *CLUSTERS)
        rollout = status(world)["rollout"]
        assert (rollout["phase"], rollout["message"]) == ("Halted", HALTED)
        assert reason_on(world, "c1") == "UnresolvedVariable"  # not "waiting for its step"
        assert status(world)["failedClusters"] == 1
        world.ctx.clock.advance(300)  # type: ignore[attr-defined]
    assert len(told(world, "RolloutHalted")) == 1
    assert [addon_on(world, name) for name in CLUSTERS] == ["2", "1", "1"]
    # From the bindings alone (a restart, a new leader): the same.
    await reconcile_crs(restarted(world)[0], NS, "a")
    assert status(world)["rollout"]["phase"] == "Halted"

    # The operator mends the sources: a new revision, c1 first.
    await edit(world, "src2", payload("two", "fixed"))
    await passes(world, first, *CLUSTERS)
    assert status(world)["rollout"]["phase"] == "Progressing"
    assert reason_on(world, "c1") == "Applied"
    assert len(told(world, "RolloutHalted")) == 1


async def test_a_failed_cluster_whose_retry_succeeds_cures_the_halt() -> None:
    """The canary, soaking on the new revision, cannot be contacted: halted, and still
    halted on each retry that fails. Contacted again, its retry (it has all of the
    revision) succeeds: the rollout goes on from where it was."""
    world = await canary_world(approval="Automatic")
    first = restarted(world)
    await passes(world, first, *CLUSTERS)
    await edit(world, "src", payload("addon", "2"))
    await passes(world, first, "c1")
    cut_off(first[1], "c1")
    for _ in range(3):
        await passes(world, first, *CLUSTERS)
        assert status(world)["rollout"]["phase"] == "Halted"
    assert len(told(world, "RolloutHalted")) == 1
    reconnect(first[1])
    await passes(world, first, "c1")
    rollout = status(world)["rollout"]
    assert rollout["phase"] == "Progressing"
    assert rollout["message"].startswith("soaking after step 1")
    world.ctx.clock.advance(1802)  # type: ignore[attr-defined]  # the soak, from the cure
    await passes(world, first, *CLUSTERS)
    assert status(world)["rollout"]["phase"] == "Complete"
    assert [addon_on(world, name) for name in CLUSTERS] == ["2", "2", "2"]
    assert len(told(world, "RolloutHalted")) == 1


def with_budget(world: World, places: int, wake: Woken) -> Budget:
    budget = Budget(places, world.ctx.clock, wake=wake)
    settings = replace(world.ctx.settings, max_updating_clusters=places)
    world.ctx = replace(world.ctx, settings=settings, budget=budget)
    return budget


async def test_a_failing_holders_place_given_back_does_not_lift_the_halt() -> None:
    """c1 fails part-way through the revision, holding the one place, while the plan
    made before it failed still admits it; another tenant waits. After FAILING_HOLD
    the place goes to that tenant and c1's retry waits for the budget: it keeps its
    failure (and its place in the line), so the rollout halts and stays halted."""
    woken = Woken()
    world = await two_resources("Halt")
    budget = with_budget(world, 1, woken)
    crs_ctx, ctx = restarted(world)
    await passes(world, (crs_ctx, ctx), "c1")
    await edit(world, "src", payload("addon", "2"))
    await edit(world, "src2", missing_variable(world))
    await reconcile_crs(crs_ctx, NS, "a")  # admits c1
    clock: Any = world.ctx.clock
    await reconcile_cluster(ctx, NS, "c1")  # fails, keeping its place
    world.sync_bindings()
    assert not budget.ask(("tenant-2", "x"), "x", 1)
    clock.advance(FAILING_HOLD)
    await reconcile_cluster(ctx, NS, "c1")  # fails again, and gives the place back
    world.sync_bindings()
    assert woken == [("tenant-2", "x")] and budget.ask(("tenant-2", "x"), "x", 1)
    await reconcile_cluster(ctx, NS, "c1")  # the retry waits for the budget
    world.sync_bindings()
    assert reason_on(world, "c1") == "UnresolvedVariable"
    assert budget.pairs((NS, "c1")) == {"a"} and budget.waiting == 1  # in the line
    for _ in range(3):
        await reconcile_crs(crs_ctx, NS, "a")
        assert (status(world)["rollout"]["phase"], status(world)["rollout"]["message"]) == (
            "Halted",
            HALTED,
        )
        await reconcile_cluster(ctx, NS, "c1")
        world.sync_bindings()
        assert reason_on(world, "c1") == "UnresolvedVariable"
    assert len(told(world, "RolloutHalted")) == 1
