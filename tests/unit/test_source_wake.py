"""A new version of a ConfigMap a CRS names wakes its clusters only when the content
moved: a label or an annotation written wakes none and brings the CRS's status pass
spaced as after a binding write, a content change wakes every matching cluster at
once, and a change undone (A, B, A) after a pass took B wakes them back to A. The
snapshot a rollback in force returns to wakes its CRS when it comes. The keys are
taken by hand on the in-memory API and a fake clock: the CRS's own keys run, the
clusters' are only counted. Nothing here runs a server or sleeps."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Hashable
from typing import Any

from crs_controller.core.api.models import API_VERSION, CLUSTER_RESOURCE_SET_KIND, ResourceRef
from crs_controller.core.rollout.snapshots import SNAPSHOT_LABEL, snapshot_name
from crs_controller.core.spec.objects import SourceMeta
from crs_controller.engine.io.informer import Informer
from crs_controller.engine.reconcile.context import Settings
from crs_controller.engine.reconcile.result import cluster_key, crs_key
from crs_controller.engine.runtime.controller import Controller, status_settle

from .builders import NS, cluster, configmap_source, crs
from .fake_clock import FakeClock
from .memory_kube import CLUSTER_API, MemoryKube

Obj = dict[str, Any]
PROD = {cluster_key(NS, f"c-{n}") for n in range(3)}  # c-3 is not selected
STATUS = crs_key(NS, "set")


def addon(value: str) -> Obj:
    meta = {"name": "addon", "namespace": "default"}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"v": value}}


def configmaps(controller: Controller) -> Informer[SourceMeta]:
    informer: Informer[SourceMeta] = controller.informers[3]
    return informer


async def fleet() -> tuple[Controller, FakeClock]:
    """One CRS naming ConfigMap src, three Clusters it selects and one it does not;
    the source's first version seen and its CRS's keys run."""
    clock = FakeClock()
    mgmt = MemoryKube("management")
    controller = Controller(mgmt, Settings(), CLUSTER_API, clock=clock)
    controller._on_crs(None, controller.informers[0].put(await mgmt.create(crs("set", "src"))))
    for n in range(4):
        obj = cluster(f"c-{n}")
        if n == 3:
            obj["metadata"]["labels"] = {"env": "dev"}
        controller._on_cluster(None, controller.informers[1].put(await mgmt.create(obj)))
    await take(controller)
    source = await mgmt.create(configmap_source("src", addon("1")))
    controller._on_source("ConfigMap")(None, configmaps(controller).put(source))
    # First seen by this process (a start, a restart): every matching cluster looks.
    assert set(await take(controller)) >= PROD
    return controller, clock


async def take(controller: Controller) -> list[Hashable]:
    """Every key ready now, in order: the CRS's run, the clusters' are only noted."""
    taken = []
    while len(controller.queue):
        key = controller.queue.get_nowait()
        taken.append(key)
        if key[0] != "cluster":  # type: ignore[index]
            await controller._process(key)
        controller.queue.done(key)
    return taken


async def until_status_pass(controller: Controller, clock: FakeClock) -> list[Hashable]:
    """Keys taken, time moving a settle at a time, until the CRS's status pass ran:
    the sign that the controller looked at the change."""
    taken: list[Hashable] = []
    for _ in range(10):
        taken += await take(controller)
        if STATUS in taken:
            return taken
        clock.advance(status_settle(0.0))
        controller.queue.fire_due(clock.now())
    raise AssertionError(f"no status pass: {taken}")


async def edit(controller: Controller, change: Callable[[Obj], None]) -> None:
    """Write the source and hand the watch's event to the controller."""
    stored = await controller.mgmt.get("v1", "ConfigMap", "src", NS)
    assert stored is not None
    obj = copy.deepcopy(stored)
    change(obj)
    informer = configmaps(controller)
    old = informer.get(NS, "src")
    controller._on_source("ConfigMap")(old, informer.put(await controller.mgmt.replace(obj)))


def annotate(n: int) -> Callable[[Obj], None]:
    return lambda obj: obj["metadata"].update(annotations={"touched": str(n)})


def content(value: str) -> Callable[[Obj], None]:
    return lambda obj: obj.update(configmap_source("src", addon(value)))


def keep_version(change: Callable[[Obj], None]) -> Callable[[Obj], None]:
    def changed(obj: Obj) -> None:
        version = obj["metadata"]["resourceVersion"]
        change(obj)
        obj["metadata"]["resourceVersion"] = version

    return changed


async def test_an_annotation_only_change_wakes_no_cluster() -> None:
    controller, clock = await fleet()
    await edit(controller, annotate(1))
    taken = await until_status_pass(controller, clock)
    assert not PROD & set(taken), taken


async def test_a_content_change_wakes_every_matching_cluster_at_once() -> None:
    controller, _ = await fleet()
    await edit(controller, annotate(1))
    await edit(controller, keep_version(content("2")))
    taken = await take(controller)  # no time passes
    assert set(taken) >= PROD
    assert cluster_key(NS, "c-3") not in taken
    assert STATUS in taken  # the status pass too, not spaced


async def test_a_metadata_only_loop_gets_no_back_to_back_status_passes() -> None:
    controller, clock = await fleet()
    passes: list[float] = []
    taken: list[Hashable] = []
    for n in range(20):
        await edit(controller, annotate(n))
        clock.advance(0.25)
        controller.queue.fire_due(clock.now())
        now = await take(controller)
        passes += [clock.now()] * now.count(STATUS)
        taken += now
    assert len(passes) >= 3  # 5 s of touches: a pass every settle, no fewer
    gaps = [later - earlier for earlier, later in itertools.pairwise(passes)]
    assert min(gaps) >= status_settle(0.0), passes
    assert not PROD & set(taken)


async def test_a_change_undone_after_a_pass_took_it_wakes_the_clusters_back() -> None:
    controller, _ = await fleet()
    await edit(controller, keep_version(content("2")))
    # A cluster's pass (woken by something else) loads the new content first...
    await controller.cluster_ctx.sources.load(NS, ResourceRef(kind="ConfigMap", name="src"))
    # ...and the content is back to what the clusters were woken for.
    await edit(controller, keep_version(content("1")))
    assert set(await take(controller)) >= PROD


async def test_a_pass_that_finds_a_source_changed_makes_its_crs_look() -> None:
    controller, _ = await fleet()
    stored = await controller.mgmt.get("v1", "ConfigMap", "src", NS)
    assert stored is not None
    changed = copy.deepcopy(stored)
    content("2")(changed)
    changed["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
    # The version is known (a relist), its event not handled yet: a pass loads it.
    configmaps(controller).put(await controller.mgmt.replace(changed))
    await controller.cluster_ctx.sources.load(NS, ResourceRef(kind="ConfigMap", name="src"))
    assert set(await take(controller)) >= PROD


async def test_a_source_deleted_or_back_wakes_the_clusters() -> None:
    controller, _ = await fleet()
    informer = configmaps(controller)
    await controller.mgmt.delete("v1", "ConfigMap", "src", NS)
    controller._on_source("ConfigMap")(informer.remove(NS, "src"), None)
    assert set(await take(controller)) >= PROD  # unreadable now: they say so
    source = await controller.mgmt.create(configmap_source("src", addon("1")))
    controller._on_source("ConfigMap")(None, informer.put(source))
    assert set(await take(controller)) >= PROD  # readable again


async def test_a_source_named_by_two_crss_wakes_each_ones_clusters() -> None:
    controller, _ = await fleet()
    other = await controller.mgmt.create(crs("other", "src"))
    controller._on_crs(None, controller.informers[0].put(other))
    await take(controller)
    await edit(controller, annotate(1))
    assert not PROD & set(await take(controller))
    await edit(controller, keep_version(content("2")))
    taken = await take(controller)
    assert set(taken) >= PROD
    assert {STATUS, crs_key(NS, "other")} <= set(taken)


async def test_a_sources_change_number_moves_with_its_content_only() -> None:
    controller, _ = await fleet()
    sources, ref = controller.crs_ctx.sources, ResourceRef(kind="ConfigMap", name="src")
    first = await sources.change(NS, ref)
    await edit(controller, annotate(1))
    assert await sources.change(NS, ref) == first  # a new version, the same content
    await edit(controller, keep_version(content("2")))
    second = await sources.change(NS, ref)
    await edit(controller, keep_version(content("1")))
    back = await sources.change(NS, ref)
    assert len({first, second, back}) == 3  # back to the first content: a change too
    await controller.mgmt.delete("v1", "ConfigMap", "src", NS)
    configmaps(controller).remove(NS, "src")
    assert await sources.change(NS, ref) != back  # unreadable now


async def test_the_snapshot_a_rollback_in_force_returns_to_wakes_its_crs_when_it_comes() -> None:
    """A process holding a rollback because its watch does not show the snapshot yet
    (``RolledOut.held``) plans it once it does: the snapshot coming wakes the CRS's
    pass. A snapshot of another revision wakes nothing."""
    controller, _ = await fleet()
    raw = await controller.mgmt.get(API_VERSION, CLUSTER_RESOURCE_SET_KIND, "set", NS)
    assert raw is not None
    back, to = "xxh3:" + "b" * 16, "xxh3:" + "a" * 16
    rollout = {"rolledBackFrom": back, "phase": "Progressing", "step": 1, "message": ""}
    raw["status"] = {"revision": to, "rollout": rollout}
    raw = await controller.mgmt.replace(raw, subresource="status")
    crss = controller.informers[0]
    controller._on_crs(crss.get(NS, "set"), crss.put(raw))
    while len(controller.queue):  # its pass is not run: the status stays as it is
        controller.queue.done(controller.queue.get_nowait())
    uid = raw["metadata"]["uid"]
    for rev, wakes in ((back, False), (to, True)):
        meta = {"name": snapshot_name("set", rev), "namespace": NS, "labels": {SNAPSHOT_LABEL: uid}}
        snapshot = await controller.mgmt.create(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
        )
        controller._on_source("ConfigMap")(None, configmaps(controller).put(snapshot))
        assert (STATUS in controller.queue.ready_keys()) is wakes
