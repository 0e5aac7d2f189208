"""The ConfigMaps and Secrets a ClusterResourceSet references, read from the cache.

Each source is hashed once per content change (keyed by uid and resourceVersion) and
parsed once per hash, however many clusters it goes to. Objects the informer holds
stripped (not referenced when they arrived) are fetched once and cached in full.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from crs_controller.clients.kube import KubeClient, Obj
from crs_controller.core.errors import ResourceError, ResourceNotFound
from crs_controller.core.hashing import resource_hash
from crs_controller.core.manifests import parse_objects
from crs_controller.core.models import ResourceRef
from crs_controller.core.ordering import apply_order
from crs_controller.engine import metrics
from crs_controller.engine.watching import STRIPPED, Informer

PARSED_CACHE_SIZE = 128


@dataclass(frozen=True)
class Source:
    """A referenced resource as it is now: its hash, or why it cannot be used."""

    ref: ResourceRef
    hash: str = ""
    error: ResourceError | None = None
    raw: Obj | None = None


class Sources:
    def __init__(self, client: KubeClient, configmaps: Informer, secrets: Informer) -> None:
        self._client = client
        self._informers = {"ConfigMap": configmaps, "Secret": secrets}
        self._hashes: dict[tuple[str, str, str], tuple[str, str]] = {}
        self._parsed: OrderedDict[str, list[dict[str, Any]] | ResourceError] = OrderedDict()

    async def load(self, namespace: str, ref: ResourceRef) -> Source:
        informer = self._informers[ref.kind]
        raw = informer.get(namespace, ref.name)
        if raw is not None and raw.get(STRIPPED):
            fetched = await self._client.get("v1", ref.kind, ref.name, namespace)
            if fetched is not None:
                informer.put(fetched)
            raw = fetched
        if raw is None:
            error = ResourceNotFound(f"{ref.kind} {namespace}/{ref.name} not found")
            return Source(ref, error=error)
        raw = {"kind": ref.kind, **raw}
        try:
            digest = self._hash(namespace, ref, raw)
        except ResourceError as exc:
            return Source(ref, error=exc)
        return Source(ref, hash=digest, raw=raw)

    def _hash(self, namespace: str, ref: ResourceRef, raw: Obj) -> str:
        meta = raw["metadata"]
        version = f"{meta.get('uid')}/{meta.get('resourceVersion')}"
        key = (namespace, ref.kind, ref.name)
        cached = self._hashes.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        metrics.SOURCE_HASHES.inc()
        digest = resource_hash(raw)
        self._hashes[key] = (version, digest)
        return digest

    def objects(self, source: Source) -> list[dict[str, Any]]:
        """Parsed objects in apply order; raises InvalidManifest. Cached per hash."""
        assert source.raw is not None
        cached = self._parsed.get(source.hash)
        if cached is None:
            metrics.SOURCE_PARSES.inc()
            try:
                cached = apply_order(parse_objects(source.raw))
            except ResourceError as exc:
                cached = exc
            self._parsed[source.hash] = cached
            if len(self._parsed) > PARSED_CACHE_SIZE:
                self._parsed.popitem(last=False)
        else:
            self._parsed.move_to_end(source.hash)
        if isinstance(cached, ResourceError):
            raise cached
        return cached

    def forget(self, namespace: str, kind: str, name: str) -> None:
        self._hashes.pop((namespace, kind, name), None)
