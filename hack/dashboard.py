"""Generates config/monitoring/dashboard.json, crs-controller's Grafana dashboard,
with grafanalib (a dev extra). Run `python hack/dashboard.py` after changing it;
tests/unit/test_monitoring.py checks the checked-in file is this script's output.

Usage: python hack/dashboard.py [--check] [--out FILE]
  --check: write nothing; exit 1 if the file differs from what would be written
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from grafanalib._gen import DashboardEncoder
from grafanalib.core import (
    Dashboard,
    GridPos,
    RowPanel,
    Target,
    Template,
    Templating,
    TimeSeries,
)

OUT = Path(__file__).resolve().parent.parent / "config" / "monitoring" / "dashboard.json"
DATASOURCE = "${datasource}"
# The shared controller-runtime families: this controller's job only.
JOB = 'job="crs-controller-metrics"'
WIDTH, HEIGHT = 8, 8


def series(title: str, unit: str, *queries: tuple[str, str]) -> TimeSeries:
    """A time series panel of (PromQL, legend) queries."""
    return TimeSeries(
        title=title,
        dataSource=DATASOURCE,
        unit=unit,
        targets=[
            Target(expr=expr, legendFormat=legend, refId=chr(ord("A") + n), datasource=DATASOURCE)
            for n, (expr, legend) in enumerate(queries)
        ],
    )


def reconciling() -> list[TimeSeries]:
    return [
        series(
            "Reconciles by result",
            "ops",
            (
                "sum by (controller, result) "
                f"(rate(controller_runtime_reconcile_total{{{JOB}}}[5m]))",
                "{{controller}} {{result}}",
            ),
        ),
        series(
            "Reconcile errors",
            "ops",
            (
                "sum by (controller) "
                f"(rate(controller_runtime_reconcile_errors_total{{{JOB}}}[5m]))",
                "{{controller}}",
            ),
        ),
        series(
            "Reconcile time (p50, p99)",
            "s",
            *(
                (
                    f"histogram_quantile({q}, sum by (controller, le) "
                    f"(rate(controller_runtime_reconcile_time_seconds_bucket{{{JOB}}}[5m])))",
                    f"{{{{controller}}}} p{round(q * 100)}",
                )
                for q in (0.5, 0.99)
            ),
        ),
    ]


def queue() -> list[TimeSeries]:
    return [
        series(
            "Work queue depth",
            "short",
            (f"sum by (name) (workqueue_depth{{{JOB}}})", "{{name}}"),
        ),
        series(
            "Adds and retries",
            "ops",
            (f"sum by (name) (rate(workqueue_adds_total{{{JOB}}}[5m]))", "{{name}} adds"),
            (f"sum by (name) (rate(workqueue_retries_total{{{JOB}}}[5m]))", "{{name}} retries"),
        ),
        series(
            "Wait in queue and work (p99)",
            "s",
            (
                "histogram_quantile(0.99, sum by (name, le) "
                f"(rate(workqueue_queue_duration_seconds_bucket{{{JOB}}}[5m])))",
                "{{name}} waiting",
            ),
            (
                "histogram_quantile(0.99, sum by (name, le) "
                f"(rate(workqueue_work_duration_seconds_bucket{{{JOB}}}[5m])))",
                "{{name}} working",
            ),
            (
                f"max by (name) (workqueue_longest_running_processor_seconds{{{JOB}}})",
                "{{name}} longest running",
            ),
        ),
    ]


def fleet() -> list[TimeSeries]:
    return [
        series(
            "Clusters by state (all CRSs)",
            "short",
            ("sum by (state) (crs_fleet_clusters)", "{{state}}"),
        ),
        series(
            "Clusters waiting, by reason",
            "short",
            ("sum by (reason) (crs_fleet_waiting_clusters)", "{{reason}}"),
        ),
        series(
            "Failing or unreachable clusters (top CRSs)",
            "short",
            (
                "topk(10, sum by (namespace, crs) "
                '(crs_fleet_clusters{state=~"Failed|Unreachable"}))',
                "{{namespace}}/{{crs}}",
            ),
        ),
        series(
            "Rollouts by phase",
            "short",
            ("sum by (phase) (max by (namespace, crs, phase) (crs_rollout_phase))", "{{phase}}"),
        ),
        series(
            "Drift corrected (per hour)",
            "short",
            (
                "sum by (namespace, crs) (increase(crs_drift_corrections_total[1h]))",
                "{{namespace}}/{{crs}}",
            ),
            (
                "sum by (namespace, crs) (increase(crs_drift_corrections_repeated_total[1h]))",
                "{{namespace}}/{{crs}} repeated",
            ),
        ),
        series(
            "Objects applied and failed",
            "ops",
            ("sum(rate(crs_objects_applied_total[5m]))", "applied"),
            ("sum(rate(crs_apply_errors_total[5m]))", "failed"),
        ),
    ]


def replicas() -> list[TimeSeries]:
    return [
        series("Leader", "short", ("max by (instance) (crs_leader)", "{{instance}}")),
        series(
            "Shard members and owned clusters",
            "short",
            ("max(crs_shard_members)", "members"),
            ("sum by (instance) (crs_shard_owned_clusters)", "{{instance}} owns"),
        ),
        series(
            "Clusters updating (budget)",
            "short",
            ("sum(crs_updating_clusters)", "updating"),
        ),
    ]


def laid_out(rows: list[tuple[str, list[TimeSeries]]]) -> list[object]:
    """Rows of panels, three to a line."""
    panels: list[object] = []
    y = 0
    for title, row in rows:
        panels.append(RowPanel(title=title, gridPos=GridPos(h=1, w=24, x=0, y=y)))
        y += 1
        for n, panel in enumerate(row):
            panel.gridPos = GridPos(h=HEIGHT, w=WIDTH, x=(n % 3) * WIDTH, y=y + (n // 3) * HEIGHT)
            panels.append(panel)
        y += ((len(row) + 2) // 3) * HEIGHT
    return panels


def dashboard() -> Dashboard:
    datasource = Template(
        name="datasource", query="prometheus", type="datasource", label="Data source"
    )
    return Dashboard(
        title="crs-controller",
        uid="crs-controller",
        description="ClusterResourceSets across the fleet; the controller's reconciles and queue",
        tags=["crs-controller", "cluster-api"],
        timezone="utc",
        templating=Templating(list=[datasource]),
        panels=laid_out(
            [
                ("Fleet", fleet()),
                ("Reconciles", reconciling()),
                ("Work queue", queue()),
                ("Replicas", replicas()),
            ]
        ),
    ).auto_panel_ids()


def render() -> str:
    data = dashboard().to_json_data()
    return json.dumps(data, cls=DashboardEncoder, indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else OUT
    text = render()
    if "--check" in argv:
        if not out.exists() or out.read_text() != text:
            print(f"{out} is out of date: run python hack/dashboard.py", file=sys.stderr)
            return 1
        return 0
    out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
