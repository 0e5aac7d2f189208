"""config/monitoring against the real tools: promtool checks the PrometheusRule's
rules and runs tests/monitoring/alerts_test.yaml (every alert fires when it should,
not before); every alert names a runbook section docs/operations.md has and has a
test there that expects it and one that expects it not yet; the checked-in Grafana
dashboard is what hack/dashboard.py generates, and the kustomization ships it in a
ConfigMap the Grafana sidecar loads.

promtool comes from $PROMTOOL (hack/test.sh builds it from the Prometheus Go module
with hack/build-promtool.sh); without it the promtool tests skip, saying why.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "config" / "monitoring"
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


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors for the headings of a Markdown page."""
    found = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def test_every_alert_names_a_runbook_section_that_exists() -> None:
    sections = anchors(OPERATIONS.read_text())
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


def dashboard_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dashboard", ROOT / "hack" / "dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_checked_in_dashboard_is_the_scripts_output() -> None:
    script = dashboard_script()
    assert (MONITORING / "dashboard.json").read_text() == script.render()


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
