"""An object the informer's parse refuses (engine/io/informer) stops only itself: the
informer still syncs and lists and watches every other object, whoever wrote the
refused one; the refused object is kept out of the cache, logged once per version by
kind, namespace and name with the error's type and never its message, and taken as
soon as a version of it parses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import structlog

from crs_controller.clients.api import Obj
from crs_controller.core.rollout.snapshots import SIZE_ANNOTATION, SNAPSHOT_LABEL
from crs_controller.core.spec.objects import SourceMeta, parse_source_meta
from crs_controller.engine.io.informer import Informer, WatchSpec

from .fake_clock import FakeClock
from .memory_kube import MemoryKube

SECRET = "hunter2"
Event = tuple[str, Obj]
GONE: Event = ("ERROR", {"kind": "Status", "code": 410, "reason": "Expired"})  # re-list


def configmap(namespace: str, name: str, version: int, *, bad: bool = False) -> Obj:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    meta["resourceVersion"] = str(version)
    if bad:
        meta["annotations"] = {"bad": SECRET}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def parse(obj: Obj) -> str:
    """A parse that refuses, quoting the object as a real one might."""
    if "bad" in obj["metadata"].get("annotations", {}):
        raise ValueError(f"invalid literal: {obj['metadata']['annotations']['bad']!r}")
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}@{meta['resourceVersion']}"


class Scripted:
    """Lists ``listed`` (the next list of ``lists`` each time), then each watch
    delivers the next script of ``watches`` and ends; past the scripts a watch sets
    ``idle`` and waits for ever."""

    def __init__(self, lists: list[list[Obj]], watches: list[list[Event]]) -> None:
        self._lists, self._watches = lists, watches
        self.idle = asyncio.Event()

    async def pages(self, *args: Any, **kwargs: Any) -> AsyncIterator[tuple[list[Obj], str]]:
        yield self._lists.pop(0) if len(self._lists) > 1 else self._lists[0], "100"

    async def watch(self, *args: Any, **kwargs: Any) -> AsyncIterator[Event]:
        if not self._watches:
            self.idle.set()
            await asyncio.Event().wait()
        for event in self._watches.pop(0):
            await asyncio.sleep(0)
            yield event


async def until_either(
    done: asyncio.Event, clock: FakeClock, running: asyncio.Task[None] | None = None
) -> None:
    """Return once ``done`` is set, the informer waits to retry (a failure) or
    ``running`` (the informer) has ended."""
    waits = [asyncio.ensure_future(done.wait()), asyncio.ensure_future(clock.until_asleep())]
    ends = [running] if running is not None else []
    await asyncio.wait([*waits, *ends], return_when=asyncio.FIRST_COMPLETED)
    for waiting in waits:
        waiting.cancel()


async def following(client: Scripted) -> tuple[list[tuple[Any, Any]], list[dict[str, Any]]]:
    """Run an informer on ``client`` until its scripts are done: what its handler was
    told, and what it logged; it must not have stopped or waited to retry on the way."""
    told: list[tuple[Any, Any]] = []
    clock = FakeClock()
    spec = WatchSpec("v1", "ConfigMap", None, metadata_only=True)
    informer: Informer[str] = Informer(
        client,  # type: ignore[arg-type]
        spec,
        parse,
        lambda old, new: told.append((old, new)),
        clock=clock,
    )
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(informer.run())
        await until_either(client.idle, clock, task)
        stopped = task.done()
        task.cancel()
    if stopped:
        task.result()  # raises what stopped the informer
    assert informer.synced.is_set()
    assert client.idle.is_set()
    return told, [dict(entry) for entry in logs if entry["log_level"] != "debug"]


def refused(logs: list[dict[str, Any]]) -> list[tuple[str | None, str | None, str | None]]:
    assert SECRET not in repr(logs)
    return [
        (e["namespace"], e.get("name"), e.get("error")) for e in logs if "refused" in e["event"]
    ]


async def test_a_refused_object_stops_only_itself_and_is_taken_once_it_parses() -> None:
    listed = [configmap("tenant-a", "poison", 1, bad=True), configmap("tenant-b", "addons", 2)]
    fixed = configmap("tenant-a", "poison", 3)
    later = configmap("tenant-b", "addons", 4)
    client = Scripted([listed], [[("MODIFIED", later), ("MODIFIED", fixed)]])
    told, logs = await following(client)
    assert told == [
        (None, "tenant-b/addons@2"),
        ("tenant-b/addons@2", "tenant-b/addons@4"),
        (None, "tenant-a/poison@3"),
    ]
    assert refused(logs) == [("tenant-a", "poison", "ValueError")]


async def test_an_object_that_no_longer_parses_is_gone_from_the_cache() -> None:
    good, bad = configmap("t", "cm", 1), configmap("t", "cm", 2, bad=True)
    # Seen bad twice (watched, then listed again): logged once.
    client = Scripted([[good], [bad]], [[("MODIFIED", bad), GONE]])
    told, logs = await following(client)
    assert told == [(None, "t/cm@1"), ("t/cm@1", None)]
    assert refused(logs) == [("t", "cm", "ValueError")]


async def test_a_refused_object_deleted_is_nothing_to_tell() -> None:
    bad, other = configmap("t", "cm", 1, bad=True), configmap("t", "other", 2)
    unseen = configmap("t", "unseen", 3, bad=True)
    deletes: list[Event] = [("DELETED", bad), ("DELETED", unseen), ("ADDED", other), GONE]
    client = Scripted([[bad], []], [deletes])
    told, logs = await following(client)
    assert told == [(None, "t/other@2"), ("t/other@2", None)]  # the last: gone from the list
    assert refused(logs) == [("t", "cm", "ValueError"), ("t", "unseen", "ValueError")]


async def test_a_snapshot_size_no_number_parses_does_not_stop_the_configmaps_watch() -> None:
    kube, clock = MemoryKube("management"), FakeClock()
    meta = {"labels": {SNAPSHOT_LABEL: "x"}, "annotations": {SIZE_ANNOTATION: "\u00b2"}}
    poison = configmap("tenant-a", "poison", 0)
    poison["metadata"].update(meta)
    await kube.create(poison)
    await kube.create(configmap("tenant-b", "addons", 0))
    seen: list[SourceMeta | None] = []
    spec = WatchSpec("v1", "ConfigMap", None, metadata_only=True)
    informer = Informer(kube, spec, parse_source_meta, lambda _, new: seen.append(new), clock=clock)
    task = asyncio.create_task(informer.run())
    await until_either(informer.synced, clock)
    task.cancel()
    assert {(s.namespace, s.name) for s in seen if s} == {
        ("tenant-a", "poison"),
        ("tenant-b", "addons"),
    }
    held = informer.get("tenant-a", "poison")
    assert held is not None and held.snapshot_bytes is None


async def test_an_object_whose_metadata_names_nothing_is_refused_alone() -> None:
    nameless: list[Obj] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": None},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": [SECRET]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "t", "name": 7}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "t", "name": ""}},
    ]
    listed = [nameless[0], configmap("t", "listed", 1)]
    watched: list[Event] = [("ADDED", o) for o in nameless[1:]]
    watched += [("DELETED", nameless[0]), ("MODIFIED", configmap("t", "watched", 2))]
    client = Scripted([listed], [watched])
    told, logs = await following(client)
    assert told == [(None, "t/listed@1"), (None, "t/watched@2")]
    assert refused(logs) == [(None, None, None)] * 5


async def test_a_bookmark_whose_metadata_is_no_mapping_is_passed_over() -> None:
    events: list[Event] = [("BOOKMARK", {"metadata": None}), ("BOOKMARK", {"metadata": ["x"]})]
    client = Scripted([[configmap("t", "cm", 1)]], [[*events, ("ADDED", configmap("t", "b", 2))]])
    told, logs = await following(client)
    assert told == [(None, "t/cm@1"), (None, "t/b@2")]
    assert logs == []


async def test_a_watch_failing_on_a_malformed_object_logs_the_error_type_not_its_text() -> None:
    class Malformed(Scripted):
        async def watch(self, *args: Any, **kwargs: Any) -> AsyncIterator[Event]:
            raise ValueError(f"invalid literal: {SECRET!r}")
            yield

    client, clock = Malformed([[configmap("t", "cm", 1)]], []), FakeClock()
    spec = WatchSpec("v1", "ConfigMap", None)
    informer: Informer[str] = Informer(client, spec, parse, lambda *_: None, clock=clock)  # type: ignore[arg-type]
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(informer.run())
        await clock.until_asleep()  # the second failure waits
        task.cancel()
    failed = [e for e in logs if e["event"] == "watch failed"]
    assert [(e["log_level"], e["error"]) for e in failed] == [
        ("debug", "ValueError"),
        ("warning", "ValueError"),
    ]
    assert SECRET not in repr(logs)
