"""What the controller keeps of each source's last load (its change number) is kept
for exactly the sources some CRS names: another tenant's loads, however many, never
push a named source's record out, so a pass loading it again never takes it for a
change (which would wake its clusters with no event, round after round); and a CRS
deleted or edited to name other sources drops the records only it needed. Keys are
taken by hand on the in-memory API and a fake clock; nothing sleeps."""

from __future__ import annotations

import copy
from collections.abc import Hashable

from crs_controller.core.api.models import API_VERSION, ResourceRef
from crs_controller.engine.reconcile.context import Settings
from crs_controller.engine.reconcile.result import crs_key
from crs_controller.engine.runtime.controller import Controller, status_settle

from .builders import NS, cluster, configmap_source, crs, payload
from .fake_clock import FakeClock
from .memory_kube import CLUSTER_API, MemoryKube

# More sources than any least-recently-used record of them would hold (16,384).
CROWD = 16_385


async def two_sets() -> tuple[Controller, FakeClock]:
    """CRSs a and b naming two ConfigMaps each, all four there, and one Cluster."""
    clock = FakeClock()
    mgmt = MemoryKube("management")
    controller = Controller(mgmt, Settings(), CLUSTER_API, clock=clock)
    for name in ("a", "b"):
        obj = crs(name, f"{name}1")
        obj["spec"]["resources"] = [{"kind": "ConfigMap", "name": f"{name}{i}"} for i in (1, 2)]
        controller._on_crs(None, controller.informers[0].put(await mgmt.create(obj)))
    controller._on_cluster(None, controller.informers[1].put(await mgmt.create(cluster("c-0"))))
    for name in ("a1", "a2", "b1", "b2"):
        source = await mgmt.create(configmap_source(name, payload("x")))
        controller._on_source("ConfigMap")(None, controller.informers[3].put(source))
    return controller, clock


async def crowd(controller: Controller) -> None:
    """Another tenant's passes load that many ConfigMaps no CRS here names (missing)."""
    sources = controller.crs_ctx.sources
    for n in range(CROWD):
        await sources.load("tenant", ResourceRef(kind="ConfigMap", name=f"made-up-{n}"))


async def touch(controller: Controller, name: str, n: int) -> None:
    """An annotation written on a ConfigMap (a new version, the same content)."""
    stored = await controller.mgmt.get("v1", "ConfigMap", name, NS)
    assert stored is not None
    obj = copy.deepcopy(stored)
    obj["metadata"]["annotations"] = {"touched": str(n)}
    informer = controller.informers[3]
    old = informer.get(NS, name)
    controller._on_source("ConfigMap")(old, informer.put(await controller.mgmt.replace(obj)))


async def round_of_keys(controller: Controller, clock: FakeClock) -> list[Hashable]:
    """Every key ready now taken (the clusters' only noted), then twice a settle
    passes: the keys taken."""
    taken = []
    while len(controller.queue):
        key = controller.queue.get_nowait()
        taken.append(key)
        if key[0] != "cluster":  # type: ignore[index]
            await controller._process(key)
        controller.queue.done(key)
    clock.advance(status_settle(0.0) * 2)
    controller.queue.fire_due(clock.now())
    return taken


def woken(taken: list[Hashable]) -> int:
    return sum(key[0] == "cluster" for key in taken)  # type: ignore[index]


async def test_other_sources_loaded_never_make_a_named_one_look_changed() -> None:
    controller, clock = await two_sets()
    first = [await round_of_keys(controller, clock) for _ in range(3)]
    assert woken(first[0]) > 0  # the sources first seen: the cluster looks
    assert [woken(taken) for taken in first[1:]] == [0, 0]
    rounds = []
    for n in range(4):
        await crowd(controller)
        await touch(controller, "a1", n)  # loads a's sources: its look, its status pass
        rounds.append(await round_of_keys(controller, clock))
    assert crs_key(NS, "a") in rounds[-1]  # the sign that it looked (the status pass)
    assert [woken(taken) for taken in rounds] == [0] * 4, rounds


async def test_the_record_follows_the_crss_references() -> None:
    controller, clock = await two_sets()
    for _ in range(2):
        await round_of_keys(controller, clock)
    sources = controller.crs_ctx.sources
    record = sources._seen
    await crowd(controller)
    assert set(record) == {(NS, "ConfigMap", n) for n in ("a1", "a2", "b1", "b2")}
    # b now names b2 and c1 (missing): b1 is dropped, c1 kept once loaded.
    crss = controller.informers[0]
    stored = await controller.mgmt.get(API_VERSION, "ClusterResourceSet", "b", NS)
    assert stored is not None
    edited = copy.deepcopy(stored)
    edited["spec"]["resources"] = [{"kind": "ConfigMap", "name": n} for n in ("b2", "c1")]
    controller._on_crs(crss.get(NS, "b"), crss.put(await controller.mgmt.replace(edited)))
    assert (NS, "ConfigMap", "b1") not in record
    await round_of_keys(controller, clock)
    assert set(record) == {(NS, "ConfigMap", n) for n in ("a1", "a2", "b2", "c1")}
    # a deleted: what only it named goes.
    controller._on_crs(crss.remove(NS, "a"), None)
    assert set(record) == {(NS, "ConfigMap", n) for n in ("b2", "c1")}
