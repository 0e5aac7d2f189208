"""A cluster pass with resources that follow the Kubernetes version, against in-memory
clients: what applies at a version, what waits for an unknown one (and is never
withdrawn meanwhile), and a new revision held while Cluster API upgrades the cluster
(only where the mode would apply it: ApplyOnce has nothing to hold).
The same behaviours run on real servers in tests/integration/controller/test_versions.py."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from crs_controller.core.api.clusters import HOLD_UPDATES_ANNOTATION
from crs_controller.core.api.models import API_VERSION
from crs_controller.core.spec.objects import Cluster
from crs_controller.core.versions.cluster_version import ClusterVersion
from crs_controller.core.versions.ranges import parse_version
from crs_controller.engine.memory.notes import RESOURCES_SHOWN, Note, gather

from .builders import NS, Obj, configmap_source, crs, outcome, payload, reconcile, world_with
from .memory_kube import CLUSTER_API, World

V133 = ">=1.33.0, <1.34.0"
V134 = ">=1.34.0, <1.35.0"


@dataclass
class SetVersion:
    """The version every cluster runs, as a test sets it."""

    version: ClusterVersion

    def of(self, cluster: Cluster) -> ClusterVersion:
        return self.version


def runs(version: str | None, *, upgrading: bool = False) -> ClusterVersion:
    if version is None:
        return ClusterVersion(None, "its control plane reports no version yet", upgrading)
    return ClusterVersion(parse_version(version), "", upgrading)


def following(name: str, **spec: Any) -> Obj:
    """A CRS of three resources: one for every version, one per minor."""
    body = crs(name, "common", deletionPolicy="Delete", **spec)
    body["spec"]["resources"] = [
        {"kind": "ConfigMap", "name": "common"},
        {"kind": "ConfigMap", "name": "cpi-1-33", "kubernetesVersions": V133},
        {"kind": "ConfigMap", "name": "cpi-1-34", "kubernetesVersions": V134},
    ]
    return body


async def world_at(version: ClusterVersion, *crss: Obj) -> tuple[World, SetVersion]:
    world = await world_with(*crss, mode_source=configmap_source("common", payload("common")))
    await world.add(configmap_source("cpi-1-33", payload("cpi-v133")))
    await world.add(configmap_source("cpi-1-34", payload("cpi-v134")))
    control_planes = SetVersion(version)
    world.ctx = replace(world.ctx, control_planes=control_planes)
    return world, control_planes


def recorded(world: World, crs_name: str) -> list[str]:
    binding = world.bindings.get(NS, "c1")
    assert binding is not None and binding.model is not None
    (entry,) = [e for e in binding.model.spec.bindings if e.cluster_resource_set_name == crs_name]
    return [r.name for r in entry.resources]


async def live(world: World, name: str) -> Obj | None:
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    found: Obj | None = await workload.get("v1", "ConfigMap", name, "default")
    return found


async def test_a_cluster_gets_the_resources_of_the_version_it_runs() -> None:
    world, _ = await world_at(runs("v1.34.2"), following("cpi"))
    await reconcile(world)
    assert recorded(world, "cpi") == ["common", "cpi-1-34"]
    assert await live(world, "cpi-v134") is not None
    assert await live(world, "cpi-v133") is None
    assert outcome(world, "cpi")[0] == "Applied"


async def test_an_unknown_version_applies_the_others_and_says_what_waits() -> None:
    world, _ = await world_at(runs(None), following("cpi"))
    await reconcile(world)
    assert recorded(world, "cpi") == ["common"]
    reason, message = outcome(world, "cpi")
    assert reason == "WaitingForVersion"
    assert "ConfigMap/cpi-1-33, ConfigMap/cpi-1-34" in message
    assert "reports no version yet" in message


async def test_a_version_lost_for_a_while_withdraws_nothing() -> None:
    # Under deletionPolicy Delete, an unknown version must not read as "outside".
    world, control_planes = await world_at(runs("v1.33.1"), following("cpi"))
    await reconcile(world)
    assert recorded(world, "cpi") == ["common", "cpi-1-33"]
    control_planes.version = runs(None)
    await reconcile(world)
    assert recorded(world, "cpi") == ["common", "cpi-1-33"]
    assert await live(world, "cpi-v133") is not None
    assert outcome(world, "cpi")[0] == "WaitingForVersion"


async def test_a_version_move_swaps_the_resources() -> None:
    world, control_planes = await world_at(runs("v1.33.1"), following("cpi"))
    await reconcile(world)
    control_planes.version = runs("v1.34.0")
    await reconcile(world)
    assert recorded(world, "cpi") == ["common", "cpi-1-34"]
    assert await live(world, "cpi-v134") is not None


async def test_a_version_no_resource_is_for_keeps_what_the_cluster_has_and_says_so() -> None:
    # A routine upgrade past the newest build must not remove the add-on, under Delete.
    world, control_planes = await world_at(runs("v1.34.2"), following("cpi"))
    await reconcile(world)
    control_planes.version = runs("v1.35.0")
    await reconcile(world)
    assert recorded(world, "cpi") == ["common", "cpi-1-34"]
    assert await live(world, "cpi-v134") is not None
    reason, message = outcome(world, "cpi")
    assert reason == "NoResourceForVersion"
    assert "v1.35.0" in message and "ConfigMap/cpi-1-34 stay as applied" in message
    told = world.ctx.announcements.take(NS, "cpi")
    assert [(a.type, a.reason) for a in told if a.type == "Warning"] == [
        ("Warning", "NoResourceForVersion")
    ]
    # Once a resource is for the version, the swap happens: the old build leaves.
    body = await world.mgmt.get(API_VERSION, "ClusterResourceSet", "cpi", NS)
    assert body is not None
    body["spec"]["resources"][2]["kubernetesVersions"] = ">=1.34.0, <1.36.0"
    body["metadata"]["generation"] += 1
    await world.update(body)
    await reconcile(world)
    assert outcome(world, "cpi")[0] == "Applied"
    assert recorded(world, "cpi") == ["common", "cpi-1-34"]


async def test_a_cluster_first_met_at_a_version_without_a_resource_gets_the_others() -> None:
    world, _ = await world_at(runs("v1.36.0"), following("cpi"))
    await reconcile(world)
    assert recorded(world, "cpi") == ["common"]
    reason, message = outcome(world, "cpi")
    assert reason == "NoResourceForVersion"
    assert "nothing of them is applied" in message


async def test_deletions_are_told_as_one_event_per_crs() -> None:
    world, control_planes = await world_at(runs("v1.33.1"), following("cpi"))
    await reconcile(world)
    world.ctx.announcements.take(NS, "cpi")
    control_planes.version = runs("v1.34.0")
    await reconcile(world)
    assert await live(world, "cpi-v133") is None
    told = {a.reason: a.message for a in world.ctx.announcements.take(NS, "cpi")}
    assert "ConfigMap default/cpi-v133" in told["Deleted"]
    assert told["Deleted"].startswith("deleted ") and "from cluster c1" in told["Deleted"]


async def edit(world: World, source: str, name: str, value: str) -> None:
    body = await world.mgmt.get("v1", "ConfigMap", source, NS)
    assert body is not None
    body["data"] = configmap_source(source, payload(name, value))["data"]
    await world.update(body)


async def test_a_new_revision_waits_while_the_cluster_upgrades() -> None:
    world, control_planes = await world_at(runs("v1.34.0"), following("cpi"))
    await reconcile(world)
    control_planes.version = runs("v1.34.0", upgrading=True)
    await edit(world, "common", "common", "2")
    await reconcile(world)
    live_common = await live(world, "common")
    assert live_common is not None and live_common["data"] == {"v": "1"}
    reason, message = outcome(world, "cpi")
    assert reason == "UpgradeInProgress"
    assert "ConfigMap/common" in message

    control_planes.version = runs("v1.34.1")
    await reconcile(world)
    live_common = await live(world, "common")
    assert live_common is not None and live_common["data"] == {"v": "2"}
    assert outcome(world, "cpi")[0] == "Applied"


async def test_an_applyonce_crs_has_nothing_to_hold_while_the_cluster_upgrades() -> None:
    """ApplyOnce never applies an edited source, so an upgrade holds nothing of it: it
    stays Applied, and the CRSs depending on it are not kept waiting for the upgrade."""
    world, control_planes = await world_at(
        runs("v1.34.0"),
        crs("cni", "common", mode="ApplyOnce"),
        crs("apps", "cpi-1-34", dependsOn=[{"name": "cni"}]),
    )
    await reconcile(world)
    assert outcome(world, "apps")[0] == "Applied"
    control_planes.version = runs("v1.34.0", upgrading=True)
    await edit(world, "common", "common", "2")
    await reconcile(world)
    assert outcome(world, "cni") == ("Applied", "all resources applied")
    assert outcome(world, "apps")[0] == "Applied"
    live_common = await live(world, "common")
    assert live_common is not None and live_common["data"] == {"v": "1"}


async def test_during_an_upgrade_version_changes_go_and_a_gating_crs_is_not_held() -> None:
    world, control_planes = await world_at(runs("v1.33.5"), following("cpi"))
    await reconcile(world)
    # The control plane now runs 1.34 while the upgrade goes on: the 1.34 build is a
    # first install for this cluster, and goes.
    control_planes.version = runs("v1.34.0", upgrading=True)
    await reconcile(world)
    assert recorded(world, "cpi") == ["common", "cpi-1-34"]
    assert await live(world, "cpi-v134") is not None

    gating, _ = await world_at(runs("v1.34.0"), following("gate", gateUpgrades=True))
    await reconcile(gating)
    gating.ctx = replace(gating.ctx, control_planes=SetVersion(runs("v1.34.0", upgrading=True)))
    await edit(gating, "cpi-1-34", "cpi-v134", "2")
    await reconcile(gating)
    updated = await live(gating, "cpi-v134")
    assert updated is not None and updated["data"] == {"v": "2"}
    assert outcome(gating, "gate")[0] == "Applied"


async def test_a_resource_for_another_version_keeps_no_cluster_off_the_revision() -> None:
    # The revision covers every source, cpi-1-34 included: a 1.33 cluster, which never
    # gets it, is still on the revision, so a hold (or a rollout, or the budget) has
    # nothing to hold, and an edit of the 1.34 build is no update for it.
    world, _ = await world_at(runs("v1.33.1"), following("cpi"))
    await reconcile(world)
    cluster = await world.mgmt.get(CLUSTER_API, "Cluster", "c1", NS)
    assert cluster is not None
    cluster["metadata"]["annotations"] = {HOLD_UPDATES_ANNOTATION: "true"}
    await world.update(cluster)
    await reconcile(world)
    assert outcome(world, "cpi")[0] == "Applied"
    await edit(world, "cpi-1-34", "cpi-v134", "2")
    await reconcile(world)
    assert outcome(world, "cpi")[0] == "Applied"
    # An edit of what it runs is an update, and the hold keeps it back.
    await edit(world, "cpi-1-33", "cpi-v133", "2")
    await reconcile(world)
    assert outcome(world, "cpi")[0] == "UpdateHeld"


def test_a_deletion_note_keeps_a_bounded_number_of_names() -> None:
    names = tuple(f"v1 ConfigMap default/o{i:03}" for i in range(RESOURCES_SHOWN))
    notes = [Note("Normal", "Deleted", f"c{c}", resources=names, more=480) for c in range(3)]
    (told,) = gather(notes)
    assert told.message.startswith("deleted v1 ConfigMap default/o000, ")
    assert "and at least 480 more from 3 clusters" in told.message
    assert len(told.message) < 1000


async def test_a_broken_build_for_the_new_version_keeps_the_working_one() -> None:
    # Under Delete, a swap to a new build that does not apply must not remove the old one.
    world, control_planes = await world_at(runs("v1.33.2"), following("cpi"))
    await reconcile(world)
    body = await world.mgmt.get("v1", "ConfigMap", "cpi-1-34", NS)
    assert body is not None
    good = dict(body["data"])
    body["data"] = {"a": "kind: ConfigMap\nmetadata: [name: broken\n"}
    await world.update(body)
    control_planes.version = runs("v1.34.0")
    await reconcile(world)
    assert await live(world, "cpi-v133") is not None
    assert recorded(world, "cpi") == ["common", "cpi-1-33"]
    reason, message = outcome(world, "cpi")
    assert reason == "InvalidManifest"
    assert "cpi-1-34" in message
    assert "ConfigMap/cpi-1-33 stay as applied until the resources for v1.34.0 apply" in message
    # Once the new build applies, the old one leaves and what only it had is deleted.
    body = await world.mgmt.get("v1", "ConfigMap", "cpi-1-34", NS)
    assert body is not None
    body["data"] = good
    await world.update(body)
    await reconcile(world)
    assert outcome(world, "cpi")[0] == "Applied"
    assert recorded(world, "cpi") == ["common", "cpi-1-34"]
    assert await live(world, "cpi-v134") is not None
    assert await live(world, "cpi-v133") is None


async def test_a_missing_build_for_the_new_version_keeps_the_working_one() -> None:
    world, control_planes = await world_at(runs("v1.33.2"), following("cpi"))
    await reconcile(world)
    await world.mgmt.delete("v1", "ConfigMap", "cpi-1-34", NS)
    world.configmaps.remove(NS, "cpi-1-34")
    control_planes.version = runs("v1.34.0")
    await reconcile(world)
    assert await live(world, "cpi-v133") is not None
    assert recorded(world, "cpi") == ["common", "cpi-1-33"]
    assert outcome(world, "cpi")[0] != "Applied"


async def test_applyonce_sends_the_new_build_of_objects_the_old_one_applied() -> None:
    # The 1.33 and 1.34 builds name the same object: ApplyOnce applies the new build
    # once, rather than taking the old build's object as applied unsent.
    world, control_planes = await world_at(runs("v1.33.2"), following("cpi", mode="ApplyOnce"))
    await edit(world, "cpi-1-33", "cpi", "v1.33.0")
    await edit(world, "cpi-1-34", "cpi", "v1.34.0")
    await reconcile(world)
    control_planes.version = runs("v1.34.0")
    await reconcile(world)
    assert recorded(world, "cpi") == ["common", "cpi-1-34"]
    cpi = await live(world, "cpi")
    assert cpi is not None and cpi["data"] == {"v": "v1.34.0"}
    # Applied once: a later edit of the build is ignored, as ApplyOnce ignores edits.
    await edit(world, "cpi-1-34", "cpi", "v1.34.1")
    await reconcile(world)
    cpi = await live(world, "cpi")
    assert cpi is not None and cpi["data"] == {"v": "v1.34.0"}
