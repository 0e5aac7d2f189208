"""Drift checks: read what a resource put on a workload cluster and decide, with the
pure rules of ``core.drift``, whether someone changed it. Reads only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from crs_controller.clients.kube import KubeClient
from crs_controller.core.drift import content_drift, generation_drift, owned_fields
from crs_controller.core.errors import NotFound
from crs_controller.core.manifests import ObjectRef
from crs_controller.core.models import ResourceBinding


async def drifted(
    client: KubeClient, recorded: ResourceBinding, mode: str, *, field_manager: str
) -> bool:
    """``mode`` is the CRS's driftDetection: Generation or Content."""
    seen = await observe(client, recorded.objects, field_manager=field_manager)
    if generation_drift(recorded.generation, seen.generations):
        return True
    return mode == "Content" and content_drift(recorded.fields_hash, seen.owned)


@dataclass
class Observation:
    """What the inventory looks like on the workload cluster now."""

    generations: list[int | None]  # None: the object is missing
    owned: list[Any]  # None: missing, or no longer applied by us at all


async def observe(
    client: KubeClient, inventory: Sequence[ObjectRef], *, field_manager: str
) -> Observation:
    """Read every inventoried object once (drift checks only read)."""
    seen = Observation([], [])
    for ref in inventory:
        try:
            live = await client.get(ref.api_version, ref.kind, ref.name, ref.namespace or None)
        except NotFound:  # the kind itself is gone, e.g. its CRD was deleted
            live = None
        seen.generations.append(
            None if live is None else int(live["metadata"].get("generation") or 0)
        )
        seen.owned.append(owned_fields(live, field_manager))
    return seen
