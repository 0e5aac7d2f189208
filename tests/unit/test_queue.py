"""The work queue (``WorkQueue``): de-duplication of queued keys, re-processing of a
key added while it is being processed, exponential per-key backoff with a cap and
``forget``, delayed delivery with ``add_after``, and one worker per key at a time while
different keys run concurrently.

Time is a ``FakeClock`` moved by hand, and what is ready is read synchronously
(``ready_keys``, ``get_nowait``, ``fire_due``), so no test waits on real time and
absence is a statement about the queue's state, not "nothing came within 50 ms".
``within`` bounds only waits for something that must arrive.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.engine.io.waiting import LoopClock
from crs_controller.engine.runtime.queue import WorkQueue
from tests.unit.fake_clock import FakeClock

T = TypeVar("T")

# A safety net for what must arrive; a correct queue answers in one loop iteration.
SAFETY = 5.0


async def within(awaitable: Awaitable[T]) -> T:
    return await asyncio.wait_for(awaitable, SAFETY)


async def parked_get(queue: WorkQueue) -> asyncio.Task[Hashable]:
    """A worker's ``get()``, returned once it is parked in the queue waiting for a key."""
    parked = asyncio.Event()

    async def get() -> Hashable:
        parked.set()
        return await queue.get()  # nothing runs in between: parked here when we resume

    task = asyncio.create_task(get())
    await parked.wait()
    return task


def take_all(queue: WorkQueue) -> list[Hashable]:
    """Take every ready key, as workers would; they stay active until ``done``."""
    taken = []
    while queue.ready_keys():
        taken.append(queue.get_nowait())
    return taken


def fake_queue(**kwargs: float) -> tuple[WorkQueue, FakeClock]:
    clock = FakeClock()
    return WorkQueue(clock=clock, **kwargs), clock


# --- de-duplication, order, one worker per key -------------------------------------


@pytest.mark.parametrize(
    ("adds", "ready"),
    [
        ([("cluster", "default", "a")] * 2, [("cluster", "default", "a")]),
        (["b", "a", "c", "a", "b"], ["b", "a", "c"]),  # first add sets the place
        (["x", "x", "x"], ["x"]),
        ([], []),
    ],
)
def test_queued_keys_are_deduplicated_and_come_out_in_order(
    adds: list[Hashable], ready: list[Hashable]
) -> None:
    queue = WorkQueue()
    for key in adds:
        queue.add(key)
    assert queue.ready_keys() == ready
    assert len(queue) == len(ready)
    assert take_all(queue) == ready
    for key in ready:
        queue.done(key)
    # Done without new adds does not requeue.
    assert queue.ready_keys() == []
    assert len(queue) == 0


def test_a_key_added_while_processed_is_processed_again_after_done() -> None:
    queue = WorkQueue()
    queue.add("a")
    assert queue.get_nowait() == "a"
    queue.add("a")
    queue.add("a")
    # Not handed to another worker while the first one still holds it, but not lost.
    assert queue.ready_keys() == []
    assert len(queue) == 1
    queue.done("a")
    assert queue.ready_keys() == ["a"]
    assert queue.get_nowait() == "a"
    queue.done("a")
    # Two adds during processing still mean one more pass, not two.
    assert queue.ready_keys() == []
    assert len(queue) == 0


def test_get_nowait_on_an_empty_queue_raises() -> None:
    queue = WorkQueue()
    with pytest.raises(asyncio.QueueEmpty):
        queue.get_nowait()
    queue.add("a")
    queue.get_nowait()
    with pytest.raises(asyncio.QueueEmpty):
        queue.get_nowait()


async def test_parked_workers_get_different_keys_at_once_but_never_a_held_one() -> None:
    queue = WorkQueue()
    first, second = await parked_get(queue), await parked_get(queue)
    queue.add("a")
    queue.add("b")
    # Both keys are in flight together: different keys run concurrently.
    assert {await within(first), await within(second)} == {"a", "b"}
    third = await parked_get(queue)
    queue.add("a")  # still held by its worker
    assert queue.ready_keys() == []
    queue.done("a")
    assert await within(third) == "a"  # handed over only once released
    queue.done("a")
    queue.done("b")
    assert queue.ready_keys() == []
    assert len(queue) == 0


# --- backoff ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "delays"),
    [
        (lambda: WorkQueue(base_delay=0.5, max_delay=5.0), [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]),
        # README: 0.5 s doubling, at most 5 min.
        (WorkQueue, [0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300, 300, 300]),
    ],
    ids=["custom", "documented-default"],
)
def test_rate_limited_delays_grow_exponentially_up_to_the_cap(
    make: Callable[[], WorkQueue], delays: list[float]
) -> None:
    queue = make()
    assert [queue.add_rate_limited("a") for _ in delays] == delays


def test_backoff_stays_capped_however_long_a_key_keeps_failing() -> None:
    queue = WorkQueue(base_delay=0.5, max_delay=300.0)
    delays = [queue.add_rate_limited("a") for _ in range(1100)]  # 2**1100 overflows
    assert set(delays[10:]) == {300.0}


def test_backoff_is_per_key_and_forget_resets_it() -> None:
    queue = WorkQueue(base_delay=0.5, max_delay=300.0)
    for _ in range(3):
        queue.add_rate_limited("a")
    assert queue.add_rate_limited("b") == 0.5
    assert queue.add_rate_limited("a") == 4.0
    queue.forget("a")
    assert queue.add_rate_limited("a") == 0.5
    assert queue.add_rate_limited("b") == 1.0
    queue.forget("never-seen")  # harmless


def test_a_rate_limited_key_is_delivered_when_its_backoff_has_passed() -> None:
    queue, clock = fake_queue(base_delay=0.5, max_delay=4.0)
    delay = queue.add_rate_limited("a")
    clock.advance(delay / 2)
    assert queue.fire_due(clock.now()) == []
    assert queue.ready_keys() == []
    clock.advance(delay / 2)
    assert queue.fire_due(clock.now()) == ["a"]
    assert queue.ready_keys() == ["a"]
    queue.done(queue.get_nowait())
    # A second failure waits twice as long.
    assert queue.add_rate_limited("a") == 2 * delay
    clock.advance(2 * delay - 0.25)
    assert queue.fire_due(clock.now()) == []
    clock.advance(0.25)
    assert queue.fire_due(clock.now()) == ["a"]


# --- delayed delivery ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("requeues", "steps"),
    [
        pytest.param(
            [("late", 6), ("soon", 2)],
            [(1.5, []), (0.5, ["soon"]), (3.5, []), (0.5, ["late"]), (100, [])],
            id="due-order-not-call-order",
        ),
        pytest.param(
            [("periodic", 3), ("periodic", 20), ("periodic", 1), ("periodic", 50)],
            # The superseded 3 s wake-up and the later ones never deliver it again.
            [(0.5, []), (0.5, ["periodic"]), (100, [])],
            id="earliest-wake-up-wins",
        ),
        pytest.param([("a", 1), ("a", 1)], [(1, ["a"]), (10, [])], id="same-twice-fires-once"),
        pytest.param([("a", 2), ("b", 2)], [(5, ["a", "b"])], id="equal-dues-in-call-order"),
        pytest.param([("a", 0.25)], [(0.125, []), (0.125, ["a"])], id="due-is-inclusive"),
    ],
)
def test_delayed_keys_fire_exactly_when_due(
    requeues: list[tuple[str, float]], steps: list[tuple[float, list[str]]]
) -> None:
    queue, clock = fake_queue()
    for key, delay in requeues:
        queue.add_after(key, delay)
    delivered: list[Hashable] = []
    for seconds, fired in steps:
        clock.advance(seconds)
        assert queue.fire_due(clock.now()) == fired
        delivered += fired
        assert queue.ready_keys() == delivered


def test_periodic_requeues_do_not_pile_up_timers() -> None:
    queue, _ = fake_queue()
    for delay in (3, 20, 1, 50, 1):
        queue.add_after("periodic", delay)
    assert len(queue._timers) == 2  # 3 then the earlier 1; later and equal ones dropped


def test_a_superseded_timer_does_not_jump_ahead_of_an_equal_due() -> None:
    queue, clock = fake_queue()
    queue.add_after("a", 5)
    queue.add_after("a", 1)  # supersedes; the 5 s timer stays in the heap, dead
    queue.add_after("b", 5)
    clock.advance(1)
    assert queue.fire_due(clock.now()) == ["a"]
    queue.done(queue.get_nowait())
    queue.add_after("a", 4)  # due with the dead timer, but set after "b"'s
    clock.advance(4)
    assert queue.fire_due(clock.now()) == ["b", "a"]


@pytest.mark.parametrize("delay", [0, -0.0, -1])
def test_add_after_without_a_delay_is_immediate(delay: float) -> None:
    queue = WorkQueue()  # real clock and no timer task: neither must be needed
    queue.add_after("a", delay)
    assert queue.ready_keys() == ["a"]
    assert queue.fire_due(math.inf) == []  # no timer was set


def test_a_delayed_key_already_queued_is_processed_once() -> None:
    queue, clock = fake_queue()
    queue.add("a")
    queue.add_after("a", 1)
    clock.advance(2)  # the timer fires while "a" is still waiting
    assert queue.fire_due(clock.now()) == ["a"]
    assert queue.ready_keys() == ["a"]
    queue.done(queue.get_nowait())
    assert queue.ready_keys() == []
    assert len(queue) == 0


def test_a_delayed_key_due_while_processed_comes_back_after_done() -> None:
    queue, clock = fake_queue()
    queue.add("a")
    assert queue.get_nowait() == "a"
    queue.add_after("a", 1)
    clock.advance(2)
    assert queue.fire_due(clock.now()) == ["a"]
    assert queue.ready_keys() == []  # not to a second worker
    queue.done("a")
    assert queue.ready_keys() == ["a"]


# --- the timer task -----------------------------------------------------------------


@dataclass
class Timed:
    queue: WorkQueue
    clock: FakeClock


@pytest.fixture
async def timed() -> AsyncIterator[Timed]:
    """A queue whose timer task runs, as in the controller, on a fake clock."""
    clock = FakeClock()
    queue = WorkQueue(clock=clock)
    task = asyncio.create_task(queue.run_timers())
    await within(clock.until_asleep())
    yield Timed(queue, clock)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_timer_task_delivers_to_a_parked_worker_when_due(timed: Timed) -> None:
    queue, clock = timed.queue, timed.clock
    worker = await parked_get(queue)
    queue.add_after("a", 2)
    await within(clock.until_asleep())
    assert clock.deadlines() == [clock.now() + 2]
    clock.advance(1.5)
    assert queue.ready_keys() == []  # the task was not even woken
    clock.advance(0.5)
    assert await within(worker) == "a"
    queue.done("a")
    await within(clock.until_asleep())
    assert clock.deadlines() == [None]  # nothing left to wait for


async def test_an_earlier_timer_added_later_is_not_held_up(timed: Timed) -> None:
    queue, clock = timed.queue, timed.clock
    start = clock.now()
    queue.add_after("far", 10)
    await within(clock.until_asleep())
    assert clock.deadlines() == [start + 10]
    # The task is asleep towards the far deadline when a near one arrives.
    queue.add_after("near", 1)
    await within(clock.until_asleep())
    assert clock.deadlines() == [start + 1]
    worker = await parked_get(queue)
    clock.advance(1)
    assert await within(worker) == "near"
    queue.done("near")


@pytest.mark.parametrize("pending", [False, True], ids=["no-timer", "timer-pending"])
async def test_run_timers_ends_when_cancelled(pending: bool) -> None:
    queue, clock = fake_queue()
    if pending:
        queue.add_after("a", 5)
    task = asyncio.create_task(queue.run_timers())
    await within(clock.until_asleep())
    assert clock.deadlines() == [clock.now() + 5 if pending else None]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert clock.deadlines() == []  # no sleeper left behind


def test_the_fake_clock_only_goes_forward() -> None:
    clock = FakeClock()
    with pytest.raises(ValueError, match="cannot go back"):
        clock.advance(-1)


# --- the real clock -----------------------------------------------------------------


async def test_the_real_clock_returns_at_once_when_woken_or_past_the_deadline() -> None:
    clock = LoopClock()
    await within(clock.sleep_until(clock.now() - 1, asyncio.Event()))
    woken = asyncio.Event()
    woken.set()
    await within(clock.sleep_until(None, woken))


async def test_the_queue_uses_the_real_clock_by_default() -> None:
    queue = WorkQueue()
    task = asyncio.create_task(queue.run_timers())
    try:
        queue.add_after("a", 0.001)
        assert await within(queue.get()) == "a"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# --- properties ---------------------------------------------------------------------


@dataclass
class Model:
    """The queue's contract, stated plainly (no heap, no superseded timers)."""

    now: float
    ready: list[str] = field(default_factory=list)
    active: set[str] = field(default_factory=set)
    dirty: set[str] = field(default_factory=set)
    # key -> (earliest due, when it was set): equal dues fire in the order set.
    wake_ups: dict[str, tuple[float, int]] = field(default_factory=dict)
    seq: int = 0

    def add(self, key: str) -> None:
        if key in self.active:
            self.dirty.add(key)
        elif key not in self.ready:
            self.ready.append(key)

    def add_after(self, key: str, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        self.seq += 1
        due = (self.now + delay, self.seq)
        if key not in self.wake_ups or due[0] < self.wake_ups[key][0]:
            self.wake_ups[key] = due

    def advance(self, seconds: float) -> list[str]:
        self.now += seconds
        due = sorted((when, key) for key, when in self.wake_ups.items() if when[0] <= self.now)
        for _, key in due:
            del self.wake_ups[key]
            self.add(key)
        return [key for _, key in due]

    def take(self) -> str:
        key = self.ready.pop(0)
        self.active.add(key)
        return key

    def done(self, key: str) -> None:
        self.active.discard(key)
        if key in self.dirty:
            self.dirty.discard(key)
            self.add(key)


@dataclass
class Harness:
    """Runs one operation on the queue and on the model, and compares them."""

    queue: WorkQueue
    clock: FakeClock
    model: Model
    # Logical time of the last request for, and the last start of, each key.
    requested: dict[Hashable, int] = field(default_factory=dict)
    started: dict[Hashable, int] = field(default_factory=dict)
    tick: int = 0

    def step(self, op: str, key: str, number: int) -> None:
        self.tick += 1
        getattr(self, op)(key, number)
        assert self.queue.ready_keys() == self.model.ready
        assert len(set(self.model.ready)) == len(self.model.ready)  # never twice
        assert set(self.model.ready).isdisjoint(self.model.active)
        assert len(self.queue) == len(self.model.ready) + len(self.model.dirty)

    def add(self, key: str, _: int) -> None:
        self.queue.add(key)
        self.model.add(key)
        self.requested[key] = self.tick

    def add_after(self, key: str, delay: int) -> None:
        self.queue.add_after(key, delay)
        self.model.add_after(key, delay)
        if delay <= 0:
            self.requested[key] = self.tick

    def advance(self, _: str, seconds: int) -> None:
        self.clock.advance(seconds)
        fired = self.queue.fire_due(self.clock.now())
        assert fired == self.model.advance(seconds)  # exactly when due, not before
        self.requested.update(dict.fromkeys(fired, self.tick))

    def take(self, *_: Any) -> None:
        if not self.model.ready:
            with pytest.raises(asyncio.QueueEmpty):
                self.queue.get_nowait()
            return
        key = self.queue.get_nowait()
        assert key not in self.model.active  # one worker per key
        assert key == self.model.take()
        self.started[key] = self.tick

    def done(self, key: str, _: int) -> None:
        if key in self.model.active:  # workers only release what they hold
            self.queue.done(key)
            self.model.done(key)

    def settle(self) -> None:
        """Run every timer and work off everything, as workers eventually would."""
        self.step("advance", "", 1000)
        while self.model.ready or self.model.active:
            for key in sorted(self.model.active):
                self.step("done", key, 0)
            while self.model.ready:
                self.step("take", "", 0)


operations = st.lists(
    st.tuples(
        st.sampled_from(["add", "add_after", "advance", "take", "done"]),
        st.sampled_from(["a", "b", "c"]),
        st.integers(min_value=-1, max_value=6),  # whole seconds: exact, and many ties
    ),
    max_size=60,
)


@given(operations)
def test_any_sequence_of_operations_follows_the_contract(ops: list[tuple[str, str, int]]) -> None:
    clock = FakeClock()
    harness = Harness(WorkQueue(clock=clock), clock, Model(clock.now()))
    for op, key, number in ops:
        harness.step(op, key, max(number, 0) if op == "advance" else number)
    harness.settle()
    # Level-triggered: every request was followed by a processing that started later.
    for name, requested in harness.requested.items():
        assert harness.started.get(name, -1) > requested, name
    assert len(harness.queue) == 0
