"""What the caches hold (``core.spec.objects``): a CRS the model refuses is held with an
``InvalidSpec`` naming the field, never the value, selects nothing and is left alone;
a binding the model refuses (a time out of range too) is held with its problem; a
Cluster's paused and initialized state and its labels are read once, whichever API
version."""

from __future__ import annotations

import json
from typing import Any

import pytest

from crs_controller.core.errors import InvalidSpec
from crs_controller.core.spec.modes import ApplyOnce, ApplyOptions, Drift, Durations, Reconcile
from crs_controller.core.spec.objects import (
    CRS,
    parse_binding_object,
    parse_cluster,
    parse_crs,
)

MARKER = "v4lue-9d1f0c"


def crs(**spec: Any) -> CRS:
    body = {
        "clusterSelector": {"matchLabels": {"a": "b"}},
        "resources": [{"kind": "ConfigMap", "name": "x"}],
        **spec,
    }
    return parse_crs({"metadata": {"name": "c", "namespace": "n"}, "spec": body})


def cluster(namespace: str = "n", labels: dict[str, str] | None = None, **spec: Any) -> Any:
    meta = {"name": "w", "namespace": namespace, "labels": labels or {"a": "b"}}
    return parse_cluster({"metadata": meta, "spec": spec})


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"mode": MARKER}, "spec.mode"),
        ({"deletionPolicy": MARKER}, "spec.deletionPolicy"),
        ({"resources": [{"kind": MARKER, "name": "x"}]}, "spec.resources.0.kind"),
        ({"resources": []}, "spec.resources"),
        ({"driftCheckInterval": MARKER}, "spec.driftCheckInterval"),
        (
            {"clusterSelector": {"matchExpressions": [{"key": "a", "operator": MARKER}]}},
            "spec.clusterSelector.matchExpressions.0.operator",
        ),
        (
            {
                "clusterSelector": {
                    "matchExpressions": [{"key": "a", "operator": "Exists", "values": [MARKER]}]
                }
            },
            "clusterSelector.matchExpressions[0]",
        ),
    ],
)
def test_a_refused_spec_names_the_field_never_the_value(spec: dict[str, Any], field: str) -> None:
    refused = crs(**spec)
    assert refused.model is None and refused.problem is not None
    assert refused.problem.reason == "InvalidSpec"
    assert field in str(refused.problem)
    assert MARKER not in str(refused.problem)
    with pytest.raises(InvalidSpec):
        _ = refused.valid
    with pytest.raises(InvalidSpec):
        _ = refused.strategy


def test_a_valid_spec_is_active_and_selects_by_label() -> None:
    valid = crs()
    assert valid.problem is None and valid.valid.spec.mode == "ApplyOnce"
    assert valid.active and not valid.left_alone
    assert valid.selects(cluster())
    assert not valid.selects(cluster(labels={"a": "c"}))
    assert not valid.selects(cluster(namespace="other"))


def test_an_invalid_spec_is_left_alone_and_selects_nothing() -> None:
    invalid = crs(mode="Never")
    assert not invalid.active and invalid.left_alone
    assert not invalid.selects(cluster())


def test_a_reapply_interval_outside_reconcile_mode_is_invalid() -> None:
    refused = crs(mode="ApplyOnce", reapplyInterval="5m")
    assert refused.problem is not None and "reapplyInterval" in str(refused.problem)


@pytest.mark.parametrize(
    ("spec", "reapply", "drift"),
    [
        ({"mode": "Reconcile", "reapplyInterval": "1ns"}, 10.0, 60.0),
        ({"mode": "Reconcile", "reapplyInterval": "9s"}, 10.0, 60.0),
        (
            {"mode": "Reconcile", "driftDetection": "Generation", "driftCheckInterval": "1ns"},
            None,
            10.0,
        ),
        ({"mode": "Reconcile", "driftCheckInterval": "500ms"}, None, 10.0),
    ],
)
def test_an_interval_that_would_spin_is_taken_as_ten_seconds(
    spec: dict[str, Any], reapply: float | None, drift: float
) -> None:
    """Each interval is a pass over every matching cluster: below 10s a tenant's CRS
    would keep the controller reapplying and listing without a pause. The CRD refuses
    one on write; one stored before still works, at the floor."""
    parsed = crs(**spec)
    assert parsed.active and parsed.problem is None
    durations = parsed.strategy.durations
    assert (durations.reapply_interval, durations.drift_check_interval) == (reapply, drift)


def test_drift_detection_outside_reconcile_is_invalid() -> None:
    """Drift is only checked in Reconcile mode: asking for it under ApplyOnce is
    refused, not ignored."""
    refused = crs(driftDetection="Generation")
    assert not refused.active
    assert refused.problem is not None and "spec.driftDetection" in str(refused.problem)


def test_a_duration_too_large_to_hold_is_invalid() -> None:
    # The CRD's pattern lets it through; Go's int64 nanoseconds could not hold it.
    refused = crs(mode="Reconcile", driftCheckInterval="9999999999h")
    assert refused.problem is not None and "too large" in str(refused.problem)


def test_the_mode_is_compiled_once_when_parsed() -> None:
    parsed = crs(
        mode="Reconcile",
        reapplyInterval="10m",
        driftDetection="Content",
        driftCheckInterval="30s",
        healthCheck={"wait": True, "timeout": "2m"},
        rollout={"steps": [{"clusterSelector": {}, "pauseAfter": "1h"}]},
    )
    strategy = parsed.strategy
    assert isinstance(strategy, Reconcile)
    assert strategy.apply == ApplyOptions(only_missing=False)
    assert strategy.drift == Drift("Content", 30.0)
    assert strategy.durations == Durations(600.0, 30.0, 120.0, (3600.0,), (None,))
    assert parsed.strategy is strategy  # held, not rebuilt on each read
    assert crs().strategy == ApplyOnce()


def test_a_paused_crs_is_left_alone_not_active() -> None:
    raw = {
        "metadata": {"name": "c", "namespace": "n", "annotations": {"cluster.x-k8s.io/paused": ""}},
        "spec": {
            "clusterSelector": {"matchLabels": {"a": "b"}},
            "resources": [{"kind": "Secret", "name": "s"}],
        },
    }
    paused = parse_crs(raw)
    assert paused.paused and paused.left_alone and not paused.active


def test_a_malformed_status_does_not_refuse_the_crs() -> None:
    raw = {
        "metadata": {"name": "c", "namespace": "n"},
        "spec": {
            "clusterSelector": {"matchLabels": {"a": "b"}},
            "resources": [{"kind": "Secret", "name": "s"}],
        },
        "status": {"conditions": [{"type": "Ready"}]},
    }
    parsed = parse_crs(raw)
    assert parsed.model is None or parsed.status.conditions == []
    assert parsed.status.conditions == []


@pytest.mark.parametrize(
    ("raw", "paused", "initialized"),
    [
        ({}, False, False),
        ({"spec": {"paused": True}}, True, False),
        ({"metadata": {"annotations": {"cluster.x-k8s.io/paused": ""}}}, True, False),
        ({"status": {"controlPlaneReady": True}}, False, True),
        ({"status": {"initialization": {"controlPlaneInitialized": True}}}, False, True),
    ],
    ids=["plain", "spec-paused", "annotation", "v1beta1-ready", "v1beta2-initialized"],
)
def test_a_cluster_is_read_once(raw: dict[str, Any], paused: bool, initialized: bool) -> None:
    meta = {"name": "w", "namespace": "n", **raw.get("metadata", {})}
    parsed = parse_cluster({**raw, "metadata": meta})
    assert (parsed.paused, parsed.initialized) == (paused, initialized)
    assert (parsed.namespace, parsed.name, parsed.deleting) == ("n", "w", False)


def test_a_refused_binding_is_held_with_its_problem() -> None:
    raw = {
        "metadata": {"name": "w", "namespace": "n"},
        "spec": {
            "clusterName": "w",
            "bindings": [{"clusterResourceSetName": MARKER, "resources": MARKER}],
        },
    }
    refused = parse_binding_object(raw)
    assert refused.model is None and not refused.entry_of
    assert refused.problem is not None and "spec.bindings.0.resources" in str(refused.problem)
    assert MARKER not in str(refused.problem)
    with pytest.raises(InvalidSpec):
        refused.entries()


BEFORE_YEAR_ONE = "0001-01-01T00:00:00+01:00"  # before year 1 once in UTC
AFTER_9999 = "9999-12-31T23:59:59-01:00"  # after 9999 once in UTC


@pytest.mark.parametrize("time", [BEFORE_YEAR_ONE, AFTER_9999])
@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"outcome": {"reason": "Applied", "time": "{t}"}}, "outcome.time"),
        (
            {"resources": [{"kind": "Secret", "name": "s", "lastAppliedTime": "{t}"}]},
            "resources.0.lastAppliedTime",
        ),
        (
            {"validation": {"revision": "r", "step": 1, "phase": "Running", "started": "{t}"}},
            "validation.started",
        ),
        (
            {
                "validation": {
                    "revision": "r",
                    "step": 1,
                    "phase": "Failed",
                    "started": "2026-11-22T10:00:00Z",
                    "finished": "{t}",
                }
            },
            "validation.finished",
        ),
    ],
)
def test_a_time_out_of_range_refuses_the_binding_naming_the_field(
    time: str, entry: dict[str, Any], field: str
) -> None:
    written = json.loads(json.dumps(entry).replace("{t}", time))
    raw = {
        "metadata": {"name": "w", "namespace": "n"},
        "spec": {"clusterName": "w", "bindings": [{"clusterResourceSetName": "a", **written}]},
    }
    refused = parse_binding_object(raw)
    assert refused.model is None and refused.problem is not None
    assert field in str(refused.problem) and "out of range" in str(refused.problem)
    assert time not in str(refused.problem)


def test_a_binding_names_the_crss_it_has_entries_for() -> None:
    raw = {
        "metadata": {"name": "w", "namespace": "n"},
        "spec": {
            "clusterName": "w",
            "bindings": [{"clusterResourceSetName": "a"}, {"clusterResourceSetName": "b"}],
        },
    }
    parsed = parse_binding_object(raw)
    assert set(parsed.entry_of) == {"a", "b"}
    assert set(parsed.entries()) == {"a", "b"}
