"""Pure facts about Cluster API ``Cluster`` objects (v1beta1 and v1beta2 shapes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PAUSED_ANNOTATION = "cluster.x-k8s.io/paused"
# On a Cluster: it takes no new revision of any ClusterResourceSet (first installs go).
HOLD_UPDATES_ANNOTATION = "addons.crs.dev/hold-updates"
CLUSTER_GROUP = "cluster.x-k8s.io"


def is_paused(obj: Mapping[str, Any]) -> bool:
    """A Cluster with spec.paused, or any object with the CAPI paused annotation."""
    annotations = obj.get("metadata", {}).get("annotations") or {}
    return PAUSED_ANNOTATION in annotations or bool((obj.get("spec") or {}).get("paused"))


def control_plane_initialized(cluster: Mapping[str, Any]) -> bool:
    """v1beta2 reports status.initialization.controlPlaneInitialized; v1beta1
    status.controlPlaneReady. Either one is enough, whichever version we read."""
    status = cluster.get("status") or {}
    initialization = status.get("initialization") or {}
    return bool(initialization.get("controlPlaneInitialized") or status.get("controlPlaneReady"))
