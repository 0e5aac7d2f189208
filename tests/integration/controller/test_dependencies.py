"""dependsOn on real servers: an app waits (DependencyNotReady, no write of its objects)
until the CNI it depends on is applied and Ready there, then applies; a cycle and a
missing dependency are reported and apply nothing; a dependency whose spec the
controller refuses holds its dependent until it is fixed; a cluster leaving both has the
app's objects deleted before the CNI's."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from crs_controller.testbed import ControlPlane, TestbedClient, wait_for

from .support import (
    CLUSTER_API,
    CRS_API,
    TIMEOUT,
    add_cluster,
    audit_caught_up,
    available,
    configmap_obj,
    crs_obj,
    deployment,
    manifests,
    reconciles,
    source_configmap,
    unique,
    until_no_conflict,
    wait_condition,
    wait_object,
)

Obj = dict[str, Any]


def add(
    mgmt: TestbedClient,
    plane: ControlPlane,
    namespace: str,
    index: int,
    name: str,
    labels: dict[str, str],
) -> None:
    add_cluster(mgmt, plane.workloads[index], namespace, name, labels, user=f"deps-{name}")


def object_writes(
    plane: ControlPlane, user: str, since: float, verb: str
) -> list[tuple[float, str]]:
    found = []
    for server in plane.workloads:
        for event in server.audit_events():
            if event["user"]["username"] != user or event["verb"] != verb:
                continue
            stamp = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
            if stamp.timestamp() >= since:
                ref = event.get("objectRef", {})
                found.append((stamp.timestamp(), f"{ref.get('resource')}/{ref.get('name')}"))
    return sorted(found)


def test_an_app_waits_for_its_cni_to_be_ready(
    controller: Any,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    namespace: str,
) -> None:
    cni, app = unique("cni"), unique("app")
    mgmt.create(source_configmap(namespace, "cni", {"a": manifests(deployment(cni))}))
    mgmt.create(source_configmap(namespace, "app", {"a": manifests(configmap_obj(app))}))
    cni_crs = crs_obj(namespace, "cni", [("ConfigMap", "cni")], {"chain": "1"}, mode="Reconcile")
    cni_crs["spec"]["healthCheck"] = {"wait": True, "timeout": "5m"}
    app_crs = crs_obj(namespace, "app", [("ConfigMap", "app")], {"chain": "1"}, mode="Reconcile")
    app_crs["spec"]["dependsOn"] = [{"name": "cni"}]
    mgmt.create(cni_crs)
    mgmt.create(app_crs)
    started = time.time()
    add(mgmt, control_plane, namespace, 0, "c1", {"chain": "1"})
    wl = workload_clients[0]
    live = wait_object(wl, "apps/v1", "Deployment", cni, "default")
    cond = wait_condition(mgmt, namespace, "app", "Ready", "False", "DependencyNotReady")
    assert "cni" in cond["message"] and "c1" in cond["message"], cond["message"]
    # The controller has looked at the cluster since, and still wrote nothing of the app's.
    key = f"{namespace}/c1"
    before = reconciles(controller, "cluster", key)
    wait_for(lambda: reconciles(controller, "cluster", key) > before, TIMEOUT)
    audit_caught_up(control_plane.workloads)
    assert all(
        app not in what for _, what in object_writes(control_plane, "deps-c1", started, "patch")
    )

    live["status"] = available(live)
    wl.update_status(live)
    wait_object(wl, "v1", "ConfigMap", app, "default")
    wait_condition(mgmt, namespace, "app", "Ready", "True", "Applied")


def test_a_cycle_and_a_missing_dependency_apply_nothing(
    controller: Any,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    namespace: str,
) -> None:
    names = {n: unique(n) for n in ("a", "b", "lonely")}
    for crs_name, object_name in names.items():
        mgmt.create(
            source_configmap(namespace, crs_name, {"a": manifests(configmap_obj(object_name))})
        )
        crs = crs_obj(
            namespace, crs_name, [("ConfigMap", crs_name)], {"cyc": "1"}, mode="Reconcile"
        )
        depends = {"a": "b", "b": "a", "lonely": "ghost"}[crs_name]
        crs["spec"]["dependsOn"] = [{"name": depends}]
        mgmt.create(crs)
    add(mgmt, control_plane, namespace, 1, "y1", {"cyc": "1"})
    for crs_name in ("a", "b"):
        cond = wait_condition(mgmt, namespace, crs_name, "Ready", "False", "DependencyCycle")
        assert "a -> b -> a" in cond["message"], cond["message"]
    cond = wait_condition(mgmt, namespace, "lonely", "Ready", "False", "DependencyNotFound")
    assert "ghost" in cond["message"]
    for object_name in names.values():
        assert workload_clients[1].get("v1", "ConfigMap", object_name, "default") is None


def test_a_dependency_the_controller_refuses_holds_its_dependent(
    controller: Any,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    namespace: str,
) -> None:
    """The API server takes any kubernetesVersions text, the controller no range it
    cannot read: the app waits for that CNI, naming it as invalid, and goes once its
    spec is fixed."""
    cni, app = unique("bad-cni"), unique("held-app")
    mgmt.create(source_configmap(namespace, "base", {"a": manifests(configmap_obj(cni))}))
    mgmt.create(source_configmap(namespace, "held", {"a": manifests(configmap_obj(app))}))
    base = crs_obj(namespace, "base", [("ConfigMap", "base")], {"inv": "1"}, mode="Reconcile")
    base["spec"]["resources"][0]["kubernetesVersions"] = "not a range"
    held = crs_obj(namespace, "held", [("ConfigMap", "held")], {"inv": "1"}, mode="Reconcile")
    held["spec"]["dependsOn"] = [{"name": "base"}]
    mgmt.create(base)
    mgmt.create(held)
    add(mgmt, control_plane, namespace, 1, "v1", {"inv": "1"})
    wait_condition(mgmt, namespace, "base", "Ready", "False", "InvalidSpec")
    cond = wait_condition(mgmt, namespace, "held", "Ready", "False", "DependencyNotReady")
    assert "base" in cond["message"] and "invalid" in cond["message"], cond["message"]
    assert workload_clients[1].get("v1", "ConfigMap", app, "default") is None

    def fix() -> None:
        current = mgmt.get(CRS_API, "ClusterResourceSet", "base", namespace)
        assert current is not None
        del current["spec"]["resources"][0]["kubernetesVersions"]
        mgmt.update(current)

    until_no_conflict(fix)
    wait_object(workload_clients[1], "v1", "ConfigMap", app, "default")
    wait_condition(mgmt, namespace, "held", "Ready", "True", "Applied")


def test_leaving_both_deletes_the_app_before_the_cni(
    controller: Any,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    namespace: str,
) -> None:
    cni, app = unique("net"), unique("web")
    mgmt.create(source_configmap(namespace, "net", {"a": manifests(configmap_obj(cni))}))
    mgmt.create(source_configmap(namespace, "web", {"a": manifests(configmap_obj(app))}))
    for crs_name, deps in (("net", []), ("web", [{"name": "net"}])):
        crs = crs_obj(
            namespace, crs_name, [("ConfigMap", crs_name)], {"pair": "1"}, mode="Reconcile"
        )
        crs["spec"]["deletionPolicy"] = "Delete"
        crs["spec"]["dependsOn"] = deps
        mgmt.create(crs)
    add(mgmt, control_plane, namespace, 2, "z1", {"pair": "1"})
    wl = workload_clients[2]
    wait_object(wl, "v1", "ConfigMap", app, "default")
    wait_condition(mgmt, namespace, "web", "Ready", "True", "Applied")

    left = time.time()
    mgmt.patch_merge(
        CLUSTER_API, "Cluster", "z1", {"metadata": {"labels": {"pair": "0"}}}, namespace=namespace
    )
    wait_for(lambda: wl.get("v1", "ConfigMap", cni, "default") is None, TIMEOUT)
    assert wl.get("v1", "ConfigMap", app, "default") is None
    deletes = wait_for(
        lambda: (
            (d := object_writes(control_plane, "deps-z1", left, "delete")) and len(d) == 2 and d
        ),
        TIMEOUT,
    )
    assert [what for _, what in deletes] == [f"configmaps/{app}", f"configmaps/{cni}"], deletes
