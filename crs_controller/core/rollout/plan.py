"""The rollout planner: which clusters may take revision R now (Reconcile mode).

A pure function of what each cluster is on, the ``spec.rollout`` policy and the
clock, so the CRS reconcile can call it on every pass, a restart cannot change its
answer, and tables can test it without sleeping. Nothing is remembered between
calls except what the caller passes back in (``halted``: the revision whose
rollout last halted, remembered by the caller or found from the clusters' states by
``halted_revision``).

Where the SPEC is silent, decided here:

- A cluster with both ``done`` and ``failed`` set counts as failed: its last attempt
  is what matters.
- ``failed`` means failed taking ``revision``: a pass updating the cluster to it (even
  if only part of it went out: the caller then gives that revision, not the mix of
  hashes the cluster holds), its retries, its validation, or a failure while that
  revision's rollout was still going on. Only these count toward ``maxFailures`` and
  make a revision halted. A cluster that failed after it had the revision and its
  rollout was complete (unreachable later) is ``done`` for the plan: its failure is
  its own, and it neither halts that revision nor, once the sources move on, makes the
  next rollout treat that revision as a halted one (which would send every cluster on
  it ahead of the steps, approvals and soaks).
- Phase precedence: Complete, then Halted, then Paused, then Progressing. Complete
  wins over ``paused`` because nothing is held back (reporting Paused would keep
  ``Ready`` False on a fleet that is fully up to date). Halted wins over Paused
  because it is a fact only the cluster states tell (the caller remembers the
  halted revision from this phase, so that the next revision goes to those
  clusters first), while ``paused`` is in the spec for everyone to read; the message
  then says both.
- Halted is recomputed on every call, never remembered: a halted revision resumes
  by itself if its failed clusters recover (an Unhealthy cluster turning Ready, a
  failed cluster leaving), and since revisions are content-addressed the same
  content rolled out again later is not refused forever.
- ``maxConcurrent`` of 0 (or ``0%``) is taken as 1 while there are clusters: a
  rollout that can never move would sit in Progressing forever, and freezing is
  what ``paused`` is for. Percentages are whole numbers from 0 to 100, as
  Kubernetes validates ``maxUnavailable``.
- Retries go through the same gate as updates: a failed cluster on the target is
  admitted again only in the current step and within ``maxConcurrent``, after the
  clusters not yet on the target, so that a tolerated failure (at most
  ``maxFailures``) does not hold up the rest of its step. It still keeps its step
  from being done, so the next step waits until the retry succeeds.
- Only clusters updating (on the target, neither done nor failed) use up
  ``maxConcurrent``; a cluster admitted earlier but not yet recorded on the target
  does not, yet since the admitted set is the first clusters in name order, asking
  again before anything changed admits the very same clusters, not new ones. A first
  install is never counted when admitted, but once applied and waiting to be Ready
  it looks like any update in progress and is counted.
- Clusters on a halted revision go first, as a group before step 1, while any of
  them is still on it (once they have all moved, the ordinary step order takes over
  and their steps are done only when they are). ``step`` then reports where the
  ordinary order stands, since steps are 1-based and have no step 0.
- A step's soak counts from the latest ``since`` of its clusters; a ``since`` of
  None is ignored (unknown, so it does not hold the rollout back). A soak that would
  end after the last representable time (a ``since`` near 9999-12-31) ends then. While soaking,
  ``step`` is the step that soaks. Complete reports the last step,
  ``len(steps) + 1``.
- The soak end is shown as a UTC time of day (``10:05:00Z``), or as a full
  timestamp when it falls on another day than ``now``. A naive datetime is UTC.
- A cluster that holds updates (``held``) belongs to no step: it takes no new
  revision, does not keep a step from being done, and the rollout is Complete once
  every other cluster is on the target. A first install on it still goes.
- Outside the change windows (``Policy.windows``) no cluster starts a new revision,
  the halted revision's clusters included; validations of clusters that already took
  it go on. Complete, Halted and Paused are said before the window is. While a window
  is open, the plan asks to be made again when it closes (``wake_after``): a cluster
  admitted now must not start the revision once the window has closed.
- A ``manual`` step waits for approval (phase AwaitingApproval) only before it
  starts: while none of its clusters is on the target and one of them needs it. An
  approval names one step of one revision; the clusters of a halted revision taking
  the next one go first without asking.
- A step with ``validation`` is done once each of its clusters is done and
  ``validated``; until then the plan names the clusters to validate (``validate``).
  Its soak counts from the caller's ``since``, which is the validation's end.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import xxhash

from crs_controller.core.api.models import Rollout as RolloutSpec
from crs_controller.core.api.models import WaitingFor, to_api
from crs_controller.core.api.selectors import selector_matches, validate_selector
from crs_controller.core.durations import parse_duration
from crs_controller.core.errors import InvalidSpec
from crs_controller.core.rollout.windows import Window, verdict

__all__ = [
    "APPROVE_ANNOTATION",
    "ClusterState",
    "Phase",
    "Plan",
    "Policy",
    "Step",
    "compile_windows",
    "count",
    "halted_revision",
    "later",
    "plan",
    "policy_of",
    "revision",
    "step_of",
]

# On a CRS: "<revision>/<step>" approves that manual step of that revision.
APPROVE_ANNOTATION = "addons.crs.dev/approve"

# RolledBack: never planned here; a rollback's plan once Complete (engine's rollout).
Phase = Literal["Progressing", "Paused", "Halted", "Complete", "AwaitingApproval", "RolledBack"]

NAMES_SHOWN = 5
_PERCENT = re.compile(r"(\d+)%", re.ASCII)  # as Kubernetes reads maxUnavailable
_PREFIX = "xxh3:"


@dataclass(frozen=True)
class Step:
    """One wave: the clusters its selector matches first, then a soak once they are done."""

    selector: Mapping[str, Any] | None
    pause_after: float = 0.0
    manual: bool = False  # approval: Manual
    validation: bool = False  # its clusters are validated before it is done

    def __post_init__(self) -> None:
        # Refused here rather than at plan time, so a bad spec is reported even
        # while no cluster matches.
        validate_selector(self.selector)
        if not math.isfinite(self.pause_after) or self.pause_after < 0:
            raise ValueError(f"pause_after must be a non-negative number, not {self.pause_after}")


@dataclass(frozen=True)
class Policy:
    """``spec.rollout``; the default lets every cluster take a new revision at once."""

    max_concurrent: int | str = "100%"
    steps: tuple[Step, ...] = ()
    max_failures: int | str = 0
    paused: bool = False
    windows: tuple[Window, ...] = ()

    def __post_init__(self) -> None:
        count(self.max_concurrent, 0, round_up=True)
        count(self.max_failures, 0, round_up=False)


@dataclass(frozen=True)
class ClusterState:
    """What one matching cluster is on, as its binding and outcome tell."""

    name: str
    labels: Mapping[str, str]
    revision: str | None
    done: bool
    failed: bool  # its last pass failed taking ``revision``
    since: datetime | None
    held: bool = False  # the cluster holds updates (annotation)
    validated: bool = False  # its step's validation succeeded on the target


@dataclass(frozen=True)
class Plan:
    """The answer: who may apply the target now, and what the status should say."""

    admit: frozenset[str]
    phase: Phase
    step: int
    updated: int
    message: str
    wake_after: float | None  # when time alone changes the answer (a soak, a window ends)
    soaking: bool = False  # Progressing, waiting out the soak after ``step``
    held: int = 0  # clusters holding updates
    waiting_for: WaitingFor | None = None
    next_window: datetime | None = None  # waiting for a window: when one opens
    validate: frozenset[str] = frozenset()  # clusters whose validation is to run now


def halted_revision(
    target: str, clusters: Sequence[tuple[str | None, bool]], policy: Policy
) -> str | None:
    """A revision other than ``target`` whose own rollout the clusters' states halt,
    from (revision a cluster is on, failed taking it) pairs: more clusters failed
    taking it than ``maxFailures`` allows. The most failed first, then by name; None
    if none. A failure of a cluster that had the revision once its rollout completed
    is not a pair with failed set: it says nothing about that rollout.

    What a new leader, or this process after a restart, finds from the bindings
    alone, so that a revert still goes to that revision's clusters first."""
    failed = Counter(on for on, bad in clusters if bad and on not in (None, target))
    allowed = count(policy.max_failures, len(clusters), round_up=False)
    over = [on for on, n in failed.items() if on is not None and n > allowed]
    return min(over, key=lambda on: (-failed[on], on)) if over else None


def count(value: int | str, total: int, *, round_up: bool) -> int:
    """An int, or "N%" of ``total``: rounded up (at least 1 of a non-empty fleet) for
    ``maxConcurrent`` so a small fleet still moves, down for ``maxFailures`` so a
    percentage never tolerates more than it says."""
    if isinstance(value, bool) or not isinstance(value, int | str) or total < 0:
        raise ValueError(f"invalid count {value!r} of {total}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"invalid count {value}: must not be negative")
        return value
    match = _PERCENT.fullmatch(value)
    if match is None or int(match.group(1)) > 100:
        raise ValueError(f"invalid count {value!r}: expected an integer or a percentage 0%-100%")
    share = total * int(match.group(1))
    if round_up:
        return max(-(-share // 100), 1 if total else 0)
    return share // 100


def revision(resources: Sequence[tuple[str, str, str]]) -> str:
    """The revision of a CRS's sources: XXH3 over each (kind, name, hash) in order.

    Content-addressed, so reverting an edit gives back the earlier revision and the
    status does not depend on when or where it was computed.
    """
    hasher = xxhash.xxh3_64()
    for resource in resources:
        for part in resource:
            # Length-prefixed so that ("ab", "c") and ("a", "bc") cannot collide.
            data = part.encode()
            hasher.update(len(data).to_bytes(8, "big"))
            hasher.update(data)
    return _PREFIX + str(hasher.hexdigest())


@dataclass(frozen=True)
class _Position:
    """Where the ordinary step order stands: the 1-based step, and the end of its soak
    if it is soaking."""

    step: int
    soak_until: datetime | None = None
    validating: bool = False  # its clusters are done, their validation is not


def plan(
    target: str,
    clusters: Sequence[ClusterState],
    policy: Policy,
    now: datetime,
    halted: str | None = None,
    approved: int | None = None,
) -> Plan:
    """Which clusters may apply ``target`` now; ``halted`` is a revision whose rollout
    halted earlier, whose clusters take a newer one first; ``approved`` the step an
    approval names for ``target``."""
    fleet = _by_name(clusters)
    first_installs = frozenset(c.name for c in fleet if c.revision is None)
    active = tuple(c for c in fleet if not c.held)
    groups = _groups(active, policy.steps)
    now = _utc(now)
    position = _position(groups, policy.steps, target, now)
    updated = sum(_is_done(c, target) for c in fleet)
    base = Plan(first_installs, "Progressing", position.step, updated, "", None)
    base = replace(base, held=len(fleet) - len(active))
    if all(_is_done(c, target) for c in active) and not position.validating:
        return replace(base, phase="Complete", step=len(groups), message="complete")
    failed = [c.name for c in fleet if c.revision == target and c.failed]
    allowed = count(policy.max_failures, len(fleet), round_up=False)
    if len(failed) > allowed:
        message = _halted_message(failed, allowed) + ("; paused" if policy.paused else "")
        return replace(base, phase="Halted", message=message)
    if policy.paused:
        return replace(base, phase="Paused", message="paused")
    if position.validating:
        return _validating(base, groups[position.step - 1], target, len(groups))
    window = verdict(policy.windows, now)
    if not window.open:
        return _outside(base, window.changes_at, now)
    made = _progress(base, target, active, groups, policy, now, halted, approved, position)
    return _until_closing(made, window.changes_at, now)


def _validating(base: Plan, step: tuple[ClusterState, ...], target: str, steps: int) -> Plan:
    """The step's clusters are done: validate those not validated yet."""
    todo = frozenset(c.name for c in step if _is_done(c, target) and not c.validated)
    message = (
        f"step {base.step}/{steps}: validating on {len(todo)} of {len(step)} {_clusters(len(step))}"
    )
    return replace(base, message=message, waiting_for="Validation", validate=todo)


def _outside(base: Plan, opens: datetime | None, now: datetime) -> Plan:
    """No new revision starts outside the change windows: waits for the next opening."""
    if opens is None:
        # None found within the search's bounds (a year, or a cap on fire times):
        # look again in an hour rather than never.
        message = "outside the change windows: no opening found ahead"
        return replace(base, message=message, wake_after=3600.0, waiting_for="Window")
    message = f"outside the change windows until {_when(opens, now)}"
    wake = max(0.0, (opens - now).total_seconds())
    return replace(base, message=message, wake_after=wake, waiting_for="Window", next_window=opens)


def _until_closing(made: Plan, closes: datetime | None, now: datetime) -> Plan:
    """Inside the change windows: made again when they close (None: no closing
    found ahead, or no windows), or sooner if the plan says so."""
    if closes is None:
        return made
    wake = max(0.0, (closes - now).total_seconds())
    if made.wake_after is not None:
        wake = min(wake, made.wake_after)
    return replace(made, wake_after=wake)


def _progress(
    base: Plan,
    target: str,
    fleet: tuple[ClusterState, ...],
    groups: tuple[tuple[ClusterState, ...], ...],
    policy: Policy,
    now: datetime,
    halted: str | None,
    approved: int | None,
    position: _Position,
) -> Plan:
    """Who may update now, and what the status says."""
    prior = tuple(c for c in fleet if halted not in (None, target) and c.revision == halted)
    if not prior and position.soak_until is not None:
        until = position.soak_until
        message = f"soaking after step {position.step} until {_when(until, now)}"
        wake = (until - now).total_seconds()
        return replace(base, message=message, wake_after=wake, soaking=True)
    limit = max(1, count(policy.max_concurrent, len(fleet), round_up=True))
    budget = limit - sum(_is_updating(c, target) for c in fleet)
    where = f"step {position.step}/{len(groups)}"
    if prior:
        admitted = _admit(prior, target, budget)
        message = f"first the {len(prior)} {_clusters(len(prior))} on halted revision {halted}"
        return replace(base, admit=base.admit | admitted, message=f"{where}: {message}")
    step = groups[position.step - 1]
    if _asks_approval(policy, position.step, step, target) and approved != position.step:
        message = f"{where} awaits approval"
        return replace(base, phase="AwaitingApproval", message=message, waiting_for="Approval")
    admitted = _admit(step, target, budget)
    return replace(
        base, admit=base.admit | admitted, message=f"{where}: {_step_message(step, target)}"
    )


def _asks_approval(
    policy: Policy, number: int, step: tuple[ClusterState, ...], target: str
) -> bool:
    """A manual step that has not started: none of its clusters is on the target,
    and one of them needs it."""
    if number > len(policy.steps) or not policy.steps[number - 1].manual:
        return False
    started = any(c.revision == target for c in step)
    return not started and any(c.revision not in (None, target) for c in step)


def _admit(group: tuple[ClusterState, ...], target: str, budget: int) -> frozenset[str]:
    """The first ``budget`` clusters of ``group`` that need the target: those not on it
    yet, then retries of those that failed it, each in name order."""
    fresh = [c for c in group if c.revision is not None and c.revision != target]
    retries = [c for c in group if c.revision == target and c.failed]
    return frozenset(c.name for c in (fresh + retries)[: max(0, budget)])


def _position(
    groups: tuple[tuple[ClusterState, ...], ...],
    steps: tuple[Step, ...],
    target: str,
    now: datetime,
) -> _Position:
    """The first step that is not done, or whose validation or soak is not."""
    for index, group in enumerate(groups):
        if not all(_is_done(c, target) for c in group):
            return _Position(index + 1)
        step = steps[index] if index < len(steps) else None
        if step is not None and step.validation and not all(c.validated for c in group):
            return _Position(index + 1, validating=True)
        pause = step.pause_after if step is not None else 0.0
        times = [_utc(c.since) for c in group if c.since is not None]
        if pause and times:  # a step without clusters (or times) is done at once
            until = later(max(times), pause)
            if until > now:
                return _Position(index + 1, until)
    return _Position(len(groups))


def _groups(
    fleet: tuple[ClusterState, ...], steps: tuple[Step, ...]
) -> tuple[tuple[ClusterState, ...], ...]:
    """The clusters of each step, in name order; the last group is the implicit step
    of those matching no selector."""
    members: list[list[ClusterState]] = [[] for _ in range(len(steps) + 1)]
    for cluster in fleet:
        members[step_of(steps, cluster.labels) - 1].append(cluster)
    return tuple(tuple(group) for group in members)


def step_of(steps: Sequence[Step], labels: Mapping[str, str]) -> int:
    """The step (1-based) of a cluster with ``labels``: the first whose selector
    matches them, else the implicit last step, ``len(steps) + 1``."""
    return next(
        (i + 1 for i, step in enumerate(steps) if selector_matches(step.selector, labels)),
        len(steps) + 1,
    )


def _by_name(clusters: Sequence[ClusterState]) -> tuple[ClusterState, ...]:
    """The clusters in name order, so the plan does not depend on the input's order."""
    fleet = tuple(sorted(clusters, key=lambda c: c.name))
    for before, after in itertools.pairwise(fleet):
        if before.name == after.name:
            raise ValueError(f"cluster {before.name} appears twice")
    return fleet


def _is_done(cluster: ClusterState, target: str) -> bool:
    return cluster.revision == target and cluster.done and not cluster.failed


def _is_updating(cluster: ClusterState, target: str) -> bool:
    return cluster.revision == target and not cluster.done and not cluster.failed


def _step_message(step: tuple[ClusterState, ...], target: str) -> str:
    done = sum(_is_done(c, target) for c in step)
    failed = sum(c.revision == target and c.failed for c in step)
    message = f"{done} of {len(step)} {_clusters(len(step))} updated"
    return message + (f", {failed} failed" if failed else "")


def _halted_message(failed: list[str], allowed: int) -> str:
    shown = ", ".join(failed[:NAMES_SHOWN])
    more = f" and {len(failed) - NAMES_SHOWN} more" if len(failed) > NAMES_SHOWN else ""
    counted = f"{len(failed)} {_clusters(len(failed))} failed (maximum {allowed})"
    return f"halted: {counted}: {shown}{more}"


def _clusters(n: int) -> str:
    return "cluster" if n == 1 else "clusters"


def _when(moment: datetime, now: datetime) -> str:
    if moment.date() == now.date():
        return moment.strftime("%H:%M:%SZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def later(moment: datetime, seconds: float) -> datetime:
    """``moment`` plus ``seconds``, or the last moment there is if that is beyond it:
    ``since`` comes from a binding, which tenants may write (9999-12-31T23:59:59Z)."""
    try:
        return moment + timedelta(seconds=seconds)
    except OverflowError:
        return datetime.max.replace(tzinfo=moment.tzinfo)


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def compile_windows(spec: RolloutSpec) -> tuple[Window, ...]:
    """``spec.rollout.windows``, checked once; InvalidSpec names the field."""
    windows = []
    for index, window in enumerate(spec.windows or ()):
        where = f"spec.rollout.windows[{index}]"
        try:
            duration = parse_duration(window.duration)
            windows.append(Window(window.kind, window.schedule, duration, window.time_zone))
        except (ValueError, InvalidSpec) as exc:
            raise InvalidSpec(f"{where}: {exc}") from None
    return tuple(windows)


def policy_of(spec: RolloutSpec, pauses: Sequence[float], windows: Sequence[Window] = ()) -> Policy:
    """The planner's policy for ``spec.rollout``: ``pauses`` are its steps'
    pauseAfter in seconds and ``windows`` its change windows (both parsed once with
    the CRS), selectors in API form."""
    steps = tuple(
        Step(
            to_api(s.cluster_selector),
            pause,
            manual=s.approval == "Manual",
            validation=s.validation is not None,
        )
        for s, pause in zip(spec.steps, pauses, strict=True)
    )
    return Policy(spec.max_concurrent, steps, spec.max_failures, spec.paused, tuple(windows))
