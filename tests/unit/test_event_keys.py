"""What a watch event queues, and what it costs the event loop. A ConfigMap or Secret
change queues a look at the sources of each CRS naming it, whatever the fleet; each
CRS's clusters are woken when its look is taken, one CRS at a time (and only when
the content moved: tests/unit/test_source_wake). A Cluster change that
leaves which CRSs select it as it was (its status, an annotation, another label)
queues their status passes after the same settle as a binding write, and so does one
that changes the selection (created, deleted, a label selected or let go): the
Cluster's own pass comes now. One whose deletion begins queues them now. Nothing here
runs a server or sleeps."""

from __future__ import annotations

import copy
from collections.abc import Hashable
from typing import Any

import pytest

from crs_controller.core.spec.objects import CRS, Cluster, SourceMeta
from crs_controller.engine.reconcile.context import Settings
from crs_controller.engine.reconcile.result import cluster_key, crs_key, sources_key
from crs_controller.engine.runtime.controller import Controller, status_settle

from .builders import NS, cluster, crs
from .fake_clock import FakeClock
from .memory_kube import CLUSTER_API, MemoryKube

Obj = dict[str, Any]


async def fleet(crss: int, prod: int, dev: int) -> tuple[Controller, FakeClock]:
    """``crss`` CRSs naming ConfigMap src (selecting env=prod), ``prod`` Clusters they
    select and ``dev`` they do not; the queue emptied."""
    clock = FakeClock()
    mgmt = MemoryKube("management")
    controller = Controller(mgmt, Settings(), CLUSTER_API, clock=clock)
    crs_informer, cluster_informer = controller.informers[0], controller.informers[1]
    for n in range(crss):
        controller._on_crs(None, crs_informer.put(await mgmt.create(crs(f"set-{n}", "src"))))
    for n in range(prod + dev):
        obj = cluster(f"c-{n}")
        if n >= prod:
            obj["metadata"]["labels"] = {"env": "dev"}
        controller._on_cluster(None, cluster_informer.put(await mgmt.create(obj)))
    drain(controller)
    return controller, clock


def drain(controller: Controller) -> list[Hashable]:
    taken = []
    while len(controller.queue):
        key = controller.queue.get_nowait()
        controller.queue.done(key)
        taken.append(key)
    return taken


def count_selects(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    selects = CRS.selects

    def counted(self: CRS, target: Cluster) -> bool:
        calls[0] += 1
        return selects(self, target)

    monkeypatch.setattr(CRS, "selects", counted)
    return calls


async def test_a_source_change_costs_its_handler_no_cluster_walk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    crss, prod, dev = 30, 150, 50
    controller, _ = await fleet(crss, prod, dev)
    calls = count_selects(monkeypatch)
    controller._on_source("ConfigMap")(None, SourceMeta("src", NS, "uid-1"))
    # Linear in what the change reaches, not CRSs x Clusters (here 30 x 200).
    assert calls[0] <= crss + prod + dev
    queued = controller.queue.ready_keys()
    assert len(queued) == crss
    assert set(queued) == {sources_key(NS, f"set-{n}") for n in range(crss)}
    # Each look taken wakes its CRS's clusters (first seen by this process): the prod
    # ones, none of the dev ones.
    woken: set[Hashable] = set()
    while len(controller.queue):
        key = controller.queue.get_nowait()
        if key[0] == "sources":  # type: ignore[index]
            calls[0] = 0
            await controller._process(key)
            assert calls[0] <= prod + dev  # one CRS's clusters, once
        elif key[0] == "cluster":  # type: ignore[index]
            woken.add(key)
        controller.queue.done(key)
    assert woken == {cluster_key(NS, f"c-{n}") for n in range(prod)}


async def test_a_source_first_seen_wakes_the_clusters_when_its_look_runs() -> None:
    controller, _ = await fleet(1, 2, 1)
    controller._on_source("ConfigMap")(None, SourceMeta("src", NS, "uid-1"))
    key = controller.queue.get_nowait()
    assert key == sources_key(NS, "set-0")
    await controller._process(key)
    controller.queue.done(key)
    every = {cluster_key(NS, "c-0"), cluster_key(NS, "c-1")}
    assert set(drain(controller)) == every | {crs_key(NS, "set-0")}
    # Looked at again with the source as it was, the CRS wakes nobody.
    await controller._process(key)
    assert drain(controller) == []


async def changed(controller: Controller, name: str, edit: Any) -> None:
    informer = controller.informers[1]
    old = informer.get(NS, name)
    assert old is not None
    stored = await controller.mgmt.get(CLUSTER_API, "Cluster", name, NS)
    assert stored is not None
    obj: Obj = copy.deepcopy(stored)
    edit(obj["metadata"])
    new = informer.put(await controller.mgmt.replace(obj))
    controller._on_cluster(old, new)


def crs_keys_ready(controller: Controller) -> set[Hashable]:
    return {k for k in controller.queue.ready_keys() if k[0] == "crs"}  # type: ignore[index]


async def test_a_cluster_annotated_queues_its_crss_after_the_status_settle() -> None:
    controller, clock = await fleet(3, 2, 0)
    await changed(controller, "c-0", lambda m: m.update(annotations={"touched": "1"}))
    assert crs_keys_ready(controller) == set()  # not now: after the settle
    assert controller.queue.ready_keys() == [cluster_key(NS, "c-0")]
    clock.advance(status_settle(0.0))
    fired = controller.queue.fire_due(clock.now())
    assert set(fired) == {crs_key(NS, f"set-{n}") for n in range(3)}


async def test_a_cluster_whose_selection_changes_queues_its_crss_after_the_status_settle() -> None:
    controller, clock = await fleet(2, 2, 0)
    every = {crs_key(NS, "set-0"), crs_key(NS, "set-1")}

    def after_the_settle(cluster: str) -> None:
        # The Cluster's own pass now; its CRSs' status passes once the settle is over.
        assert controller.queue.ready_keys() == [cluster_key(NS, cluster)]
        drain(controller)
        clock.advance(status_settle(0.0))
        assert set(controller.queue.fire_due(clock.now())) == every
        drain(controller)

    await changed(controller, "c-0", lambda m: m.update(labels={"env": "dev"}))
    after_the_settle("c-0")  # let go
    await changed(controller, "c-0", lambda m: m.update(labels={"env": "prod"}))
    after_the_settle("c-0")  # selected again
    informer = controller.informers[1]
    controller._on_cluster(informer.remove(NS, "c-1"), None)
    after_the_settle("c-1")  # deleted


async def test_a_cluster_whose_deletion_begins_queues_its_crss_now() -> None:
    controller, _ = await fleet(1, 1, 0)
    informer = controller.informers[1]
    old = informer.get(NS, "c-0")
    assert old is not None
    stored = await controller.mgmt.get(CLUSTER_API, "Cluster", "c-0", NS)
    assert stored is not None
    raw = copy.deepcopy(stored)
    raw["metadata"]["deletionTimestamp"] = "2026-11-22T10:00:00Z"
    raw["metadata"]["resourceVersion"] = str(int(raw["metadata"]["resourceVersion"]) + 1)
    controller._on_cluster(old, informer.put(raw))
    assert crs_keys_ready(controller) == {crs_key(NS, "set-0")}
