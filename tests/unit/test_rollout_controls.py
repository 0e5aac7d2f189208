"""The rollout planner's controls: clusters that hold updates, manual approval of a
step, validation before a step is done, and change windows. Explicit times, no clock
read, nothing sleeps."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.core.rollout.plan import ClusterState, Plan, Policy, Step, plan
from crs_controller.core.rollout.windows import Window

T0 = datetime(2026, 11, 24, 10, 0, tzinfo=UTC)  # a Tuesday
OLD, TARGET = "r-old", "r-target"

CANARY = Step({"matchLabels": {"ring": "canary"}})
MANUAL = Step({"matchLabels": {"ring": "canary"}}, manual=True)
VALIDATED = Step({"matchLabels": {"ring": "canary"}}, validation=True)
MANUAL_REST = Step({"matchLabels": {"ring": "rest"}}, manual=True)


def cluster(
    name: str,
    revision: str | None = OLD,
    *,
    done: bool = True,
    failed: bool = False,
    ring: str = "rest",
    held: bool = False,
    validated: bool = False,
    since: datetime | None = T0,
) -> ClusterState:
    return ClusterState(name, {"ring": ring}, revision, done, failed, since, held, validated)


def run(
    clusters: list[ClusterState],
    policy: Policy,
    now: datetime = T0,
    approved: int | None = None,
) -> Plan:
    return plan(TARGET, clusters, policy, now, None, approved)


# -- clusters holding updates ------------------------------------------------------


def test_a_held_cluster_takes_no_new_revision_and_is_counted() -> None:
    made = run([cluster("a"), cluster("b", held=True)], Policy())
    assert made.admit == {"a"}
    assert made.held == 1


def test_a_held_cluster_still_gets_a_first_install() -> None:
    made = run([cluster("a", None, done=False, held=True)], Policy())
    assert made.admit == {"a"}


def test_the_rollout_is_complete_when_every_cluster_not_held_is_on_the_revision() -> None:
    made = run([cluster("a", TARGET), cluster("b", held=True)], Policy())
    assert (made.phase, made.held, made.updated) == ("Complete", 1, 1)


def test_a_held_cluster_does_not_keep_its_step_from_being_done() -> None:
    fleet = [
        cluster("canary-a", TARGET, ring="canary"),
        cluster("canary-b", ring="canary", held=True),
        cluster("rest-a"),
    ]
    made = run(fleet, Policy(steps=(CANARY,)))
    assert made.step == 2
    assert made.admit == {"rest-a"}


def test_a_cluster_that_stops_holding_goes_through_the_steps_again() -> None:
    fleet = [cluster("canary-a", ring="canary"), cluster("rest-a")]
    made = run(fleet, Policy(max_concurrent=1, steps=(CANARY,)))
    assert made.admit == {"canary-a"}


# -- manual approval -----------------------------------------------------------------


def test_a_manual_step_waits_for_approval_before_it_starts() -> None:
    fleet = [cluster("canary-a", ring="canary"), cluster("rest-a")]
    made = run(fleet, Policy(steps=(MANUAL,)))
    assert (made.phase, made.step, made.waiting_for) == ("AwaitingApproval", 1, "Approval")
    assert made.admit == frozenset()
    assert "awaits approval" in made.message


def test_an_approval_of_that_step_lets_it_start() -> None:
    fleet = [cluster("canary-a", ring="canary"), cluster("rest-a")]
    made = run(fleet, Policy(steps=(MANUAL,)), approved=1)
    assert (made.phase, made.admit) == ("Progressing", {"canary-a"})


def test_an_approval_of_another_step_does_not() -> None:
    fleet = [cluster("canary-a", ring="canary"), cluster("rest-a")]
    assert run(fleet, Policy(steps=(MANUAL,)), approved=2).phase == "AwaitingApproval"


def test_a_started_manual_step_goes_on_without_its_approval() -> None:
    """Once one of its clusters took the revision, a later approval (of the next
    step, say) does not stop it."""
    fleet = [
        cluster("canary-a", TARGET, done=False, ring="canary"),
        cluster("canary-b", ring="canary"),
    ]
    made = run(fleet, Policy(max_concurrent=2, steps=(MANUAL,)), approved=2)
    assert (made.phase, made.admit) == ("Progressing", {"canary-b"})


def test_first_installs_go_while_a_step_awaits_approval() -> None:
    fleet = [cluster("canary-a", ring="canary"), cluster("new", None, done=False)]
    made = run(fleet, Policy(steps=(MANUAL,)))
    assert (made.phase, made.admit) == ("AwaitingApproval", {"new"})


def test_a_manual_step_of_first_installs_only_asks_nothing() -> None:
    fleet = [cluster("canary-new", None, done=False, ring="canary"), cluster("rest-a")]
    made = run(fleet, Policy(steps=(MANUAL,)))
    assert made.phase == "Progressing"


def test_the_second_manual_step_asks_once_the_first_is_done() -> None:
    fleet = [cluster("canary-a", TARGET, ring="canary"), cluster("rest-a")]
    made = run(fleet, Policy(steps=(CANARY, MANUAL_REST)), approved=1)
    assert (made.phase, made.step) == ("AwaitingApproval", 2)


# -- validation ----------------------------------------------------------------------


def test_a_done_step_with_validation_asks_its_clusters_to_validate() -> None:
    fleet = [cluster("canary-a", TARGET, ring="canary"), cluster("rest-a")]
    made = run(fleet, Policy(steps=(VALIDATED,)))
    assert (made.step, made.waiting_for, made.validate) == (1, "Validation", {"canary-a"})
    assert made.admit == frozenset()  # the next step waits


def test_a_validated_step_lets_the_next_one_go() -> None:
    fleet = [cluster("canary-a", TARGET, ring="canary", validated=True), cluster("rest-a")]
    made = run(fleet, Policy(steps=(VALIDATED,)))
    assert (made.step, made.admit, made.validate) == (2, {"rest-a"}, frozenset())


def test_only_the_clusters_not_validated_yet_are_asked() -> None:
    fleet = [
        cluster("canary-a", TARGET, ring="canary", validated=True),
        cluster("canary-b", TARGET, ring="canary"),
        cluster("rest-a"),
    ]
    assert run(fleet, Policy(steps=(VALIDATED,))).validate == {"canary-b"}


def test_the_last_step_validates_before_the_rollout_is_complete() -> None:
    fleet = [cluster("canary-a", TARGET, ring="canary")]
    made = run(fleet, Policy(steps=(VALIDATED,)))
    assert (made.phase, made.validate) == ("Progressing", {"canary-a"})


def test_a_failed_validation_halts_like_an_unhealthy_cluster() -> None:
    fleet = [cluster("canary-a", TARGET, done=False, failed=True, ring="canary"), cluster("r")]
    made = run(fleet, Policy(steps=(VALIDATED,)))
    assert made.phase == "Halted"


def test_the_soak_of_a_validated_step_counts_from_the_callers_since() -> None:
    ended = T0 - timedelta(minutes=1)
    fleet = [
        cluster("canary-a", TARGET, ring="canary", validated=True, since=ended),
        cluster("rest-a"),
    ]
    step = replace(VALIDATED, pause_after=600.0)
    made = run(fleet, Policy(steps=(step,)))
    assert made.soaking
    assert made.wake_after == pytest.approx(540.0)


# -- windows -------------------------------------------------------------------------

NIGHT = Window("Allow", "0 22 * * *", 4 * 3600.0)  # 22:00-02:00 UTC
FREEZE = Window("Deny", "0 23 * * *", 1800.0)  # 23:00-23:30 UTC


def test_outside_the_windows_no_new_revision_starts_and_the_opening_is_said() -> None:
    made = run([cluster("a"), cluster("new", None, done=False)], Policy(windows=(NIGHT,)))
    opens = T0.replace(hour=22)
    assert made.admit == {"new"}  # first installs are never held
    assert (made.phase, made.waiting_for, made.next_window) == ("Progressing", "Window", opens)
    assert made.wake_after == pytest.approx((opens - T0).total_seconds())
    assert "22:00:00Z" in made.message


def test_inside_an_allow_window_the_rollout_goes_on() -> None:
    made = run([cluster("a")], Policy(windows=(NIGHT,)), now=T0.replace(hour=23, minute=45))
    assert (made.admit, made.waiting_for) == ({"a"}, None)


def test_a_deny_window_wins_inside_an_allow_window() -> None:
    now = T0.replace(hour=23, minute=10)
    made = run([cluster("a")], Policy(windows=(NIGHT, FREEZE)), now=now)
    assert made.admit == frozenset()
    assert made.next_window == T0.replace(hour=23, minute=30)


def test_a_closed_window_does_not_stop_a_validation() -> None:
    fleet = [cluster("canary-a", TARGET, ring="canary"), cluster("rest-a")]
    made = run(fleet, Policy(steps=(VALIDATED,), windows=(NIGHT,)))
    assert made.validate == {"canary-a"}


EARLY = Window("Allow", "0 2 * * *", 2 * 3600.0)  # 02:00-04:00 UTC


def test_inside_a_window_the_plan_is_made_again_when_it_closes() -> None:
    fleet = [cluster(f"c{i}") for i in range(3)]
    policy = Policy(max_concurrent=1, windows=(EARLY,))
    made = run(fleet, policy, now=T0.replace(hour=3, minute=59))
    assert (made.admit, made.wake_after) == ({"c0"}, 60.0)
    closed = run(fleet, policy, now=T0.replace(hour=4))
    assert (closed.admit, closed.waiting_for) == (frozenset(), "Window")


def test_a_deny_window_opening_wakes_the_plan_too() -> None:
    policy = Policy(windows=(Window("Deny", "0 9 * * *", 3600.0),))
    made = run([cluster("a")], policy, now=T0.replace(hour=8, minute=30))
    assert (made.admit, made.wake_after) == ({"a"}, 1800.0)


def test_a_soak_ending_before_the_window_closes_wakes_first() -> None:
    two = T0.replace(hour=2)
    fleet = [cluster("canary-a", TARGET, ring="canary", since=two), cluster("rest-a")]
    policy = Policy(steps=(replace(CANARY, pause_after=600.0),), windows=(EARLY,))
    made = run(fleet, policy, now=two)
    assert (made.soaking, made.wake_after) == (True, 600.0)


def test_complete_halted_and_paused_are_said_before_the_window() -> None:
    assert run([cluster("a", TARGET)], Policy(windows=(NIGHT,))).phase == "Complete"
    assert run([cluster("a")], Policy(windows=(NIGHT,), paused=True)).phase == "Paused"


# -- properties ----------------------------------------------------------------------

WORDS = st.sampled_from(["old", "new", "fresh", "held", "held-new"])


def _fleet(words: list[str]) -> list[ClusterState]:
    made = []
    for i, word in enumerate(words):
        revision = {"new": TARGET, "fresh": None, "held-new": TARGET}.get(word, OLD)
        done = word != "fresh"
        made.append(cluster(f"c{i}", revision, done=done, held=word.startswith("held")))
    return made


@given(st.lists(WORDS, max_size=12), st.booleans(), st.booleans())
def test_a_held_cluster_is_admitted_only_for_a_first_install(
    words: list[str], manual: bool, windowed: bool
) -> None:
    fleet = _fleet(words)
    policy = Policy(
        steps=(replace(MANUAL_REST, manual=manual),), windows=(NIGHT,) if windowed else ()
    )
    made = run(fleet, policy)
    held = {c.name for c in fleet if c.held and c.revision is not None}
    assert not made.admit & held
    assert made.held == sum(c.held for c in fleet)
    first_installs = {c.name for c in fleet if c.revision is None}
    assert first_installs <= made.admit
