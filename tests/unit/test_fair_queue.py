"""Fair sharing of the workers between namespaces (``WorkQueue`` with ``concurrency``):
the next key comes from the namespace with the fewest keys in flight (round-robin on
ties); while more than one namespace is known, a reserve of a quarter of the workers
(at least one) is kept for the namespaces holding none, counted over all namespaces,
so a tenant arriving late finds a worker free however many others are busy; one busy
namespace still uses all but the reserve, one namespace alone every worker.

Keys are the controller's ``(kind, namespace, name)``. Workers are simulated with
``get_nowait`` (at most ``concurrency`` keys held) on a fake clock: no sleeps.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.engine.io import metrics
from crs_controller.engine.runtime.queue import WorkQueue, namespace_of, reserve
from tests.unit.fake_clock import FakeClock

SAFETY = 5.0
Key = tuple[str, str, str]


def key(namespace: str, name: str, kind: str = "cluster") -> Key:
    return (kind, namespace, name)


def fair(concurrency: int, tenants: int = 0) -> WorkQueue:
    return WorkQueue(clock=FakeClock(), concurrency=concurrency, tenants=lambda: tenants)


def take(queue: WorkQueue, count: int) -> list[str]:
    """The namespaces of up to ``count`` keys taken now, as free workers would."""
    taken = []
    for _ in range(count):
        try:
            taken.append(str(namespace_of(queue.get_nowait())))
        except asyncio.QueueEmpty:
            break
    return taken


@pytest.mark.parametrize(
    ("concurrency", "shared", "expected"),
    [
        (8, True, 2),  # the default: two workers kept for the namespaces holding none
        (4, True, 1),
        (16, True, 4),
        (2, True, 1),
        (1, True, 1),  # the one worker goes to a namespace holding none: turns only
        (8, False, 0),  # alone: every worker
        (None, True, 0),  # no concurrency given: turns only
    ],
)
def test_reserve(concurrency: int | None, shared: bool, expected: int) -> None:
    assert reserve(concurrency, shared) == expected


@pytest.mark.parametrize(
    ("adds", "concurrency", "tenants", "taken"),
    [
        pytest.param({"a": 2000}, 8, 1, ["a"] * 8, id="one-tenant-uses-every-worker"),
        pytest.param({"a": 10}, 8, 2, ["a"] * 6, id="reserve-kept-for-an-idle-tenant"),
        pytest.param({"a": 10}, 4, 2, ["a"] * 3, id="reserve-of-one-at-four"),
        pytest.param({"a": 10, "b": 1}, 4, 0, ["a", "b", "a"], id="known-from-work"),
        pytest.param({"a": 5, "b": 5, "c": 5}, 8, 3, ["a", "b", "c"] * 2, id="round-robin"),
        pytest.param({"a": 3, "b": 10}, 8, 2, ["a", "b"] * 3, id="reserve-kept-once-a-runs-dry"),
        pytest.param({"a": 10, "b": 10}, 1, 2, ["a"], id="one-worker"),
    ],
)
def test_which_namespaces_get_the_workers(
    adds: dict[str, int], concurrency: int, tenants: int, taken: list[str]
) -> None:
    queue = fair(concurrency, tenants)
    for namespace, count in adds.items():
        for n in range(count):
            queue.add(key(namespace, f"c{n}"))
    assert [str(namespace_of(k)) for k in queue.ready_keys()][: len(taken)] == taken
    assert take(queue, concurrency) == taken


def test_the_namespace_with_fewest_in_flight_goes_next() -> None:
    queue = fair(8, 2)
    for n in range(10):
        queue.add(key("a", f"c{n}"))
    held = [queue.get_nowait() for _ in range(6)]  # all but the reserve
    queue.add(key("b", "c0"))
    queue.add(key("b", "c1"))
    assert take(queue, 2) == ["b"]  # b's first; its second would eat into the reserve
    queue.done(held[0])  # a worker frees from a: a holds 5, b 1, 2 free
    assert take(queue, 1) == []  # still kept for a namespace holding none
    queue.done(held[1])  # a 4, b 1, 3 free: b has fewer in flight
    assert take(queue, 1) == ["b"]
    queue.add(key("b", "c2"))
    queue.done(held[2])  # a 3, b 2: b again
    assert take(queue, 1) == ["b"]
    queue.done(held[3])  # a 2, b 3: a's turn
    assert take(queue, 1) == ["a"]


def test_two_busy_namespaces_leave_a_worker_for_a_third_at_once() -> None:
    queue = fair(8, 3)
    for n in range(1000):
        queue.add(key("a", f"c{n}"))
        queue.add(key("b", f"c{n}"))
    assert Counter(take(queue, 8)) == {"a": 3, "b": 3}  # two kept free
    queue.add(key("c", "only"))
    assert queue.get_nowait() == key("c", "only")  # no reconcile had to end first
    queue.add(key("d", "only"))
    assert queue.get_nowait() == key("d", "only")  # the reserve's second worker


def test_one_busy_namespace_uses_all_but_the_reserve() -> None:
    queue = fair(8, 3)  # two idle tenants known
    for n in range(1000):
        queue.add(key("a", f"c{n}"))
    assert take(queue, 8) == ["a"] * 6


def test_the_reserve_lifts_when_the_other_namespace_goes() -> None:
    tenants = [2]
    queue = WorkQueue(clock=FakeClock(), concurrency=4, tenants=lambda: tenants[0])
    for n in range(6):
        queue.add(key("a", f"c{n}"))
    assert take(queue, 4) == ["a"] * 3
    tenants[0] = 1
    assert take(queue, 1) == ["a"]


def test_one_key_in_flight_at_a_time_and_dirty_keys_return_to_their_namespace() -> None:
    queue = fair(4, 2)
    queue.add(key("a", "x"))
    assert queue.get_nowait() == key("a", "x")
    queue.add(key("a", "x"))  # while held: dirty, not ready
    assert queue.ready_keys() == []
    queue.add(key("b", "y"))
    assert queue.ready_keys() == [key("b", "y")]
    queue.done(key("a", "x"))
    # b has nothing in flight and was never served; a's key comes back after.
    assert queue.ready_keys() == [key("b", "y"), key("a", "x")]


def test_delayed_keys_join_their_namespace_when_due() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock=clock, concurrency=4, tenants=lambda: 2)
    for n in range(3):
        queue.add(key("a", f"c{n}"))
    queue.add_after(key("b", "late"), 5)
    assert take(queue, 4) == ["a"] * 3
    clock.advance(5)
    assert queue.fire_due(clock.now()) == [key("b", "late")]
    assert take(queue, 1) == ["b"]


async def test_a_late_tenant_finds_a_parked_worker() -> None:
    queue = fair(4, 2)
    for n in range(10):
        queue.add(key("a", f"slow-{n}"))
    held = [await asyncio.wait_for(queue.get(), SAFETY) for _ in range(3)]
    waits = metrics.QUEUE_FAIR_WAITS._value.get()
    spare = asyncio.create_task(queue.get())  # the fourth worker: kept for another
    await asyncio.sleep(0)
    assert not spare.done()
    assert metrics.QUEUE_FAIR_WAITS._value.get() == waits + 1
    queue.add(key("b", "edit"))
    assert await asyncio.wait_for(spare, SAFETY) == key("b", "edit")
    assert {namespace_of(k) for k in held} == {"a"}


async def test_a_parked_worker_takes_a_key_once_its_namespace_has_room() -> None:
    queue = fair(2, 2)
    queue.add(key("a", "1"))
    queue.add(key("a", "2"))
    first = await asyncio.wait_for(queue.get(), SAFETY)
    second = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    assert not second.done()  # a holds its one worker of two
    queue.done(first)
    assert await asyncio.wait_for(second, SAFETY) == key("a", "2")


async def test_a_cancelled_worker_does_not_swallow_a_key() -> None:
    queue = fair(4, 0)
    gone = asyncio.create_task(queue.get())
    stays = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    gone.cancel()
    queue.add(key("a", "x"))
    assert await asyncio.wait_for(stays, SAFETY) == key("a", "x")
    with pytest.raises(asyncio.CancelledError):
        await gone


# --- properties ---------------------------------------------------------------------


@dataclass
class Workers:
    """``concurrency`` simulated workers on a fair queue, checking every hand-out."""

    queue: WorkQueue
    concurrency: int
    tenants: int
    held: list[Key] = field(default_factory=list)
    requested: dict[Key, int] = field(default_factory=dict)
    started: dict[Key, int] = field(default_factory=dict)
    tick: int = 0

    def busy(self) -> Counter[str]:
        return Counter(k[1] for k in self.held)

    def kept(self) -> int:
        known = set(self.busy()) | {str(namespace_of(k)) for k in self._waiting()}
        return reserve(self.concurrency, self.tenants > 1 or len(known) > 1)

    def add(self, k: Key) -> None:
        self.tick += 1
        self.queue.add(k)
        self.requested[k] = self.tick

    def take(self) -> None:
        if len(self.held) >= self.concurrency:
            return
        before, free, kept = self.busy(), self.concurrency - len(self.held), self.kept()
        ready = {str(namespace_of(k)) for k in self._waiting()}
        eligible = {ns for ns in ready if before[ns] == 0 or free > kept}
        try:
            k = cast(Key, self.queue.get_nowait())
        except asyncio.QueueEmpty:
            assert not eligible, "a worker idles while a namespace may take it"
            return
        assert k not in self.held, "a key in two workers"
        assert k[1] in eligible
        assert before[k[1]] == min(before[ns] for ns in eligible), "not the fewest in flight"
        self.held.append(k)
        self.tick += 1
        self.started[k] = self.tick
        if before[k[1]] and self.tenants > 1:  # the reserve holds from the start
            assert self.concurrency - len(self.held) >= kept, "the reserve was taken"

    def done(self, index: int) -> None:
        if self.held:
            self.queue.done(self.held.pop(index % len(self.held)))

    def _waiting(self) -> list[Key]:
        """Every ready key, whatever its namespace's share (the flows' contents)."""
        return [cast(Key, k) for flow in self.queue._flows.values() for k in flow.ready]


KEYS = st.tuples(st.just("cluster"), st.sampled_from(["a", "b", "c"]), st.sampled_from("xyz"))
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), KEYS),
        st.tuples(st.just("take"), st.none()),
        st.tuples(st.just("done"), st.integers(0, 7)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(OPERATIONS, st.integers(1, 6), st.sampled_from([0, 1, 3]))
def test_any_sequence_is_fair_and_serves_every_key(
    ops: list[tuple[str, object]], concurrency: int, tenants: int
) -> None:
    workers = Workers(fair(concurrency, tenants), concurrency, tenants)
    for op, arg in ops:
        getattr(workers, op)(*(() if arg is None else (arg,)))
    # Work everything off, as the workers eventually would.
    for _ in range(200):
        if not workers.held and not len(workers.queue):
            break
        while workers.held:
            workers.done(0)
        for _ in range(concurrency):
            workers.take()
    assert not workers.held and len(workers.queue) == 0
    for k, requested in workers.requested.items():
        assert workers.started.get(k, -1) > requested, k


def test_the_shared_flow_of_keys_that_are_not_controller_keys() -> None:
    assert namespace_of(("cluster", "ns", "c")) == "ns"
    assert namespace_of("a") == namespace_of(("x", "y")) is None
    queue = fair(4)  # one flow: no reserve, FIFO order
    for name in "abcde":
        queue.add(name)
    assert queue.ready_keys() == list("abcde")
    taken: list[Hashable] = [queue.get_nowait() for _ in range(4)]
    assert taken == list("abcd")
