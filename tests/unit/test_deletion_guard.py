"""Deletes that cannot take a fleet down: a CustomResourceDefinition or a Namespace
leaving the desired set is deleted only when every resource that recorded it lists
its kind in allowDelete; the rest go as before. Kept objects are forgotten from the
inventory, named in the entry until applied again, and in the status (bounded);
pruning keeps them without a request to the cluster; a cluster pass tells a keep
once, as a Warning gathered over the clusters that is no failure, and the next pass
writes nothing."""

from __future__ import annotations

from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from crs_controller.clients.kube import KubeClient
from crs_controller.core.api.models import (
    CRSBinding,
    KeptObject,
    ObjectRef,
    ResourceBinding,
    SourceRef,
)
from crs_controller.core.state.deletion_guard import (
    DELETION_SKIPPED,
    SKIPPED_KEPT,
    allowances,
    carried,
    describe,
    guard,
    protected_kind,
    skipped_status,
    with_skipped,
)
from crs_controller.core.state.prune_decisions import inventory
from crs_controller.engine.memory.notes import Note, gather
from crs_controller.engine.reconcile.workload.pruning import prune

from .builders import NS as HERE
from .builders import configmap_source, crs, payload, reconcile, world_with
from .memory_kube import MemoryKube

MANAGER = "crs-controller"
NS = ObjectRef("v1", "Namespace", "", "addon")
CRD = ObjectRef("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", "ws.x.io")
CRD_BETA = ObjectRef("apiextensions.k8s.io/v1beta1", "CustomResourceDefinition", "", "old.x.io")
CR = ObjectRef("x.io/v1", "Widget", "addon", "w")
CM = ObjectRef("v1", "ConfigMap", "default", "cm")
# Same kind names in another group are not protected.
LOOKALIKE = ObjectRef("x.io/v1", "Namespace", "", "fake")
LOOKALIKE_CRD = ObjectRef("x.io/v1", "CustomResourceDefinition", "", "fake")


def entry(name: str = "a", **resources: list[ObjectRef]) -> CRSBinding:
    return CRSBinding(
        cluster_resource_set_name=name,
        resources=[
            ResourceBinding(kind="ConfigMap", name=r, hash="xxh3:0", applied=True, objects=objs)
            for r, objs in resources.items()
        ],
    )


def refs(**allow: list[str]) -> list[SourceRef]:
    return [
        SourceRef.model_validate({"kind": "ConfigMap", "name": n, "allowDelete": kinds or None})
        for n, kinds in allow.items()
    ]


@pytest.mark.parametrize(
    ("ref", "kind"),
    [
        (NS, "Namespace"),
        (CRD, "CustomResourceDefinition"),
        (CRD_BETA, "CustomResourceDefinition"),
        (CR, None),
        (CM, None),
        (LOOKALIKE, None),
        (LOOKALIKE_CRD, None),
    ],
)
def test_protected_kinds_are_known_by_group_and_kind(ref: ObjectRef, kind: str | None) -> None:
    assert protected_kind(ref) == kind


@pytest.mark.parametrize(
    ("allowed", "deleted", "kept"),
    [
        ({"res": []}, ["cm", "w"], ["ws.x.io", "addon"]),
        ({"res": ["CustomResourceDefinition"]}, ["cm", "w", "ws.x.io"], ["addon"]),
        ({"res": ["Namespace"]}, ["cm", "w", "addon"], ["ws.x.io"]),
        (
            {"res": ["CustomResourceDefinition", "Namespace"]},
            ["cm", "w", "ws.x.io", "addon"],
            [],
        ),
        # The resource left spec.resources: its allowDelete went with it.
        ({"other": ["CustomResourceDefinition", "Namespace"]}, ["cm", "w"], ["ws.x.io", "addon"]),
    ],
)
def test_the_rule_by_allow_delete(
    allowed: dict[str, list[str]], deleted: list[str], kept: list[str]
) -> None:
    old = entry(res=[CM, CR, CRD, NS])
    guarded = guard(old, [CM, CR, CRD, NS], allowances(refs(**allowed)))
    assert [r.name for r in guarded.delete] == deleted
    assert [k.ref.name for k in guarded.kept] == kept


def test_why_names_the_kind_and_the_resource() -> None:
    old = entry(res=[CRD], gone=[NS])
    guarded = guard(old, [CRD, NS], allowances(refs(res=[])))
    whys = [k.why for k in guarded.kept]
    assert whys == [
        "CustomResourceDefinition is not in allowDelete of ConfigMap/res",
        "Namespace: its resource ConfigMap/gone is no longer in spec.resources",
    ]


def test_an_object_recorded_by_two_resources_needs_both_to_allow() -> None:
    old = entry(first=[CRD], second=[CRD])
    one = allowances(refs(first=["CustomResourceDefinition"], second=[]))
    both = allowances(refs(first=["CustomResourceDefinition"], second=["CustomResourceDefinition"]))
    assert guard(old, [CRD], one).delete == []
    assert guard(old, [CRD], both).delete == [CRD]


OBJECTS = [NS, CRD, CRD_BETA, CR, CM, LOOKALIKE, LOOKALIKE_CRD]
KINDS = st.lists(st.sampled_from(["CustomResourceDefinition", "Namespace"]), unique=True)


@given(st.lists(st.sampled_from(OBJECTS), unique=True), KINDS)
def test_the_split_keeps_order_and_loses_nothing(stale: list[ObjectRef], kinds: list[str]) -> None:
    guarded = guard(entry(res=stale), stale, allowances(refs(res=kinds)))
    assert sorted([*guarded.delete, *(k.ref for k in guarded.kept)]) == sorted(stale)
    assert guarded.delete == [r for r in stale if r in guarded.delete]
    for ref in guarded.delete:
        assert protected_kind(ref) in (None, *kinds)
    for kept in guarded.kept:
        assert protected_kind(kept.ref) not in (None, *kinds)


def test_allow_delete_is_a_bounded_set_of_the_two_kinds() -> None:
    for bad in (["Deployment"], ["Namespace", "Namespace"], ["namespace"]):
        with pytest.raises(ValidationError):
            refs(res=bad)
    assert refs(res=["Namespace"])[0].allow_delete == ["Namespace"]
    assert "allowDelete" not in refs(res=[])[0].model_dump(by_alias=True, exclude_none=True)


def kept(ref: ObjectRef) -> KeptObject:
    return KeptObject(api_version=ref.api_version, kind=ref.kind, name=ref.name)


def test_kept_objects_stay_named_until_applied_again() -> None:
    named = with_skipped(entry(res=[CM]), [CRD, NS])
    assert named.deletions_skipped == [kept(CRD), kept(NS)]
    # A later pass builds a fresh entry: the names carry over.
    fresh = entry(res=[CM])
    assert carried(fresh, named).deletions_skipped == [kept(CRD), kept(NS)]
    # The CRD put back (applied again) is no longer named.
    again = carried(entry(res=[CM, CRD]), named)
    assert again.deletions_skipped == [kept(NS)]
    assert carried(entry(res=[CRD, NS]), named).deletions_skipped is None
    assert carried(fresh, None) == fresh


def test_the_names_are_bounded_newest_first_and_once_each() -> None:
    many = [ObjectRef("v1", "Namespace", "", f"ns{i}") for i in range(SKIPPED_KEPT + 5)]
    named = with_skipped(with_skipped(entry(), many[:3]), [many[0], *many[3:]])
    shown = [k.name for k in named.deletions_skipped or ()]
    assert len(shown) == SKIPPED_KEPT == len(set(shown))
    assert shown[0] == "ns0"


def test_the_status_names_each_clusters_kept_objects_made_safe() -> None:
    hostile = CRSBinding(
        cluster_resource_set_name="a",
        deletions_skipped=[KeptObject(api_version="v1", kind="Namespace", name="x\x1b[2J")],
    )
    found = skipped_status([("c2", with_skipped(entry(), [CRD])), ("c1", hostile), ("c3", None)])
    assert [(s.cluster, s.kind) for s in found] == [
        ("c1", "Namespace"),
        ("c2", "CustomResourceDefinition"),
    ]
    assert "\x1b" not in found[0].name
    crowded = [(f"c{i}", with_skipped(entry(), [CRD, NS])) for i in range(SKIPPED_KEPT)]
    assert len(skipped_status(crowded)) == SKIPPED_KEPT


def test_an_event_names_at_most_five_and_counts_the_rest() -> None:
    many = [ObjectRef("v1", "Namespace", "", f"ns{i}") for i in range(8)]
    text = describe(guard(entry(res=many), many, {}).kept)
    assert "v1 Namespace ns4 (" in text and "ns5" not in text
    assert text.endswith("and 3 more")


def configmap(ref: ObjectRef) -> dict[str, Any]:
    meta = {"name": ref.name, **({"namespace": ref.namespace} if ref.namespace else {})}
    return {"apiVersion": ref.api_version, "kind": ref.kind, "metadata": meta}


async def test_prune_keeps_protected_objects_without_asking_the_cluster() -> None:
    kube = MemoryKube("w1")
    for ref in (CM, CRD, NS):
        await kube.apply(configmap(ref), field_manager=MANAGER)
    old = {"a": entry(res=[CM, CRD, NS])}
    new = {"a": entry(res=[])}
    allowed = {"a": allowances(refs(res=["Namespace"]))}
    client, before = cast(KubeClient, kube), len(kube.requests)
    pruned = await prune(
        client, old, new, {"a": "Delete"}, set(), allowed=allowed, field_manager=MANAGER
    )
    assert ("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", "ws.x.io") in kube.objects
    assert ("v1", "Namespace", "", "addon") not in kube.objects
    assert ("v1", "ConfigMap", "default", "cm") not in kube.objects
    # The CRD was never read nor deleted: kept on the rule alone.
    assert not [what for _, what in kube.requests[before:] if "ws.x.io" in what]
    assert [k.ref for k in pruned.kept["a"]] == [CRD]
    assert CRD not in inventory(pruned.entries.values())
    assert pruned.entries["a"].deletions_skipped == [kept(CRD)]


async def test_a_crs_without_allowances_keeps_every_protected_object() -> None:
    kube = MemoryKube("w1")
    for ref in (CRD, NS):
        await kube.apply(configmap(ref), field_manager=MANAGER)
    old = {"a": entry(res=[CRD, NS])}
    client = cast(KubeClient, kube)
    # The CRS no longer selects the cluster: no new entry, the Event tells.
    pruned = await prune(client, old, {}, {"a": "Delete"}, set(), field_manager=MANAGER)
    assert [k.ref for k in pruned.kept["a"]] == [CRD, NS]
    assert pruned.entries == {} and pruned.errors == {}
    assert len(kube.objects) == 2


def test_kept_objects_are_told_once_for_every_cluster_and_are_no_failure() -> None:
    kept_crd = describe(guard(entry(res=[CRD]), [CRD], {}).kept)
    notes = [
        Note("Normal", "Deleted", f"c{i}", resources=("v1 ConfigMap default/cm",)) for i in range(4)
    ] + [Note("Warning", DELETION_SKIPPED, f"c{i}", message=kept_crd) for i in range(4)]
    deleted, skipped = gather(notes)
    assert deleted.message == (
        "deleted v1 ConfigMap default/cm from 4 clusters (c0, c1, c2, c3)"
    ), deleted.message
    assert (skipped.type, skipped.reason) == ("Warning", DELETION_SKIPPED)
    assert skipped.message.startswith("DeletionSkipped on 4 clusters: c0: kept (not deleted): ")
    assert "ws.x.io" in skipped.message and skipped.message.endswith("; and 1 more")


async def test_a_cluster_pass_keeps_a_removed_namespace_tells_it_once_then_writes_nothing() -> None:
    world = await world_with(
        crs("a", "src", deletionPolicy="Delete"),
        mode_source=configmap_source("src", configmap(NS), payload("addon")),
    )
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    assert ("apply", "Namespace/addon") in workload.writes()
    source = await world.mgmt.get("v1", "ConfigMap", "src", HERE)
    assert source is not None
    source["data"] = configmap_source("src", payload("other"))["data"]
    await world.update(source)
    world.ctx.announcements.take(HERE, "a")  # what the first pass told
    workload.requests.clear()

    await reconcile(world)
    assert ("delete", "ConfigMap/addon") in workload.writes()
    assert not [w for w in workload.writes() if "Namespace" in w[1]]
    entry = world.bindings.get(HERE, "c1").entries()["a"]  # type: ignore[union-attr]
    assert entry.deletions_skipped == [kept(NS)]
    assert NS not in inventory([entry])
    told = {(t.type, t.reason) for t in world.ctx.announcements.take(HERE, "a")}
    assert ("Warning", DELETION_SKIPPED) in told and ("Normal", "Deleted") in told

    # Nothing changed since: nothing written, nothing told, still named.
    workload.requests.clear()
    world.mgmt.requests.clear()
    await reconcile(world)
    assert workload.writes() == []
    assert [w for w in world.mgmt.writes() if "Binding" in w[1]] == []
    assert world.ctx.announcements.take(HERE, "a") == []
    entry = world.bindings.get(HERE, "c1").entries()["a"]  # type: ignore[union-attr]
    assert entry.deletions_skipped == [kept(NS)]
