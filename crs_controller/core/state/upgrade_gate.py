"""``spec.gateUpgrades``: may Cluster API take a cluster's upgrade past the control
plane (AfterControlPlaneUpgrade, BeforeWorkersUpgrade) to a Kubernetes version?

Not while a gating ClusterResourceSet — active, ``gateUpgrades: true``, selecting the
cluster — lacks on it a resource the version needs: one whose ``kubernetesVersions``
contains the version, or one without a range. "Has" means its binding entry records
the resource with ``applied: true``; with ``healthCheck.wait`` the entry's outcome
must also be Applied and Ready for the CRS's current generation.

Before an upgrade starts (BeforeClusterUpgrade), a gating CRS that follows the
Kubernetes version but has no resource for the target version holds it: the missing
build stops the upgrade, not the add-on (``without_build``).

Pure: the caller reads the Cluster, the CRSs and the cluster's binding (from the API,
so that every replica answers alike), ``gate`` decides and ``describe`` words it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from semver import Version

from crs_controller.core.api.models import CRSBinding
from crs_controller.core.spec.objects import CRS, Cluster
from crs_controller.core.state.status import outcome_of

__all__ = [
    "Gate",
    "Go",
    "Hold",
    "NoBuild",
    "describe",
    "gate",
    "gates",
    "has_applied",
    "required",
    "without_build",
]


@dataclass(frozen=True)
class Go:
    """Every gating CRS has what the version needs in place: the upgrade may go on."""


@dataclass(frozen=True)
class Hold:
    """The gating CRSs still applying (or waiting for Ready) on the cluster, by name."""

    waiting_for: tuple[str, ...]


@dataclass(frozen=True)
class NoBuild:
    """The gating CRSs that follow the Kubernetes version but have no resource for the
    upgrade's target version, by name."""

    lacking: tuple[str, ...]


Gate = Go | Hold | NoBuild


def gates(crs: CRS, cluster: Cluster) -> bool:
    """The CRS holds the cluster's upgrades until its resources are in place."""
    return crs.active and crs.valid.spec.gate_upgrades and crs.selects(cluster)


def required(crs: CRS, version: Version) -> frozenset[tuple[str, str]]:
    """(kind, name) of each resource of the CRS that applies at ``version``."""
    return frozenset(
        (ref.kind, ref.name)
        for n, ref in enumerate(crs.valid.spec.resources)
        if (versions := crs.version_range(n)) is None or versions.contains(version)
    )


def has_applied(crs: CRS, entry: CRSBinding | None, version: Version) -> bool:
    """The binding entry shows everything ``version`` needs applied (and Ready, for the
    CRS's generation, when the CRS waits for health). Nothing needed: nothing to wait
    for, whatever the entry says."""
    needed = required(crs, version)
    if not needed:
        return True
    if entry is None:
        return False
    if not needed <= {(r.kind, r.name) for r in entry.resources if r.applied}:
        return False
    health = crs.valid.spec.health_check
    if health is None or not health.wait:
        return True
    outcome = outcome_of(entry)
    return (
        outcome is not None
        and outcome.state == "Applied"
        and outcome.ready
        and outcome.generation == crs.generation
    )


def gate(
    cluster: Cluster, crss: Iterable[CRS], entries: Mapping[str, CRSBinding], version: Version
) -> Gate:
    """Go, or Hold naming (sorted) every gating CRS without what ``version`` needs.
    ``entries`` are the cluster's binding entries by CRS name (none when it has no
    binding, or one that cannot be read: then every gating CRS holds)."""
    waiting = sorted(
        crs.name
        for crs in crss
        if gates(crs, cluster) and not has_applied(crs, entries.get(crs.name), version)
    )
    return Hold(tuple(waiting)) if waiting else Go()


def without_build(cluster: Cluster, crss: Iterable[CRS], version: Version) -> Gate:
    """BeforeClusterUpgrade: Go, or NoBuild naming (sorted) every gating CRS that follows
    the Kubernetes version and has no resource whose range contains ``version``."""
    lacking = sorted(c.name for c in crss if gates(c, cluster) and c.lacks_version(version))
    return NoBuild(tuple(lacking)) if lacking else Go()


def describe(decision: Gate, version: Version) -> str:
    """The hook's message: CRS names and the version, never object content."""
    match decision:
        case Hold(waiting_for):
            return f"crs-controller: waiting for add-ons of {', '.join(waiting_for)} for v{version}"
        case NoBuild(lacking):
            return (
                f"crs-controller: {', '.join(lacking)} has no resource for v{version} "
                "(spec.resources[].kubernetesVersions); add one before this upgrade"
            )
        case Go():
            return f"crs-controller: add-ons for v{version} are in place"
