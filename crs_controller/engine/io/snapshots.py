"""Each revision's snapshot on the management cluster (``core.rollout.snapshots``):
written once per revision by the CRS reconcile (never per cluster), read and checked
by every pass that rolls a CRS back, deleted by the leader's CRS pass once its
revision is neither in the history nor rolled out, or when the CRS goes.

Reads go through ``engine.io.sources`` (one GET per change, held within its byte
budget); a checked snapshot is kept here, by bytes, so passes over hundreds of
clusters hash it once. Deletes touch only objects labelled with the CRS's uid.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import structlog

from crs_controller.clients.api import KubeAPI
from crs_controller.core.errors import Conflict
from crs_controller.core.manifests.hashing import resource_hash
from crs_controller.core.rollout.plan import revision
from crs_controller.core.rollout.snapshots import (
    SNAPSHOT_LABEL,
    SnapshotRefused,
    SnapshotTooLarge,
    build,
    read,
    size_of,
    snapshot_name,
)
from crs_controller.core.spec.objects import CRS, SourceMeta
from crs_controller.engine.io.informer import Informer, resource_version
from crs_controller.engine.io.sources import ByteBudgetLRU, Source, Sources

log = structlog.get_logger(__name__)

CHECKED_BUDGET_BYTES = 16 * 1024 * 1024
TOO_LARGE_KEPT = 1024
Key = tuple[str, str]  # kind, name

__all__ = ["SnapshotRefused", "SnapshotTooLarge", "Snapshots"]


class Snapshots:
    def __init__(
        self,
        client: KubeAPI,
        sources: Sources,
        configmaps: Informer[SourceMeta],
        secrets: Informer[SourceMeta],
    ) -> None:
        self._client = client
        self._sources = sources
        self._informers = {"ConfigMap": configmaps, "Secret": secrets}
        self._too_large: dict[tuple[str, str], SnapshotTooLarge] = {}  # (uid, revision)
        # Bytes of the snapshots this process wrote, until the watch shows them.
        self._written: dict[tuple[str, str], int] = {}  # (uid, revision)
        self._told_taken: set[tuple[str, str]] = set()  # (uid, revision)
        # The snapshot objects the watch shows: (kind, name) by (namespace, CRS uid).
        self._labelled: dict[tuple[str, str], set[tuple[str, str]]] = {}
        self._checked: ByteBudgetLRU[tuple[str, ...], dict[Key, Source]] = ByteBudgetLRU(
            CHECKED_BUDGET_BYTES
        )

    def kept(self, crs: CRS, rev: str) -> bool:
        """Is the whole snapshot of ``rev`` there (as the watch says): its ConfigMap
        and, when the CRS names Secrets, its Secret? A half missing (its name held by
        another object until now, say) is written on the next pass."""
        name = snapshot_name(crs.name, rev)
        kinds = {"ConfigMap"} | {ref.kind for ref in crs.valid.spec.resources}
        metas = [self._informers[kind].get(crs.namespace, name) for kind in kinds]
        return all(meta is not None and meta.snapshot_of == crs.meta.uid for meta in metas)

    async def write(self, crs: CRS, rev: str, sources: Mapping[Key, Source]) -> bool:
        """Write the snapshot of ``rev`` from the sources it was hashed from, unless it
        is there: True once written. Sources that hash to another revision (edited
        since) write nothing: a snapshot holds its revision's content or is not
        written. Raises SnapshotTooLarge (nothing written)."""
        if self.kept(crs, rev) or crs.meta.uid is None:
            return False
        keys = [(ref.kind, ref.name) for ref in crs.valid.spec.resources]
        where = f"{crs.namespace}/{crs.name}"
        if revision([(kind, name, sources[(kind, name)].hash) for kind, name in keys]) != rev:
            log.info("snapshot not written: the sources changed", crs=where, revision=rev)
            return False
        refused = self._too_large.get((crs.meta.uid, rev))
        if refused is not None:  # not encoded again on every pass
            raise refused.with_traceback(None)
        raws = {key: source.raw or {} for key, source in sources.items()}
        try:
            objects = build(crs.namespace, (crs.name, crs.meta.uid), rev, keys, raws)
        except SnapshotTooLarge as exc:
            if len(self._too_large) >= TOO_LARGE_KEPT:
                self._too_large.clear()
            self._too_large[(crs.meta.uid, rev)] = exc
            raise
        written, taken = await self._create(crs, objects)
        if len(self._written) >= TOO_LARGE_KEPT:
            self._written.clear()
        # A half written on an earlier pass (the other's name was taken) counts too.
        self._written[(crs.meta.uid, rev)] = self._written.get((crs.meta.uid, rev), 0) + written
        if not taken:
            log.info("snapshot written", crs=where, revision=rev)
        else:
            self._tell_taken(crs, rev, taken)
        return not taken

    def _tell_taken(self, crs: CRS, rev: str, taken: list[str]) -> None:
        """Another object holds a name of the snapshot: a rollback to this revision is
        refused (the check on use) until it goes; the create is tried again once the
        watch shows the name free (the snapshot is not kept meanwhile). Told once."""
        if (str(crs.meta.uid), rev) in self._told_taken:
            return
        if len(self._told_taken) >= TOO_LARGE_KEPT:
            self._told_taken.clear()
        self._told_taken.add((str(crs.meta.uid), rev))
        where = f"{crs.namespace}/{crs.name}"
        log.warning("snapshot name taken", crs=where, revision=rev, objects=taken)

    async def _create(self, crs: CRS, objects: list[dict[str, Any]]) -> tuple[int, list[str]]:
        """Create the snapshot's objects not there yet, the ConfigMap last: the bytes
        written, and the objects whose name another object (not this CRS's snapshot,
        as the watch shows it) holds. A name the watch shows taken is not asked for
        again on every pass."""
        written, taken = 0, []
        for obj in reversed(objects):
            kind, name = obj["kind"], obj["metadata"]["name"]
            informer = self._informers[kind]
            if informer.get(crs.namespace, name) is None:  # else no request: seen there
                try:
                    await self._client.create(obj)
                    written += size_of(obj["metadata"]["annotations"]) or 0
                    continue
                except Conflict:  # written before, or the name is taken
                    pass
            meta = informer.get(crs.namespace, name)
            if meta is not None and meta.snapshot_of != crs.meta.uid:
                taken.append(f"{kind}/{name}")
        return written, taken

    def size(self, crs: CRS, rev: str) -> int:
        """The bytes the snapshot of ``rev`` holds (its objects' annotations, as the
        watch shows them, else as this process wrote them; 0: none)."""
        name, uid = snapshot_name(crs.name, rev), crs.meta.uid
        metas = [informer.get(crs.namespace, name) for informer in self._informers.values()]
        seen = [m.snapshot_bytes or 0 for m in metas if m is not None and m.snapshot_of == uid]
        if seen:
            return sum(seen)
        return self._written.get((str(uid), rev), 0)

    async def sources_of(self, crs: CRS, rev: str) -> Mapping[Key, Source]:
        """The sources of revision ``rev`` of ``crs``, from its snapshot once checked;
        raises SnapshotRefused."""
        namespace, name = crs.namespace, snapshot_name(crs.name, rev)
        refs = list(crs.valid.spec.resources)
        keys = [(ref.kind, ref.name) for ref in refs]
        configmap = await self._sources.content(namespace, "ConfigMap", name)
        secret = None
        if any(kind == "Secret" for kind, _ in keys):
            secret = await self._sources.content(namespace, "Secret", name)
        held = (namespace, name, rev, str(crs.meta.uid), *map(str, keys))
        versions = tuple(str(resource_version(o)) if o else "-" for o in (configmap, secret))
        cached = self._checked.get((*held, *versions))
        if cached is not None:
            return cached
        raws = read(configmap, secret, str(crs.meta.uid), rev, keys)
        found: dict[Key, Source] = {}
        for ref in refs:
            raw = raws[(ref.kind, ref.name)]
            found[(ref.kind, ref.name)] = Source(ref, hash=resource_hash(raw), raw=raw)
        cost = sum(len(str(raw)) for raw in raws.values())
        self._checked.put((*held, *versions), found, cost)
        return found

    def seen(self, kind: str, old: SourceMeta | None, new: SourceMeta | None) -> None:
        """Follow a ConfigMap or Secret as the watch shows it (``old`` before,
        ``new`` now; None: absent), for ``others``: which objects are labelled
        as a CRS's snapshots, by namespace and CRS uid."""
        for meta, held in ((old, False), (new, True)):
            if meta is None or meta.snapshot_of is None:
                continue
            key = (meta.namespace, meta.snapshot_of)
            objects = self._labelled.setdefault(key, set())
            if held:
                objects.add((kind, meta.name))
                continue
            objects.discard((kind, meta.name))
            if not objects:
                del self._labelled[key]

    def others(self, crs: CRS, revisions: Collection[str]) -> list[Key]:
        """The snapshots of ``crs`` the watch shows, but those of ``revisions``: only
        objects labelled with its uid and named as its snapshots (no request)."""
        uid = crs.meta.uid
        if uid is None:
            return []
        kept = {snapshot_name(crs.name, rev) for rev in revisions}
        prefix = snapshot_name(crs.name, "")
        labelled = self._labelled.get((crs.namespace, uid), set())
        return sorted(o for o in labelled if o[1].startswith(prefix) and o[1] not in kept)

    async def delete_others(self, crs: CRS, revisions: Collection[str]) -> None:
        """Delete ``others(crs, revisions)``. Whatever left them (a revision dropped
        from the history whose delete failed, or whose status write the process did
        not outlive, a snapshot whose revision never reached the history), they go on
        the next pass that keeps the others."""
        uid = crs.meta.uid
        stale = self.others(crs, revisions)
        for kind, name in stale:
            meta = self._informers[kind].get(crs.namespace, name)
            if meta is not None and meta.snapshot_of == uid:
                await self._client.delete("v1", kind, name, crs.namespace, uid=meta.uid)
            # Not asked for again while the watch has yet to show it gone.
            self.seen(kind, SourceMeta(name, crs.namespace, snapshot_of=uid), None)
        if stale:
            log.info("snapshots deleted", crs=f"{crs.namespace}/{crs.name}", objects=len(stale))

    async def delete_all(self, crs: CRS) -> None:
        """Every snapshot of ``crs``, as it is deleted (the garbage collector would,
        from the owner reference, where one runs). Read page by page, each page bounded
        on its own: snapshots with large annotations do not add up to a refused LIST."""
        if crs.meta.uid is None:
            return
        selector = f"{SNAPSHOT_LABEL}={crs.meta.uid}"
        for kind in ("ConfigMap", "Secret"):
            pages = self._client.pages(
                "v1", kind, crs.namespace, label_selector=selector, metadata_only=True
            )
            async for items, _ in pages:
                for item in items:
                    meta = item.get("metadata") or {}
                    await self._client.delete(
                        "v1", kind, meta.get("name", ""), crs.namespace, uid=meta.get("uid")
                    )
