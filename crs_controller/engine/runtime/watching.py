"""Informers: list+watch loops that keep an in-memory cache of one kind.

A handler is told *that* an object changed (old and new versions, for computing which
keys to enqueue); reconcilers read the cache, never the event. Watches resume from the
last resourceVersion (bookmarks included) and re-list after a 410 Gone or an error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from crs_controller.clients.kube import KubeClient, Obj
from crs_controller.core.errors import CRSError

log = structlog.get_logger(__name__)

Key = tuple[str, str]
Handler = Callable[[Obj | None, Obj | None], None]


def obj_key(obj: Obj) -> Key:
    meta = obj["metadata"]
    return (str(meta.get("namespace", "")), str(meta["name"]))


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


class Informer:
    def __init__(self, client: KubeClient, spec: WatchSpec, handler: Handler) -> None:
        self._client = client
        self.spec = spec
        self._handler = handler
        self.store: dict[Key, Obj] = {}
        self.synced = asyncio.Event()

    def get(self, namespace: str, name: str) -> Obj | None:
        return self.store.get((namespace, name))

    def put(self, obj: Obj) -> None:
        """Cache an object fetched directly (e.g. on first reference)."""
        key = obj_key(obj)
        current = self.store.get(key)
        if current is None or resource_version(current) < resource_version(obj):
            self.store[key] = obj

    async def run(self) -> None:
        backoff = 0.5
        while True:
            try:
                version = await self._relist()
                self.synced.set()
                backoff = 0.5
                while version:
                    version = await self._watch(version)
            except asyncio.CancelledError:
                raise
            except (CRSError, ValueError, KeyError) as exc:
                # ValueError/KeyError: a malformed line or object; re-list from scratch.
                log.warning("watch failed", kind=self.spec.kind, error=str(exc), retry_in=backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)

    async def _relist(self) -> str:
        s = self.spec
        items, version = await self._client.list(
            s.api_version,
            s.kind,
            s.namespace,
            label_selector=s.label_selector,
            field_selector=s.field_selector,
            metadata_only=s.metadata_only,
        )
        fresh = {obj_key(o): o for o in items}
        for key, gone in list(self.store.items()):
            if key not in fresh:
                del self.store[key]
                self._handler(gone, None)
        for key, obj in fresh.items():
            previous = self.store.get(key)
            self.store[key] = obj
            if previous is None or resource_version(previous) != resource_version(obj):
                self._handler(previous, obj)
        return version

    async def _watch(self, version: str) -> str:
        """Follow one watch; returns the version to resume from, or "" to re-list."""
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
                return ""
            version = str(obj.get("metadata", {}).get("resourceVersion", version))
            if kind == "BOOKMARK":
                continue
            key = obj_key(obj)
            old = self.store.get(key)
            if kind == "DELETED":
                self.store.pop(key, None)
                self._handler(old if old is not None else obj, None)
            else:
                self.store[key] = obj
                self._handler(old, obj)
        return version


def resource_version(obj: Obj) -> int:
    """Compared as integers, as every Kubernetes client does in practice."""
    try:
        return int(obj["metadata"].get("resourceVersion", 0))
    except (TypeError, ValueError):
        return 0
