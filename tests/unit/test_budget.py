"""The fleet-wide budget of clusters taking a new revision at once
(``engine.memory.budget``): a cluster counts once however many CRSs it updates, the
line goes by rollout step and then by age, withdrawing and forgetting free places,
and a changed limit takes no place back. Properties: never more holders than the
limit, every waiter granted as holders finish, and a woken cluster is granted when it
asks next."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from crs_controller.engine.memory.budget import Budget, ClusterKey

from .fake_clock import FakeClock


def c(name: str) -> ClusterKey:
    return ("fleet", name)


def test_without_a_limit_every_ask_is_granted_and_only_holders_are_counted() -> None:
    budget = Budget(None, FakeClock())
    assert all(budget.ask(c(f"c{i}"), "cni", step=0) for i in range(50))
    assert (budget.updating, budget.waiting) == (50, 0)
    assert budget.release(c("c0"), "cni") == ()
    assert budget.updating == 49


def test_with_one_place_the_second_cluster_waits_and_is_woken_when_the_first_is_done() -> None:
    budget = Budget(1, FakeClock())
    assert budget.ask(c("a"), "cni", step=0)
    assert not budget.ask(c("b"), "cni", step=0)
    assert not budget.ask(c("b"), "cni", step=0)  # asking again changes nothing
    assert (budget.updating, budget.waiting) == (1, 1)
    assert budget.release(c("a"), "cni") == (c("b"),)
    assert budget.ask(c("b"), "cni", step=0)
    assert (budget.updating, budget.waiting) == (1, 0)


def test_a_cluster_updating_for_two_crss_holds_one_place() -> None:
    budget = Budget(1, FakeClock())
    assert budget.ask(c("a"), "cni", step=0)
    assert budget.ask(c("a"), "csi", step=3)  # its own place: at once, whatever the step
    assert not budget.ask(c("b"), "cni", step=0)
    assert budget.updating == 1
    assert budget.release(c("a"), "cni") == ()  # still updating for csi
    assert budget.release(c("a"), "csi") == (c("b"),)


@pytest.mark.parametrize(
    ("asks", "order"),
    [
        # (cluster, step) asked one second apart -> the order in which they go
        ([("old", 2), ("new", 1)], ["new", "old"]),  # the step beats age
        ([("old", 1), ("new", 1)], ["old", "new"]),  # age breaks ties within a step
        ([("x", 1), ("y", 0), ("z", 1), ("w", 0)], ["y", "w", "x", "z"]),
    ],
)
def test_the_line_goes_by_rollout_step_then_by_first_ask(
    asks: list[tuple[str, int]], order: list[str]
) -> None:
    clock = FakeClock()
    budget = Budget(1, clock)
    assert budget.ask(c("holder"), "cni", step=0)
    for name, step in asks:
        clock.advance(1)
        assert not budget.ask(c(name), "cni", step)
    went = []
    holder = c("holder")
    while budget.waiting:
        (woken,) = budget.release(holder, "cni")
        step = dict(asks)[woken[1]]
        assert budget.ask(woken, "cni", step)
        went.append(woken[1])
        holder = woken
    assert went == order


def test_a_free_place_is_kept_for_the_first_in_line() -> None:
    clock = FakeClock()
    budget = Budget(1, clock)
    budget.ask(c("holder"), "cni", step=0)
    for name in ("first", "second"):
        clock.advance(1)
        budget.ask(c(name), "cni", step=0)
    assert budget.release(c("holder"), "cni") == (c("first"),)
    assert not budget.ask(c("second"), "cni", step=0)  # its reconcile came first
    assert not budget.ask(c("third"), "cni", step=0)
    assert budget.ask(c("first"), "cni", step=0)


def test_asks_in_one_clock_tick_queue_in_the_order_they_came() -> None:
    budget = Budget(1, FakeClock())
    budget.ask(c("holder"), "cni", step=0)
    for name in ("m", "z", "a"):
        budget.ask(c(name), "cni", step=0)
    assert budget.release(c("holder"), "cni") == (c("m"),)


def test_a_waiter_keeps_its_first_ask_when_its_step_changes() -> None:
    clock = FakeClock()
    budget = Budget(1, clock)
    budget.ask(c("holder"), "cni", step=0)
    budget.ask(c("a"), "cni", step=2)
    clock.advance(1)
    budget.ask(c("b"), "cni", step=1)
    clock.advance(1)
    assert not budget.ask(c("a"), "cni", step=1)  # now b's step, and older than b
    assert budget.release(c("holder"), "cni") == (c("a"),)


def test_a_waiter_moved_back_in_line_wakes_those_now_ahead_of_it() -> None:
    woken: list[ClusterKey] = []
    budget = Budget(1, FakeClock(), wake=lambda ns, name: woken.append((ns, name)))
    budget.ask(c("holder"), "cni", step=1)
    budget.ask(c("a"), "cni", step=1)
    budget.ask(c("b"), "cni", step=2)
    assert budget.release(c("holder"), "cni") == (c("a"),)
    # Asking again at a later step (its rollout's plan known now), it waits behind b.
    assert not budget.ask(c("a"), "cni", step=3)
    assert woken[-1] == c("b") and budget.may_go(c("b"))
    assert budget.ask(c("b"), "cni", step=2)


def test_a_cluster_waits_at_the_place_of_its_most_urgent_crs() -> None:
    clock = FakeClock()
    budget = Budget(1, clock)
    budget.ask(c("holder"), "cni", step=0)
    budget.ask(c("a"), "cni", step=2)
    budget.ask(c("b"), "cni", step=1)
    budget.ask(c("a"), "csi", step=0)
    assert budget.waiting == 2
    assert budget.release(c("holder"), "cni") == (c("a"),)
    assert budget.ask(c("a"), "cni", step=2)  # the cluster's place serves every CRS
    assert budget.ask(c("a"), "csi", step=0)


def test_a_withdrawn_waiter_leaves_the_line() -> None:
    clock = FakeClock()
    budget = Budget(1, clock)
    budget.ask(c("holder"), "cni", step=0)
    for name in ("a", "b", "d"):
        clock.advance(1)
        budget.ask(c(name), "cni", step=0)
    assert budget.release(c("a"), "cni") == ()  # no place is free: nobody to wake
    assert budget.waiting == 2
    assert budget.release(c("holder"), "cni") == (c("b"),)
    # b is woken but no longer needs the revision: the next in line is woken instead.
    assert budget.release(c("b"), "cni") == (c("d"),)
    assert budget.ask(c("d"), "cni", step=0)


def test_releasing_a_pair_that_holds_and_waits_for_nothing_changes_nothing() -> None:
    budget = Budget(1, FakeClock())
    budget.ask(c("holder"), "cni", step=0)
    budget.ask(c("a"), "cni", step=0)
    assert budget.release(c("a"), "csi") == ()
    assert budget.release(c("nobody"), "cni") == ()
    assert (budget.updating, budget.waiting) == (1, 1)


def test_a_forgotten_cluster_frees_its_place_and_leaves_the_line() -> None:
    clock = FakeClock()
    budget = Budget(1, clock)
    budget.ask(c("holder"), "cni", step=0)
    budget.ask(c("holder"), "csi", step=0)
    for name in ("a", "b"):
        clock.advance(1)
        budget.ask(c(name), "cni", step=0)
        budget.ask(c(name), "csi", step=0)
    assert budget.forget_cluster(c("a")) == ()  # a waiter: no place frees
    assert budget.forget_cluster(c("holder")) == (c("b"),)  # every CRS at once
    assert budget.forget_cluster(c("holder")) == ()
    assert (budget.updating, budget.waiting) == (0, 1)


def test_raising_the_limit_wakes_as_many_waiters_as_places_opened() -> None:
    clock = FakeClock()
    budget = Budget(1, clock)
    budget.ask(c("holder"), "cni", step=0)
    for name in ("a", "b", "d"):
        clock.advance(1)
        budget.ask(c(name), "cni", step=0)
    assert budget.set_limit(3) == (c("a"), c("b"))
    assert budget.ask(c("b"), "cni", step=0) and budget.ask(c("a"), "cni", step=0)
    assert not budget.ask(c("d"), "cni", step=0)
    assert budget.set_limit(None) == (c("d"),)
    assert budget.ask(c("d"), "cni", step=0)
    assert (budget.updating, budget.waiting) == (4, 0)


def test_lowering_the_limit_takes_no_place_back_and_new_clusters_wait_until_under_it() -> None:
    budget = Budget(3, FakeClock())
    for name in ("a", "b", "d"):
        assert budget.ask(c(name), "cni", step=0)
    assert budget.set_limit(1) == ()
    assert budget.updating == 3
    assert budget.ask(c("a"), "csi", step=0)  # a holder goes on, for any CRS
    assert not budget.ask(c("new"), "cni", step=0)
    assert budget.release(c("a"), "cni") == ()
    assert budget.release(c("a"), "csi") == ()
    assert budget.release(c("b"), "cni") == ()  # one holder left: still at the limit
    assert budget.release(c("d"), "cni") == (c("new"),)


@pytest.mark.parametrize("limit", [0, -1])
def test_a_limit_below_one_is_refused(limit: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Budget(limit, FakeClock())
    with pytest.raises(ValueError, match="at least 1"):
        Budget(1, FakeClock()).set_limit(limit)


@settings(max_examples=60, deadline=None)
@given(
    limit=st.integers(1, 3),
    steps=st.lists(st.integers(0, 3), min_size=1, max_size=8),
    newcomers=st.booleans(),
)
def test_every_waiter_is_granted_as_holders_finish(
    limit: int, steps: list[int], newcomers: bool
) -> None:
    """Each round one holder finishes and the woken clusters ask again. Newcomers of
    the latest step keep arriving, and still every waiter goes within one round each,
    in rollout-step order, oldest first."""
    clock = FakeClock()
    budget = Budget(limit, clock)
    holders = [c(f"h{i}") for i in range(limit)]
    assert all(budget.ask(holder, "cni", step=0) for holder in holders)
    waiters = {c(f"w{i}"): step for i, step in enumerate(steps)}
    for waiter, step in waiters.items():
        clock.advance(1)
        assert not budget.ask(waiter, "cni", step)
    latest = max(steps)
    went: list[ClusterKey] = []
    for round_ in range(len(waiters)):
        clock.advance(1)
        if newcomers:
            assert not budget.ask(c(f"n{round_}"), "cni", latest)
        woken_now = budget.release(holders.pop(0), "cni")
        behind = [w for w in waiters if w not in went and w not in woken_now]
        for waiter in behind:  # those behind may ask first: the place waits for its own
            assert not budget.ask(waiter, "cni", waiters[waiter])
        for woken in woken_now:
            assert budget.ask(woken, "cni", waiters[woken])
            holders.append(woken)
            went.append(woken)
    assert went == sorted(waiters, key=lambda waiter: waiters[waiter])  # a stable sort: age
    assert budget.waiting == (len(waiters) if newcomers else 0)


CLUSTERS = [c(f"c{i}") for i in range(5)]
CRSS = ["cni", "csi", "dns"]
LIMITS = st.one_of(st.none(), st.integers(1, 4))


class BudgetMachine(RuleBasedStateMachine):
    """Random asks, releases, forgets and limit changes against a model of who holds
    and who waits (not of the order: the properties check that)."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.budget = Budget(None, self.clock)
        self.limit: int | None = None
        self.held: dict[ClusterKey, set[str]] = {}
        self.waits: dict[ClusterKey, dict[str, int]] = {}  # cluster -> CRS -> latest step
        self.woken: list[ClusterKey] = []  # told to go, and nobody else asked since
        self.holders_at_limit_change = 0

    @initialize(limit=st.integers(1, 3))
    def start(self, limit: int) -> None:
        self.budget = Budget(limit, self.clock)
        self.limit = limit

    @rule(
        cluster=st.sampled_from(CLUSTERS),
        crs=st.sampled_from(CRSS),
        step=st.integers(0, 2),
        tick=st.sampled_from([0.0, 1.0]),
    )
    def ask(self, cluster: ClusterKey, crs: str, step: int, tick: float) -> None:
        self.clock.advance(tick)
        self.woken = []
        self._asked(cluster, crs, step)

    @rule()
    def woken_asks(self) -> None:
        if not self.woken:
            return
        cluster = self.woken.pop(0)
        crs, step = next(iter(self.waits[cluster].items()))
        assert self._asked(cluster, crs, step), "a woken cluster is granted when it asks"

    @rule(cluster=st.sampled_from(CLUSTERS), crs=st.sampled_from(CRSS))
    def release(self, cluster: ClusterKey, crs: str) -> None:
        known = crs in self.held.get(cluster, ()) or crs in self.waits.get(cluster, {})
        woken = self.budget.release(cluster, crs)
        if not known:
            assert woken == ()
        self.held.get(cluster, set()).discard(crs)
        self.waits.get(cluster, {}).pop(crs, None)
        for pairs in (self.held, self.waits):
            if cluster in pairs and not pairs[cluster]:
                del pairs[cluster]
        self._told(woken)

    @rule(cluster=st.sampled_from(CLUSTERS))
    def forget(self, cluster: ClusterKey) -> None:
        woken = self.budget.forget_cluster(cluster)
        self.held.pop(cluster, None)
        self.waits.pop(cluster, None)
        self._told(woken)

    @rule(limit=LIMITS)
    def set_limit(self, limit: int | None) -> None:
        self.limit = limit
        self.holders_at_limit_change = len(self.held)
        self._told(self.budget.set_limit(limit))

    @invariant()
    def counts_match_the_model(self) -> None:
        assert self.budget.updating == len(self.held)
        assert self.budget.waiting == len(self.waits)
        assert not self.held.keys() & self.waits.keys()

    @invariant()
    def never_more_holders_than_the_limit(self) -> None:
        # Lowering the limit takes no place back; nobody new goes while over it.
        if self.limit is not None:
            assert self.budget.updating <= max(self.limit, self.holders_at_limit_change)

    def teardown(self) -> None:
        for cluster in CLUSTERS:
            self.budget.forget_cluster(cluster)
        assert (self.budget.updating, self.budget.waiting) == (0, 0)
        # Nothing is kept for pairs that are gone.
        leftovers = [v for v in vars(self.budget).values() if isinstance(v, dict | list | set)]
        assert not any(leftovers)

    def _asked(self, cluster: ClusterKey, crs: str, step: int) -> bool:
        holding = cluster in self.held
        others_waiting = len(self.waits.keys() - {cluster})
        granted = self.budget.ask(cluster, crs, step)
        if holding:
            assert granted
        elif granted:
            assert self.limit is None or len(self.held) < self.limit
        else:
            # Refused only for lack of places, or for those ahead in line.
            assert self.limit is not None
            assert others_waiting >= self.limit - len(self.held)
        if granted:
            self.held.setdefault(cluster, set()).add(crs)
            self.waits.pop(cluster, None)
        else:
            self.waits.setdefault(cluster, {})[crs] = step
        return granted

    def _told(self, woken: tuple[ClusterKey, ...]) -> None:
        assert len(set(woken)) == len(woken)
        assert set(woken) <= self.waits.keys(), "only waiting clusters are woken"
        if self.limit is not None:
            assert len(woken) <= max(self.limit - len(self.held), 0)
        self.woken = list(woken)


TestBudgetMachine = BudgetMachine.TestCase
TestBudgetMachine.settings = settings(max_examples=150, stateful_step_count=50, deadline=None)


def test_may_go_says_what_the_next_ask_would_answer_and_changes_nothing() -> None:
    budget = Budget(1, FakeClock())
    a, b, c = ("ns", "a"), ("ns", "b"), ("ns", "c")
    assert budget.may_go(a)  # a place is free
    assert budget.ask(a, "web", 1)
    assert budget.may_go(a)  # it holds one, for another CRS too
    assert not budget.may_go(b)
    assert not budget.ask(b, "web", 1)
    assert not budget.ask(c, "web", 1)
    budget.release(a, "web")
    assert budget.may_go(b)  # first in line for the freed place
    assert not budget.may_go(c)
    assert (budget.updating, budget.waiting) == (0, 2)  # asking is what takes it
    assert Budget(None, FakeClock()).may_go(c)
