"""The runtime's clocks (engine/io/waiting): the real one returns at once when
woken or past its deadline, and waits on the asyncio loop otherwise; the test clock
and the real one are both what the runtime's loops wait on."""

from __future__ import annotations

import asyncio

from crs_controller.engine.io.waiting import LoopClock, WaitingClock, sleep_for

from .fake_clock import FakeClock

SAFETY = 5.0  # seconds: only ever reached if the code under test is broken


async def test_the_loop_clock_returns_at_once_when_woken_or_past_the_deadline() -> None:
    clock = LoopClock()
    await asyncio.wait_for(clock.sleep_until(clock.now() - 1, asyncio.Event()), SAFETY)
    woken = asyncio.Event()
    woken.set()
    await asyncio.wait_for(clock.sleep_until(None, woken), SAFETY)


async def test_sleep_for_waits_on_the_clock_it_is_given() -> None:
    clock = FakeClock()
    sleeping = asyncio.create_task(sleep_for(clock, 3))
    await clock.until_asleep()
    assert clock.deadlines() == [clock.now() + 3]
    clock.advance(2.9)
    await asyncio.sleep(0)
    assert not sleeping.done()
    clock.advance(0.1)
    await asyncio.wait_for(sleeping, SAFETY)


def test_both_clocks_are_waiting_clocks() -> None:
    clocks: list[WaitingClock] = [LoopClock(), FakeClock()]
    assert all(clock.now() > 0 for clock in clocks)
