"""A CRS whose spec the model refuses (one the CRD accepts: ``kubernetesVersions:
"banana"``, or a stricter model after an upgrade) can still be deleted: its
``deletionPolicy`` is read from the raw spec alone. Orphan lets its entries go and
leaves every object; Delete deletes what its bindings recorded, then the finalizer
goes. Only a deletionPolicy that cannot be read holds the deletion, and the status
says so. A CRS being deleted deletes nothing on a cluster while a CRS that depends
on it, being deleted too, still holds objects there."""

from __future__ import annotations

from typing import Any

from crs_controller.core.api.clusters import PAUSED_ANNOTATION
from crs_controller.core.api.models import API_VERSION
from crs_controller.core.spec.objects import depends_on, parse_crs
from crs_controller.core.state.deletion_guard import allowances
from crs_controller.engine.reconcile.crs import reconcile_crs

from .builders import NS, configmap_source, crs, payload, reconcile, world_with
from .memory_kube import World

DELETING = "2099-01-01T00:00:00Z"


def stored(world: World, name: str = "a") -> dict[str, Any] | None:
    return world.mgmt.objects.get((API_VERSION, "ClusterResourceSet", NS, name))


def on_workload(world: World, name: str) -> bool:
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    return ("v1", "ConfigMap", "default", name) in workload.objects


async def edit(world: World, name: str = "a", **spec: Any) -> None:
    found = stored(world, name)
    assert found is not None
    await world.update({**found, "spec": {**found["spec"], **spec}})


async def delete(world: World, name: str = "a") -> None:
    found = stored(world, name)
    assert found is not None
    meta = {**found["metadata"], "deletionTimestamp": DELETING}
    await world.update({**found, "metadata": meta})


async def finalize(world: World, name: str = "a") -> None:
    """The CRS's passes until its finalizer goes (or it stops asking to look again)."""
    ctx = world.crs_context()
    for _ in range(5):
        then = await reconcile_crs(ctx, NS, name)
        if not then.requeue_after:
            return
        world.ctx.clock.advance(then.requeue_after)  # type: ignore[attr-defined]


def finalized(world: World, name: str = "a") -> bool:
    found = stored(world, name)
    return found is None or not found["metadata"].get("finalizers")


async def applied_then_refused(policy: str) -> World:
    world = await world_with(crs("a", "src", deletionPolicy=policy))
    await reconcile(world)
    await reconcile_crs(world.crs_context(), NS, "a")  # the finalizer
    assert on_workload(world, "addon")
    refused = [{"kind": "ConfigMap", "name": "src", "kubernetesVersions": "banana"}]
    await edit(world, resources=refused)
    assert world.crss.get(NS, "a").model is None  # type: ignore[union-attr]
    await reconcile(world)  # left alone: its entry stays, nothing deleted
    assert world.bindings.get(NS, "c1") is not None and on_workload(world, "addon")
    return world


async def test_an_orphan_crs_with_a_refused_spec_is_deleted_and_leaves_its_objects() -> None:
    world = await applied_then_refused("Orphan")
    await delete(world)
    await reconcile(world)
    assert world.bindings.get(NS, "c1") is None
    await finalize(world)
    assert finalized(world)
    assert on_workload(world, "addon")


async def test_a_delete_crs_with_a_refused_spec_deletes_what_it_applied_and_goes() -> None:
    world = await applied_then_refused("Delete")
    await delete(world)
    await reconcile(world)
    assert not on_workload(world, "addon")
    assert world.bindings.get(NS, "c1") is None
    await finalize(world)
    assert finalized(world)


async def test_a_deletion_policy_that_cannot_be_read_holds_the_deletion_and_says_so() -> None:
    world = await applied_then_refused("Delete")
    await edit(world, deletionPolicy="Sometimes")
    await delete(world)
    await reconcile(world)
    assert world.bindings.get(NS, "c1") is not None and on_workload(world, "addon")
    await finalize(world)
    assert not finalized(world)
    found = stored(world)
    assert found is not None
    ready = next(c for c in found["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "InvalidSpec"
    assert ready["message"].startswith("deletion waits: spec.deletionPolicy")
    assert "Sometimes" not in ready["message"]


async def two_sets() -> World:
    """``cni`` and ``csi`` (dependsOn: [cni]), both Delete, applied on c1."""
    world = await world_with(
        crs("cni", "src", deletionPolicy="Delete"),
        crs("csi", "csi-src", deletionPolicy="Delete", dependsOn=[{"name": "cni"}]),
    )
    await world.add(configmap_source("csi-src", payload("csi-addon")))
    await reconcile(world)
    await reconcile(world)
    assert on_workload(world, "addon") and on_workload(world, "csi-addon")
    return world


async def test_a_dependency_being_deleted_waits_for_a_dependent_being_deleted() -> None:
    world = await two_sets()
    found = stored(world, "csi")
    assert found is not None
    paused = {**found["metadata"], "annotations": {PAUSED_ANNOTATION: ""}}
    await world.update({**found, "metadata": paused})  # its cleanup waits
    await delete(world, "csi")
    await delete(world, "cni")
    await reconcile(world)
    assert on_workload(world, "csi-addon") and on_workload(world, "addon")
    found = stored(world, "csi")
    assert found is not None
    meta = {k: v for k, v in found["metadata"].items() if k != "annotations"}
    await world.update({**found, "metadata": meta})
    await reconcile(world)  # csi's objects go first, cni's in the same pass
    assert not on_workload(world, "csi-addon") and not on_workload(world, "addon")
    assert world.bindings.get(NS, "c1") is None


async def test_a_dependency_deleted_alone_is_removed_under_its_dependent() -> None:
    world = await two_sets()
    await delete(world, "cni")
    await reconcile(world)
    assert not on_workload(world, "addon") and on_workload(world, "csi-addon")


def test_what_deleting_needs_is_read_from_a_refused_spec_alone() -> None:
    raw = {
        "metadata": {"name": "a", "namespace": NS, "deletionTimestamp": DELETING},
        "spec": {
            "clusterSelector": {"matchLabels": {"env": "prod"}},
            "resources": [
                {
                    "kind": "ConfigMap",
                    "name": "crds",
                    "kubernetesVersions": "banana",
                    "allowDelete": ["CustomResourceDefinition"],
                },
                {"kind": "ConfigMap", "name": "odd", "allowDelete": ["Pod"]},
                "not a resource",
            ],
            "dependsOn": [{"name": "cni"}, {"nom": "x"}],
            "deletionPolicy": "Delete",
        },
    }
    refused = parse_crs(raw)
    assert refused.model is None and not refused.left_alone
    assert refused.deletion_policy == "Delete"
    assert allowances(refused.deletion_resources) == {
        ("ConfigMap", "crds"): frozenset({"CustomResourceDefinition"})
    }
    assert depends_on(refused) == ("cni",)
    unreadable = parse_crs({**raw, "spec": {**raw["spec"], "deletionPolicy": "Sometimes"}})
    assert unreadable.deletion_policy is None and unreadable.left_alone
    assert unreadable.refused is not None
    assert unreadable.refused.problem == "spec.deletionPolicy: must be Delete or Orphan"
