"""Prometheus metrics of the controller (served by the app layer on /metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECONCILES = Counter(
    "crs_reconciles_total", "Reconciles by kind (cluster or crs) and result", ["kind", "result"]
)
RECONCILE_SECONDS = Histogram(
    "crs_reconcile_duration_seconds", "Time spent in one reconcile", ["kind"]
)
OBJECTS_APPLIED = Counter(
    "crs_objects_applied_total", "Objects server-side applied to workload clusters"
)
APPLY_ERRORS = Counter("crs_apply_errors_total", "Objects that failed to apply")
SOURCE_HASHES = Counter(
    "crs_source_hashes_total", "ConfigMap/Secret contents hashed (once per content change)"
)
SOURCE_PARSES = Counter("crs_source_parses_total", "ConfigMap/Secret contents parsed")
LEADER = Gauge("crs_leader", "1 while this process acts (holds the lease, or runs unelected)")
LEADER.set(1)
