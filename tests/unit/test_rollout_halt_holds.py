"""A halted rollout stays halted while its failed clusters merely wait: the retry of
a cluster whose failed pass was taking the revision, held by the rollout (halted, it
admits nobody), by the fleet-wide budget (a failing holder's place given back), by a
CRS it depends on failing there, or by a rollback whose snapshot cannot be read,
keeps that failure as the cluster's outcome. So the phase does not flap
between Halted and Progressing and ``RolloutHalted`` is told once. The halt ends when
the operator changes the sources, or when the failures are cured: a failed cluster
whose retry runs (it has all of the revision) and succeeds, or one whose Cluster is
being deleted (it has left the rollout, however long finalizers keep it)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from crs_controller.core.api.models import API_VERSION
from crs_controller.core.rollout.history import ROLLBACK_ANNOTATION
from crs_controller.core.rollout.snapshots import snapshot_name
from crs_controller.engine.memory.budget import FAILING_HOLD, Budget
from crs_controller.engine.reconcile.cluster import reconcile_cluster
from crs_controller.engine.reconcile.context import ClusterContext
from crs_controller.engine.reconcile.crs import reconcile_crs

from .builders import (
    NS,
    cluster,
    configmap_source,
    crs,
    kubeconfig_secret,
    payload,
    reconcile,
    world_with,
)
from .memory_kube import CLUSTER_API, MemoryKube, Woken, World
from .test_crs_status import restarted
from .test_revisions import annotate, two_revisions
from .test_rollout_failures import (
    CLUSTERS,
    canary_world,
    cut_off,
    edit,
    missing_variable,
    passes,
    status,
    told,
    two_resources,
)

pytestmark = pytest.mark.asyncio

HALTED = "halted: 1 cluster failed (maximum 0): c1"


def reason_on(world: World, name: str, crs_name: str = "a") -> str:
    """The reason of CRS ``crs_name``'s outcome the binding of cluster ``name`` records."""
    binding = world.mgmt.objects[(API_VERSION, "ClusterResourceSetBinding", NS, name)]
    entries = binding["spec"]["bindings"]
    entry = next(e for e in entries if e["clusterResourceSetName"] == crs_name)
    return str(entry["outcome"]["reason"])


def addon_on(world: World, name: str) -> str:
    workload = world.ctx.workloads.clients[name]  # type: ignore[attr-defined]
    return str(workload.objects[("v1", "ConfigMap", "default", "addon")]["data"]["v"])


def reconnect(ctx: ClusterContext) -> None:
    """Undo ``cut_off``: every cluster can be contacted again."""
    vars(ctx.workloads).pop("get", None)


async def three_clusters() -> World:
    """``two_resources("Halt")`` (maxConcurrent 1, maxFailures 0) over c1, c2, c3."""
    world = await two_resources("Halt")
    for name in CLUSTERS[1:]:
        await world.add(cluster(name))
        await world.add(kubeconfig_secret(name))
        world.ctx.workloads.clients[name] = MemoryKube(name)  # type: ignore[attr-defined]
    return world


async def test_a_halted_rollout_stays_halted_while_the_failed_retry_is_held() -> None:
    world = await three_clusters()
    first = restarted(world)
    await passes(world, first, *CLUSTERS)
    await edit(world, "src", payload("addon", "2"))  # applies on c1
    await edit(world, "src2", missing_variable(world))  # then fails there
    for _ in range(6):
        await passes(world, first, *CLUSTERS)
        rollout = status(world)["rollout"]
        assert (rollout["phase"], rollout["message"]) == ("Halted", HALTED)
        assert reason_on(world, "c1") == "UnresolvedVariable"  # not "waiting for its step"
        assert status(world)["failedClusters"] == 1
        world.ctx.clock.advance(300)  # type: ignore[attr-defined]
    assert len(told(world, "RolloutHalted")) == 1
    assert [addon_on(world, name) for name in CLUSTERS] == ["2", "1", "1"]
    # From the bindings alone (a restart, a new leader): the same.
    await reconcile_crs(restarted(world)[0], NS, "a")
    assert status(world)["rollout"]["phase"] == "Halted"

    # The operator mends the sources: a new revision, c1 first.
    await edit(world, "src2", payload("two", "fixed"))
    await passes(world, first, *CLUSTERS)
    assert status(world)["rollout"]["phase"] == "Progressing"
    assert reason_on(world, "c1") == "Applied"
    assert len(told(world, "RolloutHalted")) == 1


async def test_a_failed_cluster_whose_retry_succeeds_cures_the_halt() -> None:
    """The canary, soaking on the new revision, cannot be contacted: halted, and still
    halted on each retry that fails. Contacted again, its retry (it has all of the
    revision) succeeds: the rollout goes on from where it was."""
    world = await canary_world(approval="Automatic")
    first = restarted(world)
    await passes(world, first, *CLUSTERS)
    await edit(world, "src", payload("addon", "2"))
    await passes(world, first, "c1")
    cut_off(first[1], "c1")
    for _ in range(3):
        await passes(world, first, *CLUSTERS)
        assert status(world)["rollout"]["phase"] == "Halted"
    assert len(told(world, "RolloutHalted")) == 1
    reconnect(first[1])
    await passes(world, first, "c1")
    rollout = status(world)["rollout"]
    assert rollout["phase"] == "Progressing"
    assert rollout["message"].startswith("soaking after step 1")
    world.ctx.clock.advance(1802)  # type: ignore[attr-defined]  # the soak, from the cure
    await passes(world, first, *CLUSTERS)
    assert status(world)["rollout"]["phase"] == "Complete"
    assert [addon_on(world, name) for name in CLUSTERS] == ["2", "2", "2"]
    assert len(told(world, "RolloutHalted")) == 1


def with_budget(world: World, places: int, wake: Woken) -> Budget:
    budget = Budget(places, world.ctx.clock, wake=wake)
    settings = replace(world.ctx.settings, max_updating_clusters=places)
    world.ctx = replace(world.ctx, settings=settings, budget=budget)
    return budget


async def test_a_failing_holders_place_given_back_does_not_lift_the_halt() -> None:
    """c1 fails part-way through the revision, holding the one place, while the plan
    made before it failed still admits it; another tenant waits. After FAILING_HOLD
    the place goes to that tenant and c1's retry waits for the budget: it keeps its
    failure (and its place in the line), so the rollout halts and stays halted."""
    woken = Woken()
    world = await two_resources("Halt")
    budget = with_budget(world, 1, woken)
    crs_ctx, ctx = restarted(world)
    await passes(world, (crs_ctx, ctx), "c1")
    await edit(world, "src", payload("addon", "2"))
    await edit(world, "src2", missing_variable(world))
    await reconcile_crs(crs_ctx, NS, "a")  # admits c1
    clock: Any = world.ctx.clock
    await reconcile_cluster(ctx, NS, "c1")  # fails, keeping its place
    world.sync_bindings()
    assert not budget.ask(("tenant-2", "x"), "x", 1)
    clock.advance(FAILING_HOLD)
    await reconcile_cluster(ctx, NS, "c1")  # fails again, and gives the place back
    world.sync_bindings()
    assert woken == [("tenant-2", "x")] and budget.ask(("tenant-2", "x"), "x", 1)
    await reconcile_cluster(ctx, NS, "c1")  # the retry waits for the budget
    world.sync_bindings()
    assert reason_on(world, "c1") == "UnresolvedVariable"
    assert budget.pairs((NS, "c1")) == {"a"} and budget.waiting == 1  # in the line
    for _ in range(3):
        await reconcile_crs(crs_ctx, NS, "a")
        assert (status(world)["rollout"]["phase"], status(world)["rollout"]["message"]) == (
            "Halted",
            HALTED,
        )
        await reconcile_cluster(ctx, NS, "c1")
        world.sync_bindings()
        assert reason_on(world, "c1") == "UnresolvedVariable"
    assert len(told(world, "RolloutHalted")) == 1


async def depending_world() -> World:
    """CRS ``a`` (two resources, the second substituted; maxConcurrent 2, maxFailures
    1) depends on CRS ``dep``, whose resource takes ``ZONE`` from each Cluster's label
    ``zone``; c1, c2 and c3 have the label."""
    rollout = {"maxConcurrent": 2, "maxFailures": 1, "onFailure": "Halt"}
    spec = crs("a", "src", rollout=rollout, dependsOn=[{"name": "dep"}])
    spec["spec"]["resources"].append({"kind": "ConfigMap", "name": "src2", "substitute": True})
    zone = {"name": "ZONE", "valueFrom": {"clusterField": "metadata.labels['zone']"}}
    dep = crs("dep", "dsrc", variables=[zone])
    dep["spec"]["resources"] = [{"kind": "ConfigMap", "name": "dsrc", "substitute": True}]
    world = await world_with(spec, dep)
    await world.add(configmap_source("src2", payload("two", "plain")))
    await world.add(configmap_source("dsrc", payload("zone", "${ZONE}")))
    for name in CLUSTERS[1:]:
        world.ctx.workloads.clients[name] = MemoryKube(name)  # type: ignore[attr-defined]
        await world.add(cluster(name))
        await world.add(kubeconfig_secret(name))
    for name in CLUSTERS:
        await zone_label(world, name, "west")
    return world


async def zone_label(world: World, name: str, zone: str | None) -> None:
    """Set (or, with None, remove) Cluster ``name``'s label ``zone``."""
    obj = await world.mgmt.get(CLUSTER_API, "Cluster", name, NS)
    labels = obj["metadata"]["labels"]
    labels.pop("zone", None)
    if zone is not None:
        labels["zone"] = zone
    await world.update(obj)


HALTED_TWO = "halted: 2 clusters failed (maximum 1): c1, c2"


@pytest.mark.parametrize("failing", [("c1",), CLUSTERS], ids=["on-c1", "everywhere"])
async def test_a_dependency_failing_keeps_the_held_retry_failed(failing: tuple[str, ...]) -> None:
    """c1 and c2 fail part-way through ``a``'s revision: halted. Then ``dep`` fails
    (on c1 alone, or everywhere), holding ``a``'s retries there: they keep their
    failure, so the rollout stays halted, is told once, and c3 never takes the
    halted revision."""
    world = await depending_world()
    first = restarted(world)
    await passes(world, first, *CLUSTERS)
    assert [reason_on(world, name) for name in CLUSTERS] == ["Applied"] * 3
    await edit(world, "src", payload("addon", "2"))  # applies
    await edit(world, "src2", missing_variable(world))  # then fails
    await passes(world, first, *CLUSTERS)
    assert (status(world)["rollout"]["phase"], status(world)["rollout"]["message"]) == (
        "Halted",
        HALTED_TWO,
    )
    for name in failing:
        await zone_label(world, name, None)  # dep cannot be applied there any more
    for _ in range(4):
        await passes(world, first, *CLUSTERS)
        assert [reason_on(world, name, "dep") for name in failing] == ["UnresolvedVariable"] * len(
            failing
        )
        rollout = status(world)["rollout"]
        assert (rollout["phase"], rollout["message"]) == ("Halted", HALTED_TWO)
        assert [reason_on(world, name) for name in ("c1", "c2")] == ["UnresolvedVariable"] * 2
        assert status(world)["failedClusters"] == 2
        world.ctx.clock.advance(300)  # type: ignore[attr-defined]
    assert len(told(world, "RolloutHalted")) == 1
    assert [addon_on(world, name) for name in CLUSTERS] == ["2", "2", "1"]  # c3 untouched
    await reconcile_crs(restarted(world)[0], NS, "a")  # from the bindings alone
    assert status(world)["rollout"]["phase"] == "Halted"


async def test_a_rollback_it_cannot_read_keeps_the_failed_retry_failed() -> None:
    """A rollback by hand to the first revision is in force; c1 cannot be contacted
    as it takes it: it failed taking the rollback's target. Contacted again, its
    retry is held, the rollback's snapshot not being readable: it keeps its failure,
    so the rollback's phase stays what that failure made it."""
    world = await world_with(crs("a", "src"))
    ctx = world.crs_context()
    first, second = await two_revisions(world, ctx, set())
    await annotate(world, {ROLLBACK_ANNOTATION: f"{second}/{first}"})
    await reconcile_crs(ctx, NS, "a")
    cut_off(world.ctx, "c1")
    await reconcile(world)
    await reconcile_crs(ctx, NS, "a")
    assert reason_on(world, "c1") == "ClusterUnreachable"
    halted = status(world)["rollout"]
    assert halted["phase"] == "Halted"
    reconnect(world.ctx)
    world.forget("ConfigMap", NS, snapshot_name("a", first))  # cannot be read here
    for _ in range(3):
        await reconcile(world)
        await reconcile_crs(ctx, NS, "a")
        assert reason_on(world, "c1") == "ClusterUnreachable"
        assert status(world)["rollout"]["phase"] == "Halted"
        assert status(world)["failedClusters"] == 1
    assert addon_on(world, "c1") == "2"  # held: what it had


async def test_a_failed_cluster_being_deleted_leaves_the_halted_rollout() -> None:
    """c1 took the new revision and cannot be contacted while its rollout goes on:
    halted. Its Cluster is then deleted, held by a finalizer that never goes: it has
    left the rollout, which goes on over c2 and c3 and completes without it, never
    admitting c1 again. Its failure still shows in ``failedClusters`` until the
    Cluster is gone."""
    world = await three_clusters()
    first = restarted(world)
    await passes(world, first, *CLUSTERS)
    await edit(world, "src", payload("addon", "2"))
    await passes(world, first, "c1")
    cut_off(first[1], "c1")
    await passes(world, first, *CLUSTERS)
    assert (status(world)["rollout"]["phase"], status(world)["rollout"]["message"]) == (
        "Halted",
        HALTED,
    )
    c1 = await world.mgmt.get(CLUSTER_API, "Cluster", "c1", NS)
    c1["metadata"]["finalizers"] = ["infrastructure.example.com/never"]
    c1["metadata"]["deletionTimestamp"] = "2026-11-22T10:00:00Z"
    await world.update(c1)
    for _ in range(3):
        await passes(world, first, *CLUSTERS)
        made = first[0].rollouts.plan(NS, "a")
        assert made is not None and "c1" not in made[1].admit
    rollout = status(world)["rollout"]
    assert (rollout["phase"], rollout["updatedClusters"]) == ("Complete", 2)
    assert [addon_on(world, name) for name in CLUSTERS[1:]] == ["2", "2"]
    assert (status(world)["matchingClusters"], status(world)["failedClusters"]) == (3, 1)
    ready = next(c for c in status(world)["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ClusterUnreachable")
    assert len(told(world, "RolloutHalted")) == 1
    await reconcile_crs(restarted(world)[0], NS, "a")  # from the bindings alone
    assert status(world)["rollout"]["phase"] == "Complete"


async def test_a_dependency_cycle_says_so_and_the_rollout_stays_halted() -> None:
    """c1 and c2 fail part-way through ``a``'s revision: halted. ``dep`` then comes to
    depend on ``a``: a cycle, which lifts only when the operator acts. ``a``'s
    outcome there says so (not the old failure), still failed taking the halted
    revision, so the rollout stays halted and is told once."""
    world = await depending_world()
    first = restarted(world)
    await passes(world, first, *CLUSTERS)
    await edit(world, "src", payload("addon", "2"))
    await edit(world, "src2", missing_variable(world))
    await passes(world, first, *CLUSTERS)
    assert status(world)["rollout"]["message"] == HALTED_TWO
    dep = await world.mgmt.get(API_VERSION, "ClusterResourceSet", "dep", NS)
    dep["spec"]["dependsOn"] = [{"name": "a"}]
    dep["metadata"]["generation"] += 1
    await world.update(dep)
    for _ in range(3):
        await passes(world, first, *CLUSTERS)
        assert [reason_on(world, name) for name in CLUSTERS] == ["DependencyCycle"] * 3
        rollout = status(world)["rollout"]
        assert (rollout["phase"], rollout["message"]) == ("Halted", HALTED_TWO)
        world.ctx.clock.advance(300)  # type: ignore[attr-defined]
    assert len(told(world, "RolloutHalted")) == 1
    assert [addon_on(world, name) for name in CLUSTERS] == ["2", "2", "1"]
    await reconcile_crs(restarted(world)[0], NS, "a")  # from the bindings alone
    assert status(world)["rollout"]["phase"] == "Halted"
