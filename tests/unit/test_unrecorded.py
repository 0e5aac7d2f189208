"""What a pass applied and could not record (cancelled at --reconcile-timeout, its
Cluster handed over, a shutdown) is remembered in memory until a binding write
records it: the next pass prunes it, and a deletion removes it, like any recorded
object (``engine.memory.unrecorded``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from crs_controller.core.api.models import API_VERSION, CRSBinding, ObjectRef, ResourceBinding
from crs_controller.core.state.bindings import with_unrecorded
from crs_controller.engine.memory.outcomes import Outcomes
from crs_controller.engine.memory.plans import Rollouts
from crs_controller.engine.memory.unrecorded import Terms, Unrecorded
from crs_controller.engine.reconcile import pair as pair_mod
from crs_controller.engine.reconcile.context import CRSContext
from crs_controller.engine.reconcile.crs import DELETION_POLL, reconcile_crs

from .builders import NS, cluster, crs, payload, reconcile, world_with
from .memory_kube import CLUSTER_API, World
from .test_cluster_deletion import SOON, deleting, finalized
from .test_crs_contributions import Board, Member
from .test_rollout_failures import edit

C1 = (NS, "c1")
TERMS = Terms("Delete", {})
EXTRA = ("v1", "ConfigMap", "default", "extra")


def configmaps(world: World) -> list[str]:
    workload: Any = world.ctx.workloads.clients["c1"]
    return sorted(key[3] for key in workload.objects if key[1] == "ConfigMap")


def listed(world: World) -> list[str]:
    binding = world.ctx.caches.binding(NS, "c1")
    if binding is None:
        return []
    return sorted(
        o.name for e in binding.valid.spec.bindings for r in e.resources for o in r.objects
    )


async def cancelled(world: World, blocked: Callable[[asyncio.Event], Any]) -> None:
    """A cluster pass that stops where ``blocked`` (given the Event it sets once
    reached) waits forever: cancelled there, as --reconcile-timeout would."""
    reached = asyncio.Event()
    undo = blocked(reached)
    task = asyncio.ensure_future(reconcile(world))
    await reached.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    undo()


def hang_after_resources(monkeypatch: pytest.MonkeyPatch) -> Callable[[asyncio.Event], Any]:
    """Block a pair's pass once its resources had their turn (a slow health read,
    validation, a later CRS, pruning: whatever comes before the binding write)."""

    def blocked(reached: asyncio.Event) -> Callable[[], None]:
        real = pair_mod._finish

        async def hang(*_: Any, **__: Any) -> Any:
            reached.set()
            await asyncio.Event().wait()

        monkeypatch.setattr(pair_mod, "_finish", hang)
        return lambda: monkeypatch.setattr(pair_mod, "_finish", real)

    return blocked


async def extra_applied_then_cancelled(monkeypatch: pytest.MonkeyPatch, **spec: Any) -> World:
    """Revision 1 (addon) recorded; revision 2 adds ``extra``, whose pass applies it
    and is cancelled before it records anything."""
    world = await world_with(crs("a", "src", deletionPolicy="Delete", **spec))
    await reconcile(world)
    await reconcile_crs(world.crs_context(), NS, "a")
    await edit(world, "src", payload("addon"), payload("extra"))
    await cancelled(world, hang_after_resources(monkeypatch))
    assert configmaps(world) == ["addon", "extra"]
    assert listed(world) == ["addon"]  # not recorded
    return world


async def test_an_object_a_cancelled_pass_applied_is_pruned_once_its_source_drops_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = await extra_applied_then_cancelled(monkeypatch)
    await edit(world, "src", payload("addon"))  # back to revision 1's content
    await reconcile(world)
    assert configmaps(world) == ["addon"]
    assert listed(world) == ["addon"]
    assert len(world.ctx.unrecorded) == 0


async def test_an_object_a_cancelled_pass_applied_is_recorded_by_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = await extra_applied_then_cancelled(monkeypatch)
    workload: Any = world.ctx.workloads.clients["c1"]
    workload.requests.clear()
    await reconcile(world)
    assert listed(world) == ["addon", "extra"]
    assert workload.writes() == []  # applied already: nothing sent again
    assert len(world.ctx.unrecorded) == 0


async def test_an_object_a_cancelled_pass_applied_goes_with_its_crs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = await extra_applied_then_cancelled(monkeypatch)
    await edit(world, "src", payload("addon"))
    await deleting(world, "ClusterResourceSet", API_VERSION, "a", SOON)
    assert await finalized(world)
    assert configmaps(world) == []
    assert len(world.ctx.unrecorded) == 0


async def test_an_object_a_cancelled_pass_applied_is_uninstalled_with_its_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = await extra_applied_then_cancelled(monkeypatch, uninstall={"ensure": True})
    await edit(world, "src", payload("addon"))
    await deleting(world, "Cluster", CLUSTER_API, "c1", SOON)
    await reconcile(world)
    assert configmaps(world) == []
    assert world.ctx.caches.binding(NS, "c1") is None or listed(world) == []


async def test_the_crs_finalizer_waits_for_what_a_first_pass_could_not_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = await world_with(crs("a", "src", deletionPolicy="Delete"))
    await reconcile_crs(world.crs_context(), NS, "a")
    await cancelled(world, hang_after_resources(monkeypatch))
    assert world.ctx.caches.binding(NS, "c1") is None  # nothing recorded
    await deleting(world, "ClusterResourceSet", API_VERSION, "a", SOON)
    then = await reconcile_crs(world.crs_context(), NS, "a")
    live = await world.mgmt.get(API_VERSION, "ClusterResourceSet", "a", NS)
    assert live is not None and "finalizers" in live["metadata"], then
    assert await finalized(world)
    assert configmaps(world) == []


async def test_notes_of_an_earlier_cluster_of_the_name_hold_no_crs_and_go_at_its_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Cluster c1 noted objects, was deleted and created again (another uid, which
    ``a`` does not select) before its next pass: the two events made one."""
    world = await world_with(crs("a", "src", deletionPolicy="Delete"))
    await reconcile_crs(world.crs_context(), NS, "a")
    await cancelled(world, hang_after_resources(monkeypatch))
    assert world.ctx.caches.binding(NS, "c1") is None and len(world.ctx.unrecorded) > 0
    old = await world.mgmt.get(CLUSTER_API, "Cluster", "c1", NS)
    await world.mgmt.delete(CLUSTER_API, "Cluster", "c1", NS)
    again = cluster("c1")
    again["metadata"]["labels"] = {"env": "dev"}
    created = await world.add(again)
    assert old is not None and created["metadata"]["uid"] != old["metadata"]["uid"]
    uid_of = {"c1": created["metadata"]["uid"]}.get
    assert not world.ctx.unrecorded.holders(NS, "a", uid_of)  # absent at once
    await reconcile(world)
    assert len(world.ctx.unrecorded) == 0  # and dropped by the Cluster's pass
    await deleting(world, "ClusterResourceSet", API_VERSION, "a", SOON)
    assert await finalized(world)


async def leader_lets_go(world: World) -> None:
    """The leader of a shard set, another replica (nothing noted), finalizes ``a``,
    being deleted; the API server then deletes it, and this replica's cache sees it
    go."""
    await deleting(world, "ClusterResourceSet", API_VERSION, "a", SOON)
    memory = replace(
        world.shared, outcomes=Outcomes(), rollouts=Rollouts(), unrecorded=Unrecorded()
    )
    leader = CRSContext.over(memory, crss=world.crs_context().crss, leading=lambda: True)
    await reconcile_crs(leader, NS, "a")
    live = await world.mgmt.get(API_VERSION, "ClusterResourceSet", "a", NS)
    assert live is not None and not live["metadata"].get("finalizers")
    await world.mgmt.delete(API_VERSION, "ClusterResourceSet", "a", NS)
    world.index.update_crs(world.crss.get(NS, "a"), None)
    world.crss.remove(NS, "a")


@pytest.mark.parametrize(("policy", "left"), [("Delete", []), ("Orphan", ["addon"])])
async def test_what_a_member_noted_for_a_crs_the_leader_let_go_goes_by_its_policy(
    monkeypatch: pytest.MonkeyPatch, policy: str, left: list[str]
) -> None:
    """In a shard set the leader removes the finalizer from the bindings alone: the
    owner of c1, finding ``a`` gone, deletes (or forgets) what it noted for it."""
    world = await world_with(crs("a", "src", deletionPolicy=policy))
    await reconcile_crs(world.crs_context(), NS, "a")
    await cancelled(world, hang_after_resources(monkeypatch))
    assert configmaps(world) == ["addon"] and world.ctx.caches.binding(NS, "c1") is None
    await leader_lets_go(world)
    await reconcile(world)  # c1's owner: its next pass
    assert configmaps(world) == left
    assert len(world.ctx.unrecorded) == 0 and listed(world) == []


async def test_what_a_crs_gone_left_noted_stays_noted_while_it_cannot_be_deleted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = await world_with(crs("a", "src", deletionPolicy="Delete"))
    await reconcile_crs(world.crs_context(), NS, "a")
    await cancelled(world, hang_after_resources(monkeypatch))
    await leader_lets_go(world)
    workload: Any = world.ctx.workloads.clients["c1"]
    workload.down = True  # the workload cluster stops answering
    await reconcile(world)
    workload.down = False
    assert configmaps(world) == ["addon"] and listed(world) == []  # no entry for "a"
    assert len(world.ctx.unrecorded) == 1
    await reconcile(world)
    assert configmaps(world) == [] and len(world.ctx.unrecorded) == 0


def hang_once_applied(world: World, name: str) -> Callable[[asyncio.Event], Any]:
    """The apply of ConfigMap ``name`` reaches the cluster, and its answer never
    comes back."""
    workload: Any = world.ctx.workloads.clients["c1"]

    def blocked(reached: asyncio.Event) -> Callable[[], None]:
        real: Callable[..., Awaitable[Any]] = workload.apply

        async def apply(obj: Any, **kwargs: Any) -> Any:
            answer = await real(obj, **kwargs)
            if obj["metadata"]["name"] == name:
                reached.set()
                await asyncio.Event().wait()
            return answer

        workload.apply = apply
        return lambda: setattr(workload, "apply", real)

    return blocked


async def test_an_object_whose_apply_got_no_answer_is_pruned_too() -> None:
    world = await world_with(crs("a", "src", deletionPolicy="Delete"))
    await reconcile(world)
    await edit(world, "src", payload("addon"), payload("extra"))
    await cancelled(world, hang_once_applied(world, "extra"))
    assert configmaps(world) == ["addon", "extra"]
    await edit(world, "src", payload("addon"))
    await reconcile(world)
    assert configmaps(world) == ["addon"]
    assert len(world.ctx.unrecorded) == 0


async def test_an_apply_cancelled_before_its_request_notes_nothing() -> None:
    world = await world_with(crs("a", "src", deletionPolicy="Delete"))
    workload: Any = world.ctx.workloads.clients["c1"]
    real = workload.resource_info

    def blocked(reached: asyncio.Event) -> Callable[[], None]:
        async def resource_info(*args: Any) -> Any:
            reached.set()
            await asyncio.Event().wait()

        workload.resource_info = resource_info
        return lambda: setattr(workload, "resource_info", real)

    await cancelled(world, blocked)
    assert len(world.ctx.unrecorded) == 0


def ref(name: str, digest: str | None = None) -> ObjectRef:
    return ObjectRef("v1", "ConfigMap", "default", name, hash=digest)


def resource(*objects: ObjectRef) -> ResourceBinding:
    return ResourceBinding(kind="ConfigMap", name="src", hash="rev1", applied=True, objects=objects)


def test_an_object_the_record_lacks_makes_its_resource_apply_again() -> None:
    entry = CRSBinding(cluster_resource_set_name="a", resources=[resource(ref("addon", "h1"))])
    merged = with_unrecorded({"a": entry}, {"a": {("ConfigMap", "src"): {EXTRA: ref("extra")}}})
    (record,) = merged["a"].resources
    assert [o.name for o in record.objects] == ["addon", "extra"]
    assert (record.hash, record.applied) == ("rev1", False)  # applied again, on rev1 still


def test_newer_records_of_listed_objects_keep_it_applied_unless_the_content_changed() -> None:
    entry = CRSBinding(cluster_resource_set_name="a", resources=[resource(ref("addon", "h1"))])
    key = ref("addon").key
    same = with_unrecorded({"a": entry}, {"a": {("ConfigMap", "src"): {key: ref("addon", "h1")}}})
    assert same["a"].resources[0].applied
    new = with_unrecorded({"a": entry}, {"a": {("ConfigMap", "src"): {key: ref("addon", "h2")}}})
    assert not new["a"].resources[0].applied
    assert new["a"].resources[0].objects[0].hash == "h2"


def test_a_crs_no_entry_had_gets_one_never_applied() -> None:
    merged = with_unrecorded({}, {"b": {("Secret", "s"): {EXTRA: ref("extra")}}})
    (record,) = merged["b"].resources
    assert (record.kind, record.name, record.applied) == ("Secret", "s", False)


def test_a_write_settles_what_it_took_and_what_it_lists_and_keeps_the_rest() -> None:
    notes = Unrecorded()
    notes.note(C1, "u1", "a", ("ConfigMap", "src"), [ref("old")], TERMS)
    taken = notes.of(C1, "u1")
    notes.note(C1, "u1", "a", ("ConfigMap", "src"), [ref("listed"), ref("lost")], TERMS)
    written = CRSBinding(cluster_resource_set_name="a", resources=[resource(ref("listed"))])
    notes.recorded(C1, "u1", taken, {"a": written})
    left = notes.of(C1, "u1")["a"][("ConfigMap", "src")]
    assert [o.name for o in left.values()] == ["lost"]
    assert notes.holders(NS, "a", {"c1": "u1"}.get) == ["c1"]
    assert not notes.holders("other", "a", {"c1": "u1"}.get)


def test_another_cluster_of_the_name_has_no_notes_and_a_forgotten_one_none() -> None:
    notes = Unrecorded()
    notes.note(C1, "u1", "a", ("ConfigMap", "src"), [ref("x")], TERMS)
    assert notes.of(C1, "u2") == {}
    notes.note(C1, "u2", "a", ("ConfigMap", "src"), [ref("y")], TERMS)
    assert [o.name for o in notes.of(C1, "u2")["a"][("ConfigMap", "src")].values()] == ["y"]
    notes.drop_cluster(C1)
    assert len(notes) == 0 and not notes.holds(C1, "u2")


def test_a_resource_notes_at_most_a_manifests_objects_the_oldest_going_first() -> None:
    notes = Unrecorded(most=2)
    notes.note(C1, "u1", "a", ("ConfigMap", "src"), [ref("x"), ref("y")], TERMS)
    notes.note(C1, "u1", "a", ("ConfigMap", "src"), [ref("x"), ref("z")], TERMS)
    kept = notes.of(C1, "u1")["a"][("ConfigMap", "src")]
    assert sorted(o.name for o in kept.values()) == ["x", "z"]


async def test_a_follower_counts_again_once_its_cluster_pass_forgot_what_it_noted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In a shard set, c1's owner (a follower) noted objects for ``a`` and recorded
    nothing; ``a`` is deleted (Orphan). It counts c1 as holding, and looks again
    while it does: its cluster pass forgets the notes without a binding write, which
    would wake no CRS pass, and the leader lets go once it counted none."""
    world = await world_with(crs("a", "src"))
    board = Board(frozenset({"m-a", "m-b"}))
    leader = replace(world.crs_context(), combining=Member("m-a", board, frozenset()))
    follower = replace(
        world.crs_context(leading=False), combining=Member("m-b", board, frozenset({"c1"}))
    )
    await reconcile_crs(leader, NS, "a")  # its finalizer
    await cancelled(world, hang_after_resources(monkeypatch))
    assert world.ctx.caches.binding(NS, "c1") is None and len(world.ctx.unrecorded) > 0
    await deleting(world, "ClusterResourceSet", API_VERSION, "a", SOON)
    counted = await reconcile_crs(follower, NS, "a")
    assert board.published["m-b"].holding == 1
    assert counted.requeue_after == DELETION_POLL
    assert (await reconcile_crs(leader, NS, "a")).requeue_after == DELETION_POLL
    await reconcile(world)  # c1's pass: Orphan, the notes are forgotten
    assert len(world.ctx.unrecorded) == 0 and world.ctx.caches.binding(NS, "c1") is None
    again = await reconcile_crs(follower, NS, "a")  # the requeue it asked for
    assert board.published["m-b"].holding == 0 and again.requeue_after is None
    await reconcile_crs(leader, NS, "a")
    live = await world.mgmt.get(API_VERSION, "ClusterResourceSet", "a", NS)
    assert live is not None and not live["metadata"].get("finalizers")
