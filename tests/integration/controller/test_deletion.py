"""deletionPolicy: Delete on real servers: objects leaving the ConfigMap, resources
leaving spec.resources, clusters that stop matching, and deleted CRSs take their
objects with them (custom resources before CRDs, namespaced objects before their
Namespace, which their resource's allowDelete lets go) — except objects another CRS
still wants; a custom resource recorded under a version its CRD serves no more is
deleted through the version served; a CRS deleted in the foreground (its bindings
owned by their Clusters too) still deletes what it applied."""

from __future__ import annotations

from crs_controller.testbed import ControlPlane, KubeError, TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    CLUSTER_API,
    CRS_API,
    TIMEOUT,
    WORKLOAD_USER,
    add_cluster,
    binding,
    binding_entry,
    configmap_obj,
    crs_obj,
    loose_crd,
    manifests,
    source_configmap,
    unique,
    until_no_conflict,
    wait_condition,
    wait_object,
)


def gone(client: TestbedClient, api_version: str, kind: str, name: str, ns: str | None = None):
    """Deleted, or (a Namespace, with no controller manager to finish) terminating."""

    def check() -> bool:
        obj = client.get(api_version, kind, name, ns)
        return obj is None or bool(obj["metadata"].get("deletionTimestamp"))

    return wait_for(check, TIMEOUT, message=f"{kind} {name} deleted")


def _crs(namespace: str, name: str, resources: list[str], selector: dict[str, str]) -> dict:
    crs = crs_obj(
        namespace, name, [("ConfigMap", r) for r in resources], selector, mode="Reconcile"
    )
    crs["spec"]["deletionPolicy"] = "Delete"
    return crs


def test_objects_leaving_the_desired_set_are_deleted(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    keep, drop, other = unique("keep"), unique("drop"), unique("other")
    mgmt.create(
        source_configmap(
            namespace, "main", {"a": manifests(configmap_obj(keep), configmap_obj(drop))}
        )
    )
    mgmt.create(source_configmap(namespace, "extra", {"a": manifests(configmap_obj(other))}))
    mgmt.create(_crs(namespace, "del", ["main", "extra"], {"del": "1"}))
    add_cluster(mgmt, workloads[0], namespace, "del1", {"del": "1"})
    wl = workload_clients[0]
    for name in (keep, drop, other):
        wait_object(wl, "v1", "ConfigMap", name, "default")

    # An object removed from its ConfigMap is deleted; the rest stays.
    source = mgmt.get("v1", "ConfigMap", "main", namespace)
    source["data"] = {"a": manifests(configmap_obj(keep))}
    mgmt.update(source)
    gone(wl, "v1", "ConfigMap", drop, "default")
    assert wl.get("v1", "ConfigMap", keep, "default") is not None

    # A resource removed from spec.resources takes its objects along.
    crs = mgmt.get(CRS_API, "ClusterResourceSet", "del", namespace)
    crs["spec"]["resources"] = [{"kind": "ConfigMap", "name": "main"}]
    mgmt.update(crs)
    gone(wl, "v1", "ConfigMap", other, "default")
    assert wl.get("v1", "ConfigMap", keep, "default") is not None
    wait_for(
        lambda: (
            [r["name"] for r in binding_entry(mgmt, namespace, "del1", "del")["resources"]]
            == ["main"]
        ),
        TIMEOUT,
    )

    # A cluster that stops matching loses everything the CRS put there.
    patch = {"metadata": {"labels": {"del": "no"}}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", "del1", patch, namespace=namespace)
    gone(wl, "v1", "ConfigMap", keep, "default")
    wait_condition(mgmt, namespace, "del", "Ready", "True", "NoMatchingClusters")


def test_deleting_a_crs_deletes_in_reverse_order_but_spares_shared_objects(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    workloads,
    namespace: str,
) -> None:
    group = f"{unique('g')}.example.com"
    ns_name, shared = unique("addon-ns"), unique("shared")
    crd = loose_crd(group, "Widget")
    widget = {
        "apiVersion": f"{group}/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": ns_name},
    }
    namespace_obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns_name}}
    doc = manifests(namespace_obj, crd, widget, configmap_obj(shared))
    mgmt.create(source_configmap(namespace, "full", {"a": doc}))
    mgmt.create(source_configmap(namespace, "shared", {"a": manifests(configmap_obj(shared))}))
    full = _crs(namespace, "full", ["full"], {"rev": "1"})
    full["spec"]["resources"][0]["allowDelete"] = ["CustomResourceDefinition", "Namespace"]
    mgmt.create(full)
    mgmt.create(crs_obj(namespace, "keeper", [("ConfigMap", "shared")], {"rev": "1"}))
    add_cluster(mgmt, workloads[1], namespace, "rev1", {"rev": "1"})
    wl = workload_clients[1]
    wait_condition(mgmt, namespace, "full", "Ready", "True", "Applied")
    assert wl.get(f"{group}/v1", "Widget", "w", ns_name) is not None
    wait_condition(mgmt, namespace, "keeper", "Ready", "True", "Applied")

    server = control_plane.workloads[1]
    before = len(server.audit_events())
    mgmt.delete(CRS_API, "ClusterResourceSet", "full", namespace)
    wait_for(lambda: mgmt.get(CRS_API, "ClusterResourceSet", "full", namespace) is None, TIMEOUT)
    gone(wl, "v1", "Namespace", ns_name)
    gone(wl, "apiextensions.k8s.io/v1", "CustomResourceDefinition", f"widgets.{group}")
    # Wanted by the other CRS: kept.
    assert wl.get("v1", "ConfigMap", shared, "default") is not None
    assert binding_entry(mgmt, namespace, "rev1", "full") is None

    def deletes() -> list[str]:
        return [
            e["objectRef"]["resource"]
            for e in server.audit_events()[before:]
            if e["verb"] == "delete" and e["user"]["username"] == WORKLOAD_USER
        ]

    # Audit events are written after the response: wait for all three.
    wait_for(lambda: len(deletes()) >= 3, TIMEOUT)
    assert deletes() == ["widgets", "customresourcedefinitions", "namespaces"]


def _owners(mgmt: TestbedClient, namespace: str, cluster: str) -> dict[str, list[str]]:
    """The binding's owner references: uids by kind."""
    refs = ((binding(mgmt, namespace, cluster) or {}).get("metadata") or {}).get(
        "ownerReferences"
    ) or []
    found: dict[str, list[str]] = {}
    for ref in refs:
        found.setdefault(ref["kind"], []).append(ref["uid"])
    return found


def _collect_as_in_the_foreground(mgmt: TestbedClient, namespace: str, cluster: str) -> None:
    """What the garbage collector does (no controller manager runs here) for a CRS
    deleted in the foreground: the binding keeps a live owner, its Cluster, so it only
    loses the CRS's owner reference; then the CRS's foregroundDeletion finalizer goes."""

    def drop_crs_owner() -> None:
        live = binding(mgmt, namespace, cluster)
        if live is not None:  # the controller may have cleaned up already
            refs = live["metadata"].get("ownerReferences") or []
            live["metadata"]["ownerReferences"] = [r for r in refs if r["kind"] == "Cluster"]
            try:
                mgmt.update(live)
            except KubeError as exc:  # or does so between the read and the write
                if exc.status != 404:
                    raise

    def release() -> None:
        live = mgmt.get(CRS_API, "ClusterResourceSet", "fg", namespace)
        if live is not None:
            kept = [f for f in live["metadata"]["finalizers"] if f != "foregroundDeletion"]
            live["metadata"]["finalizers"] = kept
            mgmt.update(live)

    until_no_conflict(drop_crs_owner)
    until_no_conflict(release)


def test_a_crs_deleted_in_the_foreground_deletes_what_it_applied(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    name = unique("fg")
    mgmt.create(source_configmap(namespace, "fg", {"a": manifests(configmap_obj(name))}))
    mgmt.create(_crs(namespace, "fg", ["fg"], {"fg": "1"}))
    cluster = add_cluster(mgmt, workloads[0], namespace, "fg1", {"fg": "1"})
    crs_uid = mgmt.get(CRS_API, "ClusterResourceSet", "fg", namespace)["metadata"]["uid"]
    wl = workload_clients[0]
    wait_object(wl, "v1", "ConfigMap", name, "default")
    # Owned by its Cluster, whose uid it records, as well as by the CRS: the garbage
    # collector deletes no binding while its Cluster lives.
    expected = {"Cluster": [cluster["metadata"]["uid"]], "ClusterResourceSet": [crs_uid]}
    wait_for(lambda: _owners(mgmt, namespace, "fg1") == expected, TIMEOUT)
    annotations = (binding(mgmt, namespace, "fg1") or {})["metadata"]["annotations"]
    assert annotations["addons.crs.dev/cluster-uid"] == cluster["metadata"]["uid"]

    # kubectl delete --cascade=foreground (Argo CD's default).
    path = mgmt.path(CRS_API, "ClusterResourceSet", "fg", namespace)
    deleted = mgmt.http.request("DELETE", path, json={"propagationPolicy": "Foreground"})
    assert deleted.status_code in (200, 202), deleted.text
    _collect_as_in_the_foreground(mgmt, namespace, "fg1")
    gone(wl, "v1", "ConfigMap", name, "default")
    wait_for(lambda: mgmt.get(CRS_API, "ClusterResourceSet", "fg", namespace) is None, TIMEOUT)
    assert binding_entry(mgmt, namespace, "fg1", "fg") is None


def _established(crd: dict) -> bool:
    # Just created, a CRD's status may say "conditions: null".
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def test_an_object_recorded_under_a_version_served_no_more_is_deleted(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    group, name = f"{unique('g')}.example.com", unique("w")
    crd = loose_crd(group, "Widget")
    # Served as v1alpha2 and v1 (stored), the way a CRD's versions move on.
    crd["spec"]["versions"].append({**crd["spec"]["versions"][0], "name": "v1alpha2"})
    crd["spec"]["versions"][1]["storage"] = False
    wl = workload_clients[0]
    wl.create(crd)
    wait_object(
        wl,
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        crd["metadata"]["name"],
        predicate=_established,
    )
    widget = {
        "apiVersion": f"{group}/v1alpha2",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "default"},
    }
    mgmt.create(source_configmap(namespace, "served", {"a": manifests(widget)}))
    mgmt.create(_crs(namespace, "served", ["served"], {"served": "1"}))
    add_cluster(mgmt, workloads[0], namespace, "served1", {"served": "1"})
    wait_condition(mgmt, namespace, "served", "Ready", "True", "Applied")

    # The CRD stops serving v1alpha2 (the inventory still says v1alpha2).
    live = wl.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd["metadata"]["name"])
    assert live is not None
    live["spec"]["versions"][1]["served"] = False
    wl.update(live)
    wait_for(lambda: wl.http.get(f"/apis/{group}/v1alpha2").status_code == 404, TIMEOUT)
    assert wl.get(f"{group}/v1", "Widget", name, "default") is not None

    mgmt.delete(CRS_API, "ClusterResourceSet", "served", namespace)
    wait_for(lambda: mgmt.get(CRS_API, "ClusterResourceSet", "served", namespace) is None, TIMEOUT)
    gone(wl, f"{group}/v1", "Widget", name, "default")
