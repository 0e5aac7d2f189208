"""Each CRS on each cluster reapplies and checks drift on its own period: the spec's
interval moved by a fixed offset of up to a tenth either way, from a hash of the pair,
so the clusters one wave applied are not due as one wave each interval. The offset is
the same in every process, never takes an interval under the 10s floor, and spreads
pairs over the whole range."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.core.spec.modes import (
    JITTER,
    MIN_INTERVAL_SECONDS,
    Durations,
    Reconcile,
    jittered,
    pair_spread,
)

from .builders import crs, reconcile, world_with
from .fake_clock import FakeClock

Request = tuple[str, str]  # verb, kind/name, as the in-memory cluster records them

names = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=63)
pairs = st.tuples(names, names, names)
intervals = st.floats(min_value=MIN_INTERVAL_SECONDS, max_value=10 * 365 * 86400)


def test_the_offset_is_fixed_for_a_pair_in_every_process() -> None:
    pair = ("default", "a", "c1")
    code = f"from crs_controller.core.spec.modes import pair_spread; print(pair_spread({pair!r}))"
    other = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert float(other) == pair_spread(pair)
    assert pair_spread(pair) == pytest.approx(-0.7770363)  # the same in every version


@given(pairs, intervals)
def test_a_pairs_interval_stays_within_a_tenth_and_above_the_floor(
    pair: tuple[str, str, str], interval: float
) -> None:
    moved = jittered(interval, pair)
    assert moved == jittered(interval, pair)
    assert interval * (1 - JITTER) <= moved <= interval  # never later than the interval
    assert moved >= MIN_INTERVAL_SECONDS


def test_names_split_differently_are_different_pairs() -> None:
    assert pair_spread(("ns", "ab", "c")) != pair_spread(("ns", "a", "bc"))


@settings(max_examples=30, deadline=None)
@given(names, names)
def test_the_clusters_of_a_set_spread_over_the_whole_range(namespace: str, name: str) -> None:
    spreads = [pair_spread((namespace, name, f"cluster-{i}")) for i in range(1000)]
    assert all(-1.0 <= s < 1.0 for s in spreads)
    tenths = [0] * 10
    for spread in spreads:
        tenths[int((spread + 1.0) * 5)] += 1
    assert min(tenths) >= 50 and max(tenths) <= 150, tenths  # 100 each when even


def test_a_pairs_strategy_moves_only_the_intervals() -> None:
    durations = Durations(reapply_interval=600.0, drift_check_interval=60.0, health_timeout=300)
    pair = ("default", "c", "c1")
    strategy = Reconcile(durations, "Generation").for_pair(pair)
    assert strategy.durations.reapply_interval == jittered(600.0, pair)
    assert strategy.drift.interval == jittered(60.0, pair)
    assert strategy.durations.health_timeout == 300
    assert strategy.drift.mode == "Generation"
    assert Reconcile(Durations()).for_pair(pair).durations.reapply_interval is None


async def _around(name: str, interval: float, **spec: str) -> tuple[list[Request], list[Request]]:
    """The workload requests of a pass a second before the pair of CRS ``name`` on c1
    is due, and of one a second after, counted from a first pass that applied (and
    checked drift)."""
    world = await world_with(crs(name, "src", **spec))
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    due = jittered(interval, ("default", name, "c1"))
    assert interval - due > interval / 12  # far enough from the interval to tell apart
    result = await reconcile(world)
    assert result.requeue_after == pytest.approx(due)
    clock = world.ctx.clock
    assert isinstance(clock, FakeClock)
    seen = []
    for step, left in ((due - 1, 1), (2, None)):
        clock.advance(step)
        workload.requests.clear()
        result = await reconcile(world)
        if left is not None:  # looked at the pair: not due yet
            assert result.requeue_after == pytest.approx(left)
        seen.append(list(workload.requests))
    return seen[0], seen[1]


@pytest.mark.parametrize("name", ["c", "x"])
async def test_a_drift_check_comes_at_the_pairs_own_interval(name: str) -> None:
    """``c`` on c1 is checked about 54.2 s after the last check, ``x`` about 54.5 s."""
    spec = {"driftDetection": "Generation", "driftCheckInterval": "1m"}
    before, after = await _around(name, 60.0, **spec)
    assert (before, after) == ([], [("list", "ConfigMap/default")])


@pytest.mark.parametrize("name", ["c", "x"])
async def test_an_interval_reapply_comes_at_the_pairs_own_interval(name: str) -> None:
    """``c`` on c1 is reapplied about 541.5 s after its apply, ``x`` about 544.7 s."""
    before, after = await _around(name, 600.0, reapplyInterval="10m")
    assert (before, after) == ([], [("apply", "ConfigMap/addon")])
