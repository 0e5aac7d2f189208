"""Facts read from Cluster API ``Cluster`` objects: paused (``spec.paused`` or the
``cluster.x-k8s.io/paused`` annotation, also on a CRS) and control plane
initialized in the v1beta1 and v1beta2 shapes."""

from __future__ import annotations

from typing import Any

import pytest

from crs_controller.core.api.clusters import (
    PAUSED_ANNOTATION,
    control_plane_initialized,
    is_paused,
)


def cluster(
    *,
    api_version: str = "cluster.x-k8s.io/v1beta2",
    metadata: dict[str, Any] | None = None,
    spec: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": "Cluster",
        "metadata": {"name": "workload-1", "namespace": "default", **(metadata or {})},
    }
    if spec is not None:
        obj["spec"] = spec
    if status is not None:
        obj["status"] = status
    return obj


CRS: dict[str, Any] = {
    "apiVersion": "addons.crs.dev/v1alpha1",
    "kind": "ClusterResourceSet",
    "metadata": {"name": "calico", "namespace": "default"},
    "spec": {"clusterSelector": {"matchLabels": {"cni": "calico"}}, "resources": []},
}


@pytest.mark.parametrize(
    ("obj", "paused"),
    [
        (cluster(), False),
        (cluster(spec={}), False),
        (cluster(spec={"paused": False}), False),
        (cluster(spec={"paused": True}), True),
        (cluster(spec={"paused": True, "topology": {"class": "quick-start"}}), True),
        # CAPI pauses on the annotation's presence, whatever its value.
        (cluster(metadata={"annotations": {PAUSED_ANNOTATION: ""}}), True),
        (cluster(metadata={"annotations": {PAUSED_ANNOTATION: "true"}}), True),
        (cluster(metadata={"annotations": {"other.io/paused": "true"}}), False),
        (cluster(metadata={"annotations": None}), False),
        (cluster(metadata={"annotations": {PAUSED_ANNOTATION: ""}}, spec={"paused": False}), True),
        ({**CRS}, False),
        ({**CRS, "metadata": {**CRS["metadata"], "annotations": {PAUSED_ANNOTATION: ""}}}, True),
        ({"metadata": {}}, False),
        ({}, False),
    ],
)
def test_is_paused(obj: dict[str, Any], paused: bool) -> None:
    assert is_paused(obj) is paused


def test_the_paused_annotation_name_is_cluster_apis() -> None:
    assert PAUSED_ANNOTATION == "cluster.x-k8s.io/paused"


V1B1 = "cluster.x-k8s.io/v1beta1"
V1B2 = "cluster.x-k8s.io/v1beta2"


@pytest.mark.parametrize(
    ("api_version", "status", "initialized"),
    [
        pytest.param(V1B1, {"controlPlaneReady": True}, True, id="v1beta1 ready"),
        pytest.param(V1B1, {"controlPlaneReady": False}, False, id="v1beta1 not ready"),
        pytest.param(V1B1, {"phase": "Provisioning"}, False, id="v1beta1 no field"),
        pytest.param(
            V1B2,
            {"initialization": {"controlPlaneInitialized": True}},
            True,
            id="v1beta2 initialized",
        ),
        pytest.param(
            V1B2,
            {"initialization": {"controlPlaneInitialized": False}},
            False,
            id="v1beta2 not initialized",
        ),
        pytest.param(
            V1B2,
            {"initialization": {"infrastructureProvisioned": True}},
            False,
            id="v1beta2 only infrastructure",
        ),
        pytest.param(V1B2, {"initialization": None}, False, id="v1beta2 null initialization"),
        pytest.param(V1B2, {}, False, id="empty status"),
        pytest.param(V1B2, None, False, id="no status"),
        # v1beta2 keeps v1beta1 fields under status.deprecated.v1beta1, not at the top.
        pytest.param(
            V1B2,
            {"deprecated": {"v1beta1": {"conditions": []}}},
            False,
            id="v1beta2 deprecated block only",
        ),
    ],
)
def test_control_plane_initialized(
    api_version: str, status: dict[str, Any] | None, initialized: bool
) -> None:
    obj = cluster(api_version=api_version, status=status)
    assert control_plane_initialized(obj) is initialized


def test_control_plane_status_null() -> None:
    obj = cluster()
    obj["status"] = None
    assert control_plane_initialized(obj) is False
