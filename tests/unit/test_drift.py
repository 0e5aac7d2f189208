"""Drift decisions: the generation sum and its drift rule, and Content drift from the
fields our field manager owns (managedFields), hashed independently of key order;
fields left to others (spec.ignore) taken by another manager are no drift, and the
objects they are on are judged by ownership, not generation; and the schedule of
drift checks per CRS and cluster."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.core.api.models import ObjectRef
from crs_controller.core.spec.ignore import Ignores, Rule, Target, parse_pointer
from crs_controller.core.state.drift_decisions import (
    Live,
    content_drift,
    fields_hash,
    generation_drift,
    generation_sum,
    ours_hash,
    owned_fields,
    owned_hash,
    resource_drift,
)
from crs_controller.engine.memory.drift import DriftSchedule


@pytest.mark.parametrize(
    ("generations", "total"),
    [([], 0), ([1], 1), ([1, 2, 3], 6), ([2, None, 5], 7), ([None], 0)],
)
def test_generation_sum(generations: list[int | None], total: int) -> None:
    assert generation_sum(generations) == total


@pytest.mark.parametrize(
    ("recorded", "live", "drift"),
    [
        (None, [1, 2], False),  # nothing recorded: no verdict
        (None, [None], False),
        (3, [1, 2], False),
        (3, [1, 3], True),  # someone edited an object
        (3, [1, None], True),  # an object is missing
        (0, [], False),
        (0, [0, 0], False),  # objects without a generation
        (3, [1, 2, 1], True),
    ],
)
def test_generation_drift(recorded: int | None, live: list[int | None], drift: bool) -> None:
    assert generation_drift(recorded, live) is drift


generations = st.lists(st.integers(min_value=1, max_value=10**6), max_size=20)


@given(generations)
def test_no_drift_right_after_recording(live: list[int]) -> None:
    assert generation_drift(generation_sum(live), live) is False


@given(generations.filter(bool), st.data())
def test_a_bump_or_a_deletion_is_drift(live: list[int], data: st.DataObject) -> None:
    recorded = generation_sum(live)
    index = data.draw(st.integers(0, len(live) - 1))
    bumped = [*live]
    bumped[index] += 1
    assert generation_drift(recorded, bumped) is True
    deleted: list[int | None] = [*live]
    deleted[index] = None
    assert generation_drift(recorded, deleted) is True


# -- Content drift: the fields our manager owns ---------------------------------------

MANAGER = "crs-controller"


def _live(*entries: tuple[str, str, dict[str, object]]) -> dict[str, object]:
    managed = [{"manager": m, "operation": op, "fieldsV1": f} for m, op, f in entries]
    return {"metadata": {"name": "x", "managedFields": managed}}


OURS = {"f:data": {"f:a": {}, "f:b": {}}}


@pytest.mark.parametrize(
    ("live", "expected"),
    [
        (None, None),
        (_live(), None),
        (_live((MANAGER, "Apply", OURS)), OURS),
        (_live(("kubectl", "Update", {"f:data": {"f:a": {}}}), (MANAGER, "Apply", OURS)), OURS),
        # Our manager's *Update* entries are not what we applied.
        (_live((MANAGER, "Update", OURS)), None),
    ],
)
def test_owned_fields_reads_our_apply_entry_only(live: object, expected: object) -> None:
    assert owned_fields(live, MANAGER) == expected  # type: ignore[arg-type]


def test_content_drift_table() -> None:
    after_apply = fields_hash([OURS, {"f:spec": {"f:replicas": {}}}])
    same = [OURS, {"f:spec": {"f:replicas": {}}}]
    stolen = [{"f:data": {"f:b": {}}}, {"f:spec": {"f:replicas": {}}}]  # someone edited data.a
    assert not content_drift(after_apply, same)
    assert content_drift(after_apply, stolen)
    assert content_drift(after_apply, [OURS, None])  # an object is gone
    assert not content_drift(None, stolen)  # no baseline, no verdict


@given(st.dictionaries(st.text(max_size=5), st.dictionaries(st.text(max_size=5), st.just({}))))
def test_fields_hash_ignores_key_order(fields: dict[str, dict[str, object]]) -> None:
    reordered = {k: dict(reversed(list(v.items()))) for k, v in reversed(list(fields.items()))}
    assert fields_hash([fields]) == fields_hash([reordered])


# --- resource_drift: per-object records, one verdict per resource ---------------------

A = ObjectRef("v1", "ConfigMap", "kube-system", "a")
B = ObjectRef("apps/v1", "Deployment", "kube-system", "b")
OWNED = {"f:data": {"f:x": {}}}
OTHER_OWNED = {"f:data": {}}


def rec(ref: ObjectRef, generation: int | None, owned: Any = OWNED) -> ObjectRef:
    return ref.model_copy(update={"generation": generation, "fields": owned_hash(owned)})


@pytest.mark.parametrize(
    ("mode", "objects", "live", "drift"),
    [
        ("Generation", [rec(A, None), rec(B, 2)], [Live(0, OWNED), Live(2, OWNED)], False),
        ("Generation", [rec(A, None), rec(B, 2)], [Live(0, OWNED), Live(3, OWNED)], True),
        ("Generation", [rec(A, None), rec(B, 2)], [None, Live(2, OWNED)], True),
        # Generation mode does not look at ownership.
        ("Generation", [rec(A, 1), rec(B, 2)], [Live(1, OTHER_OWNED), Live(2, OWNED)], False),
        ("Content", [rec(A, 1), rec(B, 2)], [Live(1, OTHER_OWNED), Live(2, OWNED)], True),
        ("Content", [rec(A, 1), rec(B, 2)], [Live(1, None), Live(2, OWNED)], True),
        ("Content", [rec(A, 1), rec(B, 2)], [Live(1, OWNED), Live(2, OWNED)], False),
        # One generation moved elsewhere while the sum stays: per object it is seen.
        ("Generation", [rec(A, 1), rec(B, 2)], [Live(2, OWNED), Live(1, OWNED)], True),
    ],
    ids=[
        "same",
        "edited",
        "missing",
        "gen-ignores-owner",
        "owner-moved",
        "owner-gone",
        "content-same",
        "sum-hides-it",
    ],
)
def test_resource_drift_per_object(
    mode: str, objects: list[ObjectRef], live: list[Live | None], drift: bool
) -> None:
    assert resource_drift(mode, objects, live) is drift


@pytest.mark.parametrize(
    ("live", "recorded_sum", "drift"),
    [
        ([Live(1, OWNED), Live(2, OWNED)], 3, False),
        ([Live(1, OWNED), Live(3, OWNED)], 3, True),
        ([Live(1, OWNED), Live(3, OWNED)], None, False),
    ],
)
def test_an_inventory_without_object_records_falls_back_to_the_resource_sum(
    live: list[Live | None], recorded_sum: int | None, drift: bool
) -> None:
    assert resource_drift("Generation", [A, B], live, recorded_sum=recorded_sum) is drift
    legacy = fields_hash([s.owned for s in live if s is not None])
    assert (
        resource_drift("Content", [A, B], live, recorded_sum=recorded_sum, recorded_fields=legacy)
        is drift
    )


# --- fields left to others (spec.ignore) ----------------------------------------------

REPLICAS = Ignores(
    (Rule(Target(group="apps", kind="Deployment"), (parse_pointer("/spec/replicas"),)),)
)
APPLIED = {"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:replicas": {}, "f:paused": {}}}
SCALED = {"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:paused": {}}}  # an HPA took it
LABEL_TAKEN = {"f:spec": {"f:paused": {}}}  # someone edited the label too


def recorded_with(ref: ObjectRef, generation: int, owned: Any, ignores: Ignores) -> ObjectRef:
    """The inventory entry as applying records it: ignored paths out of the hash."""
    fields = ours_hash(owned, ignores.paths_for(ref))
    return ref.model_copy(update={"generation": generation, "fields": fields})


@pytest.mark.parametrize("mode", ["Generation", "Content"])
@pytest.mark.parametrize(
    ("live", "ignores", "drift"),
    [
        # The HPA scaled: replicas left our fields and the generation moved.
        (Live(3, SCALED), REPLICAS, False),
        (Live(3, SCALED), Ignores(), True),
        # Our own next apply left replicas out: the same owned fields.
        (Live(4, SCALED), REPLICAS, False),
        # Someone took another field we own: drift, in Generation mode too (ownership
        # is what tells an edit from a scale for a targeted object).
        (Live(3, LABEL_TAKEN), REPLICAS, True),
        (Live(2, APPLIED), REPLICAS, False),
    ],
    ids=["scaled", "scaled-unignored", "reapplied", "label-taken", "untouched"],
)
def test_ignored_paths_are_not_drift(mode: str, live: Live, ignores: Ignores, drift: bool) -> None:
    objects = [recorded_with(B, 2, APPLIED, ignores)]
    assert resource_drift(mode, objects, [live], ignores=ignores) is drift


def test_only_targeted_objects_skip_the_generation_and_a_missing_one_is_drift() -> None:
    objects = [recorded_with(A, 1, OWNED, REPLICAS), recorded_with(B, 2, APPLIED, REPLICAS)]
    # The ConfigMap is not targeted: its generation still counts in Generation mode.
    live = [Live(2, OWNED), Live(2, APPLIED)]
    assert resource_drift("Generation", objects, live, ignores=REPLICAS) is True
    assert resource_drift("Generation", objects, [Live(1, OWNED), None], ignores=REPLICAS)
    # Generation mode looks at ownership only for the targeted object.
    live = [Live(1, OTHER_OWNED), Live(5, SCALED)]
    assert resource_drift("Generation", objects, live, ignores=REPLICAS) is False
    assert resource_drift("Content", objects, live, ignores=REPLICAS) is True


# --- the drift schedule (engine.memory.drift), driven by explicit times -------------


def test_the_drift_schedule_is_due_at_first_then_after_each_interval() -> None:
    schedule = DriftSchedule()
    pair = ("ns", "crs", "c1")
    assert schedule.wait(pair, 100.0, 60.0) == 0.0  # never checked: due now
    assert schedule.wait(pair, 100.0, 60.0) == 0.0  # asking changes nothing
    schedule.checked(pair, 100.0)
    assert schedule.wait(pair, 130.0, 60.0) == 30.0
    assert schedule.wait(pair, 160.0, 60.0) == 0.0
    assert schedule.wait(pair, 500.0, 60.0) == 0.0  # overdue is due, never negative
    schedule.checked(("ns", "crs", "c2"), 100.0)
    schedule.checked(("other", "crs", "c1"), 100.0)
    schedule.forget_cluster("ns", "c1")
    assert schedule.wait(pair, 130.0, 60.0) == 0.0
    assert schedule.wait(("ns", "crs", "c2"), 130.0, 60.0) == 30.0
    assert schedule.wait(("other", "crs", "c1"), 130.0, 60.0) == 30.0  # other namespace


def test_an_edited_interval_counts_from_the_last_check_at_once() -> None:
    """A shorter driftCheckInterval does not wait for the end of the longer one, and a
    longer one does not check before its time."""
    schedule = DriftSchedule()
    pair = ("ns", "crs", "c1")
    schedule.checked(pair, 100.0)
    assert schedule.wait(pair, 130.0, 3600.0) == 3570.0
    assert schedule.wait(pair, 130.0, 60.0) == 30.0
    assert schedule.wait(pair, 200.0, 60.0) == 0.0
    assert schedule.wait(pair, 200.0, 7200.0) == 7100.0


def test_a_pair_is_forgotten_alone() -> None:
    """A CRS that no longer selects a cluster (or is gone) leaves nothing behind for it,
    and every other pair keeps its time."""
    schedule = DriftSchedule()
    for pair in (("ns", "a", "c1"), ("ns", "b", "c1"), ("ns", "a", "c2")):
        schedule.checked(pair, 100.0)
    schedule.forget_pair(("ns", "a", "c1"))
    schedule.forget_pair(("ns", "gone", "c9"))  # never there: nothing happens
    assert schedule.wait(("ns", "a", "c1"), 130.0, 60.0) == 0.0
    assert schedule.wait(("ns", "b", "c1"), 130.0, 60.0) == 30.0
    assert schedule.wait(("ns", "a", "c2"), 130.0, 60.0) == 30.0
    schedule.forget_pair(("ns", "b", "c1"))
    schedule.forget_pair(("ns", "a", "c2"))
    assert len(schedule) == 0  # nothing is left of the pairs forgotten
