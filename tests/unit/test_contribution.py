"""Members' contributions: the contributions of any partition of a CRS's clusters
among one to four members, combined, give the status and the rollout plan of the
whole fleet, and the kept objects its status names; the admissions a gate allows are
split between the members by their candidates (never more than a member's, adding up
to the budget or to every candidate, the same whatever the order); a contribution of
a member that left is left out, one computed under another member set, CRS or
rollout is waited for; a contribution reads back from its JSON, which stays within
its bound, and anything else is refused. Explicit times, no clock is read."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.core.api.models import (
    ClusterResourceSetStatus,
    CRSBinding,
    KeptObject,
    SkippedDeletion,
)
from crs_controller.core.membership.shard import (
    buckets_of,
    incarnation_of,
    members_stamp,
    new_incarnation,
)
from crs_controller.core.rollout.plan import (
    ClusterState,
    Gate,
    Policy,
    Step,
    admit,
    plan,
    planned,
    portion,
    wanting,
)
from crs_controller.core.rollout.shares import Share, share_of
from crs_controller.core.state.contribution import (
    MAX_TEXT_BYTES,
    MAX_WAITING,
    Combined,
    Contribution,
    Waiting,
    combined,
    max_json_bytes,
)
from crs_controller.core.state.deletion_guard import SKIPPED_KEPT, skipped_status
from crs_controller.core.state.status import Outcome, Problem, status_of, summarize
from crs_controller.core.state.tally import Held, Sample, Tally, tally_of

from .test_rollout_shares import TARGET, approvals, fleets, halteds, nows, policies
from .test_status_tally import GEN, NOW, outcomes, problems, rollouts

UID = "0b5e2a"
MEMBERS = ["m-a", "m-b", "m-c", "m-d"]


def entry_keeping(cluster: str, count: int) -> CRSBinding:
    """A binding entry naming ``count`` kept Namespaces."""
    kept = [
        KeptObject(api_version="v1", kind="Namespace", name=f"{cluster}-{i}") for i in range(count)
    ]
    return CRSBinding(cluster_resource_set_name="crs", deletions_skipped=kept or None)


@st.composite
def members_of(draw: st.DrawFn, clusters: list[ClusterState]) -> dict[str, list[int]]:
    """The clusters (by index) each of one to four members holds, some perhaps none."""
    members = MEMBERS[: draw(st.integers(1, 4))]
    held: dict[str, list[int]] = {m: [] for m in members}
    for index in range(len(clusters)):
        held[draw(st.sampled_from(members))].append(index)
    return held


def contribution(
    member: str,
    members: frozenset[str],
    clusters: list[ClusterState],
    told: list[Outcome | None],
    kept: list[int],
    share: Share | None,
) -> Contribution:
    entries = [(c.name, entry_keeping(c.name, n)) for c, n in zip(clusters, kept, strict=True)]
    return Contribution(
        member,
        members_stamp(members),
        UID,
        GEN,
        tally_of((c.name, o) for c, o in zip(clusters, told, strict=True)),
        share,
        tuple(skipped_status(entries)),
    )


@settings(deadline=None, max_examples=200)
@given(fleets(), policies, halteds, approvals, nows, rollouts, problems, st.data())
def test_the_members_contributions_combined_make_the_status_and_plan_of_the_whole(
    fleet: list[ClusterState],
    policy: Policy,
    halted: str | None,
    approved: int | None,
    now: datetime,
    rollout: tuple[str, str] | None,
    problem_list: list[Problem],
    data: st.DataObject,
) -> None:
    told = data.draw(st.lists(outcomes, min_size=len(fleet), max_size=len(fleet)))
    kept = data.draw(st.lists(st.integers(0, 8), min_size=len(fleet), max_size=len(fleet)))
    held = data.draw(members_of(fleet))
    members = frozenset(held)
    parts = {
        m: contribution(
            m,
            members,
            [fleet[i] for i in indices],
            [told[i] for i in indices],
            [kept[i] for i in indices],
            share_of(TARGET, [fleet[i] for i in indices], policy, halted),
        )
        for m, indices in held.items()
    }
    whole = combined(parts, members, UID, GEN, TARGET)
    assert isinstance(whole, Combined)
    pairs = sorted(((c.name, o) for c, o in zip(fleet, told, strict=True)), key=lambda p: p[0])
    said = {"generation": GEN, "resource_problems": problem_list, "now": NOW}
    previous = ClusterResourceSetStatus()
    expected = summarize(outcomes=pairs, previous=previous, rollout=rollout, **said)
    assert status_of(whole.tally, previous=previous, rollout=rollout, **said) == expected
    entries = [(c.name, entry_keeping(c.name, n)) for c, n in zip(fleet, kept, strict=True)]
    assert list(whole.skipped) == skipped_status(entries)
    assert whole.share is not None
    everyone = plan(TARGET, fleet, policy, now, halted, approved)
    made, gate = planned(whole.share, policy, now, approved)
    assert made == replace(everyone, admit=frozenset(), validate=frozenset())
    admitted = [
        admit(made, gate, [fleet[i] for i in indices], whole.admissions(gate, m))
        for m, indices in held.items()
    ]
    firsts = {c.name for c in fleet if c.revision is None}
    through = frozenset().union(*(a.admit for a in admitted)) - firsts
    assert len(through) == len(everyone.admit - firsts)
    assert frozenset().union(*(a.validate for a in admitted)) == everyone.validate
    if len(held) == 1:
        assert admitted[0] == everyone


@settings(deadline=None, max_examples=100)
@given(fleets(), policies, halteds, nows, st.integers(0, 30))
def test_wanting_counts_the_clusters_admit_would_let_through(
    fleet: list[ClusterState], policy: Policy, halted: str | None, now: datetime, budget: int
) -> None:
    share = share_of(TARGET, fleet, policy, halted)
    made, gate = planned(share, policy, now)
    unlimited = replace(gate, budget=len(fleet))
    firsts = {c.name for c in fleet if c.revision is None}
    assert wanting(share, unlimited) == len(admit(made, unlimited, fleet).admit - firsts)


@pytest.mark.parametrize(
    ("budget", "candidates", "portions"),
    [
        (10, {"a": 3}, {"a": 3}),
        (2, {"a": 3}, {"a": 2}),
        (0, {"a": 3, "b": 4}, {"a": 0, "b": 0}),
        (-2, {"a": 3}, {"a": 0}),
        (3, {"a": 1, "b": 1, "c": 1, "d": 0}, {"a": 1, "b": 1, "c": 1, "d": 0}),
        (2, {"a": 1, "b": 1, "c": 1}, {"a": 1, "b": 1, "c": 0}),  # ties: first identities
        (1, {"b": 5, "a": 5}, {"a": 1, "b": 0}),
        (5, {"a": 10, "b": 0, "c": 30}, {"a": 1, "b": 0, "c": 4}),  # 1.25, 3.75
        (4, {"a": 1, "b": 9}, {"a": 0, "b": 4}),  # 0.4 vs 3.6: b's remainder is larger
        (7, {}, {}),
    ],
)
def test_a_gates_budget_is_split_by_largest_remainder(
    budget: int, candidates: dict[str, int], portions: dict[str, int]
) -> None:
    assert {m: portion(budget, candidates, m) for m in candidates} == portions
    assert portion(budget, candidates, "not-a-member") == 0


@settings(deadline=None, max_examples=300)
@given(
    st.integers(-3, 60),
    st.dictionaries(st.sampled_from([*MEMBERS, "m-e", "m-f"]), st.integers(0, 40), max_size=6),
    st.randoms(use_true_random=False),
)
def test_portions_add_up_to_the_budget_or_every_candidate(
    budget: int, candidates: dict[str, int], shuffler: random.Random
) -> None:
    portions = {m: portion(budget, candidates, m) for m in candidates}
    assert sum(portions.values()) == min(max(budget, 0), sum(candidates.values()))
    assert all(0 <= portions[m] <= candidates[m] for m in candidates)
    order = list(candidates.items())
    shuffler.shuffle(order)
    again = dict(order)
    assert {m: portion(budget, again, m) for m in candidates} == portions
    if len(candidates) == 1:
        (only,) = candidates
        assert portions[only] == min(max(budget, 0), candidates[only])


def test_portion_refuses_negative_candidates() -> None:
    with pytest.raises(ValueError, match="not negative"):
        portion(3, {"a": -1}, "a")


def simple(who: str, among: frozenset[str], **change: object) -> Contribution:
    made = Contribution(who, members_stamp(among), UID, GEN, Tally())
    return replace(made, **change)  # type: ignore[arg-type]


def test_the_stamp_is_the_member_set_whatever_its_order() -> None:
    assert members_stamp(["b", "a"]) == members_stamp({"a", "b"}) == members_stamp(["a", "b", "a"])
    assert members_stamp(["a"]) != members_stamp(["a", "b"]) != members_stamp(["a", "c"])
    assert len(members_stamp([])) == 16 and int(members_stamp(["a"]), 16) >= 0


def test_a_member_back_under_the_same_identity_makes_a_new_set() -> None:
    """The set S, S without m-b, then S again with m-b in a new incarnation: what m-b
    said in its first is never current in the set it came back to. Its buckets are
    those it had: they go by identity alone."""
    first = {"m-a": new_incarnation(), "m-b": new_incarnation()}
    back = {**first, "m-b": new_incarnation()}
    members = frozenset(first)
    assert members_stamp(members, first) != members_stamp(members, back)
    assert members_stamp(members, first) == members_stamp(sorted(members), dict(first))
    old = simple("m-b", members, members=members_stamp(members, first))
    mine = simple("m-a", members, members=members_stamp(members, back))
    stamp = members_stamp(members, back)
    waited = combined({"m-a": mine, "m-b": old}, members, UID, GEN, None, stamp=stamp)
    assert waited == Waiting(stale=("m-b",))
    assert buckets_of(members, "m-b") == buckets_of(frozenset(back), "m-b")


def test_a_set_with_a_member_of_an_earlier_release_is_stamped_by_identities() -> None:
    """A rolling upgrade: m-b's Lease carries no token (its release writes none), so
    the set is stamped as that release stamps it, and both combine alike."""
    members = frozenset({"m-a", "m-b"})
    assert members_stamp(members, {"m-a": new_incarnation()}) == members_stamp(members)
    assert members_stamp(members, {"m-a": new_incarnation(), "m-b": ""}) == members_stamp(members)


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef"),
        ("0123456789ABCDEF0123456789ABCDEF", ""),  # upper case
        ("0123456789abcdef", ""),  # too short
        ("0123456789abcdef0123456789abcdef0", ""),  # too long
        ("0123456789abcdef0123456789abcdeg", ""),  # not hex
        ("0123456789abcdef0123456789abcdef\n", ""),
        (12345, ""),
        (None, ""),
    ],
)
def test_an_incarnation_token_is_read_only_when_it_is_32_hex_digits(
    written: object, read: str
) -> None:
    assert incarnation_of(written) == read
    assert incarnation_of(new_incarnation()) != ""


def test_a_member_that_left_is_left_out() -> None:
    members = frozenset({"m-a", "m-b"})
    applied = tally_of([("c1", Outcome("Applied", "Applied", "", GEN))])
    gone = simple("m-z", frozenset({"m-a", "m-b", "m-z"}), tally=applied)
    parts = {"m-a": simple("m-a", members), "m-b": simple("m-b", members), "m-z": gone}
    whole = combined(parts, members, UID, GEN, None)
    assert isinstance(whole, Combined)
    assert whole.tally == Tally() and set(whole.parts) == members


@pytest.mark.parametrize(
    "change",
    [
        {"members": members_stamp({"m-a"})},  # computed before m-b joined
        {"crs_uid": "another"},  # a CRS of the same name, deleted and made again
        {"generation": GEN - 1},
        {"member": "m-c"},  # kept under another member's key
        {"share": share_of(TARGET, [], Policy())},  # a rollout the CRS does not plan
    ],
)
def test_a_contribution_computed_under_anything_else_is_waited_for(
    change: dict[str, object],
) -> None:
    members = frozenset({"m-a", "m-b"})
    parts = {"m-a": simple("m-a", members), "m-b": simple("m-b", members, **change)}
    assert combined(parts, members, UID, GEN, None) == Waiting(stale=("m-b",))


def test_a_member_without_a_contribution_is_waited_for() -> None:
    members = frozenset({"m-a", "m-b", "m-c"})
    parts = {"m-b": simple("m-b", members), "m-c": simple("m-c", members, generation=1)}
    waiting = combined(parts, members, UID, GEN, None)
    assert waiting == Waiting(missing=("m-a",), stale=("m-c",))
    assert str(waiting) == ("waiting for the contributions of m-a (none yet) and m-c (out of date)")


def test_shares_of_another_halted_revision_or_step_count_are_waited_for() -> None:
    members = frozenset({"m-a", "m-b", "m-c"})
    policy = Policy(steps=(Step(None),))
    share = share_of(TARGET, [], policy)
    parts = {
        "m-a": simple("m-a", members, share=share),
        "m-b": simple("m-b", members, share=replace(share, halted="r-00")),
        "m-c": simple("m-c", members, share=share_of(TARGET, [], Policy())),
    }
    assert combined(parts, members, UID, GEN, TARGET) == Waiting(stale=("m-b", "m-c"))


@settings(deadline=None, max_examples=50)
@given(fleets(), policies, halteds, st.data())
def test_a_contribution_reads_back_from_its_json(
    fleet: list[ClusterState], policy: Policy, halted: str | None, data: st.DataObject
) -> None:
    told = data.draw(st.lists(outcomes, min_size=len(fleet), max_size=len(fleet)))
    kept = data.draw(st.lists(st.integers(0, 3), min_size=len(fleet), max_size=len(fleet)))
    share = data.draw(st.sampled_from([None, share_of(TARGET, fleet, policy, halted)]))
    made = contribution("m-a", frozenset(MEMBERS), fleet, told, kept, share)
    made = replace(made, holding=data.draw(st.none() | st.integers(0, 10**9 - 1)))
    waits = st.lists(st.tuples(st.text(max_size=253), st.integers(1, 10**9 - 1)), max_size=10)
    made = replace(made, waiting=tuple(data.draw(waits)))
    text = made.to_json()
    assert Contribution.from_json(text) == made
    assert Contribution.from_api(json.loads(text)) == made == Contribution.from_api(made.to_api())
    steps = None if share is None else share.steps
    assert len(text.encode()) <= max_json_bytes(steps)


@pytest.mark.parametrize("steps", [None, 0, 3, 100])
def test_the_bound_holds_for_the_largest_contribution(steps: int | None) -> None:
    """Every count at its largest, every name, reason, message and kept object at its
    longest, in the characters that take the most bytes."""
    most, face = 999_999_999, "\U0001f600"
    names = tuple(str(i) * 253 for i in range(5))
    sample = Sample("s" * 253, "R" * 1024, face * 1000)
    held = Held("H" * 1024, most, names)
    tally = Tally(*(most,) * 7, -(2**63), -(2**63), sample, sample, sample, names, held)
    share = None if steps is None else share_of("t" * 100, [], Policy(steps=(Step(None),) * steps))
    skipped = tuple(
        SkippedDeletion(cluster=face * 253, api_version=face * 316, kind=face * 63, name=face * 253)
        for _ in range(SKIPPED_KEPT)
    )
    made = Contribution(face * 253, "f" * 16, "u" * 64, 2**63 - 1, tally, share, skipped, most)
    waiting = tuple((face * 252 + str(i), most) for i in range(MAX_WAITING))
    made = replace(made, waiting=waiting)
    assert len(made.to_json().encode()) <= max_json_bytes(steps) <= MAX_TEXT_BYTES


@pytest.mark.parametrize(
    "change",
    [
        {"generation": "many"},
        {"tally": {"applied": -1}},
        {"share": {"target": "t"}},
        {"skipped": [{"cluster": "c"}]},
        {"skipped": [{"cluster": "c", "api_version": "v1", "kind": "K", "name": "n"}] * 21},
        {"member": None},
        {"holding": -1},
        {"holding": 10**9},
        {"holding": "all"},
        {"padding": "x" * max_json_bytes(None)},  # over its bound, whatever it says
    ],
)
def test_json_that_is_not_a_contribution_is_refused(change: dict[str, object]) -> None:
    data = {**simple("m-a", frozenset({"m-a"})).to_api(), **change}
    with pytest.raises(ValueError):
        Contribution.from_api(data)
    with pytest.raises(ValueError):
        Contribution.from_json(json.dumps(data))


@pytest.mark.parametrize("text", ["", "{", "[]", "null", '"text"', " " * (MAX_TEXT_BYTES + 1)])
def test_text_that_is_not_a_contribution_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        Contribution.from_json(text)


def test_one_members_contribution_is_the_whole() -> None:
    fleet = [ClusterState("c1", {}, "r-00", True, False, None)]
    told: list[Outcome | None] = [Outcome("Failed", "ApplyFailed", "no", GEN, revision="r-00")]
    share = share_of(TARGET, fleet, Policy())
    mine = contribution("me", frozenset({"me"}), fleet, told, [2], share)
    whole = combined({"me": mine}, frozenset({"me"}), UID, GEN, TARGET)
    assert isinstance(whole, Combined)
    assert (whole.tally, whole.share, whole.skipped) == (mine.tally, mine.share, mine.skipped)
    gate = Gate(TARGET, (), group=1, budget=5)
    assert whole.admissions(gate, "me") == 1 == wanting(share, gate)


@given(st.lists(st.integers(0, 1000), min_size=1, max_size=4), st.data())
def test_the_clusters_still_holding_a_deleted_crs_add_up_once_every_member_counted(
    counts: list[int], data: st.DataObject
) -> None:
    members = frozenset(MEMBERS[: len(counts)])
    parts = {m: simple(m, members, holding=n) for m, n in zip(sorted(members), counts, strict=True)}
    whole = combined(parts, members, UID, GEN, None)
    assert isinstance(whole, Combined) and whole.holding == sum(counts)
    # A member that has not seen the deletion counts nothing: no sum is made.
    unseen = data.draw(st.sampled_from(sorted(members)))
    parts[unseen] = simple(unseen, members)
    whole = combined(parts, members, UID, GEN, None)
    assert isinstance(whole, Combined) and whole.holding is None


def test_the_dependents_a_deletion_waits_for_are_summed_over_the_members() -> None:
    members = frozenset({"m-a", "m-b"})
    parts = {
        "m-a": simple("m-a", members, holding=3, waiting=(("csi", 2), ("mesh", 1))),
        "m-b": simple("m-b", members, holding=1, waiting=(("csi", 1),)),
    }
    whole = combined(parts, members, UID, GEN, None)
    assert isinstance(whole, Combined)
    assert (whole.holding, whole.waiting) == (4, {"csi": 3, "mesh": 1})
    with pytest.raises(ValueError, match="dependents waited for"):
        simple("m-a", members, waiting=tuple((f"d{i}", 1) for i in range(MAX_WAITING + 1)))
