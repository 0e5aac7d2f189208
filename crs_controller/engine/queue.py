"""A de-duplicating work queue of keys, with per-key backoff and delayed requeue.

The controller-runtime contract: an item is only a key; a key is never processed by
two workers at once; a key added while it is being processed is processed again
afterwards; a failure retries with exponential backoff; ``requeue_after`` schedules.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time
from collections.abc import Hashable
from dataclasses import dataclass, field


@dataclass(order=True)
class _Timer:
    due: float
    seq: int
    key: Hashable = field(compare=False)


class WorkQueue:
    def __init__(self, *, base_delay: float = 0.5, max_delay: float = 300.0) -> None:
        self._ready: asyncio.Queue[Hashable] = asyncio.Queue()
        self._queued: set[Hashable] = set()
        self._active: set[Hashable] = set()
        self._dirty: set[Hashable] = set()
        self._failures: dict[Hashable, int] = {}
        self._timers: list[_Timer] = []
        # The earliest wake-up per key: periodic requeues do not pile up timers.
        self._scheduled: dict[Hashable, float] = {}
        self._seq = 0
        self._wake = asyncio.Event()
        self._base = base_delay
        self._max = max_delay

    def __len__(self) -> int:
        return len(self._queued) + len(self._dirty)

    def add(self, key: Hashable) -> None:
        if key in self._active:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._ready.put_nowait(key)

    def add_after(self, key: Hashable, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        due = time.monotonic() + delay
        scheduled = self._scheduled.get(key)
        if scheduled is not None and scheduled <= due:
            return  # an earlier wake-up is already set; it will process the key anyway
        self._scheduled[key] = due
        self._seq += 1
        heapq.heappush(self._timers, _Timer(due, self._seq, key))
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
        key = await self._ready.get()
        self._queued.discard(key)
        self._active.add(key)
        return key

    def done(self, key: Hashable) -> None:
        self._active.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    async def run_timers(self) -> None:
        """Move due delayed keys into the ready queue; runs for the queue's lifetime."""
        while True:
            now = time.monotonic()
            while self._timers and self._timers[0].due <= now:
                timer = heapq.heappop(self._timers)
                if self._scheduled.get(timer.key) == timer.due:
                    del self._scheduled[timer.key]
                    self.add(timer.key)
            timeout = self._timers[0].due - now if self._timers else None
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
