"""Every metric config/monitoring's alerts and Grafana dashboard read is served by the
running controller with the labels they use. The expressions are parsed
(tests/unit/promql.py), not listed by hand; the labels Prometheus adds when it scrapes
(``job``, ``instance``) are not the controller's to serve. A CRS with a rollout on one
Cluster brings the per-CRS families (fleet, rollout, drift) into being."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess
from tests.unit.promql import all_needs, dashboard_expressions, rule_expressions

from .support import (
    TIMEOUT,
    add_cluster,
    configmap_obj,
    crs_obj,
    manifests,
    source_configmap,
    unique,
    wait_condition,
)

MONITORING = Path(__file__).resolve().parents[3] / "config" / "monitoring"
TARGET_LABELS = {"job", "instance"}


def served(controller: ControllerProcess) -> dict[str, set[str]]:
    """Each sample name /metrics serves -> the label names its series carry."""
    text = httpx.get(controller.url("/metrics"), timeout=5).text
    found: dict[str, set[str]] = defaultdict(set)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name] |= set(sample.labels)
    return found


def wanted() -> dict[str, set[str]]:
    expressions = rule_expressions(MONITORING / "prometheusrule.yaml")
    expressions += dashboard_expressions(MONITORING / "dashboard.json")
    return {name: labels - TARGET_LABELS for name, labels in all_needs(expressions).items()}


def missing(controller: ControllerProcess) -> dict[str, set[str]]:
    """What the rules and the dashboard read that the scrape lacks: a metric absent
    (all its labels listed) or served without some label."""
    have = served(controller)
    return {
        name: labels - have.get(name, set())
        for name, labels in wanted().items()
        if name not in have or labels - have[name]
    }


def test_every_metric_the_alerts_and_dashboard_read_is_served(
    controller: ControllerProcess, control_plane: ControlPlane, mgmt: TestbedClient, namespace: str
) -> None:
    needed = wanted()
    # The queries read each kind of family: the check below is about all of them.
    assert {"crs_fleet_clusters", "workqueue_depth", "controller_runtime_reconcile_total"} <= set(
        needed
    )
    marker = unique("scraped")
    mgmt.create(source_configmap(namespace, "scraped", {"a": manifests(configmap_obj(marker))}))
    crs = crs_obj(
        namespace, "scraped", [("ConfigMap", "scraped")], {"scrape": namespace[-6:]}, "Reconcile"
    )
    crs["spec"]["rollout"] = {"steps": [{"clusterSelector": {"matchLabels": {"ring": "all"}}}]}
    mgmt.create(crs)
    add_cluster(
        mgmt,
        control_plane.workloads[0],
        namespace,
        "scraped-1",
        {"scrape": namespace[-6:], "ring": "all"},
    )
    wait_condition(mgmt, namespace, "scraped", "Ready", "True", "Applied")
    # The gauges are set as the status is computed: read until this CRS's show.

    def shown() -> bool:
        text = httpx.get(controller.url("/metrics"), timeout=5).text
        return _sample(text, "crs_fleet_clusters", namespace, "Ready") == 1.0

    wait_for(shown, TIMEOUT, message="the fleet gauges of the new CRS")
    assert missing(controller) == {}
    # The controller-runtime families count the work just done, under each controller.
    text = httpx.get(controller.url("/metrics"), timeout=5).text
    for controller_name in ("cluster", "clusterresourceset"):
        queue = {"name": controller_name, "controller": controller_name}
        assert _value(text, "workqueue_adds_total", queue) >= 1
        assert _value(text, "workqueue_work_duration_seconds_count", queue) >= 1
        done = {"controller": controller_name, "result": "success"}
        assert _value(text, "controller_runtime_reconcile_total", done) >= 1


def _value(text: str, name: str, labels: dict[str, str]) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    raise AssertionError(f"no {name}{labels} served")


def _sample(text: str, name: str, namespace: str, state: str) -> float | None:
    try:
        return _value(text, name, {"namespace": namespace, "crs": "scraped", "state": state})
    except AssertionError:
        return None
