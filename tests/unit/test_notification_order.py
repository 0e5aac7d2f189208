"""A receiver's line (``core.notifications.line``) hands a CRS's notices on in the
order they came, and the last it hands on for a CRS is the newest: a receiver that
opens on ``RolloutHalted`` and closes on ``RolloutComplete`` ends showing the CRS's
state, whatever merging and dropping did on the way."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import example, given
from hypothesis import strategies as st

from crs_controller.core.notifications.line import Line
from crs_controller.core.notifications.payloads import Notice
from tests.unit.test_notification_floods import of

COMPLETE, HALTED = "RolloutComplete", "RolloutHalted"


def told(n: int, reason: str, namespace: str = "team-a", crs: str = "web") -> Notice:
    """The ``n``th notice told: revision ``r{n}``, on cluster ``c{n}``."""
    return of(namespace, crs, reason, f"c{n}", revision=f"r{n}")


def taken(line: Line) -> list[tuple[str, str, str | None]]:
    out = []
    while len(line):
        each = line.take()
        out.append((each.crs, each.reason, each.revision))
    return out


def test_a_crs_that_halted_after_a_completion_ends_on_its_newer_completion() -> None:
    line = Line(100)
    line.add(told(1, COMPLETE))
    line.add(told(2, HALTED))
    assert line.add(told(3, COMPLETE)) is None
    assert taken(line) == [("web", HALTED, "r2"), ("web", COMPLETE, "r3")]


def test_a_merged_notice_moved_on_still_names_the_clusters_of_both() -> None:
    line = Line(100)
    line.add(told(1, COMPLETE))
    line.add(told(2, HALTED))
    line.add(told(3, COMPLETE))
    line.take()
    assert line.take().clusters == ("c1", "c3")


def test_a_repeat_that_is_its_crs_newest_keeps_its_place_before_other_crss() -> None:
    line = Line(100)
    line.add(told(1, HALTED))
    line.add(told(2, HALTED, crs="db"))
    line.add(told(3, HALTED))
    assert taken(line) == [("web", HALTED, "r3"), ("db", HALTED, "r2")]


def test_a_flapping_crs_holds_one_place_per_reason_and_pushes_out_no_other_tenant() -> None:
    line = Line(3)
    line.add(told(0, HALTED, namespace="team-b", crs="quiet"))
    for n in range(1, 1000):
        assert line.add(told(n, (COMPLETE, HALTED)[n % 2])) is None
    assert taken(line) == [
        ("quiet", HALTED, "r0"),
        ("web", COMPLETE, "r998"),
        ("web", HALTED, "r999"),
    ]


CRSS = [("team-a", "web"), ("team-a", "db"), ("team-b", "web")]
REASONS = [COMPLETE, HALTED, "RolloutRolledBack"]
steps = st.lists(
    st.one_of(st.none(), st.tuples(st.sampled_from(CRSS), st.sampled_from(REASONS))),
    max_size=40,
)


@given(st.integers(min_value=1, max_value=6), steps)
@example(6, [(CRSS[0], COMPLETE), (CRSS[0], HALTED), (CRSS[0], COMPLETE)])
def test_a_crs_is_told_in_order_and_ends_on_its_newest(
    limit: int, sequence: list[tuple[tuple[str, str], str] | None]
) -> None:
    """Any notices, any line bound, taken at any moment (``None``): for each CRS,
    what is taken comes in the order told, and the last taken is the newest told
    unless the line dropped that one."""
    line = Line(limit)
    delivered: dict[tuple[str, str], list[int]] = defaultdict(list)
    newest: dict[tuple[str, str], int] = {}
    dropped: set[int] = set()

    def take() -> None:
        each = line.take()
        delivered[each.namespace, each.crs].append(int((each.revision or "")[1:]))

    for n, step in enumerate(sequence):
        if step is None:
            if len(line):
                take()
            continue
        (namespace, crs), reason = step
        newest[namespace, crs] = n
        out = line.add(told(n, reason, namespace, crs))
        if out is not None:
            dropped.add(int((out.revision or "")[1:]))
        assert len(line) <= limit
    while len(line):
        take()
    for subject, last in newest.items():
        assert delivered[subject] == sorted(set(delivered[subject]))
        if last not in dropped:
            assert delivered[subject][-1] == last


def flapping_share(ticks: int = 400) -> tuple[int, int]:
    """A receiver taking one notice every 2 ticks behind a backlog of 20 from other
    tenants, which keep coming as fast as it takes; CRS team-a/web changes reason
    every 5 ticks. (notices of team-a/web sent, notices sent)."""
    line = Line(100)
    others = 0

    def other() -> None:
        nonlocal others
        others += 1
        line.add(told(others, HALTED, namespace=f"tenant-{others}", crs="app"))

    for _ in range(20):
        other()
    sent = flapping = 0
    for tick in range(ticks):
        if tick % 5 == 0:
            line.add(told(tick, (COMPLETE, HALTED)[tick // 5 % 2]))
        if tick % 2 == 0:
            other()
            each = line.take()
            sent += 1
            flapping += (each.namespace, each.crs) == ("team-a", "web")
    return flapping, sent


def test_a_crs_told_faster_than_the_receiver_takes_is_still_sent() -> None:
    """Each change merges into the CRS's waiting notice of that reason: moved behind
    every other tenant's each time, it would never be sent at all. Its places move up
    as the line is taken, so it is sent at least once per trip through the line (20
    others and its own 2: 22 sends)."""
    flapping, sent = flapping_share()
    assert sent == 200
    assert flapping >= sent // 22, flapping
