"""A binding written over another writer's (a Conflict): ``merged_entries`` keeps, per
CRS, the entry of whichever writer changed it and refuses to guess when both did;
``write_binding`` puts a pass's changes onto the binding read again (its entries,
its owner references, a deletion only of the version read), and a reconcile whose
changes cannot be merged is redone on the binding as it is now."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.core.api.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_BINDING_KIND,
    ClusterResourceSetBinding,
    CRSBinding,
    ObjectMeta,
    ResourceBinding,
    to_api,
)
from crs_controller.core.errors import Conflict
from crs_controller.core.spec.objects import Binding, parse_binding_object
from crs_controller.core.state.bindings import (
    crs_owners,
    desired_binding,
    entries_by_crs,
    merged_entries,
    owner_reference,
)
from crs_controller.engine.reconcile.recording import BINDING_WRITE_ATTEMPTS, write_binding

from .builders import NS, configmap_source, crs, payload, reconcile, world_with
from .memory_kube import World

Versions = dict[str, int]  # CRS name -> which version of its entry


def entry(name: str, version: int) -> CRSBinding:
    resource = ResourceBinding(kind="ConfigMap", name=name, hash=f"xxh3:{version:016x}")
    return CRSBinding(cluster_resource_set_name=name, resources=[resource])


def entries(versions: Versions) -> dict[str, CRSBinding]:
    return {name: entry(name, version) for name, version in versions.items()}


def versions(merged: dict[str, CRSBinding]) -> Versions:
    return {name: int(e.resources[0].hash.removeprefix("xxh3:"), 16) for name, e in merged.items()}


# --- merged_entries -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "ours", "fresh", "merged"),
    [
        # Nobody else wrote: ours, whatever we did.
        ({"a": 1}, {"a": 2, "c": 1}, {"a": 1}, {"a": 2, "c": 1}),
        ({"a": 1, "b": 1}, {"a": 1}, {"a": 1, "b": 1}, {"a": 1}),
        # The other writer added, changed or removed an entry we left alone: theirs.
        ({"a": 1}, {"a": 1, "c": 1}, {"a": 1, "b": 1}, {"a": 1, "b": 1, "c": 1}),
        ({"a": 1, "b": 1}, {"a": 2, "b": 1}, {"a": 1, "b": 2}, {"a": 2, "b": 2}),
        ({"a": 1, "b": 1}, {"a": 2, "b": 1}, {"a": 1}, {"a": 2}),
        ({"a": 1}, {"a": 1}, {}, {}),
        # We removed an entry the other writer left alone: removed.
        ({"a": 1, "b": 1}, {"b": 1}, {"a": 1, "b": 2}, {"b": 2}),
        # No binding when the pass began, one there now (a create answered 409).
        ({}, {"c": 1}, {"a": 1, "b": 1}, {"a": 1, "b": 1, "c": 1}),
        # Both made the very same change: nothing to choose.
        ({"a": 1}, {"a": 2}, {"a": 2}, {"a": 2}),
        ({"a": 1, "b": 1}, {"b": 1}, {"b": 1}, {"b": 1}),
        # Both changed one entry, each its own way: not guessed at.
        ({"a": 1}, {"a": 2}, {"a": 3}, None),
        ({"a": 1}, {"a": 2}, {}, None),
        ({"a": 1}, {}, {"a": 3}, None),
        ({}, {"a": 1}, {"a": 2}, None),
        ({"a": 1, "b": 1}, {"a": 1, "b": 2}, {"a": 2, "b": 3}, None),
    ],
)
def test_merged_entries(
    base: Versions, ours: Versions, fresh: Versions, merged: Versions | None
) -> None:
    found = merged_entries(entries(base), entries(ours), entries(fresh))
    assert (None if found is None else versions(found)) == merged


def test_entries_are_compared_in_their_api_form() -> None:
    """An entry as the API gives it back (its times to the second) is no change of ours."""
    precise = datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=UTC)
    resource = entry("a", 1).resources[0].model_copy(update={"last_applied_time": precise})
    ours = CRSBinding(cluster_resource_set_name="a", resources=[resource])
    read = CRSBinding.model_validate(to_api(ours))
    assert read != ours
    assert merged_entries({"a": read}, {"a": ours}, {}) == {}


versions_of = st.dictionaries(st.sampled_from("abcde"), st.integers(0, 2), max_size=5)


@given(versions_of, versions_of, versions_of)
def test_no_change_of_either_writer_is_lost(
    base: Versions, ours: Versions, fresh: Versions
) -> None:
    found = merged_entries(entries(base), entries(ours), entries(fresh))
    names = base.keys() | ours.keys() | fresh.keys()
    both = {n for n in names if base.get(n) != ours.get(n) != fresh.get(n) != base.get(n)}
    assert (found is None) == bool(both)
    if found is None:
        return
    merged = versions(found)
    for name in names:
        if ours.get(name) != base.get(name):  # ours changed it: ours is kept
            assert merged.get(name) == ours.get(name)
        if fresh.get(name) != base.get(name):  # theirs changed it: theirs is kept
            assert merged.get(name) == fresh.get(name)
        if ours.get(name) == base.get(name) == fresh.get(name):
            assert merged.get(name) == base.get(name)


def test_crs_owners_are_the_bindings_references_for_those_crss() -> None:
    binding = desired_binding(
        None,
        namespace=NS,
        cluster="c1",
        entries=entries({"a": 1, "b": 1}),
        owners=[owner_reference(ObjectMeta(name=n, uid=f"uid-{n}")) for n in ("a", "b")],
    )
    binding.metadata.owner_references.append({"kind": "Cluster", "name": "b", "uid": "x"})
    assert [o["uid"] for o in crs_owners(binding, {"b", "z"})] == ["uid-b"]
    assert crs_owners(None, {"b"}) == []


# --- write_binding over a binding another writer changed ------------------------------


def owners_of(versions: Versions) -> list[dict[str, Any]]:
    return [owner_reference(ObjectMeta(name=n, uid=f"uid-{n}")) for n in sorted(versions)]


def binding(versions: Versions) -> ClusterResourceSetBinding:
    return desired_binding(
        None, namespace=NS, cluster="c1", entries=entries(versions), owners=owners_of(versions)
    )


async def stored(world: World, versions: Versions) -> ClusterResourceSetBinding:
    """The binding as the server has it, written (again) with ``versions``."""
    raw = await world.mgmt.get(API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, "c1", NS)
    body = to_api(binding(versions))
    if raw is None:
        raw = await world.mgmt.create(body)
    else:
        body["metadata"]["resourceVersion"] = raw["metadata"]["resourceVersion"]
        raw = await world.mgmt.replace(body)
    return ClusterResourceSetBinding.model_validate(raw)


async def on_server(world: World) -> tuple[Versions, list[str]] | None:
    raw = await world.mgmt.get(API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, "c1", NS)
    if raw is None:
        return None
    model = ClusterResourceSetBinding.model_validate(raw)
    return versions(entries_by_crs(model)), [o["name"] for o in model.metadata.owner_references]


async def test_an_entry_another_writer_added_meanwhile_is_kept() -> None:
    """A pass read rv 10 ({a}) and adds c; another writer recorded b since (rv 11)."""
    world = World({})
    read = await stored(world, {"a": 1})
    await stored(world, {"a": 1, "b": 1})
    ours = {"a": 1, "c": 1}
    written = await write_binding(
        world.ctx.bindings, NS, "c1", read, entries(ours), owners_of(ours)
    )
    assert written is True
    assert await on_server(world) == ({"a": 1, "b": 1, "c": 1}, ["a", "b", "c"])
    assert [v for v, _ in world.mgmt.writes()].count("replace") == 3  # 2 set-up, 1 refused


async def test_a_create_answered_already_exists_merges_with_the_binding_there() -> None:
    """The pass ran with no binding cached (a relist dropped it for a moment)."""
    world = World({})
    await stored(world, {"a": 1, "b": 1})
    written = await write_binding(world.ctx.bindings, NS, "c1", None, entries({"c": 1}), [])
    assert written is True
    # c's owner reference is made by the caller, for the CRSs it knows.
    assert await on_server(world) == ({"a": 1, "b": 1, "c": 1}, ["a", "b"])


async def test_an_entry_both_changed_is_not_overwritten_and_the_pass_is_redone() -> None:
    world = World({})
    read = await stored(world, {"a": 1, "b": 1})
    theirs = await stored(world, {"a": 2, "b": 1})
    ours = {"a": 3, "b": 1}
    written = await write_binding(
        world.ctx.bindings, NS, "c1", read, entries(ours), owners_of(ours)
    )
    assert written is False
    assert await on_server(world) == ({"a": 2, "b": 1}, ["a", "b"])
    # The redo starts from the binding as it is now.
    cached = world.bindings.get(NS, "c1")
    assert cached is not None
    assert cached.meta.resource_version == theirs.metadata.resource_version


async def test_removing_the_last_entry_deletes_only_the_version_read() -> None:
    """Our pass leaves no entry: the binding goes, unless another writer recorded an
    entry since; then that entry stays."""
    world = World({})
    read = await stored(world, {"a": 1})
    await stored(world, {"a": 1, "b": 1})
    assert await write_binding(world.ctx.bindings, NS, "c1", read, {}, []) is True
    assert await on_server(world) == ({"b": 1}, ["b"])

    read = await stored(world, {"b": 1})
    assert await write_binding(world.ctx.bindings, NS, "c1", read, {}, []) is True
    assert await on_server(world) is None


class Racing:
    """A binding store another writer always writes to between our read and write."""

    def __init__(self) -> None:
        self.writes = 0
        self.reads = 0

    async def write(self, body: Any, *, create: bool) -> None:
        self.writes += 1
        raise Conflict("replace ClusterResourceSetBinding/c1: 409 Conflict", status=409)

    async def read_whole(self, namespace: str, name: str) -> Binding:
        self.reads += 1
        return parse_binding_object(to_api(binding({"a": 1, "b": self.reads})))


async def test_a_binding_always_changing_fails_after_the_last_attempt() -> None:
    """The writes stay bounded, and the last Conflict is the reconcile's error."""
    store = Racing()
    with pytest.raises(Conflict):
        await write_binding(
            store,  # type: ignore[arg-type]
            NS,
            "c1",
            binding({"a": 1}),
            entries({"a": 2}),
            owners_of({"a": 2}),
        )
    assert (store.writes, store.reads) == (BINDING_WRITE_ATTEMPTS, BINDING_WRITE_ATTEMPTS - 1)


# --- through a cluster reconcile ------------------------------------------------------

Y = {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "y"}


async def another_writer_records_y(world: World, crs_name: str) -> None:
    """Another replica (the Cluster's new owner) applied object y for ``crs_name`` and
    recorded it; this replica's cache has not seen that write yet."""
    raw = await world.mgmt.get(API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, "c1", NS)
    assert raw is not None
    (entry,) = (e for e in raw["spec"]["bindings"] if e["clusterResourceSetName"] == crs_name)
    entry["resources"][0]["objects"].append({**Y, "hash": "xxh3:00000000000000ff"})
    await world.mgmt.replace(raw)


async def edit_source(world: World, name: str, *objects: dict[str, Any]) -> None:
    source = await world.mgmt.get("v1", "ConfigMap", name, NS)
    assert source is not None
    source["data"] = configmap_source(name, *objects)["data"]
    await world.update(source)


async def recorded_names(world: World, crs_name: str) -> list[str]:
    raw = await world.mgmt.get(API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, "c1", NS)
    assert raw is not None
    (entry,) = (e for e in raw["spec"]["bindings"] if e["clusterResourceSetName"] == crs_name)
    return [o["name"] for o in entry["resources"][0]["objects"]]


async def test_an_object_another_replica_recorded_meanwhile_stays_recorded() -> None:
    """Our pass changes a's entry from a stale binding; b's entry, which only the other
    writer changed, keeps y: what the binding records is what is ever deleted."""
    world = await world_with(crs("a", "src"), crs("b", "src2"))
    await world.add(configmap_source("src2", payload("other")))
    await reconcile(world)
    await another_writer_records_y(world, "b")
    await edit_source(world, "src", payload("addon", "2"))

    result = await reconcile(world)
    assert not result.retry
    assert await recorded_names(world, "b") == ["other", "y"]
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    live = await workload.get("v1", "ConfigMap", "addon", "default")
    assert live is not None and live["data"] == {"v": "2"}
    assert await recorded_names(world, "a") == ["addon"]


async def test_a_pass_changing_an_entry_another_replica_changed_is_redone() -> None:
    world = await world_with(crs("a", "src"))
    await reconcile(world)
    await another_writer_records_y(world, "a")
    await edit_source(world, "src", payload("addon", "2"))
    writes = len(world.mgmt.writes())

    result = await reconcile(world)
    assert result.retry
    # The other writer's binding is left as it is: one refused write, nothing more.
    assert [w for w in world.mgmt.writes()[writes:] if "Binding" in w[1]] == [
        ("replace", "ClusterResourceSetBinding/c1")
    ]
    assert await recorded_names(world, "a") == ["addon", "y"]

    # Redone from the binding as it is now, the pass records over it.
    result = await reconcile(world)
    assert not result.retry
    assert "addon" in await recorded_names(world, "a")
