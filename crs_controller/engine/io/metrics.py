"""Prometheus metrics of the controller (served by the app layer on /metrics)."""

from __future__ import annotations

import contextlib

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
    "ready key already held its share of the workers",
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
SHARD_HANDOVERS = Counter(
    "crs_shard_handovers_total",
    "Clusters handed to this replica (in) or taken from it (out) as members came and went",
    ["direction"],
)
CLUSTERS_BY_REVISION = Gauge(
    "crs_rollout_clusters",
    "Matching clusters of a CRS with a rollout, by the revision they are on (none: not installed)",
    ["namespace", "crs", "revision"],
)
ROLLOUT_PHASE = Gauge(
    "crs_rollout_phase",
    "1 for the phase the CRS's rollout is in (Progressing, Paused, Halted, Complete, "
    "AwaitingApproval), else 0",
    ["namespace", "crs", "phase"],
)
_REVISIONS_SHOWN: dict[tuple[str, str], set[str]] = {}


def show_rollout(namespace: str, crs: str, revisions: dict[str, int], phase: str) -> None:
    """Set both rollout gauges for one CRS; revisions no cluster is on any more go."""
    shown = _REVISIONS_SHOWN.setdefault((namespace, crs), set())
    for gone in shown - set(revisions):
        CLUSTERS_BY_REVISION.remove(namespace, crs, gone)
    for revision, count in revisions.items():
        CLUSTERS_BY_REVISION.labels(namespace, crs, revision).set(count)
    _REVISIONS_SHOWN[(namespace, crs)] = set(revisions)
    for each in ("Progressing", "Paused", "Halted", "Complete", "AwaitingApproval"):
        ROLLOUT_PHASE.labels(namespace, crs, each).set(1 if each == phase else 0)


def forget_rollout(namespace: str, crs: str) -> None:
    for revision in _REVISIONS_SHOWN.pop((namespace, crs), set()):
        CLUSTERS_BY_REVISION.remove(namespace, crs, revision)
    for each in ("Progressing", "Paused", "Halted", "Complete", "AwaitingApproval"):
        with contextlib.suppress(KeyError):  # never shown for this CRS
            ROLLOUT_PHASE.remove(namespace, crs, each)


NOTIFICATIONS = Counter(
    "crs_notifications_total",
    "Notifications by result: sent (answered 2xx), failed (refused, or unanswered after "
    "the last retry)",
    ["result"],
)
NOTIFICATIONS_DROPPED = Counter(
    "crs_notifications_dropped_total",
    "Notifications dropped unsent: a receiver's queue was full and the oldest went",
)
