"""Drift detection on real servers: Generation catches spec edits and deleted
objects, and each correction counts in crs_drift_corrections_total on /metrics;
Content also catches edits that bump no generation (ConfigMap data); and server
defaulting is never mistaken for drift (no writes in a steady state)."""

from __future__ import annotations

import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.controller import SA_USER, ControllerProcess

from .support import (
    TIMEOUT,
    WORKLOAD_USER,
    add_cluster,
    audit_caught_up,
    binding_entry,
    configmap_obj,
    crs_obj,
    deployment,
    log_records,
    manifests,
    requests_by,
    source_configmap,
    unique,
    wait_condition,
    wait_object,
    writes_by,
)


def _drift_crs(mgmt: TestbedClient, namespace: str, name: str, mode: str, doc: str) -> None:
    mgmt.create(source_configmap(namespace, name, {"a": doc}))
    crs = crs_obj(namespace, name, [("ConfigMap", name)], {"drift": name}, mode="Reconcile")
    crs["spec"].update(driftDetection=mode, driftCheckInterval="10s")
    mgmt.create(crs)


def test_generation_drift_restores_an_edited_and_a_deleted_object(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    name = unique("gen")
    _drift_crs(mgmt, namespace, "gen", "Generation", manifests(deployment(name)))
    add_cluster(mgmt, workloads[1], namespace, "g1", {"drift": "gen"})
    wl = workload_clients[1]
    wait_object(wl, "apps/v1", "Deployment", name, "default")
    wait_condition(mgmt, namespace, "gen", "Ready", "True", "Applied")
    before = corrections(controller, namespace)

    wl.patch_merge("apps/v1", "Deployment", name, {"spec": {"replicas": 3}}, namespace="default")
    wait_object(wl, "apps/v1", "Deployment", name, "default", lambda d: d["spec"]["replicas"] == 1)
    # Counted as the pass that corrected it ends, a moment after its apply.
    wait_for(lambda: corrections(controller, namespace) >= before + 1, TIMEOUT)
    wl.delete("apps/v1", "Deployment", name, "default")
    wait_object(wl, "apps/v1", "Deployment", name, "default")
    wait_for(lambda: events_with(mgmt, namespace, "DriftCorrected"), TIMEOUT)
    wait_for(lambda: corrections(controller, namespace) >= before + 2, TIMEOUT)


def corrections(controller: ControllerProcess, namespace: str) -> float:
    """The drift corrections the controller's /metrics counts for the CRSs of
    ``namespace`` (the test's own), also where the series bound put them (``_other``)."""
    text = httpx.get(controller.url("/metrics"), timeout=5).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "crs_drift_corrections_total"
        and sample.labels.get("namespace") in (namespace, "_other")
    )


def events_with(mgmt: TestbedClient, namespace: str, reason: str) -> list[dict]:
    return [e for e in mgmt.list("v1", "Event", namespace) if e["reason"] == reason]


def drift_checks(controller: ControllerProcess, crs: str, cluster: str) -> int:
    """Drift checks of ``crs`` ("ns/name") on ``cluster`` that found nothing to
    correct, from the controller's debug log: the positive sign that it looked."""
    records = log_records(controller, "drift checked")
    return sum(r["crs"] == crs and r["cluster"] == cluster and not r["drifted"] for r in records)


def reads(control_plane: ControlPlane, index: int, verb: str, resource: str, since: float) -> int:
    """``verb`` requests ("get", "list") for ``resource`` ("configmaps/x", or
    "configmaps/None" for a LIST) on workload ``index`` since ``since``."""
    found = requests_by([control_plane.workloads[index]], {WORKLOAD_USER}, since, {verb})
    return sum(r.endswith(" " + resource) for r in found)


def test_content_drift_catches_data_edits_that_generation_misses(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    workloads,
    namespace: str,
) -> None:
    by_content, by_generation = unique("content"), unique("genonly")
    _drift_crs(mgmt, namespace, "content", "Content", manifests(configmap_obj(by_content, v="1")))
    _drift_crs(
        mgmt, namespace, "genonly", "Generation", manifests(configmap_obj(by_generation, v="1"))
    )
    add_cluster(mgmt, workloads[2], namespace, "ct1", {"drift": "content"})
    add_cluster(mgmt, workloads[2], namespace, "ct2", {"drift": "genonly"})
    wl = workload_clients[2]
    for name in (by_content, by_generation):
        wait_object(wl, "v1", "ConfigMap", name, "default")
    edited_at = time.time()
    for name in (by_content, by_generation):
        wl.patch_merge("v1", "ConfigMap", name, {"data": {"v": "edited"}}, namespace="default")

    wait_object(wl, "v1", "ConfigMap", by_content, "default", lambda c: c["data"]["v"] == "1")
    # Generation's checks ran since the edit and saw no drift: a ConfigMap's data
    # bumps no generation.
    before = drift_checks(controller, f"{namespace}/genonly", "ct2")
    wait_for(lambda: drift_checks(controller, f"{namespace}/genonly", "ct2") >= before + 2, TIMEOUT)
    assert wl.get("v1", "ConfigMap", by_generation, "default")["data"]["v"] == "edited"
    wait_for(lambda: reads(control_plane, 2, "list", "configmaps/None", edited_at) >= 2, TIMEOUT)


def test_content_drift_has_no_false_positives_from_server_defaults(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    workloads,
    namespace: str,
) -> None:
    name = unique("defaults")
    _drift_crs(mgmt, namespace, "defaults", "Content", manifests(deployment(name)))
    add_cluster(mgmt, workloads[0], namespace, "d1", {"drift": "defaults"})
    wait_object(workload_clients[0], "apps/v1", "Deployment", name, "default")
    wait_condition(mgmt, namespace, "defaults", "Ready", "True", "Applied")
    wait_for(lambda: binding_entry(mgmt, namespace, "d1", "defaults"), TIMEOUT)
    # The apply has been told (its event is written a moment after the apply).
    wait_for(lambda: events_with(mgmt, namespace, "Applied"), TIMEOUT)
    since = time.time()
    # Three drift checks of a Deployment full of server-defaulted fields ran and
    # found nothing ...
    before = drift_checks(controller, f"{namespace}/defaults", "d1")
    wait_for(lambda: drift_checks(controller, f"{namespace}/defaults", "d1") >= before + 3, TIMEOUT)
    # ... wrote nothing, and read with one metadata-only LIST each, never a GET.
    audit_caught_up(control_plane.servers)
    assert writes_by(control_plane.servers, {SA_USER, WORKLOAD_USER}, since) == []
    wait_for(lambda: reads(control_plane, 0, "list", "deployments/None", since) >= 3, TIMEOUT)
    assert reads(control_plane, 0, "get", f"deployments/{name}", since) == 0
