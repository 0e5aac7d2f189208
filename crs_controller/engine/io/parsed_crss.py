"""ClusterResourceSets read from the API, each version parsed once, off the event loop.

The Runtime Extension's answers read CRSs from the API, not from the caches (every
replica must answer alike), and Cluster API asks again every few seconds while an
answer is "retry". Parsing compiles every CEL health rule (tens of milliseconds for a
CRS with twenty long rules): done on each call, on the event loop, one tenant's CRSs
would hold every tenant's reconciles, Lease renewals and hook answers.

So a CRS is parsed once per (namespace, name, uid, resourceVersion): the CRS
informer's copy is used when it holds that very version (its one home on a replica
that watches CRSs), else one parsed here in a worker thread and kept, a bounded number
of them (a standby replica watches nothing). Callers that need the same version at
once share one parse.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from crs_controller.core.spec.objects import CRS, parse_crs

# Parsed CRSs kept beside the informer's, least recently used dropped first: the CRSs
# that gate upgrades or clean up after deleted Clusters, a few per namespace. One with
# twenty long health rules holds some tens of KiB.
KEPT = 256

Key = tuple[str, str, str, str]


def _nothing(namespace: str, name: str) -> CRS | None:
    return None


class ParsedCRSs:
    """CRSs as the API answered them, parsed through a cache. ``held`` is the CRS
    informer's lookup by (namespace, name)."""

    def __init__(self, held: Callable[[str, str], CRS | None] = _nothing, size: int = KEPT) -> None:
        self._held = held
        self._size = size
        self._kept: OrderedDict[Key, CRS] = OrderedDict()
        self._parsing: dict[Key, asyncio.Task[CRS]] = {}

    async def parse(self, raw: Mapping[str, Any]) -> CRS:
        """``parse_crs(raw)``, from a cache when this version was parsed before."""
        key = _key(raw)
        if key is None:  # no identity to cache it by (not from an API server)
            return await asyncio.to_thread(parse_crs, raw)
        known = self._known(key)
        if known is not None:
            return known
        task = self._parsing.get(key)
        if task is None:
            task = self._parsing[key] = asyncio.ensure_future(self._parse_and_keep(key, raw))
            task.add_done_callback(_retrieved)
        # Shielded: a caller that gives up (the hook's deadline) does not waste the parse.
        return await asyncio.shield(task)

    def _known(self, key: Key) -> CRS | None:
        namespace, name, uid, version = key
        held = self._held(namespace, name)
        if held is not None and (held.meta.uid, held.meta.resource_version) == (uid, version):
            return held
        kept = self._kept.get(key)
        if kept is not None:
            self._kept.move_to_end(key)
        return kept

    async def _parse_and_keep(self, key: Key, raw: Mapping[str, Any]) -> CRS:
        try:
            crs = await asyncio.to_thread(parse_crs, raw)
        finally:
            del self._parsing[key]
        self._kept[key] = crs
        if len(self._kept) > self._size:
            self._kept.popitem(last=False)
        return crs


def _retrieved(task: asyncio.Task[CRS]) -> None:
    """Mark a shared parse's failure as seen: every caller may have given up."""
    if not task.cancelled():
        task.exception()


def _key(raw: Mapping[str, Any]) -> Key | None:
    meta = raw.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    parts = tuple(str(meta.get(f) or "") for f in ("namespace", "name", "uid", "resourceVersion"))
    namespace, name, uid, version = parts
    return (namespace, name, uid, version) if name and uid and version else None
