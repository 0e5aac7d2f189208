"""The beforeDelete Jobs of a cleanup before a Cluster's deletion, against in-memory
clients: a paused CRS runs no hook, deletes nothing and does not hold the deletion."""

from __future__ import annotations

from typing import Any

from crs_controller.core.api.models import API_VERSION
from crs_controller.engine.io.parsed_crss import ParsedCRSs
from crs_controller.engine.reconcile.hook import hook_status

from .builders import NS, configmap_source, crs, reconcile, world_with
from .memory_kube import CLUSTER_API, World

Obj = dict[str, Any]
CLEANUP = {"ensure": True, "beforeDelete": [{"kind": "ConfigMap", "name": "pre"}]}


def hook_job(name: str = "pre-delete", image: str = "busybox") -> Obj:
    container = {"name": "wipe", "image": image, "command": ["true"]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"template": {"spec": {"containers": [container], "restartPolicy": "Never"}}},
    }


async def applied_then_deleting(*crss: Obj, hook: Obj | None = None) -> World:
    """``crss`` applied to c1, the hook ConfigMap ``pre`` holding ``hook``; then c1 is
    being deleted."""
    world = await world_with(*crss)
    await world.add(configmap_source("pre", hook or hook_job()))
    await reconcile(world)
    await mark(world, CLUSTER_API, "Cluster", "c1", deletionTimestamp="2026-11-22T10:00:00Z")
    return world


async def mark(world: World, api_version: str, kind: str, name: str, **meta: Any) -> None:
    live = await world.mgmt.get(api_version, kind, name, NS)
    assert live is not None
    live["metadata"].update(meta)
    await world.update(live)


async def held(world: World) -> bool:
    live = await world.mgmt.get(CLUSTER_API, "Cluster", "c1", NS)
    assert live is not None
    mgmt: Any = world.mgmt
    now = world.ctx.clock.wall()
    retry_after, _ = await hook_status(mgmt, CLUSTER_API, live, now, parsed=ParsedCRSs())
    return retry_after > 0


async def test_a_paused_crs_runs_no_hook_and_does_not_hold_the_deletion() -> None:
    world = await applied_then_deleting(crs("a", "src", deletionPolicy="Delete", uninstall=CLEANUP))
    assert await held(world)  # the positive sign: unpaused, it would hold
    paused = {"cluster.x-k8s.io/paused": "true"}
    await mark(world, API_VERSION, "ClusterResourceSet", "a", annotations=paused)
    workload = world.ctx.workloads.clients["c1"]
    before = len(workload.writes())
    await reconcile(world)
    assert workload.writes()[before:] == []
    assert not await held(world)
    assert world.index.holders(NS, "a") == ["c1"]  # its entry stays, as anywhere
