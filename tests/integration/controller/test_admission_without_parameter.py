"""The shipped admission policies (config/admission) with their parameter missing, on
the real server: the controller's ClusterRoleBinding deleted (a leaked token revoked,
an uninstall stopped half way).

The API server looks the parameter up before it evaluates a policy's
matchConditions, so a policy that matched every ConfigMap and Secret refused every
write of one, by anyone. Now system:masters and a tenant create, update and delete
plain ConfigMaps and Secrets; what the policies exist for still holds: a tenant can
neither write a ClusterResourceSetBinding nor create, relabel or delete a revision
snapshot. The policies are installed under names of their own, their parameter
naming a ClusterRoleBinding that does not exist, and kept to the test's namespace:
the session's controller keeps its ClusterRoleBinding and its rights."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from crs_controller.core.rollout.snapshots import SNAPSHOT_LABEL
from crs_controller.testbed import ControlPlane, KubeError, TestbedClient, wait_for

from .support import CRS_API, TIMEOUT, configmap_obj, unique

ADMISSION = Path(__file__).resolve().parents[3] / "config" / "admission"
POLICIES = ("binding_writers.yaml", "snapshot_writers.yaml", "controller_writes.yaml")
MISSING = "no params found"
RBAC = "rbac.authorization.k8s.io"
TENANT = "tenant-bob"

Obj = dict[str, Any]


def secret_obj(name: str, namespace: str) -> Obj:
    meta = {"name": name, "namespace": namespace}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "stringData": {"k": "v"}}


def binding_obj(namespace: str, name: str) -> Obj:
    return {
        "apiVersion": CRS_API,
        "kind": "ClusterResourceSetBinding",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterName": name, "bindings": []},
    }


def try_create(client: TestbedClient, obj: Obj, *, dry_run: bool = False) -> httpx.Response:
    path = client.path(obj["apiVersion"], obj["kind"], namespace=obj["metadata"]["namespace"])
    return client.http.post(path, params={"dryRun": "All"} if dry_run else {}, json=obj)


def paramless(namespace: str, prefix: str) -> list[Obj]:
    """The shipped policies and their bindings, renamed with ``prefix``, their
    parameter a ClusterRoleBinding that does not exist, kept to ``namespace``."""
    documents = []
    for name in POLICIES:
        for document in yaml.safe_load_all((ADMISSION / name).read_text()):
            if not document:
                continue
            document["metadata"]["name"] = prefix + document["metadata"]["name"]
            spec = document["spec"]
            if document["kind"] == "ValidatingAdmissionPolicyBinding":
                spec["policyName"] = prefix + spec["policyName"]
                spec["paramRef"]["name"] = f"{prefix}absent"
                selector = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
                spec["matchResources"] = {"namespaceSelector": selector}
            documents.append(document)
    return documents


def tenant_rbac(namespace: str) -> list[Obj]:
    """A tenant allowed by RBAC to write bindings, ConfigMaps and Secrets in
    ``namespace``: what stops it must be a policy."""
    meta = {"name": "test-writer", "namespace": namespace}
    verbs = ["get", "list", "create", "update", "delete", "deletecollection"]
    rules = [
        {"apiGroups": ["addons.crs.dev"], "resources": ["clusterresourcesetbindings"],
         "verbs": verbs},
        {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": verbs},
    ]  # fmt: skip
    role = {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": meta, "rules": rules}
    grant = {
        "apiVersion": f"{RBAC}/v1",
        "kind": "RoleBinding",
        "metadata": meta,
        "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "test-writer"},
        "subjects": [{"apiGroup": RBAC, "kind": "User", "name": TENANT}],
    }
    return [role, grant]


@pytest.fixture
def tenant(
    mgmt: TestbedClient, control_plane: ControlPlane, namespace: str
) -> Iterator[TestbedClient]:
    for obj in tenant_rbac(namespace):
        mgmt.apply(obj)
    with TestbedClient(control_plane.management.kubeconfig(TENANT, ())) as client:
        yield client


@pytest.fixture
def snapshot(mgmt: TestbedClient, namespace: str) -> Obj:
    """A revision snapshot, written before the policies come."""
    obj = configmap_obj(unique("crs.revision"), namespace, a="1")
    obj["metadata"]["labels"] = {SNAPSHOT_LABEL: "some-uid"}
    return mgmt.create(obj)


@pytest.fixture
def without_parameter(
    mgmt: TestbedClient, tenant: TestbedClient, snapshot: Obj, namespace: str
) -> Iterator[None]:
    """The policies installed, their parameter missing; each step waits until a
    tenant's dry-run binding create shows the policies loaded, or gone."""
    documents = paramless(namespace, unique("noparam") + "-")
    probe = binding_obj(namespace, "probe")
    for document in documents:
        mgmt.apply(document)
    try:
        wait_for(lambda: MISSING in try_create(tenant, probe, dry_run=True).text, TIMEOUT)
        yield
    finally:
        for document in reversed(documents):
            mgmt.delete(document["apiVersion"], document["kind"], document["metadata"]["name"])
        wait_for(lambda: try_create(tenant, probe, dry_run=True).status_code == 201, TIMEOUT)


def write_update_delete(client: TestbedClient, obj: Obj) -> None:
    created = client.create(obj)
    created["metadata"]["labels"] = {"edited": "yes"}
    client.update(created)
    client.delete("v1", obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"])
    assert (
        client.get("v1", obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"]) is None
    )


def test_plain_configmaps_and_secrets_do_not_wait_for_the_parameter(
    without_parameter: None, mgmt: TestbedClient, tenant: TestbedClient, namespace: str
) -> None:
    # system:masters, and a tenant its RBAC allows, as any other writer.
    for client in (mgmt, tenant):
        write_update_delete(client, configmap_obj(unique("plain"), namespace, a="1"))
        write_update_delete(client, secret_obj(unique("plain"), namespace))
    # A collection delete of plain objects passes too.
    kept = tenant.create(configmap_obj(unique("plain"), namespace, a="1"))
    every = tenant.path("v1", "ConfigMap", namespace=namespace)
    response = tenant.http.delete(every, params={"labelSelector": "!" + SNAPSHOT_LABEL})
    assert response.status_code == 200, response.text
    assert mgmt.get("v1", "ConfigMap", kept["metadata"]["name"], namespace) is None


def test_bindings_and_snapshots_stay_protected_without_the_parameter(
    without_parameter: None,
    mgmt: TestbedClient,
    tenant: TestbedClient,
    snapshot: Obj,
    namespace: str,
) -> None:
    # Refused as the policy cannot be configured (422, naming the missing parameter).
    refused = try_create(tenant, binding_obj(namespace, "forged"))
    assert refused.is_error and MISSING in refused.text, refused.text
    labelled = configmap_obj(unique("forged"), namespace, a="1")
    labelled["metadata"]["labels"] = {SNAPSHOT_LABEL: "some-uid"}
    refused = try_create(tenant, labelled)
    assert refused.is_error and MISSING in refused.text, refused.text
    # Relabelling or deleting the snapshot: its old object carries the label.
    name = snapshot["metadata"]["name"]
    live = tenant.get("v1", "ConfigMap", name, namespace)
    assert live is not None
    live["metadata"]["labels"] = {}
    with pytest.raises(KubeError) as relabelled:
        tenant.update(live)
    assert MISSING in relabelled.value.message
    with pytest.raises(KubeError) as deleted:
        tenant.delete("v1", "ConfigMap", name, namespace)
    assert MISSING in deleted.value.message
    live = mgmt.get("v1", "ConfigMap", name, namespace)
    assert live is not None and live["metadata"]["labels"] == {SNAPSHOT_LABEL: "some-uid"}
