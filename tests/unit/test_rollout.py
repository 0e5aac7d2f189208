"""The rollout planner: which clusters may take a new revision now. Steps in order with
maxConcurrent, percentages and their rounding, empty steps, clusters leaving, first
installs whatever the phase, Halted and the clusters of a halted revision going first
(a rollback's clusters on the revision rolled back from too, RolledBack once all are back),
soaks driven by explicit times (no clock is read, nothing sleeps), Complete, retries,
the content-addressed revision, and properties over random fleets."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.core.api.selectors import selector_matches
from crs_controller.core.errors import InvalidSpec
from crs_controller.core.rollout.plan import (
    ClusterState,
    Plan,
    Policy,
    Step,
    count,
    halted_revision,
    plan,
    revision,
)
from crs_controller.engine.reconcile.rollout import rolling_back

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
OLD, TARGET, BAD = "r-old", "r-target", "r-bad"

# How a cluster stands, in one word.
STATES: dict[str, tuple[str | None, bool, bool]] = {
    "old": (OLD, True, False),  # done on an earlier revision: needs the target
    "new": (TARGET, True, False),  # done on the target
    "going": (TARGET, False, False),  # applied the target, not Ready yet: updating
    "failed": (TARGET, False, True),  # its last attempt of the target failed
    "bad": (BAD, False, True),  # on the revision that halted
    "fresh": (None, False, False),  # nothing applied yet: a first install
}

CANARY = Step({"matchLabels": {"ring": "canary"}})
EARLY = Step({"matchLabels": {"ring": "early"}})
# Canary 1, early 2, then the rest (the implicit step 3).
RING = {
    "canary": "canary",
    "early-a": "early",
    "early-b": "early",
    "rest-a": "",
    "rest-b": "",
    "rest-c": "",
}


def state(name: str, word: str = "old", since: datetime | None = T0, **labels: str) -> ClusterState:
    rev, done, failed = STATES[word]
    return ClusterState(name, labels, rev, done, failed, since)


def ring(states: Mapping[str, str], *, leave: Sequence[str] = ()) -> list[ClusterState]:
    """The six clusters of RING, "old" unless named in ``states``; ``leave`` are gone."""
    return [
        replace(state(name, states.get(name, "old")), labels={"ring": label} if label else {})
        for name, label in RING.items()
        if name not in leave
    ]


def run(
    clusters: Sequence[ClusterState],
    policy: Policy | None = None,
    now: datetime = T0,
    halted: str | None = None,
) -> Plan:
    return plan(TARGET, clusters, policy or Policy(), now, halted)


STEPPED = Policy(max_concurrent=1, steps=(CANARY, EARLY))


# --- count and revision ------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "total", "round_up", "expected"),
    [
        pytest.param("25%", 10, True, 3, id="25%-of-10-up"),
        pytest.param("25%", 10, False, 2, id="25%-of-10-down"),
        pytest.param("1%", 10, True, 1, id="1%-up-is-at-least-one"),
        pytest.param("1%", 10, False, 0, id="1%-down-is-none"),
        pytest.param("0%", 10, True, 1, id="0%-up-is-at-least-one"),
        pytest.param("0%", 10, False, 0, id="0%-down"),
        pytest.param("100%", 10, True, 10, id="100%-up"),
        pytest.param("100%", 10, False, 10, id="100%-down"),
        pytest.param("33%", 3, True, 1, id="33%-of-3-up"),
        pytest.param("34%", 3, True, 2, id="34%-of-3-up"),
        pytest.param("99%", 3, False, 2, id="99%-of-3-down"),
        pytest.param("50%", 0, True, 0, id="empty-fleet-up"),
        pytest.param("0%", 0, True, 0, id="0%-of-empty-fleet"),
        pytest.param("007%", 100, True, 7, id="leading-zeros"),
        pytest.param(3, 10, True, 3, id="int-up"),
        pytest.param(3, 10, False, 3, id="int-down"),
        pytest.param(0, 10, True, 0, id="int-zero-passes-through"),
        pytest.param(50, 10, False, 50, id="int-above-total"),
    ],
)
def test_count(value: int | str, total: int, round_up: bool, expected: int) -> None:
    assert count(value, total, round_up=round_up) == expected


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("25", id="string-without-percent"),
        pytest.param("12.5%", id="fraction"),
        pytest.param("-1%", id="negative-percent"),
        pytest.param("101%", id="over-100%"),
        pytest.param(" 5%", id="space"),
        pytest.param("%", id="percent-alone"),
        pytest.param("\uff15\uff10%", id="fullwidth-digits"),  # Kubernetes reads ASCII only
        pytest.param(-1, id="negative-int"),
        pytest.param(True, id="bool"),
        pytest.param(None, id="none"),
    ],
)
def test_count_refuses(value: object) -> None:
    with pytest.raises(ValueError, match="invalid count"):
        count(value, 10, round_up=True)  # type: ignore[arg-type]


def test_a_policy_refuses_bad_values_when_built() -> None:
    with pytest.raises(ValueError, match="invalid count"):
        Policy(max_concurrent="lots")
    with pytest.raises(ValueError, match="invalid count"):
        Policy(max_failures="10")
    with pytest.raises(ValueError, match="pause_after"):
        Step(CANARY.selector, pause_after=-1)
    with pytest.raises(InvalidSpec):
        Step({"match_labels": {"ring": "canary"}})


CM = ("ConfigMap", "cni", "xxh3:00000000000000aa")
SECRET = ("Secret", "creds", "xxh3:00000000000000bb")
EDITED = ("ConfigMap", "cni", "xxh3:00000000000000cc")


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        pytest.param([CM, SECRET], [CM, SECRET], True, id="same-sources"),
        pytest.param([CM, SECRET], [SECRET, CM], False, id="spec-order-matters"),
        pytest.param([CM, SECRET], [EDITED, SECRET], False, id="an-edit"),
        pytest.param([CM], [CM, SECRET], False, id="a-resource-added"),
        pytest.param([("ab", "c", "h")], [("a", "bc", "h")], False, id="length-prefixed"),
        pytest.param([("a", "b", "c"), ("d", "e", "f")], [("a", "b", "cd"), ("e", "f", "")], False,
                     id="parts-never-shift"),
        pytest.param([], [], True, id="no-resources"),
    ],
)  # fmt: skip
def test_revision(
    first: list[tuple[str, str, str]], second: list[tuple[str, str, str]], same: bool
) -> None:
    assert re.fullmatch(r"xxh3:[0-9a-f]{16}", revision(first))
    assert (revision(first) == revision(second)) is same


def test_reverting_an_edit_gives_back_the_earlier_revision() -> None:
    before = revision([CM, SECRET])
    edited = revision([EDITED, SECRET])
    assert edited != before
    assert revision([CM, SECRET]) == before


# --- steps -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("states", "admit", "step", "updated", "message"),
    [
        pytest.param({}, {"canary"}, 1, 0, "step 1/3: 0 of 1 cluster updated", id="start"),
        pytest.param({"canary": "going"}, set(), 1, 0, "step 1/3: 0 of 1 cluster updated",
                     id="canary-updating"),
        pytest.param({"canary": "new"}, {"early-a"}, 2, 1, "step 2/3: 0 of 2 clusters updated",
                     id="canary-done"),
        pytest.param({"canary": "new", "early-a": "going"}, set(), 2, 1,
                     "step 2/3: 0 of 2 clusters updated", id="early-a-updating"),
        pytest.param({"canary": "new", "early-a": "new"}, {"early-b"}, 2, 2,
                     "step 2/3: 1 of 2 clusters updated", id="early-a-done"),
        pytest.param({"canary": "new", "early-a": "new", "early-b": "new"}, {"rest-a"}, 3, 3,
                     "step 3/3: 0 of 3 clusters updated", id="early-done"),
        pytest.param({"canary": "new", "early-a": "new", "early-b": "new", "rest-a": "new",
                      "rest-b": "new"}, {"rest-c"}, 3, 5, "step 3/3: 2 of 3 clusters updated",
                     id="last-one"),
        pytest.param(dict.fromkeys(RING, "new"), set(), 3, 6, "complete", id="complete"),
    ],
)  # fmt: skip
def test_three_steps_one_at_a_time(
    states: dict[str, str], admit: set[str], step: int, updated: int, message: str
) -> None:
    result = run(ring(states), STEPPED)
    expected_phase = "Complete" if message == "complete" else "Progressing"
    assert (set(result.admit), result.phase, result.step) == (admit, expected_phase, step)
    assert (result.updated, result.message, result.wake_after) == (updated, message, None)


def test_without_steps_everything_is_step_one_and_goes_at_once() -> None:
    result = run(ring({}))
    assert result.admit == set(RING)
    assert (result.phase, result.step, result.message) == (
        "Progressing",
        1,
        "step 1/1: 0 of 6 clusters updated",
    )


@pytest.mark.parametrize(
    ("steps", "admit", "step"),
    [
        pytest.param((Step({"matchLabels": {"ring": "nowhere"}}, 600), EARLY), {"early-a"}, 2,
                     id="first-step-matches-none"),
        pytest.param((Step(None, 600), EARLY), {"early-a"}, 2, id="no-selector"),
        pytest.param((Step({}, 600), EARLY), {"early-a"}, 2, id="empty-selector"),
        pytest.param((CANARY, Step({"matchLabels": {"ring": "nowhere"}}, 600), EARLY),
                     {"canary"}, 1, id="empty-step-in-the-middle-waits-its-turn"),
        pytest.param((EARLY, CANARY), {"early-a"}, 1, id="selectors-give-the-order"),
    ],
)  # fmt: skip
def test_a_step_without_clusters_is_done_at_once(
    steps: tuple[Step, ...], admit: set[str], step: int
) -> None:
    result = run(ring({}), Policy(max_concurrent=1, steps=steps))
    assert (set(result.admit), result.step, result.wake_after) == (admit, step, None)


def test_after_an_empty_step_the_next_one_starts_without_a_soak() -> None:
    empty = Step({"matchLabels": {"ring": "nowhere"}}, 600)
    result = run(ring({"canary": "new"}), Policy(max_concurrent=1, steps=(CANARY, empty, EARLY)))
    assert (set(result.admit), result.step) == ({"early-a"}, 3)


def test_a_cluster_belongs_to_the_first_step_it_matches() -> None:
    both = Step({"matchExpressions": [{"key": "ring", "operator": "Exists"}]})
    clusters = ring({"canary": "new"})
    result = run(clusters, Policy(max_concurrent=10, steps=(CANARY, both, EARLY)))
    assert (set(result.admit), result.step) == ({"early-a", "early-b"}, 2)


@pytest.mark.parametrize(
    ("states", "leave", "admit", "step", "updated"),
    [
        pytest.param({}, ["canary"], {"early-a"}, 2, 0, id="canary-leaves-before-its-turn"),
        pytest.param({"canary": "going"}, ["canary"], {"early-a"}, 2, 0,
                     id="canary-leaves-while-updating"),
        pytest.param({"canary": "new", "early-a": "new"}, ["early-b"], {"rest-a"}, 3, 2,
                     id="last-of-a-step-leaves"),
        pytest.param({"canary": "new", "early-a": "failed"}, ["early-a"], {"early-b"}, 2, 1,
                     id="failed-cluster-leaves"),
        pytest.param({"canary": "new", "early-a": "new", "early-b": "new"},
                     ["rest-a", "rest-b", "rest-c"], set(), 3, 3, id="the-rest-leaves"),
    ],
)  # fmt: skip
def test_clusters_leaving_mid_rollout_no_longer_count(
    states: dict[str, str], leave: list[str], admit: set[str], step: int, updated: int
) -> None:
    result = run(ring(states, leave=leave), STEPPED)
    assert (set(result.admit), result.step, result.updated) == (admit, step, updated)
    assert result.phase == ("Complete" if not admit else "Progressing")


# --- percentages -------------------------------------------------------------------


def fleet(n: int, words: Mapping[int, str] | None = None) -> list[ClusterState]:
    """``n`` clusters c00, c01, …, "old" unless ``words`` says otherwise."""
    return [state(f"c{i:02d}", (words or {}).get(i, "old")) for i in range(n)]


def names(*indexes: int) -> set[str]:
    return {f"c{i:02d}" for i in indexes}


@pytest.mark.parametrize(
    ("max_concurrent", "n", "words", "admit"),
    [
        pytest.param("25%", 10, {}, names(0, 1, 2), id="25%-of-10-rounds-up-to-3"),
        pytest.param("25%", 10, {0: "going"}, names(1, 2), id="updating-ones-use-the-budget"),
        pytest.param("25%", 10, {0: "going", 1: "going", 2: "going"}, set(), id="budget-used-up"),
        pytest.param("10%", 3, {}, names(0), id="small-fleet-moves"),
        pytest.param("0%", 4, {}, names(0), id="0%-is-taken-as-1"),
        pytest.param(0, 4, {}, names(0), id="int-0-is-taken-as-1"),
        pytest.param("100%", 4, {}, names(0, 1, 2, 3), id="100%"),
        pytest.param(2, 4, {}, names(0, 1), id="int"),
        pytest.param(9, 4, {}, names(0, 1, 2, 3), id="int-above-the-fleet"),
        pytest.param(2, 4, {0: "new", 1: "new"}, names(2, 3), id="done-ones-free-the-budget"),
        pytest.param(2, 4, {1: "fresh"}, names(0, 1, 2), id="first-install-is-extra"),
    ],
)  # fmt: skip
def test_max_concurrent(
    max_concurrent: int | str, n: int, words: dict[int, str], admit: set[str]
) -> None:
    assert run(fleet(n, words), Policy(max_concurrent=max_concurrent)).admit == admit


@pytest.mark.parametrize(
    ("max_failures", "failed", "phase"),
    [
        pytest.param(0, 0, "Progressing", id="none-failed"),
        pytest.param(0, 1, "Halted", id="0-one-failure-halts"),
        pytest.param("0%", 1, "Halted", id="0%-one-failure-halts"),
        pytest.param("25%", 2, "Progressing", id="25%-of-10-rounds-down-to-2-tolerates-2"),
        pytest.param("25%", 3, "Halted", id="25%-of-10-halts-at-3"),
        pytest.param("5%", 1, "Halted", id="5%-of-10-is-0"),
        pytest.param(1, 1, "Progressing", id="int-tolerates"),
        pytest.param(1, 2, "Halted", id="int-exceeded"),
        pytest.param("100%", 9, "Progressing", id="100%-never-halts"),
    ],
)
def test_max_failures(max_failures: int | str, failed: int, phase: str) -> None:
    clusters = fleet(10, dict.fromkeys(range(failed), "failed"))
    assert run(clusters, Policy(max_failures=max_failures)).phase == phase


# --- halted, paused, first installs ------------------------------------------------


def test_halted_admits_nobody_and_names_the_failed_clusters() -> None:
    clusters = fleet(10, {**dict.fromkeys(range(1, 8), "failed"), 9: "fresh"})
    result = run(clusters, Policy(max_failures="10%"))
    assert (result.phase, set(result.admit), result.wake_after) == ("Halted", names(9), None)
    assert result.message == (
        "halted: 7 clusters failed (maximum 1): c01, c02, c03, c04, c05 and 2 more"
    )


def test_halted_message_for_one_cluster() -> None:
    result = run(fleet(3, {2: "failed"}))
    assert result.message == "halted: 1 cluster failed (maximum 0): c02"


HALTED_C01 = "halted: 1 cluster failed (maximum 0): c01"
CANARY_SOAK = Policy(max_concurrent=1, steps=(replace(CANARY, pause_after=600),))


@pytest.mark.parametrize(
    ("policy", "words", "phase", "message"),
    [
        pytest.param(Policy(paused=True), {}, "Paused", "paused", id="paused"),
        pytest.param(Policy(), {1: "failed"}, "Halted", HALTED_C01, id="halted"),
        pytest.param(Policy(paused=True), {1: "failed"}, "Halted", HALTED_C01 + "; paused",
                     id="halted-wins-over-paused"),
        pytest.param(Policy(max_concurrent=1), {0: "going"}, "Progressing",
                     "step 1/1: 0 of 4 clusters updated", id="budget-used-up"),
        pytest.param(CANARY_SOAK, {0: "new"}, "Progressing",
                     "soaking after step 1 until 10:10:00Z", id="soaking"),
    ],
)  # fmt: skip
def test_first_installs_are_admitted_whatever_the_phase(
    policy: Policy, words: dict[int, str], phase: str, message: str
) -> None:
    clusters = fleet(4, {**words, 3: "fresh"})
    clusters[0] = replace(clusters[0], labels={"ring": "canary"}, since=T0)
    result = run(clusters, policy, now=T0 + timedelta(minutes=5))
    assert names(3) <= result.admit
    assert (result.phase, result.message) == (phase, message)
    if phase != "Progressing":
        assert result.admit == names(3), "nothing else while Paused or Halted"


def test_paused_reports_where_the_rollout_stands() -> None:
    result = run(ring({"canary": "new", "early-a": "going"}), replace(STEPPED, paused=True))
    assert (result.phase, set(result.admit), result.step, result.updated) == ("Paused", set(), 2, 1)


FIRST_TWO = "step 1/3: first the 2 clusters on halted revision r-bad"
FIRST_ONE = "step 2/3: first the 1 cluster on halted revision r-bad"


@pytest.mark.parametrize(
    ("states", "policy", "admit", "message"),
    [
        pytest.param({"canary": "bad", "rest-b": "bad"}, STEPPED, {"canary"}, FIRST_TWO,
                     id="one-at-a-time"),
        pytest.param({"canary": "bad", "rest-b": "bad"}, Policy(steps=STEPPED.steps),
                     {"canary", "rest-b"}, FIRST_TWO, id="before-the-steps-order"),
        pytest.param({"canary": "new", "rest-b": "bad"}, STEPPED, {"rest-b"}, FIRST_ONE,
                     id="later-step-first"),
        pytest.param({"canary": "new", "rest-b": "going"}, STEPPED, set(),
                     "step 2/3: 0 of 2 clusters updated", id="moved-counts-as-updating"),
        pytest.param({"canary": "new", "rest-b": "new"}, STEPPED, {"early-a"},
                     "step 2/3: 0 of 2 clusters updated", id="then-the-steps-order"),
    ],
)  # fmt: skip
def test_after_a_halt_a_new_revision_goes_first_to_the_clusters_on_the_halted_one(
    states: dict[str, str], policy: Policy, admit: set[str], message: str
) -> None:
    result = run(ring(states), policy, halted=BAD)
    assert (result.phase, set(result.admit), result.message) == ("Progressing", admit, message)


def test_the_halted_revision_itself_gets_no_priority() -> None:
    # target == halted: still that rollout, its clusters are just updating or failed.
    result = plan(BAD, ring({"rest-b": "bad"}), replace(STEPPED, max_failures=1), T0, BAD)
    assert (result.phase, set(result.admit)) == ("Progressing", {"canary"})


# --- rollbacks ---------------------------------------------------------------------
# A rollback plans the revision rolled back to (TARGET here) with the revision rolled
# back from (BAD) as the halted one, as the CRS reconcile does (try_plan with
# halted=back), and rolling_back names it.

TOOK = {"canary", "early-a", "early-b"}  # took BAD (done there) before the rollback


def rollback_ring(states: Mapping[str, str]) -> list[ClusterState]:
    """RING with the clusters of TOOK on BAD, done, unless ``states`` moves them; the
    others on TARGET already (they never took BAD)."""
    return [
        replace(c, revision=BAD, done=True) if c.name in TOOK and c.name not in states else c
        for c in ring(dict.fromkeys(RING, "new") | dict(states))
    ]


@pytest.mark.parametrize(
    ("states", "admit", "phase", "message"),
    [
        pytest.param({}, {"canary"}, "Progressing",
                     "rolling back from r-bad: step 1/3: first the 3 clusters on halted "
                     "revision r-bad", id="start"),
        pytest.param({"canary": "going"}, set(), "Progressing",
                     "rolling back from r-bad: step 1/3: first the 2 clusters on halted "
                     "revision r-bad", id="one-at-a-time"),
        pytest.param({"canary": "new"}, {"early-a"}, "Progressing",
                     "rolling back from r-bad: step 2/3: first the 2 clusters on halted "
                     "revision r-bad", id="next-one"),
        pytest.param({"canary": "new", "early-a": "new", "early-b": "going"}, set(),
                     "Progressing", "rolling back from r-bad: step 2/3: 1 of 2 clusters updated",
                     id="last-one-not-ready"),
        pytest.param({"canary": "new", "early-a": "new", "early-b": "new"}, set(), "RolledBack",
                     "rolled back from r-bad to r-target", id="all-back"),
    ],
)  # fmt: skip
def test_a_rollback_goes_step_by_step_and_is_rolled_back_once_all_are_back(
    states: dict[str, str], admit: set[str], phase: str, message: str
) -> None:
    made = rolling_back(run(rollback_ring(states), STEPPED, halted=BAD), BAD, TARGET)
    assert (set(made.admit), made.phase, made.message) == (admit, phase, message)


def test_a_rollback_takes_the_clusters_on_the_revision_rolled_back_from_first() -> None:
    # rest-b (implicit last step) took BAD; canary (step 1) lags on an older revision.
    clusters = [
        replace(c, revision=BAD, done=True) if c.name == "rest-b" else c
        for c in ring({"canary": "old", "early-a": "new", "early-b": "new", "rest-a": "new",
                       "rest-c": "new"})
    ]  # fmt: skip
    made = rolling_back(run(clusters, STEPPED, halted=BAD), BAD, TARGET)
    assert (set(made.admit), made.phase) == ({"rest-b"}, "Progressing")
    later = [replace(c, revision=TARGET) if c.name == "rest-b" else c for c in clusters]
    made = rolling_back(run(later, STEPPED, halted=BAD), BAD, TARGET)
    assert (set(made.admit), made.phase) == ({"canary"}, "Progressing")


# --- soaks -------------------------------------------------------------------------

SOAKED = Policy(max_concurrent=1, steps=(replace(CANARY, pause_after=600), EARLY))


@pytest.mark.parametrize(
    ("now", "admit", "step", "message", "wake_after"),
    [
        pytest.param(T0, set(), 1, "soaking after step 1 until 10:12:00Z", 720.0, id="just-done"),
        pytest.param(T0 + timedelta(minutes=5), set(), 1, "soaking after step 1 until 10:12:00Z",
                     420.0, id="half-way"),
        pytest.param(T0 + timedelta(minutes=11, seconds=59.5), set(), 1,
                     "soaking after step 1 until 10:12:00Z", 0.5, id="almost"),
        pytest.param(T0 + timedelta(minutes=12), {"early-a"}, 2,
                     "step 2/3: 0 of 2 clusters updated", None, id="over"),
        pytest.param(T0 + timedelta(days=1), {"early-a"}, 2,
                     "step 2/3: 0 of 2 clusters updated", None, id="long-over"),
    ],
)  # fmt: skip
def test_soak_after_a_step_counts_from_its_latest_cluster(
    now: datetime, admit: set[str], step: int, message: str, wake_after: float | None
) -> None:
    clusters = [
        state("canary", "new", T0 - timedelta(hours=1), ring="canary"),
        state("canary-2", "new", T0 + timedelta(minutes=2), ring="canary"),
        state("canary-3", "new", None, ring="canary"),  # unknown: ignored
        *ring({}, leave=["canary"]),
    ]
    result = run(clusters, SOAKED, now=now)
    assert (result.phase, set(result.admit), result.step) == ("Progressing", admit, step)
    assert (result.message, result.wake_after) == (message, wake_after)


def test_a_soak_ending_another_day_shows_the_date() -> None:
    policy = Policy(steps=(replace(CANARY, pause_after=86_400), EARLY))
    result = run(ring({"canary": "new"}), policy, now=T0 + timedelta(hours=1))
    assert result.message == "soaking after step 1 until 2026-11-23T10:00:00Z"
    assert result.wake_after == 23 * 3600


def test_a_soak_with_no_time_known_does_not_hold_back() -> None:
    clusters = [state("canary", "new", None, ring="canary"), *ring({}, leave=["canary"])]
    assert run(clusters, SOAKED).admit == {"early-a"}


def test_a_soak_from_the_last_second_there_is_ends_then() -> None:
    last = datetime.max.replace(microsecond=0, tzinfo=UTC)  # 9999-12-31T23:59:59Z
    clusters = [state("canary", "new", last, ring="canary"), *ring({}, leave=["canary"])]
    result = run(clusters, SOAKED)
    assert result.message == "soaking after step 1 until 9999-12-31T23:59:59Z"
    assert result.wake_after == (datetime.max.replace(tzinfo=UTC) - T0).total_seconds()


def test_soak_times_in_other_zones_and_naive_times_are_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    clusters = [state("canary", "new", T0.astimezone(plus_two), ring="canary")]
    clusters += ring({}, leave=["canary"])
    result = run(clusters, SOAKED, now=(T0 + timedelta(minutes=4)).replace(tzinfo=None))
    assert (result.message, result.wake_after) == ("soaking after step 1 until 10:10:00Z", 360.0)


# --- complete and retries ----------------------------------------------------------


@pytest.mark.parametrize(
    ("clusters", "policy", "step"),
    [
        pytest.param(ring(dict.fromkeys(RING, "new")), STEPPED, 3, id="steps"),
        pytest.param(ring(dict.fromkeys(RING, "new")), replace(STEPPED, paused=True), 3,
                     id="complete-wins-over-paused"),
        pytest.param(ring(dict.fromkeys(RING, "new")), SOAKED, 3, id="no-soak-left-to-wait"),
        pytest.param(fleet(3, dict.fromkeys(range(3), "new")), Policy(), 1, id="no-steps"),
        pytest.param([], STEPPED, 3, id="no-clusters"),
    ],
)  # fmt: skip
def test_complete(clusters: list[ClusterState], policy: Policy, step: int) -> None:
    result = run(clusters, policy)
    assert (result.phase, set(result.admit), result.step) == ("Complete", set(), step)
    assert (result.updated, result.message, result.wake_after) == (len(clusters), "complete", None)


@pytest.mark.parametrize(
    ("policy", "words", "admit", "phase"),
    [
        pytest.param(Policy(max_failures=1), {1: "failed"}, names(0, 1, 2), "Progressing",
                     id="retried"),
        pytest.param(Policy(max_failures=1, max_concurrent=1), {0: "failed"}, names(1),
                     "Progressing", id="clusters-not-on-the-target-go-before-retries"),
        pytest.param(Policy(max_failures=1, max_concurrent=1), {0: "failed", 1: "new", 2: "new"},
                     names(0), "Progressing", id="retried-once-the-others-are-done"),
        pytest.param(Policy(max_failures=1, max_concurrent=1), {0: "failed", 1: "going", 2: "new"},
                     set(), "Progressing", id="retry-waits-for-a-slot"),
        pytest.param(Policy(max_failures=1, paused=True), {1: "failed"}, set(), "Paused",
                     id="not-while-paused"),
        pytest.param(Policy(), {1: "failed"}, set(), "Halted", id="not-while-halted"),
        pytest.param(Policy(max_failures=1), {1: "new"}, names(0, 2), "Progressing",
                     id="done-is-not-admitted-again"),
    ],
)  # fmt: skip
def test_retry_of_a_failed_cluster(
    policy: Policy, words: dict[int, str], admit: set[str], phase: str
) -> None:
    result = run(fleet(3, words), policy)
    assert (set(result.admit), result.phase) == (admit, phase)


def test_a_failed_cluster_keeps_its_step_from_being_done() -> None:
    result = run(ring({"canary": "failed"}), replace(STEPPED, max_failures=1))
    assert (set(result.admit), result.step) == ({"canary"}, 1)
    assert result.message == "step 1/3: 0 of 1 cluster updated, 1 failed"


def test_done_and_failed_at_once_counts_as_failed() -> None:
    clusters = [ClusterState("c1", {}, TARGET, True, True, T0)]
    result = run(clusters, Policy(max_failures=1))
    assert (result.phase, result.updated, set(result.admit)) == ("Progressing", 0, {"c1"})


def test_a_cluster_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="appears twice"):
        run([state("c1"), state("c1", "new")])


# --- properties --------------------------------------------------------------------

STEP_CHOICES = [
    (),
    (CANARY,),
    (CANARY, EARLY),
    (replace(CANARY, pause_after=600), EARLY),
    (Step({"matchLabels": {"ring": "nowhere"}}, 60), EARLY, replace(CANARY, pause_after=60)),
]
WORDS = [*STATES, "other"]  # "other": done on the revision that halted


@st.composite
def fleets(draw: st.DrawFn) -> list[ClusterState]:
    size = draw(st.integers(0, 12))
    clusters = []
    for i in range(size):
        word = draw(st.sampled_from(WORDS))
        since = draw(st.sampled_from([None, T0, T0 - timedelta(minutes=30)]))
        labels = draw(st.sampled_from([{}, {"ring": "canary"}, {"ring": "early"}]))
        if word == "other":
            clusters.append(ClusterState(f"c{i:02d}", labels, BAD, True, False, since))
        else:
            clusters.append(state(f"c{i:02d}", word, since, **labels))
    return clusters


counts = st.one_of(st.integers(0, 6), st.sampled_from(["0%", "10%", "25%", "50%", "100%"]))
policies = st.builds(
    Policy,
    max_concurrent=counts,
    steps=st.sampled_from(STEP_CHOICES),
    max_failures=counts,
    paused=st.booleans(),
)
times = st.sampled_from([T0, T0 + timedelta(minutes=5), T0 + timedelta(hours=1)])
halts = st.sampled_from([None, BAD, TARGET])


def step_of(cluster: ClusterState, steps: tuple[Step, ...]) -> int:
    matches = (i for i, step in enumerate(steps) if selector_matches(step.selector, cluster.labels))
    return next(matches, len(steps))


@given(fleets(), policies, times, halts)
def test_admitted_updates_never_exceed_max_concurrent(
    clusters: list[ClusterState], policy: Policy, now: datetime, halted: str | None
) -> None:
    result = plan(TARGET, clusters, policy, now, halted)
    limit = max(1, count(policy.max_concurrent, len(clusters), round_up=True))
    updating = [c for c in clusters if c.revision == TARGET and not c.done and not c.failed]
    updates = {c.name for c in clusters if c.revision is not None} & result.admit
    assert len(updates) <= max(0, limit - len(updating))


@given(fleets(), policies, times, halts)
def test_first_installs_are_always_admitted(
    clusters: list[ClusterState], policy: Policy, now: datetime, halted: str | None
) -> None:
    result = plan(TARGET, clusters, policy, now, halted)
    assert {c.name for c in clusters if c.revision is None} <= result.admit
    done = {c.name for c in clusters if c.revision == TARGET and c.done and not c.failed}
    assert not result.admit & done, "a cluster done on the target has nothing to do"


@given(fleets(), policies, times)
def test_no_cluster_of_a_later_step_while_an_earlier_one_is_not_done(
    clusters: list[ClusterState], policy: Policy, now: datetime
) -> None:
    result = plan(TARGET, clusters, policy, now)
    for cluster in clusters:
        if cluster.name not in result.admit or cluster.revision is None:
            continue
        step = step_of(cluster, policy.steps)
        earlier = [c for c in clusters if step_of(c, policy.steps) < step]
        assert all(c.revision == TARGET and c.done and not c.failed for c in earlier)
        assert step + 1 == result.step


@given(fleets(), policies, times, halts, st.data())
def test_the_plan_does_not_depend_on_the_order_of_the_clusters(
    clusters: list[ClusterState],
    policy: Policy,
    now: datetime,
    halted: str | None,
    data: st.DataObject,
) -> None:
    shuffled = data.draw(st.permutations(clusters))
    expected = plan(TARGET, clusters, policy, now, halted)
    assert plan(TARGET, shuffled, policy, now, halted) == expected


@pytest.mark.parametrize(
    ("clusters", "max_failures", "expect"),
    [
        pytest.param([("rev-bad", True), ("rev-ok", False)], 0, "rev-bad", id="over-the-limit"),
        pytest.param([("rev-bad", True), ("rev-ok", False)], 1, None, id="tolerated"),
        pytest.param([(TARGET, True), ("rev-ok", False)], 0, None, id="the-target-itself"),
        pytest.param([(None, True)], 0, None, id="never-applied"),
        pytest.param([("rev-bad", False), ("rev-ok", False)], 0, None, id="nothing-failed"),
        pytest.param(
            [("rev-b", True), ("rev-a", True), ("rev-b", True)], 0, "rev-b", id="most-failed"
        ),
        pytest.param([("rev-b", True), ("rev-a", True)], 0, "rev-a", id="then-by-name"),
    ],
)
def test_the_halted_revision_is_found_from_the_clusters(
    clusters: list[tuple[str | None, bool]], max_failures: int, expect: str | None
) -> None:
    policy = Policy(max_failures=max_failures)
    assert halted_revision(TARGET, clusters, policy) == expect
