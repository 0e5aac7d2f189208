"""An informer's retries (engine/io/informer, engine/io/backoff) against a scripted
API server on a fake clock: a watch that answers only ERROR events, streams closed at
once without events and lists without a resourceVersion cost a few requests a minute,
not a spin, and so do watches that deliver an event or a bookmark before an error or a
close; the first retry is at once (a single 410 relists without waiting), only a watch
that lived its normal while resets the backoff, and each waiting step is logged once,
naming the resource and never what the server said."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import structlog

from crs_controller.clients.api import Obj
from crs_controller.core.errors import Unreachable
from crs_controller.engine.io.backoff import MAX_SECONDS, Backoff, delay
from crs_controller.engine.io.informer import Informer, WatchSpec
from crs_controller.engine.io.waiting import sleep_for

from .fake_clock import FakeClock

NS = "fleet"
SPIN = 200  # more calls than any backoff allows in the simulated time: a spin
GONE = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old: hunter2"}


def configmap(name: str, version: str) -> Obj:
    return {"metadata": {"name": name, "namespace": NS, "resourceVersion": version}}


class Spinning(Exception):
    """The informer asked more than any backoff allows: it spins."""


class Scripted:
    """Answers each LIST with ``listed`` and each WATCH with ``watch(n)`` (n from 1),
    counting the calls and when (on the fake clock) each watch started."""

    def __init__(
        self,
        clock: FakeClock,
        watch: Callable[[int], AsyncIterator[tuple[str, Obj]]],
        listed: Callable[[int], str] = lambda n: str(n + 4),
    ) -> None:
        self.clock = clock
        self._watch = watch
        self._listed = listed
        self.lists = 0
        self.watches: list[tuple[float, str]] = []  # (started at, from version)

    async def pages(self, *args: Any, **kwargs: Any) -> AsyncIterator[tuple[list[Obj], str]]:
        self.lists += 1
        if self.lists > SPIN:
            raise Spinning(f"{self.lists} lists")
        await asyncio.sleep(0)
        yield [configmap("cm", "1")], self._listed(self.lists)

    def watch(self, *args: Any, **kwargs: Any) -> AsyncIterator[tuple[str, Obj]]:
        self.watches.append((self.clock.now(), args[3]))
        if len(self.watches) > SPIN:
            raise Spinning(f"{len(self.watches)} watches")
        return self._watch(len(self.watches))


async def errors(n: int) -> AsyncIterator[tuple[str, Obj]]:
    await asyncio.sleep(0)
    yield "ERROR", GONE


async def closed(n: int) -> AsyncIterator[tuple[str, Obj]]:
    await asyncio.sleep(0)
    return
    yield  # an async generator that yields nothing


def informer(client: Scripted, jitter: float | None = None) -> Informer[Obj]:
    backoff = None if jitter is None else Backoff(lambda: jitter)
    return Informer(
        client,  # type: ignore[arg-type]
        WatchSpec("v1", "ConfigMap", NS),
        lambda obj: obj,
        lambda old, new: None,
        clock=client.clock,
        backoff=backoff,
    )


async def run_for(informer: Informer[Obj], clock: FakeClock, seconds: float) -> None:
    """Run ``informer`` for ``seconds`` of the fake clock: whenever it is asleep, move
    the clock to the next deadline. Raises what ended it (``Spinning``)."""
    task = asyncio.create_task(informer.run())
    end = clock.now() + seconds
    try:
        while True:
            asleep = asyncio.create_task(clock.until_asleep())
            await asyncio.wait([task, asleep], return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                asleep.cancel()
                task.result()
            deadline = min(d for d in clock.deadlines() if d is not None)
            if deadline > end:
                return
            clock.advance(deadline - clock.now())
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_waits_double_from_the_second_retry_up_to_the_cap_and_jitter_only_shortens() -> None:
    assert [delay(n, 0.0) for n in range(1, 10)] == [0, 0.5, 1, 2, 4, 8, 16, 30, 30]
    assert delay(10_000, 0.0) == MAX_SECONDS  # no overflow after hours of failures
    for n in range(2, 12):
        assert delay(n, 0.0) / 2 < delay(n, 0.999) <= delay(n, 0.0)


@pytest.mark.parametrize("jitter", [None, 0.0, 0.999])
async def test_a_watch_answering_only_errors_relists_a_few_times_a_minute(
    jitter: float | None,
) -> None:
    clock = FakeClock()
    client = Scripted(clock, errors)
    await run_for(informer(client, jitter), clock, 60)
    # 0, 0, 0.5, 1.5, 3.5, 7.5, 15.5, 31.5 without jitter; jitter at most halves waits.
    assert 8 <= client.lists <= 10
    assert len(client.watches) == client.lists


async def test_watches_closed_at_once_without_events_are_asked_again_a_few_times_a_minute() -> None:
    clock = FakeClock()
    client = Scripted(clock, closed)
    await run_for(informer(client), clock, 60)
    assert 8 <= len(client.watches) <= 10
    # Resumed from the listed version: a closed stream is no reason to list again.
    assert client.lists == 1
    assert {version for _, version in client.watches} == {"5"}


async def test_lists_without_a_resource_version_are_asked_again_a_few_times_a_minute() -> None:
    clock = FakeClock()
    client = Scripted(clock, errors, listed=lambda n: "")
    subject = informer(client)
    await run_for(subject, clock, 60)
    assert 8 <= client.lists <= 10
    assert client.watches == []
    # What was listed is cached all the same.
    assert subject.synced.is_set() and subject.get(NS, "cm") is not None


async def test_a_watch_refused_at_once_after_every_good_list_backs_off_all_the_same() -> None:
    clock = FakeClock()

    async def refused(n: int) -> AsyncIterator[tuple[str, Obj]]:
        await asyncio.sleep(0)
        raise Unreachable("watch: connection reset")
        yield

    client = Scripted(clock, refused)
    await run_for(informer(client), clock, 60)
    # A list that succeeds proves nothing about the watch: no reset between them.
    assert 8 <= client.lists <= 10


async def test_a_single_410_relists_at_once() -> None:
    clock = FakeClock()

    async def gone_once(n: int) -> AsyncIterator[tuple[str, Obj]]:
        if n == 1:
            yield "ERROR", GONE
        await sleep_for(clock, 290)  # then a watch that lives its normal while

    client = Scripted(clock, gone_once)
    task = asyncio.create_task(informer(client).run())
    await clock.until_asleep()
    assert client.lists == 2
    assert client.watches == [(clock.now(), "5"), (clock.now(), "6")]
    assert clock.deadlines() == [clock.now() + 290]  # the watch's, not a backoff
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_a_watch_that_ends_after_its_normal_while_is_asked_again_at_once() -> None:
    clock = FakeClock()

    async def quiet(n: int) -> AsyncIterator[tuple[str, Obj]]:
        await sleep_for(clock, 290)
        return
        yield

    client = Scripted(clock, quiet)
    start = clock.now()
    await run_for(informer(client), clock, 600)
    assert [at - start for at, _ in client.watches] == [0, 290, 580]
    assert client.lists == 1


async def test_a_watch_that_delivered_events_and_closed_at_once_does_not_reset_the_backoff() -> (
    None
):
    clock = FakeClock()

    async def events_on_the_sixth(n: int) -> AsyncIterator[tuple[str, Obj]]:
        await asyncio.sleep(0)
        if n == 6:
            yield "ADDED", configmap("new", "9")

    client = Scripted(clock, events_on_the_sixth)
    await run_for(informer(client, jitter=0.0), clock, 60)
    starts = [at - client.watches[0][0] for at, _ in client.watches]
    # Each closed soon after it started, the sixth after its event all the same: waits
    # 0, 0.5, 1, 2, 4, 8, 16 go on growing.
    assert starts[:8] == [0, 0, 0.5, 1.5, 3.5, 7.5, 15.5, 31.5]
    assert client.watches[6][1] == "9"  # resumed after the event


async def modified_then_gone(n: int) -> AsyncIterator[tuple[str, Obj]]:
    await asyncio.sleep(0)
    yield "MODIFIED", configmap("cm", str(n + 10))
    yield "ERROR", GONE


async def bookmark_then_closed(n: int) -> AsyncIterator[tuple[str, Obj]]:
    await asyncio.sleep(0)
    yield "BOOKMARK", {"metadata": {"resourceVersion": str(n + 10)}}


async def test_watches_that_deliver_an_event_then_an_error_relist_a_few_times_a_minute() -> None:
    clock = FakeClock()
    client = Scripted(clock, modified_then_gone)
    await run_for(informer(client), clock, 60)
    assert 8 <= client.lists <= 10


async def test_watches_giving_a_bookmark_then_closing_are_asked_again_a_few_times_a_minute() -> (
    None
):
    clock = FakeClock()
    client = Scripted(clock, bookmark_then_closed)
    await run_for(informer(client), clock, 60)
    assert 8 <= len(client.watches) <= 10
    assert client.lists == 1
    assert [version for _, version in client.watches[:3]] == ["5", "11", "12"]


async def test_a_watch_that_lived_its_normal_while_then_410_relists_at_once_each_time() -> None:
    clock = FakeClock()

    async def lived_then_gone(n: int) -> AsyncIterator[tuple[str, Obj]]:
        await sleep_for(clock, 290)
        yield "ERROR", GONE

    client = Scripted(clock, lived_then_gone)
    start = clock.now()
    await run_for(informer(client), clock, 1000)
    # Each watch proved sound before its 410: the relist after it is a first failure.
    assert [at - start for at, _ in client.watches] == [0, 290, 580, 870]
    assert client.lists == 4


async def test_each_waiting_step_is_logged_once_naming_the_resource_not_the_answer() -> None:
    clock = FakeClock()
    client = Scripted(clock, errors)
    with structlog.testing.capture_logs() as logs:
        await run_for(informer(client, jitter=0.0), clock, 60)
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    # Every relist after the first two waited, and said so once.
    assert len(warnings) == client.lists - 2 + 1  # and the wait still under way
    assert all(w["kind"] == "ConfigMap" and w["namespace"] == NS for w in warnings)
    assert all(w["error"] == "410 Expired" for w in warnings)
    assert [w["retry_in"] for w in warnings[:3]] == [0.5, 1, 2]
    assert "hunter2" not in repr(logs)
