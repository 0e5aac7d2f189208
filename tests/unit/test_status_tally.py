"""Status tallies: the status made from the tallies of the parts of a CRS's clusters,
combined, is the status of all of them (every field: counts, observedGeneration, each
condition's status, reason and message); combining is order-independent and
associative; a tally reads back from its JSON, which stays small whatever the number
of clusters and whatever their outcomes' reasons and messages say. Random outcomes of
every state, with reasons that rank alike and apart, long and hostile messages, stale
generations and rollouts in each phase; explicit times, no clock is read."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.core.api.models import MESSAGE_LIMIT, ClusterResourceSetStatus, Condition
from crs_controller.core.state.status import (
    READY,
    RESOURCES_APPLIED,
    Outcome,
    Problem,
    State,
    status_of,
    summarize,
)
from crs_controller.core.state.tally import (
    NAMES_SHOWN,
    Held,
    Sample,
    Tally,
    combine,
    tally_of,
)
from crs_controller.core.text import safe

GEN = 4
NOW = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)
# The largest a tally's JSON may be, for cluster names up to 253 characters, reasons
# up to 1,024, counts below a billion and generations of 64 bits.
BOUND = 44_032

REASONS = {
    "Failed": ["ApplyFailed", "ClusterUnreachable", "Unhealthy", "ValidationFailed", "Odd"],
    "Waiting": ["DependencyNotReady", "WaitingForVersion", "NoResourceForVersion"],
    "Progressing": ["Progressing", "OutsideWindow", "UpdateHeld", "UpgradeInProgress"],
    "Applied": ["Applied"],
    "Pending": ["WaitingForCluster"],
}
messages = st.one_of(
    st.sampled_from(["m", "waits for cni", "x\x1b[31m\r\nforged\u202e"]),
    st.text(max_size=30),
    # Long: cut in the status, with escapes and characters JSON spells long.
    st.text(alphabet="ab\x00\u2028\U0001f600", min_size=MESSAGE_LIMIT - 20, max_size=1500),
)
outcomes = st.one_of(
    st.none(),
    st.sampled_from(sorted(REASONS)).flatmap(
        lambda state: st.builds(
            Outcome,
            st.just(state),
            st.sampled_from(REASONS[state]),
            messages,
            st.integers(GEN - 1, GEN),
            ready=st.sampled_from([True, True, False]),
        )
    ),
)
rollouts = st.sampled_from(
    [
        None,
        ("Progressing", "step 1/2"),
        ("Paused", "paused"),
        ("Halted", "halted"),
        ("AwaitingApproval", "step 2 waits"),
        ("RolledBack", "back"),
        ("Complete", "complete"),
    ]
)
problems = st.lists(
    st.builds(Problem, st.sampled_from(["ResourceNotFound", "InvalidManifest"]), messages),
    max_size=2,
)
previouses = st.sampled_from(
    [ClusterResourceSetStatus(), ClusterResourceSetStatus(observed_generation=GEN - 1)]
)


@st.composite
def fleets(draw: st.DrawFn) -> list[tuple[str, Outcome | None]]:
    """Up to 24 clusters (names alike in all but a digit, so ties are broken by
    name), each with an outcome or none, in any order."""
    names = draw(st.sets(st.integers(0, 99), max_size=24))
    pairs = [(f"c{n:02}", draw(outcomes)) for n in names]
    return draw(st.permutations(pairs))


@st.composite
def partitions(
    draw: st.DrawFn, fleet: list[tuple[str, Outcome | None]], count: int | None = None
) -> list[list[tuple[str, Outcome | None]]]:
    """``fleet`` cut into ``count`` parts (else one to four), some perhaps empty."""
    count = draw(st.integers(1, 4)) if count is None else count
    parts: list[list[tuple[str, Outcome | None]]] = [[] for _ in range(count)]
    for pair in fleet:
        parts[draw(st.integers(0, count - 1))].append(pair)
    return parts


@settings(deadline=None, max_examples=300)
@given(fleets(), rollouts, problems, previouses, st.data())
def test_the_status_from_combined_tallies_is_the_status_of_every_cluster(
    fleet: list[tuple[str, Outcome | None]],
    rollout: tuple[str, str] | None,
    problems: list[Problem],
    previous: ClusterResourceSetStatus,
    data: st.DataObject,
) -> None:
    parts = data.draw(partitions(fleet))
    combined = combine(tally_of(part) for part in parts)
    assert combined == tally_of(fleet)
    whole = summarize(
        generation=GEN,
        outcomes=sorted(fleet, key=lambda pair: pair[0]),
        resource_problems=problems,
        previous=previous,
        now=NOW,
        rollout=rollout,
    )
    made = status_of(
        combined,
        generation=GEN,
        resource_problems=problems,
        previous=previous,
        now=NOW,
        rollout=rollout,
    )
    assert made == whole
    assert made.model_dump() == whole.model_dump()  # every field, conditions included


@settings(deadline=None, max_examples=100)
@given(fleets(), st.data())
def test_combining_is_order_independent_and_associative(
    fleet: list[tuple[str, Outcome | None]], data: st.DataObject
) -> None:
    a, b, c = (tally_of(part) for part in data.draw(partitions(fleet, 3)))
    assert combine([a, b, c]) == combine([c, a, b]) == combine([b, c, a]) == combine([b, a, c])
    assert combine([combine([a, b]), c]) == combine([a, combine([b, c])]) == combine([a, b, c])
    assert combine([a]) == a
    assert combine([a, Tally()]) == a
    assert combine([]) == Tally() == tally_of([])


def condition(status: ClusterResourceSetStatus, kind: str) -> Condition:
    return next(c for c in status.conditions if c.type == kind)


@settings(deadline=None, max_examples=100)
@given(st.text(max_size=3 * MESSAGE_LIMIT), st.integers(1, 30), st.integers(0, 20))
def test_a_cut_message_reads_in_the_status_as_the_whole_message_would(
    message: str, name_length: int, others: int
) -> None:
    """The first failing cluster's message is kept cut at MESSAGE_LIMIT characters:
    the condition says what it says with the whole message, cut and made safe."""
    first = "a" * name_length
    fleet = [(first, Outcome("Failed", "ApplyFailed", message, GEN))]
    fleet += [(f"b{i}", Outcome("Failed", "ApplyFailed", "m", GEN)) for i in range(others)]
    more = f" (and {others} more clusters)" if others else ""
    whole = safe(f"cluster {first}: {message}{more}", MESSAGE_LIMIT)
    status = status_of(
        combine([tally_of(fleet[:1]), tally_of(fleet[1:])]),
        generation=GEN,
        resource_problems=[],
        previous=ClusterResourceSetStatus(),
        now=NOW,
    )
    for kind in (READY, RESOURCES_APPLIED):
        assert condition(status, kind).message == whole


@settings(deadline=None, max_examples=100)
@given(fleets())
def test_a_tally_reads_back_from_its_json(fleet: list[tuple[str, Outcome | None]]) -> None:
    tally = tally_of(fleet)
    text = json.dumps(tally.to_api())
    assert Tally.from_api(json.loads(text)) == tally
    assert len(text) <= BOUND


def test_a_tally_stays_small_whatever_the_number_of_clusters() -> None:
    """10,000 clusters with the longest names, each failed, waiting, held or not Ready
    for a reason of its own as long as a binding allows, with a message of 5,000
    characters that JSON spells with 12 each."""
    long = "\U0001f600" * 5000
    states: list[State] = ["Failed", "Waiting", "Progressing", "Applied"]
    fleet: list[tuple[str, Outcome | None]] = [
        (
            f"{i:05}".ljust(253, "c"),
            Outcome(states[i % 4], f"R{i:05}".ljust(1024, "r"), long, GEN, ready=False),
        )
        for i in range(10_000)
    ]
    tally = combine([tally_of(fleet[:5000]), tally_of(fleet[5000:]), tally_of([])])
    assert tally == tally_of(fleet)
    assert (tally.failed, tally.waiting, tally.held, tally.unready) == (2500,) * 4
    assert len(tally.held_names) == NAMES_SHOWN and tally.first_held is not None
    text = json.dumps(tally.to_api())
    assert len(text) <= BOUND
    assert Tally.from_api(json.loads(text)) == tally


def test_the_bound_holds_for_the_largest_tally() -> None:
    """Every count just below a billion, generations of 64 bits, every name, reason and
    message at its longest, in characters JSON spells longest."""
    most, message = 999_999_999, "\U0001f600" * MESSAGE_LIMIT
    names = tuple(str(i) * 253 for i in range(NAMES_SHOWN))

    def sample(i: int) -> Sample:
        return Sample(str(i) * 253, "R" * 1024, message)

    tally = Tally(
        *(most,) * 7,
        -(2**63),
        -(2**63),
        sample(1),
        sample(2),
        sample(3),
        names,
        Held("H" * 1024, most, names),
    )
    assert len(json.dumps(tally.to_api())) <= BOUND


@pytest.mark.parametrize(
    "change",
    [
        {"applied": "many"},
        {"failed": -1},
        {"first_failed": None},  # a failed cluster, none named
        {"waiting": 1},  # a waiting cluster, none named
        {"held_names": ["a"]},  # a name for no held cluster
        {"unrecorded": 2},  # more than pending
        {"unrecorded": 0, "oldest": None, "newest": None},  # outcomes, no generation
        {"oldest": GEN + 1},  # the oldest after the newest
        {"first_failed": {"cluster": "a", "reason": "ApplyFailed", "message": "m" * 1001}},
    ],
)
def test_json_that_is_not_a_tally_is_refused(change: dict[str, object]) -> None:
    data = tally_of([("a", Outcome("Failed", "ApplyFailed", "m", GEN)), ("b", None)]).to_api()
    with pytest.raises(ValueError):
        Tally.from_api({**data, **change})
