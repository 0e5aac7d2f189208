"""The ConfigMaps and Secrets the controller reads, fetched on demand.

ConfigMaps and Secrets are watched as metadata only, so the content of objects no CRS
references never reaches the controller. A referenced one (or a cluster's kubeconfig
Secret) is fetched when its resourceVersion moves past the copy held here: one GET per
change, however many clusters use it and however many workers miss it at once (they
share the one GET in flight). Each source is hashed once per content change
and parsed once per content, both in a worker thread unless it is small.

What is held is bounded by bytes, not by count, since one tenant decides how large
its sources are (a ConfigMap or Secret is at most ~1 MiB: etcd's request limit, the
API server's check on ``data``): fetched objects up to ``CONTENT_BUDGET_BYTES``,
parsed manifests up to ``PARSED_BUDGET_BYTES`` (an estimate of the Python objects),
least recently used out first; a source evicted is fetched again with one GET, or
parsed again. Each content's verdict, valid or the refusal (InvalidManifest,
WrongSecretType, a short message), is kept apart, by count: no amount of large
sources pushes one out, so a hostile source is not parsed again on every retry, and
the CRS status, which needs only the verdict, never parses an evicted source again.

Each load notes what it found (the content's hash, or why the source cannot be
used). One that finds something else than the load before it takes a new change
number and says so (``on_change``): a source's number moves with every change a
pass could have acted on, A to B and back to A included, and never for a new
version whose content is the same (labels, annotations).
"""

from __future__ import annotations

import asyncio
import itertools
import sys
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import structlog

from crs_controller.clients.api import KubeAPI, Obj
from crs_controller.core.api.models import ResourceRef
from crs_controller.core.errors import InvalidManifest, ResourceError, ResourceNotFound
from crs_controller.core.manifests.hashing import object_hash, resource_hash
from crs_controller.core.manifests.limits import NODE_BYTES, count_nodes
from crs_controller.core.render import parse_source
from crs_controller.core.spec.objects import SourceMeta
from crs_controller.engine.io import metrics
from crs_controller.engine.io.informer import Informer, resource_version

log = structlog.get_logger(__name__)

# A ConfigMap's or Secret's data is at most 1 MiB: the API server refuses more
# (validation's MaxSecretSize; 1 MiB of ConfigMap data and binaryData together), and
# etcd takes requests of at most 1.5 MiB. A Secret's data is base64 (4/3 as long).
# Checked here all the same, before parsing: the limits below assume it.
MAX_SOURCE_CHARACTERS = 1536 * 1024
# The budgets keep the controller well under the Deployment's 512 Mi limit
# (config/manager/manager.yaml): ~50 MiB at rest, these 96 MiB, PARSES_AT_ONCE
# parses in flight, and the workload answers' own limits (clients/kube).
CONTENT_BUDGET_BYTES = 32 * 1024 * 1024
PARSED_BUDGET_BYTES = 64 * 1024 * 1024
VERDICTS_KEPT = 8192  # each None or a message of at most ~1 KiB
# Parsed objects in memory, per node (NODE_BYTES) and per source byte: Calico's
# 710 KB holds 1.5 MiB. Aliases are shared, not copied, so a node count overstates
# them; the byte factor (the worst measured) bounds them.
WORST_BYTES_FACTOR = 24
# Every parse runs in a worker thread, so the event loop keeps serving every other
# CRS and cluster meanwhile, except a value so small that its parse is cheap
# whatever its shape: under 1 KiB, at most ~1 ms (the densest YAML, libyaml). Its
# keys count too (see _data_bytes). A source's content hash, far cheaper per byte
# but computed once per change however large, follows the same rule.
PARSE_INLINE_BYTES = 1024
# A parse's peak is far above what it keeps (the composed node graph of a document,
# ~340 B a node, before it is checked and built: 230 MiB for 1 MiB of "[{},{},…]"),
# so only this many large ones run at once (the controller's CPU limit is 1 core).
PARSES_AT_ONCE = 2

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ByteBudgetLRU(Generic[K, V]):
    """Least recently used first out, holding entries whose costs (bytes) add up to
    at most ``budget``. An entry costing more than the whole budget is not kept."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.total = 0
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: K) -> bool:
        return key in self._entries

    def get(self, key: K) -> V | None:
        held = self._entries.get(key)
        if held is None:
            return None
        self._entries.move_to_end(key)
        return held[0]

    def put(self, key: K, value: V, cost: int) -> None:
        self.pop(key)
        if cost > self.budget:
            return
        self._entries[key] = (value, cost)
        self.total += cost
        while self.total > self.budget:
            _, (_, evicted) = self._entries.popitem(last=False)
            self.total -= evicted

    def pop(self, key: K) -> V | None:
        held = self._entries.pop(key, None)
        if held is None:
            return None
        self.total -= held[1]
        return held[0]


ContentKey = tuple[str, str, str]  # namespace, kind, name


@dataclass(frozen=True)
class Manifest:
    """A source's objects in apply order, and each one's content hash."""

    objects: tuple[dict[str, Any], ...]
    hashes: tuple[str, ...]
    cost: int = 0  # estimated bytes its objects hold


@dataclass(frozen=True)
class Source:
    """A referenced resource as it is now: its hash, or why it cannot be used."""

    ref: ResourceRef
    hash: str = ""
    error: ResourceError | None = None
    raw: Obj | None = None


class Sources:
    def __init__(
        self,
        client: KubeAPI,
        configmaps: Informer[SourceMeta],
        secrets: Informer[SourceMeta],
        on_change: Callable[[str, str, str], None] | None = None,
        named: Callable[[str, str, str], bool] | None = None,
    ) -> None:
        self._client = client
        self._on_change = on_change
        # What each source's last load found, with its change number: kept for the
        # sources ``named`` says a CRS names (every one loaded without it), and
        # dropped by ``unnamed`` once none does, so the record is as large as the
        # CRSs' references and nothing a CRS names is ever forgotten meanwhile.
        self._named = named
        self._seen: dict[ContentKey, tuple[str, int]] = {}
        self._changes = itertools.count(1)
        self._informers = {"ConfigMap": configmaps, "Secret": secrets}
        self._contents: ByteBudgetLRU[ContentKey, Obj] = ByteBudgetLRU(CONTENT_BUDGET_BYTES)
        self._hashes: dict[ContentKey, tuple[int, str]] = {}
        self._hashing: dict[ContentKey, tuple[int, asyncio.Future[str]]] = {}
        self._parsed: ByteBudgetLRU[str, Manifest] = ByteBudgetLRU(PARSED_BUDGET_BYTES)
        self._verdicts: OrderedDict[str, ResourceError | None] = OrderedDict()
        self._parsing: dict[str, asyncio.Future[Manifest | ResourceError]] = {}
        self._fetching: dict[ContentKey, tuple[int, asyncio.Future[Obj | None]]] = {}
        self._slots = asyncio.Semaphore(PARSES_AT_ONCE)

    async def content(self, namespace: str, kind: str, name: str) -> Obj | None:
        """The full object, or None when the watch says it does not exist."""
        key = (namespace, kind, name)
        watched = self._informers[kind]
        if watched.get(namespace, name) is None:
            self.forget(*key)
            return None
        held = self._contents.get(key)
        wanted = watched.version(namespace, name)
        if held is not None and resource_version(held) >= wanted:
            return held
        return await self._fetch_once(key, wanted)

    async def _fetch_once(self, key: ContentKey, wanted: int) -> Obj | None:
        """GET in a task of its own, shared by every caller that wants this version or
        an older one meanwhile: the workers that miss together send one GET, not one
        each; a caller that is cancelled does not cancel it for the others."""
        running = self._fetching.get(key)
        if running is None or running[0] < wanted:
            task = asyncio.ensure_future(self._fetch_and_keep(key))
            task.add_done_callback(_retrieved)
            running = self._fetching[key] = (wanted, task)
        return await asyncio.shield(running[1])

    async def _fetch_and_keep(self, key: ContentKey) -> Obj | None:
        """GET the object for its callers; kept only while this fetch is still the
        key's: one ``forget`` meanwhile (a Cluster handed over, its kubeconfig with
        it) dropped, or a newer version's fetch superseded, keeps nothing, however
        late the answer comes."""
        namespace, kind, name = key
        try:
            fetched = await self._client.get("v1", kind, name, namespace)
        finally:
            running = self._fetching.get(key)
            current = running is not None and running[1] is asyncio.current_task()
            if current:
                del self._fetching[key]
        if fetched is None:
            if current:  # else a fetch since started finds out for itself
                self.forget(*key)
            return None
        fetched.setdefault("kind", kind)
        metadata = fetched.get("metadata")
        if isinstance(metadata, dict):
            metadata.pop("managedFields", None)  # never read; as large as data's keys
        if current:
            self._contents.put(key, fetched, _held_bytes(fetched))
        return fetched

    async def load(self, namespace: str, ref: ResourceRef) -> Source:
        source = await self._load(namespace, ref)
        self._note((namespace, ref.kind, ref.name), source)
        return source

    async def change(self, namespace: str, ref: ResourceRef) -> int:
        """Load the source now and give its change number: the same number as long as
        every load of it found the same (see ``_note``). The caller is the one that
        compares: a change this load finds is not told."""
        key = (namespace, ref.kind, ref.name)
        return self._note(key, await self._load(namespace, ref), tell=False)

    def noted(self, namespace: str, ref: ResourceRef) -> int | None:
        """The source's change number as its last load left it, loading nothing
        (None: not loaded since a CRS named it)."""
        held = self._seen.get((namespace, ref.kind, ref.name))
        return None if held is None else held[1]

    def unnamed(self, namespace: str, kind: str, name: str) -> None:
        """No CRS names this source any more: what its loads found is not kept."""
        self._seen.pop((namespace, kind, name), None)

    def _note(self, key: ContentKey, source: Source, *, tell: bool = True) -> int:
        """Keep what a load found, and give its change number: something else than
        the load before it (or a source not noted yet) takes a new number, and is
        told. A source no CRS names is not kept (a pass of a CRS deleted or edited
        meanwhile): its number is new each time, and nobody is told."""
        found = source.hash if source.error is None else f"!{source.error.reason}: {source.error}"
        held = self._seen.get(key)
        if held is not None and held[0] == found:
            return held[1]
        number = next(self._changes)
        if self._named is not None and not self._named(*key):
            return number
        self._seen[key] = (found, number)
        if tell and self._on_change is not None:
            self._on_change(*key)
        return number

    async def _load(self, namespace: str, ref: ResourceRef) -> Source:
        raw = await self.content(namespace, ref.kind, ref.name)
        if raw is None:
            error = ResourceNotFound(f"{ref.kind} {namespace}/{ref.name} not found")
            return Source(ref, error=error)
        try:
            digest = await self._hash((namespace, ref.kind, ref.name), raw)
        except ResourceError as exc:
            return Source(ref, error=exc)
        return Source(ref, hash=digest, raw=raw)

    async def _hash(self, key: ContentKey, raw: Obj) -> str:
        """The content hash of this version of a source, computed once: on the event
        loop when the source is small, else in a worker thread shared by every caller
        that wants it meanwhile."""
        version = resource_version(raw)
        cached = self._hashes.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        if _data_bytes(raw) <= PARSE_INLINE_BYTES:
            return self._keep_hash(key, version, resource_hash(raw))
        running = self._hashing.get(key)
        if running is None or running[0] != version:
            task = asyncio.ensure_future(self._hash_in_thread(key, version, raw))
            task.add_done_callback(_retrieved)
            running = self._hashing[key] = (version, task)
        return await asyncio.shield(running[1])

    async def _hash_in_thread(self, key: ContentKey, version: int, raw: Obj) -> str:
        try:
            digest = await asyncio.to_thread(resource_hash, raw)
        finally:
            running = self._hashing.get(key)
            current = running is not None and running[1] is asyncio.current_task()
            if current:
                del self._hashing[key]
        # A hash of a source forgotten or changed meanwhile is not kept for it.
        return self._keep_hash(key, version, digest) if current else digest

    def _keep_hash(self, key: ContentKey, version: int, digest: str) -> str:
        metrics.SOURCE_HASHES.inc()
        self._hashes[key] = (version, digest)
        # Once per content change, whatever the number of clusters: worth a line.
        log.info("source hashed", source="/".join(key), hash=digest)
        return digest

    async def objects(self, source: Source) -> list[dict[str, Any]]:
        """Parsed objects in apply order; raises InvalidManifest. Cached per hash."""
        return list((await self.manifest(source)).objects)

    async def manifest(self, source: Source) -> Manifest:
        """Parsed objects in apply order with each one's hash; raises InvalidManifest.
        Cached per hash."""
        assert source.raw is not None
        key = _parsed_key(source)
        cached = self._parsed.get(key) or self._verdict(key)
        if cached is None:
            cached = await self._parse_once(key, source.raw)
        if isinstance(cached, ResourceError):
            # The same instance each retry: without this its traceback would grow.
            raise cached.with_traceback(None)
        return cached

    async def problem(self, source: Source) -> ResourceError | None:
        """Why the source's content cannot be used, or None: from the verdict kept per
        content, parsing only a content never seen (or long forgotten)."""
        key = _parsed_key(source)
        if key in self._verdicts:
            self._verdicts.move_to_end(key)
            return self._verdicts[key]
        try:
            await self.manifest(source)
        except ResourceError as exc:
            return exc
        return None

    def _verdict(self, key: str) -> ResourceError | None:
        """The refusal of this content if it was refused (a valid one: None)."""
        refused = self._verdicts.get(key)
        if refused is not None:
            self._verdicts.move_to_end(key)
        return refused

    async def _parse_once(self, key: str, raw: Obj) -> Manifest | ResourceError:
        """Parse in a task of its own: concurrent callers for the same content share
        it, and a caller that is cancelled (a reconcile timeout) does not waste it."""
        task = self._parsing.get(key)
        if task is None:
            task = asyncio.ensure_future(self._parse_and_keep(key, raw))
            self._parsing[key] = task
        return await asyncio.shield(task)

    async def _parse_and_keep(self, key: str, raw: Obj) -> Manifest | ResourceError:
        try:
            if _value_characters(raw) > MAX_SOURCE_CHARACTERS:
                parsed: Manifest | ResourceError = _too_large(raw)
            elif _data_bytes(raw) <= PARSE_INLINE_BYTES:
                metrics.SOURCE_PARSES.inc()
                parsed = _parse(raw)
            else:
                async with self._slots:
                    metrics.SOURCE_PARSES.inc()
                    parsed = await asyncio.to_thread(_parse, raw)
        finally:
            del self._parsing[key]
        if not isinstance(parsed, ResourceError):
            self._parsed.put(key, parsed, parsed.cost)
        self._verdicts[key] = parsed if isinstance(parsed, ResourceError) else None
        self._verdicts.move_to_end(key)
        if len(self._verdicts) > VERDICTS_KEPT:
            self._verdicts.popitem(last=False)
        return parsed

    def forget(self, namespace: str, kind: str, name: str) -> None:
        """Drop what is held of the object, and the fetch of it under way: its callers
        still get its answer, which is not kept (``_fetch_and_keep``); a later read
        fetches again."""
        self._contents.pop((namespace, kind, name))
        self._hashes.pop((namespace, kind, name), None)
        self._hashing.pop((namespace, kind, name), None)
        self._fetching.pop((namespace, kind, name), None)


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Mark a shared task's failure as seen: every caller may have been cancelled."""
    if not task.cancelled():
        task.exception()


def _too_large(raw: Obj) -> InvalidManifest:
    metadata = raw.get("metadata") or {}
    where = f"{raw.get('kind')} {metadata.get('namespace')}/{metadata.get('name')}"
    return InvalidManifest(f"{where}: data is larger than the API server allows (1 MiB)")


def _parsed_key(source: Source) -> str:
    # Keyed by resource (namespace, kind, name) as well as hash: a refusal's message
    # names its resource, and the same content under the same name in another
    # namespace must never be answered with this one's message.
    metadata = (source.raw or {}).get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    return f"{namespace or ''}/{source.ref.kind}/{source.ref.name}/{source.hash}"


def _parse(raw: Obj) -> Manifest | ResourceError:
    try:
        objects = parse_source(raw)
    except ResourceError as exc:
        return exc
    hashes = tuple(object_hash(o) for o in objects)
    cost = parsed_cost(_data_bytes(raw), count_nodes(objects))
    return Manifest(tuple(objects), hashes, cost)


def parsed_cost(source_bytes: int, nodes: int) -> int:
    """Estimated bytes held by the objects parsed from a source (see NODE_BYTES)."""
    return min(source_bytes + NODE_BYTES * nodes, WORST_BYTES_FACTOR * source_bytes)


# Held per object besides its values: metadata without managedFields, the dicts;
# and per value: its key and its slot.
_OBJECT_BYTES = 2048
_ENTRY_BYTES = 128
# Work per key besides its characters: each value is parsed on its own (a parser set
# up for it, ~100-200 us however small), about what 128 characters of value cost.
_KEY_BYTES = 128


def _data_bytes(raw: Obj) -> int:
    """About how many bytes of data a ConfigMap/Secret is to parse, hash and hold: the
    characters of its keys and values and _KEY_BYTES a key, so that 150,000 keys with
    nothing in them count as the work they are."""
    return sum(
        _KEY_BYTES * len(held) + _characters(held) + _characters(held.values())
        for held in _data_maps(raw)
    )


def _value_characters(raw: Obj) -> int:
    """The characters of a ConfigMap/Secret's values: what the API server limits."""
    return sum(_characters(held.values()) for held in _data_maps(raw))


def _held_bytes(raw: Obj) -> int:
    """About how many bytes a fetched ConfigMap/Secret holds in memory: its values as
    Python stores them (1 to 4 bytes a character), and the rest of the object."""
    return _OBJECT_BYTES + sum(
        _ENTRY_BYTES * len(held) + sum(map(sys.getsizeof, held.values()))
        for held in _data_maps(raw)
    )


# These run on the event loop for every source, so they leave the per-key work to
# built-ins: a Python loop over 150,000 keys would itself stall it for ~50 ms.


def _data_maps(raw: Obj) -> list[Mapping[Any, Any]]:
    maps = (raw.get(field) for field in ("data", "binaryData", "stringData"))
    return [held for held in maps if isinstance(held, Mapping)]


def _characters(strings: Iterable[Any]) -> int:
    try:
        return sum(map(len, strings))
    except TypeError:  # not all strings, which parsing refuses: an estimate will do
        return sum(len(item) for item in strings if isinstance(item, str))
