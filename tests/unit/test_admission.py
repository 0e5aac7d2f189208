"""The one gate of a CRS on a cluster (``engine.reconcile.admission``): dependencies
first, then the rollout; a held CRS's outcome comes from one ``describe``; a first
install and a cluster already on the revision are never held by the rollout."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from crs_controller.core.dependencies import Cycle, Missing, Wait
from crs_controller.core.models import API_VERSION
from crs_controller.core.rollout import Plan
from crs_controller.core.status import Outcome, State
from crs_controller.engine.reconcile.admission import Gate, Go, Held, Hold, RolloutStep, describe
from crs_controller.engine.reconcile.cluster import reconcile_cluster
from crs_controller.engine.reconcile.rollout import target_revision

from .memory_kube import CLUSTER_API, MemoryKube, World

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
    target = await target_revision(ctx, the_crs)
    assert target is not None
    gate = Gate(ctx, cluster, {"a": entry}, {})
    assert await gate.admit(the_crs, entry) == Held(RolloutStep(), 1)
    ctx.rollouts.set(NS, "a", target, Plan(frozenset({"c1"}), "Progressing", 1, 0, "", None))
    assert await gate.admit(the_crs, entry) == Go(target)
