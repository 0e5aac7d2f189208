"""What a binding's watch event queues: a status pass for each CRS whose entry it
added, removed or changed, not for every CRS it names (those read the same of it);
every CRS it named once it is gone. The echo of this controller's own write, cached
at once, still wakes the CRSs the write changed, also when the Cluster was handed
over to another replica in between; a binding handed over is held whole nowhere, the
index included. Nothing here runs a server or sleeps."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Hashable
from typing import Any

from crs_controller.core.api.models import API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND
from crs_controller.engine.reconcile.result import cluster_key, crs_key
from crs_controller.engine.runtime.controller import Controller

from .builders import NS
from .fake_clock import FakeClock
from .test_event_keys import drain, fleet
from .test_shard_caches import NAMES, binding, member, share, start

Obj = dict[str, Any]
CRSS = 50


def binding_obj(outcomes: dict[str, str], version: int) -> Obj:
    """Cluster c-0's binding: an entry per CRS, with the outcome named."""
    entries = [
        {"clusterResourceSetName": name, "outcome": {"reason": reason}}
        for name, reason in outcomes.items()
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": CLUSTER_RESOURCE_SET_BINDING_KIND,
        "metadata": {"name": "c-0", "namespace": NS, "resourceVersion": str(version)},
        "spec": {"clusterName": "c-0", "bindings": entries},
    }


def applied(count: int = CRSS) -> dict[str, str]:
    return {f"set-{n}": "Applied" for n in range(count)}


def watched(controller: Controller, obj: Obj) -> None:
    """The watch brings ``obj``."""
    informer = controller.informers[2]
    old = informer.get(NS, "c-0")
    controller._on_binding(old, informer.put(obj))


def woken(controller: Controller, clock: FakeClock) -> set[Hashable]:
    """The CRSs whose status pass comes once the settle is over; the queue emptied."""
    clock.advance(3600)
    fired = controller.queue.fire_due(clock.now())
    drain(controller)
    return {key for key in fired if key[0] == "crs"}  # type: ignore[index]


async def fleet_with_binding() -> tuple[Controller, FakeClock]:
    """50 CRSs selecting c-0, whose binding has an entry for each; nothing queued."""
    controller, clock = await fleet(CRSS, 1, 0)
    watched(controller, binding_obj(applied(), 10))
    assert len(woken(controller, clock)) == CRSS  # a first binding: every entry is new
    return controller, clock


async def test_an_entry_changed_wakes_its_crs_alone() -> None:
    controller, clock = await fleet_with_binding()
    watched(controller, binding_obj({**applied(), "set-0": "ApplyFailed"}, 11))
    assert woken(controller, clock) == {crs_key(NS, "set-0")}


async def test_a_binding_written_unchanged_wakes_no_crs() -> None:
    controller, clock = await fleet_with_binding()
    watched(controller, binding_obj(applied(), 11))
    assert controller.queue.ready_keys() == [cluster_key(NS, "c-0")]  # it looked
    assert woken(controller, clock) == set()


async def test_an_entry_added_or_removed_wakes_its_crs() -> None:
    controller, clock = await fleet_with_binding()
    fewer = applied()
    del fewer["set-7"]
    watched(controller, binding_obj(fewer, 11))
    assert woken(controller, clock) == {crs_key(NS, "set-7")}
    watched(controller, binding_obj(applied(), 12))
    assert woken(controller, clock) == {crs_key(NS, "set-7")}


async def test_a_binding_deleted_wakes_every_crs_it_named() -> None:
    controller, clock = await fleet_with_binding()
    controller._on_binding(controller.informers[2].remove(NS, "c-0"), None)
    assert woken(controller, clock) == {crs_key(NS, f"set-{n}") for n in range(CRSS)}


async def test_the_echo_of_its_own_write_wakes_the_crss_it_changed() -> None:
    controller, clock = await fleet_with_binding()
    # The controller writes version 11 and caches it at once (no handler runs) ...
    informer = controller.informers[2]
    written = informer.put(binding_obj({**applied(), "set-3": "ApplyFailed"}, 11))
    # ... so the watch's event for it has version 11 as "old" as well.
    controller._on_binding(written, written)
    assert controller.queue.ready_keys() == []  # reconciled already: no pass on c-0
    assert woken(controller, clock) == {crs_key(NS, "set-3")}


async def test_a_binding_handed_over_is_held_whole_nowhere() -> None:
    controller, shard = member("replica-a", FakeClock())
    held = {name: controller.bindings.get(NS, name) for name in NAMES}
    assert all(b is not None and b.whole for b in held.values())
    refs = {name: weakref.ref(b) for name, b in held.items()}
    del held
    start(shard, "replica-b")
    gc.collect()
    alive = {name for name, ref in refs.items() if ref() is not None}
    assert alive == share(["replica-a", "replica-b"], "replica-a")


async def test_a_write_just_before_a_hand_over_is_not_held_after_it() -> None:
    """Its Cluster is another member's now: that member's watch shows the binding
    (and wakes its CRS there); this one's cache and index drop it, unannounced."""
    clock = FakeClock()
    controller, shard = member("replica-a", clock)
    other = min(set(NAMES) - share(["replica-a", "replica-b"], "replica-a"))
    raw = binding(other, version=6)
    raw["spec"]["bindings"][0]["outcome"] = {"reason": "ApplyFailed"}
    controller.bindings.put(raw)  # its own write, cached at once
    start(shard, "replica-b")
    assert controller.bindings.get(NS, other) is None
    assert controller.index.binding(NS, other) is None
