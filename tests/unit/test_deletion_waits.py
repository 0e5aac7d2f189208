"""What holds a deletion is said, and nothing holds one for ever unseen: a CRS being
deleted that waits for a dependent being deleted says in its Ready condition which
one and why, and a paused one says it is paused; before a Cluster is deleted, a
dependency waits for a dependent's cleanup only up to its own deadline less a
margin, then cleans up anyway and says whom it stopped waiting for; and a Cluster
refused for its labels lets go of the CRSs being deleted (Orphan: its entry, Delete:
what its binding records) while every other entry stays."""

from __future__ import annotations

from typing import Any

from crs_controller.core.api.clusters import PAUSED_ANNOTATION
from crs_controller.core.spec.metadata import MAX_LABELS
from crs_controller.core.state.bindings import entries_by_crs

from .builders import NS, configmap_source, crs, payload, reconcile, world_with
from .memory_kube import CLUSTER_API, World
from .test_refused_deletion import delete, finalize, finalized, on_workload, stored


def entries(world: World) -> set[str]:
    binding = world.bindings.get(NS, "c1")
    return set() if binding is None else set(entries_by_crs(binding.model))


async def refuse_labels(world: World) -> None:
    raw = await world.mgmt.get(CLUSTER_API, "Cluster", "c1", NS)
    assert raw is not None
    raw["metadata"]["labels"] = {**{f"k{n}": "v" for n in range(MAX_LABELS + 1)}, "env": "prod"}
    await world.update(raw)
    assert world.ctx.caches.cluster(NS, "c1").problem is not None  # type: ignore[union-attr]


async def test_a_refused_cluster_lets_go_of_the_crss_being_deleted() -> None:
    world = await world_with(
        crs("orphan", "src"),
        crs("gone", "gone-src", deletionPolicy="Delete"),
        crs("stays", "stays-src", deletionPolicy="Delete"),
    )
    await world.add(configmap_source("gone-src", payload("gone-addon")))
    await world.add(configmap_source("stays-src", payload("stays-addon")))
    await reconcile(world)
    assert entries(world) == {"orphan", "gone", "stays"}
    await refuse_labels(world)
    for name in ("orphan", "gone"):
        await finalize(world, name)  # the finalizer
        await delete(world, name)
    await reconcile(world)
    assert entries(world) == {"stays"}
    assert on_workload(world, "addon") and on_workload(world, "stays-addon")
    assert not on_workload(world, "gone-addon")
    for name in ("orphan", "gone"):
        await finalize(world, name)
        assert finalized(world, name)
