"""A change window closing while a rollout goes on: the CRS reconcile asks to look
again when the window closes, and its plan then lets no cluster start the new
revision, even one it let in while the window was open. Time is a fake clock."""

from __future__ import annotations

from datetime import timedelta

import pytest

from crs_controller.engine.reconcile.cluster import reconcile_cluster
from crs_controller.engine.reconcile.context import ClusterContext, CRSContext
from crs_controller.engine.reconcile.crs import reconcile_crs

from .builders import NS, cluster, crs, kubeconfig_secret, payload, world_with
from .memory_kube import MemoryKube, World
from .test_crs_status import restarted
from .test_rollout_failures import edit, status, sync_sources

pytestmark = pytest.mark.asyncio

CLUSTERS = ("c1", "c2", "c3")
EARLY = {"kind": "Allow", "schedule": "0 2 * * *", "duration": "2h"}  # 02:00-04:00 UTC


async def three_clusters_on_the_first_revision() -> tuple[World, CRSContext, ClusterContext]:
    """c1, c2 and c3, each on the first revision, the rollout Complete."""
    world = await world_with(crs("a", "src", rollout={"maxConcurrent": 1, "windows": [EARLY]}))
    for name in CLUSTERS[1:]:
        world.ctx.workloads.clients[name] = MemoryKube(name)  # type: ignore[attr-defined]
        await world.add(cluster(name))
        await world.add(kubeconfig_secret(name))
    crs_ctx, cluster_ctx = restarted(world)  # one process: the plan is shared
    await reconcile_crs(crs_ctx, NS, "a")
    sync_sources(world)
    for name in CLUSTERS:  # first installs go whatever the window
        await reconcile_cluster(cluster_ctx, NS, name)
        world.sync_bindings()
    await reconcile_crs(crs_ctx, NS, "a")
    assert status(world)["rollout"]["phase"] == "Complete"
    return world, crs_ctx, cluster_ctx


async def test_a_cluster_let_in_before_the_window_closes_is_held_once_it_has() -> None:
    world, crs_ctx, cluster_ctx = await three_clusters_on_the_first_revision()
    clock = world.shared.clock
    wall = clock.wall()
    closing = (wall + timedelta(days=1)).replace(hour=4, minute=0, second=0, microsecond=0)
    clock.advance((closing - wall).total_seconds() - 60)  # type: ignore[attr-defined]
    await edit(world, "src", payload("addon", "2"))
    sync_sources(world)

    result = await reconcile_crs(crs_ctx, NS, "a")
    planned = crs_ctx.rollouts.plan(NS, "a")
    assert planned is not None and planned[1].admit == {"c1"}
    assert result.requeue_after == 60.0  # the window's closing

    clock.advance(60)  # type: ignore[attr-defined]
    await reconcile_crs(crs_ctx, NS, "a")
    target = planned[0]
    assert not crs_ctx.rollouts.admitted(NS, "a", "c1", target)
    assert status(world)["rollout"]["waitingFor"] == "Window"
    await reconcile_cluster(cluster_ctx, NS, "c1")
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    assert workload.objects[("v1", "ConfigMap", "default", "addon")]["data"] == {"v": "1"}
    binding = world.bindings.get(NS, "c1")
    assert binding is not None and binding.model is not None
    (entry,) = binding.model.spec.bindings
    assert entry.outcome is not None and entry.outcome.reason == "OutsideWindow"
