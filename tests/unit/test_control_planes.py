"""A Cluster's control plane (``core.versions.cluster_version``): ``spec.controlPlaneRef`` in
v1beta2 (apiGroup) and v1beta1 (apiVersion) shapes, other groups, kinds and names
refused with a message naming the field; the upgrade reasons of TopologyReconciled
in a v1beta2 Cluster (status.conditions) and a v1beta1 one (status.v1beta2.conditions);
what a control plane object reports; and ``cluster_version`` as a table — unknown
(and why), upgrading when the asked-for or topology version differs from the one
running."""

from __future__ import annotations

from typing import Any

import pytest

from crs_controller.core.versions.cluster_version import (
    CONTROL_PLANE_GROUP,
    UPGRADE_REASONS,
    ClusterVersion,
    ControlPlane,
    ControlPlaneRef,
    RefProblem,
    cluster_version,
    control_plane_ref,
    parse_control_plane,
    topology_upgrading,
    topology_version,
)
from crs_controller.core.versions.ranges import parse_version

Obj = dict[str, Any]


def cluster(ref: object = None, *, api: str = "v1beta2", **spec: Any) -> Obj:
    body: Obj = {"apiVersion": f"cluster.x-k8s.io/{api}", "kind": "Cluster", "spec": dict(spec)}
    if ref is not None:
        body["spec"]["controlPlaneRef"] = ref
    return body


def v1beta2_ref(kind: object = "KubeadmControlPlane", name: object = "cp", **extra: Any) -> Obj:
    return {"apiGroup": CONTROL_PLANE_GROUP, "kind": kind, "name": name, **extra}


# --- spec.controlPlaneRef ------------------------------------------------------------


@pytest.mark.parametrize(
    "ref",
    [
        v1beta2_ref(),
        {
            "apiVersion": f"{CONTROL_PLANE_GROUP}/v1beta1",
            "kind": "KubeadmControlPlane",
            "name": "cp",
        },
        {
            "apiVersion": f"{CONTROL_PLANE_GROUP}/v1beta2",
            "kind": "KubeadmControlPlane",
            "name": "cp",
        },
        # apiGroup is read first: the v1beta2 field wins when both are there.
        v1beta2_ref(apiVersion="infrastructure.cluster.x-k8s.io/v1beta1"),
    ],
    ids=["v1beta2", "v1beta1", "v1beta1-shape-v1beta2-version", "both-fields"],
)
def test_a_control_plane_ref_in_either_shape(ref: Obj) -> None:
    assert control_plane_ref(cluster(ref)) == ControlPlaneRef("KubeadmControlPlane", "cp")


@pytest.mark.parametrize(
    "raw",
    [
        {"kind": "Cluster"},
        {"spec": None},
        cluster(),
        cluster("KubeadmControlPlane/cp"),
        cluster(["KubeadmControlPlane", "cp"]),
    ],
    ids=["no-spec", "null-spec", "no-ref", "string-ref", "list-ref"],
)
def test_no_control_plane_ref_is_none(raw: Obj) -> None:
    assert control_plane_ref(raw) is None


@pytest.mark.parametrize(
    "ref",
    [
        v1beta2_ref(apiGroup="infrastructure.cluster.x-k8s.io"),
        v1beta2_ref(apiGroup=""),
        v1beta2_ref(apiGroup=f"{CONTROL_PLANE_GROUP}.attacker.example"),
        v1beta2_ref(apiGroup="apps"),
        {"apiVersion": "v1", "kind": "Secret", "name": "cp"},
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "cp"},
        {"apiVersion": CONTROL_PLANE_GROUP, "kind": "KubeadmControlPlane", "name": "cp"},
        {"kind": "KubeadmControlPlane", "name": "cp"},
        {"apiVersion": 1, "kind": "KubeadmControlPlane", "name": "cp"},
    ],
    ids=[
        "infrastructure",
        "empty-group",
        "lookalike",
        "apps",
        "core-secret",
        "deployment",
        "no-version",
        "no-group",
        "number",
    ],
)
def test_another_group_is_refused_naming_the_field(ref: Obj) -> None:
    problem = control_plane_ref(cluster(ref))
    assert problem == RefProblem(f"spec.controlPlaneRef is not in {CONTROL_PLANE_GROUP}")


@pytest.mark.parametrize(
    ("kind", "name", "field"),
    [
        ("kubeadmControlPlane", "cp", "spec.controlPlaneRef.kind"),
        ("Kubeadm-ControlPlane", "cp", "spec.controlPlaneRef.kind"),
        ("K" * 64, "cp", "spec.controlPlaneRef.kind"),
        ("", "cp", "spec.controlPlaneRef.kind"),
        (None, "cp", "spec.controlPlaneRef.kind"),
        (7, "cp", "spec.controlPlaneRef.kind"),
        ("KubeadmControlPlane", "CP", "spec.controlPlaneRef.name"),
        ("KubeadmControlPlane", "-cp", "spec.controlPlaneRef.name"),
        ("KubeadmControlPlane", "cp.", "spec.controlPlaneRef.name"),
        ("KubeadmControlPlane", "a/b", "spec.controlPlaneRef.name"),
        ("KubeadmControlPlane", "c" * 254, "spec.controlPlaneRef.name"),
        ("KubeadmControlPlane", "", "spec.controlPlaneRef.name"),
        ("KubeadmControlPlane", None, "spec.controlPlaneRef.name"),
    ],
)
def test_a_bad_kind_or_name_is_refused_naming_the_field(
    kind: object, name: object, field: str
) -> None:
    problem = control_plane_ref(cluster(v1beta2_ref(kind, name)))
    assert isinstance(problem, RefProblem) and problem.message.startswith(f"{field} is not")


@pytest.mark.parametrize(
    ("kind", "name"), [("K", "c"), ("K" * 63, "c" * 253), ("AWSManagedControlPlane", "a.b-1")]
)
def test_the_longest_and_shortest_kinds_and_names_are_read(kind: str, name: str) -> None:
    assert control_plane_ref(cluster(v1beta2_ref(kind, name))) == ControlPlaneRef(kind, name)


# --- TopologyReconciled --------------------------------------------------------------


def with_conditions(api: str, *conditions: object) -> Obj:
    body = cluster(api=api)
    if api == "v1beta1":  # v1beta2 conditions sit under status.v1beta2 there
        body["status"] = {"v1beta2": {"conditions": list(conditions)}}
    else:
        body["status"] = {"conditions": list(conditions)}
    return body


def topology(status: str, reason: str, kind: str = "TopologyReconciled") -> Obj:
    return {"type": kind, "status": status, "reason": reason}


@pytest.mark.parametrize("api", ["v1beta2", "v1beta1"])
@pytest.mark.parametrize("reason", sorted(UPGRADE_REASONS))
def test_each_upgrade_reason_says_upgrading(api: str, reason: str) -> None:
    other = {"type": "Available", "status": "True", "reason": "Available"}
    assert topology_upgrading(with_conditions(api, other, topology("False", reason)))


@pytest.mark.parametrize("api", ["v1beta2", "v1beta1"])
@pytest.mark.parametrize(
    "conditions",
    [
        [],
        [topology("True", "ReconcileSucceeded")],
        [topology("True", "ClusterUpgrading")],
        [topology("False", "ClusterClassNotReconciled")],
        [topology("Unknown", "ClusterUpgrading")],
        [topology("False", "ClusterUpgrading", kind="Available")],
        ["TopologyReconciled"],
        [None],
    ],
    ids=["none", "reconciled", "true", "other-reason", "unknown", "other-type", "string", "null"],
)
def test_other_conditions_say_not_upgrading(api: str, conditions: list[object]) -> None:
    assert not topology_upgrading(with_conditions(api, *conditions))


def test_a_v1beta1_cluster_is_read_from_its_v1beta2_conditions_only() -> None:
    # Its status.conditions are v1beta1 conditions: a lookalike there is not read.
    body = cluster(api="v1beta1")
    body["status"] = {"conditions": [topology("False", "ClusterUpgrading")]}
    assert not topology_upgrading(body)


@pytest.mark.parametrize(
    "status",
    [None, "upgrading", [], {"conditions": "x"}, {"conditions": {"type": "TopologyReconciled"}}],
)
def test_a_malformed_status_is_not_upgrading(status: object) -> None:
    assert not topology_upgrading({**cluster(), "status": status})
    assert not topology_upgrading({**cluster(api="v1beta1"), "status": {"v1beta2": status}})


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"topology": {"version": "v1.34.2", "classRef": {"name": "c"}}}, "v1.34.2"),
        ({"topology": {"classRef": {"name": "c"}}}, None),
        ({"topology": {"version": 1.34}}, None),
        ({"topology": "v1.34.2"}, None),
        ({}, None),
    ],
)
def test_topology_version(spec: Obj, expected: str | None) -> None:
    assert topology_version(cluster(**spec)) == expected


# --- the control plane object and the version ----------------------------------------


def test_a_control_plane_object_reports_its_versions() -> None:
    raw = {
        "apiVersion": f"{CONTROL_PLANE_GROUP}/v1beta2",
        "kind": "KubeadmControlPlane",
        "metadata": {"name": "cp", "namespace": "n"},
        "spec": {"version": "v1.34.2", "replicas": 3},
        "status": {"version": "v1.33.5", "replicas": 3},
    }
    assert parse_control_plane(raw) == ControlPlane("n", "cp", "v1.33.5", "v1.34.2")
    assert parse_control_plane({"metadata": {"name": "cp"}}) == ControlPlane("", "cp", None, None)
    odd = {"spec": {"version": 134}, "status": {"version": ["v1.34.2"]}}
    assert parse_control_plane(odd) == ControlPlane("", "", None, None)


def plane(running: str | None, desired: str | None = None) -> ControlPlane:
    return ControlPlane("n", "cp", running, desired)


V1_34_2 = parse_version("v1.34.2")


@pytest.mark.parametrize(
    ("condition", "wanted", "control_plane", "expected"),
    [
        (False, None, None, ClusterVersion(None, "its control plane object was not found")),
        (True, None, None, ClusterVersion(None, "its control plane object was not found", True)),
        (
            False,
            None,
            plane(None, "v1.34.2"),
            ClusterVersion(None, "its control plane reports no version (status.version) yet"),
        ),
        (
            False,
            None,
            plane("v1.34", "v1.34.2"),
            ClusterVersion(None, "its control plane reports no version (status.version) yet"),
        ),
        (False, None, plane("v1.34.2"), ClusterVersion(V1_34_2, "", False)),
        (False, None, plane("v1.34.2", "v1.34.2"), ClusterVersion(V1_34_2, "", False)),
        (False, "v1.34.2", plane("v1.34.2", "v1.34.2"), ClusterVersion(V1_34_2, "", False)),
        # Build metadata is no difference: the same version.
        (False, None, plane("v1.34.2", "v1.34.2+vmware.1"), ClusterVersion(V1_34_2, "", False)),
        (False, None, plane("v1.34.2", "v1.35.0"), ClusterVersion(V1_34_2, "", True)),
        (False, "v1.35.0", plane("v1.34.2", "v1.34.2"), ClusterVersion(V1_34_2, "", True)),
        (False, "v1.35.0", plane("v1.34.2"), ClusterVersion(V1_34_2, "", True)),
        (True, "v1.34.2", plane("v1.34.2", "v1.34.2"), ClusterVersion(V1_34_2, "", True)),
        # An unreadable asked-for version is no sign of an upgrade.
        (False, "latest", plane("v1.34.2", "1.35"), ClusterVersion(V1_34_2, "", False)),
    ],
    ids=[
        "no-object",
        "no-object-condition",
        "no-status-version",
        "unparseable",
        "running-only",
        "equal",
        "equal-with-topology",
        "build-metadata",
        "spec-differs",
        "topology-differs",
        "topology-differs-no-spec",
        "condition",
        "unreadable-asked-for",
    ],
)
def test_cluster_version(
    condition: bool,
    wanted: str | None,
    control_plane: ControlPlane | None,
    expected: ClusterVersion,
) -> None:
    found = cluster_version(
        upgrading_condition=condition, wanted=wanted, control_plane=control_plane
    )
    assert (found.version is None) == (expected.version is None)
    if expected.version is not None:
        assert found.version is not None and str(found.version) == str(expected.version)
    assert (found.unknown, found.upgrading) == (expected.unknown, expected.upgrading)


def test_a_cluster_naming_no_control_plane_says_so() -> None:
    assert ClusterVersion().version is None
    assert "spec.controlPlaneRef" in ClusterVersion().unknown
