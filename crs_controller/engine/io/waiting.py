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
from collections.abc import Awaitable
from typing import Protocol, TypeVar

from crs_controller.core.clock import Clock, MonotonicClock

__all__ = ["LoopClock", "WaitingClock", "by_deadline", "sleep_for"]

T = TypeVar("T")


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


async def by_deadline(clock: WaitingClock, deadline: float, work: Awaitable[T]) -> T:
    """``work``'s result, or TimeoutError once ``deadline`` on ``clock`` comes first
    (``work`` is then cancelled): ``asyncio.timeout`` on the injected clock."""
    task = asyncio.ensure_future(work)
    timer = asyncio.ensure_future(clock.sleep_until(deadline, asyncio.Event()))
    try:
        await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in (timer, task):
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting  # the work's own failure, if it failed, goes up
    if task.cancelled():
        raise TimeoutError(f"not done by {deadline:g}")
    return task.result()
