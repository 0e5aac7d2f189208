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
QUEUE_FAIR_WAITS = Counter(
    "crs_queue_fair_waits_total",
    "Times a worker waited although keys were ready, because the namespace of every "
    "ready key already held a worker and the free ones are kept for namespaces holding none",
)
LEADER = Gauge("crs_leader", "1 while this process acts (holds the lease, or runs unelected)")
LEADER.set(1)
SHARD_MEMBERS = Gauge(
    "crs_shard_members", "Live members of the shard set, as this replica sees them"
)
UPDATING_CLUSTERS = Gauge(
    "crs_updating_clusters",
    "Clusters taking a new revision now under run --max-updating-clusters (this replica's)",
)
SHARD_OWNED = Gauge("crs_shard_owned_clusters", "Clusters this replica reconciles")
SHARD_CACHED_BINDINGS = Gauge(
    "crs_shard_cached_bindings",
    "Bindings this shard member holds: its own share's (and, before it knows its share, all)",
)
SHARD_HANDOVERS = Counter(
    "crs_shard_handovers_total",
    "Clusters handed to this replica (in) or taken from it (out) as members came and went",
    ["direction"],
)
NOTIFICATIONS = Counter(
    "crs_notifications_total",
    "Notifications by result: sent (answered 2xx), failed (refused, or unanswered after "
    "the last retry)",
    ["result"],
)
ROLLBACKS = Counter(
    "crs_rollbacks_total",
    "Rollbacks started, by trigger (OnFailure: a halted rollout under onFailure: "
    "Rollback; Manual: crs-controller rollback)",
    ["trigger"],
)
SNAPSHOTS_WRITTEN = Counter(
    "crs_snapshots_written_total", "Revision snapshots written (once per revision)"
)
HOOK_REQUESTS_TURNED_AWAY = Counter(
    "crs_hook_requests_turned_away_total",
    "Runtime Extension hook requests answered retry at once, unread, because as many "
    "answers as are read at once were being read",
    ["hook"],
)
NOTIFICATIONS_DROPPED = Counter(
    "crs_notifications_dropped_total",
    "Notifications dropped unsent: a receiver's queue was full and the oldest went",
)


# -- controller-runtime's families ------------------------------------------------------
# The names, labels, result values and buckets controller-runtime registers
# (pkg/internal/controller/metrics and pkg/metrics/workqueue.go), so the dashboards and
# alerts written for controller-runtime controllers read this one too. Its two
# controllers share one queue and its workers; each key counts under its own.
# A look at a CRS's sources (``sources``) is the CRS controller's work.
CONTROLLER_OF_KIND = {"crs": "clusterresourceset", "cluster": "cluster"}
QUEUE_OF_KIND = {**CONTROLLER_OF_KIND, "sources": "clusterresourceset"}
RECONCILE_RESULTS = ("success", "error", "requeue", "requeue_after")
_RECONCILE_TIME_BUCKETS = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5),
    *(0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0),
    *(6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0),
)
# client-go's ExponentialBuckets(10e-9, 10, 12): 10 ns to 1000 s.
_WORKQUEUE_BUCKETS = (1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)

RECONCILE_TOTAL = Counter(
    "controller_runtime_reconcile_total",
    "Total number of reconciliations per controller",
    ["controller", "result"],
)
RECONCILE_ERRORS = Counter(
    "controller_runtime_reconcile_errors_total",
    "Total number of reconciliation errors per controller",
    ["controller"],
)
RECONCILE_TIME = Histogram(
    "controller_runtime_reconcile_time_seconds",
    "Length of time per reconciliation per controller",
    ["controller"],
    buckets=_RECONCILE_TIME_BUCKETS,
)
# controller-runtime sets both ``name`` and ``controller`` to the controller's name.
_QUEUE_LABELS = ["name", "controller"]
WORKQUEUE_DEPTH = Gauge("workqueue_depth", "Current depth of workqueue", _QUEUE_LABELS)
WORKQUEUE_ADDS = Counter(
    "workqueue_adds_total", "Total number of adds handled by workqueue", _QUEUE_LABELS
)
WORKQUEUE_QUEUE_DURATION = Histogram(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested",
    _QUEUE_LABELS,
    buckets=_WORKQUEUE_BUCKETS,
)
WORKQUEUE_WORK_DURATION = Histogram(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes.",
    _QUEUE_LABELS,
    buckets=_WORKQUEUE_BUCKETS,
)
WORKQUEUE_RETRIES = Counter(
    "workqueue_retries_total", "Total number of retries handled by workqueue", _QUEUE_LABELS
)
WORKQUEUE_UNFINISHED = Gauge(
    "workqueue_unfinished_work_seconds",
    "How many seconds of work has been done that is in progress and hasn't been observed "
    "by work_duration. Large values indicate stuck threads.",
    _QUEUE_LABELS,
)
WORKQUEUE_LONGEST = Gauge(
    "workqueue_longest_running_processor_seconds",
    "How many seconds has the longest running processor for workqueue been running.",
    _QUEUE_LABELS,
)


def _zero_controller_series() -> None:
    """Every controller's series exist from the start, at zero: a rate over a series
    that appears only with its first error misses that error."""
    for controller in CONTROLLER_OF_KIND.values():
        for result in RECONCILE_RESULTS:
            RECONCILE_TOTAL.labels(controller, result)
        RECONCILE_ERRORS.labels(controller)
        RECONCILE_TIME.labels(controller)
        for family in (
            WORKQUEUE_DEPTH,
            WORKQUEUE_ADDS,
            WORKQUEUE_RETRIES,
            WORKQUEUE_UNFINISHED,
            WORKQUEUE_LONGEST,
        ):
            family.labels(controller, controller)
        for histogram in (WORKQUEUE_QUEUE_DURATION, WORKQUEUE_WORK_DURATION):
            histogram.labels(controller, controller)


_zero_controller_series()


def reconciled(kind: str, seconds: float, result: str) -> None:
    """One finished reconcile of a key of ``kind`` (``cluster``, ``crs``), in both
    conventions: controller-runtime's ``result`` (success, error, requeue,
    requeue_after) and this controller's own (ok, retry, error)."""
    controller = CONTROLLER_OF_KIND[kind]
    RECONCILE_TOTAL.labels(controller, result).inc()
    RECONCILE_TIME.labels(controller).observe(seconds)
    if result == "error":
        RECONCILE_ERRORS.labels(controller).inc()
    own = {"error": "error", "requeue": "retry"}.get(result, "ok")
    RECONCILES.labels(kind=kind, result=own).inc()
    RECONCILE_SECONDS.labels(kind=kind).observe(seconds)
