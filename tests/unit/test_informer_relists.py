"""A relist (engine/io/informer) after a 410 or an API server restart keeps what the
controller wrote while the list was under way: an object cached at a version newer
than the list's stays as written, one created meanwhile stays cached, and the handler
is told of no step back; what the list no longer holds and nobody wrote since is
still dropped."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from crs_controller.clients.api import Obj
from crs_controller.engine.io.informer import Informer, WatchSpec

from .fake_clock import FakeClock

NS = "fleet"
GONE = ("ERROR", {"kind": "Status", "code": 410, "reason": "Expired"})


def binding(name: str, version: int) -> Obj:
    meta = {"name": name, "namespace": NS, "resourceVersion": str(version)}
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta}


def parse(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta['name']}@{meta['resourceVersion']}"


class Relisting:
    """The first list holds ``first`` at version 90 and its watch ends in a 410; the
    second list waits for ``release`` and then holds ``second`` at version 100 (its
    snapshot, taken before the writes made meanwhile); its watch waits for ever."""

    def __init__(self, first: list[Obj], second: list[Obj]) -> None:
        self._lists = [(first, "90"), (second, "100")]
        self.listing = asyncio.Event()
        self.release = asyncio.Event()
        self.watching = asyncio.Event()
        self._watches = 0

    async def pages(self, *args: Any, **kwargs: Any) -> AsyncIterator[tuple[list[Obj], str]]:
        items, version = self._lists.pop(0)
        if not self._lists:
            self.listing.set()
            await self.release.wait()
        yield items, version

    async def watch(self, *args: Any, **kwargs: Any) -> AsyncIterator[tuple[str, Obj]]:
        self._watches += 1
        if self._watches == 1:
            yield GONE
            return
        self.watching.set()
        await asyncio.Event().wait()


async def test_a_relist_keeps_what_was_written_while_it_listed() -> None:
    a, b, gone = binding("a", 80), binding("b", 85), binding("gone", 86)
    client = Relisting([a, b, gone], [a, binding("b", 100)])
    told: list[tuple[str | None, str | None]] = []
    informer: Informer[str] = Informer(
        client,  # type: ignore[arg-type]
        WatchSpec("v1", "Binding", NS),
        parse,
        lambda old, new: told.append((old, new)),
        clock=FakeClock(),
    )
    task = asyncio.create_task(informer.run())
    try:
        await client.listing.wait()
        told.clear()
        # Written while the relist awaits its list: b updated, c created.
        assert informer.put(binding("b", 105)) == "b@105"
        assert informer.put(binding("c", 106)) == "c@106"
        client.release.set()
        await client.watching.wait()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert informer.get(NS, "b") == "b@105" and informer.version(NS, "b") == 105
    assert informer.get(NS, "c") == "c@106" and informer.version(NS, "c") == 106
    assert informer.get(NS, "a") == "a@80"
    # Gone from the list and not written since: dropped, and the handler told.
    assert informer.get(NS, "gone") is None
    assert told == [("gone@86", None)]
