"""ClusterResourceSetBinding edits: what ``record_apply`` writes into a resource entry
(inventory on success, failure and ApplyOnce skips; hash, time, generation sum), the
binding ``desired_binding`` builds (entry order, owner references, metadata), when
``binding_changed`` asks for a write (never for a steady state read back from the API),
and looking entries up with ``entries_by_crs``/``recorded``."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.core.api.models import (
    API_VERSION,
    SHARD_BUCKET_LABEL,
    ClusterResourceSetBinding,
    CRSBinding,
    ObjectMeta,
    ObjectRef,
    ResourceBinding,
    ResourceRef,
    to_api,
)
from crs_controller.core.membership.shard import bucket_of
from crs_controller.core.state.bindings import (
    binding_changed,
    desired_binding,
    entries_by_crs,
    owner_reference,
    parse_binding,
    record_apply,
    recorded,
    select_objects,
    with_outcome,
)
from crs_controller.core.state.status import Outcome, outcome_of

NOW = datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC)
EARLIER = NOW - timedelta(hours=1)
HASH = "xxh3:00000000000000aa"
NEW_HASH = "xxh3:00000000000000bb"
REF = ResourceRef(kind="ConfigMap", name="calico-addon")

NS = ObjectRef("v1", "Namespace", "", "calico-system")
DS = ObjectRef("apps/v1", "DaemonSet", "kube-system", "calico-node")
SA = ObjectRef("v1", "ServiceAccount", "kube-system", "calico-node")
CM = ObjectRef("v1", "ConfigMap", "kube-system", "calico-config")


def gen(ref: ObjectRef, generation: int | None) -> ObjectRef:
    return ref.model_copy(update={"generation": generation})


def inv(*refs: ObjectRef) -> list[ObjectRef]:
    """The inventory the binding should show for ``refs``, in that order."""
    return list(refs)


def previous(*refs: ObjectRef, applied: bool = True) -> ResourceBinding:
    return ResourceBinding(
        kind="ConfigMap",
        name="calico-addon",
        hash=HASH,
        applied=applied,
        last_applied_time=EARLIER,
        generation=3,
        objects=inv(*refs),
    )


def crs(name: str, uid: str | None = None) -> ObjectMeta:
    return ObjectMeta(name=name, namespace="default", uid=uid or f"uid-{name}")


def entry(name: str, *resources: ResourceBinding) -> CRSBinding:
    return CRSBinding(cluster_resource_set_name=name, resources=list(resources))


def round_trip(binding: ClusterResourceSetBinding) -> ClusterResourceSetBinding:
    """What the reconciler reads back after writing ``binding``: JSON, as the API serves it."""
    parsed = parse_binding(json.loads(json.dumps(to_api(binding))))
    assert parsed is not None
    return parsed


# --- record_apply ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prev", "ok", "applied", "skipped", "objects"),
    [
        # Success: the inventory is exactly what was applied, old objects are gone.
        (None, True, [NS, DS], [], [NS, DS]),
        (previous(NS, DS, SA), True, [NS, DS], [], [NS, DS]),
        (previous(NS), True, [], [], []),
        # Failure: nothing we created is forgotten, and what went out is added.
        (None, False, [NS], [], [NS]),
        (previous(NS, DS), False, [SA], [], [NS, DS, SA]),
        (previous(NS, DS), False, [DS, SA], [], [NS, DS, SA]),
        (previous(NS, DS), False, [], [], [NS, DS]),
        # ApplyOnce: an existing object stays ours only if an earlier pass created it.
        (None, True, [DS], [NS], [DS]),
        (previous(NS), True, [DS], [NS], [DS, NS]),
        (previous(NS), True, [DS], [NS, CM], [DS, NS]),
        (previous(DS), True, [], [NS, CM], []),
        (previous(NS, DS), False, [SA], [NS, CM], [NS, DS, SA]),
    ],
)
def test_record_apply_inventory(
    prev: ResourceBinding | None,
    ok: bool,
    applied: list[ObjectRef],
    skipped: list[ObjectRef],
    objects: list[ObjectRef],
) -> None:
    result = record_apply(
        REF,
        prev,
        digest=NEW_HASH,
        ok=ok,
        objects=[gen(o, 1) for o in applied],
        now=NOW,
        skipped=skipped,
    )
    assert result.objects == inv(*objects)
    assert result.applied is ok


def test_record_apply_records_hash_time_and_identity() -> None:
    result = record_apply(REF, previous(NS), digest=NEW_HASH, ok=True, objects=[NS, DS], now=NOW)
    assert (result.kind, result.name) == ("ConfigMap", "calico-addon")
    assert result.hash == NEW_HASH
    assert result.last_applied_time == NOW
    api = to_api(result)
    assert api["lastAppliedTime"] == "2026-11-22T10:00:00Z"
    assert api["hash"] == NEW_HASH
    assert api["applied"] is True
    # A cluster-scoped object has no namespace in the binding.
    assert api["objects"] == [
        {"apiVersion": "v1", "kind": "Namespace", "name": "calico-system"},
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "namespace": "kube-system",
            "name": "calico-node",
        },
    ]


def test_record_apply_failure_still_records_the_new_hash_as_not_applied() -> None:
    # The hash is what was attempted; applied: false makes the next pass retry it.
    result = record_apply(REF, previous(NS), digest=NEW_HASH, ok=False, objects=[], now=NOW)
    assert result.hash == NEW_HASH
    assert result.applied is False
    assert to_api(result)["applied"] is False


@pytest.mark.parametrize(
    ("generations", "total"),
    [([], 0), ([1], 1), ([1, 2, 3], 6), ([2, None, 5], 7), ([None, None], 0)],
)
def test_record_apply_generation_is_the_sum_with_none_as_zero(
    generations: list[int | None], total: int
) -> None:
    applied = [
        gen(ObjectRef("v1", "ConfigMap", "default", f"cm-{i}"), g)
        for i, g in enumerate(generations)
    ]
    result = record_apply(REF, None, digest=HASH, ok=True, objects=applied, now=NOW)
    assert result.generation == total


def test_record_apply_does_not_change_the_previous_entry() -> None:
    prev = previous(NS, DS)
    before = to_api(prev)
    record_apply(REF, prev, digest=NEW_HASH, ok=False, objects=[gen(SA, 1)], now=NOW)
    record_apply(REF, prev, digest=NEW_HASH, ok=True, objects=[gen(SA, 1)], now=NOW)
    assert to_api(prev) == before


def test_record_apply_skips_match_a_previous_inventory_read_from_the_api() -> None:
    # The previous entry usually comes from the parsed binding, not from record_apply.
    raw = {
        "kind": "ConfigMap",
        "name": "calico-addon",
        "hash": HASH,
        "applied": True,
        "objects": [{"apiVersion": "v1", "kind": "Namespace", "name": "calico-system"}],
    }
    prev = ResourceBinding.model_validate(raw)
    result = record_apply(REF, prev, digest=HASH, ok=True, objects=[], now=NOW, skipped=[NS])
    assert result.objects == inv(NS)


# --- select_objects: only what changed is sent ---------------------------------------


def manifest(*refs: ObjectRef) -> list[dict[str, Any]]:
    """Parsed objects for ``refs`` (as a source would give them)."""
    out = []
    for r in refs:
        meta = {"name": r.name, **({"namespace": r.namespace} if r.namespace else {})}
        out.append({"apiVersion": r.api_version, "kind": r.kind, "metadata": meta})
    return out


def hashed(ref: ObjectRef, digest: str) -> ObjectRef:
    return ref.model_copy(update={"hash": digest})


@pytest.mark.parametrize(
    ("recorded", "hashes", "scope", "send"),
    [
        # Nothing recorded: everything goes out, whatever the scope.
        (None, ["a", "b", "c"], "Changed", [0, 1, 2]),
        # One object changed: only it is sent.
        ([hashed(NS, "a"), hashed(DS, "b"), hashed(SA, "c")], ["a", "B", "c"], "Changed", [1]),
        # A new object joins: it is sent, the others stay.
        ([hashed(NS, "a"), hashed(DS, "b")], ["a", "b", "c"], "Changed", [2]),
        # No hash recorded (an older binding, or a failed object): sent.
        ([NS, hashed(DS, "b"), hashed(SA, "c")], ["a", "b", "c"], "Changed", [0]),
        # Nothing changed (only the layout of the source): nothing is sent.
        ([hashed(NS, "a"), hashed(DS, "b"), hashed(SA, "c")], ["a", "b", "c"], "Changed", []),
        # A reapply (interval, drift) sends everything.
        ([hashed(NS, "a"), hashed(DS, "b"), hashed(SA, "c")], ["a", "b", "c"], "All", [0, 1, 2]),
    ],
    ids=["first", "one-changed", "one-added", "unrecorded", "none-changed", "reapply"],
)
def test_select_objects_sends_only_what_changed(
    recorded: list[ObjectRef] | None, hashes: list[str], scope: str, send: list[int]
) -> None:
    prev = None if recorded is None else previous(*recorded)
    selection = select_objects(manifest(NS, DS, SA), hashes, prev, scope)  # type: ignore[arg-type]
    assert selection.send == send
    assert sorted([*selection.send, *selection.kept]) == [0, 1, 2]
    for position, entry in selection.kept.items():
        assert entry == [NS, DS, SA][position] and entry.hash == hashes[position]


def test_an_object_written_without_namespace_matches_its_record_in_default() -> None:
    bare = ObjectRef("v1", "ConfigMap", "", "settings")
    prev = previous(hashed(ObjectRef("v1", "ConfigMap", "default", "settings"), "a"))
    assert select_objects(manifest(bare), ["a"], prev, "Changed").send == []
    assert select_objects(manifest(bare), ["b"], prev, "Changed").send == [0]


def test_an_object_that_left_the_source_is_left_to_the_deletion_policy() -> None:
    # SA left the source: not sent, not kept; the new inventory no longer lists it,
    # which is what the Delete policy prunes by (and Orphan leaves alone).
    prev = previous(hashed(NS, "a"), hashed(SA, "c"))
    selection = select_objects(manifest(NS), ["a"], prev, "Changed")
    assert selection.send == [] and list(selection.kept.values()) == [NS]
    result = record_apply(
        REF, prev, digest=NEW_HASH, ok=True, objects=list(selection.kept.values()), now=NOW
    )
    assert result.objects == [NS]


def test_a_failed_object_keeps_its_old_record_so_the_retry_sends_it_again() -> None:
    prev = previous(hashed(NS, "a"), hashed(DS, "b"))
    # DS changed to "B" and failed; NS changed to "A" and was applied.
    result = record_apply(REF, prev, digest=NEW_HASH, ok=False, objects=[hashed(NS, "A")], now=NOW)
    assert [(o.name, o.hash) for o in result.objects] == [
        ("calico-system", "A"),
        ("calico-node", "b"),
    ]
    retry = select_objects(manifest(NS, DS), ["A", "B"], result, "Changed")
    assert retry.send == [1]


def test_records_travel_with_the_inventory_entry_and_do_not_change_identity() -> None:
    recorded = ObjectRef(
        "apps/v1", "DaemonSet", "kube-system", "calico-node", hash="h", generation=3, fields="f"
    )
    assert recorded == DS and hash(recorded) == hash(DS) and recorded in {DS}
    api = recorded.to_api()
    assert api == {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "namespace": "kube-system",
        "name": "calico-node",
        "hash": "h",
        "generation": 3,
        "fields": "f",
    }
    assert ObjectRef.model_validate(api).generation == 3
    assert recorded.identity().hash is None


# --- entries_by_crs / recorded ----------------------------------------------------------


def sample_binding() -> ClusterResourceSetBinding:
    return desired_binding(
        None,
        namespace="default",
        cluster="workload-1",
        entries={
            "calico": entry("calico", previous(NS, DS)),
            "csi": entry(
                "csi",
                ResourceBinding(kind="Secret", name="calico-addon", hash=NEW_HASH),
                ResourceBinding(kind="ConfigMap", name="csi-driver", hash=HASH),
            ),
        },
        owners=[owner_reference(crs("calico")), owner_reference(crs("csi"))],
    )


def test_entries_by_crs() -> None:
    assert entries_by_crs(None) == {}
    entries = entries_by_crs(round_trip(sample_binding()))
    assert sorted(entries) == ["calico", "csi"]
    assert entries["csi"].cluster_resource_set_name == "csi"


@pytest.mark.parametrize(
    ("crs_name", "ref", "found"),
    [
        ("calico", ResourceRef(kind="ConfigMap", name="calico-addon"), ("ConfigMap", HASH)),
        # Same name, other kind: a different resource.
        ("calico", ResourceRef(kind="Secret", name="calico-addon"), None),
        ("csi", ResourceRef(kind="Secret", name="calico-addon"), ("Secret", NEW_HASH)),
        ("csi", ResourceRef(kind="ConfigMap", name="csi-driver"), ("ConfigMap", HASH)),
        ("csi", ResourceRef(kind="ConfigMap", name="missing"), None),
    ],
)
def test_recorded(crs_name: str, ref: ResourceRef, found: tuple[str, str] | None) -> None:
    entries = entries_by_crs(round_trip(sample_binding()))
    resource = recorded(entries[crs_name], ref)
    if found is None:
        assert resource is None
    else:
        assert resource is not None
        assert (resource.kind, resource.hash) == found
        assert resource.name == ref.name


def test_recorded_without_an_entry() -> None:
    assert recorded(None, REF) is None


# --- desired_binding ---------------------------------------------------------------------


def test_new_binding_is_named_after_the_cluster() -> None:
    binding = desired_binding(None, namespace="team-a", cluster="workload-1", entries={}, owners=[])
    api = to_api(binding)
    assert api["apiVersion"] == "addons.crs.dev/v1alpha1"
    assert api["kind"] == "ClusterResourceSetBinding"
    assert api["metadata"] == {
        "name": "workload-1",
        "namespace": "team-a",
        "labels": {SHARD_BUCKET_LABEL: str(bucket_of("team-a", "workload-1"))},
    }
    assert api["spec"] == {"clusterName": "workload-1", "bindings": []}


def test_entries_and_owners_are_sorted_by_crs_name() -> None:
    names = ["zeta", "alpha", "mid"]
    binding = desired_binding(
        None,
        namespace="default",
        cluster="workload-1",
        entries={n: entry(n, previous(NS)) for n in names},
        owners=[owner_reference(crs(n)) for n in names],
    )
    api = to_api(binding)
    assert [b["clusterResourceSetName"] for b in api["spec"]["bindings"]] == [
        "alpha",
        "mid",
        "zeta",
    ]
    assert api["metadata"]["ownerReferences"] == [
        {"apiVersion": API_VERSION, "kind": "ClusterResourceSet", "name": n, "uid": f"uid-{n}"}
        for n in ["alpha", "mid", "zeta"]
    ]


FOREIGN = {"apiVersion": "v1", "kind": "ConfigMap", "name": "keeper", "uid": "uid-keeper"}


def test_existing_binding_keeps_its_metadata_and_foreign_owners() -> None:
    current = round_trip(sample_binding())
    current.metadata.owner_references.insert(0, FOREIGN)
    current.metadata.resource_version = "42"
    current.metadata.uid = "binding-uid"
    current.metadata.labels = {"team": "a"}
    # calico leaves the cluster, cilium arrives.
    desired = desired_binding(
        current,
        namespace="default",
        cluster="workload-1",
        entries={"cilium": entry("cilium", previous(NS)), "csi": entries_by_crs(current)["csi"]},
        owners=[owner_reference(crs("cilium")), owner_reference(crs("csi"))],
    )
    meta = to_api(desired)["metadata"]
    assert meta["name"] == "workload-1"
    assert meta["namespace"] == "default"
    # resourceVersion is kept: the PUT must carry what was read.
    assert meta["resourceVersion"] == "42"
    assert meta["uid"] == "binding-uid"
    assert meta["labels"] == {"team": "a", SHARD_BUCKET_LABEL: "124"}  # "124" is its bucket
    assert [o["name"] for o in meta["ownerReferences"]] == ["keeper", "cilium", "csi"]
    assert meta["ownerReferences"][0] == FOREIGN
    assert [b.cluster_resource_set_name for b in desired.spec.bindings] == ["cilium", "csi"]


def test_desired_binding_does_not_change_the_binding_it_was_built_from() -> None:
    current = round_trip(sample_binding())
    before = to_api(current)
    desired_binding(
        current,
        namespace="default",
        cluster="workload-1",
        entries={},
        owners=[],
    )
    assert to_api(current) == before


# --- binding_changed -----------------------------------------------------------------------


def rebuild(current: ClusterResourceSetBinding, **changes: Any) -> ClusterResourceSetBinding:
    """Build the desired binding again from ``current``'s own entries and owners."""
    entries = changes.pop("entries", entries_by_crs(current))
    owners = changes.pop(
        "owners",
        [
            owner_reference(crs(o["name"], o["uid"]))
            for o in current.metadata.owner_references
            if o["kind"] == "ClusterResourceSet"
        ],
    )
    return desired_binding(
        current, namespace="default", cluster="workload-1", entries=entries, owners=owners
    )


def test_no_binding_yet_is_a_change() -> None:
    assert binding_changed(None, sample_binding()) is True


def test_steady_state_read_back_from_the_api_is_not_a_change() -> None:
    current = round_trip(sample_binding())
    assert binding_changed(current, rebuild(current)) is False


def test_steady_state_with_the_original_entries_is_not_a_change() -> None:
    # The reconciler rebuilds from fresh record_apply results, not from parsed ones:
    # sub-second times and naive UTC times must not look different once written.
    naive = datetime(2026, 11, 22, 10, 0, 0, 123456)
    fresh = record_apply(REF, None, digest=HASH, ok=True, objects=[gen(NS, 1)], now=naive)
    entries = {"calico": entry("calico", fresh)}
    owners = [owner_reference(crs("calico"))]
    first = desired_binding(
        None, namespace="default", cluster="workload-1", entries=entries, owners=owners
    )
    current = round_trip(first)
    again = desired_binding(
        current, namespace="default", cluster="workload-1", entries=entries, owners=owners
    )
    assert binding_changed(current, again) is False


def test_other_time_zones_are_the_same_instant() -> None:
    plus_two = NOW.astimezone(timezone(timedelta(hours=2)))
    a = record_apply(REF, None, digest=HASH, ok=True, objects=[], now=NOW)
    b = record_apply(REF, None, digest=HASH, ok=True, objects=[], now=plus_two)
    current = round_trip(
        desired_binding(
            None,
            namespace="default",
            cluster="workload-1",
            entries={"calico": entry("calico", a)},
            owners=[owner_reference(crs("calico"))],
        )
    )
    assert (
        binding_changed(current, rebuild(current, entries={"calico": entry("calico", b)})) is False
    )


def _with_resource(current: ClusterResourceSetBinding, **update: Any) -> dict[str, CRSBinding]:
    entries = entries_by_crs(current)
    resource = entries["calico"].resources[0].model_copy(update=update)
    return {**entries, "calico": entry("calico", resource)}


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda c: {"entries": _with_resource(c, hash=NEW_HASH)}, id="hash"),
        pytest.param(lambda c: {"entries": _with_resource(c, applied=False)}, id="applied"),
        pytest.param(lambda c: {"entries": _with_resource(c, generation=99)}, id="generation"),
        pytest.param(
            lambda c: {"entries": _with_resource(c, last_applied_time=NOW + timedelta(seconds=1))},
            id="lastAppliedTime",
        ),
        pytest.param(lambda c: {"entries": _with_resource(c, objects=inv(NS))}, id="inventory"),
        pytest.param(
            lambda c: {"entries": {**entries_by_crs(c), "new": entry("new")}}, id="entry added"
        ),
        pytest.param(lambda c: {"entries": {"csi": entries_by_crs(c)["csi"]}}, id="entry removed"),
        pytest.param(lambda c: {"owners": [owner_reference(crs("calico"))]}, id="owner removed"),
        pytest.param(
            lambda c: {
                "owners": [owner_reference(crs("calico")), owner_reference(crs("csi", "new-uid"))]
            },
            id="owner uid",
        ),
        pytest.param(
            lambda c: {"owners": [owner_reference(crs(n)) for n in ("calico", "csi", "extra")]},
            id="owner added",
        ),
    ],
)
def test_a_difference_is_a_change(change: Any) -> None:
    current = round_trip(sample_binding())
    assert binding_changed(current, rebuild(current, **change(current))) is True


def test_a_foreign_owner_on_the_current_binding_settles_after_one_write() -> None:
    current = round_trip(sample_binding())
    # Someone else added an owner after ours: it is kept (first, as desired_binding
    # orders them), which may cost one write, and then nothing more.
    current.metadata.owner_references.append(FOREIGN)
    desired = rebuild(current)
    assert FOREIGN in desired.metadata.owner_references
    written = round_trip(desired)
    assert binding_changed(written, rebuild(written)) is False
    assert written.metadata.owner_references[0] == FOREIGN


# --- property: the steady state costs no write ---------------------------------------------

names = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789-"), min_size=1, max_size=12)
objects = st.builds(
    ObjectRef,
    api_version=st.sampled_from(["v1", "apps/v1", "apiextensions.k8s.io/v1", "x.io/v1beta1"]),
    kind=st.sampled_from(["Namespace", "ConfigMap", "Deployment", "CustomResourceDefinition"]),
    namespace=st.none() | names,
    name=names,
)
zones: st.SearchStrategy[tzinfo | None] = st.none() | st.just(UTC) | st.timezones()
# Naive (taken as UTC) and zoned times, with microseconds the API form drops.
times = st.none() | st.datetimes(
    min_value=datetime(2000, 1, 1),
    max_value=datetime(2100, 1, 1),
    timezones=zones,  # type: ignore[arg-type]  # the stub narrows to the default, none()
)
resources = st.builds(
    ResourceBinding,
    kind=st.sampled_from(["ConfigMap", "Secret"]),
    name=names,
    hash=st.text(max_size=30),
    applied=st.booleans(),
    last_applied_time=times,
    generation=st.none() | st.integers(min_value=0, max_value=2**53),
    objects=st.lists(objects, max_size=5, unique=True),
)
entry_sets = st.dictionaries(
    names,
    st.lists(resources, max_size=4),
    max_size=5,
).map(lambda d: {n: CRSBinding(cluster_resource_set_name=n, resources=r) for n, r in d.items()})


@given(entry_sets, st.lists(st.sampled_from([None, FOREIGN]), max_size=1))
def test_steady_state_costs_no_write(
    entries: dict[str, CRSBinding], foreign: list[dict[str, Any] | None]
) -> None:
    owners = [owner_reference(crs(name)) for name in reversed(list(entries))]
    first = desired_binding(
        None, namespace="default", cluster="workload-1", entries=entries, owners=owners
    )
    if foreign and foreign[0] is not None:
        first.metadata.owner_references.insert(0, foreign[0])
    current = round_trip(first)
    again = desired_binding(
        current, namespace="default", cluster="workload-1", entries=entries, owners=owners
    )
    assert binding_changed(current, again) is False


# --- with_outcome ---------------------------------------------------------------------


APPLIED = Outcome("Applied", "Applied", "all resources applied", 3)


def test_an_outcome_keeps_its_time_until_it_changes() -> None:
    first = with_outcome(entry("calico"), None, APPLIED, EARLIER)
    assert first.outcome is not None and first.outcome.time == EARLIER
    assert first.outcome.observed_generation == 3
    again = with_outcome(entry("calico"), first, APPLIED, NOW)
    assert again.outcome == first.outcome  # a steady state writes nothing
    failed = with_outcome(
        entry("calico"), again, Outcome("Failed", "ApplyFailed", "x" * 5000, 3), NOW
    )
    assert failed.outcome is not None and failed.outcome.time == NOW
    assert len(failed.outcome.message) == 1000
    assert to_api(failed)["outcome"]["time"] == "2026-11-22T10:00:00Z"


def test_a_new_revision_applied_moves_the_time_though_it_reads_the_same() -> None:
    old = entry("cni", ResourceBinding(kind="ConfigMap", name="cni", hash="xxh3:1", applied=True))
    new = entry("cni", ResourceBinding(kind="ConfigMap", name="cni", hash="xxh3:2", applied=True))
    first = with_outcome(old, None, APPLIED, EARLIER)
    later = with_outcome(new, first, APPLIED, NOW)
    assert later.outcome is not None and later.outcome.time == NOW


def test_a_new_generation_is_recorded_without_moving_the_time() -> None:
    first = with_outcome(entry("calico"), None, APPLIED, EARLIER)
    later = with_outcome(
        entry("calico"), first, Outcome("Applied", "Applied", "all resources applied", 4), NOW
    )
    assert later.outcome is not None
    assert (later.outcome.observed_generation, later.outcome.time) == (4, EARLIER)


def test_an_outcome_waiting_for_ready_keeps_its_time_and_names_what_blocks_now() -> None:
    waiting = Outcome("Applied", "Applied", "waiting for x: 0/3 available", 1, ready=False)
    first = with_outcome(entry("cni"), None, waiting, EARLIER)
    moved = Outcome("Applied", "Applied", "waiting for y: 2/3 available", 1, ready=False)
    later = with_outcome(entry("cni"), first, moved, NOW)
    assert later.outcome is not None and first.outcome is not None
    assert (later.outcome.message, later.outcome.time) == (moved.message, EARLIER)
    assert (first.outcome.reason, first.outcome.ready) == ("Applied", False)
    done = with_outcome(entry("cni"), later, APPLIED, NOW)
    assert done.outcome is not None and (done.outcome.reason, done.outcome.time) == ("Applied", NOW)


def test_a_failure_records_the_revision_it_was_taking_and_reads_it_back() -> None:
    taking = Outcome("Failed", "UnresolvedVariable", "m", 1, revision="xxh3:2")
    failed = with_outcome(entry("cni"), None, taking, NOW)
    assert failed.outcome is not None and failed.outcome.revision == "xxh3:2"
    assert to_api(failed)["outcome"]["revision"] == "xxh3:2"
    back = outcome_of(failed)
    assert back is not None and (back.state, back.revision) == ("Failed", "xxh3:2")
    alone = with_outcome(entry("cni"), failed, Outcome("Failed", "ClusterUnreachable", "m", 1), NOW)
    assert alone.outcome is not None and alone.outcome.revision is None
    # Only a failure says what it was taking: an applied outcome's revision stays out.
    applied = with_outcome(
        entry("cni"), None, Outcome("Applied", "Applied", "", 1, revision="x"), NOW
    )
    assert applied.outcome is not None and applied.outcome.revision is None


def test_a_rollout_hold_and_a_readiness_wait_are_told_apart() -> None:
    held = with_outcome(entry("cni"), None, Outcome("Progressing", "Progressing", "m", 1), EARLIER)
    assert held.outcome is not None and held.outcome.ready is None
    waiting = Outcome("Applied", "Applied", "m", 1, ready=False)
    after = with_outcome(entry("cni"), held, waiting, NOW)
    assert after.outcome is not None and (after.outcome.ready, after.outcome.time) == (False, NOW)


@pytest.mark.parametrize(
    "outcome",
    [
        Outcome("Applied", "Applied", "all resources applied", 2),
        Outcome("Applied", "Applied", "waiting for Deployment x", 2, ready=False),
        Outcome("Progressing", "Progressing", "waiting for its rollout step", 2),
        Outcome("Pending", "WaitingForCluster", "kubeconfig Secret c-kubeconfig not found", 2),
        Outcome("Waiting", "DependencyNotReady", "waits for cni", 2),
        Outcome("Failed", "DependencyCycle", "a -> b -> a", 2),
        Outcome("Failed", "ClusterUnreachable", "connection refused", 2),
        Outcome("Failed", "Unhealthy", "Deployment x: not available", 2),
    ],
)
def test_the_binding_records_an_outcome_so_any_replica_reads_it_back(outcome: Outcome) -> None:
    written = to_api(with_outcome(entry("cni"), None, outcome, NOW))
    read = outcome_of(CRSBinding.model_validate(json.loads(json.dumps(written))))
    assert read == outcome


def test_an_entry_without_an_outcome_reads_as_none() -> None:
    assert outcome_of(None) is None
    assert outcome_of(entry("cni")) is None


HOSTILE = "ConfigMap default/x\x1b[31m\r\nWarning: forged\u202e: 422 Invalid"
HOSTILE_SHOWN = "ConfigMap default/x\\x1b[31m\\r\\nWarning: forged\\u202e: 422 Invalid"


def test_an_outcome_message_is_recorded_without_control_characters() -> None:
    failed = Outcome("Failed", "ApplyFailed", HOSTILE, 3)
    first = with_outcome(entry("cni"), None, failed, EARLIER)
    assert first.outcome is not None and first.outcome.message == HOSTILE_SHOWN
    # Recorded safe, it reads back the same: the next pass writes nothing.
    again = with_outcome(entry("cni"), first, failed, NOW)
    assert again.outcome == first.outcome


def test_a_forged_progressing_message_is_not_carried_over() -> None:
    # Waiting for Ready keeps the time it began, read from a binding a tenant can
    # write; the message is this pass's own.
    forged = with_outcome(
        entry("cni"), None, Outcome("Applied", "Applied", "x", 1, ready=False), EARLIER
    )
    assert forged.outcome is not None
    forged = forged.model_copy(
        update={"outcome": forged.outcome.model_copy(update={"message": HOSTILE})}
    )
    later = with_outcome(
        entry("cni"), forged, Outcome("Applied", "Applied", "y", 1, ready=False), NOW
    )
    assert later.outcome is not None and (later.outcome.message, later.outcome.time) == (
        "y",
        EARLIER,
    )
