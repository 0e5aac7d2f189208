"""Time as a dependency: the clock that delayed work waits on.

Code that schedules (the work queue's ``add_after`` and backoff) takes a ``Clock``
instead of calling ``time.monotonic`` so that tests can drive time by hand, as
controller-runtime's queue takes ``now``/``tick`` "configurable for testing". The
production code only ever uses ``MonotonicClock``; the test double lives with the
tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime
from typing import Protocol

__all__ = ["Clock", "MonotonicClock"]


class Clock(Protocol):
    """Monotonic seconds, and a wait for a deadline that an event can cut short."""

    def now(self) -> float:
        """Seconds on a clock that never goes back; only differences mean anything."""
        ...

    def wall(self) -> datetime:
        """The time of day in UTC, for what is written down (lastAppliedTime,
        conditions) and for deadlines that the API states as timestamps."""
        ...

    async def sleep_until(self, deadline: float | None, wake: asyncio.Event) -> None:
        """Return once ``wake`` is set or ``deadline`` (``None``: never) has come.

        Like a condition variable, this may return early: callers re-read ``now()``
        and decide again rather than trusting why it returned.
        """
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic``, the same clock the asyncio loop uses."""

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> datetime:
        return datetime.now(UTC)

    async def sleep_until(self, deadline: float | None, wake: asyncio.Event) -> None:
        timeout = None if deadline is None else max(deadline - self.now(), 0.0)
        # Reaching the deadline is an ordinary way to return, not an error.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout)
