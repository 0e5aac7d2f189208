"""The line of ``--max-updating-clusters`` is never blocked while a place is free: a
Cluster being deleted gives its place back and leaves the line, however long its
finalizers keep it, and a waiting cluster whose pass ends without an outcome (timed
out, cancelled) steps aside, while a place it holds stays held."""

from __future__ import annotations

import asyncio
from typing import Any

from crs_controller.engine.memory.budget import ClusterKey
from crs_controller.engine.reconcile.cluster import reconcile_cluster

from .memory_kube import CLUSTER_API, Woken, World
from .test_admission import NS, edited_world

HOLDER: ClusterKey = ("tenant-1", "a")
BEHIND: ClusterKey = ("tenant-3", "c")


async def waiting_line(woken: Woken) -> World:
    """Budget 1: HOLDER updating; c1 waiting, then BEHIND."""
    world = await edited_world(budget=1, wake=woken)
    budget = world.ctx.budget
    assert budget.ask(HOLDER, "x", 1)
    await reconcile_cluster(world.ctx, NS, "c1")
    assert budget.pairs((NS, "c1")) == {"a"}
    assert not budget.ask(BEHIND, "y", 1)
    return world


async def delete_kept(world: World, name: str) -> None:
    """The Cluster is deleted, and a finalizer of its tenant keeps it."""
    live = await world.mgmt.get(CLUSTER_API, "Cluster", name, NS)
    live["metadata"]["deletionTimestamp"] = "2099-01-01T00:00:00Z"
    live["metadata"]["finalizers"] = ["tenant.example/keep"]
    await world.update(live)


async def test_a_waiter_being_deleted_leaves_the_line() -> None:
    woken = Woken()
    world = await waiting_line(woken)
    budget = world.ctx.budget
    await delete_kept(world, "c1")
    await reconcile_cluster(world.ctx, NS, "c1")
    assert budget.pairs((NS, "c1")) == frozenset() and budget.waiting == 1
    assert budget.release(HOLDER, "x") == (BEHIND,)
    assert budget.ask(BEHIND, "y", 1)


async def test_a_holder_being_deleted_gives_its_place_back() -> None:
    woken = Woken()
    world = await edited_world(budget=1, wake=woken)
    budget = world.ctx.budget
    assert budget.ask((NS, "c1"), "a", 1)
    assert not budget.ask(BEHIND, "y", 1)
    await delete_kept(world, "c1")
    await reconcile_cluster(world.ctx, NS, "c1")
    assert budget.updating == 0 and woken[-1] == BEHIND
    assert budget.ask(BEHIND, "y", 1)


async def hang(*args: Any, **kwargs: Any) -> Any:
    await asyncio.Event().wait()


async def timed_out(world: World, name: str) -> None:
    """A pass of the cluster that runs into its timeout (as the runtime's does)."""
    try:
        async with asyncio.timeout(0):
            await reconcile_cluster(world.ctx, NS, name)
    except TimeoutError:
        return
    raise AssertionError("the pass was expected to time out")


async def test_a_woken_waiter_whose_pass_times_out_steps_aside() -> None:
    woken = Woken()
    world = await waiting_line(woken)
    budget = world.ctx.budget
    world.ctx.workloads.get = hang  # type: ignore[method-assign]
    assert budget.release(HOLDER, "x") == ((NS, "c1"),)
    await timed_out(world, "c1")
    assert budget.pairs((NS, "c1")) == frozenset()
    assert woken[-1] == BEHIND and budget.ask(BEHIND, "y", 1)


async def test_a_holder_whose_pass_times_out_keeps_its_place() -> None:
    world = await edited_world(budget=1)
    budget = world.ctx.budget
    assert budget.ask((NS, "c1"), "a", 1)
    world.ctx.workloads.get = hang  # type: ignore[method-assign]
    await timed_out(world, "c1")
    assert budget.pairs((NS, "c1")) == {"a"} and budget.updating == 1
    assert not budget.ask(BEHIND, "y", 1)
