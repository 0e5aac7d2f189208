"""config/monitoring against the real tools: promtool checks the PrometheusRule's
rules and runs tests/monitoring/alerts_test.yaml (every alert fires when it should,
not before); every alert names a runbook section docs/operations.md has and has a
test there that expects it and one that expects it not yet; the checked-in Grafana
dashboard is what hack/dashboard.py generates, and the kustomization ships it in a
ConfigMap the Grafana sidecar loads; the metrics Service selects the manager's pods
and names a port their container has, and kustomize builds the base; every metric
family the process registers has its row in docs/operations.md, with its type and
labels.

promtool comes from $PROMTOOL (hack/test.sh builds it from the Prometheus Go module
with hack/build-promtool.sh); without it the promtool tests skip, saying why. kustomize
is the one hack/kustomize.sh finds (on PATH, kubectl's, or the one it built and
cached); without one the build test skips, saying why, rather than building it.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase

import crs_controller
import crs_controller.engine.io.fleet_metrics
import crs_controller.engine.io.metrics  # (both register their families)
from tests.unit.promql import all_needs, dashboard_expressions, needs, rule_expressions
from tests.unit.test_docs_links import anchors

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "config" / "monitoring"
MANAGER = ROOT / "config" / "manager" / "manager.yaml"
KUSTOMIZE_VERSION = "v5.5.0"  # hack/kustomize.sh's
ALERT_TESTS = ROOT / "tests" / "monitoring" / "alerts_test.yaml"
OPERATIONS = ROOT / "docs" / "operations.md"


def rule_groups() -> list[dict[str, Any]]:
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule"
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def alerts() -> list[dict[str, Any]]:
    return [r for g in rule_groups() for r in g["rules"] if "alert" in r]


def promtool() -> str:
    path = os.environ.get("PROMTOOL")
    if not path or not os.access(path, os.X_OK):
        pytest.skip(
            "promtool not found: set PROMTOOL, or run hack/test.sh, which builds it "
            "from the Prometheus Go module (needs Go)"
        )
    return path


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    """The PrometheusRule's groups as a plain rules file, beside the alert tests."""
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups()}))
    shutil.copy(ALERT_TESTS, tmp_path / "alerts_test.yaml")
    return tmp_path


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_promtool_checks_the_rules(rules_dir: Path) -> None:
    done = run([promtool(), "check", "rules", "rules.yaml"], rules_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in done.stdout


def test_promtool_runs_the_alert_tests(rules_dir: Path) -> None:
    done = run([promtool(), "test", "rules", "alerts_test.yaml"], rules_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_fails_an_alert_test_that_expects_too_early(rules_dir: Path) -> None:
    """The tests can fail: an alert expected one evaluation before its `for` ends."""
    tests = yaml.safe_load(ALERT_TESTS.read_text())
    first = tests["tests"][0]["alert_rule_test"]
    first[1]["eval_time"] = first[0]["eval_time"]  # the firing expectation, too early
    (rules_dir / "alerts_test.yaml").write_text(yaml.safe_dump(tests))
    done = run([promtool(), "test", "rules", "alerts_test.yaml"], rules_dir)
    assert done.returncode != 0


def test_the_required_alerts_are_there() -> None:
    names = {a["alert"] for a in alerts()}
    assert names >= {
        "CRSRolloutHalted",
        "CRSRolloutAwaitingApproval",
        "CRSClustersFailing",
        "CRSDriftCorrectedRepeatedly",
        "CRSControllerNoLeader",
        "CRSControllerNotReconciling",
    }


def test_every_alert_names_a_runbook_section_that_exists() -> None:
    sections = anchors(OPERATIONS)
    for alert in alerts():
        url = alert["annotations"]["runbook_url"]
        page, _, anchor = url.partition("#")
        assert page == "docs/operations.md", alert["alert"]
        assert anchor in sections, f"{alert['alert']}: no section #{anchor}"


def test_every_alert_is_tested_firing_and_not_yet() -> None:
    cases = [
        c for t in yaml.safe_load(ALERT_TESTS.read_text())["tests"] for c in t["alert_rule_test"]
    ]
    for alert in alerts():
        mine = [c for c in cases if c["alertname"] == alert["alert"]]
        assert any(c["exp_alerts"] for c in mine), f"{alert['alert']} never expected to fire"
        assert any(not c["exp_alerts"] for c in mine), f"{alert['alert']} never expected quiet"


def test_the_checked_in_dashboard_is_the_scripts_output(tmp_path: Path) -> None:
    done = run([sys.executable, "hack/dashboard.py", "--check"], ROOT)
    assert done.returncode == 0, done.stderr
    # --check can fail: it compares with the file as it is.
    stale = tmp_path / "dashboard.json"
    stale.write_text("{}\n")
    done = run([sys.executable, "hack/dashboard.py", "--check", "--out", str(stale)], ROOT)
    assert done.returncode == 1
    assert "out of date" in done.stderr


def test_the_dashboard_ships_in_a_configmap_the_grafana_sidecar_loads() -> None:
    kustomization = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    (generated,) = kustomization["configMapGenerator"]
    assert generated["options"]["labels"]["grafana_dashboard"] == "1"
    assert generated["files"] == ["crs-controller.json=dashboard.json"]
    assert set(kustomization["resources"]) == {
        "service.yaml",
        "servicemonitor.yaml",
        "prometheusrule.yaml",
    }
    default = yaml.safe_load((ROOT / "config" / "default" / "kustomization.yaml").read_text())
    assert "../monitoring" not in default["resources"]  # needs the Prometheus Operator


def test_the_servicemonitor_scrapes_the_service_the_alerts_select() -> None:
    service = yaml.safe_load((MONITORING / "service.yaml").read_text())
    monitor = yaml.safe_load((MONITORING / "servicemonitor.yaml").read_text())
    labels = service["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert endpoint["honorLabels"] is True  # the CRS's namespace label stays namespace
    job = f'job="{service["metadata"]["name"]}"'
    shared = [a for a in alerts() if re.search(r"\b(workqueue_|controller_runtime_)", a["expr"])]
    assert shared
    for alert in shared:
        assert job in alert["expr"], alert["alert"]


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ('max by (namespace, crs) (x{phase="Halted"}) > 0', {"x": {"namespace", "crs", "phase"}}),
        ('(max(crs_leader{job="j"}) or vector(0)) < 1', {"crs_leader": {"job"}}),
        (
            'histogram_quantile(0.99, sum by (controller, le) (rate(t_bucket{job="j"}[5m])))',
            {"t_bucket": {"controller", "le", "job"}},
        ),
        (
            "sum by (i) (a) > 0 unless on (i, c) sum by (i) (rate(b[10m])) > 0",
            {"a": {"i", "c"}, "b": {"i", "c"}},
        ),
        ('sum(increase(c_total{state=~"a|b"}[1h])) / sum(d)', {"c_total": {"state"}, "d": set()}),
        ("topk(10, sum by (ns) (e))", {"e": {"ns"}}),
    ],
)
def test_promql_needs_reads_names_and_labels(expr: str, expected: dict[str, set[str]]) -> None:
    assert needs(expr) == expected


def test_the_rules_and_the_dashboard_read_metrics_this_controller_serves() -> None:
    """By name, against the metric families the process defines (the integration test
    checks the labels on a live scrape)."""
    served = {s.name for m in REGISTRY.collect() for s in m.samples}
    served |= {f"{m.name}_bucket" for m in REGISTRY.collect() if m.type == "histogram"}
    expressions = rule_expressions(MONITORING / "prometheusrule.yaml")
    expressions += dashboard_expressions(MONITORING / "dashboard.json")
    wanted = set(all_needs(expressions))
    prefixes = ("crs_", "workqueue_", "controller_runtime_")
    assert {n for n in wanted if n.startswith(prefixes)} == wanted
    assert {n for n in wanted if n.startswith("crs_")} <= served | {
        # Per-CRS families: no series until a CRS is reconciled (integration test).
        "crs_fleet_clusters",
        "crs_fleet_waiting_clusters",
        "crs_rollout_phase",
        "crs_drift_corrections_total",
        "crs_drift_corrections_repeated_total",
    }
    assert {n for n in wanted if not n.startswith("crs_")} <= served


def test_the_metrics_service_selects_the_manager_pods_and_names_their_metrics_port() -> None:
    service = yaml.safe_load((MONITORING / "service.yaml").read_text())
    manager = yaml.safe_load(MANAGER.read_text())
    template = manager["spec"]["template"]
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    assert service["metadata"]["namespace"] == manager["metadata"]["namespace"]
    (container,) = template["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] in ports
    # The port the process serves /metrics on, as the manager's arguments set it.
    assert f"--metrics-addr=:{ports[port['targetPort']]}" in container["args"]


def kustomize() -> list[str]:
    """The command hack/kustomize.sh would run, without building one."""
    if found := shutil.which("kustomize"):
        return [found, "build"]
    if found := shutil.which("kubectl"):
        return [found, "kustomize"]
    cache = os.environ.get("CRS_CONTROLLER_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "crs-controller"
    )
    cached = Path(cache) / "bin" / f"kustomize-{KUSTOMIZE_VERSION}" / "kustomize"
    if not os.access(cached, os.X_OK):
        pytest.skip(
            f"no kustomize on PATH, no kubectl and none cached at {cached}: "
            "hack/kustomize.sh builds it (needs Go)"
        )
    return [str(cached), "build"]


def test_kustomize_builds_the_monitoring_base() -> None:
    done = run([*kustomize(), str(MONITORING)], ROOT)
    assert done.returncode == 0, done.stderr
    built = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(done.stdout) if d}
    assert built == {
        ("Service", "crs-controller-metrics"),
        ("ServiceMonitor", "crs-controller"),
        ("PrometheusRule", "crs-controller"),
        ("ConfigMap", "crs-controller-dashboard"),
    }


def registered_families() -> dict[str, tuple[str, set[str]]]:
    """Every metric family the package registers once all of it is imported (a
    family is registered where its module is imported): its name as served, its type
    and its label names; Python's own families left out."""
    for module in pkgutil.walk_packages(crs_controller.__path__, "crs_controller."):
        if not module.name.endswith("__main__"):  # that one runs the CLI
            importlib.import_module(module.name)
    # A family's label names are what it was declared with: it need have no series.
    declared = {
        c._name: set(c._labelnames)
        for c in list(REGISTRY._collector_to_names)
        if isinstance(c, MetricWrapperBase)
    }
    families = {}
    for family in REGISTRY.collect():
        if family.name.startswith(("process_", "python_")):
            continue
        name = f"{family.name}_total" if family.type == "counter" else family.name
        families[name] = (family.type, declared[family.name])
    return families


def documented_metrics() -> dict[str, tuple[str, str]]:
    """The rows of docs/operations.md's metric tables: `name` -> (type, labels cell)."""
    rows = {}
    for line in OPERATIONS.read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 4 and re.fullmatch(r"`[a-z_]+`", cells[1]):
            rows[cells[1].strip("`")] = (cells[2], cells[3])
    return rows


def test_every_metric_family_is_documented_with_its_type_and_labels() -> None:
    families = registered_families()
    assert {"workqueue_depth", "crs_fleet_clusters", "crs_notifications_total"} <= set(families)
    rows = documented_metrics()
    for name, (kind, labels) in sorted(families.items()):
        assert name in rows, f"`{name}` has no row in docs/operations.md"
        row_type, row_labels = rows[name]
        assert row_type == kind, name
        for label in labels:
            assert f"`{label}`" in row_labels, f"{name}: label {label} not documented"
    # And the tables name nothing the process does not serve.
    assert set(rows) <= set(families)
