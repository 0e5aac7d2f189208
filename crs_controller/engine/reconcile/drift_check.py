"""Drift checks: read what a resource put on a workload cluster and decide, with the
pure rules of ``core.drift``, whether someone changed it. Reads only, and cheaply:
one metadata-only LIST per kind (per namespace when all of that kind's objects share
one) for a whole pass, whatever the number of objects and resources."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from crs_controller.clients.kube import KubeClient
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
        by_kind: dict[tuple[str, str], set[str]] = defaultdict(set)
        for ref in objects:
            by_kind[(ref.api_version, ref.kind)].add(ref.namespace)
        found: dict[tuple[str, str], dict[tuple[str, str], Live]] = {}
        for (api_version, kind), namespaces in by_kind.items():
            only = next(iter(namespaces)) if len(namespaces) == 1 else None
            found[(api_version, kind)] = await self._listed(api_version, kind, only or None)
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
