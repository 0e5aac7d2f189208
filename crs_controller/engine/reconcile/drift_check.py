"""Reading what a CRS put on a workload cluster, for drift checks (``core.drift``: did
someone change it?) and health checks (``core.health``: is it Ready?). Reads only,
and cheaply: one LIST per kind (per namespace when all of that kind's objects share
one) for a whole pass, whatever the number of objects and resources; metadata only
for drift."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from crs_controller.clients.kube import KubeClient, Obj
from crs_controller.core.drift import Live, owned_fields, resource_drift
from crs_controller.core.errors import NotFound
from crs_controller.core.models import ObjectRef, ResourceBinding

ListKey = tuple[str, str, str | None]  # apiVersion, kind, namespace (None: all)


class Observer:
    """What one pass has read from one workload cluster, per LIST."""

    def __init__(self, client: KubeClient, field_manager: str) -> None:
        self._client = client
        self._manager = field_manager
        self._lists: dict[ListKey, dict[tuple[str, str], Live]] = {}
        self._objects: dict[ListKey, dict[tuple[str, str], Obj]] = {}

    async def objects(self, refs: Sequence[ObjectRef]) -> list[Obj | None]:
        """Each object as it is now, whole (None: missing), from one LIST per kind.
        Read afresh on each call: a health check polls."""
        self._objects.clear()
        found: dict[tuple[str, str], dict[tuple[str, str], Obj]] = {}
        for (api_version, kind), namespace in _kinds(refs).items():
            key = (api_version, kind, namespace)
            if key not in self._objects:
                self._objects[key] = await self._list_whole(api_version, kind, namespace)
            found[(api_version, kind)] = self._objects[key]
        return [found[(r.api_version, r.kind)].get((r.namespace, r.name)) for r in refs]

    async def _list_whole(
        self, api_version: str, kind: str, namespace: str | None
    ) -> dict[tuple[str, str], Obj]:
        try:
            items, _ = await self._client.list(api_version, kind, namespace)
        except NotFound:
            items = []
        listed = {}
        for item in items:
            meta = item.get("metadata") or {}
            item.setdefault("kind", kind)
            listed[(str(meta.get("namespace") or ""), str(meta.get("name") or ""))] = item
        return listed

    async def drifted(self, recorded: ResourceBinding, mode: str) -> bool:
        """``mode`` is the CRS's driftDetection: Generation or Content."""
        live = await self.observe(recorded.objects)
        return resource_drift(
            mode,
            recorded.objects,
            live,
            recorded_sum=recorded.generation,
            recorded_fields=recorded.fields_hash,
        )

    async def observe(self, objects: Sequence[ObjectRef]) -> list[Live | None]:
        """Each object's live state (None: missing), from one LIST per kind."""
        found: dict[tuple[str, str], dict[tuple[str, str], Live]] = {}
        for (api_version, kind), namespace in _kinds(objects).items():
            found[(api_version, kind)] = await self._listed(api_version, kind, namespace)
        return [found[(r.api_version, r.kind)].get((r.namespace, r.name)) for r in objects]

    async def _listed(
        self, api_version: str, kind: str, namespace: str | None
    ) -> dict[tuple[str, str], Live]:
        for key in ((api_version, kind, namespace), (api_version, kind, None)):
            if key in self._lists:
                return self._lists[key]
        try:
            items, _ = await self._client.list(api_version, kind, namespace, metadata_only=True)
        except NotFound:  # the kind itself is gone, e.g. its CRD was deleted
            items = []
        listed = {}
        for item in items:
            meta = item.get("metadata") or {}
            where = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            generation = meta.get("generation")
            listed[where] = Live(
                int(generation) if generation is not None else 0, owned_fields(item, self._manager)
            )
        self._lists[(api_version, kind, namespace)] = listed
        return listed


def _kinds(refs: Sequence[ObjectRef]) -> dict[tuple[str, str], str | None]:
    """Each kind among ``refs`` and where to LIST it: the one namespace all its
    objects share, else None (all namespaces; also for cluster-scoped kinds)."""
    by_kind: dict[tuple[str, str], set[str]] = defaultdict(set)
    for ref in refs:
        by_kind[(ref.api_version, ref.kind)].add(ref.namespace)
    return {
        kind: (next(iter(spaces)) or None) if len(spaces) == 1 else None
        for kind, spaces in by_kind.items()
    }
