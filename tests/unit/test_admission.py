"""The one gate of a CRS on a cluster (``engine.reconcile.admission``): dependencies
first, then the rollout; a held CRS's outcome comes from one ``describe``; a first
install and a cluster already on the revision are never held by the rollout; the
budget's place goes back once a pair no longer takes the revision (failed, it stays)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from crs_controller.core.api.clusters import HOLD_UPDATES_ANNOTATION, PAUSED_ANNOTATION
from crs_controller.core.api.models import API_VERSION, CRSBinding
from crs_controller.core.errors import APIError, ResourceNotFound
from crs_controller.core.rollout.plan import Plan
from crs_controller.core.state.bindings import with_outcome
from crs_controller.core.state.status import Outcome, State, outcome_of
from crs_controller.core.values.dependencies import Cycle, Missing, Wait
from crs_controller.engine.io.sources import Source
from crs_controller.engine.memory.budget import Budget
from crs_controller.engine.reconcile.admission import (
    BudgetExhausted,
    Gate,
    Go,
    Held,
    Hold,
    RolloutStep,
    UpdateHeld,
    describe,
)
from crs_controller.engine.reconcile.cluster import reconcile_cluster
from crs_controller.engine.reconcile.rollout import revision_of, source_hashes
from crs_controller.engine.reconcile.scope import ClusterScope, CRSPass

from .builders import crs, world_with
from .memory_kube import CLUSTER_API, MemoryKube, Woken, World

NS = "default"
Obj = dict[str, Any]


def source(value: str) -> Obj:
    addon = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "addon"}}
    data = {"a": yaml.safe_dump({**addon, "data": {"v": value}})}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "src"}, "data": data}


async def rolling_world() -> World:
    """One cluster, and one CRS with a rollout, applied there once."""
    world = World({"c1": MemoryKube("c1")})
    labels = {"env": "prod"}
    spec = {
        "clusterSelector": {"matchLabels": labels},
        "resources": [{"kind": "ConfigMap", "name": "src"}],
        "mode": "Reconcile",
        "rollout": {"maxConcurrent": 1},
    }
    crs = {"apiVersion": API_VERSION, "kind": "ClusterResourceSet", "spec": spec}
    cluster = {"apiVersion": CLUSTER_API, "kind": "Cluster", "status": {"controlPlaneReady": True}}
    secret = {"apiVersion": "v1", "kind": "Secret", "data": {"value": ""}}
    await world.add({**source("1"), "metadata": {"name": "src", "namespace": NS}})
    await world.add({**crs, "metadata": {"name": "a", "namespace": NS, "generation": 1}})
    await world.add({**cluster, "metadata": {"name": "c1", "namespace": NS, "labels": labels}})
    await world.add({**secret, "metadata": {"name": "c1-kubeconfig", "namespace": NS}})
    await reconcile_cluster(world.ctx, NS, "c1")  # a first install is never held
    world.sync_bindings()
    return world


@pytest.mark.parametrize(
    ("why", "expect"),
    [
        (RolloutStep(), ("Progressing", "Progressing", "waiting for its rollout step")),
        (Wait("cni"), ("Waiting", "DependencyNotReady", "waiting for ClusterResourceSet cni")),
        (
            Missing("cni"),
            ("Failed", "DependencyNotFound", "ClusterResourceSet cni does not exist"),
        ),
        (Cycle(("a", "b")), ("Failed", "DependencyCycle", "dependency cycle: a -> b -> a")),
    ],
)
def test_a_held_crs_records_one_outcome_per_reason(
    why: Hold, expect: tuple[State, str, str]
) -> None:
    state, reason, message = expect
    assert describe(Held(why, 3)) == Outcome(state, reason, message, 3)


async def test_the_rollout_holds_an_update_until_the_plan_admits_the_cluster() -> None:
    world = await rolling_world()
    live = await world.mgmt.get("v1", "ConfigMap", "src", NS)
    assert live is not None
    live["data"] = source("2")["data"]
    await world.update(live)
    ctx, the_crs = world.ctx, world.index.crs(NS, "a")
    cluster, entry = world.index.cluster(NS, "c1"), world.index.entry(NS, "c1", "a")
    assert the_crs is not None and cluster is not None and entry is not None
    hashes = await source_hashes(ctx, the_crs)
    assert hashes is not None
    target = revision_of(hashes)
    gate = Gate(scope_of(world, "c1"))
    assert await gate.admit(the_crs) == Held(RolloutStep(planned=False), 1)
    ctx.rollouts.set(NS, "a", target, Plan(frozenset({"c1"}), "Progressing", 1, 0, "", None))
    assert await gate.admit(the_crs) == Go(target)


def test_a_hold_not_planned_yet_keeps_the_recorded_outcome() -> None:
    recorded = with_outcome(
        CRSBinding(cluster_resource_set_name="a"),
        None,
        describe(Held(RolloutStep("Approval"), 2)),
        datetime(2026, 1, 1, tzinfo=UTC),
    )
    unplanned = Held(RolloutStep(planned=False), 2)
    assert unplanned.outcome(recorded) == describe(Held(RolloutStep("Approval"), 2))
    # Nothing recorded yet: it says it waits for its step.
    assert unplanned.outcome(None) == describe(Held(RolloutStep(), 2))
    # Planned, the plan's answer is recorded whatever the binding had.
    planned = Held(RolloutStep("Window"), 2)
    assert planned.outcome(recorded) == describe(planned)


@pytest.mark.parametrize(
    ("why", "expect"),
    [
        (UpdateHeld(), ("UpdateHeld", "the cluster holds updates")),
        (RolloutStep("Window"), ("OutsideWindow", "outside the change windows")),
        (RolloutStep("Approval"), ("Progressing", "to be approved")),
        (BudgetExhausted(2), ("BudgetExhausted", "one of the 2 places")),
    ],
)
def test_a_held_update_says_what_holds_it(why: Hold, expect: tuple[str, str]) -> None:
    reason, words = expect
    outcome = describe(Held(why, 1))
    assert (outcome.state, outcome.reason) == ("Progressing", reason)
    assert words in outcome.message


async def edited_world(
    *, hold: bool = False, budget: int | None = None, wake: Woken | None = None
) -> World:
    """The rolling world after an edit of the source, the plan admitting c1; the
    budget hands the clusters it lets go to ``wake``."""
    world = await rolling_world()
    if budget is not None:
        world.ctx = replace(
            world.ctx,
            settings=replace(world.ctx.settings, max_updating_clusters=budget),
            budget=Budget(budget, world.ctx.clock, wake=wake),
        )
    if hold:
        cluster = await world.mgmt.get(CLUSTER_API, "Cluster", "c1", NS)
        assert cluster is not None
        cluster["metadata"]["annotations"] = {HOLD_UPDATES_ANNOTATION: "true"}
        await world.update(cluster)
    live = await world.mgmt.get("v1", "ConfigMap", "src", NS)
    assert live is not None
    live["data"] = source("2")["data"]
    await world.update(live)
    the_crs = world.index.crs(NS, "a")
    assert the_crs is not None
    hashes = await source_hashes(world.ctx, the_crs)
    assert hashes is not None
    target = revision_of(hashes)
    admit = Plan(frozenset({"c1"}), "Progressing", 1, 0, "", None)
    world.ctx.rollouts.set(NS, "a", target, admit)
    return world


async def admit_c1(world: World) -> Go | Held:
    the_crs, cluster = world.index.crs(NS, "a"), world.index.cluster(NS, "c1")
    entry = world.index.entry(NS, "c1", "a")
    assert the_crs is not None and cluster is not None and entry is not None
    return await Gate(scope_of(world, "c1")).admit(the_crs)


def scope_of(world: World, name: str) -> ClusterScope:
    """A pass's scope over the cluster as the caches hold it, its binding as recorded."""
    cluster, cached = world.index.cluster(NS, name), world.ctx.caches.binding(NS, name)
    assert cluster is not None and cached is not None
    return ClusterScope(world.ctx, cluster, cached.valid)


async def test_a_cluster_holding_updates_is_held_even_when_the_plan_admits_it() -> None:
    world = await edited_world(hold=True)
    assert await admit_c1(world) == Held(UpdateHeld(), 1)


async def test_the_budget_holds_an_update_while_its_places_are_taken() -> None:
    world = await edited_world(budget=1)
    assert world.ctx.budget.ask((NS, "other"), "x", 1)  # the one place, taken
    assert await admit_c1(world) == Held(BudgetExhausted(1), 1)
    assert world.ctx.budget.release((NS, "other"), "x") == ((NS, "c1"),)
    assert isinstance(await admit_c1(world), Go)
    assert world.ctx.budget.updating == 1


async def test_a_pair_that_fails_mid_update_keeps_its_place_for_the_retry() -> None:
    # c1 took the new revision, then its pass failed (a health read timed out, say).
    # Given back, the place would go to another cluster while c1's retry, on the
    # revision it already has, updates beside it: two updating under a budget of one.
    world = await edited_world(budget=1)
    assert isinstance(await admit_c1(world), Go)
    assert world.ctx.budget.updating == 1
    the_crs = world.index.crs(NS, "a")
    assert the_crs is not None
    scope = scope_of(world, "c1")
    failed = Outcome("Failed", "ApplyFailed", "a health read timed out", 1)
    scope.settle(the_crs, CRSPass(scope.kept("a"), failed))
    assert world.ctx.budget.updating == 1
    assert not world.ctx.budget.ask((NS, "other"), "x", 1)
    done = Outcome("Applied", "Applied", "all resources applied", 1)
    scope.settle(the_crs, CRSPass(scope.kept("a"), done))
    assert world.ctx.budget.updating == 0


async def test_a_crs_that_stops_selecting_mid_update_gives_its_budget_place_back() -> None:
    world = await edited_world(budget=1)
    assert world.ctx.budget.ask((NS, "c1"), "a", 1)  # c1 is updating a
    live = await world.mgmt.get(API_VERSION, "ClusterResourceSet", "a", NS)
    assert live is not None
    live["spec"]["clusterSelector"] = {"matchLabels": {"env": "none"}}
    await world.update(live)
    await reconcile_cluster(world.ctx, NS, "c1")
    assert world.ctx.budget.updating == 0


async def pause_crs(world: World) -> None:
    live = await world.mgmt.get(API_VERSION, "ClusterResourceSet", "a", NS)
    assert live is not None
    live["metadata"]["annotations"] = {PAUSED_ANNOTATION: "true"}
    await world.update(live)


async def refuse_crs(world: World) -> None:
    live = await world.mgmt.get(API_VERSION, "ClusterResourceSet", "a", NS)
    assert live is not None
    live["spec"]["rollout"]["maxConcurrent"] = "bogus"
    await world.update(live)
    the_crs = world.index.crs(NS, "a")
    assert the_crs is not None and the_crs.model is None


async def pause_cluster(world: World) -> None:
    live = await world.mgmt.get(CLUSTER_API, "Cluster", "c1", NS)
    assert live is not None
    live["spec"] = {**live.get("spec", {}), "paused": True}
    await world.update(live)


@pytest.mark.parametrize("leave", [pause_crs, refuse_crs, pause_cluster])
async def test_a_pair_left_alone_mid_update_gives_its_budget_place_back(
    leave: Callable[[World], Awaitable[None]],
) -> None:
    # Paused or refused, the pair takes no revision: kept, its place would hold every
    # other cluster of the fleet (any tenant's) at BudgetExhausted for as long.
    woken = Woken()
    world = await edited_world(budget=1, wake=woken)
    assert world.ctx.budget.ask((NS, "c1"), "a", 1)  # c1 is updating a
    assert not world.ctx.budget.ask((NS, "other"), "x", 1)  # another cluster waits
    before = world.ctx.caches.binding(NS, "c1")
    await leave(world)
    await reconcile_cluster(world.ctx, NS, "c1")
    assert world.ctx.budget.updating == 0
    assert woken == [(NS, "other")]
    assert world.ctx.budget.ask((NS, "other"), "x", 1)
    assert world.ctx.caches.binding(NS, "c1") == before  # its entry left alone


async def test_a_deleted_cluster_wakes_the_cluster_its_budget_place_lets_go() -> None:
    woken = Woken()
    world = await edited_world(budget=1, wake=woken)
    assert world.ctx.budget.ask((NS, "c1"), "a", 1)  # c1 is updating a
    assert not world.ctx.budget.ask((NS, "other"), "x", 1)  # another cluster waits
    del world.mgmt.objects[(CLUSTER_API, "Cluster", NS, "c1")]
    world.index.update_cluster(world.clusters.remove(NS, "c1"), None)
    await reconcile_cluster(world.ctx, NS, "c1")
    assert world.ctx.budget.updating == 0
    assert woken == [(NS, "other")]


async def test_a_hold_stands_when_the_gate_cannot_read_the_revision() -> None:
    # The gate's read of the sources fails (an API error, say) and the pass's succeeds
    # a moment later: the cluster holding updates must still keep what it has.
    world = await edited_world(hold=True)
    sources = world.ctx.sources
    real_load = sources.load
    calls = 0

    async def first_fails(namespace: str, ref: Any) -> Source:
        nonlocal calls
        calls += 1
        if calls == 1:
            return Source(ref, error=ResourceNotFound("read failed"))
        return await real_load(namespace, ref)

    sources.load = first_fails  # type: ignore[method-assign]
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    result = await reconcile_cluster(world.ctx, NS, "c1")
    live = await workload.get("v1", "ConfigMap", "addon", "default")
    assert live is not None and live["data"] == {"v": "1"}  # not updated
    found = world.ctx.outcomes.get(NS, "a", "c1")
    assert found is not None and found.reason == "Progressing", found
    assert "could not be read" in found.message
    assert result.retry  # decided again soon, when the revision can be read


def failed_taking(revision: str) -> CRSBinding:
    """An entry whose last pass failed taking ``revision``."""
    failed = Outcome("Failed", "UnresolvedVariable", "variable X is not set", 1, revision=revision)
    when = datetime(2026, 1, 1, tzinfo=UTC)
    return with_outcome(CRSBinding(cluster_resource_set_name="a"), None, failed, when)


@pytest.mark.parametrize(
    ("why", "reason"),
    [(Missing("cni"), "DependencyNotFound"), (Cycle(("a", "b")), "DependencyCycle")],
)
def test_a_dependency_missing_or_on_a_cycle_says_so_over_the_held_failure(
    why: Hold, reason: str
) -> None:
    """Only the operator lifts these holds: the outcome names them, failed taking the
    revision the held retry takes, so the rollout still counts the cluster failed."""
    found = Held(why, 2, "r1").outcome(failed_taking("r1"))
    assert (found.state, found.reason, found.revision) == ("Failed", reason, "r1")
    assert found == replace(describe(Held(why, 2)), revision="r1")


def test_a_hold_that_lifts_on_its_own_keeps_the_held_failure() -> None:
    for why in (Wait("cni"), RolloutStep("Window"), UpdateHeld(), BudgetExhausted(1)):
        found = Held(why, 2, "r1").outcome(failed_taking("r1"))
        assert (found.reason, found.revision, found.generation) == ("UnresolvedVariable", "r1", 2)


def recorded(outcome: Outcome) -> CRSBinding:
    """The entry a pass ending with ``outcome`` leaves in the binding."""
    when = datetime(2026, 1, 2, tzinfo=UTC)
    return with_outcome(CRSBinding(cluster_resource_set_name="a"), None, outcome, when)


def test_a_dependency_back_but_not_done_says_so_over_the_missing_one() -> None:
    """``cni`` deleted while a retry of r1 waited, then back and not done yet: the
    outcome no longer says it does not exist but that the retry waits for it, still
    failed taking r1 (read back from the binding so too): its rollout counts it failed.
    Done, the next hold says its own again."""
    missing = Held(Missing("cni"), 2, "r1").outcome(failed_taking("r1"))
    assert (missing.reason, missing.revision) == ("DependencyNotFound", "r1")
    waiting = Held(Wait("cni"), 2, "r1").outcome(recorded(missing))
    assert (waiting.state, waiting.reason, waiting.revision) == (
        "Failed",
        "DependencyNotReady",
        "r1",
    )
    assert waiting.message == describe(Held(Wait("cni"), 2)).message
    assert outcome_of(recorded(waiting)) == waiting
    assert Held(Wait("cni"), 2, "r1").outcome(recorded(waiting)) == waiting
    stepping = Held(RolloutStep("Window"), 2, "r1").outcome(recorded(waiting))
    assert (stepping.state, stepping.reason, stepping.revision) == ("Failed", "OutsideWindow", "r1")
    assert outcome_of(recorded(stepping)) == stepping


def erring_gets(world: World, name: str) -> list[str]:
    """Every GET of management ConfigMap ``name`` answers 500 from now on; the list
    records each one asked."""
    asked: list[str] = []
    real_get = world.mgmt.get

    async def get(api_version: str, kind: str, obj_name: str, namespace: str | None = None) -> Any:
        if kind == "ConfigMap" and obj_name == name:
            asked.append(obj_name)
            raise APIError("GET configmaps: 500 Internal Server Error", status=500)
        return await real_get(api_version, kind, obj_name, namespace)

    world.mgmt.get = get  # type: ignore[method-assign]
    world.ctx.sources.forget(NS, "ConfigMap", name)
    return asked


async def test_a_pass_its_dependency_holds_waits_whatever_its_sources_read_answers() -> None:
    """The management API server errs on the dependent's source: ``base`` not done
    holds ``a``'s pass all the same, which waits quietly, never reading it; and one
    whose last pass failed, whose gate reads it to find the failed revision, keeps
    that failure as it is and waits too."""
    world = await world_with(crs("a", "src", dependsOn=[{"name": "base"}]), crs("base", "gone"))
    asked = erring_gets(world, "src")
    await reconcile_cluster(world.ctx, NS, "c1")
    world.sync_bindings()
    found = world.ctx.outcomes.get(NS, "a", "c1")
    assert found is not None and (found.state, found.reason) == ("Waiting", "DependencyNotReady")
    assert asked == []
    cluster, cached = world.index.cluster(NS, "c1"), world.ctx.caches.binding(NS, "c1")
    the_crs = world.index.crs(NS, "a")
    assert cluster is not None and cached is not None and the_crs is not None
    spec = cached.valid.spec.model_copy(update={"bindings": [failed_taking("r1")]})
    scope = ClusterScope(world.ctx, cluster, cached.valid.model_copy(update={"spec": spec}))
    held = await Gate(scope).admit(the_crs)
    assert isinstance(held, Held) and held == Held(Wait("base"), 1, "r1") and asked == ["src"]
    found = held.outcome(failed_taking("r1"))
    assert (found.reason, found.revision) == ("UnresolvedVariable", "r1")
