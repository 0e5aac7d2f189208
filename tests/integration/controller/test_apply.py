"""The controller on real API servers: ApplyOnce and Reconcile modes, bindings,
status reasons, selectors, late resources, deletion of CRSs and Clusters, a kind whose
CRD came back in another scope since the controller discovered it."""

from __future__ import annotations

import base64
import contextlib
import socket
import threading
import time

import yaml

from crs_controller.testbed import KubeError, TestbedClient, wait_for
from crs_controller.testbed.clusters import set_cluster_initialized
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    CLUSTER_API,
    CRS_API,
    TIMEOUT,
    add_cluster,
    binding,
    binding_entry,
    configmap_obj,
    crs_obj,
    loose_crd,
    manifests,
    source_configmap,
    source_secret,
    unique,
    wait_condition,
    wait_object,
)


def test_several_resources_reach_a_matching_cluster(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    ns_name = unique("addon")
    cm_source = manifests(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns_name}},
        configmap_obj("settings", ns_name, mode="fast"),
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "agent", "namespace": ns_name},
        },
    )
    mgmt.create(source_configmap(namespace, "addon", {"addon.yaml": cm_source}))
    secret_doc = manifests(configmap_obj("from-secret", ns_name, token="not-a-real-secret"))
    mgmt.create(source_secret(namespace, "addon-secret", {"doc.yaml": secret_doc}))
    mgmt.create(
        crs_obj(
            namespace,
            "addons",
            [("ConfigMap", "addon"), ("Secret", "addon-secret")],
            {"env": "prod"},
        )
    )
    add_cluster(mgmt, workloads[0], namespace, "prod-1", {"env": "prod"})
    add_cluster(mgmt, workloads[1], namespace, "dev-1", {"env": "dev"})

    wl = workload_clients[0]
    wait_object(wl, "v1", "ServiceAccount", "agent", ns_name)
    assert wait_object(wl, "v1", "ConfigMap", "settings", ns_name)["data"] == {"mode": "fast"}
    applied = wait_object(wl, "v1", "ConfigMap", "from-secret", ns_name)
    managers = {m["manager"] for m in applied["metadata"]["managedFields"]}
    assert managers == {"crs-controller"}
    # The non-matching cluster got nothing.
    assert workload_clients[1].get("v1", "Namespace", ns_name) is None

    entry = wait_for(lambda: binding_entry(mgmt, namespace, "prod-1", "addons"), TIMEOUT)
    resources = {(r["kind"], r["name"]): r for r in entry["resources"]}
    assert set(resources) == {("ConfigMap", "addon"), ("Secret", "addon-secret")}
    assert all(r["applied"] and r["hash"].startswith("xxh3:") for r in resources.values())
    inventory = {
        (o["kind"], o.get("namespace"), o["name"])
        for o in resources[("ConfigMap", "addon")]["objects"]
    }
    assert inventory == {
        ("Namespace", None, ns_name),
        ("ConfigMap", ns_name, "settings"),
        ("ServiceAccount", ns_name, "agent"),
    }
    # The binding holds no content and no secret data.
    assert "not-a-real-secret" not in str(binding(mgmt, namespace, "prod-1"))
    assert binding(mgmt, namespace, "dev-1") is None

    wait_condition(mgmt, namespace, "addons", "Ready", "True", "Applied")
    status = mgmt.get(CRS_API, "ClusterResourceSet", "addons", namespace)["status"]
    assert (status["matchingClusters"], status["appliedClusters"], status["failedClusters"]) == (
        1,
        1,
        0,
    )


def test_cluster_relabelled_to_match_gets_the_resources(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    name = unique("late")
    mgmt.create(source_configmap(namespace, "late", {"a": manifests(configmap_obj(name))}))
    mgmt.create(crs_obj(namespace, "late", [("ConfigMap", "late")], {"cni": "late"}))
    add_cluster(mgmt, workloads[1], namespace, "c1", {"cni": "other"})
    wait_condition(mgmt, namespace, "late", "Ready", "True", "NoMatchingClusters")
    assert workload_clients[1].get("v1", "ConfigMap", name, "default") is None

    patch = {"metadata": {"labels": {"cni": "late"}}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", "c1", patch, namespace=namespace)
    wait_object(workload_clients[1], "v1", "ConfigMap", name, "default")
    wait_condition(mgmt, namespace, "late", "Ready", "True", "Applied")


def test_resource_created_after_the_crs_is_picked_up(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    name = unique("after")
    mgmt.create(crs_obj(namespace, "after", [("ConfigMap", "later")], {"x": "y"}))
    add_cluster(mgmt, workloads[2], namespace, "c2", {"x": "y"})
    cond = wait_condition(mgmt, namespace, "after", "ResourcesApplied", "False", "ResourceNotFound")
    assert "later" in cond["message"]

    mgmt.create(source_configmap(namespace, "later", {"a": manifests(configmap_obj(name))}))
    wait_object(workload_clients[2], "v1", "ConfigMap", name, "default")
    wait_condition(mgmt, namespace, "after", "Ready", "True", "Applied")


def test_reconcile_mode_updates_every_cluster_and_apply_once_does_not(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    rec, once = unique("rec"), unique("once")
    mgmt.create(source_configmap(namespace, "rec", {"a": manifests(configmap_obj(rec, v="1"))}))
    mgmt.create(source_configmap(namespace, "once", {"a": manifests(configmap_obj(once, v="1"))}))
    mgmt.create(crs_obj(namespace, "rec", [("ConfigMap", "rec")], {"m": "x"}, mode="Reconcile"))
    mgmt.create(crs_obj(namespace, "once", [("ConfigMap", "once")], {"m": "x"}))
    for i, server in enumerate(workloads):
        add_cluster(mgmt, server, namespace, f"m{i}", {"m": "x"})
    for wl in workload_clients:
        wait_object(wl, "v1", "ConfigMap", rec, "default")
        wait_object(wl, "v1", "ConfigMap", once, "default")

    for name in ("rec", "once"):
        source = mgmt.get("v1", "ConfigMap", name, namespace)
        target = rec if name == "rec" else once
        source["data"] = {"a": manifests(configmap_obj(target, v="2"))}
        mgmt.update(source)
    for wl in workload_clients:
        wait_object(wl, "v1", "ConfigMap", rec, "default", lambda o: o["data"] == {"v": "2"})
    # Reconcile has reached every cluster; ApplyOnce must still hold the old content.
    wait_for(
        lambda: all(
            binding_entry(mgmt, namespace, f"m{i}", "rec")["resources"][0]["hash"]
            == binding_entry(mgmt, namespace, "m0", "rec")["resources"][0]["hash"]
            for i in range(3)
        ),
        TIMEOUT,
    )
    for wl in workload_clients:
        assert wl.get("v1", "ConfigMap", once, "default")["data"] == {"v": "1"}


def test_apply_once_leaves_a_pre_existing_object_untouched(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    name, fresh = unique("pre"), unique("fresh")
    wl = workload_clients[0]
    wl.create(configmap_obj(name, owner="me"))
    source = manifests(configmap_obj(name, owner="crs"), configmap_obj(fresh, owner="crs"))
    mgmt.create(source_configmap(namespace, "pre", {"a": source}))
    mgmt.create(crs_obj(namespace, "pre", [("ConfigMap", "pre")], {"p": "q"}))
    add_cluster(mgmt, workloads[0], namespace, "c3", {"p": "q"})

    wait_object(wl, "v1", "ConfigMap", fresh, "default")
    wait_condition(mgmt, namespace, "pre", "Ready", "True", "Applied")
    existing = wl.get("v1", "ConfigMap", name, "default")
    assert existing["data"] == {"owner": "me"}
    assert {m["manager"] for m in existing["metadata"]["managedFields"]} != {"crs-controller"}


def test_object_in_a_missing_namespace_fails_alone_then_succeeds(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    missing, ok = unique("missing"), unique("ok")
    source = manifests(configmap_obj("in-missing", missing), configmap_obj(ok))
    mgmt.create(source_configmap(namespace, "partial", {"a": source}))
    mgmt.create(
        crs_obj(namespace, "partial", [("ConfigMap", "partial")], {"n": "s"}, mode="Reconcile")
    )
    add_cluster(mgmt, workloads[1], namespace, "c4", {"n": "s"})
    wl = workload_clients[1]

    wait_object(wl, "v1", "ConfigMap", ok, "default")
    cond = wait_condition(mgmt, namespace, "partial", "Ready", "False", "ApplyFailed")
    assert missing in cond["message"]
    entry = binding_entry(mgmt, namespace, "c4", "partial")
    assert entry["resources"][0]["applied"] is False

    wl.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": missing}})
    wait_object(wl, "v1", "ConfigMap", "in-missing", missing, timeout=90)
    wait_condition(mgmt, namespace, "partial", "Ready", "True", "Applied")


def test_ten_crss_on_one_cluster_all_end_in_the_binding(
    controller: ControllerProcess, control_plane, mgmt: TestbedClient, workloads, namespace: str
) -> None:
    add_cluster(mgmt, workloads[2], namespace, "busy", {"busy": "yes"})
    names = [f"crs-{i}" for i in range(10)]
    # Another writer keeps changing the binding meanwhile: the controller's writes
    # then meet stale resourceVersions (409 Conflict) and must retry without losing
    # any CRS's entry, or the other writer's annotation.
    stop = threading.Event()

    def other_writer() -> None:
        with TestbedClient(control_plane.management) as client:
            n = 0
            while not stop.is_set():
                n += 1
                patch = {"metadata": {"annotations": {"example.com/touched": str(n)}}}
                with contextlib.suppress(KubeError):
                    client.patch_merge(
                        CRS_API, "ClusterResourceSetBinding", "busy", patch, namespace=namespace
                    )
                time.sleep(0.02)

    writer = threading.Thread(target=other_writer)
    writer.start()
    try:
        for name in names:
            doc = manifests(configmap_obj(unique(name)))
            mgmt.create(source_configmap(namespace, name, {"a": doc}))
            mgmt.create(crs_obj(namespace, name, [("ConfigMap", name)], {"busy": "yes"}))

        def all_there() -> bool:
            found = binding(mgmt, namespace, "busy") or {}
            entries = found.get("spec", {}).get("bindings", [])
            return sorted(e["clusterResourceSetName"] for e in entries) == names

        wait_for(all_there, TIMEOUT)
    finally:
        stop.set()
        writer.join()
    final = binding(mgmt, namespace, "busy")
    owners = final["metadata"]["ownerReferences"]
    assert sorted(o["name"] for o in owners if o["kind"] == "ClusterResourceSet") == names
    assert [o["name"] for o in owners if o["kind"] == "Cluster"] == ["busy"]
    assert "example.com/touched" in final["metadata"]["annotations"]
    for entry in final["spec"]["bindings"]:
        assert entry["resources"][0]["applied"] is True


def test_secret_of_the_wrong_type_is_refused(
    controller: ControllerProcess, mgmt: TestbedClient, workloads, namespace: str
) -> None:
    mgmt.create(
        source_secret(namespace, "opaque", {"a": manifests(configmap_obj("x"))}, type_="Opaque")
    )
    mgmt.create(crs_obj(namespace, "typed", [("Secret", "opaque")], {"t": "t"}))
    add_cluster(mgmt, workloads[0], namespace, "c5", {"t": "t"})
    cond = wait_condition(mgmt, namespace, "typed", "Ready", "False", "WrongSecretType")
    assert "Opaque" in cond["message"]


def test_deleting_a_crs_removes_its_binding_entries(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    keep, drop = unique("keep"), unique("drop")
    mgmt.create(source_configmap(namespace, "keep", {"a": manifests(configmap_obj(keep))}))
    mgmt.create(source_configmap(namespace, "drop", {"a": manifests(configmap_obj(drop))}))
    mgmt.create(crs_obj(namespace, "keep", [("ConfigMap", "keep")], {"d": "e"}))
    mgmt.create(crs_obj(namespace, "drop", [("ConfigMap", "drop")], {"d": "e"}))
    add_cluster(mgmt, workloads[1], namespace, "c6", {"d": "e"})
    wait_for(lambda: binding_entry(mgmt, namespace, "c6", "drop"), TIMEOUT)
    wait_for(lambda: binding_entry(mgmt, namespace, "c6", "keep"), TIMEOUT)
    crs = mgmt.get(CRS_API, "ClusterResourceSet", "drop", namespace)
    assert "addons.crs.dev/finalizer" in crs["metadata"]["finalizers"]

    mgmt.delete(CRS_API, "ClusterResourceSet", "drop", namespace)
    wait_for(lambda: mgmt.get(CRS_API, "ClusterResourceSet", "drop", namespace) is None, TIMEOUT)
    assert binding_entry(mgmt, namespace, "c6", "drop") is None
    assert binding_entry(mgmt, namespace, "c6", "keep") is not None
    owners = binding(mgmt, namespace, "c6")["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"]) for o in owners] == [
        ("Cluster", "c6"),
        ("ClusterResourceSet", "keep"),
    ]
    # Orphan: what was applied stays on the workload cluster.
    assert workload_clients[1].get("v1", "ConfigMap", drop, "default") is not None


def test_deleting_a_cluster_removes_its_binding(
    controller: ControllerProcess, mgmt: TestbedClient, workloads, namespace: str
) -> None:
    mgmt.create(source_configmap(namespace, "gone", {"a": manifests(configmap_obj(unique("g")))}))
    mgmt.create(crs_obj(namespace, "gone", [("ConfigMap", "gone")], {"g": "h"}))
    add_cluster(mgmt, workloads[2], namespace, "c7", {"g": "h"})
    wait_for(lambda: binding(mgmt, namespace, "c7"), TIMEOUT)

    mgmt.delete(CLUSTER_API, "Cluster", "c7", namespace)
    wait_for(lambda: binding(mgmt, namespace, "c7") is None, TIMEOUT)
    wait_condition(mgmt, namespace, "gone", "Ready", "True", "NoMatchingClusters")


def test_secret_contents_never_reach_status_or_logs(
    controller: ControllerProcess, mgmt: TestbedClient, workloads, namespace: str
) -> None:
    marker = "s3cr3t-" + unique("v")
    broken = f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: [{marker}\n"
    mgmt.create(source_secret(namespace, "broken", {"a": broken}))
    mgmt.create(crs_obj(namespace, "broken", [("Secret", "broken")], {"b": "c"}))
    add_cluster(mgmt, workloads[0], namespace, "c8", {"b": "c"})
    cond = wait_condition(mgmt, namespace, "broken", "Ready", "False", "InvalidManifest")
    assert marker not in str(mgmt.get(CRS_API, "ClusterResourceSet", "broken", namespace))
    assert marker not in cond["message"]
    # Told a moment after the status: wait for the Event before reading it.
    events = wait_for(
        lambda: [
            e for e in mgmt.list("v1", "Event", namespace) if e["reason"] == "InvalidManifest"
        ],
        TIMEOUT,
        message="the InvalidManifest Event",
    )
    assert marker not in str(events)
    assert marker not in controller.log_text()
    assert base64.b64encode(marker.encode()).decode() not in controller.log_text()


def test_unreachable_cluster_fails_alone_and_recovers_when_its_kubeconfig_changes(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    name = unique("reach")
    mgmt.create(source_configmap(namespace, "reach", {"a": manifests(configmap_obj(name))}))
    mgmt.create(crs_obj(namespace, "reach", [("ConfigMap", "reach")], {"r": "s"}))
    # Registered uninitialized (not contacted yet), so the broken kubeconfig is in
    # place before the controller first talks to it.
    add_cluster(mgmt, workloads[0], namespace, "dead", {"r": "s"}, initialized=False)
    secret = mgmt.get("v1", "Secret", "dead-kubeconfig", namespace)
    good_value = secret["data"]["value"]
    config = yaml.safe_load(base64.b64decode(good_value))
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{closed}"
    secret["data"]["value"] = base64.b64encode(yaml.safe_dump(config).encode()).decode()
    mgmt.update(secret)
    set_cluster_initialized(mgmt, name="dead", namespace=namespace)
    add_cluster(mgmt, workloads[1], namespace, "alive", {"r": "s"})

    # The reachable cluster is served; the other one is reported, not waited for.
    wait_object(workload_clients[1], "v1", "ConfigMap", name, "default")
    cond = wait_condition(mgmt, namespace, "reach", "Ready", "False", "ClusterUnreachable")
    assert "dead" in cond["message"]
    assert "PRIVATE KEY" not in cond["message"]

    def counts() -> tuple[int, int]:
        status = mgmt.get(CRS_API, "ClusterResourceSet", "reach", namespace)["status"]
        return status["appliedClusters"], status["failedClusters"]

    wait_for(lambda: counts() == (1, 1), TIMEOUT)

    secret = mgmt.get("v1", "Secret", "dead-kubeconfig", namespace)
    secret["data"]["value"] = good_value
    mgmt.update(secret)
    wait_object(workload_clients[0], "v1", "ConfigMap", name, "default")
    wait_condition(mgmt, namespace, "reach", "Ready", "True", "Applied")


def test_reapply_interval_restores_a_deleted_object_without_a_change(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    name = unique("interval")
    mgmt.create(source_configmap(namespace, "iv", {"a": manifests(configmap_obj(name))}))
    crs = crs_obj(namespace, "iv", [("ConfigMap", "iv")], {"iv": "1"}, mode="Reconcile")
    crs["spec"]["reapplyInterval"] = "10s"  # the shortest the API takes
    mgmt.create(crs)
    add_cluster(mgmt, workloads[0], namespace, "iv1", {"iv": "1"})
    wl = workload_clients[0]
    wait_object(wl, "v1", "ConfigMap", name, "default")
    first = wait_for(lambda: binding_entry(mgmt, namespace, "iv1", "iv"), TIMEOUT)["resources"][0]

    wl.delete("v1", "ConfigMap", name, "default")
    wait_object(wl, "v1", "ConfigMap", name, "default")
    again = binding_entry(mgmt, namespace, "iv1", "iv")["resources"][0]
    assert again["hash"] == first["hash"]
    assert again["lastAppliedTime"] >= first["lastAppliedTime"]
    # Interval reapplies write on purpose; stop them so that the steady-state tests
    # sharing this controller measure a quiet system.
    mgmt.delete(CRS_API, "ClusterResourceSet", "iv", namespace)
    wait_for(lambda: mgmt.get(CRS_API, "ClusterResourceSet", "iv", namespace) is None, TIMEOUT)


CRD_API = "apiextensions.k8s.io/v1"


def _established(crd: dict) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def _install(wl: TestbedClient, crd: dict) -> None:
    wl.create(crd)
    wait_object(
        wl, CRD_API, "CustomResourceDefinition", crd["metadata"]["name"], predicate=_established
    )


def test_a_kind_recreated_in_another_scope_is_applied_where_it_lives_now(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    """The controller discovered Widgets namespaced; their CRD comes back
    cluster-scoped. An apply through the path discovered before is a 404, which sends
    the controller to discovery again instead of failing on every retry."""
    wl, group = workload_clients[2], f"{unique('g')}.example.com"
    crd = loose_crd(group, "Widget")
    _install(wl, crd)
    meta = {"name": "w", "namespace": "default"}
    widget = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": meta, "spec": {"size": 1}}
    mgmt.create(source_configmap(namespace, "scope", {"a": manifests(widget)}))
    crs = crs_obj(namespace, "scope", [("ConfigMap", "scope")], {"scope": "1"}, mode="Reconcile")
    mgmt.create(crs)
    add_cluster(mgmt, workloads[2], namespace, "scope1", {"scope": "1"})
    wait_object(wl, f"{group}/v1", "Widget", "w", "default")

    wl.delete(CRD_API, "CustomResourceDefinition", crd["metadata"]["name"])
    wait_for(lambda: wl.get(CRD_API, "CustomResourceDefinition", crd["metadata"]["name"]) is None)
    _install(wl, {**crd, "spec": {**crd["spec"], "scope": "Cluster"}})
    source = mgmt.get("v1", "ConfigMap", "scope", namespace)
    source["data"] = {"a": manifests({**widget, "spec": {"size": 2}})}
    mgmt.update(source)

    def cluster_scoped() -> dict | None:
        response = wl.http.get(f"/apis/{group}/v1/widgets/w")  # this client's cache is stale too
        return response.json() if response.status_code == 200 else None

    live = wait_for(cluster_scoped, TIMEOUT)
    assert live["spec"] == {"size": 2} and "namespace" not in live["metadata"]
    wait_condition(mgmt, namespace, "scope", "Ready", "True", "Applied")
    entry = binding_entry(mgmt, namespace, "scope1", "scope")
    assert entry is not None
    assert [o.get("namespace") for o in entry["resources"][0]["objects"]] == [None]
    mgmt.delete(CRS_API, "ClusterResourceSet", "scope", namespace)
