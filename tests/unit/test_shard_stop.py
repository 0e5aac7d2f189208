"""A shard member whose share shrinks mid-pass stops that pass: its Lease deleted or
its renewal overdue, a Cluster's pass in flight applies, deletes and records nothing
more; a pass on a Cluster it still owns goes on. The workload's apply blocks until the
test lets it go. No server, no sleeping."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from crs_controller.core.api.models import CLUSTER_RESOURCE_SET_BINDING_KIND
from crs_controller.core.membership.lease import LeaseRecord
from crs_controller.core.membership.shard import owner
from crs_controller.engine.reconcile.context import Settings
from crs_controller.engine.reconcile.result import cluster_key
from crs_controller.engine.runtime.controller import Controller
from crs_controller.engine.runtime.membership import ShardMembership

from .builders import NS, cluster, configmap_source, crs, kubeconfig_secret, payload
from .fake_clock import FakeClock
from .memory_kube import CLUSTER_API, MemoryKube, Workloads

LEASE = 6.0
ME = "replica-a"


class HeldWorkload(MemoryKube):
    """A workload cluster whose applies wait until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__("c1")
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def apply(self, obj: Mapping[str, Any], **options: Any) -> dict[str, Any]:
        self.entered.set()
        await self.release.wait()
        return await super().apply(obj, **options)


def lease(identity: str, renewed: str) -> LeaseRecord:
    return LeaseRecord(f"crs-controller-shard-{identity}", identity, LEASE, renewed, None, 0)


async def member(clock: FakeClock, workload: MemoryKube, *, stops: bool = True) -> Any:
    """This replica's controller over c1 (one CRS selects it), alone in its shard set;
    ``stops=False``: its passes are not stopped when its share changes (the last
    guard alone is left)."""
    mgmt = MemoryKube("management")
    for obj in (configmap_source("src", payload("addon")), crs("a", "src"), cluster("c1")):
        await mgmt.create(obj)
    await mgmt.create(kubeconfig_secret("c1"))
    controller = Controller(mgmt, Settings(), CLUSTER_API, clock=clock)
    changed = controller.reshard if stops else (lambda before, after: None)
    shard = ShardMembership(
        mgmt, "crs-system", ME, lease_seconds=LEASE, clock=clock, on_change=changed
    )
    controller.join(shard)
    for informer in controller.informers:
        await informer._relist()
    ctx = replace(controller.cluster_ctx, workloads=Workloads({"c1": workload}))
    controller.cluster_ctx = ctx
    shard.renewed()
    shard.refresh()
    shard.ready.set()
    await controller.bindings._relist()  # its share's bindings, as the watch lists them
    return controller, shard


def binding_writes(mgmt: MemoryKube) -> list[tuple[str, str]]:
    return [w for w in mgmt.writes() if w[1].startswith(CLUSTER_RESOURCE_SET_BINDING_KIND)]


async def in_flight(controller: Controller, workload: HeldWorkload) -> asyncio.Task[None]:
    passing = asyncio.ensure_future(controller._process(cluster_key(NS, "c1")))
    await workload.entered.wait()  # the pass is applying: in flight
    return passing


async def test_a_pass_in_flight_stops_when_its_lease_is_deleted() -> None:
    clock, workload = FakeClock(), HeldWorkload()
    controller, shard = await member(clock, workload)
    passing = await in_flight(controller, workload)
    shard.on_lease(lease(ME, "t1"), None)  # deleted under it
    shard.refresh()
    assert shard.members == frozenset()
    applied = len(workload.writes())
    workload.release.set()
    await passing
    assert workload.writes()[applied:] == []  # nothing applied or deleted after
    assert binding_writes(controller.mgmt) == []
    assert (NS, "c1") not in controller._passes


async def test_a_pass_in_flight_stops_when_its_renewal_is_overdue() -> None:
    clock, workload = FakeClock(), HeldWorkload()
    controller, shard = await member(clock, workload)
    passing = await in_flight(controller, workload)
    clock.advance(LEASE * 2 / 3)  # not renewed for two thirds of the lease
    shard.refresh()
    assert shard.members == frozenset()
    applied = len(workload.writes())
    workload.release.set()
    await passing
    assert workload.writes()[applied:] == []
    assert binding_writes(controller.mgmt) == []


async def test_a_pass_that_runs_on_is_not_recorded_once_the_cluster_is_not_ours() -> None:
    clock, workload = FakeClock(), HeldWorkload()
    controller, shard = await member(clock, workload, stops=False)
    passing = await in_flight(controller, workload)
    shard.on_lease(lease(ME, "t1"), None)
    shard.refresh()
    workload.release.set()
    await passing  # the apply it was making completes; the binding is not written
    assert binding_writes(controller.mgmt) == []


async def test_a_pass_on_a_cluster_still_ours_goes_on_when_another_member_joins() -> None:
    clock, workload = FakeClock(), HeldWorkload()
    controller, shard = await member(clock, workload)
    passing = await in_flight(controller, workload)
    others = (f"replica-{n}" for n in range(100))
    other = next(o for o in others if owner([ME, o], f"{NS}/c1") == ME)
    shard.on_lease(None, lease(other, "t1"))
    shard.refresh()
    assert shard.members == {ME, other}
    workload.release.set()
    await passing
    assert ("apply", "ConfigMap/addon") in workload.writes()
    assert binding_writes(controller.mgmt) == [
        ("create", f"{CLUSTER_RESOURCE_SET_BINDING_KIND}/c1")
    ]
