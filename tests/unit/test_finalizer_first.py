"""A CRS that deletes what it applied is applied to clusters only once it carries its
finalizer: deleted before, the API server would remove it at once, and what it applied
would stay behind."""

from __future__ import annotations

from typing import Any

from crs_controller.core.api.models import API_VERSION, FINALIZER
from crs_controller.core.spec.objects import parse_crs
from crs_controller.engine.reconcile.context import Settings
from crs_controller.engine.reconcile.crs import reconcile_crs
from crs_controller.engine.reconcile.result import cluster_key
from crs_controller.engine.runtime.controller import Controller

from .builders import NS, cluster, crs, reconcile, world_with
from .fake_clock import FakeClock
from .memory_kube import CLUSTER_API, MemoryKube

CRS_KEY = (API_VERSION, "ClusterResourceSet", NS, "a")


def unfinalized(body: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in body["metadata"].items() if k != "finalizers"}
    return {**body, "metadata": meta}


async def test_a_crs_that_deletes_what_it_applied_is_applied_once_it_carries_its_finalizer() -> (
    None
):
    world = await world_with(unfinalized(crs("a", "src", deletionPolicy="Delete")))
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)  # the cluster's pass ran before the leader's CRS pass
    assert workload.writes() == []
    assert world.bindings.get(NS, "c1") is None
    await reconcile_crs(world.crs_context(), NS, "a")  # the leader puts the finalizer on
    assert FINALIZER in world.crss.get(NS, "a").meta.finalizers  # type: ignore[union-attr]
    await reconcile(world)
    assert ("apply", "ConfigMap/addon") in workload.writes()
    stored = world.mgmt.objects[CRS_KEY]
    deleting = {**stored["metadata"], "deletionTimestamp": "2099-01-01T00:00:00Z"}
    await world.update({**stored, "metadata": deleting})
    await reconcile(world)
    assert ("delete", "ConfigMap/addon") in workload.writes()


async def test_an_orphaning_crs_is_applied_without_waiting_for_its_finalizer() -> None:
    world = await world_with(crs("a", "src"))
    assert not world.crss.get(NS, "a").meta.finalizers  # type: ignore[union-attr]
    await reconcile(world)
    assert ("apply", "ConfigMap/addon") in world.ctx.workloads.clients["c1"].writes()  # type: ignore[attr-defined]


def test_a_finalizer_written_wakes_the_clusters_the_crs_selects() -> None:
    controller = Controller(MemoryKube("management"), Settings(), CLUSTER_API, clock=FakeClock())
    clusters = controller.informers[1]
    controller.index.update_cluster(None, clusters.put(cluster("c1")))
    body = crs("a", "src", deletionPolicy="Delete")
    waiting, finalized = parse_crs(unfinalized(body)), parse_crs(body)
    assert waiting.awaits_finalizer and not finalized.awaits_finalizer
    controller._on_crs(waiting, waiting)  # nothing the clusters act on changed
    assert cluster_key(NS, "c1") not in controller.queue.ready_keys()
    controller._on_crs(waiting, finalized)
    assert cluster_key(NS, "c1") in controller.queue.ready_keys()


async def test_the_leader_putting_the_finalizer_on_wakes_the_clusters_it_selects() -> None:
    # The write goes into the cache at once: the watch's copy of it changes nothing
    # there, so it is the CRS pass itself that must wake the clusters.
    world = await world_with(unfinalized(crs("a", "src", deletionPolicy="Delete")))
    first = await reconcile_crs(world.crs_context(), NS, "a")
    assert cluster_key(NS, "c1") in {wake.key for wake in first.wake}
    again = await reconcile_crs(world.crs_context(), NS, "a")  # the finalizer is on
    assert cluster_key(NS, "c1") not in {wake.key for wake in again.wake}
