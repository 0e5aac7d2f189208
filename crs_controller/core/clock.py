"""Time as a dependency: the clock that decisions read.

Code that schedules (the work queue's ``add_after`` and backoff, Lease expiry) takes
a ``Clock`` instead of calling ``time.monotonic`` so that tests can drive time by
hand, as controller-runtime's queue takes ``now``/``tick`` "configurable for
testing". Waiting for a time is the engine's business
(``engine.io.waiting.WaitingClock``); the test double lives with the tests.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol

__all__ = ["Clock", "MonotonicClock"]


class Clock(Protocol):
    """Monotonic seconds, and the time of day."""

    def now(self) -> float:
        """Seconds on a clock that never goes back; only differences mean anything."""
        ...

    def wall(self) -> datetime:
        """The time of day in UTC, for what is written down (lastAppliedTime,
        conditions, Lease renewals) and for deadlines that the API states as
        timestamps."""
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic``, the same clock the asyncio loop uses."""

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> datetime:
        return datetime.now(UTC)
