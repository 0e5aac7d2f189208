"""Rollout shares: the plan made from the shares of the parts of a fleet, combined, is
the plan of the whole fleet (phase, step, message, soak, waits); each part admits and
validates its own clusters; combining is order-independent and associative; a share
reads back from its JSON, which stays small whatever the fleet. Random fleets with up
to 16 revisions besides the target, steps with label selectors, held clusters, soaks,
validations, approvals and change windows; explicit times, no clock is read."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.core.rollout.plan import (
    ClusterState,
    Plan,
    Policy,
    Step,
    admit,
    halted_of,
    halted_revision,
    plan,
    planned,
)
from crs_controller.core.rollout.shares import (
    MAX_REVISIONS,
    NAMES_SHOWN,
    Group,
    Other,
    Share,
    combine,
    share_of,
)
from crs_controller.core.rollout.windows import Window

T0 = datetime(2026, 11, 24, 10, 0, tzinfo=UTC)  # a Tuesday
TARGET = "r-target"
OTHERS = [f"r-{i:02}" for i in range(MAX_REVISIONS)]
RINGS = ["canary", "early", "rest", "late"]

# The largest a share's JSON may be: BASE plus PER_STEP for each step and the implicit
# last one, for cluster names up to 253 characters, revisions up to 100 and counts
# below a billion.
BASE, PER_STEP = 4608, 200


def bound(policy: Policy) -> int:
    return BASE + PER_STEP * (len(policy.steps) + 1)


selectors = st.one_of(
    st.builds(lambda ring: {"matchLabels": {"ring": ring}}, st.sampled_from(RINGS)),
    st.builds(
        lambda rings: {"matchExpressions": [{"key": "ring", "operator": "In", "values": rings}]},
        st.lists(st.sampled_from(RINGS), min_size=1, max_size=2, unique=True),
    ),
)
steps = st.builds(
    Step,
    selectors,
    st.sampled_from([0.0, 600.0, 3600.0, 7200.0]),
    manual=st.booleans(),
    validation=st.booleans(),
)
counts = st.one_of(st.integers(0, 6), st.integers(0, 100).map(lambda n: f"{n}%"))
windows = st.sampled_from(
    [
        (),
        (),
        (),
        (Window("Allow", "0 9 * * *", 4 * 3600.0),),  # 09:00-13:00 UTC
        (Window("Deny", "0 10 * * *", 1800.0),),  # 10:00-10:30 UTC
        (Window("Allow", "0 22 * * *", 3600.0),),  # 22:00-23:00 UTC
    ]
)
policies = st.builds(
    Policy,
    counts,
    st.lists(steps, max_size=3).map(tuple),
    counts,
    st.sampled_from([False, False, False, True]),
    windows,
)
sinces = st.one_of(
    st.none(), st.integers(-30, 30).map(lambda minutes: T0 + timedelta(minutes=minutes))
)


# How a cluster stands: ring, revision, done, failed, since, held, validated; mostly
# on the target or another revision, a few failed, held or not validated.
standings = st.tuples(
    st.sampled_from(RINGS),
    st.one_of(st.none(), st.just(TARGET), st.sampled_from(OTHERS), st.sampled_from(OTHERS)),
    st.booleans(),
    st.sampled_from([False, False, False, True]),
    sinces,
    st.sampled_from([False, False, False, True]),
    st.sampled_from([True, True, True, True, False]),
)


@st.composite
def fleets(draw: st.DrawFn) -> list[ClusterState]:
    """Two to 24 clusters, on the target, none or one of up to 16 other revisions;
    those of the rings the rollout went through are done on the target."""
    names = sorted(draw(st.sets(st.integers(0, 99), min_size=2, max_size=24)))
    through = RINGS[: draw(st.integers(0, len(RINGS) - 1))]
    revisions = draw(st.integers(1, MAX_REVISIONS))
    fleet = []
    for number, standing in zip(
        names, draw(st.lists(standings, min_size=len(names), max_size=len(names))), strict=True
    ):
        name = f"c{number:02}"
        ring, on, done, failed, since, held, validated = standing
        if ring in through:
            on, done, failed = TARGET, True, False
        elif on in OTHERS:
            on = OTHERS[OTHERS.index(on) % revisions]
        fleet.append(ClusterState(name, {"ring": ring}, on, done, failed, since, held, validated))
    return fleet


@st.composite
def partitions(
    draw: st.DrawFn, fleet: list[ClusterState], count: int | None = None
) -> list[list[ClusterState]]:
    """``fleet`` cut into ``count`` parts (else one to four), some perhaps empty."""
    count = draw(st.integers(1, 4)) if count is None else count
    parts: list[list[ClusterState]] = [[] for _ in range(count)]
    places = st.integers(0, len(parts) - 1)
    for cluster, place in zip(
        fleet, draw(st.lists(places, min_size=len(fleet), max_size=len(fleet))), strict=True
    ):
        parts[place].append(cluster)
    return parts


halteds = st.one_of(
    st.none(), st.just(TARGET), st.sampled_from(OTHERS[:2]), st.sampled_from(OTHERS)
)
approvals = st.one_of(st.none(), st.integers(1, 4))
nows = st.one_of(st.integers(0, 90), st.integers(0, 24 * 60)).map(
    lambda minutes: T0 + timedelta(minutes=minutes)
)


def shares(parts: list[list[ClusterState]], policy: Policy, halted: str | None) -> list[Share]:
    return [share_of(TARGET, part, policy, halted) for part in parts]


@settings(deadline=None, max_examples=200)
@given(fleets(), policies, halteds, approvals, nows, st.data())
def test_the_plan_from_combined_shares_is_the_plan_of_the_whole_fleet(
    fleet: list[ClusterState],
    policy: Policy,
    halted: str | None,
    approved: int | None,
    now: datetime,
    data: st.DataObject,
) -> None:
    parts = data.draw(partitions(fleet))
    whole = plan(TARGET, fleet, policy, now, halted, approved)
    combined = combine(shares(parts, policy, halted))
    assert combined == share_of(TARGET, fleet, policy, halted)
    made, gate = planned(combined, policy, now, approved)
    assert made == replace(whole, admit=frozenset(), validate=frozenset())
    own = [admit(made, gate, part) for part in parts]
    # Validations are not budgeted: each part names exactly its own.
    assert frozenset().union(*(p.validate for p in own)) == whole.validate
    # With the whole budget each, the parts admit at least what the whole fleet does.
    assert frozenset().union(*(p.admit for p in own)) >= whole.admit
    if len(parts) == 1:
        assert own[0] == whole


@settings(deadline=None, max_examples=50)
@given(fleets(), policies, halteds, st.data())
def test_each_part_admits_its_own_clusters_in_the_whole_fleets_order(
    fleet: list[ClusterState], policy: Policy, halted: str | None, data: st.DataObject
) -> None:
    parts = data.draw(partitions(fleet))
    whole = plan(TARGET, fleet, policy, T0, halted)
    made, gate = planned(combine(shares(parts, policy, halted)), policy, T0)
    for part in parts:
        names = {c.name for c in part}
        admissions = len(whole.admit & names - {c.name for c in part if c.revision is None})
        # Given as many admissions as the whole fleet's plan gives its clusters, a part
        # admits the very same ones.
        assert admit(made, gate, part, admissions).admit == whole.admit & names


@settings(deadline=None, max_examples=50)
@given(fleets(), policies, halteds, st.data())
def test_combining_is_order_independent_and_associative(
    fleet: list[ClusterState], policy: Policy, halted: str | None, data: st.DataObject
) -> None:
    a, b, c = shares(data.draw(partitions(fleet, 3)), policy, halted)
    assert combine([a, b, c]) == combine([c, a, b]) == combine([b, c, a])
    assert combine([combine([a, b]), c]) == combine([a, combine([b, c])]) == combine([a, b, c])
    assert combine([a]) == a


@settings(deadline=None, max_examples=50)
@given(fleets(), policies, st.data())
def test_the_halted_revision_is_found_from_combined_shares(
    fleet: list[ClusterState], policy: Policy, data: st.DataObject
) -> None:
    parts = data.draw(partitions(fleet))
    pairs = [(c.revision, c.failed) for c in fleet]
    combined = combine(shares(parts, policy, None))
    assert halted_of(combined, policy) == halted_revision(TARGET, pairs, policy)


@settings(deadline=None, max_examples=50)
@given(fleets(), policies, halteds)
def test_a_share_reads_back_from_its_json(
    fleet: list[ClusterState], policy: Policy, halted: str | None
) -> None:
    share = share_of(TARGET, fleet, policy, halted)
    text = json.dumps(share.to_api())
    assert Share.from_api(json.loads(text)) == share
    assert len(text) <= bound(policy)


def test_a_share_stays_small_whatever_the_fleet_and_its_revisions() -> None:
    """10,000 clusters with the longest names, on 2,000 revisions of the longest text,
    each failed taking the target or its own revision."""
    policy = Policy(steps=tuple(Step({"matchLabels": {"ring": r}}) for r in RINGS))
    latest = datetime.max.replace(tzinfo=UTC)
    fleet = [
        ClusterState(
            f"{i:05}".ljust(253, "c"),
            {"ring": RINGS[i % len(RINGS)]},
            TARGET if i % 2 else f"{i:05}".ljust(100, "r"),
            False,
            True,
            latest,
            held=i % 7 == 0,
        )
        for i in range(10_000)
    ]
    share = share_of(TARGET, fleet, policy, fleet[0].revision)
    combined = combine([share, share_of(TARGET, [], policy, fleet[0].revision)])
    text = json.dumps(combined.to_api())
    assert len(text) <= bound(policy)
    assert len(combined.others) == MAX_REVISIONS and len(combined.failed_names) == NAMES_SHOWN
    assert combined.others[0].revision == fleet[0].revision  # the halted one is kept
    assert Share.from_api(json.loads(text)) == combined


@pytest.mark.parametrize("steps", [0, 1, 10])
def test_the_bound_holds_for_the_largest_share(steps: int) -> None:
    """Every count just below a billion, every name and revision at its longest."""
    most, latest = 999_999_999, datetime.max.replace(tzinfo=UTC)
    group = Group(most, most, most, most, most, most, most, latest)
    share = Share(
        "t" * 100,
        steps,
        "h" * 100,
        (group,) * (steps + 1),
        most,
        most,
        most,
        most,
        tuple(str(i) * 253 for i in range(NAMES_SHOWN)),
        tuple(Other(f"{i:02}".ljust(100, "r"), most, most) for i in range(MAX_REVISIONS)),
        most,
    )
    policy = Policy(steps=(Step(None),) * steps)
    assert len(json.dumps(share.to_api())) <= bound(policy)


def test_shares_of_different_rollouts_are_not_combined() -> None:
    policy = Policy(steps=(Step({"matchLabels": {"ring": "canary"}}),))
    share = share_of(TARGET, [], policy)
    with pytest.raises(ValueError, match="different rollouts"):
        combine([share, share_of("r-other", [], policy)])
    with pytest.raises(ValueError, match="no share"):
        combine([])
    with pytest.raises(ValueError, match="planned with"):
        planned(share, Policy(), T0)
    with pytest.raises(ValueError, match="groups"):
        Share.from_api({**share.to_api(), "groups": []})
    with pytest.raises(ValueError):
        Share.from_api({**share.to_api(), "fleet": "many"})


def test_a_part_admits_at_most_its_admissions_and_always_its_first_installs() -> None:
    fleet = [
        ClusterState("a", {}, "r-00", True, False, None),
        ClusterState("b", {}, "r-00", True, False, None),
        ClusterState("c", {}, None, False, False, None),
    ]
    made, gate = planned(share_of(TARGET, fleet, Policy()), Policy(), T0)
    assert made == Plan(frozenset(), "Progressing", 1, 0, "step 1/1: 0 of 3 clusters updated", None)
    assert admit(made, gate, fleet, 1).admit == {"a", "c"}
    assert admit(made, gate, fleet, 0).admit == {"c"}
    assert admit(made, gate, fleet).admit == {"a", "b", "c"}
