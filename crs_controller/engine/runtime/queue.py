"""A de-duplicating work queue of keys, with per-key backoff and delayed requeue.

The controller-runtime contract: an item is only a key; a key is never processed by
two workers at once; a key added while it is being processed is processed again
afterwards; a failure retries with exponential backoff; ``requeue_after`` schedules.

Every time read goes through an injected ``Clock``, and the timer step (``fire_due``)
is synchronous, so tests drive time by hand and look at what is ready without waiting.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Hashable
from dataclasses import dataclass, field

from crs_controller.core.clock import Clock, MonotonicClock

__all__ = ["WorkQueue"]


@dataclass(order=True)
class _Timer:
    due: float
    seq: int
    key: Hashable = field(compare=False)


class WorkQueue:
    def __init__(
        self, *, base_delay: float = 0.5, max_delay: float = 300.0, clock: Clock | None = None
    ) -> None:
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._ready: asyncio.Queue[Hashable] = asyncio.Queue()
        # Exactly the keys in ``_ready``, in the same order (a dict keeps insertion
        # order), so that what is ready can be read without taking it.
        self._queued: dict[Hashable, None] = {}
        self._active: set[Hashable] = set()
        self._dirty: set[Hashable] = set()
        self._failures: dict[Hashable, int] = {}
        self._timers: list[_Timer] = []
        # The one live timer per key, the earliest: periodic requeues do not pile up
        # timers, and a superseded timer left in the heap is recognised by identity.
        self._scheduled: dict[Hashable, _Timer] = {}
        self._seq = 0
        self._wake = asyncio.Event()
        self._base = base_delay
        self._max = max_delay

    def __len__(self) -> int:
        return len(self._queued) + len(self._dirty)

    def ready_keys(self) -> list[Hashable]:
        """The keys ``get`` would hand out now, in order; takes nothing."""
        return list(self._queued)

    def add(self, key: Hashable) -> None:
        if key in self._active:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued[key] = None
            self._ready.put_nowait(key)

    def add_after(self, key: Hashable, delay: float) -> None:
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
        return self._take(await self._ready.get())

    def get_nowait(self) -> Hashable:
        """Take the next ready key without waiting; ``asyncio.QueueEmpty`` if none."""
        return self._take(self._ready.get_nowait())

    def done(self, key: Hashable) -> None:
        self._active.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

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

    def _take(self, key: Hashable) -> Hashable:
        del self._queued[key]
        self._active.add(key)
        return key
