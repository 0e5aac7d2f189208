"""Objects two CRSs share on one cluster: one that another CRS still wants is never
deleted, also when its name is substituted per cluster; ApplyOnce takes no other
CRS's object as its own; two CRSs applying one object with other content are told
so (each apply undoes the other)."""

from __future__ import annotations

from typing import Any

import pytest

from crs_controller.core.api.models import API_VERSION

from .builders import NS, configmap_source, crs, outcome, payload, reconcile, world_with
from .memory_kube import World

Obj = dict[str, Any]


def templated(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"v": "1"},
    }


def substituted(spec: Obj) -> Obj:
    spec["spec"]["resources"][0]["substitute"] = True
    return spec


async def replace_source(world: World, source: Obj) -> None:
    """Change a source ConfigMap as a user's update would."""
    live = await world.mgmt.get("v1", "ConfigMap", source["metadata"]["name"], NS)
    assert live is not None
    source["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
    await world.update(source)


async def test_an_object_moved_to_a_crs_held_back_is_kept_when_its_name_is_substituted() -> None:
    a = substituted(crs("a", "src-a", deletionPolicy="Delete"))
    world = await world_with(
        a, mode_source=configmap_source("src-a", templated("${CLUSTER_NAME}-cfg"), payload("gone"))
    )
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    assert await workload.get("v1", "ConfigMap", "c1-cfg", "default") is not None
    # The object moves to b, which waits for a dependency that never becomes ready.
    await world.add(configmap_source("src-b", templated("${CLUSTER_NAME}-cfg")))
    await world.add(crs("dep", "missing"))
    await world.add(substituted(crs("b", "src-b", dependsOn=[{"name": "dep"}])))
    await replace_source(world, configmap_source("src-a", payload("x")))
    await reconcile(world)
    assert outcome(world, "b")[0] == "DependencyNotReady"
    assert outcome(world, "a")[0] == "Applied"
    # a's pruning ran: what nothing wants any more is gone, what b wants is not.
    assert await workload.get("v1", "ConfigMap", "gone", "default") is None
    assert await workload.get("v1", "ConfigMap", "c1-cfg", "default") is not None


def listed(world: World, crs_name: str) -> list[str]:
    """The names of the objects ``crs_name``'s entry of c1's binding records."""
    binding = world.bindings.get(NS, "c1")
    assert binding is not None
    entry = binding.entries().get(crs_name)
    return [o.name for r in entry.resources for o in r.objects] if entry else []


async def test_applyonce_leaves_an_object_another_crs_applied_to_it() -> None:
    a = crs("a", "src-a")  # deletionPolicy Orphan: deleting a leaves its objects
    world = await world_with(a, mode_source=configmap_source("src-a", payload("addon", "A")))
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    await world.add(configmap_source("src-b", payload("addon", "B"), payload("own")))
    await world.add(crs("b", "src-b", mode="ApplyOnce", deletionPolicy="Delete"))
    await reconcile(world)
    assert listed(world, "b") == ["own"]  # a's object is not b's to delete later
    await world.mgmt.delete(API_VERSION, "ClusterResourceSet", "a", NS)
    world.index.update_crs(world.crss.remove(NS, "a"), None)
    await reconcile(world)
    live = await world.mgmt.get(API_VERSION, "ClusterResourceSet", "b", NS)
    assert live is not None
    live["spec"]["clusterSelector"] = {"matchLabels": {"env": "none"}}
    live["metadata"]["generation"] = 2
    await world.update(live)
    await reconcile(world)
    # b's pruning ran: what b applied is gone, what a applied is left.
    assert await workload.get("v1", "ConfigMap", "own", "default") is None
    addon = await workload.get("v1", "ConfigMap", "addon", "default")
    assert addon is not None and addon["data"] == {"v": "A"}


def told(world: World, crs_name: str) -> dict[str, str]:
    """The Events the notes gathered for ``crs_name`` would give, by reason."""
    return {a.reason: a.message for a in world.ctx.announcements.take(NS, crs_name)}


@pytest.mark.parametrize("content", ["B", "A"])
async def test_two_crss_applying_one_object_with_other_content_are_warned_of(
    content: str,
) -> None:
    spec = {"driftDetection": "Generation", "driftCheckInterval": "1m"}
    world = await world_with(
        crs("a", "src-a", **spec),
        crs("b", "src-b", **spec),
        mode_source=configmap_source("src-a", payload("addon", "A")),
    )
    await world.add(configmap_source("src-b", payload("addon", content), payload("own")))
    await reconcile(world)
    assert "Applied" in told(world, "a")
    events = told(world, "b")
    assert "Applied" in events
    if content == "A":  # the same object twice is no conflict
        assert "ObjectConflict" not in events
        return
    assert events["ObjectConflict"] == (
        "ObjectConflict on 1 cluster: c1: v1 ConfigMap default/addon also applied by "
        "ClusterResourceSet a: with other content, each apply undoes the other"
    )
    assert outcome(world, "a")[0] == outcome(world, "b")[0] == "Applied"
    # Each drift correction undoes the other CRS's apply, and says so.
    world.ctx.clock.advance(61)  # type: ignore[attr-defined]
    await reconcile(world)
    for name, other in (("a", "b"), ("b", "a")):
        events = told(world, name)
        assert "DriftCorrected" in events
        assert f"addon also applied by ClusterResourceSet {other}:" in events["ObjectConflict"]


async def test_an_object_taken_over_from_a_crs_that_left_the_cluster_is_no_conflict() -> None:
    world = await world_with(
        crs("a", "src-a"), mode_source=configmap_source("src-a", payload("addon", "A"))
    )
    await reconcile(world)
    live = await world.mgmt.get(API_VERSION, "ClusterResourceSet", "a", NS)
    assert live is not None
    live["spec"]["clusterSelector"] = {"matchLabels": {"env": "none"}}
    live["metadata"]["generation"] = 2
    await world.update(live)
    await world.add(configmap_source("src-b", payload("addon", "B")))
    await world.add(crs("b", "src-b"))
    await reconcile(world)
    events = told(world, "b")
    assert "Applied" in events and "ObjectConflict" not in events


@pytest.mark.parametrize("content", ["B", "A"])
async def test_two_resources_of_one_crs_applying_one_object_with_other_content_are_warned_of(
    content: str,
) -> None:
    spec = {"driftDetection": "Content", "driftCheckInterval": "1m"}
    a = crs("a", "src-a", **spec)
    a["spec"]["resources"].append({"kind": "ConfigMap", "name": "src-b"})
    world = await world_with(a, mode_source=configmap_source("src-a", payload("addon", "A")))
    await world.add(configmap_source("src-b", payload("addon", content), payload("own")))
    await reconcile(world)
    events = told(world, "a")
    assert "Applied" in events
    if content == "A":  # the same object twice is no conflict
        assert "ObjectConflict" not in events
        return
    assert events["ObjectConflict"] == (
        "ObjectConflict on 1 cluster: c1: v1 ConfigMap default/addon applied by both "
        "ConfigMap/src-a and ConfigMap/src-b: with other content, each apply undoes the other"
    )
    assert outcome(world, "a")[0] == "Applied"
    # Each drift correction undoes the other resource's apply, and says so.
    world.ctx.clock.advance(61)  # type: ignore[attr-defined]
    await reconcile(world)
    events = told(world, "a")
    assert "DriftCorrected" in events
    assert "applied by both ConfigMap/src-a and ConfigMap/src-b" in events["ObjectConflict"]
