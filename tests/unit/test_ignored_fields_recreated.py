"""An object deleted on the workload cluster is created again whole, the fields left
to others (``spec.ignore``) included, whichever pass recreates it: a changed source
with no drift check to have seen it missing, or a drift check of a CRS whose other
resource names the same object. Paths are left out only of objects known to exist."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crs_controller.core.errors import APIError

from .builders import NS, Obj, configmap_source, crs, outcome, reconcile, world_with
from .fake_clock import FakeClock
from .memory_kube import MemoryKube

IGNORE_W = [{"target": {"kind": "ConfigMap", "name": "addon"}, "paths": ["/data/w"]}]


def addon(v: str) -> Obj:
    meta = {"name": "addon", "namespace": "default"}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {"v": v, "w": "seed"},
    }


async def _data(workload: MemoryKube) -> Any:
    live = await workload.get("v1", "ConfigMap", "addon", "default")
    assert live is not None
    return live["data"]


async def _change_source(world: Any, v: str) -> None:
    source = await world.mgmt.get("v1", "ConfigMap", "src", NS)
    source["data"] = configmap_source("src", addon(v))["data"]
    await world.update(source)


async def test_a_deleted_object_a_changed_source_recreates_keeps_its_ignored_fields() -> None:
    world = await world_with(
        crs("a", "src", ignore=IGNORE_W), mode_source=configmap_source("src", addon("1"))
    )
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    assert await _data(workload) == {"v": "1", "w": "seed"}  # created whole

    await workload.delete("v1", "ConfigMap", "addon", "default")
    await _change_source(world, "2")
    await reconcile(world)  # no drift check ran: the apply reads before leaving out
    assert await _data(workload) == {"v": "2", "w": "seed"}
    assert outcome(world, "a")[0] == "Applied"

    await _change_source(world, "3")
    await reconcile(world)  # it exists now: the ignored path is left out again
    assert await _data(workload) == {"v": "3"}


async def test_an_object_needing_its_ignored_field_to_be_created_is_created_again() -> None:
    # A required field left to others (a container's image, say): created without
    # it, the API server would refuse the object for ever.
    world = await world_with(
        crs("a", "src", ignore=IGNORE_W), mode_source=configmap_source("src", addon("1"))
    )
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    await workload.delete("v1", "ConfigMap", "addon", "default")
    _refuse_creating_without_w(workload)
    await _change_source(world, "2")
    await reconcile(world)
    assert outcome(world, "a")[0] == "Applied"
    assert await _data(workload) == {"v": "2", "w": "seed"}


async def test_an_object_two_resources_name_is_recreated_whole_after_a_drift_check() -> None:
    spec = {"driftDetection": "Content", "driftCheckInterval": "1m", "ignore": IGNORE_W}
    a = crs("a", "src", **spec)
    a["spec"]["resources"].append({"kind": "ConfigMap", "name": "src2"})
    world = await world_with(a, mode_source=configmap_source("src", addon("1")))
    await world.add(configmap_source("src2", addon("1")))
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    await workload.delete("v1", "ConfigMap", "addon", "default")
    clock = world.ctx.clock
    assert isinstance(clock, FakeClock)
    clock.advance(61)
    await reconcile(world)  # found missing: each resource sends it whole
    assert await _data(workload) == {"v": "1", "w": "seed"}


def _refuse_creating_without_w(workload: MemoryKube) -> None:
    """The workload cluster refuses to create ``addon`` without ``data.w``, as an API
    server refuses an object that lacks a required field."""
    apply = workload.apply

    async def refusing(obj: Mapping[str, Any], **options: Any) -> Obj:
        new = await workload.get("v1", "ConfigMap", obj["metadata"]["name"], "default") is None
        if new and "w" not in obj.get("data", {}):
            raise APIError("ConfigMap addon is invalid", status=422)
        return await apply(obj, **options)

    workload.apply = refusing  # type: ignore[method-assign]
