"""Which failures a rollout counts against which revision, from the bindings: a
cluster that fails after its revision's rollout completed (it cannot be contacted any
more) halts nothing, neither that revision nor the next one's steps, approvals and
soaks; a pass that fails after part of a new revision was applied (a variable
missing, a manifest that does not parse, the cluster gone mid-pass) fails that
revision on the cluster, so the rollout halts, and rolls back when configured. The
same after a restart, when only the bindings tell. A rollout no longer planned (its
policy removed) leaves no phase shown on any replica; a revision a binding names that
the controller never computed is shown under ``revision="_other"``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from crs_controller.core.api.models import API_VERSION
from crs_controller.core.errors import Unreachable
from crs_controller.engine.io.fleet_metrics import CLUSTERS_BY_REVISION, OTHER, ROLLOUT_PHASE
from crs_controller.engine.reconcile.cluster import reconcile_cluster
from crs_controller.engine.reconcile.context import ClusterContext, CRSContext
from crs_controller.engine.reconcile.crs import reconcile_crs

from .builders import NS, cluster, configmap_source, crs, kubeconfig_secret, payload, world_with
from .memory_kube import CLUSTER_API, MemoryKube, World
from .test_crs_status import restarted

pytestmark = pytest.mark.asyncio

Obj = dict[str, Any]
CLUSTERS = ("c1", "c2", "c3")


def status(world: World) -> Obj:
    return world.mgmt.objects[(API_VERSION, "ClusterResourceSet", NS, "a")]["status"]  # type: ignore[no-any-return]


def told(world: World, reason: str) -> list[str]:
    events = [o for k, o in world.mgmt.objects.items() if k[1] == "Event"]
    return [e["message"] for e in events if e["reason"] == reason]


async def edit(world: World, name: str, *objects: Obj) -> None:
    source = world.mgmt.objects[("v1", "ConfigMap", NS, name)]
    await world.update({**source, "data": configmap_source(name, *objects)["data"]})


def sync_sources(world: World) -> None:
    """Show the ConfigMaps written (the snapshots) to the caches, as the watch would."""
    for key, obj in list(world.mgmt.objects.items()):
        if key[1] == "ConfigMap":
            world.sync(obj)


async def passes(world: World, ctxs: tuple[CRSContext, ClusterContext], *names: str) -> None:
    """A CRS pass, a pass on each of ``names``, and a CRS pass again."""
    crs_ctx, cluster_ctx = ctxs
    await reconcile_crs(crs_ctx, NS, "a")
    sync_sources(world)
    for name in names:
        await reconcile_cluster(cluster_ctx, NS, name)
        world.sync_bindings()
    await reconcile_crs(crs_ctx, NS, "a")


def cut_off(ctx: ClusterContext, name: str) -> None:
    """``name`` can no longer be contacted: opening its client fails."""
    workloads: Any = ctx.workloads
    opened = workloads.get

    async def get(namespace: str, cluster: str, secret: Obj) -> MemoryKube:
        if cluster == name:
            raise Unreachable(f"{cluster}: connection refused")
        return await opened(namespace, cluster, secret)

    workloads.get = get


async def canary_world(approval: str = "Manual") -> World:
    """c1 (the canary: a step of its own, soaking 30m), c2 and c3, nothing applied."""
    canary = {"matchLabels": {"ring": "canary"}}
    step = {"clusterSelector": canary, "approval": approval, "pauseAfter": "30m"}
    rollout = {"maxConcurrent": "100%", "maxFailures": 0, "steps": [step]}
    world = await world_with(crs("a", "src", rollout=rollout))
    for name in CLUSTERS[1:]:
        world.ctx.workloads.clients[name] = MemoryKube(name)  # type: ignore[attr-defined]
        await world.add(cluster(name))
        await world.add(kubeconfig_secret(name))
    c1 = await world.mgmt.get(CLUSTER_API, "Cluster", "c1", NS)
    c1["metadata"]["labels"]["ring"] = "canary"
    await world.update(c1)
    return world


async def test_a_cluster_failing_after_its_revision_completed_halts_nothing() -> None:
    world = await canary_world()
    first = restarted(world)
    await passes(world, first, *CLUSTERS)
    assert status(world)["rollout"]["phase"] == "Complete"
    cut_off(first[1], "c3")
    await passes(world, first, "c3")
    assert status(world)["failedClusters"] == 1  # the failure is seen
    assert status(world)["rollout"]["phase"] == "Complete"  # the rollout is not halted
    assert not told(world, "RolloutHalted")

    await edit(world, "src", payload("addon", "2"))
    for ctxs in (first, restarted(world)):  # remembered, or found from the bindings
        await reconcile_crs(ctxs[0], NS, "a")
        rollout = status(world)["rollout"]
        assert (rollout["phase"], rollout["step"]) == ("AwaitingApproval", 1)
        planned = ctxs[0].rollouts.plan(NS, "a")
        assert planned is not None and not planned[1].admit
    await reconcile_cluster(first[1], NS, "c2")
    workload = world.ctx.workloads.clients["c2"]  # type: ignore[attr-defined]
    assert workload.objects[("v1", "ConfigMap", "default", "addon")]["data"] == {"v": "1"}


def missing_variable(world: World) -> Obj:
    return payload("two", "${TYPO}")


def not_a_manifest(world: World) -> Obj:
    return {"kind": "ConfigMap", "metadata": "not a mapping"}


def cluster_gone(world: World) -> Obj:
    """The second resource's new content finds the cluster gone (after the first's
    went); the first revision's content is applied again."""
    workload: Any = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    applied = workload.apply

    async def apply(obj: Obj, **options: Any) -> Obj:
        if obj["metadata"]["name"] == "two" and obj["data"] == {"v": "changed"}:
            raise Unreachable("c1: connection reset")
        return await applied(obj, **options)  # type: ignore[no-any-return]

    workload.apply = apply
    return payload("two", "changed")


async def two_resources(on_failure: str) -> World:
    """c1 on the first revision of two resources, the second substituted."""
    rollout = {"maxConcurrent": 1, "maxFailures": 0, "onFailure": on_failure}
    spec = crs("a", "src", rollout=rollout)
    spec["spec"]["resources"] = [
        {"kind": "ConfigMap", "name": "src"},
        {"kind": "ConfigMap", "name": "src2", "substitute": True},
    ]
    world = await world_with(spec)
    await world.add(configmap_source("src2", payload("two", "plain")))
    return world


FAILURES = [missing_variable, not_a_manifest, cluster_gone]


@pytest.mark.parametrize("failure", FAILURES, ids=lambda f: f.__name__)
async def test_a_failure_after_part_of_a_revision_applied_halts_it(
    failure: Callable[[World], Obj],
) -> None:
    world = await two_resources("Halt")
    first = restarted(world)
    await passes(world, first, "c1")
    await edit(world, "src", payload("addon", "2"))  # applies
    await edit(world, "src2", failure(world))  # fails, after the first went
    await passes(world, first, "c1")
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    assert workload.objects[("v1", "ConfigMap", "default", "addon")]["data"] == {"v": "2"}
    halted = "halted: 1 cluster failed (maximum 0): c1"
    assert status(world)["rollout"]["phase"] == "Halted"
    assert status(world)["rollout"]["message"] == halted
    assert len(told(world, "RolloutHalted")) == 1
    await reconcile_crs(restarted(world)[0], NS, "a")  # from the bindings alone
    assert (status(world)["rollout"]["phase"], status(world)["rollout"]["message"]) == (
        "Halted",
        halted,
    )


@pytest.mark.parametrize("failure", FAILURES, ids=lambda f: f.__name__)
async def test_a_failure_after_part_of_a_revision_applied_rolls_it_back(
    failure: Callable[[World], Obj],
) -> None:
    world = await two_resources("Rollback")
    first = restarted(world)
    await passes(world, first, "c1")
    await edit(world, "src", payload("addon", "2"))
    await edit(world, "src2", failure(world))
    await passes(world, first, "c1")  # fails: the rollback starts
    assert status(world)["rollout"].get("rolledBackFrom")
    await passes(world, first, "c1")  # back on the first revision
    rollout = status(world)["rollout"]
    assert rollout["phase"] == "RolledBack", rollout
    assert rollout["message"].endswith("halted: 1 cluster failed (maximum 0): c1")
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    assert workload.objects[("v1", "ConfigMap", "default", "addon")]["data"] == {"v": "1"}


async def test_a_failure_while_the_revision_rolls_out_counts_only_where_it_went() -> None:
    """The canary, done on the new revision and soaking, cannot be contacted: its
    rollout is still going on, so that counts against it. A cluster the rollout holds
    back (not admitted yet) that cannot be contacted was taking nothing."""
    world = await canary_world(approval="Automatic")
    first = restarted(world)
    await passes(world, first, *CLUSTERS)
    await edit(world, "src", payload("addon", "2"))
    await passes(world, first, "c1")
    assert status(world)["rollout"]["message"].startswith("soaking after step 1")
    cut_off(first[1], "c1")
    cut_off(first[1], "c2")
    await passes(world, first, "c1", "c2")
    halted = "halted: 1 cluster failed (maximum 0): c1"
    assert (status(world)["rollout"]["phase"], status(world)["rollout"]["message"]) == (
        "Halted",
        halted,
    )
    assert status(world)["failedClusters"] == 2
    await reconcile_crs(restarted(world)[0], NS, "a")
    assert status(world)["rollout"]["message"] == halted


def phases() -> dict[str, float]:
    """The ``crs_rollout_phase`` series of CRS ``a``, by phase."""
    return {
        s.labels["phase"]: s.value
        for m in ROLLOUT_PHASE.collect()
        for s in m.samples
        if (s.labels["namespace"], s.labels["crs"]) == (NS, "a")
    }


async def test_a_rollout_no_longer_planned_shows_no_phase_on_any_replica() -> None:
    """Halted, then ``spec.rollout`` removed: the status has no rollout, and neither
    the leader nor a replica that only plans shows the CRS in a phase any more."""
    world = await two_resources("Halt")
    first = restarted(world)
    await passes(world, first, "c1")
    await edit(world, "src", payload("addon", "2"))
    await edit(world, "src2", missing_variable(world))
    await passes(world, first, "c1")
    follower = world.crs_context(leading=False)
    for ctx in (first[0], follower):
        await reconcile_crs(ctx, NS, "a")
        assert status(world)["rollout"]["phase"] == "Halted"
        assert phases()["Halted"] == 1
    spec = world.mgmt.objects[(API_VERSION, "ClusterResourceSet", NS, "a")]
    del spec["spec"]["rollout"]
    await world.update(spec)
    for ctx in (follower, first[0]):
        await reconcile_crs(ctx, NS, "a")
        assert 1 not in phases().values()
    assert "rollout" not in status(world)


def revisions() -> dict[str, float]:
    """The ``crs_rollout_clusters`` series of CRS ``a``, by revision."""
    return {
        s.labels["revision"]: s.value
        for m in CLUSTERS_BY_REVISION.collect()
        for s in m.samples
        if (s.labels["namespace"], s.labels["crs"]) == (NS, "a")
    }


async def test_a_revision_a_binding_names_that_no_history_keeps_is_shown_as_other() -> None:
    """Tenants write any text as the revision a failed pass was taking, on more
    clusters than any other revision: no series is named after it, on any replica.
    The revision the clusters move from, which the history keeps, is still shown by
    name."""
    world = await two_resources("Halt")
    for name in CLUSTERS[1:]:
        await world.add(cluster(name))
        await world.add(kubeconfig_secret(name))
        world.ctx.workloads.clients[name] = MemoryKube(name)  # type: ignore[attr-defined]
    first = restarted(world)
    await passes(world, first, *CLUSTERS)
    before = status(world)["revision"]
    await edit(world, "src", payload("addon", "2"))
    for name in CLUSTERS[1:]:
        forged = world.mgmt.objects[(API_VERSION, "ClusterResourceSetBinding", NS, name)]
        forged["spec"]["bindings"][0]["outcome"] = {
            "reason": "ApplyFailed",
            "message": "failed",
            "revision": "any text a tenant writes",
        }
        await world.mgmt.replace(forged)
    world.sync_bindings()
    for ctx in (first[0], world.crs_context(leading=False)):
        await reconcile_crs(ctx, NS, "a")
        shown = revisions()
        assert "any text a tenant writes" not in shown
        assert shown[OTHER] == 2
        assert shown[before] == 1  # c1, on the revision the history keeps
