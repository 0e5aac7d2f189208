"""Clusters the process's memory lets go are queued even when the pass that let them go
fails or times out afterwards: a budget place given back (a pair done, a Cluster
deleted) wakes the waiting cluster, and a rollout plan wakes the clusters it admits,
as it happens. A pass that fails later returns no Result, and its retry finds the
place free already or the plan unchanged: it would wake nobody, and every tenant's
updates (or the rollout) would stall. The retry neither counts the cluster twice nor
loses the place: whoever was woken takes it, and the cluster whose pass failed goes
after it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import replace
from typing import Any

import pytest

from crs_controller.core.errors import APIError
from crs_controller.core.rollout.plan import Plan
from crs_controller.engine.memory.plans import Rollouts
from crs_controller.engine.reconcile.cluster import reconcile_cluster
from crs_controller.engine.reconcile.context import CRSContext, Settings
from crs_controller.engine.reconcile.crs import reconcile_crs
from crs_controller.engine.reconcile.result import cluster_key
from crs_controller.engine.runtime.controller import Controller

from .builders import NS, cluster, crs, kubeconfig_secret, payload, world_with
from .fake_clock import FakeClock
from .memory_kube import CLUSTER_API, MemoryKube, Woken, World
from .test_admission import edited_world
from .test_rollout_failures import edit, sync_sources


class Stuck:
    """An awaited write that never answers until cancelled (a management cluster
    that hangs: the pass runs into --reconcile-timeout); ``reached`` once called."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.reached.set()
        await asyncio.Event().wait()


async def cancelled_at(stuck: Stuck, running: Awaitable[Any]) -> None:
    """Run a pass until it hangs in ``stuck``, then cancel it, as the timeout does."""
    task = asyncio.ensure_future(running)
    await stuck.reached.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def failed(running: Awaitable[Any]) -> None:
    with pytest.raises(APIError):
        await running


def refusing(*args: Any, **kwargs: Any) -> Any:
    raise APIError("management cluster: 503 Service Unavailable")


async def budget_world(woken: Woken) -> World:
    """c1 updating with the one place of the budget; another cluster waits for it."""
    world = await edited_world(budget=1, wake=woken)
    assert world.ctx.budget.ask((NS, "c1"), "a", 1)
    assert not world.ctx.budget.ask((NS, "other"), "x", 1)
    return world


@pytest.mark.parametrize("stuck", [True, False], ids=["timed-out", "failed"])
async def test_a_pass_that_fails_after_giving_its_place_back_still_wakes_the_waiter(
    stuck: bool,
) -> None:
    woken = Woken()
    world = await budget_world(woken)
    write = world.ctx.bindings.write
    hang = Stuck()
    world.ctx.bindings.write = hang if stuck else refusing  # type: ignore[method-assign]
    if stuck:
        await cancelled_at(hang, reconcile_cluster(world.ctx, NS, "c1"))
    else:
        await failed(reconcile_cluster(world.ctx, NS, "c1"))
    assert woken == [(NS, "other")]
    assert world.ctx.budget.updating == 0
    # The retry: the binding did not record c1 done, so c1 asks again, behind the
    # cluster woken for the place. Nobody holds two places, nobody waits for none.
    world.ctx.bindings.write = write  # type: ignore[method-assign]
    await reconcile_cluster(world.ctx, NS, "c1")
    assert world.ctx.budget.ask((NS, "other"), "x", 1)
    assert not world.ctx.budget.may_go((NS, "c1"))
    assert world.ctx.budget.updating == 1
    world.ctx.budget.release((NS, "other"), "x")
    assert woken[-1] == (NS, "c1")


async def test_a_deleted_cluster_whose_binding_cannot_be_deleted_still_wakes_the_waiter() -> None:
    woken = Woken()
    world = await budget_world(woken)
    del world.mgmt.objects[(CLUSTER_API, "Cluster", NS, "c1")]
    world.index.update_cluster(world.clusters.remove(NS, "c1"), None)
    world.ctx.bindings.delete = refusing  # type: ignore[method-assign]
    await failed(reconcile_cluster(world.ctx, NS, "c1"))
    assert woken == [(NS, "other")]
    assert world.ctx.budget.may_go((NS, "other"))


async def edited_rollout(woken: Woken) -> tuple[World, CRSContext]:
    """Two clusters on the first revision of a CRS rolling out one at a time, and its
    source edited: the next CRS pass plans the new revision and admits one."""
    world = await world_with(crs("a", "src", rollout={"maxConcurrent": 1}))
    world.ctx.workloads.clients["c2"] = MemoryKube("c2")  # type: ignore[attr-defined]
    await world.add(cluster("c2"))
    await world.add(kubeconfig_secret("c2"))
    ctx = replace(world.crs_context(), rollouts=Rollouts(wake=woken))
    await reconcile_crs(ctx, NS, "a")
    sync_sources(world)
    for name in ("c1", "c2"):
        await reconcile_cluster(world.ctx, NS, name)
        world.sync_bindings()
    await reconcile_crs(ctx, NS, "a")
    sync_sources(world)
    await edit(world, "src", payload("addon2"))
    woken.clear()
    return world, ctx


@pytest.mark.parametrize("stuck", [True, False], ids=["timed-out", "crashed"])
async def test_a_crs_pass_that_fails_after_planning_still_wakes_the_clusters_it_admits(
    stuck: bool,
) -> None:
    woken = Woken()
    _, ctx = await edited_rollout(woken)
    hang = Stuck()

    async def crash(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("an answer nobody foresaw")

    put_status = ctx.crss.put_status
    ctx.crss.put_status = hang if stuck else crash  # type: ignore[method-assign]
    if stuck:
        await cancelled_at(hang, reconcile_crs(ctx, NS, "a"))
    else:
        with pytest.raises(RuntimeError):
            await reconcile_crs(ctx, NS, "a")
    planned = ctx.rollouts.plan(NS, "a")
    assert planned is not None and len(planned[1].admit) == 1
    # Those it admits, and (a new revision: its plan is news) those it holds back.
    assert sorted(woken) == [(NS, "c1"), (NS, "c2")]
    assert {(NS, name) for name in planned[1].admit} <= set(woken)
    # The retry plans the same: it has nothing new to wake.
    ctx.crss.put_status = put_status  # type: ignore[method-assign]
    await reconcile_crs(ctx, NS, "a")
    assert sorted(woken) == [(NS, "c1"), (NS, "c2")]


def test_the_controller_queues_what_its_budget_and_plans_wake() -> None:
    settings = Settings(max_updating_clusters=1)
    controller = Controller(MemoryKube("management"), settings, CLUSTER_API, clock=FakeClock())
    budget = controller.cluster_ctx.budget
    assert budget.ask((NS, "c1"), "a", 1) and not budget.ask((NS, "c2"), "a", 1)
    budget.release((NS, "c1"), "a")
    assert cluster_key(NS, "c2") in controller.queue.ready_keys()
    admitting = Plan(frozenset({"c3"}), "Progressing", 1, 0, "", None)
    controller.crs_ctx.rollouts.set(NS, "a", "r1", admitting)
    assert cluster_key(NS, "c3") in controller.queue.ready_keys()
