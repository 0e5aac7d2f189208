"""What a reconcile asks of the runtime (``engine.reconcile.result``): Results fold
with ``|`` (the earlier requeue, a retry if either asks, every key woken), and the
fold is associative and commutative with ``Result()`` as its identity, so the order
in which a pass gathers its parts never changes what happens next."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.engine.reconcile.result import (
    NOTHING,
    RETRY,
    Result,
    Wake,
    cluster_key,
    crs_key,
)

A, B = Wake(cluster_key("n", "a")), Wake(crs_key("n", "cni"), 2.0)


@pytest.mark.parametrize(
    ("left", "right", "expect"),
    [
        pytest.param(NOTHING, NOTHING, NOTHING, id="nothing"),
        pytest.param(Result.after(5), Result.after(2), Result.after(2), id="earliest-requeue"),
        pytest.param(Result.after(5), NOTHING, Result.after(5), id="none-is-no-requeue"),
        pytest.param(RETRY, Result.after(1), Result(1, True), id="retry-if-either"),
        pytest.param(
            Result.waking(A), Result.waking(B), Result(wake=frozenset({A, B})), id="union-of-wake"
        ),
    ],
)
def test_results_fold(left: Result, right: Result, expect: Result) -> None:
    assert left | right == expect


wakes = st.builds(
    Wake,
    st.tuples(st.sampled_from(["cluster", "crs"]), st.just("n"), st.sampled_from("abc")),
    st.sampled_from([0.0, 1.0, 2.0]),
)
results = st.builds(
    Result,
    st.none() | st.floats(0, 100),
    st.booleans(),
    st.frozensets(wakes, max_size=3),
)


@given(results, results, results)
def test_the_fold_is_associative_and_commutative(a: Result, b: Result, c: Result) -> None:
    assert (a | b) | c == a | (b | c)
    assert a | b == b | a
    assert a | NOTHING == a
