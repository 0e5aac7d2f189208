"""Generation drift: summing generations and deciding drift from the recorded sum."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.core.drift import generation_drift, generation_sum


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
