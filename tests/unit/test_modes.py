"""Modes as strategies: when ApplyOnce and Reconcile (with or without reapplyInterval)
apply a resource, when the next interval reapply is due, and how specs map to them;
the per-resource ``plan`` (Skip / Apply / CheckDrift), drift settings per mode, and the
drift schedule driven by explicit times (no clock is read)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from crs_controller.core.errors import InvalidSpec
from crs_controller.core.modes import (
    Apply,
    ApplyOnce,
    CheckDrift,
    Drift,
    DriftSchedule,
    Reconcile,
    RecordedResource,
    Skip,
    drift_for,
    plan,
    strategy_for,
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


def test_recorded_satisfies_the_protocol() -> None:
    recorded: RecordedResource = Recorded()
    assert recorded.applied


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
    assert strategy.applies_only_missing is True


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
    strategy = Reconcile(interval)
    assert strategy.needs_apply(recorded, current, NOW) is needs
    assert strategy.applies_only_missing is False


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
    assert Reconcile(interval).next_due(recorded, NOW) == due


@pytest.mark.parametrize("interval", [0.0, -1.0])
def test_reconcile_refuses_non_positive_interval(interval: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        Reconcile(interval)


@pytest.mark.parametrize(
    ("mode", "interval", "kind", "seconds"),
    [
        ("ApplyOnce", None, ApplyOnce, None),
        ("Reconcile", None, Reconcile, None),
        ("Reconcile", "10m", Reconcile, 600.0),
        ("Reconcile", "1h30m", Reconcile, 5400.0),
        ("Reconcile", "0s", Reconcile, None),  # zero disables interval reapplies
    ],
)
def test_strategy_for(mode: str, interval: str | None, kind: type, seconds: float | None) -> None:
    strategy = strategy_for(mode, interval)
    assert type(strategy) is kind
    assert getattr(strategy, "reapply_interval", None) == seconds


@pytest.mark.parametrize(
    ("mode", "interval", "message"),
    [
        ("Sometimes", None, "invalid mode 'Sometimes'"),
        ("reconcile", None, "invalid mode"),
        ("", None, "invalid mode"),
        ("ApplyOnce", "10m", "reapplyInterval only applies to mode Reconcile"),
        ("Reconcile", "10 minutes", "invalid duration"),
        ("Reconcile", "-1m", "negative"),
    ],
)
def test_strategy_for_refuses(mode: str, interval: str | None, message: str) -> None:
    with pytest.raises(InvalidSpec, match=message):
        strategy_for(mode, interval)


@pytest.mark.parametrize(
    ("strategy", "recorded", "current", "drift_due", "expected"),
    [
        (Reconcile(), None, HASH, "None", Apply("All")),
        (Reconcile(), Recorded(), OTHER, "None", Apply("Changed")),  # only what changed
        (Reconcile(), Recorded(), OTHER, "Content", Apply("Changed")),  # a change beats a check
        (Reconcile(), Recorded(applied=False), HASH, "None", Apply("Changed")),  # a retry
        (Reconcile(60), ago(2), OTHER, "None", Apply("All")),  # the interval sends all
        (Reconcile(), Recorded(), HASH, "Generation", CheckDrift("Generation")),
        (Reconcile(), Recorded(), HASH, "Content", CheckDrift("Content")),
        (Reconcile(), Recorded(), HASH, "None", Skip()),
        (Reconcile(60), ago(2), HASH, "None", Apply("All")),  # the interval reapply is due
        (Reconcile(600), ago(2), HASH, "None", Skip()),
        (ApplyOnce(), Recorded(), OTHER, "None", Skip()),  # edits are ignored
        (ApplyOnce(), None, HASH, "None", Apply("All")),
        (ApplyOnce(), Recorded(applied=False), HASH, "None", Apply("All")),
    ],
)
def test_plan_per_resource(
    strategy: ApplyOnce | Reconcile,
    recorded: Recorded | None,
    current: str,
    drift_due: str,
    expected: object,
) -> None:
    assert plan(strategy, recorded, current, NOW, drift_due) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mode", "detection", "interval", "expected"),
    [
        ("Reconcile", "Generation", "30s", Drift("Generation", 30.0)),
        ("Reconcile", "Content", None, Drift("Content", 60.0)),
        ("Reconcile", "Content", "0s", Drift("Content", 60.0)),  # 0: the default
        ("Reconcile", "None", "30s", Drift("None", 30.0)),
        ("ApplyOnce", "Content", "30s", Drift("None", 30.0)),  # Reconcile only
    ],
)
def test_drift_settings_per_mode(
    mode: str, detection: str, interval: str | None, expected: Drift
) -> None:
    assert drift_for(mode, detection, interval) == expected


def test_the_drift_schedule_is_due_at_first_then_after_each_interval() -> None:
    schedule = DriftSchedule()
    pair = ("ns", "crs", "c1")
    assert schedule.wait(pair, 100.0) == 0.0  # never checked: due now
    assert schedule.wait(pair, 100.0) == 0.0  # asking changes nothing
    schedule.checked(pair, 100.0, 60.0)
    assert schedule.wait(pair, 130.0) == 30.0
    assert schedule.wait(pair, 160.0) == 0.0
    schedule.checked(("ns", "crs", "c2"), 100.0, 60.0)
    schedule.forget_cluster("ns", "c1")
    assert schedule.wait(pair, 130.0) == 0.0
    assert schedule.wait(("ns", "crs", "c2"), 130.0) == 30.0
