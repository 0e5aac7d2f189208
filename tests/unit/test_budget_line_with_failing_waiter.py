"""A cluster waiting for a place of ``--max-updating-clusters`` whose pass keeps failing
(a broken kubeconfig, a workload server that cannot be reached) steps aside: woken at
the head of the line, it never holds back the clusters behind it, of any namespace,
while a place is free. Its retry asks again, behind them. A cluster holding a place
keeps it through a failed pass (``test_admission``): the count never exceeds N."""

from __future__ import annotations

from typing import Any

import pytest

from crs_controller.core.errors import Unreachable
from crs_controller.engine.memory.budget import ClusterKey
from crs_controller.engine.reconcile.cluster import reconcile_cluster

from .memory_kube import Woken, World
from .test_admission import NS, edited_world

HOLDER: ClusterKey = ("tenant-1", "a")  # updating, with the one place
BEHIND: ClusterKey = ("tenant-3", "c")  # waiting behind c1


def unreachable(*args: Any, **kwargs: Any) -> Any:
    raise Unreachable("c1: GET /version: ConnectError")


def broken(*args: Any, **kwargs: Any) -> Any:
    raise ValueError("kubeconfig: no current context")


async def waiting_line(woken: Woken) -> World:
    """Budget 1: HOLDER updating; c1 (this namespace) waiting, then BEHIND."""
    world = await edited_world(budget=1, wake=woken)
    budget = world.ctx.budget
    assert budget.ask(HOLDER, "x", 1)
    await reconcile_cluster(world.ctx, NS, "c1")
    assert budget.pairs((NS, "c1")) == {"a"} and not budget.may_go((NS, "c1"))
    assert not budget.ask(BEHIND, "y", 1)
    assert budget.waiting == 2
    return world


@pytest.mark.parametrize("fails", [unreachable, broken], ids=["unreachable", "broken"])
async def test_a_woken_waiter_whose_pass_fails_lets_the_next_one_go(fails: Any) -> None:
    woken = Woken()
    world = await waiting_line(woken)
    budget, workloads = world.ctx.budget, world.ctx.workloads
    get = workloads.get
    workloads.get = fails  # type: ignore[method-assign]
    assert budget.release(HOLDER, "x") == ((NS, "c1"),)
    await reconcile_cluster(world.ctx, NS, "c1")  # woken, it fails before it can ask
    assert world.index.entry(NS, "c1", "a") is not None
    assert woken[-1] == BEHIND
    assert budget.may_go(BEHIND) and budget.ask(BEHIND, "y", 1)
    assert budget.updating == 1
    # Its retry, the server back: it asks again, behind the cluster that went.
    workloads.get = get  # type: ignore[method-assign]
    c1 = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    applied = len(c1.writes())
    await reconcile_cluster(world.ctx, NS, "c1")
    assert budget.pairs((NS, "c1")) == {"a"} and not budget.may_go((NS, "c1"))
    assert len(c1.writes()) == applied  # it waits: nothing updated beside the holder
    assert budget.updating == 1
    assert budget.release(BEHIND, "y") == ((NS, "c1"),)


async def test_a_waiter_failing_again_and_again_never_holds_the_line() -> None:
    woken = Woken()
    world = await waiting_line(woken)
    budget = world.ctx.budget
    world.ctx.workloads.get = unreachable  # type: ignore[method-assign]
    for _ in range(3):
        await reconcile_cluster(world.ctx, NS, "c1")
    assert budget.waiting == 1 and budget.pairs((NS, "c1")) == frozenset()
    assert budget.release(HOLDER, "x") == (BEHIND,)
    assert budget.ask(BEHIND, "y", 1)
