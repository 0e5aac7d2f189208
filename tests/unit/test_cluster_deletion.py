"""A ClusterResourceSet deleted while a Cluster it is recorded on is being deleted
too: the Cluster lets go of it at once (its entry leaves the binding and its
finalizer goes) when it has no cleanup to do there — Orphan, Delete without
``uninstall.ensure``, or past ``uninstall.timeout`` — without a request to the
workload cluster, and however long the Cluster's own deletion takes; within its
timeout an ``uninstall.ensure`` CRS cleans up first. A CRS not being deleted keeps
its entry until the Cluster is gone."""

from __future__ import annotations

from typing import Any

import pytest

from crs_controller.core.api.models import API_VERSION, FINALIZER
from crs_controller.engine.reconcile.crs import reconcile_crs

from .builders import NS, crs, reconcile, world_with
from .memory_kube import CLUSTER_API, World

SOON = "2026-11-22T10:00:00Z"  # the fake clock's start: within any timeout
LONG_AGO = "2026-01-01T00:00:00Z"  # past any timeout used here


async def deleting(world: World, kind: str, api_version: str, name: str, stamp: str) -> None:
    live = await world.mgmt.get(api_version, kind, name, NS)
    assert live is not None
    live["metadata"]["deletionTimestamp"] = stamp
    await world.update(live)


async def finalized(world: World) -> bool:
    """Cluster passes and CRS passes, as the queue would run them, until the CRS's
    finalizer is gone (True) or a few rounds went by (False)."""
    ctx = world.crs_context()
    for _ in range(4):
        await reconcile(world)
        then = await reconcile_crs(ctx, NS, "a")
        live = await world.mgmt.get(API_VERSION, "ClusterResourceSet", "a", NS)
        if live is None or FINALIZER not in live["metadata"].get("finalizers", []):
            return True
        world.ctx.clock.advance(then.requeue_after or 0)  # type: ignore[attr-defined]
    return False


async def both_deleting(cluster_since: str, **spec: Any) -> World:
    """CRS ``a`` (``spec``) and ``b`` applied to c1; then c1 is being deleted (held by
    some other finalizer, say its infrastructure's), and ``a`` is deleted."""
    world = await world_with(crs("a", "src", **spec), crs("b", "src"))
    await reconcile(world)
    await reconcile_crs(world.crs_context(), NS, "a")  # its finalizer
    await deleting(world, "Cluster", CLUSTER_API, "c1", cluster_since)
    await deleting(world, "ClusterResourceSet", API_VERSION, "a", "2026-11-22T10:00:00Z")
    return world


@pytest.mark.parametrize(
    ("spec", "since"),
    [
        pytest.param({}, SOON, id="orphan"),
        pytest.param({"deletionPolicy": "Delete"}, SOON, id="delete"),
        pytest.param({"uninstall": {"ensure": False}}, SOON, id="orphan-no-ensure"),
        pytest.param(
            {"deletionPolicy": "Delete", "uninstall": {"ensure": True, "timeout": "1m"}},
            LONG_AGO,
            id="delete-past-its-uninstall-timeout",
        ),
    ],
)
async def test_a_crs_with_nothing_to_clean_up_is_let_go_by_a_cluster_being_deleted(
    spec: dict[str, Any], since: str
) -> None:
    world = await both_deleting(since, **spec)
    workload = world.ctx.workloads.clients["c1"]
    before = len(workload.requests)
    assert await finalized(world)
    assert world.index.holders(NS, "a") == []
    assert workload.requests[before:] == []  # the workload cluster was not asked anything
    binding = await world.mgmt.get(API_VERSION, "ClusterResourceSetBinding", "c1", NS)
    assert binding is not None  # b's entry stays until the Cluster is gone
    names = [e["clusterResourceSetName"] for e in binding["spec"]["bindings"]]
    assert names == ["b"]
    owners = binding["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"]) for o in owners] == [
        ("Cluster", "c1"),
        ("ClusterResourceSet", "b"),
    ]


async def test_a_crs_that_cleans_up_is_let_go_once_it_has() -> None:
    spec = {"deletionPolicy": "Delete", "uninstall": {"ensure": True}}
    world = await both_deleting(SOON, **spec)
    workload = world.ctx.workloads.clients["c1"]
    assert await finalized(world)
    assert ("delete", "ConfigMap/addon") not in workload.writes()  # b still wants it
    assert world.index.holders(NS, "a") == []


async def test_a_paused_crs_keeps_its_entry_on_a_cluster_being_deleted() -> None:
    world = await both_deleting(SOON)
    live = await world.mgmt.get(API_VERSION, "ClusterResourceSet", "a", NS)
    assert live is not None
    live["metadata"]["annotations"] = {"cluster.x-k8s.io/paused": "true"}
    await world.update(live)
    assert not await finalized(world)
    assert world.index.holders(NS, "a") == ["c1"]
