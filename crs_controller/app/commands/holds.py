"""Why the controller would hold a change on a cluster now, as ``diff`` says it.

The same facts, read as the controller reads them: a Cluster refused (its labels over
the bound, core/spec/metadata) and not being deleted, a paused Cluster (``spec.paused``
or the ``cluster.x-k8s.io/paused`` annotation) or a paused ClusterResourceSet (that
annotation) is left alone, nothing sent (engine/reconcile/cluster); a new revision of
the sources waits on a cluster that has the CRS installed while the Cluster holds
updates (``addons.crs.dev/hold-updates``) or the CRS's rollout is paused
(``spec.rollout.paused``) (engine/reconcile/admission, core/rollout/plan); while
Cluster API upgrades the cluster (core/versions/cluster_version), a resource already
applied keeps its revision unless the CRS gates upgrades (engine/reconcile/pair). A
first install is never held by the last three.

Pure: the caller reads the CRS, the Cluster, the binding's entry, the cluster's
version and the sources' hashes.
"""

from __future__ import annotations

from dataclasses import dataclass

from crs_controller.core.api.clusters import HOLD_UPDATES_ANNOTATION, PAUSED_ANNOTATION
from crs_controller.core.api.models import CRSBinding, ResourceBinding
from crs_controller.core.spec.objects import CRS, Cluster
from crs_controller.core.versions.cluster_version import ClusterVersion
from crs_controller.engine.reconcile.rollout import Hashes, on_revision, revision_of

__all__ = ["NO_HOLDS", "Holds", "holds", "left_alone"]


@dataclass(frozen=True)
class Holds:
    """Why changes wait on the cluster now; None: they would not."""

    everything: str | None = None  # the pass does not run
    update: str | None = None  # the CRS's new revision waits on this installed cluster
    upgrading: str | None = None  # an applied resource keeps its revision meanwhile

    def of(self, kind: str, name: str, recorded: ResourceBinding | None, digest: str) -> str | None:
        """Why the change of one resource (to ``digest``, its hash on the cluster) waits;
        None: the controller would make it now."""
        if self.everything or self.update:
            return self.everything or self.update
        if self.upgrading and recorded is not None and recorded.applied and recorded.hash != digest:
            return (
                f"{self.upgrading}: the new revision of {kind}/{name} waits until the upgrade "
                "is done (UpgradeInProgress)"
            )
        return None


NO_HOLDS = Holds()


def drift_left(crs: CRS, recorded: ResourceBinding | None, digest: str) -> str | None:
    """Why the controller would leave a resource's objects as they are though they
    differ from it (None: it would apply them): the cluster has this very content
    (``digest``) applied, and the CRS neither corrects drift nor reapplies on an
    interval, so only a change of its sources applies them again."""
    if recorded is None or not recorded.applied or recorded.hash != digest:
        return None
    spec = crs.valid.spec
    if spec.drift_detection != "None" or spec.reapply_interval is not None:
        return None
    return (
        f"{crs.namespace}/{crs.name} applied this content of {recorded.kind}/{recorded.name} "
        "here already and reapplies it only when its sources change (driftDetection: None, "
        "no reapplyInterval)"
    )


def left_alone(crs: CRS, cluster: Cluster) -> str | None:
    """Why the controller would not touch the cluster for the CRS at all."""
    if cluster.refused_alive:
        return (
            f"Cluster {cluster.namespace}/{cluster.name} is refused: {cluster.problem}; "
            "the controller leaves it alone (nothing applied or removed)"
        )
    if cluster.paused:
        return (
            f"Cluster {cluster.namespace}/{cluster.name} is paused (spec.paused or the "
            f"{PAUSED_ANNOTATION} annotation): the controller leaves it alone"
        )
    if crs.paused:
        return (
            f"ClusterResourceSet {crs.namespace}/{crs.name} is paused (the "
            f"{PAUSED_ANNOTATION} annotation): the controller leaves it alone"
        )
    return None


def holds(
    crs: CRS, cluster: Cluster, entry: CRSBinding | None, version: ClusterVersion, now: Hashes
) -> Holds:
    """What holds the CRS's changes on ``cluster``, where the binding recorded
    ``entry``; ``now`` is each source's hash, in spec order."""
    upgrading = None
    if version.upgrading and not crs.valid.spec.gate_upgrades:
        upgrading = f"Cluster API is upgrading cluster {cluster.name}"
    return Holds(left_alone(crs, cluster), _update_held(crs, cluster, entry, now), upgrading)


def _update_held(crs: CRS, cluster: Cluster, entry: CRSBinding | None, now: Hashes) -> str | None:
    """Why the cluster does not take the CRS's new revision (None: it takes it, or it
    is a first install, or it is on the revision already)."""
    on = on_revision(crs, entry, now)
    if on is None or on == revision_of(now):
        return None
    if cluster.holds_updates:
        return (
            f'Cluster {cluster.name} holds updates ({HOLD_UPDATES_ANNOTATION}: "true"): it '
            "takes no new revision of a ClusterResourceSet it has (UpdateHeld)"
        )
    if crs.policy is not None and crs.policy.paused:
        return (
            f"the rollout of ClusterResourceSet {crs.namespace}/{crs.name} is paused "
            "(spec.rollout.paused): a cluster that has it takes no new revision"
        )
    return None
