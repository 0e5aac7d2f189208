"""What `diff` says holds a change (``app.commands.holds``), as a table: a Cluster
refused for its labels (not being deleted), a paused Cluster (spec.paused or the
annotation) or CRS holds everything; a Cluster that holds
updates and a paused rollout hold a new revision on a cluster that has the CRS, never
a first install nor a cluster on the revision; Cluster API upgrading the cluster
holds a resource applied there whose content changed, unless the CRS gates upgrades;
a rollback in force whose snapshot cannot be read holds everything, the sources
shown (never applied in its place); and `diff`'s lines count the held changes per
reason."""

from __future__ import annotations

from typing import Any

import pytest

from crs_controller.app.commands.diff import Change, _rolled_back, held_notes
from crs_controller.app.commands.holds import Holds, drift_left, holds
from crs_controller.core.api.clusters import HOLD_UPDATES_ANNOTATION, PAUSED_ANNOTATION
from crs_controller.core.api.models import CRSBinding, ResourceBinding
from crs_controller.core.manifests.hashing import resource_hash
from crs_controller.core.spec.metadata import MAX_LABELS
from crs_controller.core.spec.objects import parse_cluster, parse_crs
from crs_controller.core.versions.cluster_version import ClusterVersion
from crs_controller.engine.reconcile.rollout import revision_of

from .builders import cluster, configmap_source, crs, payload
from .memory_kube import MemoryKube

OLD, NEW = "xxh3:0001", "xxh3:0002"
NOW = {("ConfigMap", "src"): NEW}
UPGRADING = ClusterVersion(upgrading=True)


def _entry(digest: str | None) -> CRSBinding | None:
    """What the binding recorded for the CRS: ``digest`` applied, or nothing."""
    if digest is None:
        return None
    applied = ResourceBinding(kind="ConfigMap", name="src", hash=digest, applied=True)
    return CRSBinding(cluster_resource_set_name="x", resources=[applied])


def _annotated(obj: dict[str, Any], key: str, value: str) -> dict[str, Any]:
    obj["metadata"].setdefault("annotations", {})[key] = value
    return obj


def _refused(*, deleting: bool = False) -> dict[str, Any]:
    """A Cluster the controller refuses: its labels over the bound."""
    obj = cluster("c1")
    obj["metadata"]["labels"] = {f"k{n}": "v" for n in range(MAX_LABELS + 1)}
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return obj


REFUSED = f"Cluster default/c1 is refused: metadata.labels: more than {MAX_LABELS} entries"
PAUSED_CLUSTER = "Cluster default/c1 is paused (spec.paused or the cluster.x-k8s.io/paused"
PAUSED_CRS = "ClusterResourceSet default/x is paused (the cluster.x-k8s.io/paused annotation)"
HELD = 'Cluster c1 holds updates (addons.crs.dev/hold-updates: "true")'
FROZEN = "the rollout of ClusterResourceSet default/x is paused (spec.rollout.paused)"


@pytest.mark.parametrize(
    ("the_crs", "the_cluster", "recorded", "everything", "update"),
    [
        pytest.param(crs("x", "src"), cluster("c1"), OLD, None, None, id="nothing-holds"),
        pytest.param(
            crs("x", "src"), cluster("c1", paused=True), OLD, PAUSED_CLUSTER, None, id="spec.paused"
        ),
        pytest.param(
            crs("x", "src"),
            _annotated(cluster("c1"), PAUSED_ANNOTATION, ""),
            None,
            PAUSED_CLUSTER,
            None,
            id="cluster-paused-annotation-first-install-too",
        ),
        pytest.param(
            _annotated(crs("x", "src"), PAUSED_ANNOTATION, ""),
            cluster("c1"),
            NEW,
            PAUSED_CRS,
            None,
            id="crs-paused",
        ),
        pytest.param(crs("x", "src"), _refused(), OLD, REFUSED, None, id="cluster-refused"),
        pytest.param(
            crs("x", "src"), _refused(deleting=True), OLD, None, None, id="refused-being-deleted"
        ),
        pytest.param(
            crs("x", "src"),
            _annotated(cluster("c1"), HOLD_UPDATES_ANNOTATION, "true"),
            OLD,
            None,
            HELD,
            id="holds-updates-on-the-old-revision",
        ),
        pytest.param(
            crs("x", "src"),
            _annotated(cluster("c1"), HOLD_UPDATES_ANNOTATION, "true"),
            None,
            None,
            None,
            id="holds-updates-first-install-goes",
        ),
        pytest.param(
            crs("x", "src"),
            _annotated(cluster("c1"), HOLD_UPDATES_ANNOTATION, "true"),
            NEW,
            None,
            None,
            id="holds-updates-on-the-revision",
        ),
        pytest.param(
            crs("x", "src"),
            _annotated(cluster("c1"), HOLD_UPDATES_ANNOTATION, "false"),
            OLD,
            None,
            None,
            id="holds-updates-false",
        ),
        pytest.param(
            crs("x", "src", rollout={"paused": True}),
            cluster("c1"),
            OLD,
            None,
            FROZEN,
            id="rollout-paused-on-the-old-revision",
        ),
        pytest.param(
            crs("x", "src", rollout={"paused": True}),
            cluster("c1"),
            None,
            None,
            None,
            id="rollout-paused-first-install-goes",
        ),
    ],
)
def test_what_holds_the_crs_on_the_cluster(
    the_crs: dict[str, Any],
    the_cluster: dict[str, Any],
    recorded: str | None,
    everything: str | None,
    update: str | None,
) -> None:
    found = holds(
        parse_crs(the_crs), parse_cluster(the_cluster), _entry(recorded), ClusterVersion(), NOW
    )
    assert (found.everything or "").startswith(everything or "")
    assert (found.everything is None) == (everything is None)
    assert (found.update or "").startswith(update or "")
    assert (found.update is None) == (update is None)
    assert found.upgrading is None


@pytest.mark.parametrize(
    ("recorded", "gates", "held"),
    [
        pytest.param(OLD, False, True, id="applied-and-changed"),
        pytest.param(NEW, False, False, id="applied-and-unchanged"),
        pytest.param(None, False, False, id="first-install"),
        pytest.param(OLD, True, False, id="the-crs-gates-upgrades"),
    ],
)
def test_an_applied_resource_keeps_its_revision_while_cluster_api_upgrades(
    recorded: str | None, gates: bool, held: bool
) -> None:
    the_crs = parse_crs(crs("x", "src", gateUpgrades=gates))
    entry = _entry(recorded)
    found = holds(the_crs, parse_cluster(cluster("c1")), entry, UPGRADING, NOW)
    previous = entry.resources[0] if entry else None
    why = found.of("ConfigMap", "src", previous, NEW)
    assert why == (
        "Cluster API is upgrading cluster c1: the new revision of ConfigMap/src waits until "
        "the upgrade is done (UpgradeInProgress)"
        if held
        else None
    )


def test_a_resource_of_a_paused_or_held_crs_is_held_whatever_it_recorded() -> None:
    assert Holds(everything="paused").of("ConfigMap", "a", None, NEW) == "paused"
    assert Holds(update="held", upgrading="up").of("ConfigMap", "a", None, NEW) == "held"
    assert Holds().of("ConfigMap", "a", None, NEW) is None


def test_the_lines_count_the_held_changes_per_reason() -> None:
    assert held_notes([Change("a", "-x", "paused")]) == ["the controller holds this change: paused"]
    assert held_notes([Change("a", "-x", "paused"), Change("b", "-y", "paused")]) == [
        "the controller holds these 2 changes: paused"
    ]
    mixed = [Change("a", "-x", "up a"), Change("b", "-y", None), Change("c", "-z", "up c")]
    assert held_notes(mixed) == [
        "the controller holds 1 of these 3 changes: up a",
        "the controller holds 1 of these 3 changes: up c",
    ]
    assert held_notes([Change("a", "-x")]) == []


@pytest.mark.parametrize(
    ("spec", "recorded", "left"),
    [
        pytest.param({}, NEW, True, id="applied-this-content-no-drift-correction"),
        pytest.param({}, OLD, False, id="new-content-is-applied"),
        pytest.param({}, None, False, id="never-applied"),
        pytest.param({"driftDetection": "Content"}, NEW, False, id="drift-corrected"),
        pytest.param({"driftDetection": "Generation"}, NEW, False, id="generation-drift"),
        pytest.param({"reapplyInterval": "1h"}, NEW, False, id="reapplied-on-an-interval"),
    ],
)
def test_drift_is_left_unless_the_crs_corrects_it(
    spec: dict[str, Any], recorded: str | None, left: bool
) -> None:
    """`diff` does not count as a change what the controller would leave as it is:
    objects differing from the content it applied there, when nothing reapplies it."""
    the_crs = parse_crs(crs("x", "src", mode="Reconcile", **spec))
    entry = _entry(recorded)
    why = drift_left(the_crs, entry.resources[0] if entry else None, NEW)
    assert (why is not None) == left
    if why is not None:
        assert "driftDetection: None" in why and "ConfigMap/src" in why


async def test_a_rollback_whose_snapshot_cannot_be_read_holds_every_change() -> None:
    """The snapshot of the revision the rollback in force returns to is gone: the
    sources are shown, and held, as the controller holds the cluster."""
    source = configmap_source("src", payload("addon", "2"))
    raw = crs("x", "src")
    raw["metadata"]["uid"] = "u-1"
    sources = {("ConfigMap", "src"): source}
    back = revision_of({("ConfigMap", "src"): resource_hash(source)})
    raw["status"] = {"revision": OLD, "rollout": {"rolledBackFrom": back, "phase": "Progressing"}}
    shown, note, held = await _rolled_back(MemoryKube("management"), parse_crs(raw), sources)
    assert shown == sources and note is not None and OLD in note
    assert held is not None and "has no snapshot" in held
