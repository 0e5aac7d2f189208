"""What a shard member keeps of the fleet: the whole binding (its inventory of applied
objects) and the whole Cluster (what its variables read) only for the Clusters it
owns, a summary of the other Clusters (what a CRS's selector, status and rollout plan
read) and, once it knows its share, no other binding at all (its watch selects its
buckets' by label; the bindings whose label names no bucket come from a second watch
to their owner); every Cluster in exactly one member's share; after a hand-over,
nothing of another member's share's bindings, dropped without a deletion's wakes, and
no Cluster reconciled before its share's bindings are listed; a Cluster taken over is
reconciled from its whole Cluster and binding, read first. Nothing here runs a server
or sleeps."""

from __future__ import annotations

import asyncio
import copy
from dataclasses import fields, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.core.api.clusters import HOLD_UPDATES_ANNOTATION, PAUSED_ANNOTATION, is_paused
from crs_controller.core.api.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_BINDING_KIND,
    SHARD_BUCKET_LABEL,
    ClusterResourceSetBinding,
    ObjectMeta,
    to_api,
)
from crs_controller.core.errors import APIError
from crs_controller.core.membership.lease import LeaseRecord
from crs_controller.core.membership.shard import bucket_of, owner
from crs_controller.core.rollout.snapshots import SNAPSHOT_LABEL
from crs_controller.core.spec.objects import (
    Cluster,
    SourceMeta,
    cluster_summary,
    parse_binding_object,
    parse_binding_summary,
    parse_cluster,
    parse_cluster_summary,
    parse_crs,
    parse_source_meta,
    summary_of,
)
from crs_controller.core.state.status import outcome_of
from crs_controller.core.values.substitution import readable_part
from crs_controller.engine.reconcile.cluster import forget_cluster, reconcile_cluster
from crs_controller.engine.reconcile.context import Settings
from crs_controller.engine.runtime.controller import Controller
from crs_controller.engine.runtime.membership import ShardMembership

from .builders import NS, cluster, configmap_source, crs, payload, reconcile, world_with
from .fake_clock import FakeClock
from .memory_kube import CLUSTER_API, MemoryKube, World
from .test_binding_lifecycle import edit_source, unpause

Obj = dict[str, Any]
LEASE = 6.0
NAMES = [f"c{i:02d}" for i in range(40)]


def binding(name: str, objects: int = 5, version: int = 5) -> Obj:
    inventory = [
        {"apiVersion": "v1", "kind": "ConfigMap", "namespace": NS, "name": f"o{j}", "hash": "h"}
        for j in range(objects)
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": CLUSTER_RESOURCE_SET_BINDING_KIND,
        "metadata": {"name": name, "namespace": NS, "resourceVersion": str(version)},
        "spec": {
            "clusterName": name,
            "bindings": [
                {
                    "clusterResourceSetName": "a",
                    "resources": [
                        {
                            "kind": "ConfigMap",
                            "name": "src",
                            "hash": "xxh3:1",
                            "applied": True,
                            "objects": inventory,
                        }
                    ],
                    "outcome": {"reason": "Applied", "message": "ok", "observedGeneration": 1},
                }
            ],
        },
    }


def test_a_summary_keeps_what_status_and_rollouts_read_and_drops_the_inventory() -> None:
    whole = parse_binding_object(binding("c00"))
    summary = parse_binding_summary(binding("c00"))
    assert (whole.whole, summary.whole) == (True, False)
    assert set(summary.entry_of) == set(whole.entry_of) == {"a"}
    entry, kept = whole.entries()["a"], summary.entries()["a"]
    assert outcome_of(kept) == outcome_of(entry)
    assert [(r.kind, r.name, r.hash, r.applied) for r in kept.resources] == [
        (r.kind, r.name, r.hash, r.applied) for r in entry.resources
    ]
    assert [len(r.objects) for r in kept.resources] == [1]
    # Parsed as a summary, or made one from the whole binding: the same.
    assert to_api(summary_of(whole).valid) == to_api(summary.valid)
    assert summary_of(summary) is summary


def test_a_binding_the_model_refuses_is_refused_as_a_summary_too() -> None:
    broken = binding("c00")
    broken["spec"]["bindings"][0]["outcome"]["reason"] = "not a reason!"
    summary = parse_binding_summary(broken)
    assert summary.model is None and summary.problem is not None and not summary.whole


def test_summaries_of_a_fleet_share_their_equal_parts() -> None:
    first, second = (parse_binding_summary(binding(name)).entries()["a"] for name in NAMES[:2])
    assert first.resources[0] is second.resources[0]
    assert first.outcome is second.outcome
    # Of the inventory, only the first object's identity: no records of it.
    kept = first.resources[0].objects
    assert [(o.name, o.hash, o.fields) for o in kept] == [("o0", None, None)]


def test_whole_bindings_of_a_fleet_share_their_inventory_and_records() -> None:
    """What a member holds of each binding of its share: one copy of its metadata,
    and the inventory entries and records that every Cluster's binding repeats held
    once (frozen, or never changed in place)."""
    first, second = (parse_binding_object(binding(name)) for name in NAMES[:2])
    assert first.meta is first.valid.metadata
    a, b = first.entries()["a"], second.entries()["a"]
    pairs = zip(a.resources[0].objects, b.resources[0].objects, strict=True)
    assert all(x is y for x, y in pairs)
    assert a.outcome is b.outcome
    assert a.cluster_resource_set_name is b.cluster_resource_set_name
    # Each binding still has its own containers: a pass's copy changes only its own.
    assert a.resources[0] is not b.resources[0]
    assert a.resources[0].objects is not b.resources[0].objects


records = st.fixed_dictionaries(
    {"hash": st.sampled_from(["h", "g"])},
    optional={"fields": st.sampled_from(["f1", "f2"]), "generation": st.integers(1, 3)},
)


@settings(max_examples=100, deadline=None)
@given(inventories=st.lists(st.lists(records, min_size=1, max_size=3), min_size=2, max_size=4))
def test_a_whole_binding_reads_as_its_own_whatever_others_share(
    inventories: list[list[dict[str, Any]]],
) -> None:
    """Shared or not, each binding reads back exactly as the API server sent it:
    objects of the same identity with other records keep their own."""
    raws = []
    for n, inventory in enumerate(inventories):
        raw = binding(f"c{n:02d}", objects=len(inventory))
        objects = raw["spec"]["bindings"][0]["resources"][0]["objects"]
        for entry, extra in zip(objects, inventory, strict=True):
            entry.update(extra)
        raws.append(raw)
    for raw in raws:
        parsed = parse_binding_object(copy.deepcopy(raw))
        assert to_api(parsed.valid) == to_api(ClusterResourceSetBinding.model_validate(raw))
        assert parsed.meta == ObjectMeta.model_validate(raw["metadata"])


annotation_keys = st.sampled_from([HOLD_UPDATES_ANNOTATION, PAUSED_ANNOTATION, "a", "b/c"])


@settings(max_examples=100, deadline=None)
@given(
    labels=st.dictionaries(st.sampled_from(["env", "tier"]), st.sampled_from(["prod", ""])),
    annotations=st.dictionaries(annotation_keys, st.sampled_from(["true", "false", ""])),
    deleting=st.booleans(),
    spec=st.fixed_dictionaries(
        {},
        optional={
            "paused": st.booleans(),
            "topology": st.just({"version": "v1.34.4"}),
            "controlPlaneRef": st.just({"kind": "KubeadmControlPlane", "name": "cp"}),
        },
    ),
    status=st.sampled_from([{}, {"controlPlaneReady": True}]),
)
def test_a_cluster_summary_keeps_every_field_but_what_variables_read(
    labels: dict[str, str],
    annotations: dict[str, str],
    deleting: bool,
    spec: Obj,
    status: Obj,
) -> None:
    raw = cluster("c00", **spec)
    raw["metadata"].update(labels=labels, annotations=annotations, uid="u", managedFields=[{}])
    if deleting:
        raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    raw["status"] = status
    whole, summary = parse_cluster(raw), parse_cluster_summary(raw)
    assert (whole.whole, summary.whole, summary.raw) == (True, False, {})
    for read in fields(Cluster):
        if read.name not in ("raw", "whole"):
            assert getattr(summary, read.name) == getattr(whole, read.name), read.name
    assert whole.raw == readable_part(raw)
    # What is read of the metadata is what the whole metadata says.
    full = ObjectMeta.model_validate(raw["metadata"])
    assert (whole.name, whole.namespace, whole.meta.labels) == (full.name, full.namespace, labels)
    assert whole.deleting == (full.deletion_timestamp is not None)
    assert whole.holds_updates == (full.annotations.get(HOLD_UPDATES_ANNOTATION) == "true")
    assert whole.paused == is_paused(raw)
    selecting = parse_crs(crs("a", "src"))
    assert selecting.selects(summary) == selecting.selects(Cluster(full))


def test_a_configmap_or_secret_is_held_as_what_is_read_of_it() -> None:
    labels = {SNAPSHOT_LABEL: "crs-uid", "x": "y"}
    meta = {"name": "s", "namespace": NS, "uid": "u", "labels": labels, "managedFields": [{}]}
    assert parse_source_meta({"metadata": meta}) == SourceMeta("s", NS, "u", "crs-uid")
    assert parse_source_meta({"metadata": {"name": "s"}}) == SourceMeta("s")


# --- a shard member's caches ---------------------------------------------------------


def lease(identity: str, renewed: str) -> LeaseRecord:
    return LeaseRecord(f"crs-controller-shard-{identity}", identity, LEASE, renewed, None, 0)


def member(identity: str, clock: FakeClock) -> tuple[Controller, ShardMembership]:
    """A replica's controller, its caches listed before it knows its share."""
    controller = Controller(MemoryKube("management"), Settings(), CLUSTER_API, clock=clock)
    shard = ShardMembership(
        controller.mgmt,
        "crs-system",
        identity,
        lease_seconds=LEASE,
        clock=clock,
        on_change=controller.reshard,
    )
    controller.join(shard)
    clusters, bindings = controller.informers[1], controller.informers[2]
    for name in NAMES:
        controller.index.update_cluster(None, clusters.put(cluster(name)))
        controller.index.update_binding(None, bindings.put(binding(name)))
    return controller, shard


def start(shard: ShardMembership, *others: str) -> None:
    shard.renewed()
    for other in others:
        shard.on_lease(None, lease(other, "t1"))
    shard.refresh()
    shard.ready.set()


def whole_ones(controller: Controller) -> set[str]:
    """The Clusters whose binding is held whole; their Cluster is too, and only theirs."""
    found = (controller.bindings.get(NS, name) for name in NAMES)
    bindings = {b.meta.name for b in found if b is not None and b.whole}
    clusters = (controller.clusters.get(NS, name) for name in NAMES)
    assert {c.name for c in clusters if c is not None and c.whole} == bindings
    return bindings


def share(members: list[str], me: str) -> set[str]:
    return {name for name in NAMES if owner(members, f"{NS}/{name}") == me}


@settings(max_examples=30, deadline=None)
@given(st.sets(st.sampled_from(["a", "b", "c", "d", "e", "f"]), min_size=1))
def test_every_cluster_is_in_exactly_one_members_share(members: set[str]) -> None:
    clock = FakeClock()
    shards = []
    for identity in sorted(members):
        shard = ShardMembership(
            MemoryKube("m"), "ns", identity, lease_seconds=LEASE, clock=clock, on_change=_none
        )
        start(shard, *(m for m in members if m != identity))
        shards.append(shard)
    for name in NAMES:
        assert sum(s.owns(NS, name) for s in shards) == 1


def _none(before: frozenset[str], after: frozenset[str]) -> None:
    pass


async def test_a_member_holds_whole_bindings_only_for_its_own_share() -> None:
    clock = FakeClock()
    controller, shard = member("replica-a", clock)
    assert whole_ones(controller) == set(NAMES)  # its share unknown yet: nothing dropped
    assert controller.cluster_ctx.holds_every_binding()
    start(shard, "replica-b")
    assert not controller.cluster_ctx.holds_every_binding()  # a pass missing one reads it
    mine = share(["replica-a", "replica-b"], "replica-a")
    assert whole_ones(controller) == mine and 5 < len(mine) < 35
    # A watch event for another member's Cluster is kept as a summary at once.
    other = sorted(set(NAMES) - mine)[0]
    controller.bindings.put(binding(other, version=6))
    controller.clusters.put(
        {**cluster(other), "metadata": {**cluster(other)["metadata"], "resourceVersion": "6"}}
    )
    assert whole_ones(controller) == mine
    # A third member joins: what it takes from us is only summarized here now.
    shard.on_lease(None, lease("replica-c", "t1"))
    shard.refresh()
    now_mine = share(["replica-a", "replica-b", "replica-c"], "replica-a")
    assert now_mine < mine
    assert whole_ones(controller) == now_mine
    # Its own Lease lost: it owns nothing, and keeps nothing whole.
    shard.on_lease(lease("replica-a", "t1"), None)
    shard.refresh()
    assert whole_ones(controller) == set()


async def test_a_cluster_taken_over_is_reconciled_from_its_whole_binding() -> None:
    source = configmap_source("src", payload("addon"), payload("more"))
    world = await world_with(crs("a", "src"), mode_source=source)
    await reconcile(world)
    recorded = world.bindings.get(NS, "c1")
    assert recorded is not None and recorded.whole
    assert [len(r.objects) for r in recorded.entries()["a"].resources] == [2]
    # Another member's until now: this replica held only the summary. Reconciled from
    # it, the pass would record an inventory of one object and forget the other.
    world.bindings.reshape(NS, "c1", summary_of)
    await reconcile(world)
    assert world.mgmt.requests.count(("get", "ClusterResourceSetBinding/c1")) == 1
    live = world.mgmt.objects[(API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, NS, "c1")]
    resources = live["spec"]["bindings"][0]["resources"]
    assert [len(r["objects"]) for r in resources] == [2]
    held = world.bindings.get(NS, "c1")
    assert held is not None and held.whole


def reason_of(world: World) -> str:
    found = world.ctx.outcomes.get(NS, "a", "c1")
    return "" if found is None else found.reason


async def test_a_members_cluster_whose_binding_its_watch_missed_reads_it_before_anything() -> None:
    """A shard member's cache holds only the bindings its watches select (one whose
    label a tenant moved to another bucket is not there): taken for a first install,
    the pass would apply the current sources past a hold on updates."""
    world = await world_with(crs("a", "src"))
    world.ctx = replace(world.ctx, holds_every_binding=lambda: False)
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    await unpause(world, **{HOLD_UPDATES_ANNOTATION: "true"})
    await edit_source(world, payload("addon", "v2"))
    await reconcile(world)
    assert reason_of(world) == "UpdateHeld"
    workload.requests.clear()
    world.index.update_binding(world.bindings.remove(NS, "c1"), None)
    world.mgmt.requests.clear()
    await reconcile_cluster(world.ctx, NS, "c1")
    assert world.mgmt.requests.count(("get", "ClusterResourceSetBinding/c1")) == 1
    assert workload.writes() == []
    assert reason_of(world) == "UpdateHeld"
    # Read whole and cached: the next pass reads nothing more.
    held = world.bindings.get(NS, "c1")
    assert held is not None and held.whole
    await reconcile_cluster(world.ctx, NS, "c1")
    assert world.mgmt.requests.count(("get", "ClusterResourceSetBinding/c1")) == 1


async def test_a_members_cluster_without_a_binding_starts_with_none_after_one_read() -> None:
    world = await world_with(crs("a", "src"))
    world.ctx = replace(world.ctx, holds_every_binding=lambda: False)
    await reconcile(world)
    assert world.mgmt.requests.count(("get", "ClusterResourceSetBinding/c1")) == 1
    assert reason_of(world) == "Applied"


BINDING_GET = ("get", "ClusterResourceSetBinding/c1")


async def test_a_members_cluster_no_crs_selects_reads_no_binding() -> None:
    world = await world_with()
    world.ctx = replace(world.ctx, holds_every_binding=lambda: False)
    for _ in range(5):
        await reconcile(world)  # each pass done: nothing to apply, prune or record
    assert world.mgmt.requests.count(BINDING_GET) == 0


async def test_a_members_cluster_found_without_a_binding_is_read_once_until_told_of_it() -> None:
    """A 404 is remembered: passes that write no binding (its create refused) do not
    read it again, until a watch tells of that binding or the share changes."""
    world = await world_with(crs("a", "src"))
    world.ctx = replace(world.ctx, holds_every_binding=lambda: False)
    create, refusals = world.mgmt.create, []

    async def refused(obj: Any) -> Obj:
        if obj["kind"] == CLUSTER_RESOURCE_SET_BINDING_KIND:
            refusals.append(obj["metadata"]["name"])
            raise APIError("create refused", status=403)
        return await create(obj)

    world.mgmt.create = refused  # type: ignore[method-assign]
    for _ in range(3):
        with pytest.raises(APIError):
            await reconcile(world)
    assert refusals == ["c1"] * 3  # each pass decided from the binding, and wrote
    assert world.mgmt.requests.count(BINDING_GET) == 1
    world.ctx.bindings.seen(NS, "c1")  # a watch told of it: read again
    with pytest.raises(APIError):
        await reconcile(world)
    assert world.mgmt.requests.count(BINDING_GET) == 2
    world.ctx.bindings.forget_absent()  # the share changed: read again
    world.mgmt.create = create  # type: ignore[method-assign]
    await reconcile(world)
    await reconcile(world)
    assert world.mgmt.requests.count(BINDING_GET) == 3 and reason_of(world) == "Applied"


async def test_a_binding_event_from_either_watch_or_a_new_share_lets_a_member_read_again() -> None:
    clock = FakeClock()
    controller, shard = await labelled_member("replica-a", clock)
    await settle(controller)
    start(shard)
    await settle(controller)
    store, requests = controller.cluster_ctx.bindings, controller.mgmt.requests  # type: ignore[attr-defined]
    gets = ("get", "ClusterResourceSetBinding/gone")

    async def absent() -> bool:
        """Read it if due; True when a GET was made."""
        before = requests.count(gets)
        assert await store.read_missing(NS, "gone") is None
        return requests.count(gets) > before

    assert await absent() and not await absent()
    controller.bindings._take((NS, "gone"), binding("gone", version=90))  # the share's watch
    controller.bindings._deleted((NS, "gone"), binding("gone", version=91))
    assert await absent() and not await absent()
    assert controller.mislabelled is not None
    controller.mislabelled._deleted((NS, "gone"), binding("gone", version=92))  # the other's
    assert await absent() and not await absent()
    shard.on_lease(None, lease("replica-b", "t1"))  # the share changes
    shard.refresh()
    assert await absent() and not await absent()


async def test_a_cluster_taken_over_is_reconciled_from_the_whole_cluster() -> None:
    world = await world_with(crs("a", "src"))
    await reconcile(world)
    # Another member's until now: this replica held what selectors and status read,
    # not what the Cluster's variables read.
    world.clusters.reshape(NS, "c1", cluster_summary)
    held = world.clusters.get(NS, "c1")
    assert held is not None and not held.whole and held.raw == {}
    await reconcile(world)
    assert world.mgmt.requests.count(("get", "Cluster/c1")) == 1
    held = world.clusters.get(NS, "c1")
    assert held is not None and held.whole and held.raw["metadata"]["name"] == "c1"
    await reconcile(world)  # held whole now: not read again
    assert world.mgmt.requests.count(("get", "Cluster/c1")) == 1


async def test_a_cluster_let_go_leaves_nothing_of_it_in_memory() -> None:
    world = await world_with(crs("a", "src"))
    await reconcile(world)
    sources = world.ctx.sources
    assert (NS, "Secret", "c1-kubeconfig") in sources._contents
    assert world.ctx.outcomes.get(NS, "a", "c1") is not None
    await forget_cluster(world.ctx, NS, "c1")
    assert (NS, "Secret", "c1-kubeconfig") not in sources._contents
    assert world.ctx.outcomes.get(NS, "a", "c1") is None


def test_validation_records_naming_created_objects_are_shared_too() -> None:
    raw = binding("c00")
    uids = ["0b5c6c1e-6d0f-4a39-9f53-2f4b0f6f0d7a"]
    raw["spec"]["bindings"][0]["validation"] = {
        "revision": "r1",
        "step": 1,
        "phase": "Failed",
        "started": "2026-01-01T00:00:00Z",
        "created": uids,
    }
    first, second = (parse_binding_summary(raw).entries()["a"] for _ in range(2))
    assert first.validation is not None and first.validation.created == uids
    assert first.validation is second.validation


def test_long_text_is_not_shared() -> None:
    """What the shared values hold is bounded: a binding's long text stays its own."""
    raw = binding("c00")
    raw["spec"]["bindings"][0]["resources"][0]["hash"] = "h" * 2000
    first, second = (parse_binding_summary(raw).entries()["a"] for _ in range(2))
    assert first.resources[0] == second.resources[0]
    assert first.resources[0] is not second.resources[0]


def test_long_lists_of_created_uids_are_not_shared() -> None:
    """The bound counts the text inside a record's lists too: a validation naming
    many created objects stays its own."""
    raw = binding("c00")
    raw["spec"]["bindings"][0]["validation"] = {
        "revision": "r1",
        "step": 1,
        "phase": "Failed",
        "started": "2026-01-01T00:00:00Z",
        "created": [f"{i:036d}" for i in range(40)],
    }
    first, second = (parse_binding_summary(raw).entries()["a"] for _ in range(2))
    assert first.validation == second.validation
    assert first.validation is not second.validation


# --- the bindings a member watches: its own share's, selected by label ----------------


async def labelled_member(identity: str, clock: FakeClock) -> tuple[Controller, ShardMembership]:
    """A member whose management server holds the fleet's bindings, each labelled with
    its bucket but ``MISLABELLED`` (one without a label, one not a bucket)."""
    controller, shard = member(identity, clock)
    for name in NAMES:
        raw = binding(name)
        if name not in MISLABELLED:
            raw["metadata"]["labels"] = {SHARD_BUCKET_LABEL: str(bucket_of(NS, name))}
        elif MISLABELLED[name] is not None:
            raw["metadata"]["labels"] = {SHARD_BUCKET_LABEL: MISLABELLED[name]}
        await controller.mgmt.create(raw)
    return controller, shard


MISLABELLED: dict[str, str | None] = {NAMES[0]: None, NAMES[1]: "not-a-bucket"}


async def settle(controller: Controller) -> None:
    """What the watches bring once the selectors changed: each lists again."""
    assert controller.mislabelled is not None
    await controller.mislabelled._relist()
    await controller.bindings._relist()


def drained(controller: Controller, clock: FakeClock) -> set[Any]:
    """Every key queued, due now or later, taken off the queue."""
    controller.queue.fire_due(clock.now() + 3600)
    keys = set()
    while controller.queue.ready_keys():
        key = controller.queue.get_nowait()
        controller.queue.done(key)
        keys.add(key)
    return keys


def held(controller: Controller) -> set[str]:
    """The bindings cached (each whole) and indexed."""
    found = [b for b in (controller.bindings.get(NS, name) for name in NAMES) if b is not None]
    assert all(b.whole for b in found)
    names = {b.meta.name for b in found}
    assert names == {name for _, name in controller.index._indexed_bindings}
    return names


async def test_after_a_handover_settles_a_member_holds_only_its_own_shares_bindings() -> None:
    clock = FakeClock()
    controller, shard = await labelled_member("replica-a", clock)
    await settle(controller)
    assert held(controller) == set(NAMES)  # its share unknown yet: every binding, whole
    start(shard, "replica-b")
    two = ["replica-a", "replica-b"]
    assert held(controller) == share(two, "replica-a")  # dropped at once
    await settle(controller)
    assert held(controller) == share(two, "replica-a")
    drained(controller, clock)
    # A third member joins: what it takes is dropped, and not as a deletion.
    shard.on_lease(None, lease("replica-c", "t1"))
    shard.refresh()
    three = [*two, "replica-c"]
    await settle(controller)
    assert held(controller) == share(three, "replica-a")
    assert controller.mislabelled is not None and len(controller.mislabelled) == 2
    woken = drained(controller, clock)
    moved = {("cluster", NS, n) for n in share(two, "replica-a") - share(three, "replica-a")}
    assert woken == moved  # let go of (reshard), never woken as deleted: no CRS pass
    # The third leaves again (its Lease deleted): this member takes its share back whole.
    shard.on_lease(lease("replica-c", "t1"), None)
    shard.refresh()
    await settle(controller)
    assert held(controller) == share(two, "replica-a")


@settings(max_examples=10, deadline=None)
@given(st.lists(st.sampled_from(["replica-b", "replica-c", "replica-d"]), max_size=4))
async def test_whatever_the_members_did_a_settled_cache_holds_only_the_share(
    joins: list[str],
) -> None:
    clock = FakeClock()
    controller, shard = await labelled_member("replica-a", clock)
    start(shard)
    members = {"replica-a"}
    for other in joins:
        if other in members:
            shard.on_lease(lease(other, "t1"), None)
            members.discard(other)
        else:
            shard.on_lease(None, lease(other, "t1"))
            members.add(other)
        shard.refresh()
        await settle(controller)
        assert held(controller) == share(sorted(members), "replica-a")


async def test_no_cluster_is_reconciled_before_its_shares_bindings_are_listed() -> None:
    clock = FakeClock()
    controller, shard = await labelled_member("replica-a", clock)
    await settle(controller)
    start(shard, "replica-b")
    mine = sorted(share(["replica-a", "replica-b"], "replica-a"))[0]
    asking = asyncio.ensure_future(controller._ours(NS, mine))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not asking.done()  # a pass now would find no binding cached for it
    await controller.bindings._relist()
    assert await asking is True
    assert controller.bindings.get(NS, mine) is not None


async def test_a_relist_of_the_share_keeps_its_bindings_whose_label_names_no_bucket() -> None:
    """Held with the share's from the other watch (the share's does not select them), a
    relist of the share's watch (a 410 Gone, an error) does not drop them as deleted."""
    clock = FakeClock()
    controller, shard = await labelled_member("replica-a", clock)
    await settle(controller)
    start(shard)  # alone: owns every Cluster
    await settle(controller)
    assert set(MISLABELLED) <= held(controller)
    drained(controller, clock)
    await controller.bindings._relist()
    assert held(controller) == set(NAMES)
    assert drained(controller, clock) == set()  # nothing woken: nothing was deleted


async def test_a_label_removed_keeps_the_binding_whichever_watch_tells_first() -> None:
    """Its label removed, the share's watch tells a DELETED and the other watch an
    ADDED, of the same version: in either order, the owner still holds it."""
    clock = FakeClock()
    controller, shard = await labelled_member("replica-a", clock)
    await settle(controller)
    start(shard)
    await settle(controller)
    assert controller.mislabelled is not None
    for name, first_added in (("c05", True), ("c06", False)):
        live = await controller.mgmt.get(API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, name, NS)
        assert live is not None
        before = copy.deepcopy(live)
        del live["metadata"]["labels"][SHARD_BUCKET_LABEL]
        new = await controller.mgmt.replace(live)
        # What the share's watch tells: the object as it was, at the new version.
        before["metadata"]["resourceVersion"] = new["metadata"]["resourceVersion"]
        if first_added:
            controller.mislabelled._take((NS, name), new)
        controller.bindings._deleted((NS, name), before)
        if not first_added:
            controller.mislabelled._take((NS, name), new)
        assert controller.bindings.version(NS, name) == int(new["metadata"]["resourceVersion"])
        assert name in held(controller)


async def test_another_members_binding_whose_label_names_no_bucket_is_held_as_its_record() -> None:
    """Every member watches the bindings whose label names no bucket; only their owner
    holds one whole. Taking it over, a member lists them again to have it whole, and
    reconciles nothing (nor contributes) before that list is in."""
    clock = FakeClock()
    controller, shard = await labelled_member("replica-a", clock)
    mine = share(["replica-a", "replica-b"], "replica-a")
    assert not mine & set(MISLABELLED)  # both replica-b's
    start(shard, "replica-b")
    await settle(controller)
    mislabelled = controller.mislabelled
    assert mislabelled is not None
    record = {"name", "namespace", "resourceVersion"}
    assert set((mislabelled.get(NS, "c00") or {})["metadata"]) == record
    assert set((mislabelled.get(NS, "c01") or {})["metadata"]) == record
    assert held(controller) == mine
    # replica-b leaves: every Cluster is replica-a's, those two too.
    shard.on_lease(lease("replica-b", "t1"), None)
    shard.refresh()
    await controller.bindings._relist()
    assert not controller._share_listed()
    assert set(MISLABELLED).isdisjoint(held(controller))
    await mislabelled._relist()
    assert controller._share_listed()
    assert held(controller) == set(NAMES)
    assert all("spec" in (mislabelled.get(NS, name) or {}) for name in MISLABELLED)
