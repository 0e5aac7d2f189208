"""What the fleet page draws, folded on the server from what ``status`` reads (the
CRSs, Clusters and bindings kept current by watches), so the browser only draws:

- ``crs``: each ClusterResourceSet's header: revision, state, rollout phase and
  step, what it waits for, held clusters, and its clusters counted by state;
- ``cells``: each (CRS, selected cluster): the cluster's state (core/state/fleet, as
  ``status`` decides it), reason, message, revision and rollout step;
- ``clusters``: each Cluster's labels and whether it is paused or holds updates.

Each part is keyed by a string, so the changes between two views are the entries
set and the keys removed (``changes``): one snapshot, then deltas."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from crs_controller.app.commands.common import SHORT_REVISION, Obj
from crs_controller.app.commands.status import (
    BINDING_KIND,
    FleetState,
    crs_state,
    waiting,
    with_refusal,
)
from crs_controller.core.api.models import MESSAGE_LIMIT, to_api
from crs_controller.core.rollout.policy import step_of
from crs_controller.core.spec.objects import CRS, Cluster, parse_binding_object
from crs_controller.core.text import safe_all

PARTS = ("crs", "cells", "clusters")
View = dict[str, dict[str, Obj]]


def build(state: FleetState, now: datetime) -> View:
    """The view of everything ``state`` holds, its waiting times told from ``now``."""
    clusters = state.clusters()
    crss = {(c.namespace, c.name): c for c in state.crss(None)}
    view: View = {"crs": {}, "cells": {}, "clusters": {}}
    for (namespace, name), parsed in clusters.items():
        view["clusters"][f"{namespace}/{name}"] = _cluster(parsed)
    for record in state.document(None)["clusterResourceSets"]:
        crs = crss[(record["namespace"], record["name"])]
        key = f"{crs.namespace}/{crs.name}"
        counts: Counter[str] = Counter()
        for row in record["clusters"]:
            cluster = clusters.get((crs.namespace, row["cluster"]))
            view["cells"][f"{key}/{row['cluster']}"] = _cell(key, crs, cluster, row)
            counts[row["state"]] += 1
        view["crs"][key] = _header(key, crs, record, counts, now)
    return view


def changes(before: View, after: View) -> Obj | None:
    """What changed from ``before`` to ``after``, per part: the entries set (new or
    changed) and the keys removed; None when nothing did."""
    delta: Obj = {}
    for part in PARTS:
        old, new = before.get(part, {}), after.get(part, {})
        changed = {key: value for key, value in new.items() if old.get(key) != value}
        removed = [key for key in old if key not in new]
        if changed or removed:
            delta[part] = {"set": changed, "removed": removed}
    return delta or None


def record(state: FleetState, namespace: str, cluster: str, crs: str) -> Obj | None:
    """The binding's record of ``crs`` on ``cluster`` (resources, outcome, validation),
    as the binding holds it, its text escaped as ``status`` escapes messages (a
    binding is tenant-writable); None when it holds none."""
    raw = state.objects[BINDING_KIND].get((namespace, cluster))
    if raw is None:
        return None
    binding = parse_binding_object(raw)
    if binding.model is None:
        return None
    entry = binding.entries().get(crs)
    return None if entry is None else safe_all(to_api(entry), MESSAGE_LIMIT, MESSAGE_LIMIT)


def _header(key: str, crs: CRS, record: Obj, counts: Counter[str], now: datetime) -> Obj:
    rollout: Obj = record["rollout"] or {}
    return {
        "key": key,
        "namespace": crs.namespace,
        "name": crs.name,
        "revision": (record["revision"] or "")[:SHORT_REVISION],
        "state": crs_state(record),
        "reason": record["reason"],
        "message": record["message"],
        "phase": rollout.get("phase"),
        "step": rollout.get("step"),
        "steps": 0 if crs.policy is None else len(crs.policy.steps),
        "waiting": waiting(rollout.get("waitingFor"), rollout.get("nextWindow"), now),
        "nextWindow": rollout.get("nextWindow"),
        "held": rollout.get("heldClusters"),
        "rolloutMessage": rollout.get("message"),
        "counts": dict(sorted(counts.items())),
    }


def _cell(key: str, crs: CRS, cluster: Cluster | None, row: Obj) -> Obj:
    revision = row.get("revision")
    return {
        "crs": key,
        "cluster": row["cluster"],
        "state": row["state"],
        "reason": row.get("reason"),
        "message": with_refusal(row, row.get("message") or "") or None,
        "refused": row.get("refused"),
        "revision": (revision or "")[:SHORT_REVISION],
        "current": None if revision is None else revision == crs.status.revision,
        "since": row.get("since"),
        "lastApplied": row.get("lastApplied"),
        "step": _step(crs, cluster),
    }


def _step(crs: CRS, cluster: Cluster | None) -> int | None:
    """The cluster's rollout step: 0 for one that holds updates (it belongs to no
    step), None without steps or without the Cluster (a binding left behind)."""
    if crs.policy is None or not crs.policy.steps or cluster is None:
        return None
    if cluster.holds_updates:
        return 0
    return step_of(crs.policy.steps, cluster.meta.labels)


def _cluster(cluster: Cluster) -> Obj:
    labels: dict[str, Any] = dict(sorted(cluster.meta.labels.items()))
    return {
        "namespace": cluster.namespace,
        "name": cluster.name,
        "labels": labels,
        "paused": cluster.paused,
        "holdsUpdates": cluster.holds_updates,
    }
