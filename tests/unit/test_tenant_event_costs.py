"""What one tenant's writes in a loop cost the event loop, counted on the in-memory
API with a fake clock: selector matches (``CRS.selects`` calls), CRS status passes
and status writes. A label or annotation written on a ConfigMap that R CRSs name
matches no Cluster; one Cluster's labels flapped is at most one status pass per CRS
and settle, however many times they flap. The CRSs' and sources' keys run, the
clusters' are only counted. Nothing here runs a server or sleeps."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Hashable
from typing import Any

import pytest

from crs_controller.engine.reconcile.context import Settings
from crs_controller.engine.reconcile.result import cluster_key, crs_key, sources_key
from crs_controller.engine.runtime.controller import (
    STATUS_SETTLE_MAX_SECONDS,
    Controller,
    status_settle,
)

from .builders import NS, cluster, configmap_source, crs
from .fake_clock import FakeClock
from .memory_kube import CLUSTER_API, MemoryKube
from .test_event_keys import count_selects
from .test_source_wake import take

Obj = dict[str, Any]
R, C = 5, 40  # CRSs naming the source, Clusters they select


def addon(value: str) -> Obj:
    meta = {"name": "addon", "namespace": NS}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"v": value}}


async def fleet(selected: bool = True) -> tuple[Controller, FakeClock]:
    """R CRSs naming ConfigMap src and selecting env=prod, C Clusters (env=prod, or
    env=dev when not ``selected``); every key run and every timer fired."""
    clock = FakeClock()
    mgmt = MemoryKube("management")
    controller = Controller(mgmt, Settings(), CLUSTER_API, clock=clock)
    for n in range(R):
        raw = await mgmt.create(crs(f"set-{n}", "src"))
        controller._on_crs(None, controller.informers[0].put(raw))
    for n in range(C):
        obj = cluster(f"c-{n}")
        obj["metadata"]["labels"] = {"env": "prod" if selected else "dev"}
        controller._on_cluster(None, controller.informers[1].put(await mgmt.create(obj)))
    source = await mgmt.create(configmap_source("src", addon("1")))
    controller._on_source("ConfigMap")(None, controller.informers[3].put(source))
    await settled(controller, clock)
    return controller, clock


async def settled(controller: Controller, clock: FakeClock) -> list[Hashable]:
    """Keys taken, time moving past any settle, until nothing more comes."""
    taken = await take(controller)
    for _ in range(3):
        clock.advance(STATUS_SETTLE_MAX_SECONDS)
        controller.queue.fire_due(clock.now())
        taken += await take(controller)
    return taken


async def rewrite(controller: Controller, which: int, kind: str, name: str, change: Any) -> None:
    """Write an object through the in-memory API and hand its watch event over."""
    api = CLUSTER_API if kind == "Cluster" else "v1"
    stored = await controller.mgmt.get(api, kind, name, NS)
    assert stored is not None
    obj: Obj = copy.deepcopy(stored)
    change(obj)
    informer = controller.informers[which]
    old = informer.get(NS, name)
    new = informer.put(await controller.mgmt.replace(obj))
    if kind == "Cluster":
        controller._on_cluster(old, new)
    else:
        controller._on_source(kind)(old, new)


def touch(n: int) -> Callable[[Obj], None]:
    return lambda obj: obj["metadata"].update(labels={"touched": str(n)})


def env(value: str) -> Callable[[Obj], None]:
    return lambda obj: obj["metadata"].update(labels={"env": value})


def crs_keys(taken: list[Hashable]) -> list[Hashable]:
    return [key for key in taken if key[0] == "crs"]  # type: ignore[index]


def status_writes(controller: Controller) -> int:
    mgmt = controller.mgmt
    assert isinstance(mgmt, MemoryKube)
    return sum(1 for _, what in mgmt.writes() if what.startswith("ClusterResourceSet/"))


async def test_a_touch_of_a_source_many_crss_name_matches_no_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    controller, _ = await fleet()
    calls = count_selects(monkeypatch)
    await rewrite(controller, 3, "ConfigMap", "src", touch(1))
    taken = await take(controller)
    # Each CRS looked (the sign the controller saw the touch) ...
    assert len(taken) == R
    assert set(taken) == {sources_key(NS, f"set-{n}") for n in range(R)}
    # ... and matched no Cluster (before: every CRS matched every Cluster, R x C),
    # woke none, and left its status pass for the settle: only the looks ran.
    assert calls[0] == 0


async def test_a_crs_selecting_nothing_fetches_nothing_and_matches_nothing_on_a_touch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    controller, _ = await fleet(selected=False)
    mgmt = controller.mgmt
    assert isinstance(mgmt, MemoryKube)
    calls = count_selects(monkeypatch)
    await rewrite(controller, 3, "ConfigMap", "src", touch(1))
    asked = len(mgmt.requests)
    taken = await take(controller)
    assert set(taken) == {sources_key(NS, f"set-{n}") for n in range(R)}
    assert calls[0] == 0
    assert mgmt.requests[asked:] == []  # the source is not fetched


async def test_a_content_change_wakes_a_cluster_that_started_matching() -> None:
    controller, clock = await fleet(selected=False)
    await rewrite(controller, 1, "Cluster", "c-0", env("prod"))
    await settled(controller, clock)
    await rewrite(controller, 3, "ConfigMap", "src", lambda obj: obj.update(data={"a": "x: 2"}))
    taken = await take(controller)
    assert cluster_key(NS, "c-0") in taken
    assert cluster_key(NS, "c-1") not in taken
    assert {crs_key(NS, f"set-{n}") for n in range(R)} <= set(taken)


async def test_labels_flapped_with_the_clock_still_are_one_status_pass_per_crs() -> None:
    controller, clock = await fleet()
    writes = status_writes(controller)
    for n in range(10):
        await rewrite(controller, 1, "Cluster", "c-0", env("dev" if n % 2 == 0 else "prod"))
        # The Cluster's own pass comes at once; no CRS's status pass (before: R a flap).
        assert await take(controller) == [cluster_key(NS, "c-0")]
    assert status_writes(controller) == writes
    taken = await settled(controller, clock)
    passes = crs_keys(taken)
    assert len(passes) == R
    assert set(passes) == {crs_key(NS, f"set-{n}") for n in range(R)}
    assert status_writes(controller) - writes <= R


async def test_labels_flapped_in_a_loop_get_no_back_to_back_status_passes() -> None:
    controller, clock = await fleet()
    passes: dict[Hashable, list[float]] = {}
    for n in range(40):
        await rewrite(controller, 1, "Cluster", "c-0", env("dev" if n % 2 == 0 else "prod"))
        clock.advance(0.25)
        controller.queue.fire_due(clock.now())
        for key in crs_keys(await take(controller)):
            passes.setdefault(key, []).append(clock.now())
    assert len(passes) == R  # 10 s of flaps: every CRS passed, each a pass a settle
    for times in passes.values():
        assert len(times) >= 2  # (a settle: twenty times the namespace's last passes)
        gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
        assert min(gaps) >= status_settle(0.0), times


async def test_the_status_counts_a_cluster_let_go_after_the_settle() -> None:
    controller, clock = await fleet()
    await rewrite(controller, 1, "Cluster", "c-0", env("dev"))
    await take(controller)
    await settled(controller, clock)
    for n in range(R):
        held = controller.index.crs(NS, f"set-{n}")
        assert held is not None
        assert held.status.matching_clusters == C - 1


async def test_a_namespaces_status_passes_are_spaced_by_what_all_of_them_took() -> None:
    """R CRSs whose last passes took 0.125 s each: a flap's status passes wait twenty
    times their sum (R x 2.5 s, not each CRS's own 2.5 s), so the namespace's passes take
    at most a twentieth of the time however many CRSs it has. Another namespace's
    passes do not count; a CRS deleted no longer does."""
    controller, clock = await fleet()
    times = controller._pass_times
    for n in range(R):
        times.note(NS, f"set-{n}", 0.125)
    times.note("elsewhere", "big", 10.0)
    spaced = status_settle(R * 0.125)
    assert spaced == R * 2.5
    await rewrite(controller, 1, "Cluster", "c-0", env("dev"))
    assert await take(controller) == [cluster_key(NS, "c-0")]
    now = clock.now()
    assert controller.queue.fire_due(now + spaced - 0.1) == []
    fired = controller.queue.fire_due(now + spaced)
    assert set(fired) == {crs_key(NS, f"set-{n}") for n in range(R)}
    times.forget(NS, "set-0")
    assert controller._status_settle(NS, "set-1") == status_settle((R - 1) * 0.125)
    for n in range(1, R):
        times.forget(NS, f"set-{n}")
    assert controller._status_settle(NS, "set-1") == status_settle(0.0)
    assert times.namespace_seconds("elsewhere") == 10.0
