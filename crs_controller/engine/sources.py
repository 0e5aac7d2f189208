"""The ConfigMaps and Secrets the controller reads, fetched on demand.

ConfigMaps and Secrets are watched as metadata only, so the content of objects no CRS
references never reaches the controller. A referenced one (or a cluster's kubeconfig
Secret) is fetched when its resourceVersion moves past the copy held here: one GET per
change, however many clusters use it. Each source is hashed once per content change
and parsed once per content.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crs_controller.clients.kube import KubeClient, Obj
from crs_controller.core.errors import ResourceError, ResourceNotFound
from crs_controller.core.hashing import object_hash, resource_hash
from crs_controller.core.manifests import parse_objects
from crs_controller.core.models import ObjectMeta, ResourceRef
from crs_controller.core.ordering import apply_order
from crs_controller.engine.runtime import metrics
from crs_controller.engine.runtime.watching import Informer, resource_version

PARSED_CACHE_SIZE = 128
# Parsing a large value (Calico's 700 KB takes ~200 ms) runs in a worker thread, so
# the event loop keeps serving every other CRS and cluster meanwhile; small ones are
# cheaper to parse than to hand over.
PARSE_IN_THREAD_BYTES = 64 * 1024

ContentKey = tuple[str, str, str]  # namespace, kind, name


@dataclass(frozen=True)
class Manifest:
    """A source's objects in apply order, and each one's content hash."""

    objects: tuple[dict[str, Any], ...]
    hashes: tuple[str, ...]


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
        client: KubeClient,
        configmaps: Informer[ObjectMeta],
        secrets: Informer[ObjectMeta],
    ) -> None:
        self._client = client
        self._informers = {"ConfigMap": configmaps, "Secret": secrets}
        self._contents: dict[ContentKey, Obj] = {}
        self._hashes: dict[ContentKey, tuple[int, str]] = {}
        self._parsed: OrderedDict[str, Manifest | ResourceError] = OrderedDict()
        self._parsing: dict[str, asyncio.Future[Manifest | ResourceError]] = {}

    async def content(self, namespace: str, kind: str, name: str) -> Obj | None:
        """The full object, or None when the watch says it does not exist."""
        key = (namespace, kind, name)
        watched = self._informers[kind]
        if watched.get(namespace, name) is None:
            self.forget(*key)
            return None
        held = self._contents.get(key)
        if held is not None and resource_version(held) >= watched.version(namespace, name):
            return held
        fetched = await self._client.get("v1", kind, name, namespace)
        if fetched is None:
            self.forget(*key)
            return None
        fetched.setdefault("kind", kind)
        self._contents[key] = fetched
        return fetched

    async def load(self, namespace: str, ref: ResourceRef) -> Source:
        raw = await self.content(namespace, ref.kind, ref.name)
        if raw is None:
            error = ResourceNotFound(f"{ref.kind} {namespace}/{ref.name} not found")
            return Source(ref, error=error)
        try:
            digest = self._hash((namespace, ref.kind, ref.name), raw)
        except ResourceError as exc:
            return Source(ref, error=exc)
        return Source(ref, hash=digest, raw=raw)

    def _hash(self, key: ContentKey, raw: Obj) -> str:
        version = resource_version(raw)
        cached = self._hashes.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        metrics.SOURCE_HASHES.inc()
        digest = resource_hash(raw)
        self._hashes[key] = (version, digest)
        return digest

    async def objects(self, source: Source) -> list[dict[str, Any]]:
        """Parsed objects in apply order; raises InvalidManifest. Cached per hash."""
        return list((await self.manifest(source)).objects)

    async def manifest(self, source: Source) -> Manifest:
        """Parsed objects in apply order with each one's hash; raises InvalidManifest.
        Cached per hash."""
        assert source.raw is not None
        # Keyed by resource as well as hash: an error message names its resource.
        key = f"{source.ref.kind}/{source.ref.name}/{source.hash}"
        cached = self._parsed.get(key)
        if cached is None:
            cached = await self._parse_once(key, source.raw)
        else:
            self._parsed.move_to_end(key)
        if isinstance(cached, ResourceError):
            raise cached
        return cached

    async def _parse_once(self, key: str, raw: Obj) -> Manifest | ResourceError:
        """Parse in a task of its own: concurrent callers for the same content share
        it, and a caller that is cancelled (a reconcile timeout) does not waste it."""
        task = self._parsing.get(key)
        if task is None:
            task = asyncio.ensure_future(self._parse_and_keep(key, raw))
            self._parsing[key] = task
        return await asyncio.shield(task)

    async def _parse_and_keep(self, key: str, raw: Obj) -> Manifest | ResourceError:
        metrics.SOURCE_PARSES.inc()
        try:
            if _size(raw) >= PARSE_IN_THREAD_BYTES:
                parsed = await asyncio.to_thread(_parse, raw)
            else:
                parsed = _parse(raw)
        finally:
            del self._parsing[key]
        self._parsed[key] = parsed
        if len(self._parsed) > PARSED_CACHE_SIZE:
            self._parsed.popitem(last=False)
        return parsed

    def forget(self, namespace: str, kind: str, name: str) -> None:
        self._contents.pop((namespace, kind, name), None)
        self._hashes.pop((namespace, kind, name), None)


def _parse(raw: Obj) -> Manifest | ResourceError:
    try:
        objects = apply_order(parse_objects(raw))
    except ResourceError as exc:
        return exc
    return Manifest(tuple(objects), tuple(object_hash(o) for o in objects))


def _size(raw: Obj) -> int:
    """Roughly how many bytes of data a ConfigMap/Secret holds."""
    total = 0
    for field in ("data", "binaryData", "stringData"):
        values = raw.get(field)
        if isinstance(values, Mapping):
            total += sum(len(v) for v in values.values() if isinstance(v, str))
    return total
