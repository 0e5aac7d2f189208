"""The work queue (``WorkQueue``): de-duplication of queued keys, re-processing of a
key added while it is being processed, exponential per-key backoff with a cap and
``forget``, delayed delivery with ``add_after``, and one worker per key at a time while
different keys run concurrently."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Hashable

import pytest

from crs_controller.engine.queue import WorkQueue

# Long enough to be sure nothing more is coming, short enough to keep tests fast.
QUIET = 0.05


async def nothing_ready(queue: WorkQueue, wait: float = QUIET) -> bool:
    try:
        key = await asyncio.wait_for(queue.get(), wait)
    except TimeoutError:
        return True
    queue.done(key)
    return False


async def next_key(queue: WorkQueue, wait: float = 1.0) -> Hashable:
    return await asyncio.wait_for(queue.get(), wait)


@pytest.fixture
async def timed() -> AsyncIterator[WorkQueue]:
    """A queue whose timers run, as in the controller."""
    queue = WorkQueue(base_delay=0.01, max_delay=0.08)
    task = asyncio.create_task(queue.run_timers())
    yield queue
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_key_added_twice_while_queued_is_processed_once() -> None:
    queue = WorkQueue()
    queue.add(("cluster", "default", "a"))
    queue.add(("cluster", "default", "a"))
    assert len(queue) == 1
    assert await next_key(queue) == ("cluster", "default", "a")
    queue.done(("cluster", "default", "a"))
    assert await nothing_ready(queue)


async def test_keys_come_out_in_the_order_they_were_added() -> None:
    queue = WorkQueue()
    for name in ["b", "a", "c", "a", "b"]:
        queue.add(name)
    got: list[Hashable] = []
    for _ in range(3):
        key = await next_key(queue)
        got.append(key)
        queue.done(key)
    assert got == ["b", "a", "c"]
    assert await nothing_ready(queue)


async def test_a_key_added_while_processed_is_processed_again_after_done() -> None:
    queue = WorkQueue()
    queue.add("a")
    assert await next_key(queue) == "a"
    queue.add("a")
    queue.add("a")
    # Not handed to another worker while the first one still holds it.
    assert await nothing_ready(queue)
    queue.done("a")
    assert await next_key(queue) == "a"
    queue.done("a")
    # Two adds during processing still mean one more pass, not two.
    assert await nothing_ready(queue)


async def test_done_without_new_adds_does_not_requeue() -> None:
    queue = WorkQueue()
    queue.add("a")
    key = await next_key(queue)
    queue.done(key)
    assert len(queue) == 0
    assert await nothing_ready(queue)


def test_rate_limited_delays_grow_exponentially_up_to_the_cap() -> None:
    queue = WorkQueue(base_delay=0.5, max_delay=5.0)
    delays = [queue.add_rate_limited("a") for _ in range(7)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]


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


def test_default_backoff_matches_the_documented_policy() -> None:
    # README: 0.5 s doubling, at most 5 min.
    queue = WorkQueue()
    delays = [queue.add_rate_limited("a") for _ in range(15)]
    assert delays[:3] == [0.5, 1.0, 2.0]
    assert max(delays) == 300.0
    assert delays[-1] == 300.0


def test_backoff_stays_capped_however_long_a_key_keeps_failing() -> None:
    queue = WorkQueue(base_delay=0.5, max_delay=300.0)
    delays = [queue.add_rate_limited("a") for _ in range(1100)]
    assert set(delays[10:]) == {300.0}


async def test_rate_limited_key_is_delivered_after_its_backoff(timed: WorkQueue) -> None:
    start = time.monotonic()
    delay = timed.add_rate_limited("a")
    assert await next_key(timed) == "a"
    assert time.monotonic() - start >= delay
    timed.done("a")
    timed.forget("a")


async def test_add_after_delivers_after_the_delay_in_due_order(timed: WorkQueue) -> None:
    start = time.monotonic()
    timed.add_after("late", 0.06)
    timed.add_after("soon", 0.02)
    timed.add("now")
    got = []
    for _ in range(3):
        key = await next_key(timed)
        got.append((key, time.monotonic() - start))
        timed.done(key)
    assert [key for key, _ in got] == ["now", "soon", "late"]
    assert got[1][1] >= 0.02
    assert got[2][1] >= 0.06
    assert await nothing_ready(timed)


async def test_add_after_without_a_delay_is_immediate() -> None:
    queue = WorkQueue()  # no timer task: must not be needed
    queue.add_after("a", 0)
    queue.add_after("b", -1)
    assert {await next_key(queue, 0.2), await next_key(queue, 0.2)} == {"a", "b"}


async def test_a_delayed_key_already_queued_is_processed_once(timed: WorkQueue) -> None:
    timed.add("a")
    timed.add_after("a", 0.01)
    await asyncio.sleep(0.03)  # the timer fires while "a" is still waiting
    assert await next_key(timed) == "a"
    timed.done("a")
    assert await nothing_ready(timed)


async def test_a_delayed_key_due_while_processed_comes_back_after_done(timed: WorkQueue) -> None:
    timed.add("a")
    assert await next_key(timed) == "a"
    timed.add_after("a", 0.01)
    await asyncio.sleep(0.03)
    assert await nothing_ready(timed)
    timed.done("a")
    assert await next_key(timed) == "a"
    timed.done("a")


async def test_an_earlier_timer_added_later_is_not_held_up(timed: WorkQueue) -> None:
    # The timer task is already sleeping towards a far deadline when a near one arrives.
    timed.add_after("far", 10)
    await asyncio.sleep(0.01)
    start = time.monotonic()
    timed.add_after("near", 0.02)
    assert await next_key(timed) == "near"
    assert time.monotonic() - start < 5
    timed.done("near")


async def test_repeated_requeues_of_a_key_keep_only_the_earliest_wake_up(
    timed: WorkQueue,
) -> None:
    for delay in (0.03, 0.2, 0.01, 0.5):
        timed.add_after("periodic", delay)
    assert len(timed._timers) == 2  # 0.03 then the earlier 0.01; later ones dropped
    assert await next_key(timed) == "periodic"
    timed.done("periodic")
    # The superseded 0.03 s timer does not deliver the key a second time.
    assert await nothing_ready(timed, 0.1)


async def test_one_key_is_never_processed_by_two_workers() -> None:
    """Several workers and a producer that keeps re-adding keys, at random moments."""
    rng = random.Random(7)
    queue = WorkQueue()
    keys = [f"k{i}" for i in range(5)]
    active: set[Hashable] = set()
    overlaps: list[Hashable] = []
    most_at_once = 0
    clock = 0
    last_added: dict[Hashable, int] = {}
    last_started: dict[Hashable, int] = {}

    def tick() -> int:
        nonlocal clock
        clock += 1
        return clock

    async def worker() -> None:
        nonlocal most_at_once
        while True:
            key = await queue.get()
            if key in active:
                overlaps.append(key)
            active.add(key)
            last_started[key] = tick()
            most_at_once = max(most_at_once, len(active))
            await asyncio.sleep(rng.uniform(0, 0.004))
            active.discard(key)
            queue.done(key)
            settle()

    producing = True
    idle = asyncio.Event()

    def settle() -> None:
        if not producing and not active and len(queue) == 0:
            idle.set()

    workers = [asyncio.create_task(worker()) for _ in range(4)]
    try:
        for _ in range(150):
            key = rng.choice(keys)
            queue.add(key)
            last_added[key] = tick()
            await asyncio.sleep(rng.uniform(0, 0.002))
        producing = False
        settle()
        await asyncio.wait_for(idle.wait(), 2)
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)

    assert overlaps == []
    assert most_at_once >= 2, "different keys should be processed concurrently"
    assert len(queue) == 0
    # Level-based: every key was processed after its last add.
    for name, added in last_added.items():
        assert last_started[name] > added, name
