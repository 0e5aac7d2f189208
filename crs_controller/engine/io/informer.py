"""Informers: list+watch loops that keep an in-memory cache of one kind.

Each object is parsed once, as it arrives, by the informer's ``parse`` (see
``core/spec/objects``): the cache holds what the engine reads, never raw JSON. A handler
is told *that* an object changed (old and new versions, for computing which keys to
enqueue); reconcilers read the cache, never the event. Watches resume from the
last resourceVersion (bookmarks included) and re-list after a 410 Gone or an error.
An object whose ``parse`` raises is refused alone: logged (its kind and name, never its
content) and kept out of the cache, as if it did not exist, until a version of it parses;
every other object is still listed and watched, whoever wrote the refused one. So is
one whose metadata names no object (none, not a mapping, no name): logged by its kind.
A relist keeps what the controller cached meanwhile at a version newer than the list's.
``reselect`` changes the label selector: the list and watch start again under it, and
what the new list does not hold leaves the cache through ``unselected``, never as a
deletion told to the handler (it was not deleted, only no longer selected). So does
``list_again``, also during a failure's back-off, which it cuts short: a restart never
ends the watch.
An object this watch stops holding (not listed, or a DELETED event) that another watch
holds for it (``elsewhere``: its label left this selector for that one's) is kept, as
that watch holds it, when that copy is at least as new.
Failures are retried with backoff (``engine/io/backoff``): the first at once, repeats
after growing waits, so that a storm of 410s, streams closed at once or lists without
a resourceVersion cost the API server a few requests a minute, not thousands a second.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

import structlog

from crs_controller.clients.api import KubeAPI, Obj
from crs_controller.core.errors import CRSError
from crs_controller.core.text import safe
from crs_controller.engine.io.backoff import SHORT_WATCH_SECONDS, Backoff
from crs_controller.engine.io.waiting import LoopClock, WaitingClock, sleep_for

log = structlog.get_logger(__name__)

Key = tuple[str, str]
T = TypeVar("T")


def metadata(obj: Obj) -> Mapping[str, Any]:
    """The object's metadata; empty when it has none, or none that is a mapping."""
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def key_of(obj: Obj) -> Key | None:
    """The object's (namespace, name); None when its metadata names no object."""
    meta = metadata(obj)
    namespace, name = meta.get("namespace"), meta.get("name")
    if namespace is None:
        namespace = ""  # cluster-scoped
    if not isinstance(namespace, str) or not isinstance(name, str) or not name:
        return None
    return namespace, name


def obj_key(obj: Obj) -> Key:
    key = key_of(obj)
    if key is None:
        raise ValueError("an object whose metadata names no object")
    return key


@dataclass(frozen=True)
class WatchSpec:
    api_version: str
    kind: str
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    # Cache only metadata (PartialObjectMetadata): for kinds watched broadly whose
    # content is fetched on demand (ConfigMaps, Secrets).
    metadata_only: bool = False


class Informer(Generic[T]):
    def __init__(
        self,
        client: KubeAPI,
        spec: WatchSpec,
        parse: Callable[[Obj], T],
        handler: Callable[[T | None, T | None], None],
        *,
        clock: WaitingClock | None = None,
        backoff: Backoff | None = None,
        unselected: Callable[[T], None] | None = None,
        elsewhere: Callable[[Key], Obj | None] | None = None,
    ) -> None:
        self._client = client
        self._clock: WaitingClock = clock if clock is not None else LoopClock()
        self._backoff = backoff if backoff is not None else Backoff()
        self.spec = spec
        self._parse = parse
        self._handler = handler
        self._store: dict[Key, T] = {}
        self._versions: dict[Key, int] = {}
        self._refused: dict[Key, int] = {}  # the version of each object refused
        self._unselected = unselected
        self._elsewhere = elsewhere
        self._running: asyncio.Task[Any] | None = None  # the task of ``run``
        self._restarting = False  # ``run`` cancelled to list again under a new selector
        self._reselected = False  # the next list is the first under a new selector
        self.synced = asyncio.Event()
        # Cleared by ``reselect`` until the list under the new selector is done.
        self.selection_listed = asyncio.Event()
        self.selection_listed.set()

    def __len__(self) -> int:
        return len(self._store)

    def cached_keys(self) -> list[Key]:
        return list(self._store)

    def reselect(self, label_selector: str | None) -> None:
        """Hold what ``label_selector`` selects from now on: the list and watch start
        again under it (nothing when it is the selector watched already). What the new
        list does not hold leaves the cache through ``unselected``; the handler is not
        told it is gone, as it was not deleted."""
        if label_selector == self.spec.label_selector:
            return
        self.spec = replace(self.spec, label_selector=label_selector)
        self._reselected = True
        self.list_again()

    def list_again(self) -> None:
        """List (and watch) again now: what the list brings that the cache does not
        hold reaches the handler as new. ``selection_listed`` is clear until it is in."""
        self.selection_listed.clear()
        running = self._running
        if running is not None and not running.done() and not self._restarting:
            self._restarting = True
            running.cancel()

    def get(self, namespace: str, name: str) -> T | None:
        return self._store.get((namespace, name))

    def version(self, namespace: str, name: str) -> int:
        """The cached resourceVersion (0 when not cached)."""
        return self._versions.get((namespace, name), 0)

    def put(self, obj: Obj) -> T:
        """Cache an object this controller just wrote or fetched, unless the watch
        already brought a newer version; returns what the cache holds."""
        key = obj_key(obj)
        if key not in self._store or self._versions[key] < resource_version(obj):
            self._keep(key, obj)
        return self._store[key]

    def refresh(self, obj: Obj) -> T:
        """Cache an object just read, also over a cached copy of the same version: what
        is kept of an object may depend on more than its content (a binding's summary,
        for a Cluster that was another replica's)."""
        key = obj_key(obj)
        if key not in self._store or self._versions[key] <= resource_version(obj):
            self._keep(key, obj)
        return self._store[key]

    def reshape(self, namespace: str, name: str, change: Callable[[T], T]) -> None:
        """Keep ``change`` of the cached object instead of it (same version)."""
        held = self._store.get((namespace, name))
        if held is not None:
            self._store[(namespace, name)] = change(held)

    def remove(self, namespace: str, name: str) -> T | None:
        """Forget an object this controller just deleted; returns what was cached."""
        return self._drop((namespace, name))

    def _keep(self, key: Key, obj: Obj) -> tuple[T | None, T]:
        old = self._store.get(key)
        self._store[key] = parsed = self._parse(obj)
        self._versions[key] = resource_version(obj)
        self._refused.pop(key, None)
        return old, parsed

    def _drop(self, key: Key) -> T | None:
        self._versions.pop(key, None)
        self._refused.pop(key, None)
        return self._store.pop(key, None)

    def _take(self, key: Key, obj: Obj) -> None:
        """Cache a listed or watched object and tell the handler; an object ``parse``
        refuses is logged once per version and dropped (the handler told it is gone)."""
        version = resource_version(obj)
        if self._refused.get(key) == version:
            return
        try:
            change = self._keep(key, obj)
        except Exception as exc:
            self._log_refused(key, exc)
            old = self._drop(key)
            self._refused[key] = version
            if old is not None:
                self._handler(old, None)
            return
        self._handler(*change)

    def _deleted(self, key: Key, obj: Obj) -> None:
        """Forget a deleted object and tell the handler what was cached of it (or,
        never cached, what its last version parses to; refused: nothing to tell). One
        held elsewhere at least as new (its label left this selector) is kept."""
        if self._held_elsewhere(key, resource_version(obj)):
            return
        refused = key in self._refused
        old = self._drop(key)
        if old is None and not refused:
            try:
                old = self._parse(obj)
            except Exception as exc:
                self._log_refused(key, exc)
        if old is not None:
            self._handler(old, None)

    def _held_elsewhere(self, key: Key, gone: int) -> bool:
        """Does another watch hold ``key`` at version ``gone`` or newer? Then this
        cache keeps it: that copy, unless it holds a newer one (written meanwhile),
        told to the handler only when it changes what is held."""
        other = self._elsewhere(key) if self._elsewhere is not None else None
        if other is None or resource_version(other) < gone:
            return False
        if key not in self._store or self._versions[key] < resource_version(other):
            self._take(key, other)
        return True

    def _log_refused(self, key: Key, exc: Exception) -> None:
        s = self.spec
        log.warning(
            "object refused: it does not parse",
            api_version=s.api_version,
            kind=s.kind,
            namespace=key[0] or None,
            name=key[1],
            error=type(exc).__name__,  # never its message: it may quote the object
        )

    def _named(self, obj: Obj) -> Key | None:
        """The key of a listed or watched object; one whose metadata names no object is
        refused: logged (its kind, never its content) and left out, as if absent."""
        key = key_of(obj)
        if key is None:
            s = self.spec
            log.warning(
                "object refused: its metadata names no object",
                api_version=s.api_version,
                kind=s.kind,
                namespace=s.namespace,
            )
        return key

    async def run(self) -> None:
        self._running = asyncio.current_task()
        while True:
            try:
                await self._list_and_watch_or_back_off()
            except asyncio.CancelledError:
                if not self._restarting:
                    raise
                # Cancelled by ``list_again``: list again now (under the new selector),
                # unless it was cancelled from outside as well.
                self._restarting = False
                task = asyncio.current_task()
                if task is None or task.uncancel() > 0:
                    raise

    async def _list_and_watch_or_back_off(self) -> None:
        """List and watch; after a failure, wait out its back-off. The wait is not in
        the ``except`` clause: a restart asked meanwhile must reach ``run``'s handler,
        which a cancellation raised inside another handler of its ``try`` would not."""
        try:
            await self._list_and_watch()
            return
        except (CRSError, ValueError, KeyError) as exc:
            # ValueError/KeyError: a malformed line or object; re-list from scratch.
            # Their text may quote the object: only our own errors' is logged.
            said = str(exc) if isinstance(exc, CRSError) else type(exc).__name__
        await self._back_off("watch failed", error=said)

    async def _list_and_watch(self) -> None:
        """List, then watch from the listed version until a re-list is due."""
        version = await self._relist()
        self.synced.set()
        if not version:
            await self._back_off("list answered without a resourceVersion")
            return
        while True:
            started = self._clock.now()
            ended = await self._watch(version)
            # Only a watch that lived its normal while proves the connection sound: events
            # or bookmarks delivered just before an error or a close prove nothing, and
            # counting them would relist or watch again in a tight loop.
            lived = self._clock.now() - started >= SHORT_WATCH_SECONDS
            if lived:
                self._backoff.reset()
            if ended.error is not None:
                await self._back_off("watch ended in an error event", error=ended.error)
                return
            if not lived:
                await self._back_off("watch closed soon after it started")
            version = ended.version

    async def _back_off(self, what: str, **why: str) -> None:
        """Count a failure and wait as long as it calls for (the first: not at all)."""
        wait = self._backoff.failed()
        s = self.spec
        if wait > 0:
            log.warning(
                what,
                api_version=s.api_version,
                kind=s.kind,
                namespace=s.namespace,
                failures=self._backoff.failures,
                retry_in=round(wait, 2),
                **why,
            )
            await sleep_for(self._clock, wait)
        else:
            log.debug(what, api_version=s.api_version, kind=s.kind, **why)

    async def _relist(self) -> str:
        """List page by page, parsing each page as it comes: what is held at once is
        one page's JSON and the parsed cache, never the whole list's JSON."""
        s = self.spec
        reselected = self._reselected
        seen: set[Key] = set()
        version = ""
        async for items, listed in self._client.pages(
            s.api_version,
            s.kind,
            s.namespace,
            label_selector=s.label_selector,
            field_selector=s.field_selector,
            metadata_only=s.metadata_only,
        ):
            version = listed
            for obj in items:
                key = self._named(obj)
                if key is None:
                    continue
                seen.add(key)
                # Newer only, as ``put``: what this controller wrote while the list was
                # under way is newer than the list's snapshot; the watch brings the rest.
                if key not in self._store or self._versions[key] < resource_version(obj):
                    self._take(key, obj)
        self._forget_unlisted(seen, version, reselected)
        if self.spec == s:  # not reselected meanwhile
            # Only now: a list under the new selector that failed is not the first.
            self._reselected = False
            self.selection_listed.set()
        return version

    def _forget_unlisted(self, seen: set[Key], version: str, reselected: bool) -> None:
        """Drop what the list did not hold, but for an object cached at a version newer
        than the list's (written meanwhile: the list could not hold it); a list without
        a resourceVersion cannot be dated, and drops all it did not hold. The first
        list under a new selector drops through ``unselected``, not as deletions. One
        held elsewhere (``_held_elsewhere``) is kept."""
        listed = as_version(version)
        for key in [k for k in self._refused if k not in seen]:
            self._drop(key)
        for key in [k for k in self._store if k not in seen]:
            if self._held_elsewhere(key, 0):
                continue
            if not listed or self._versions[key] <= listed:
                dropped = self._drop(key)
                if not reselected:
                    self._handler(dropped, None)
                elif dropped is not None and self._unselected is not None:
                    self._unselected(dropped)

    async def _watch(self, version: str) -> Watched:
        """Follow one watch to its end."""
        s = self.spec
        async for kind, obj in self._client.watch(
            s.api_version,
            s.kind,
            s.namespace,
            version,
            label_selector=s.label_selector,
            field_selector=s.field_selector,
            metadata_only=s.metadata_only,
        ):
            if kind == "ERROR":
                return Watched(version, error_status(obj))
            version = watched_version(obj, version)
            key = None if kind == "BOOKMARK" else self._named(obj)
            if key is None:
                continue
            if kind == "DELETED":
                self._deleted(key, obj)
            else:
                self._take(key, obj)
        return Watched(version)


@dataclass(frozen=True)
class Watched:
    """How a watch ended: the version to resume from and, for an ERROR event, its
    status (a re-list is due)."""

    version: str
    error: str | None = None


def error_status(status: Obj) -> str:
    """An ERROR event's code and reason, never its message (it may quote an object)."""
    return safe(f"{status.get('code', '?')} {status.get('reason', '')}".strip(), 80)


def as_version(text: str) -> int:
    """A resourceVersion as an integer; 0 for none, or one that is not a number."""
    return int(text) if text.isascii() and text.isdigit() else 0


def resource_version(obj: Obj) -> int:
    """Compared as integers, as every Kubernetes client does in practice."""
    try:
        return int(metadata(obj).get("resourceVersion", 0))
    except (TypeError, ValueError):
        return 0


def watched_version(obj: Obj, before: str) -> str:
    """The resourceVersion a watch resumes from after ``obj``; ``before`` when it has
    none that is a string."""
    version = metadata(obj).get("resourceVersion")
    return version if isinstance(version, str) and version else before
