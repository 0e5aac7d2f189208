"""A de-duplicating work queue of keys, with per-key backoff and delayed requeue,
shared fairly between namespaces.

The controller-runtime contract: an item is only a key; a key is never processed by
two workers at once; a key added while it is being processed is processed again
afterwards; a failure retries with exponential backoff; ``requeue_after`` schedules.

Fair sharing (kube-apiserver's API Priority and Fairness, fair queuing over flows):
each namespace is a flow with its own FIFO of ready keys. The next key comes from the
flow with the fewest keys in flight among those with ready keys, the one served
longest ago on a tie (round-robin). While more than one namespace is known, a
``reserve`` of the workers (a quarter, at least one) is kept for the namespaces
holding none, counted over all of them: a flow already holding a worker takes
another only while more than the reserve stays free. However many tenants answer
slowly, a tenant with nothing in flight finds a worker free at once (unless more
such tenants than the reserve arrive together: the others then wait for the first
reconcile to end); one busy tenant still uses all but the reserve, and one namespace
alone uses every worker.

Every time read and every wait goes through an injected ``WaitingClock``, and the
timer step (``fire_due``) is synchronous, so tests drive time by hand and look at
what is ready without waiting.
"""

from __future__ import annotations

import asyncio
import heapq
import math
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from crs_controller.engine.io import metrics
from crs_controller.engine.io.waiting import LoopClock, WaitingClock
from crs_controller.engine.runtime.queue_metrics import QueueMetrics

__all__ = ["WorkQueue", "namespace_of", "reserve"]


def namespace_of(key: Hashable) -> Hashable:
    """The flow of a key: the namespace of a controller key ``(kind, namespace, name)``;
    any other key belongs to one shared flow."""
    if isinstance(key, tuple) and len(key) == 3:
        namespace: Hashable = key[1]
        return namespace
    return None


def reserve(concurrency: int | None, shared: bool) -> int:
    """How many free workers are kept for the namespaces holding none: none when one
    namespace is alone or no concurrency is given (namespaces then only take turns);
    else a quarter of the workers, at least one, so a tenant arriving late finds a
    worker free however many other tenants keep theirs busy."""
    if concurrency is None or not shared:
        return 0
    return max(1, concurrency // 4)


@dataclass(order=True)
class _Timer:
    due: float
    seq: int
    key: Hashable = field(compare=False)


@dataclass
class _Flow:
    """One namespace's ready keys (FIFO), how many of its keys are in flight, and when
    it was last served and created (ticks): the order in which flows are served."""

    since: int
    ready: dict[Hashable, None] = field(default_factory=dict)
    busy: int = 0
    served: int = 0  # never yet: goes before flows already served

    def rank(self) -> tuple[int, int, int]:
        return (self.busy, self.served, self.since)


def _pick(flows: Iterable[_Flow], free: float, kept: int) -> _Flow | None:
    """The flow whose first ready key goes next, with ``free`` workers free of which
    ``kept`` are kept for flows holding none: fewest in flight, then served longest
    ago, then the oldest (ranks are unique: ``since`` is)."""
    room = not kept or free > kept  # for a flow already holding a worker
    eligible = (f for f in flows if f.ready and (room or f.busy == 0))
    return min(eligible, key=_Flow.rank, default=None)


def _serve(flow: _Flow, tick: int) -> Hashable:
    key = next(iter(flow.ready))
    del flow.ready[key]
    flow.busy += 1
    flow.served = tick
    return key


class WorkQueue:
    def __init__(
        self,
        *,
        base_delay: float = 0.5,
        max_delay: float = 300.0,
        clock: WaitingClock | None = None,
        concurrency: int | None = None,
        tenants: Callable[[], int] = lambda: 0,
        metrics: QueueMetrics | None = None,
    ) -> None:
        """``concurrency``: the workers that share the queue (None: no reserve, only
        turns). ``tenants``: how many namespaces have objects, idle ones included, so
        the reserve is kept before a second tenant's first key arrives. ``metrics``:
        where adds, waits and work are counted (None: nowhere)."""
        self._clock: WaitingClock = clock if clock is not None else LoopClock()
        self._metrics = metrics
        self._concurrency = concurrency
        self._tenants = tenants
        # Exactly the flows with ready or in-flight keys.
        self._flows: dict[Hashable, _Flow] = {}
        self._queued: set[Hashable] = set()
        self._active: set[Hashable] = set()
        self._dirty: set[Hashable] = set()
        self._failures: dict[Hashable, int] = {}
        self._timers: list[_Timer] = []
        # The one live timer per key, the earliest: periodic requeues do not pile up
        # timers, and a superseded timer left in the heap is recognised by identity.
        self._scheduled: dict[Hashable, _Timer] = {}
        self._seq = 0
        self._tick = 0
        self._getters: list[asyncio.Future[None]] = []
        self._wake = asyncio.Event()
        self._base = base_delay
        self._max = max_delay

    def __len__(self) -> int:
        return len(self._queued) + len(self._dirty)

    def ready_keys(self) -> list[Hashable]:
        """The keys ``get`` would hand out now, in order, if none were done meanwhile
        (a key held back by the reserve is not); takes nothing."""
        flows = [_Flow(f.since, dict(f.ready), f.busy, f.served) for f in self._flows.values()]
        free, kept, tick = self._free(), self._reserve(), self._tick
        keys: list[Hashable] = []
        while (flow := _pick(flows, free - len(keys), kept)) is not None:
            tick += 1
            keys.append(_serve(flow, tick))
        return keys

    def add(self, key: Hashable) -> None:
        if key in self._queued or key in self._dirty:
            return
        if self._metrics is not None:
            self._metrics.added(key)
        if key in self._active:
            self._dirty.add(key)
        else:
            self._enqueue(key)

    def _enqueue(self, key: Hashable) -> None:
        self._queued.add(key)
        self._flow(namespace_of(key)).ready[key] = None
        self._notify()

    def add_after(self, key: Hashable, delay: float) -> None:
        if self._metrics is not None:
            self._metrics.retried(key)
        if delay <= 0:
            self.add(key)
            return
        due = self._clock.now() + delay
        scheduled = self._scheduled.get(key)
        if scheduled is not None and scheduled.due <= due:
            return  # an earlier wake-up is already set; it will process the key anyway
        self._seq += 1
        timer = _Timer(due, self._seq, key)
        self._scheduled[key] = timer
        heapq.heappush(self._timers, timer)
        # The timer task may be asleep towards a later deadline: make it look again.
        self._wake.set()

    def add_rate_limited(self, key: Hashable) -> float:
        """Requeue after an exponential backoff for this key; returns the delay."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        # Cap the exponent too: 2**1024 overflows a float after days of failures.
        delay = float(min(self._base * (2 ** min(failures, 40)), self._max))
        self.add_after(key, delay)
        return delay

    def forget(self, key: Hashable) -> None:
        """Reset the key's backoff after a success."""
        self._failures.pop(key, None)

    async def get(self) -> Hashable:
        """The next key, once there is one this worker may take."""
        counted = False
        while (flow := self._next_flow()) is None:
            if self._queued and not counted:
                # Keys are ready but the free workers are kept for other namespaces.
                metrics.QUEUE_FAIR_WAITS.inc()
                counted = True
            waiter = asyncio.get_running_loop().create_future()
            self._getters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._getters:  # cancelled before being woken
                    self._getters.remove(waiter)
        return self._take(flow)

    def get_nowait(self) -> Hashable:
        """Take the next key without waiting; ``asyncio.QueueEmpty`` if none may go."""
        flow = self._next_flow()
        if flow is None:
            raise asyncio.QueueEmpty
        return self._take(flow)

    def done(self, key: Hashable) -> None:
        name = namespace_of(key)
        if key in self._active:
            self._active.discard(key)
            self._flows[name].busy -= 1
        if self._metrics is not None:
            self._metrics.done(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self._enqueue(key)  # counted as added when it came in
        flow = self._flows.get(name)
        if flow is not None and not flow.ready and not flow.busy:
            del self._flows[name]  # idle: coming back, it is served before busy flows
        self._notify()  # a worker's share came free

    def fire_due(self, now: float) -> list[Hashable]:
        """Add every key whose wake-up is due by ``now``; returns them in due order.

        Only a key's live timer counts (checked by identity): one it superseded with an
        earlier wake-up adds nothing when it comes due, even if the key was requeued
        for that very time since. One wake-up per key, however often it was requeued.
        """
        fired: list[Hashable] = []
        while self._timers and self._timers[0].due <= now:
            timer = heapq.heappop(self._timers)
            if self._scheduled.get(timer.key) is timer:
                del self._scheduled[timer.key]
                self.add(timer.key)
                fired.append(timer.key)
        return fired

    async def run_timers(self) -> None:
        """Move due delayed keys into the ready queue; runs for the queue's lifetime."""
        while True:
            self.fire_due(self._clock.now())
            # Cleared before sleeping, with no await in between: an ``add_after`` from
            # here on sets it again and cuts the sleep short.
            self._wake.clear()
            await self._clock.sleep_until(self._next_due(), self._wake)

    def _next_due(self) -> float | None:
        return self._timers[0].due if self._timers else None

    def _next_flow(self) -> _Flow | None:
        return _pick(self._flows.values(), self._free(), self._reserve())

    def _free(self) -> float:
        """Workers not holding a key (unbounded without ``concurrency``); only compared
        with the reserve: without one, a worker that asks takes what is ready."""
        if self._concurrency is None:
            return math.inf
        return self._concurrency - len(self._active)

    def _reserve(self) -> int:
        shared = len(self._flows) > 1 or self._tenants() > 1
        return reserve(self._concurrency, shared)

    def _flow(self, name: Hashable) -> _Flow:
        flow = self._flows.get(name)
        if flow is None:
            self._tick += 1
            flow = self._flows[name] = _Flow(since=self._tick)
        return flow

    def _take(self, flow: _Flow) -> Hashable:
        self._tick += 1
        key = _serve(flow, self._tick)
        self._queued.discard(key)
        self._active.add(key)
        if self._metrics is not None:
            self._metrics.taken(key)
        return key

    def _notify(self) -> None:
        """Wake every parked worker to look again (there are only ``concurrency``);
        one that finds nothing it may take parks again."""
        for waiter in self._getters:
            if not waiter.done():
                waiter.set_result(None)
        self._getters.clear()
