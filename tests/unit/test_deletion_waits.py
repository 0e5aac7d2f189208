"""What holds a deletion is said, and nothing holds one for ever unseen: a CRS being
deleted that waits for a dependent being deleted says in its Ready condition which
one and why, and a paused one says it is paused, neither once it is over; before a
Cluster is deleted, a dependency waits for a dependent's cleanup only up to its own
deadline less a margin, whatever the dependent's retries' backoff, then cleans up
anyway and says once whom it stopped waiting for; and a Cluster refused for its
labels lets go of the CRSs being deleted (Orphan: its entry, Delete: what its binding
records) while every other entry stays. In a shard set the leader says the wait the
members count for their own clusters."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from crs_controller.core.api.clusters import PAUSED_ANNOTATION
from crs_controller.core.api.models import Uninstall, rfc3339
from crs_controller.core.errors import APIError
from crs_controller.core.spec.metadata import MAX_LABELS
from crs_controller.core.state.bindings import entries_by_crs
from crs_controller.core.state.uninstall_decisions import waits_for_dependents
from crs_controller.engine.reconcile.crs import reconcile_crs
from crs_controller.engine.reconcile.result import cluster_key
from crs_controller.engine.reconcile.workload.uninstall import DEPENDENT_NOT_WAITED
from crs_controller.engine.runtime.controller import Controller
from crs_controller.engine.runtime.queue import WorkQueue

from .builders import NS, configmap_source, crs, payload, reconcile, world_with
from .fake_clock import FakeClock
from .memory_kube import CLUSTER_API, MemoryKube, World
from .test_crs_contributions import Board, Member
from .test_refused_deletion import (
    delete,
    finalize,
    finalized,
    on_workload,
    stored,
    two_sets,
)
from .test_uninstall_jobs import CLEANUP, JOB, hook_job, mark


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


def events(world: World, reason: str) -> list[str]:
    found = [o for (_, kind, _, _), o in world.mgmt.objects.items() if kind == "Event"]
    return [e["message"] for e in found if e.get("reason") == reason]


async def test_a_dependency_stops_waiting_for_a_dependent_before_its_own_deadline() -> None:
    """cni's cleanup has a 1m timeout; csi depends on it, its hook Job runs on for its
    30m. cni waits for it 45s (its timeout less a quarter), then cleans up anyway and
    says whom it stopped waiting for: its objects never stay behind unsaid."""
    world = await world_with(
        crs("cni", "src", deletionPolicy="Delete", uninstall={"ensure": True, "timeout": "1m"}),
        crs(
            "csi",
            "csi-src",
            deletionPolicy="Delete",
            uninstall={**CLEANUP, "timeout": "30m"},
            dependsOn=[{"name": "cni"}],
        ),
    )
    await world.add(configmap_source("csi-src", payload("csi-addon")))
    await world.add(configmap_source("pre", hook_job()))
    await reconcile(world)
    now = rfc3339(world.ctx.clock.wall())
    await mark(world, CLUSTER_API, "Cluster", "c1", deletionTimestamp=now)
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    workload.keeps_status = True
    await reconcile(world)
    assert JOB in workload.objects  # the positive sign: csi's cleanup began
    world.ctx.clock.advance(40)  # type: ignore[attr-defined]
    await reconcile(world)
    assert on_workload(world, "addon") and events(world, DEPENDENT_NOT_WAITED) == []
    world.ctx.clock.advance(10)  # type: ignore[attr-defined]
    await reconcile(world)
    assert not on_workload(world, "addon") and on_workload(world, "csi-addon")
    assert events(world, DEPENDENT_NOT_WAITED) == [
        "cluster c1: stopped waiting for the cleanup of ClusterResourceSet csi, which "
        "depends on it, before its own uninstall.timeout ends"
    ]
    assert entries(world) == {"csi"}


def failing_deletes(world: World, *names: str) -> set[str]:
    """The workload's deletes of the ConfigMaps ``names`` fail (500) while they are in
    the set returned (empty it to let them through)."""
    workload: MemoryKube = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    failing, real = set(names), workload.delete

    async def delete(api_version: str, kind: str, name: str, *args: Any, **kw: Any) -> bool:
        if name in failing:
            raise APIError(f"delete {kind}/{name}: 500 Internal Server Error", status=500)
        return await real(api_version, kind, name, *args, **kw)

    workload.delete = delete  # type: ignore[method-assign]
    return failing


async def deleting_cni_and_csi(world: World) -> None:
    """``cni_and_csi`` applied on c1, whose Cluster's deletion then begins."""
    await world.add(configmap_source("csi-src", payload("csi-addon")))
    await reconcile(world)
    await reconcile(world)
    assert on_workload(world, "addon") and on_workload(world, "csi-addon")
    now = rfc3339(world.ctx.clock.wall())
    await mark(world, CLUSTER_API, "Cluster", "c1", deletionTimestamp=now)


def cni_and_csi(cni_timeout: str) -> list[Any]:
    """cni (Delete, cleaned up within ``cni_timeout``) and csi (30m, depends on cni)."""
    return [
        crs(
            "cni",
            "src",
            deletionPolicy="Delete",
            uninstall={"ensure": True, "timeout": cni_timeout},
        ),
        crs(
            "csi",
            "csi-src",
            deletionPolicy="Delete",
            uninstall={"ensure": True, "timeout": "30m"},
            dependsOn=[{"name": "cni"}],
        ),
    ]


async def test_a_dependency_is_cleaned_up_in_its_window_whatever_the_dependents_backoff() -> None:
    """cni's 12m timeout: it waits for csi until 9m (540s), holds the deletion until
    12m. csi's deletes keep failing, so the Cluster's passes back off as the queue
    does them (0.5s doubling, at most 300s): 511.5s, then 811.5s, past cni's window.
    A pass still lands as cni's wait ends, and cni is cleaned up, saying so."""
    world = await world_with(*cni_and_csi("12m"))
    clock: FakeClock = world.ctx.clock  # type: ignore[assignment]
    await deleting_cni_and_csi(world)
    failing_deletes(world, "csi-addon")
    queue, key, started = WorkQueue(clock=clock), cluster_key(NS, "c1"), clock.now()
    runtime: Any = SimpleNamespace(queue=queue)  # what the runtime does with a Result
    queue.add(key)
    passes = []
    while clock.now() - started <= 720 and on_workload(world, "addon"):
        queue.fire_due(clock.now())
        if not queue.ready_keys():
            clock.advance(0.5)
            continue
        queue.get_nowait()
        passes.append(clock.now() - started)
        Controller._follow(runtime, key, await reconcile(world))
        queue.done(key)
    assert 511.5 in passes  # the positive sign: the passes backed off that far
    assert not on_workload(world, "addon") and on_workload(world, "csi-addon")
    assert 540 <= passes[-1] < 720
    assert len(events(world, DEPENDENT_NOT_WAITED)) == 1


async def test_a_dependency_says_once_that_it_stopped_waiting() -> None:
    """cni's own deletes fail for a few passes after its wait ended: its
    DependentNotWaited is told once for the Cluster's deletion, not at every retry."""
    world = await world_with(*cni_and_csi("1m"))
    await deleting_cni_and_csi(world)
    failing = failing_deletes(world, "csi-addon", "addon")
    world.ctx.clock.advance(45)  # type: ignore[attr-defined]
    for _ in range(4):
        await reconcile(world)
        world.ctx.clock.advance(1)  # type: ignore[attr-defined]
    held = events(world, "UninstallFailed")
    assert any("ConfigMap default/addon" in m for m in held)  # the positive sign: cni's ran
    failing.discard("addon")
    await reconcile(world)
    assert not on_workload(world, "addon")
    assert len(events(world, DEPENDENT_NOT_WAITED)) == 1


@pytest.mark.parametrize(
    ("timeout", "elapsed", "waits"),
    [
        ("1m", 44, True),
        ("1m", 45, False),
        ("10m", 449, True),
        ("10m", 450, False),
        ("1h", 3299, True),
        ("1h", 3300, False),
        (None, 449, True),
        (None, 450, False),
    ],
)
def test_a_dependency_waits_until_its_deadline_less_a_quarter_at_most_5m(
    timeout: str | None, elapsed: int, waits: bool
) -> None:
    started = datetime(2026, 11, 22, tzinfo=UTC)
    spec = Uninstall(ensure=True, timeout=timeout)
    assert waits_for_dependents(spec, started, started + timedelta(seconds=elapsed)) is waits


def condition(world: World, name: str, kind: str) -> tuple[str, str, str]:
    found = stored(world, name)
    assert found is not None
    told = next(c for c in found["status"]["conditions"] if c["type"] == kind)
    return told["status"], told["reason"], told["message"]


async def pause(world: World, name: str) -> None:
    found = stored(world, name)
    assert found is not None
    meta = {**found["metadata"], "annotations": {PAUSED_ANNOTATION: ""}}
    await world.update({**found, "metadata": meta})


async def unpause(world: World, name: str) -> None:
    found = stored(world, name)
    assert found is not None
    meta = {k: v for k, v in found["metadata"].items() if k != "annotations"}
    await world.update({**found, "metadata": meta})


async def test_a_deletion_held_by_a_paused_dependent_says_so_until_it_is_not() -> None:
    """cni's deletion waits for csi (paused); csi unpaused, its objects go while cni's
    own deletes fail: cni's Ready no longer names csi, it waits for its clusters."""
    world = await two_sets()
    for name in ("cni", "csi"):
        await finalize(world, name)  # each status written as it is applied
    assert condition(world, "cni", "Ready")[:2] == ("True", "Applied")
    await pause(world, "csi")
    await delete(world, "csi")
    await delete(world, "cni")
    await reconcile(world)
    assert on_workload(world, "csi-addon") and on_workload(world, "addon")
    await finalize(world, "cni")
    assert not finalized(world, "cni")
    assert condition(world, "cni", "Ready") == (
        "False",
        "DependencyNotReady",
        "deletion waits for csi (paused) on 1 clusters",
    )
    failing_deletes(world, "addon")
    await unpause(world, "csi")
    await reconcile(world)
    assert not on_workload(world, "csi-addon") and on_workload(world, "addon")
    await finalize(world, "cni")
    assert not finalized(world, "cni")
    assert condition(world, "cni", "Ready") == (
        "False",
        "WaitingForClusters",
        "deletion waits for its clusters to let go of it",
    )


async def test_a_crs_paused_once_its_deletion_began_says_it_is_paused_until_unpaused() -> None:
    world = await two_sets()
    await finalize(world, "csi")
    await delete(world, "csi")
    await pause(world, "csi")
    await finalize(world, "csi")
    assert not finalized(world, "csi")
    assert condition(world, "csi", "Paused")[:2] == ("True", "Paused")
    assert condition(world, "csi", "Ready")[:2] == ("Unknown", "Paused")
    await unpause(world, "csi")
    await finalize(world, "csi")  # no cluster pass came: c1 still holds it
    assert not finalized(world, "csi")
    assert condition(world, "csi", "Paused")[:2] == ("False", "NotPaused")
    assert condition(world, "csi", "Ready")[:2] == ("False", "WaitingForClusters")


async def test_in_a_shard_set_the_leader_says_the_wait_its_members_count() -> None:
    world = await two_sets()
    board = Board(frozenset({"m-a", "m-b"}))
    leader = replace(world.crs_context(), combining=Member("m-a", board, frozenset()))
    follower = replace(
        world.crs_context(leading=False), combining=Member("m-b", board, frozenset({"c1"}))
    )
    await pause(world, "csi")
    await delete(world, "csi")
    await delete(world, "cni")
    await reconcile(world)  # m-b's cluster pass: cni waits there for csi
    await reconcile_crs(follower, NS, "cni")
    assert board.published["m-b"].waiting == (("csi", 1),)
    await reconcile_crs(leader, NS, "cni")
    assert board.published["m-a"].waiting == ()
    assert condition(world, "cni", "Ready")[2] == "deletion waits for csi (paused) on 1 clusters"
