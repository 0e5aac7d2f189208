"""Drift checks: read what a resource put on a workload cluster and decide, with the
pure rules of ``core.drift``, whether someone changed it. Reads only."""

from __future__ import annotations

from crs_controller.clients.kube import KubeClient
from crs_controller.core.drift import content_drift, generation_drift
from crs_controller.core.manifests import ObjectRef
from crs_controller.core.models import ResourceBinding
from crs_controller.engine.applying import observe


async def drifted(
    client: KubeClient, recorded: ResourceBinding, mode: str, *, field_manager: str
) -> bool:
    """``mode`` is the CRS's driftDetection: Generation or Content."""
    inventory = [
        ObjectRef(o.api_version, o.kind, o.namespace or "", o.name) for o in recorded.objects
    ]
    seen = await observe(client, inventory, field_manager=field_manager)
    if generation_drift(recorded.generation, seen.generations):
        return True
    return mode == "Content" and content_drift(recorded.fields_hash, seen.owned)
