"""Waiting on a clock: the engine's half of ``core.clock``.

``core.clock.Clock`` only tells the time, which the pure decisions and the reconcilers
read. The engine's loops (the work queue's delayed keys, Lease renewals and expiries,
an informer's retries) also *wait* for a time on that clock, so they take a
``WaitingClock``, as k8s.io/utils/clock splits ``PassiveClock`` from ``Clock``.
Production uses ``LoopClock``, the asyncio loop's own monotonic clock; tests pass
tests/unit/fake_clock.FakeClock, whose time moves only when a test says so.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

from crs_controller.core.clock import Clock, MonotonicClock

__all__ = ["LoopClock", "WaitingClock", "sleep_for"]


class WaitingClock(Clock, Protocol):
    """A ``Clock`` that can be waited on."""

    async def sleep_until(self, deadline: float | None, wake: asyncio.Event) -> None:
        """Return once ``wake`` is set or ``deadline`` (``None``: never) has come.

        Like a condition variable, this may return early: callers re-read ``now()``
        and decide again rather than trusting why it returned.
        """
        ...


class LoopClock(MonotonicClock):
    """The real one: ``time.monotonic``, the clock the asyncio loop waits on."""

    async def sleep_until(self, deadline: float | None, wake: asyncio.Event) -> None:
        timeout = None if deadline is None else max(deadline - self.now(), 0.0)
        # Reaching the deadline is an ordinary way to return, not an error.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout)


async def sleep_for(clock: WaitingClock, seconds: float) -> None:
    """Wait ``seconds`` on ``clock`` (nothing cuts it short)."""
    await clock.sleep_until(clock.now() + seconds, asyncio.Event())
