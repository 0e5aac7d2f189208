"""A shard set's members publish and combine their contributions (``Sharded``): each
publishes its own before it combines the live members' (its own from memory), a
member that left is left out, one computed under another member set is waited for,
and a member that does not act waits for itself and publishes nothing. Every member
contributes to every CRS that is neither paused nor refused, rolling out or not, so
the leader counts every cluster without another member's bindings; while a CRS is
being deleted each counts its own clusters that still hold something of it, and the
finalizer goes only once every member counted none. A replica that joins a shard set
with a store combines through it, and a new member set passes over every CRS. A
member back under the same identity, in a new incarnation, is waited for, never its
old contribution combined; and a pass waiting for a contribution looks again spaced
by what its last pass took."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from structlog.testing import capture_logs

from crs_controller.core.api.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_BINDING_KIND,
    FINALIZER,
)
from crs_controller.core.errors import APIError
from crs_controller.core.membership.lease import LeaseRecord
from crs_controller.core.membership.shard import members_stamp
from crs_controller.core.rollout.snapshots import SNAPSHOT_LABEL
from crs_controller.core.spec.objects import CRS, SourceMeta, parse_source_meta
from crs_controller.core.state.contribution import Combined, Contribution, Waiting
from crs_controller.core.state.tally import Tally
from crs_controller.engine.io.contributions import ContributionStore
from crs_controller.engine.io.informer import Informer, WatchSpec
from crs_controller.engine.io.snapshots import Snapshots
from crs_controller.engine.io.sources import Sources
from crs_controller.engine.reconcile.cluster import reconcile_cluster
from crs_controller.engine.reconcile.context import (
    ClusterContext,
    CRSContext,
    Settings,
    Sharded,
)
from crs_controller.engine.reconcile.crs import DELETION_POLL, reconcile_crs
from crs_controller.engine.reconcile.result import Result, crs_key
from crs_controller.engine.reconcile.rollout import entry_revision
from crs_controller.engine.runtime.controller import Controller, status_settle
from crs_controller.engine.runtime.membership import ShardMembership

from .builders import NS, cluster, configmap_source, crs, payload, reconcile, world_with
from .fake_clock import FakeClock
from .memory_kube import CLUSTER_API, MemoryKube, World
from .test_cluster_deletion import SOON, deleting
from .test_crs_contributions import Board, Member
from .test_crs_status import restarted, status
from .test_shard_caches import (
    LEASE,
    MISLABELLED,
    labelled_member,
    lease,
    member,
    settle,
    share,
    start,
)


@dataclass
class Store:
    """The contributions a member sees, and what it publishes."""

    identity: str
    held: dict[str, dict[str, Contribution]] = field(default_factory=dict)
    writes: list[tuple[str, str, str]] = field(default_factory=list)

    def published(self, crs_uid: str) -> dict[str, Contribution]:
        return dict(self.held.get(crs_uid, {}))

    async def publish(self, crs_namespace: str, crs_name: str, crs_uid: str, value: object) -> None:
        assert isinstance(value, Contribution)
        self.writes.append((crs_namespace, crs_name, crs_uid))
        self.held.setdefault(crs_uid, {})[self.identity] = value


def part(
    member: str,
    members: frozenset[str],
    applied: int,
    of: CRS,
    incarnations: dict[str, str] | None = None,
) -> Contribution:
    tally = Tally(applied=applied, oldest=1, newest=1) if applied else Tally()
    stamp = members_stamp(members, incarnations)
    return Contribution(member, stamp, of.meta.uid or "", of.generation, tally)


async def a_crs() -> World:
    return await world_with(crs("a", "src"))


async def test_a_member_publishes_its_own_then_adds_up_the_live_members() -> None:
    world = await a_crs()
    the_crs = world.crs_context().caches.crs(NS, "a")
    assert the_crs is not None
    uid = the_crs.meta.uid or ""
    live = frozenset({"m-a", "m-b"})
    tokens = {"m-a": "a" * 32, "m-b": "b" * 32, "m-c": "c" * 32}
    store = Store("m-a")
    # m-b's is current; m-c left (its contribution, under the old set, is not used).
    before = frozenset({"m-a", "m-b", "m-c"})
    others = {
        "m-b": part("m-b", live, 2, the_crs, tokens),
        "m-c": part("m-c", before, 5, the_crs, tokens),
    }
    store.held[uid] = others
    seam = Sharded(
        store, lambda: live, lambda namespace, name: name == "c1", incarnations=lambda: tokens
    )
    whole = await seam.combined(the_crs, part("m-a", live, 1, the_crs, tokens))
    assert store.writes == [(NS, "a", uid)]
    assert isinstance(whole, Combined) and whole.tally.applied == 3
    assert sorted(whole.parts) == ["m-a", "m-b"]
    assert seam.me == "m-a" and seam.members() == live
    assert seam.stamp() == members_stamp(live, tokens)
    assert seam.owns(NS, "c1") and not seam.owns(NS, "c2")
    # m-c back under the same identity, in a new incarnation: what it said before it
    # left is out of date, as is what m-b said under the set without it.
    back = {**tokens, "m-c": "d" * 32}
    seam = Sharded(store, lambda: before, lambda namespace, name: True, incarnations=lambda: back)
    waited = await seam.combined(the_crs, part("m-a", before, 1, the_crs, back))
    assert waited == Waiting(stale=("m-b", "m-c"))


async def test_a_member_that_does_not_act_waits_for_itself_and_publishes_nothing() -> None:
    world = await a_crs()
    the_crs = world.crs_context().caches.crs(NS, "a")
    assert the_crs is not None
    store = Store("m-a")
    seam = Sharded(store, frozenset, lambda namespace, name: False)
    mine = part("m-a", frozenset(), 0, the_crs)
    assert await seam.combined(the_crs, mine) == Waiting(missing=("m-a",))
    assert store.writes == []


async def test_a_follower_contributes_without_a_rollout_and_the_leader_counts_every_cluster() -> (
    None
):
    world = await a_crs()
    await reconcile(world)  # c1 applied
    await world.add(cluster("c2"))
    board = Board(frozenset({"m-a", "m-b"}))
    leader = replace(world.crs_context(), combining=Member("m-a", board, frozenset({"c2"})))
    follower = replace(
        world.crs_context(leading=False), combining=Member("m-b", board, frozenset({"c1"}))
    )
    await reconcile_crs(follower, NS, "a")
    assert board.published["m-b"].tally.applied == 1 and board.published["m-b"].share is None
    result = await reconcile_crs(leader, NS, "a")
    assert result.requeue_after != status_settle(0.0)
    written = status(world)
    assert (written["matchingClusters"], written["appliedClusters"]) == (2, 1)


async def test_the_finalizer_goes_once_every_member_counts_none_of_its_clusters_holding() -> None:
    world = await a_crs()
    await reconcile(world)  # c1's binding holds an entry of a
    board = Board(frozenset({"m-a", "m-b"}))
    leader = replace(world.crs_context(), combining=Member("m-a", board, frozenset()))
    follower = replace(
        world.crs_context(leading=False), combining=Member("m-b", board, frozenset({"c1"}))
    )
    await reconcile_crs(leader, NS, "a")  # its finalizer
    await deleting(world, "ClusterResourceSet", API_VERSION, "a", SOON)

    async def finalizer() -> bool:
        live = await world.mgmt.get(API_VERSION, "ClusterResourceSet", "a", NS)
        return live is not None and FINALIZER in live["metadata"].get("finalizers", [])

    waited = await reconcile_crs(leader, NS, "a")  # m-b has not counted yet
    assert waited.requeue_after == status_settle(0.0) and await finalizer()
    assert board.published["m-a"].holding == 0
    await reconcile_crs(follower, NS, "a")
    assert board.published["m-b"].holding == 1
    assert (await reconcile_crs(leader, NS, "a")).requeue_after == DELETION_POLL
    await reconcile(world)  # c1 lets go of it
    world.ctx.clock.advance(60)  # type: ignore[attr-defined]  # what it did is told
    assert not world.ctx.caches.holders(NS, "a")
    # Not until m-b, which owns c1, counted again.
    assert (await reconcile_crs(leader, NS, "a")).requeue_after == DELETION_POLL
    assert await finalizer()
    assert (await reconcile_crs(leader, NS, "a")).requeue_after == DELETION_POLL
    await reconcile_crs(follower, NS, "a")
    assert board.published["m-b"].holding == 0
    last = await reconcile_crs(leader, NS, "a")
    assert not await finalizer(), last


async def test_a_follower_counts_nothing_for_a_crs_deleted_without_our_finalizer() -> None:
    """Another finalizer keeps the CRS, ours was never added: the leader waits on no
    count, so the follower contributes none and does not look again."""
    world = await a_crs()
    live = await world.mgmt.get(API_VERSION, "ClusterResourceSet", "a", NS)
    assert live is not None
    live["metadata"]["finalizers"] = ["example.com/keep"]
    await world.update(live)
    await deleting(world, "ClusterResourceSet", API_VERSION, "a", SOON)
    board = Board(frozenset({"m-a", "m-b"}))
    follower = replace(
        world.crs_context(leading=False), combining=Member("m-b", board, frozenset({"c1"}))
    )
    with capture_logs() as logs:
        result = await reconcile_crs(follower, NS, "a")
    assert result.requeue_after is None and not result.wake
    assert "m-b" not in board.published
    assert not [e for e in logs if e["event"] == "status waits"]


def test_a_member_combines_through_the_store_and_a_new_member_set_passes_over_every_crs() -> None:
    clock = FakeClock()
    controller = Controller(MemoryKube("management"), Settings(), CLUSTER_API, clock=clock)
    shard = ShardMembership(
        controller.mgmt,
        "crs-system",
        "m-a",
        lease_seconds=LEASE,
        clock=clock,
        on_change=controller.reshard,
    )
    store: ContributionStore[Contribution] = ContributionStore(
        controller.mgmt,
        "crs-system",
        "m-a",
        parse=Contribution.from_api,
        dump=Contribution.to_api,
        on_change=controller.contribution_moved,
        clock=clock,
        lease_seconds=LEASE,
        stale_after=4,
    )
    controller.join(shard, store)
    seam = controller.crs_ctx.combining
    assert isinstance(seam, Sharded) and seam.me == "m-a" and seam.members() == frozenset()
    crss = controller.informers[0]
    for name in ("a", "b"):
        controller.index.update_crs(None, crss.put(crs(name, "src")))
    start(shard, "m-b")  # the member set changes: m-a and m-b
    assert seam.members() == frozenset({"m-a", "m-b"})
    assert {crs_key(NS, "a"), crs_key(NS, "b")} <= set(controller.queue.ready_keys())


@dataclass
class Pair:
    """A leader owning no cluster and a follower owning c1, on one world."""

    world: World
    leader: CRSContext
    follower: CRSContext
    cluster_ctx: ClusterContext

    async def crs_passes(self) -> None:
        for ctx in (self.follower, self.leader, self.follower):  # as contributions wake them
            await reconcile_crs(ctx, NS, "a")
        for key, obj in list(self.world.mgmt.objects.items()):
            if key[1] == "ConfigMap":
                self.world.sync(obj)  # the snapshots written

    async def cluster_pass(self) -> None:
        await reconcile_cluster(self.cluster_ctx, NS, "c1")
        self.world.sync_bindings()

    async def a_round(self) -> None:
        await self.crs_passes()
        await self.cluster_pass()
        await self.crs_passes()


def pair(world: World) -> Pair:
    board = Board(frozenset({"m-a", "m-b"}))
    leader = replace(world.crs_context(), combining=Member("m-a", board, frozenset()))
    follows, cluster_ctx = restarted(world)
    follower = replace(
        follows, leading=lambda: False, combining=Member("m-b", board, frozenset({"c1"}))
    )
    return Pair(world, leader, follower, cluster_ctx)


async def fails_on_c1(two: Pair) -> MemoryKube:
    """The sources edited, and the new revision failing on c1: its rollout halts and
    the leader rolls back by itself. Returns c1's workload, failing still."""
    world = two.world
    source = world.mgmt.objects[("v1", "ConfigMap", NS, "src")]
    await world.update({**source, "data": configmap_source("src", payload("addon", "2"))["data"]})
    workload: MemoryKube = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    workload.fail_with = APIError("apply refused", status=422, body="{}")
    await two.crs_passes()
    await two.cluster_pass()  # the new revision fails on c1
    await reconcile_crs(two.follower, NS, "a")
    await reconcile_crs(two.leader, NS, "a")  # halted: back by itself
    return workload


async def test_a_rollback_by_itself_starts_on_the_leader_and_the_members_follow_it() -> None:
    """c1 is the follower's: its failure halts the rollout; the leader decides the
    rollback from the members' shares combined, writes it at once (the follower's
    share of the revision rolled back to is not in yet: it makes it once it reads
    the status), and the rollback then completes from the shares of both."""
    world = await world_with(crs("a", "src", rollout={"maxConcurrent": 1, "onFailure": "Rollback"}))
    two = pair(world)
    await two.a_round()
    assert status(world)["rollout"]["phase"] == "Complete"
    workload = await fails_on_c1(two)
    rolling = status(world)["rollout"]
    assert rolling["rolledBackFrom"] and "waiting for the members' shares" in rolling["message"]
    workload.fail_with = None
    for _ in range(2):
        await two.a_round()
    done = status(world)["rollout"]
    assert (done["phase"], done["rolledBackFrom"]) == ("RolledBack", rolling["rolledBackFrom"])


def blind(two: Pair) -> tuple[Pair, Informer[SourceMeta]]:
    """``two`` with the follower (its CRS and cluster passes) watching the ConfigMaps
    through a watch of its own that shows every one the world's shows but the
    snapshots (not in yet, or deleted); the watch is returned, to show them later."""
    world = two.world
    watch = Informer(world.mgmt, WatchSpec("v1", "ConfigMap"), parse_source_meta, _no_handler)
    show_configmaps(world, watch, snapshots=False)
    sources = Sources(world.mgmt, watch, world.secrets)
    snapshots = Snapshots(world.mgmt, sources, watch, world.secrets)
    follower = replace(two.follower, sources=sources, snapshots=snapshots)
    cluster_ctx = replace(two.cluster_ctx, sources=sources, snapshots=snapshots)
    return replace(two, follower=follower, cluster_ctx=cluster_ctx), watch


def _no_handler(old: object, new: object) -> None:
    pass


def revision_on_c1(world: World) -> str | None:
    the_crs = world.crs_context().caches.crs(NS, "a")
    assert the_crs is not None
    return entry_revision(the_crs, world.index.entry(NS, "c1", "a"))


def addon_on(workload: MemoryKube) -> str:
    return str(workload.objects[("v1", "ConfigMap", "default", "addon")]["data"]["v"])


async def test_a_follower_that_cannot_read_the_rollback_snapshot_holds_its_clusters() -> None:
    """The leader rolls back by itself; the follower's watch shows neither snapshot
    (not in yet, or deleted) once the status says so. c1, which failed taking the new
    revision, is held: never the revision rolled back from applied (its retry would
    take it once the workload recovered), no first install either; the follower says
    so, at warning and as the leader would (RollbackRefused). Once it sees the
    snapshots, c1 goes back to the revision rolled back to."""
    world = await world_with(crs("a", "src", rollout={"maxConcurrent": 1, "onFailure": "Rollback"}))
    two = pair(world)
    await two.a_round()
    first = status(world)["revision"]
    workload = await fails_on_c1(two)
    failed = status(world)["rollout"]["rolledBackFrom"]
    assert failed and status(world)["revision"] == first
    held, watch = blind(two)
    workload.fail_with = None
    with capture_logs() as logs:
        for _ in range(2):
            await held.a_round()
    entry = world.index.entry(NS, "c1", "a")
    assert entry is not None and entry.outcome is not None
    assert entry.outcome.reason == "Progressing" and first in entry.outcome.message
    assert addon_on(workload) == "1"  # what it had: nothing of the failed revision
    warned = [e for e in logs if e["event"] == "rollback held"]
    assert warned and warned[0]["log_level"] == "warning" and warned[0]["crs"] == f"{NS}/a"
    assert member_refusals(world)
    # The snapshots come in: c1 goes back to the revision rolled back to.
    show_configmaps(world, watch, snapshots=True)
    for _ in range(2):
        await held.a_round()
    done = status(world)["rollout"]
    assert (done["phase"], done["rolledBackFrom"]) == ("RolledBack", failed)
    assert revision_on_c1(world) == first and addon_on(workload) == "1"


def member_refusals(world: World) -> list[str]:
    """The RollbackRefused Events the follower (m-b) gave."""
    events = [o for k, o in world.mgmt.objects.items() if k[1] == "Event"]
    refused = [e["message"] for e in events if e["reason"] == "RollbackRefused"]
    return [message for message in refused if "m-b" in message]


def show_configmaps(world: World, watch: Informer[SourceMeta], snapshots: bool) -> None:
    """Show every ConfigMap to the follower's own watch, the snapshots or not."""
    for (_, kind, namespace, name), obj in world.mgmt.objects.items():
        if kind != "ConfigMap":
            continue
        if snapshots or SNAPSHOT_LABEL not in obj["metadata"].get("labels", {}):
            watch.put(obj)
        else:
            watch.remove(namespace, name)


async def test_a_follower_holding_a_rollback_again_for_the_same_reason_says_so_again() -> None:
    """The follower holds the rollback (the snapshots not in its watch), then reads
    them, then loses them again (a relist): the second hold, for the same reason as
    the first, is told again, at warning and by a RollbackRefused Event."""
    world = await world_with(crs("a", "src", rollout={"maxConcurrent": 1, "onFailure": "Rollback"}))
    two = pair(world)
    await two.a_round()
    workload = await fails_on_c1(two)
    held, watch = blind(two)
    workload.fail_with = None
    with capture_logs() as logs:
        for _ in range(2):
            await held.a_round()
    assert len([e for e in logs if e["event"] == "rollback held"]) == 1
    first = member_refusals(world)
    assert len(first) == 1
    show_configmaps(world, watch, snapshots=True)
    for _ in range(2):
        await held.a_round()
    assert status(world)["rollout"]["phase"] == "RolledBack"
    show_configmaps(world, watch, snapshots=False)  # gone from its watch again
    with capture_logs() as logs:
        for _ in range(2):
            await held.a_round()
    again = [e for e in logs if e["event"] == "rollback held"]
    assert len(again) == 1 and again[0]["log_level"] == "warning"
    assert member_refusals(world) == first * 2


async def test_a_member_taking_over_counts_nothing_before_its_new_shares_bindings_are_in() -> None:
    """Right after a reshard the CRS passes come at once, before the list under the new
    selector brings the bindings of the Clusters just taken over: counted then, they
    would hold nothing, and the finalizer would go while they still hold the CRS."""
    clock = FakeClock()
    controller, shard = await labelled_member("replica-a", clock)
    await settle(controller)
    start(shard, "replica-b")
    await settle(controller)
    mine = share(["replica-a", "replica-b"], "replica-a")
    # replica-a's own Clusters were cleaned up already: their bindings are gone.
    for name in mine | set(MISLABELLED):
        await controller.mgmt.delete(API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, name, NS)
    await settle(controller)
    assert controller.index.holders(NS, "a") == []
    raw = crs("a", "src")
    raw["metadata"]["finalizers"] = [FINALIZER]
    created = await controller.mgmt.create(raw)
    created["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    controller.index.update_crs(None, controller.informers[0].put(created))
    controller.crs_ctx = replace(
        controller.crs_ctx, combining=controller._sharded(Store("replica-a"))
    )
    controller.lead()
    # replica-b leaves: replica-a takes its share, and its CRS pass comes first.
    shard.on_lease(lease("replica-b", "t1"), None)
    shard.refresh()
    assert await reconcile_crs(controller.crs_ctx, NS, "a") == Result.after(status_settle(0.0))
    live = await controller.mgmt.get(API_VERSION, "ClusterResourceSet", "a", NS)
    assert live is not None and FINALIZER in live["metadata"]["finalizers"]
    # Once the list is in, the Clusters taken over are counted: still holding.
    await controller.bindings._relist()
    assert await reconcile_crs(controller.crs_ctx, NS, "a") == Result.after(DELETION_POLL)
    live = await controller.mgmt.get(API_VERSION, "ClusterResourceSet", "a", NS)
    assert live is not None and FINALIZER in live["metadata"]["finalizers"]


def member_lease(identity: str, renewed: str, incarnation: str) -> LeaseRecord:
    """A member's Lease as the watch brings it, annotated with its incarnation."""
    raw: dict[str, Any] = {
        "metadata": {
            "name": f"crs-controller-shard-{identity}",
            "annotations": {"addons.crs.dev/shard-incarnation": incarnation},
        },
        "spec": {"holderIdentity": identity, "leaseDurationSeconds": 6, "renewTime": renewed},
    }
    return LeaseRecord.parse(raw)


async def a_leader_combining(store: Store) -> tuple[Controller, ShardMembership, str]:
    """m-a, leading a shard set with m-b (in its first incarnation), CRS ``a`` and
    the Clusters cached; its CRS pass combines through ``store``. Returns the CRS's
    uid too."""
    controller, shard = member("m-a", FakeClock())
    sharded = replace(controller._sharded(store), listed=lambda: True)
    controller.crs_ctx = replace(controller.crs_ctx, combining=sharded)
    created = await controller.mgmt.create(crs("a", "src"))
    controller.index.update_crs(None, controller.informers[0].put(created))
    shard.renewed()
    shard.on_lease(None, member_lease("m-b", "t1", "1" * 32))
    shard.refresh()
    controller.lead()
    return controller, shard, created["metadata"]["uid"]


async def test_a_member_back_under_the_same_identity_is_waited_for_not_its_old_contribution() -> (
    None
):
    """m-b's process restarted (or it was cut off for longer than the lease): it left
    the set and came back under the same identity before its contribution was
    swept. What it said before is never combined again: the leader waits for what
    it says now, which it publishes once it acts."""
    store = Store("m-a")
    controller, shard, uid = await a_leader_combining(store)
    await reconcile_crs(controller.crs_ctx, NS, "a")  # m-b's is missing
    said = replace(store.held[uid]["m-a"], member="m-b")  # m-b's, under this set
    store.held[uid]["m-b"] = said
    with capture_logs() as logs:
        await reconcile_crs(controller.crs_ctx, NS, "a")
    assert not [e for e in logs if e["event"] == "status waits"]  # combined
    shard.on_lease(member_lease("m-b", "t1", "1" * 32), None)  # m-b leaves
    shard.refresh()
    await reconcile_crs(controller.crs_ctx, NS, "a")
    shard.on_lease(None, member_lease("m-b", "t2", "2" * 32))  # and comes back
    shard.refresh()
    assert shard.members == {"m-a", "m-b"} and store.held[uid]["m-b"] == said
    with capture_logs() as logs:
        await reconcile_crs(controller.crs_ctx, NS, "a")
    waits = [e["waiting"] for e in logs if e["event"] == "status waits"]
    assert waits == ["waiting for the contributions of m-b (out of date)"]


async def test_a_member_in_a_new_incarnation_moves_no_cluster_and_passes_over_every_crs() -> None:
    """m-b renews in a new incarnation before m-a counted it out (it lapsed, or its
    process restarted, within the lease): the same members, so no Cluster changes
    hands, but each CRS's pass comes, to contribute under the new set."""
    controller, shard, _ = await a_leader_combining(Store("m-a"))
    owned = {key for key in controller.index.cluster_keys() if controller.owns(*key)}
    assert 0 < len(owned) < len(list(controller.index.cluster_keys()))
    drained(controller)
    shard.on_lease(None, member_lease("m-b", "t2", "2" * 32))
    shard.refresh()
    assert crs_key(NS, "a") in controller.queue.ready_keys()
    assert {key for key in controller.index.cluster_keys() if controller.owns(*key)} == owned


async def test_a_pass_waiting_for_a_contribution_looks_again_spaced_by_its_last_pass() -> None:
    """While m-b's contribution is missing, m-a's pass looks again as a status wake
    would: twenty times its last pass (0.5 s: 10 s), not every second; m-b's
    contribution coming in wakes it through the store's watch."""
    store = Store("m-a")
    controller, _, _ = await a_leader_combining(store)
    controller._pass_times.note(NS, "a", 0.5)
    waited = await reconcile_crs(controller.crs_ctx, NS, "a")
    assert waited.requeue_after == status_settle(0.5) == 10.0
    drained(controller)
    controller.contribution_moved(NS, "a")  # as the store's watch tells of m-b's
    now = controller.clock.now()
    assert controller.queue.fire_due(now + 9.9) == []
    assert controller.queue.fire_due(now + 10.0) == [crs_key(NS, "a")]


def drained(controller: Controller) -> None:
    """Take every ready key off the queue, as workers would, done."""
    while controller.queue.ready_keys():
        controller.queue.done(controller.queue.get_nowait())
