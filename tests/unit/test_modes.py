"""Modes as strategies compiled once from a spec: when ApplyOnce and Reconcile (with or
without reapplyInterval) apply a resource, when the next interval reapply is due, the
per-resource plan (Skip / Apply / CheckDrift), how objects are sent, the drift
settings and the parsed durations, what a spec may not say (reapplyInterval or
driftDetection outside Reconcile) and an interval below 10s taken as 10s. A property checks that the
compiled strategy decides exactly as the string-driven functions it replaced did, for
any inputs the API still accepts."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.core.api.models import ClusterResourceSetSpec
from crs_controller.core.durations import parse_duration
from crs_controller.core.errors import InvalidSpec
from crs_controller.core.spec.modes import (
    DEFAULT_DRIFT_SECONDS,
    Apply,
    ApplyOnce,
    ApplyOptions,
    CheckDrift,
    Decision,
    Drift,
    Durations,
    Reconcile,
    RecordedResource,
    Skip,
    Strategy,
    compile_strategy,
)

NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
HASH = "xxh3:0000000000000001"
OTHER = "xxh3:0000000000000002"


@dataclass(frozen=True)
class Recorded:
    hash: str = HASH
    applied: bool = True
    last_applied_time: datetime | None = NOW - timedelta(minutes=5)


def ago(minutes: float) -> Recorded:
    return Recorded(last_applied_time=NOW - timedelta(minutes=minutes))


def every(seconds: float | None) -> Reconcile:
    return Reconcile(Durations(reapply_interval=seconds))


def spec(**fields: Any) -> ClusterResourceSetSpec:
    body = {"clusterSelector": {}, "resources": [{"kind": "ConfigMap", "name": "x"}], **fields}
    return ClusterResourceSetSpec.model_validate(body)


def test_recorded_and_the_strategies_satisfy_their_protocols() -> None:
    recorded: RecordedResource = Recorded()
    strategies: list[Strategy] = [ApplyOnce(), Reconcile()]
    assert recorded.applied and len(strategies) == 2


# --- the decisions -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("recorded", "current", "needs"),
    [
        (None, HASH, True),
        (Recorded(applied=False), HASH, True),
        (Recorded(), HASH, False),
        (Recorded(), OTHER, False),  # later changes are ignored
        (ago(10_000), HASH, False),
    ],
)
def test_apply_once(recorded: Recorded | None, current: str, needs: bool) -> None:
    strategy = ApplyOnce()
    assert strategy.needs_apply(recorded, current, NOW) is needs
    assert strategy.next_due(recorded, NOW) is None
    assert strategy.apply == ApplyOptions(only_missing=True)
    assert strategy.drift.enabled is False


@pytest.mark.parametrize(
    ("interval", "recorded", "current", "needs"),
    [
        (None, None, HASH, True),
        (None, Recorded(applied=False), HASH, True),
        (None, Recorded(), HASH, False),
        (None, Recorded(), OTHER, True),
        (None, ago(10_000), HASH, False),
        (None, Recorded(last_applied_time=None), HASH, False),
        (600.0, ago(5), HASH, False),
        (600.0, ago(9.99), HASH, False),
        (600.0, ago(10), HASH, True),
        (600.0, ago(60), HASH, True),
        (600.0, ago(5), OTHER, True),
        (600.0, Recorded(last_applied_time=None), HASH, True),
        (600.0, Recorded(applied=False), HASH, True),
    ],
)
def test_reconcile(
    interval: float | None, recorded: Recorded | None, current: str, needs: bool
) -> None:
    strategy = every(interval)
    assert strategy.needs_apply(recorded, current, NOW) is needs
    assert strategy.apply == ApplyOptions(only_missing=False)


@pytest.mark.parametrize(
    ("interval", "recorded", "due"),
    [
        (None, ago(5), None),
        (None, None, None),
        (600.0, ago(5), 300.0),
        (600.0, ago(0), 600.0),
        (600.0, ago(10), 0.0),
        (600.0, ago(30), 0.0),
        (600.0, None, 0.0),
        (600.0, Recorded(last_applied_time=None), 0.0),
        (600.0, Recorded(last_applied_time=NOW + timedelta(minutes=1)), 660.0),  # clock skew
    ],
)
def test_reconcile_next_due(
    interval: float | None, recorded: Recorded | None, due: float | None
) -> None:
    assert every(interval).next_due(recorded, NOW) == due


@pytest.mark.parametrize(
    ("durations", "message"),
    [
        ({"reapply_interval": 0.0}, "positive"),
        ({"reapply_interval": -1.0}, "positive"),
        ({"drift_check_interval": 0.0}, "positive"),
        ({"health_timeout": -1.0}, "non-negative"),
        ({"pause_after": (1.0, float("inf"))}, "non-negative"),
    ],
)
def test_durations_refuse_what_no_spec_parses_to(durations: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Durations(**durations)


@pytest.mark.parametrize(
    ("strategy", "recorded", "current", "drift_due", "expected"),
    [
        (Reconcile(), None, HASH, False, Apply("All")),
        (Reconcile(), Recorded(), OTHER, False, Apply("Changed")),  # only what changed
        (Reconcile(drift_mode="Content"), Recorded(), OTHER, True, Apply("Changed")),
        (Reconcile(), Recorded(applied=False), HASH, False, Apply("Changed")),  # a retry
        (every(60), ago(2), OTHER, False, Apply("All")),  # the interval sends all
        (Reconcile(drift_mode="Generation"), Recorded(), HASH, True, CheckDrift("Generation")),
        (Reconcile(drift_mode="Content"), Recorded(), HASH, True, CheckDrift("Content")),
        (Reconcile(drift_mode="Content"), Recorded(), HASH, False, Skip()),  # not due yet
        (Reconcile(), Recorded(), HASH, True, Skip()),  # no drift detection
        (every(60), ago(2), HASH, False, Apply("All")),  # the interval reapply is due
        (every(600), ago(2), HASH, False, Skip()),
        (ApplyOnce(), Recorded(), OTHER, False, Skip()),  # edits are ignored
        (ApplyOnce(), Recorded(), HASH, True, Skip()),  # and drift is never checked
        (ApplyOnce(), None, HASH, False, Apply("All")),
        (ApplyOnce(), Recorded(applied=False), HASH, False, Apply("All")),
    ],
)
def test_plan_per_resource(
    strategy: Strategy, recorded: Recorded | None, current: str, drift_due: bool, expected: Decision
) -> None:
    assert strategy.decide(recorded, current, NOW, drift_due) == expected


# --- compiling a spec --------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, ApplyOnce()),
        ({"mode": "Reconcile"}, Reconcile()),
        ({"mode": "Reconcile", "reapplyInterval": "10m"}, every(600.0)),
        ({"mode": "Reconcile", "reapplyInterval": "1h30m"}, every(5400.0)),
        ({"mode": "Reconcile", "reapplyInterval": "0s"}, every(None)),  # 0 disables it
        (
            {"mode": "Reconcile", "driftDetection": "Content", "driftCheckInterval": "30s"},
            Reconcile(Durations(drift_check_interval=30.0), "Content"),
        ),
        (
            {"mode": "Reconcile", "driftDetection": "Generation", "driftCheckInterval": "0"},
            Reconcile(Durations(drift_check_interval=60.0), "Generation"),  # 0: the default
        ),
        (
            {"mode": "Reconcile", "reapplyInterval": "10s", "driftCheckInterval": "10s"},
            Reconcile(Durations(reapply_interval=10.0, drift_check_interval=10.0)),
        ),
        ({"healthCheck": {"wait": True}}, ApplyOnce(Durations(health_timeout=300.0))),
        ({"healthCheck": {"timeout": "90s"}}, ApplyOnce(Durations(health_timeout=90.0))),
        (
            {
                "mode": "Reconcile",
                "rollout": {
                    "steps": [
                        {"clusterSelector": {}, "pauseAfter": "10m"},
                        {"clusterSelector": {}},
                        {"clusterSelector": {}, "pauseAfter": "1.5s"},
                    ]
                },
            },
            Reconcile(Durations(pause_after=(600.0, 0.0, 1.5), validation_timeout=(None,) * 3)),
        ),
    ],
)
def test_compile_strategy(fields: dict[str, Any], expected: Strategy) -> None:
    assert compile_strategy(spec(**fields)) == expected


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"reapplyInterval": "10m"}, "reapplyInterval only applies to mode Reconcile"),
        (
            {"driftDetection": "Content"},
            "spec.driftDetection other than None only applies to mode Reconcile",
        ),
        ({"mode": "Reconcile", "reapplyInterval": "9999999999h"}, "too large"),
        ({"driftCheckInterval": "9999999999h"}, "too large"),
        ({"healthCheck": {"timeout": "9999999999h"}}, "too large"),
    ],
)
def test_compile_strategy_refuses(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSpec, match=message):
        compile_strategy(spec(**fields))


@pytest.mark.parametrize(
    ("fields", "reapply", "drift"),
    [
        ({"mode": "Reconcile", "reapplyInterval": "1ns"}, 10.0, DEFAULT_DRIFT_SECONDS),
        ({"mode": "Reconcile", "reapplyInterval": "9.999s"}, 10.0, DEFAULT_DRIFT_SECONDS),
        ({"mode": "Reconcile", "reapplyInterval": "10s"}, 10.0, DEFAULT_DRIFT_SECONDS),
        ({"mode": "Reconcile", "reapplyInterval": "0s"}, None, DEFAULT_DRIFT_SECONDS),
        ({"mode": "Reconcile", "driftCheckInterval": "1ns"}, None, 10.0),
        ({"mode": "Reconcile", "driftCheckInterval": "9s"}, None, 10.0),
        ({"mode": "Reconcile", "driftCheckInterval": "11s"}, None, 11.0),
        ({"mode": "Reconcile", "driftCheckInterval": "0s"}, None, DEFAULT_DRIFT_SECONDS),
    ],
)
def test_an_interval_stored_below_the_floor_is_taken_as_the_floor(
    fields: dict[str, Any], reapply: float | None, drift: float
) -> None:
    """The CRD refuses them on write; one stored by an older release still works, at
    the floor, rather than stopping the set at an upgrade."""
    strategy = compile_strategy(spec(**fields))
    assert strategy.durations.reapply_interval == reapply
    assert strategy.durations.drift_check_interval == drift


# --- the compiled strategy decides as the string-driven functions did ----------------
# What follows is the mode logic as it was before strategies were compiled (commit
# b1892fa), kept here verbatim as the reference the property compares against.

OldDrift = Literal["None", "Generation", "Content"]


class _OldApplyOnce:
    applies_only_missing = True

    def needs_apply(self, recorded: Recorded | None, current_hash: str, now: datetime) -> bool:
        return recorded is None or not recorded.applied

    def scope(self, recorded: Recorded | None, now: datetime) -> str:
        return "All"

    def next_due(self, recorded: Recorded | None, now: datetime) -> float | None:
        return None


class _OldReconcile:
    applies_only_missing = False

    def __init__(self, reapply_interval: float | None = None) -> None:
        self.reapply_interval = reapply_interval

    def needs_apply(self, recorded: Recorded | None, current_hash: str, now: datetime) -> bool:
        return (
            recorded is None
            or not recorded.applied
            or recorded.hash != current_hash
            or self.next_due(recorded, now) == 0
        )

    def scope(self, recorded: Recorded | None, now: datetime) -> str:
        if recorded is None or self.next_due(recorded, now) == 0:
            return "All"
        return "Changed"

    def next_due(self, recorded: Recorded | None, now: datetime) -> float | None:
        if self.reapply_interval is None:
            return None
        if recorded is None or recorded.last_applied_time is None:
            return 0.0
        elapsed = (now - recorded.last_applied_time).total_seconds()
        return max(0.0, self.reapply_interval - elapsed)


def _old_strategy_for(mode: str, reapply_interval: str | None) -> _OldApplyOnce | _OldReconcile:
    if mode == "ApplyOnce":
        if reapply_interval is not None:
            raise InvalidSpec("reapplyInterval only applies to mode Reconcile")
        return _OldApplyOnce()
    if mode == "Reconcile":
        seconds = None if reapply_interval is None else parse_duration(reapply_interval)
        return _OldReconcile(seconds or None)
    raise InvalidSpec(f"invalid mode {mode!r} (expected ApplyOnce or Reconcile)")


def _old_drift_for(mode: str, drift_detection: str, check_interval: str | None) -> Drift:
    interval = parse_duration(check_interval or "1m")
    interval = interval or parse_duration("1m")
    if mode != "Reconcile" or drift_detection not in ("Generation", "Content"):
        return Drift("None", interval)
    return Drift("Content" if drift_detection == "Content" else "Generation", interval)


def _old_plan(
    strategy: _OldApplyOnce | _OldReconcile,
    recorded: Recorded | None,
    current_hash: str,
    now: datetime,
    drift_due: OldDrift,
) -> Decision:
    if strategy.needs_apply(recorded, current_hash, now):
        return Apply(strategy.scope(recorded, now))  # type: ignore[arg-type]
    if drift_due != "None":
        return CheckDrift(drift_due)
    return Skip()


def _old_pass(
    fields: dict[str, Any], recorded: Recorded | None, current: str, now: datetime, due: bool
) -> tuple[Decision, float | None, bool, Drift]:
    """One resource's decisions as the pass took them before: from the spec's strings."""
    old = _old_strategy_for(fields["mode"], fields.get("reapplyInterval"))
    drift = _old_drift_for(fields["mode"], fields["driftDetection"], fields["driftCheckInterval"])
    decision = _old_plan(old, recorded, current, now, drift.mode if due else "None")
    return decision, old.next_due(recorded, now), old.applies_only_missing, drift


def _newly_refused(fields: dict[str, Any]) -> bool:
    """What the reference accepted and the API refuses now: drift detection outside
    Reconcile."""
    return fields["mode"] == "ApplyOnce" and fields["driftDetection"] != "None"


def _floored(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with an interval shorter than 10s (other than 0) raised to 10s: what
    the compiled strategy takes one stored before the CRD refused it as."""
    floored = dict(fields)
    for key in ("driftCheckInterval", "reapplyInterval"):
        text = fields.get(key)
        if text is not None and 0 < parse_duration(text) < 10:
            floored[key] = "10s"
    return floored


DURATIONS = st.sampled_from(["0", "0s", "1ms", "30s", "1m", "90s", "10m", "1h30m", "2.5h"])
MOMENTS = st.integers(min_value=-7_200, max_value=7_200).map(lambda s: NOW + timedelta(seconds=s))
RECORDS = st.none() | st.builds(
    Recorded,
    hash=st.sampled_from([HASH, OTHER]),
    applied=st.booleans(),
    last_applied_time=st.none() | MOMENTS,
)
SPECS = st.fixed_dictionaries(
    {
        "mode": st.sampled_from(["ApplyOnce", "Reconcile"]),
        "driftDetection": st.sampled_from(["None", "Generation", "Content"]),
        "driftCheckInterval": DURATIONS,
    },
    optional={"reapplyInterval": DURATIONS},
)


@settings(max_examples=500, deadline=None)
@given(SPECS, RECORDS, st.sampled_from([HASH, OTHER]), MOMENTS, st.booleans())
def test_the_compiled_strategy_decides_as_before(
    fields: dict[str, Any], recorded: Recorded | None, current: str, now: datetime, due: bool
) -> None:
    if _newly_refused(fields):
        with pytest.raises(InvalidSpec):
            compile_strategy(spec(**fields))
        return
    try:
        before = _old_pass(_floored(fields), recorded, current, now, due)
    except InvalidSpec as refused:
        with pytest.raises(InvalidSpec, match=re.escape(str(refused))):
            compile_strategy(spec(**fields))
        return
    strategy = compile_strategy(spec(**fields))
    after = (
        strategy.decide(recorded, current, now, due),
        strategy.next_due(recorded, now),
        strategy.apply.only_missing,
        strategy.drift,
    )
    assert after == before
