"""A binding's life beside its Cluster and its CRSs: it records the Cluster's uid (and
is owned by the Cluster), a Cluster recreated under the same name starts afresh and
loses nothing to the inventory of the one before, a binding the garbage collector
took a CRS's owner reference from still drives that CRS's cleanup. A Cluster moved by
``clusterctl move`` (another uid, the binding copied and owned by it) keeps its
binding, and nothing about the binding is decided while the Cluster is paused."""

from __future__ import annotations

from typing import Any

import pytest

from crs_controller.core.api.clusters import HOLD_UPDATES_ANNOTATION
from crs_controller.core.api.models import API_VERSION, CLUSTER_UID_ANNOTATION
from crs_controller.engine.io.parsed_crss import ParsedCRSs
from crs_controller.engine.reconcile.hook import hook_status

from .builders import NS, cluster, configmap_source, crs, outcome, payload, reconcile, world_with
from .memory_kube import CLUSTER_API, MemoryKube, World

BINDING = (API_VERSION, "ClusterResourceSetBinding", NS, "c1")
CRS_KEY = (API_VERSION, "ClusterResourceSet", NS, "a")


def cluster_owners(world: World) -> list[dict[str, Any]]:
    refs = world.mgmt.objects[BINDING]["metadata"].get("ownerReferences") or []
    return [r for r in refs if r["kind"] == "Cluster"]


async def drop_owners(world: World, kind: str) -> None:
    """Take the binding's owner references of ``kind`` off (as the garbage collector
    does once an owner is gone), and show it to the cache."""
    live = await world.mgmt.get(*BINDING[:2], "c1", NS)
    assert live is not None
    refs = live["metadata"]["ownerReferences"]
    live["metadata"]["ownerReferences"] = [r for r in refs if r["kind"] != kind]
    await world.mgmt.replace(live)
    world.sync_bindings()


async def cluster_uid(world: World) -> str:
    live = await world.mgmt.get(CLUSTER_API, "Cluster", "c1", NS)
    assert live is not None
    return str(live["metadata"]["uid"])


async def test_a_binding_records_its_clusters_uid_and_is_owned_by_it() -> None:
    world = await world_with(crs("a", "src"))
    await reconcile(world)
    uid = await cluster_uid(world)
    assert cluster_owners(world) == [
        {"apiVersion": CLUSTER_API, "kind": "Cluster", "name": "c1", "uid": uid}
    ]
    assert world.mgmt.objects[BINDING]["metadata"]["annotations"][CLUSTER_UID_ANNOTATION] == uid
    kinds = [r["kind"] for r in world.mgmt.objects[BINDING]["metadata"]["ownerReferences"]]
    assert kinds == ["Cluster", "ClusterResourceSet"]


async def test_a_binding_written_before_it_recorded_the_cluster_gets_it_and_is_trusted() -> None:
    world = await world_with(crs("a", "src", mode="ApplyOnce"))
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    live = await world.mgmt.get(*BINDING[:2], "c1", NS)
    assert live is not None
    del live["metadata"]["annotations"]
    await world.mgmt.replace(live)
    await drop_owners(world, "Cluster")
    workload.requests.clear()
    await reconcile(world)
    assert workload.writes() == []  # its inventory stands: nothing applied again
    assert [r["uid"] for r in cluster_owners(world)] == [await cluster_uid(world)]
    assert CLUSTER_UID_ANNOTATION in world.mgmt.objects[BINDING]["metadata"]["annotations"]


@pytest.mark.parametrize("mode", ["ApplyOnce", "Reconcile"])
@pytest.mark.parametrize("collected", [False, True], ids=["binding-as-left", "owner-ref-collected"])
async def test_a_cluster_recreated_under_the_same_name_is_applied_afresh_and_loses_nothing(
    mode: str, collected: bool
) -> None:
    source = configmap_source("src", payload("addon"), payload("extra"))
    world = await world_with(
        crs("a", "src", mode=mode, deletionPolicy="Delete"), mode_source=source
    )
    await reconcile(world)
    old_uid = await cluster_uid(world)
    # Meanwhile (the controller away): the Cluster is deleted, the garbage collector
    # maybe drops the binding's owner reference to it, the source loses "extra", and
    # a new Cluster of that name comes up holding its own "extra".
    await world.mgmt.delete(CLUSTER_API, "Cluster", "c1", NS)
    if collected:
        await drop_owners(world, "Cluster")
    edited = await world.mgmt.get("v1", "ConfigMap", "src", NS)
    assert edited is not None
    edited["data"] = configmap_source("src", payload("addon"))["data"]
    await world.update(edited)
    fresh = MemoryKube("c1")
    await fresh.create(payload("extra", "theirs"))
    fresh.requests.clear()
    world.ctx.workloads.clients["c1"] = fresh  # type: ignore[attr-defined]
    await world.add(cluster("c1"))
    await reconcile(world)
    assert fresh.writes() == [("apply", "ConfigMap/addon")]  # nothing deleted
    assert await fresh.get("v1", "ConfigMap", "extra", NS) is not None
    new_uid = await cluster_uid(world)
    assert new_uid != old_uid
    assert [r["uid"] for r in cluster_owners(world)] == [new_uid]
    entry = world.bindings.get(NS, "c1").entries()["a"]  # type: ignore[union-attr]
    assert [o.name for r in entry.resources for o in r.objects] == ["addon"]


async def test_a_binding_that_lost_its_crs_owner_reference_still_drives_its_cleanup() -> None:
    # Foreground deletion of a CRS: the garbage collector takes the CRS's owner
    # reference off the binding (its Cluster still owns it) rather than delete it.
    world = await world_with(crs("a", "src", deletionPolicy="Delete"))
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    assert ("apply", "ConfigMap/addon") in workload.writes()
    await drop_owners(world, "ClusterResourceSet")
    stored = world.mgmt.objects[CRS_KEY]
    deleting = {**stored["metadata"], "deletionTimestamp": "2099-01-01T00:00:00Z"}
    await world.update({**stored, "metadata": deleting})
    await reconcile(world)
    assert ("delete", "ConfigMap/addon") in workload.writes()
    assert world.bindings.get(NS, "c1") is None


async def moved(world: World) -> str:
    """``clusterctl move`` as the target management cluster sees it: the Cluster
    created anew (another uid) and paused, then the binding copied with its
    annotations as they were and its owner references rebuilt with the new uids."""
    copied = await world.mgmt.get(*BINDING[:2], "c1", NS)
    assert copied is not None
    await world.mgmt.delete(CLUSTER_API, "Cluster", "c1", NS)
    await world.add(cluster("c1", paused=True))
    new_uid = await cluster_uid(world)
    refs = copied["metadata"]["ownerReferences"]
    copied["metadata"]["ownerReferences"] = [
        {**r, "uid": new_uid} if r["kind"] == "Cluster" else r for r in refs
    ]
    await world.mgmt.replace(copied)
    world.sync_bindings()
    return new_uid


async def unpause(world: World, **annotations: str) -> None:
    live = await world.mgmt.get(CLUSTER_API, "Cluster", "c1", NS)
    assert live is not None
    live["spec"] = {}
    live["metadata"].setdefault("annotations", {}).update(annotations)
    await world.update(live)


async def edit_source(world: World, *objects: dict[str, Any]) -> None:
    edited = await world.mgmt.get("v1", "ConfigMap", "src", NS)
    assert edited is not None
    edited["data"] = configmap_source("src", *objects)["data"]
    await world.update(edited)


async def test_a_moved_cluster_keeps_its_binding_while_paused_then_prunes_from_it() -> None:
    source = configmap_source("src", payload("addon"), payload("extra"))
    world = await world_with(crs("a", "src", deletionPolicy="Delete"), mode_source=source)
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    old_uid = await cluster_uid(world)
    new_uid = await moved(world)
    world.mgmt.requests.clear()
    await reconcile(world)  # still paused: clusterctl unpauses it once all is moved
    assert world.mgmt.writes() == []
    assert world.mgmt.objects[BINDING]["metadata"]["annotations"][CLUSTER_UID_ANNOTATION] == old_uid
    # Unpaused; meanwhile the source lost "extra".
    await unpause(world)
    await edit_source(world, payload("addon"))
    workload.requests.clear()
    world.mgmt.requests.clear()
    await reconcile(world)
    assert ("delete", "ConfigMap/extra") in workload.writes()
    assert ("apply", "ConfigMap/addon") not in workload.writes()  # not a first install
    assert world.mgmt.writes() == [("replace", "ClusterResourceSetBinding/c1")]
    assert world.mgmt.objects[BINDING]["metadata"]["annotations"][CLUSTER_UID_ANNOTATION] == new_uid
    assert [r["uid"] for r in cluster_owners(world)] == [new_uid]


async def test_a_moved_cluster_that_holds_updates_takes_no_new_revision() -> None:
    world = await world_with(crs("a", "src"))
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    await moved(world)
    await unpause(world, **{HOLD_UPDATES_ANNOTATION: "true"})
    await edit_source(world, payload("addon", "v2"))
    workload.requests.clear()
    await reconcile(world)
    assert outcome(world, "a")[0] == "UpdateHeld"
    assert workload.writes() == []


async def test_a_cluster_recreated_paused_keeps_the_old_binding_until_unpaused() -> None:
    world = await world_with(crs("a", "src"))
    await reconcile(world)
    await world.mgmt.delete(CLUSTER_API, "Cluster", "c1", NS)
    await world.add(cluster("c1", paused=True))
    world.mgmt.requests.clear()
    await reconcile(world)
    assert world.mgmt.writes() == []
    await unpause(world)
    await reconcile(world)
    # Its owner reference names the Cluster that is gone: dropped, applied afresh.
    assert ("delete", "ClusterResourceSetBinding/c1") in world.mgmt.writes()
    assert [r["uid"] for r in cluster_owners(world)] == [await cluster_uid(world)]


async def test_before_cluster_delete_holds_for_what_was_applied_before_a_move() -> None:
    world = await world_with(crs("a", "src", deletionPolicy="Delete", uninstall={"ensure": True}))
    await reconcile(world)
    await moved(world)
    await unpause(world)
    live = await world.mgmt.get(CLUSTER_API, "Cluster", "c1", NS)
    assert live is not None
    live["metadata"]["deletionTimestamp"] = "2099-01-01T00:00:00Z"
    await world.update(live)
    mgmt: Any = world.mgmt
    now = world.ctx.clock.wall()
    retry_after, message = await hook_status(mgmt, CLUSTER_API, live, now, parsed=ParsedCRSs())
    assert retry_after > 0, message
