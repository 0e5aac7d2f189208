"""Pure facts about a Cluster's control plane: the version it runs, and whether Cluster
API is upgrading the cluster.

The version is ``status.version`` of the object the Cluster's ``spec.controlPlaneRef``
names. Cluster API's control plane contract makes every provider report there the
version its control plane machines run (the lowest one, while a rollout is under way),
for topology clusters and hand-made ones alike — unlike ``spec.topology.version``, which
is what the cluster should run and exists only with a ClusterClass. Only kinds of the
control plane group are read (a tenant's Cluster names the kind: it must not steer the
controller to watch anything else).

"Upgrading" is read from two places: for topology clusters, the Cluster's v1beta2
``TopologyReconciled`` condition False with one of the upgrade reasons Cluster API sets
for the whole (chained) upgrade; for every cluster, a control plane whose asked-for
version (``spec.version``) differs from the one it runs, or runs another version than
``spec.topology.version``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from semver import Version

from crs_controller.core.versions.ranges import parse_version

CONTROL_PLANE_GROUP = "controlplane.cluster.x-k8s.io"
# TopologyReconciled reasons while Cluster API upgrades a topology cluster: the current
# one (v1.11+, for the whole chained upgrade) and those earlier releases set.
UPGRADE_REASONS = frozenset(
    {
        "ClusterUpgrading",
        "ControlPlaneUpgradePending",
        "MachineDeploymentsUpgradePending",
        "MachinePoolsUpgradePending",
        "MachineDeploymentsUpgradeDeferred",
        "MachinePoolsUpgradeDeferred",
        "LifecycleHookBlocking",
    }
)
_KIND = re.compile(r"^[A-Z][A-Za-z0-9]{0,62}$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


@dataclass(frozen=True)
class ControlPlaneRef:
    """The control plane object a Cluster names (same namespace as the Cluster)."""

    kind: str
    name: str


@dataclass(frozen=True)
class RefProblem:
    """Why a Cluster's control plane cannot be read (said in the outcome)."""

    message: str


def control_plane_ref(cluster: Mapping[str, Any]) -> ControlPlaneRef | RefProblem | None:
    """``spec.controlPlaneRef`` in either Cluster version (v1beta2: apiGroup; v1beta1:
    apiVersion); None when there is none, a RefProblem when it names something the
    controller does not read."""
    ref = (cluster.get("spec") or {}).get("controlPlaneRef")
    if not isinstance(ref, Mapping):
        return None
    group = ref.get("apiGroup")
    if group is None and isinstance(ref.get("apiVersion"), str):
        group = ref["apiVersion"].rpartition("/")[0]
    kind, name = ref.get("kind"), ref.get("name")
    if group != CONTROL_PLANE_GROUP:
        return RefProblem(f"spec.controlPlaneRef is not in {CONTROL_PLANE_GROUP}")
    if not (isinstance(kind, str) and _KIND.match(kind)):
        return RefProblem("spec.controlPlaneRef.kind is not a kind")
    if not (isinstance(name, str) and _NAME.match(name)):
        return RefProblem("spec.controlPlaneRef.name is not an object name")
    return ControlPlaneRef(kind, name)


def _conditions(cluster: Mapping[str, Any]) -> list[Any]:
    status = cluster.get("status") or {}
    if not isinstance(status, Mapping):
        return []
    if str(cluster.get("apiVersion", "")).endswith("/v1beta1"):
        status = status.get("v1beta2") or {}
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    return conditions if isinstance(conditions, list) else []


def topology_upgrading(cluster: Mapping[str, Any]) -> bool:
    """The Cluster's TopologyReconciled condition says an upgrade is under way."""
    return any(
        isinstance(c, Mapping)
        and c.get("type") == "TopologyReconciled"
        and c.get("status") == "False"
        and c.get("reason") in UPGRADE_REASONS
        for c in _conditions(cluster)
    )


def topology_version(cluster: Mapping[str, Any]) -> str | None:
    topology = (cluster.get("spec") or {}).get("topology")
    version = topology.get("version") if isinstance(topology, Mapping) else None
    return version if isinstance(version, str) else None


@dataclass(frozen=True)
class ControlPlane:
    """A control plane object as cached: the versions it reports, nothing else."""

    namespace: str
    name: str
    running: str | None  # status.version
    desired: str | None  # spec.version


def parse_control_plane(raw: Mapping[str, Any]) -> ControlPlane:
    meta = raw.get("metadata") or {}
    running = (raw.get("status") or {}).get("version")
    desired = (raw.get("spec") or {}).get("version")
    return ControlPlane(
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        running if isinstance(running, str) else None,
        desired if isinstance(desired, str) else None,
    )


@dataclass(frozen=True)
class ClusterVersion:
    """What a cluster runs: ``version`` (None: unknown, ``unknown`` says why) and
    whether Cluster API is upgrading it."""

    version: Version | None = None
    unknown: str = "the Cluster names no control plane (spec.controlPlaneRef)"
    upgrading: bool = False


def cluster_version(
    *, upgrading_condition: bool, wanted: str | None, control_plane: ControlPlane | None
) -> ClusterVersion:
    """The version and upgrade state of a cluster whose control plane object is
    ``control_plane`` (None: not found); ``wanted`` is its spec.topology.version."""
    if control_plane is None:
        return ClusterVersion(None, "its control plane object was not found", upgrading_condition)
    running = parse_version(control_plane.running or "")
    if running is None:
        unknown = "its control plane reports no version (status.version) yet"
        return ClusterVersion(None, unknown, upgrading_condition)
    asked = [parse_version(v) for v in (control_plane.desired, wanted) if v]
    moving = any(v is not None and v.compare(running) != 0 for v in asked)
    return ClusterVersion(running, "", upgrading_condition or moving)
