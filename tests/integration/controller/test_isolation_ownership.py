"""A binding's inventory is a claim, not a proof, on real servers: a tenant forges its
own ClusterResourceSetBinding to list objects the controller never applied (another
team's ConfigMap, a kube-system Deployment); neither pruning (deletionPolicy: Delete)
nor uninstall (Cluster deleted with uninstall.ensure) deletes them, the refusal is
reported and the legitimately applied objects are still deleted. An object the
controller did apply, of a custom kind served cluster-scoped, named with a namespace
is refused by its kind's scope, and kept. The shipped
ValidatingAdmissionPolicy (config/admission) refuses a tenant's binding writes, and
its deletes of revision snapshots, with its message, while the controller, as its
ServiceAccount with the shipped RBAC, still writes bindings and snapshots, and
deletes a deleted CRS's snapshots."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from crs_controller.clients.kube import KubeClient as ProductClient
from crs_controller.clients.kubeconfig import workload_endpoint
from crs_controller.core.errors import Conflict
from crs_controller.core.manifests.documents import APPLIED_BY, APPLIED_BY_LABEL
from crs_controller.core.rollout.snapshots import SNAPSHOT_LABEL
from crs_controller.testbed import ControlPlane, KubeError, Server, TestbedClient, wait_for
from crs_controller.testbed.controller import SA_GROUPS, SA_USER, ControllerProcess, install_rbac

from .support import (
    CLUSTER_API,
    CRS_API,
    HOLD,
    TIMEOUT,
    add_cluster,
    binding,
    binding_entry,
    configmap_obj,
    crs_obj,
    deployment,
    log_records,
    loose_crd,
    manifests,
    source_configmap,
    unique,
    until_no_conflict,
    wait_condition,
    wait_object,
)


def foreign_objects(wl: TestbedClient) -> list[dict[str, str]]:
    """Objects created on the workload cluster directly, never through the controller:
    another team's ConfigMap in its own namespace and a Deployment in kube-system.
    Returned as the inventory entries a forger would write."""
    team, config, system = unique("team-b"), unique("their-config"), unique("dns")
    wl.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team}})
    wl.create(configmap_obj(config, team, owner="team-b"))
    dep = deployment(system)
    dep["metadata"]["namespace"] = "kube-system"
    wl.create(dep)
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "namespace": team, "name": config},
        {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "kube-system", "name": system},
    ]


def still_there(wl: TestbedClient, refs: list[dict[str, str]]) -> list[str]:
    return [
        r["name"]
        for r in refs
        if (live := wl.get(r["apiVersion"], r["kind"], r["name"], r["namespace"])) is not None
        and not live["metadata"].get("deletionTimestamp")
    ]


def forge(mgmt: TestbedClient, namespace: str, cluster: str, crs: str, refs: list[Any]) -> None:
    """Add ``refs`` to the first resource of ``crs``'s entry, as the tenant (an admin
    here) would; retried when the controller wrote the binding in between."""

    def change() -> None:
        live = binding(mgmt, namespace, cluster)
        assert live is not None
        for entry in live["spec"]["bindings"]:
            if entry["clusterResourceSetName"] == crs:
                entry["resources"][0]["objects"] += refs
        mgmt.update(live)

    until_no_conflict(change)


def inventory_names(mgmt: TestbedClient, namespace: str, cluster: str, crs: str) -> list[str]:
    entry = binding_entry(mgmt, namespace, cluster, crs) or {}
    return sorted(o["name"] for r in entry.get("resources", []) for o in r.get("objects", []))


def refused_in_log(controller: ControllerProcess, name: str) -> bool:
    records = log_records(controller, "deletion refused")
    return any(name in str(r.get("object")) for r in records)


def refusal_events(mgmt: TestbedClient, namespace: str) -> str:
    events = mgmt.list("v1", "Event", namespace)
    return "\n".join(e["message"] for e in events if e["reason"] == "DeletionRefused")


def test_pruning_refuses_forged_inventory_entries(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    wl = workload_clients[0]
    foreign = foreign_objects(wl)
    keep, drop = unique("keep"), unique("drop")
    doc = manifests(configmap_obj(keep), configmap_obj(drop))
    mgmt.create(source_configmap(namespace, "addon", {"a": doc}))
    crs = crs_obj(namespace, "own", [("ConfigMap", "addon")], {"own": "1"}, mode="Reconcile")
    crs["spec"]["deletionPolicy"] = "Delete"
    mgmt.create(crs)
    add_cluster(mgmt, workloads[0], namespace, "own1", {"own": "1"})
    wait_condition(mgmt, namespace, "own", "Ready", "True", "Applied")
    wait_for(lambda: inventory_names(mgmt, namespace, "own1", "own") == sorted([keep, drop]))

    forge(mgmt, namespace, "own1", "own", foreign)
    # The next pass: an object leaves the source, so the resource's old inventory
    # (forged entries included) is what it prunes from.
    source = mgmt.get("v1", "ConfigMap", "addon", namespace)
    source["data"] = {"a": manifests(configmap_obj(keep))}
    mgmt.update(source)

    # The positive sign: the binding is written after the pruning finished.
    wait_for(lambda: inventory_names(mgmt, namespace, "own1", "own") == [keep], TIMEOUT)
    assert wl.get("v1", "ConfigMap", drop, "default") is None
    assert wl.get("v1", "ConfigMap", keep, "default") is not None
    assert still_there(wl, foreign) == [r["name"] for r in foreign]
    for ref in foreign:
        wait_for(lambda ref=ref: refused_in_log(controller, ref["name"]), TIMEOUT)
        wait_for(lambda ref=ref: ref["name"] in refusal_events(mgmt, namespace), TIMEOUT)


def test_uninstall_refuses_forged_inventory_entries(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    wl = workload_clients[2]
    foreign = foreign_objects(wl)
    addon = unique("addon")
    mgmt.create(source_configmap(namespace, "addon", {"a": manifests(configmap_obj(addon))}))
    crs = crs_obj(namespace, "un", [("ConfigMap", "addon")], {"unf": "1"}, mode="Reconcile")
    crs["spec"]["uninstall"] = {"ensure": True}
    mgmt.create(crs)
    add_cluster(mgmt, workloads[2], namespace, "unf1", {"unf": "1"})
    hold = {"metadata": {"finalizers": [HOLD]}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", "unf1", hold, namespace=namespace)
    wait_object(wl, "v1", "ConfigMap", addon, "default")
    wait_for(lambda: inventory_names(mgmt, namespace, "unf1", "un") == [addon], TIMEOUT)

    # Paused, the controller leaves the Cluster and its binding alone: the forged
    # entry is what the cleanup finds once the Cluster is being deleted.
    paused = {"spec": {"paused": True}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", "unf1", paused, namespace=namespace)
    forge(mgmt, namespace, "unf1", "un", foreign)
    mgmt.delete(CLUSTER_API, "Cluster", "unf1", namespace)
    resume = {"spec": {"paused": False}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", "unf1", resume, namespace=namespace)

    # The positive sign: the cleanup removed what the CRS applied, and its entry.
    wait_for(lambda: wl.get("v1", "ConfigMap", addon, "default") is None, TIMEOUT)
    wait_for(lambda: binding_entry(mgmt, namespace, "unf1", "un") is None, TIMEOUT)
    assert still_there(wl, foreign) == [r["name"] for r in foreign]
    events = wait_for(lambda: refusal_events(mgmt, namespace), TIMEOUT)
    for ref in foreign:
        assert f"{ref['namespace']}/{ref['name']}" in events

    release = {"metadata": {"finalizers": None}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", "unf1", release, namespace=namespace)
    wait_for(lambda: mgmt.get(CLUSTER_API, "Cluster", "unf1", namespace) is None, TIMEOUT)


def established(crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def cluster_scoped_ours(wl: TestbedClient) -> dict[str, str]:
    """An object of a custom kind served cluster-scoped, applied by the controller's
    field manager (as an earlier apply would have left it), as a forger would name it:
    with a namespace."""
    group, name = f"{unique('g')}.example.com", unique("gizmo")
    crd = loose_crd(group, "Gizmo")
    crd["spec"]["scope"] = "Cluster"
    wl.create(crd)
    crd_name = crd["metadata"]["name"]
    wait_object(
        wl, "apiextensions.k8s.io/v1", "CustomResourceDefinition", crd_name, predicate=established
    )
    labels = {APPLIED_BY_LABEL: APPLIED_BY}  # a field of ours, so that our entry stays
    gizmo = {
        "apiVersion": f"{group}/v1",
        "kind": "Gizmo",
        "metadata": {"name": name, "labels": labels},
    }
    wl.apply(gizmo, field_manager="crs-controller")
    return {"apiVersion": f"{group}/v1", "kind": "Gizmo", "namespace": "kube-system", "name": name}


def test_a_namespace_on_a_cluster_scoped_custom_kind_is_refused(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    """The object is provably ours, but the entry names it in a namespace its kind
    does not have: refused by the scope the cluster serves the kind in, kept."""
    wl = workload_clients[1]
    forged = cluster_scoped_ours(wl)
    keep, drop = unique("keep"), unique("drop")
    doc = manifests(configmap_obj(keep), configmap_obj(drop))
    mgmt.create(source_configmap(namespace, "scoped", {"a": doc}))
    crs = crs_obj(namespace, "scoped", [("ConfigMap", "scoped")], {"scoped": "1"}, mode="Reconcile")
    crs["spec"]["deletionPolicy"] = "Delete"
    mgmt.create(crs)
    add_cluster(mgmt, workloads[1], namespace, "scoped1", {"scoped": "1"})
    wait_for(lambda: inventory_names(mgmt, namespace, "scoped1", "scoped") == sorted([keep, drop]))

    forge(mgmt, namespace, "scoped1", "scoped", [forged])
    source = mgmt.get("v1", "ConfigMap", "scoped", namespace)
    source["data"] = {"a": manifests(configmap_obj(keep))}
    mgmt.update(source)

    # The positive sign: the binding is written after the pruning finished.
    wait_for(lambda: inventory_names(mgmt, namespace, "scoped1", "scoped") == [keep], TIMEOUT)
    assert wl.get("v1", "ConfigMap", drop, "default") is None
    assert wl.get(forged["apiVersion"], "Gizmo", forged["name"]) is not None
    why = "namespace set on a cluster-scoped kind"
    refused = f"Gizmo kube-system/{forged['name']} ({why})"
    wait_for(lambda: refused in refusal_events(mgmt, namespace), TIMEOUT)
    records = log_records(controller, "deletion refused")
    assert any(r.get("reason") == why and forged["name"] in str(r.get("object")) for r in records)


KIND = "ClusterResourceSet"
ADMISSION = Path(__file__).resolve().parents[3] / "config" / "admission"
POLICIES = tuple(
    ADMISSION / name
    for name in ("binding_writers.yaml", "snapshot_writers.yaml", "controller_writes.yaml")
)
REFUSED = "only the crs-controller ServiceAccount may create or update"
TENANT = "tenant-alice"


def binding_obj(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": CRS_API,
        "kind": "ClusterResourceSetBinding",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterName": name, "bindings": []},
    }


def try_create(client: TestbedClient, obj: dict[str, Any], *, dry_run: bool) -> httpx.Response:
    path = client.path(obj["apiVersion"], obj["kind"], namespace=obj["metadata"]["namespace"])
    params = {"dryRun": "All"} if dry_run else {}
    return client.http.post(path, params=params, json=obj)


def tenant_rbac(mgmt: TestbedClient) -> list[dict[str, Any]]:
    """A tenant allowed by RBAC to write bindings (everywhere, for brevity): what
    stops it must be the policy."""
    rbac = "rbac.authorization.k8s.io"
    role = {
        "apiVersion": f"{rbac}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "test-binding-writer"},
        "rules": [
            {
                "apiGroups": ["addons.crs.dev"],
                "resources": ["clusterresourcesetbindings"],
                "verbs": ["get", "list", "create", "update", "patch", "delete"],
            },
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "verbs": ["get", "list", "create", "update", "delete", "deletecollection"],
            },
        ],
    }
    grant = {
        "apiVersion": f"{rbac}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "test-binding-writer"},
        "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": "test-binding-writer"},
        "subjects": [{"apiGroup": rbac, "kind": "User", "name": TENANT}],
    }
    for obj in (role, grant):
        mgmt.apply(obj)
    return [grant, role]


@pytest.fixture
def tenant(mgmt: TestbedClient, control_plane: ControlPlane) -> Iterator[TestbedClient]:
    rbac = tenant_rbac(mgmt)
    with TestbedClient(control_plane.management.kubeconfig(TENANT, ())) as client:
        yield client
    for obj in rbac:
        mgmt.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])


@pytest.fixture
def binding_policy(mgmt: TestbedClient, tenant: TestbedClient) -> Iterator[None]:
    """The shipped policy, for this test only: installed, and removed after. Policies
    take a moment to load and to go, so each step waits until a tenant's dry-run
    create shows it. (Other tests write forged bindings as admin, in system:masters,
    which the policy leaves alone anyway.) Its parameter is the controller's
    ClusterRoleBinding (config/rbac), installed here too: without it every binding
    write is refused for the missing parameter, not with the policy's message."""
    install_rbac(mgmt)
    documents = [d for path in POLICIES for d in yaml.safe_load_all(path.read_text()) if d]
    probe = binding_obj("default", "policy-probe")
    for document in documents:
        mgmt.apply(document)
    try:
        wait_for(lambda: REFUSED in try_create(tenant, probe, dry_run=True).text, TIMEOUT)
        yield
    finally:
        for document in reversed(documents):
            mgmt.delete(document["apiVersion"], document["kind"], document["metadata"]["name"])
        wait_for(lambda: try_create(tenant, probe, dry_run=True).status_code == 201, TIMEOUT)


def test_only_the_controller_writes_bindings_under_the_shipped_policy(
    binding_policy: None,
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    tenant: TestbedClient,
    workload_clients,
    workloads,
    namespace: str,
) -> None:
    # The controller, as its ServiceAccount with the shipped RBAC, still writes the
    # binding of a new Cluster.
    addon = unique("addon")
    mgmt.create(source_configmap(namespace, "addon", {"a": manifests(configmap_obj(addon))}))
    mgmt.create(crs_obj(namespace, "pol", [("ConfigMap", "addon")], {"pol": "1"}))
    add_cluster(mgmt, workloads[1], namespace, "pol1", {"pol": "1"})
    wait_for(lambda: inventory_names(mgmt, namespace, "pol1", "pol") == [addon], TIMEOUT)

    # A tenant whose RBAC allows it can neither create a binding nor forge one.
    refused = try_create(tenant, binding_obj(namespace, "forged"), dry_run=False)
    assert refused.status_code == 403, refused.text
    assert REFUSED in refused.json()["message"]
    assert f"CREATE by {TENANT} refused" in refused.json()["message"]
    live = tenant.get(CRS_API, "ClusterResourceSetBinding", "pol1", namespace)
    assert live is not None
    live["spec"]["bindings"][0]["resources"][0]["objects"].append(
        {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "kube-system", "name": "x"}
    )
    with pytest.raises(KubeError) as forged:
        tenant.update(live)
    assert forged.value.status == 403 and REFUSED in forged.value.message
    assert inventory_names(mgmt, namespace, "pol1", "pol") == [addon]

    # Nor write a revision snapshot (the content a rollback applies); any other
    # ConfigMap it may write.
    snapshot = configmap_obj(unique("snap"), namespace, a="1")
    snapshot["metadata"]["labels"] = {"addons.crs.dev/snapshot-of": "some-uid"}
    refused = try_create(tenant, snapshot, dry_run=False)
    assert refused.status_code == 403, refused.text
    assert "may write or delete revision snapshots" in refused.json()["message"]
    plain = tenant.create(configmap_obj(unique("plain"), namespace, a="1"))
    plain["metadata"]["labels"] = {"addons.crs.dev/snapshot-of": "some-uid"}
    with pytest.raises(KubeError) as labelled:
        tenant.update(plain)
    assert labelled.value.status == 403

    # The controller's identity may create one directly; deleting stays open to all.
    with TestbedClient(control_plane.management.kubeconfig(SA_USER, SA_GROUPS)) as sa:
        created = sa.create(binding_obj(namespace, "by-controller"))
    assert created["metadata"]["name"] == "by-controller"
    tenant.delete(CRS_API, "ClusterResourceSetBinding", "by-controller", namespace)
    assert mgmt.get(CRS_API, "ClusterResourceSetBinding", "by-controller", namespace) is None


def test_the_controller_writes_no_configmap_or_secret_but_snapshots(
    binding_policy: None, control_plane: ControlPlane, mgmt: TestbedClient, namespace: str
) -> None:
    # Its RBAC lets the controller create and delete every ConfigMap and Secret (for
    # snapshots); the shipped policy narrows that to objects labelled as snapshots.
    kubeconfig = mgmt.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": unique("kubeconfig"), "namespace": namespace},
            "stringData": {"value": "x"},
        }
    )
    plain = configmap_obj(unique("plain"), namespace, a="1")
    snapshot = configmap_obj(unique("snap"), namespace, a="1")
    snapshot["metadata"]["labels"] = {SNAPSHOT_LABEL: "some-uid"}
    with TestbedClient(control_plane.management.kubeconfig(SA_USER, SA_GROUPS)) as sa:
        wait_for(lambda: try_create(sa, plain, dry_run=True).status_code == 403, TIMEOUT)
        refused = try_create(sa, plain, dry_run=False)
        assert refused.status_code == 403, refused.text
        message = refused.json()["message"]
        assert "writes and deletes only revision snapshots" in message
        assert f"CREATE of configmaps {namespace}/{plain['metadata']['name']}" in message
        with pytest.raises(KubeError) as deleted:
            sa.delete("v1", "Secret", kubeconfig["metadata"]["name"], namespace)
        assert deleted.value.status == 403
        assert sa.create(snapshot)["metadata"]["labels"] == {SNAPSHOT_LABEL: "some-uid"}
        sa.delete("v1", "ConfigMap", snapshot["metadata"]["name"], namespace)
    assert mgmt.get("v1", "Secret", kubeconfig["metadata"]["name"], namespace) is not None
    assert mgmt.get("v1", "ConfigMap", plain["metadata"]["name"], namespace) is None
    assert mgmt.get("v1", "ConfigMap", snapshot["metadata"]["name"], namespace) is None


def snapshots_of(mgmt: TestbedClient, namespace: str, uid: str) -> list[str]:
    items = mgmt.list("v1", "ConfigMap", namespace, label_selector=f"{SNAPSHOT_LABEL}={uid}")
    return sorted(item["metadata"]["name"] for item in items)


def test_only_the_controller_deletes_snapshots_under_the_shipped_policy(
    binding_policy: None,
    controller: ControllerProcess,
    mgmt: TestbedClient,
    tenant: TestbedClient,
    workloads,
    namespace: str,
) -> None:
    addon = unique("addon")
    mgmt.create(source_configmap(namespace, "snp", {"a": manifests(configmap_obj(addon))}))
    crs = crs_obj(namespace, "snp", [("ConfigMap", "snp")], {"snp": "1"}, mode="Reconcile")
    uid = mgmt.create(crs)["metadata"]["uid"]
    add_cluster(mgmt, workloads[1], namespace, "snp1", {"snp": "1"})
    # The controller writes the revision's snapshot under the policy.
    kept = wait_for(lambda: snapshots_of(mgmt, namespace, uid), TIMEOUT)

    # A tenant whose RBAC allows deleting ConfigMaps can delete none of it: one by
    # name, or all of them by label.
    path = tenant.path("v1", "ConfigMap", kept[0], namespace)
    refused = tenant.http.delete(path)
    assert refused.status_code == 403, refused.text
    assert "may write or delete revision snapshots" in refused.json()["message"]
    assert f"DELETE by {TENANT} refused" in refused.json()["message"]
    every = tenant.path("v1", "ConfigMap", namespace=namespace)
    refused = tenant.http.delete(every, params={"labelSelector": f"{SNAPSHOT_LABEL}={uid}"})
    assert refused.status_code == 403, refused.text
    assert snapshots_of(mgmt, namespace, uid) == kept

    # The CRS's deletion still takes them: the controller deletes them first.
    mgmt.delete(CRS_API, KIND, "snp", namespace)
    wait_for(lambda: mgmt.get(CRS_API, KIND, "snp", namespace) is None, TIMEOUT)
    assert snapshots_of(mgmt, namespace, uid) == []


async def _delete_with_uid(
    workload: Server, namespace: str, name: str, uid: str | None, version: str | None = None
) -> bool:
    endpoint = workload_endpoint(workload.kubeconfig())
    client = ProductClient(endpoint, name="workload")
    try:
        return await client.delete(
            "v1", "ConfigMap", name, namespace, uid=uid, resource_version=version
        )
    finally:
        await client.close()


def test_a_delete_removes_only_the_object_that_was_proven_ours(
    control_plane: ControlPlane, workload_clients: list[TestbedClient]
) -> None:
    """The delete after the ownership check carries the object's uid: one recreated
    under the same name in between is not deleted."""
    workload, wl = control_plane.workloads[0], workload_clients[0]
    name = unique("recreated")
    first = wl.create(configmap_obj(name, "default", a="1"))
    wl.delete("v1", "ConfigMap", name, "default")
    wl.create(configmap_obj(name, "default", a="2"))
    with pytest.raises(Conflict):
        asyncio.run(_delete_with_uid(workload, "default", name, first["metadata"]["uid"]))
    live = wl.get("v1", "ConfigMap", name, "default")
    assert live is not None and live["data"] == {"a": "2"}
    assert asyncio.run(_delete_with_uid(workload, "default", name, live["metadata"]["uid"]))
    assert wl.get("v1", "ConfigMap", name, "default") is None


def test_a_delete_of_the_version_read_leaves_a_newer_one(
    control_plane: ControlPlane, workload_clients: list[TestbedClient]
) -> None:
    """With a resourceVersion, a delete removes only the version that was read (a
    binding another writer wrote since stays)."""
    workload, wl = control_plane.workloads[0], workload_clients[0]
    name = unique("rewritten")
    first = wl.create(configmap_obj(name, "default", a="1"))
    later = wl.update({**first, "data": {"a": "2"}})
    read = first["metadata"]["resourceVersion"]
    with pytest.raises(Conflict):
        asyncio.run(_delete_with_uid(workload, "default", name, None, read))
    live = wl.get("v1", "ConfigMap", name, "default")
    assert live is not None and live["data"] == {"a": "2"}
    version = later["metadata"]["resourceVersion"]
    assert asyncio.run(_delete_with_uid(workload, "default", name, None, version))
    assert wl.get("v1", "ConfigMap", name, "default") is None
