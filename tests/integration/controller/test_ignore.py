"""Fields left to others (spec.ignore) on real servers: a Deployment's replicas, set
by an HPA-like manager through the scale subresource, survive Content drift checks
and a later apply of another change, which leaves replicas out so that our manager
no longer owns them; without the rule the same scale is drift, and corrected."""

from __future__ import annotations

import json

from crs_controller.testbed import TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    TIMEOUT,
    add_cluster,
    binding_entry,
    crs_obj,
    deployment,
    log_records,
    manifests,
    source_configmap,
    unique,
    wait_object,
)

MANAGER = "crs-controller"
REPLICAS_RULE = {"target": {"group": "apps", "kind": "Deployment"}, "paths": ["/spec/replicas"]}


def _crs(mgmt: TestbedClient, namespace: str, name: str, doc: str, **spec: object) -> None:
    mgmt.create(source_configmap(namespace, name, {"a": doc}))
    crs = crs_obj(namespace, name, [("ConfigMap", name)], {"ignore": name}, mode="Reconcile")
    crs["spec"].update(driftDetection="Content", driftCheckInterval="10s", **spec)
    mgmt.create(crs)


def _scale(wl: TestbedClient, name: str, replicas: int) -> None:
    """What an HPA does: the scale subresource, under a field manager of its own."""
    response = wl.http.request(
        "PATCH",
        wl.path("apps/v1", "Deployment", name, "default", "scale"),
        content=json.dumps({"spec": {"replicas": replicas}}),
        headers={"Content-Type": "application/merge-patch+json"},
        params={"fieldManager": "hpa-like"},
    )
    assert response.status_code == 200, response.text


def _clean_checks(controller: ControllerProcess, crs: str, cluster: str) -> int:
    """Drift checks that found nothing to correct: the positive sign it looked."""
    records = log_records(controller, "drift checked")
    return sum(r["crs"] == crs and r["cluster"] == cluster and not r["drifted"] for r in records)


def _we_own_replicas(live: dict) -> bool:  # type: ignore[type-arg]
    for entry in live["metadata"].get("managedFields") or []:
        if entry["manager"] == MANAGER and entry["operation"] == "Apply":
            return "f:replicas" in entry["fieldsV1"].get("f:spec", {})
    return False


def test_ignored_replicas_are_left_to_the_hpa(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    name = unique("scaled")
    _crs(mgmt, namespace, "ign", manifests(deployment(name, replicas=2)), ignore=[REPLICAS_RULE])
    add_cluster(mgmt, workloads[1], namespace, "i1", {"ignore": "ign"})
    wl = workload_clients[1]
    # Sent when created.
    wait_object(wl, "apps/v1", "Deployment", name, "default", lambda d: d["spec"]["replicas"] == 2)
    wait_for(lambda: binding_entry(mgmt, namespace, "i1", "ign"), TIMEOUT)

    _scale(wl, name, 5)
    before = _clean_checks(controller, f"{namespace}/ign", "i1")
    wait_for(lambda: _clean_checks(controller, f"{namespace}/ign", "i1") >= before + 2, TIMEOUT)
    assert wl.get("apps/v1", "Deployment", name, "default")["spec"]["replicas"] == 5

    # Another change is applied, without replicas: the HPA's value stays, and ours is
    # released.
    labelled = deployment(name, replicas=2)
    labelled["metadata"]["labels"] = {"tier": "web"}
    mgmt.patch_merge(
        "v1", "ConfigMap", "ign", {"data": {"a": manifests(labelled)}}, namespace=namespace
    )
    live = wait_object(
        wl,
        "apps/v1",
        "Deployment",
        name,
        "default",
        lambda d: d["metadata"].get("labels", {}).get("tier") == "web",
        TIMEOUT,
    )
    assert live["spec"]["replicas"] == 5
    assert not _we_own_replicas(live)
    before = _clean_checks(controller, f"{namespace}/ign", "i1")
    wait_for(lambda: _clean_checks(controller, f"{namespace}/ign", "i1") >= before + 2, TIMEOUT)
    assert wl.get("apps/v1", "Deployment", name, "default")["spec"]["replicas"] == 5


def test_without_the_rule_a_scale_is_drift_and_corrected(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    name = unique("pinned")
    _crs(mgmt, namespace, "pin", manifests(deployment(name, replicas=2)))
    add_cluster(mgmt, workloads[1], namespace, "p1", {"ignore": "pin"})
    wl = workload_clients[1]
    wait_object(wl, "apps/v1", "Deployment", name, "default", lambda d: d["spec"]["replicas"] == 2)
    wait_for(lambda: binding_entry(mgmt, namespace, "p1", "pin"), TIMEOUT)

    _scale(wl, name, 5)
    live = wait_object(
        wl, "apps/v1", "Deployment", name, "default", lambda d: d["spec"]["replicas"] == 2, TIMEOUT
    )
    assert _we_own_replicas(live)
