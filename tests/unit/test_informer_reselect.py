"""An informer's selector changed (engine/io/informer ``reselect``): the list and watch
start again under it; what the new list holds and the cache did not reaches the
handler as new; what it no longer holds leaves the cache through ``unselected``, never
told to the handler as a deletion; a relist under the same selector still tells the
handler of what is gone; cancelling the informer from outside still stops it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from crs_controller.clients.api import Obj
from crs_controller.engine.io.backoff import Backoff
from crs_controller.engine.io.informer import Informer, WatchSpec

from .fake_clock import FakeClock

NS = "fleet"


def labelled(name: str, bucket: str, version: int = 1) -> Obj:
    meta = {
        "name": name,
        "namespace": NS,
        "resourceVersion": str(version),
        "labels": {"bucket": bucket},
    }
    return {"apiVersion": "v1", "kind": "Thing", "metadata": meta}


class Selecting:
    """Lists what the selector ``bucket in (...)`` selects; its watch waits for ever."""

    def __init__(self, objects: list[Obj]) -> None:
        self.objects = objects
        self.selectors: list[str | None] = []
        self.listed = asyncio.Event()

    async def pages(self, *args: Any, **kwargs: Any) -> AsyncIterator[tuple[list[Obj], str]]:
        selector = kwargs.get("label_selector")
        self.selectors.append(selector)
        wanted = None if selector is None else set(selector[len("bucket in (") : -1].split(","))
        items = [
            o for o in self.objects if wanted is None or o["metadata"]["labels"]["bucket"] in wanted
        ]
        self.listed.set()
        yield items, "10"

    async def watch(self, *args: Any, **kwargs: Any) -> AsyncIterator[tuple[str, Obj]]:
        await asyncio.Event().wait()
        yield ("ADDED", {})


class Told:
    def __init__(self) -> None:
        self.changes: list[tuple[str | None, str | None]] = []
        self.unselected: list[str] = []

    def handler(self, old: str | None, new: str | None) -> None:
        self.changes.append((old, new))

    def dropped(self, old: str) -> None:
        self.unselected.append(old)


def name_of(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


def informer(
    client: Selecting,
    told: Told,
    selector: str | None = None,
    elsewhere: Callable[[tuple[str, str]], Obj | None] | None = None,
) -> Informer[str]:
    spec = WatchSpec("v1", "Thing", label_selector=selector)
    return Informer(
        client,  # type: ignore[arg-type]
        spec,
        name_of,
        told.handler,
        clock=FakeClock(),
        unselected=told.dropped,
        elsewhere=elsewhere,
    )


@contextlib.asynccontextmanager
async def started(things: Informer[str]) -> AsyncIterator[asyncio.Task[None]]:
    """``things`` running, then cancelled from outside, which stops it."""
    running = asyncio.ensure_future(things.run())
    try:
        yield running
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    assert running.cancelled()


OBJECTS = [labelled("a", "1"), labelled("b", "2"), labelled("c", "3")]


async def test_a_new_selector_drops_what_it_leaves_out_without_a_deletion() -> None:
    client, told = Selecting(OBJECTS), Told()
    things = informer(client, told, "bucket in (1,2)")
    await things._relist()
    assert told.changes == [(None, "a"), (None, "b")]
    told.changes.clear()
    things.reselect("bucket in (2,3)")
    await things._relist()
    assert (things.get(NS, "a"), things.get(NS, "b"), things.get(NS, "c")) == (None, "b", "c")
    assert told.changes == [(None, "c")]  # b unchanged; a left the cache unannounced
    assert told.unselected == ["a"]
    assert len(things) == 2


async def test_a_relist_under_the_same_selector_still_tells_what_is_gone() -> None:
    client, told = Selecting(OBJECTS), Told()
    things = informer(client, told, "bucket in (1,2)")
    await things._relist()
    things.reselect("bucket in (1,2)")  # the same: nothing to do
    client.objects = OBJECTS[1:]
    await things._relist()
    assert told.changes[-1] == ("a", None)
    assert told.unselected == []


async def test_a_running_informer_lists_again_under_the_new_selector() -> None:
    client, told = Selecting(OBJECTS), Told()
    things = informer(client, told, "bucket in (1)")
    async with started(things) as running:
        await things.synced.wait()
        client.listed.clear()
        things.reselect("bucket in (3)")
        await client.listed.wait()
        for _ in range(5):
            await asyncio.sleep(0)
        assert client.selectors == ["bucket in (1)", "bucket in (3)"]
        assert (things.get(NS, "a"), things.get(NS, "c")) == (None, "c")
        assert told.unselected == ["a"]
        assert not running.done()


async def test_cancelled_from_outside_while_listing_again_it_stops() -> None:
    client, told = Selecting(OBJECTS), Told()
    things = informer(client, told, "bucket in (1)")
    running = asyncio.ensure_future(things.run())
    await things.synced.wait()
    things.reselect("bucket in (2)")
    running.cancel()  # the controller shutting down at the same moment
    with contextlib.suppress(asyncio.CancelledError):
        await running
    assert running.cancelled()


class Failing(Selecting):
    """Its next ``fail`` lists break off before their first page."""

    fail = 0

    async def pages(self, *args: Any, **kwargs: Any) -> AsyncIterator[tuple[list[Obj], str]]:
        if self.fail:
            self.fail -= 1
            raise ValueError("a malformed page")
        async for page in super().pages(*args, **kwargs):
            yield page


async def test_a_failed_first_list_under_a_new_selector_leaves_the_next_one_the_first() -> None:
    client = Failing([labelled("x", "1"), labelled("y", "2")])
    told = Told()
    inf = informer(client, told)
    await inf._relist()
    told.changes.clear()
    inf.reselect("bucket in (1)")
    client.fail = 1
    with contextlib.suppress(ValueError):
        await inf._relist()
    assert not inf.selection_listed.is_set()
    await inf._relist()  # retried
    assert told.changes == [] and told.unselected == ["y"]
    assert inf.selection_listed.is_set()
    # Listed under it once: the next relist under it tells what is gone as deleted.
    client.objects = []
    await inf._relist()
    assert told.changes == [("x", None)]


async def test_a_relist_keeps_what_another_watch_holds_for_it() -> None:
    client = Selecting([labelled("x", "1")])
    told = Told()
    other = {(NS, "u"): labelled("u", "none", version=4)}
    inf = informer(client, told, "bucket in (1)", elsewhere=other.get)
    inf.put(other[(NS, "u")])
    await inf._relist()
    await inf._relist()
    assert sorted(k for _, k in inf.cached_keys()) == ["u", "x"]
    assert ("u", None) not in told.changes and told.unselected == []
    other.clear()  # its other watch let go of it (labelled since, or deleted)
    await inf._relist()
    assert inf.cached_keys() == [(NS, "x")] and ("u", None) in told.changes


async def test_asked_to_list_again_while_it_backs_off_it_lists_again() -> None:
    # A reshard while the informer waits out the back-off of its second failed list in
    # a row: the restart must list again, not end the watch for good.
    client = Failing([labelled("x", "1")])
    client.fail = 3
    clock = FakeClock()
    inf = Informer(
        client,  # type: ignore[arg-type]
        WatchSpec("v1", "Thing"),
        name_of,
        Told().handler,
        clock=clock,
        backoff=Backoff(lambda: 0.0),
    )
    async with started(inf) as running:
        await clock.until_asleep()  # the second failure's back-off (the first waits not)
        assert client.fail == 1
        inf.reselect("bucket in (1)")
        await asyncio.sleep(0)  # the informer's turn: the restart is handled
        asleep = asyncio.ensure_future(clock.until_asleep())
        await asyncio.wait({running, asleep}, return_when=asyncio.FIRST_COMPLETED)
        asleep.cancel()
        assert not running.done()  # the watch did not end for good
        assert client.fail == 0  # the third list failed too: backing off again
        clock.advance(max(d for d in clock.deadlines() if d is not None) - clock.now())
        await inf.selection_listed.wait()
        assert client.selectors == ["bucket in (1)"] and inf.get(NS, "x") == "x"
        assert not running.done()
