"""A ``Clock`` for tests: time moves only when a test calls ``advance``.

It lives with the tests rather than in ``crs_controller.core`` so that production
code cannot come to depend on it, and so that its test-only introspection
(``until_asleep``, ``deadlines``) is not part of the package.

``advance`` is synchronous and wakes exactly the sleepers whose deadline has come, by
setting the event they wait on; nothing here waits on real time. A test that needs a
woken task to have finished its turn awaits ``until_asleep``: the task is back asleep,
so everything it was going to do in that turn is done.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

__all__ = ["FakeClock"]


@dataclass(eq=False)
class _Sleeper:
    deadline: float | None
    wake: asyncio.Event


class FakeClock:
    """Satisfies ``crs_controller.engine.io.waiting.WaitingClock`` (and so
    ``core.clock.Clock``); starts at an arbitrary time."""

    def __init__(
        self, start: float = 1000.0, wall: datetime = datetime(2026, 11, 22, 10, tzinfo=UTC)
    ) -> None:
        # Not zero, so code that confuses a time with a duration is caught.
        self._now = start
        self._wall_at_start = wall - timedelta(seconds=start)
        self._sleepers: list[_Sleeper] = []
        self._fell_asleep = asyncio.Event()

    def now(self) -> float:
        return self._now

    def wall(self) -> datetime:
        """Moves with ``now``: the wall time at start plus the time advanced."""
        return self._wall_at_start + timedelta(seconds=self._now)

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline has now come."""
        if seconds < 0:
            raise ValueError(f"a monotonic clock cannot go back ({seconds} s)")
        self._now += seconds
        for sleeper in self._sleepers:
            if sleeper.deadline is not None and sleeper.deadline <= self._now:
                sleeper.wake.set()

    async def sleep_until(self, deadline: float | None, wake: asyncio.Event) -> None:
        if wake.is_set() or (deadline is not None and deadline <= self._now):
            return
        sleeper = _Sleeper(deadline, wake)
        self._sleepers.append(sleeper)
        self._fell_asleep.set()
        try:
            await wake.wait()
        finally:
            # Also on cancellation: a cancelled task is no longer asleep.
            self._sleepers.remove(sleeper)

    def deadlines(self) -> list[float | None]:
        """The deadlines of the tasks asleep right now (not yet woken), in order."""
        return [sleeper.deadline for sleeper in self._asleep()]

    async def until_asleep(self, count: int = 1) -> None:
        """Return once ``count`` tasks are asleep on this clock and not yet woken."""
        while len(self._asleep()) < count:
            self._fell_asleep.clear()
            await self._fell_asleep.wait()

    async def until_idle(self, count: int = 1) -> None:
        """Return once ``count`` tasks on this clock sleep with nothing in flight: a request
        cut off at a deadline has a timer asleep on the clock while it runs, gone once
        it is answered, so the sleepers must stay the same for a few turns of the loop."""
        while True:
            await self.until_asleep(count)
            before = self.deadlines()
            for _ in range(8):
                await asyncio.sleep(0)
            if self.deadlines() == before:
                return

    def _asleep(self) -> list[_Sleeper]:
        # A woken sleeper stays listed until its task runs; it is awake already.
        return [sleeper for sleeper in self._sleepers if not sleeper.wake.is_set()]
