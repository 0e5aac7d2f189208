"""Health checks (``healthCheck.wait``): after an apply, a cluster counts as done only
once the objects it applied are Ready by the kstatus rules of ``core.health``.

Reads only, one LIST per kind per look, and looks only while there is something to
wait for: a pass that applied nothing to a cluster already Ready reads nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from crs_controller.core.durations import parse_duration
from crs_controller.core.health import describe, first_not_ready
from crs_controller.core.models import HealthCheck, ObjectRef, ResourceBinding
from crs_controller.core.status import Outcome
from crs_controller.engine.reconcile.drift_check import Observer

HEALTH_POLL_SECONDS = 2.0


@dataclass(frozen=True)
class Checked:
    outcome: Outcome
    requeue_after: float | None = None
    retry: bool = False


async def check_health(
    observer: Observer,
    check: HealthCheck,
    resources: Sequence[ResourceBinding],
    *,
    applied: Outcome,
    previous: Outcome | None,
    sent_now: bool,
    now: datetime,
) -> Checked:
    """``applied`` is the pass's outcome (every resource applied); ``previous`` the
    pair's last outcome; ``sent_now`` whether this pass sent anything."""
    if not sent_now and _was_ready(previous, applied):
        return Checked(applied)  # Ready since, and nothing changed
    refs = [o for resource in resources for o in resource.objects]
    live = await observer.objects(refs)
    found = first_not_ready([(_label(r), obj) for r, obj in zip(refs, live, strict=True)])
    if found is None:
        return Checked(applied)
    label, health = found
    why = describe(label, health)
    if health.state == "Failed":
        return Checked(_unhealthy(applied, why), retry=True)
    waited = _waited(resources, now)
    limit = parse_duration(check.timeout)
    if waited is not None and waited >= limit:
        return Checked(_unhealthy(applied, f"{why} (not Ready after {check.timeout})"), retry=True)
    waiting = replace(applied, message=f"waiting for {why}", ready=False)
    return Checked(waiting, requeue_after=HEALTH_POLL_SECONDS)


def _was_ready(previous: Outcome | None, applied: Outcome) -> bool:
    """Ready at the same generation and revision as this pass's outcome."""
    if previous is None or previous.state != "Applied" or not previous.ready:
        return False
    return (previous.generation, previous.revision) == (applied.generation, applied.revision)


def _unhealthy(applied: Outcome, why: str) -> Outcome:
    return Outcome("Failed", "Unhealthy", why, applied.generation, revision=applied.revision)


def _waited(resources: Sequence[ResourceBinding], now: datetime) -> float | None:
    """Seconds since the latest apply of these resources."""
    times = [r.last_applied_time for r in resources if r.last_applied_time is not None]
    return (now - max(times)).total_seconds() if times else None


def _label(ref: ObjectRef) -> str:
    where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
    return f"{ref.kind} {where}"
