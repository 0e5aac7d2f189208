"""The ``--max-updating-clusters`` budget shared between namespaces
(``engine.memory.budget``): each namespace waits in a line of its own (rollout step,
then age) and namespaces take turns for the places, the one holding fewest first, so
one tenant's thousands of waiters never stand between another tenant and the next
free place. A holder that keeps failing gives its place back after ``FAILING_HOLD``
while its namespace holds more than its share and another namespace waits; the
reconcile's failed pass is what tells the budget (``ClusterScope.settle``).
Properties: each place goes to a waiting namespace holding no more than any other,
and within a namespace in line order."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.core.state.status import Outcome
from crs_controller.engine.memory.budget import FAILING_HOLD, Budget, ClusterKey
from crs_controller.engine.reconcile.admission import BudgetExhausted, Go, Held
from crs_controller.engine.reconcile.scope import CRSPass

from .fake_clock import FakeClock
from .memory_kube import Woken
from .test_admission import NS, admit_c1, edited_world, scope_of


def test_one_tenants_ten_thousand_waiters_stand_not_before_another_tenants_cluster() -> None:
    clock = FakeClock()
    budget = Budget(10, clock)
    for n in range(10):
        assert budget.ask(("a", f"c-{n}"), "set", 0)
    for n in range(10, 10_010):
        assert not budget.ask(("a", f"c-{n}"), "set", 0)
    clock.advance(1)
    assert not budget.ask(("b", "only"), "other", 0)
    assert not budget.may_go(("b", "only"))  # no place free
    assert budget.release(("a", "c-0"), "set") == (("b", "only"),)  # the next place
    assert not budget.ask(("a", "c-10"), "set", 0)  # a's first waiter asks first: no
    assert budget.ask(("b", "only"), "other", 0)


def test_a_newcomer_at_an_earlier_step_does_not_overtake_another_namespace() -> None:
    clock = FakeClock()
    budget = Budget(1, clock)
    assert budget.ask(("a", "x"), "set", 0)
    assert not budget.ask(("b", "only"), "other", 1)
    clock.advance(1)
    assert not budget.ask(("a", "late"), "set", 0)
    assert budget.release(("a", "x"), "set") == (("b", "only"),)
    assert budget.ask(("b", "only"), "other", 1)
    # Within a namespace the rollout step still goes first.
    assert not budget.ask(("a", "later"), "set", 1)
    clock.advance(1)
    assert not budget.ask(("a", "earliest-step"), "set", 0)
    assert budget.release(("b", "only"), "other") == (("a", "late"),)


def test_namespaces_take_turns_and_each_keeps_its_line_order() -> None:
    clock = FakeClock()
    budget = Budget(2, clock)
    assert budget.ask(("h", "0"), "s", 0) and budget.ask(("h", "1"), "s", 0)
    for namespace, count in (("a", 4), ("b", 2), ("c", 1)):
        for n in range(count):
            clock.advance(1)
            assert not budget.ask((namespace, f"{namespace}{n}"), "s", 3 - n)  # later: earlier step
    went, holders = [], [("h", "0"), ("h", "1")]
    while budget.waiting:
        woken = budget.release(holders.pop(0), "s")
        for cluster in woken:
            assert budget.ask(cluster, "s", 0)
        went += woken
        holders += woken
    names = [name for _, name in went]
    assert names == ["a3", "b1", "c0", "a2", "b0", "a1", "a0"]


def test_a_failing_holder_keeps_its_place_until_the_bound_then_gives_it_to_another_tenant() -> None:
    clock = FakeClock()
    budget = Budget(10, clock)
    failing = [("a", f"c-{n}") for n in range(10)]
    assert all(budget.ask(cluster, "set", 0) for cluster in failing)
    assert not budget.ask(("a", "more"), "set", 0)
    assert not budget.ask(("b", "only"), "other", 0)
    assert not budget.ask(("b", "two"), "other", 0)
    for cluster in failing:
        assert budget.failed(cluster, "set") == ()  # its first failure: kept
    clock.advance(FAILING_HOLD - 1)
    assert [budget.failed(cluster, "set") for cluster in failing] == [()] * 10
    clock.advance(1)
    woken = []
    for cluster in failing:
        woken.append(budget.failed(cluster, "set"))
        assert all(budget.ask(w, "other", 0) for w in woken[-1])  # the woken ask at once
    # Given back while b waits, each to b: then only a's own cluster waits.
    assert woken == [(("b", "only"),), (("b", "two"),)] + [()] * 8
    assert budget.updating == 10
    # The failing clusters that gave their place back ask again on their retry: wait.
    assert not budget.ask(failing[0], "set", 0)
    assert budget.release(("b", "only"), "other") == (("a", "more"),)  # a's order


def test_a_failing_tenant_comes_down_to_its_share_while_another_waits() -> None:
    clock = FakeClock()
    budget = Budget(4, clock)
    failing = [("a", f"c-{n}") for n in range(4)]
    assert all(budget.ask(cluster, "set", 0) for cluster in failing)
    for n in range(10):
        assert not budget.ask(("b", f"w-{n}"), "other", 0)
    for cluster in failing:
        budget.failed(cluster, "set")
    clock.advance(FAILING_HOLD)
    for cluster in failing:
        for w in budget.failed(cluster, "set"):
            assert budget.ask(w, "other", 0)
    assert budget.updating == 4
    assert [budget.failed(cluster, "set") for cluster in failing[2:]] == [(), ()]  # its share
    assert budget.pairs(failing[2]) == {"set"} and budget.pairs(failing[0]) == frozenset()


def failing_holder(waiter: ClusterKey) -> tuple[FakeClock, Budget]:
    """One place, held by ("a", "x") whose pass just failed; ``waiter`` waits."""
    clock = FakeClock()
    budget = Budget(1, clock)
    assert budget.ask(("a", "x"), "set", 0)
    assert not budget.ask(waiter, "set", 0)
    assert budget.failed(("a", "x"), "set") == ()
    return clock, budget


def test_a_failing_holder_keeps_its_place_while_only_its_own_namespace_waits() -> None:
    clock, budget = failing_holder(("a", "y"))
    clock.advance(10 * FAILING_HOLD)
    assert budget.failed(("a", "x"), "set") == ()
    assert budget.updating == 1 and not budget.may_go(("a", "y"))


def test_a_holder_that_goes_on_between_failures_starts_counting_again() -> None:
    clock, budget = failing_holder(("b", "y"))
    clock.advance(FAILING_HOLD - 1)
    budget.going(("a", "x"))  # applied, waiting to become Ready
    clock.advance(2)
    assert budget.failed(("a", "x"), "set") == ()
    clock.advance(FAILING_HOLD)
    assert budget.failed(("a", "x"), "set") == (("b", "y"),)


async def test_a_pass_failing_for_long_gives_the_place_to_a_cluster_of_another_namespace() -> None:
    woken = Woken()
    world = await edited_world(budget=1, wake=woken)
    budget, the_crs = world.ctx.budget, world.index.crs(NS, "a")
    assert the_crs is not None and isinstance(await admit_c1(world), Go)
    other: ClusterKey = ("tenant-2", "x")
    assert not budget.ask(other, "x", 1)
    failed = Outcome("Failed", "ApplyFailed", "the server refused the update", 1)
    scope = scope_of(world, "c1")
    scope.settle(the_crs, CRSPass(scope.kept("a"), failed))
    assert budget.updating == 1 and not woken
    world.ctx.clock.advance(FAILING_HOLD)  # type: ignore[attr-defined]
    scope.settle(the_crs, CRSPass(scope.kept("a"), failed))
    assert woken == [other] and budget.ask(other, "x", 1)
    assert await admit_c1(world) == Held(BudgetExhausted(1), 1)  # its retry waits
    assert budget.updating == 1


WAITERS = st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 2)), max_size=20)


@settings(max_examples=100, deadline=None)
@given(limit=st.integers(1, 4), waiters=WAITERS, first=st.sampled_from("abc"))
def test_each_place_goes_to_a_namespace_holding_no_more_than_another_waiting_one(
    limit: int, waiters: list[tuple[str, int]], first: str
) -> None:
    clock = FakeClock()
    budget = Budget(limit, clock)
    holders = [(first, f"h{n}") for n in range(limit)]
    assert all(budget.ask(holder, "s", 0) for holder in holders)
    lines: dict[str, list[tuple[int, int, ClusterKey]]] = {}
    for n, (namespace, step) in enumerate(waiters):
        clock.advance(1)
        cluster = (namespace, f"w{n}")
        assert not budget.ask(cluster, "s", step)
        lines.setdefault(namespace, []).append((step, n, cluster))
    for line in lines.values():
        line.sort()
    held = Counter(namespace for namespace, _ in holders)
    while budget.waiting:
        gone = holders.pop(0)
        held[gone[0]] -= 1
        for cluster in budget.release(gone, "s"):
            waiting = [ns for ns, line in lines.items() if line]
            assert held[cluster[0]] == min(held[ns] for ns in waiting)
            assert lines[cluster[0]].pop(0)[2] == cluster  # its line's order
            assert budget.ask(cluster, "s", 0)
            held[cluster[0]] += 1
            holders.append(cluster)
