"""Builders for the reconcile unit tests: a CRS, a Cluster and its kubeconfig Secret as
the API would hand them over, a world of in-memory clients holding them
(``memory_kube``), and one cluster reconcile of it."""

from __future__ import annotations

from typing import Any

import yaml

from crs_controller.core.api.models import API_VERSION, FINALIZER
from crs_controller.engine.reconcile.cluster import reconcile_cluster

from .memory_kube import CLUSTER_API, MemoryKube, World

NS = "default"
Obj = dict[str, Any]


def configmap_source(name: str, *objects: Obj) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS},
        "data": {"a": yaml.safe_dump_all(objects)},
    }


def payload(name: str, value: str = "1") -> Obj:
    meta = {"name": name, "namespace": "default"}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"v": value}}


def crs(name: str, source: str, mode: str = "Reconcile", **spec: Any) -> Obj:
    """A CRS as the clusters meet it: one that deletes what it applied carries the
    finalizer the leader puts on it (clusters apply it only then)."""
    meta: Obj = {"name": name, "namespace": NS, "generation": 1}
    if spec.get("deletionPolicy") == "Delete":
        meta["finalizers"] = [FINALIZER]
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterResourceSet",
        "metadata": meta,
        "spec": {
            "clusterSelector": {"matchLabels": {"env": "prod"}},
            "resources": [{"kind": "ConfigMap", "name": source}],
            "mode": mode,
            **spec,
        },
    }


def cluster(name: str, **spec: Any) -> Obj:
    return {
        "apiVersion": CLUSTER_API,
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": NS, "labels": {"env": "prod"}},
        "spec": spec,
        "status": {"controlPlaneReady": True},
    }


def kubeconfig_secret(cluster_name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"{cluster_name}-kubeconfig", "namespace": NS},
        "data": {"value": ""},
    }


async def world_with(*crss: Obj, mode_source: Obj | None = None, paused: bool = False) -> World:
    workload = MemoryKube("c1")
    world = World({"c1": workload})
    await world.add(mode_source or configmap_source("src", payload("addon")))
    for item in crss:
        await world.add(item)
    await world.add(cluster("c1", **({"paused": True} if paused else {})))
    await world.add(kubeconfig_secret("c1"))
    return world


async def reconcile(world: World) -> Any:
    result = await reconcile_cluster(world.ctx, NS, "c1")
    world.sync_bindings()
    return result


def outcome(world: World, crs_name: str) -> tuple[str, str]:
    found = world.ctx.outcomes.get(NS, crs_name, "c1")
    assert found is not None
    return found.reason, found.message
