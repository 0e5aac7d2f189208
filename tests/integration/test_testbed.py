"""The test control plane itself: real kube-apiservers on one etcd.

Covers the facts the controller's integration tests build on: the real version is
served, the CRD schemas reject bad ClusterResourceSets, server-side apply records
our field manager, workload servers are isolated from each other, RBAC applies to
non-admin identities, audit logs record writes, Cluster registration yields a
working kubeconfig Secret, and a server that cannot start says why.
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from crs_controller.testbed import (
    ControlPlane,
    ControlPlaneError,
    KubeError,
    TestbedClient,
    wait_for,
)
from crs_controller.testbed.binaries import Binaries, locate
from crs_controller.testbed.clusters import register_cluster

CRS_API = "addons.crs.dev/v1alpha1"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def configmap(name: str, namespace: str = "default", **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }


def crs(namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": CRS_API,
        "kind": "ClusterResourceSet",
        "metadata": {"name": unique("crs"), "namespace": namespace},
        "spec": {"clusterSelector": {"matchLabels": {"cni": "calico"}}, **spec},
    }


def test_every_server_reports_the_real_version(
    control_plane: ControlPlane, workload_clients: list[TestbedClient]
) -> None:
    assert control_plane.version.startswith("v1.34.")
    for client in workload_clients:
        assert client.http.get("/version").json()["gitVersion"] == control_plane.version


def test_a_valid_cluster_resource_set_is_accepted(mgmt: TestbedClient, namespace: str) -> None:
    created = mgmt.create(crs(namespace, resources=[{"kind": "ConfigMap", "name": "calico"}]))
    # The schema's defaults are filled in: applied verbatim, ApplyOnce.
    assert created["spec"]["resources"] == [
        {"kind": "ConfigMap", "name": "calico", "substitute": False}
    ]
    assert created["spec"]["mode"] == "ApplyOnce"


def test_a_bad_mode_is_refused_with_the_schema_message(mgmt: TestbedClient, namespace: str) -> None:
    bad = crs(namespace, resources=[{"kind": "ConfigMap", "name": "x"}], mode="Sometimes")
    with pytest.raises(KubeError) as refused:
        mgmt.create(bad)
    assert refused.value.status == 422
    assert 'spec.mode: Unsupported value: "Sometimes"' in refused.value.message
    assert '"ApplyOnce", "Reconcile"' in refused.value.message


@pytest.mark.parametrize(
    ("variable", "field"),
    [
        ({"name": "X", "valueFrom": {"clusterField": "metadata.uid"}}, "clusterField"),
        ({"name": "X", "valueFrom": {"clusterField": "spec.x[a]"}}, "clusterField"),
        ({"name": "9X", "value": "v"}, "name"),
        ({"name": "X"}, "exactly one of value and valueFrom"),
    ],
    ids=["uid", "bad-index", "bad-name", "no-value"],
)
def test_a_bad_variable_is_refused_with_the_schema_message(
    mgmt: TestbedClient, namespace: str, variable: dict[str, Any], field: str
) -> None:
    bad = crs(namespace, resources=[{"kind": "ConfigMap", "name": "x"}], mode="Reconcile")
    bad["spec"]["variables"] = [variable]
    with pytest.raises(KubeError) as refused:
        mgmt.create(bad)
    assert refused.value.status == 422
    assert field in refused.value.message, refused.value.message


def test_empty_resources_are_refused_with_the_schema_message(
    mgmt: TestbedClient, namespace: str
) -> None:
    with pytest.raises(KubeError) as refused:
        mgmt.create(crs(namespace, resources=[]))
    assert refused.value.status == 422
    assert "spec.resources" in refused.value.message
    assert "should have at least 1 items" in refused.value.message


def test_server_side_apply_records_the_field_manager(workload_clients: list[TestbedClient]) -> None:
    applied = workload_clients[0].apply(
        configmap(unique("applied"), color="blue"), field_manager="crs-controller"
    )
    managers = {(m["manager"], m["operation"]) for m in applied["metadata"]["managedFields"]}
    assert ("crs-controller", "Apply") in managers


def test_workload_servers_are_isolated(
    mgmt: TestbedClient, workload_clients: list[TestbedClient]
) -> None:
    name = unique("only-on-0")
    workload_clients[0].create(configmap(name))
    assert workload_clients[0].get("v1", "ConfigMap", name, "default") is not None
    assert workload_clients[1].get("v1", "ConfigMap", name, "default") is None
    assert mgmt.get("v1", "ConfigMap", name, "default") is None


def test_rbac_applies_to_a_service_account_identity(control_plane: ControlPlane) -> None:
    identity = TestbedClient(
        control_plane.workloads[2].kubeconfig(
            "system:serviceaccount:crs-system:crs-controller",
            ("system:serviceaccounts", "system:serviceaccounts:crs-system"),
        )
    )
    with identity, pytest.raises(KubeError) as refused:
        identity.list("v1", "Secret", "default")
    assert refused.value.status == 403
    assert "system:serviceaccount:crs-system:crs-controller" in refused.value.message


def test_the_audit_log_records_a_write(
    control_plane: ControlPlane, workload_clients: list[TestbedClient]
) -> None:
    name = unique("audited")
    workload_clients[1].create(configmap(name))

    def creation() -> dict[str, Any] | None:
        for event in control_plane.workloads[1].audit_events():
            ref = event.get("objectRef", {})
            if event["verb"] == "create" and (ref.get("resource"), ref.get("name")) == (
                "configmaps",
                name,
            ):
                return event
        return None

    event = wait_for(creation, timeout=10, message="audit event for the create")
    assert event["user"]["username"] == "admin"
    assert event["responseStatus"]["code"] == 201
    assert "requestObject" not in event  # Metadata level: no Secret data in the log


def test_a_registered_cluster_has_a_working_kubeconfig(
    control_plane: ControlPlane, mgmt: TestbedClient, namespace: str
) -> None:
    cluster = register_cluster(
        mgmt, control_plane.workloads[2], name="w2", namespace=namespace, labels={"cni": "calico"}
    )
    assert cluster["status"]["controlPlaneReady"] is True
    secret = mgmt.get("v1", "Secret", "w2-kubeconfig", namespace)
    assert secret is not None
    assert secret["type"] == "cluster.x-k8s.io/secret"
    assert secret["metadata"]["labels"] == {"cluster.x-k8s.io/cluster-name": "w2"}
    kubeconfig = yaml.safe_load(base64.b64decode(secret["data"]["value"]))
    with TestbedClient(kubeconfig) as client:
        assert client.get("v1", "Namespace", "default") is not None
        assert kubeconfig["clusters"][0]["cluster"]["server"] == control_plane.workloads[2].url


def test_a_v1beta2_cluster_reports_initialization(
    control_plane: ControlPlane, mgmt: TestbedClient, namespace: str
) -> None:
    cluster = register_cluster(
        mgmt,
        control_plane.workloads[0],
        name="w0",
        namespace=namespace,
        api_version="cluster.x-k8s.io/v1beta2",
    )
    assert cluster["status"]["initialization"]["controlPlaneInitialized"] is True


def test_a_server_that_cannot_start_shows_its_log(tmp_path: Path) -> None:
    real = locate()
    (tmp_path / "etcd").symlink_to(real.etcd)
    broken = tmp_path / "kube-apiserver"
    broken.write_text("#!/bin/sh\necho 'E0101 cannot start: no luck' >&2\nexit 3\n")
    broken.chmod(0o755)
    with pytest.raises(ControlPlaneError) as failed:
        ControlPlane.start(0, binaries=Binaries(tmp_path), timeout=30)
    assert "management exited with code 3" in str(failed.value)
    assert "cannot start: no luck" in str(failed.value)
