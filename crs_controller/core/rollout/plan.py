"""The rollout planner: which clusters may take revision R now (Reconcile mode).

A pure function of what each cluster is on, the ``spec.rollout`` policy and the
clock, so the CRS reconcile can call it on every pass, a restart cannot change its
answer, and tables can test it without sleeping. Nothing is remembered between
calls except what the caller passes back in (``halted``: the revision whose
rollout last halted, remembered by the caller or found from the clusters' states by
``halted_revision``).

The plan is made in two parts. ``planned`` reads the rollout's progress (phase,
step, soak, message, what it waits for) from counts alone: a ``Share``
(``core.rollout.shares``) of every cluster, or the shares of disjoint sets of them
combined. ``admit`` then names, from the clusters a caller holds, the ones that may
take the target now and the ones to validate. ``plan`` is both over every cluster.

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
  content rolled out again later is not refused forever. A failed cluster whose
  retry is held (by this plan, a hold, the budget) is still ``failed``: the caller
  keeps its failure as its outcome while it waits, else the halt would lift, the
  retry be admitted, fail again and halt it again on every other pass.
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
- Under a plan made from shares, the gate's ``budget`` is the whole fleet's
  (``maxConcurrent`` less the clusters updating in every share): ``admit`` lets a
  caller's own clusters through up to the number of admissions it is given, never
  more than that budget, so callers holding parts of a fleet split it between them.
  First installs and validations are not budgeted: each names its own.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

import xxhash

from crs_controller.core.api.models import WaitingFor
from crs_controller.core.rollout.policy import (
    Policy,
    Step,
    compile_windows,
    count,
    policy_of,
    step_of,
)
from crs_controller.core.rollout.shares import (
    NAMES_SHOWN,
    ClusterState,
    Group,
    Share,
    by_name,
    is_done,
    share_of,
    utc,
)
from crs_controller.core.rollout.windows import verdict

# The planner's inputs (core.rollout.policy, core.rollout.shares) are named here too.
__all__ = [
    "APPROVE_ANNOTATION",
    "ClusterState",
    "Gate",
    "Phase",
    "Plan",
    "Policy",
    "Step",
    "admit",
    "compile_windows",
    "count",
    "halted_of",
    "halted_revision",
    "later",
    "plan",
    "planned",
    "policy_of",
    "portion",
    "revision",
    "step_of",
    "wanting",
]

# On a CRS: "<revision>/<step>" approves that manual step of that revision.
APPROVE_ANNOTATION = "addons.crs.dev/approve"

# RolledBack: never planned here; a rollback's plan once Complete (engine's rollout).
Phase = Literal["Progressing", "Paused", "Halted", "Complete", "AwaitingApproval", "RolledBack"]

_PREFIX = "xxh3:"


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


@dataclass(frozen=True)
class Gate:
    """Which clusters a plan made from shares lets take ``target`` now: those of
    ``group`` (a step, 1-based; 0: those on the ``halted`` revision; None: none) that
    need it, at most ``budget`` over the whole fleet; and which it validates: the done
    clusters of step ``validating`` (None: none). First installs always go."""

    target: str
    steps: tuple[Step, ...]
    halted: str | None = None
    group: int | None = None
    budget: int = 0
    validating: int | None = None


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
    failed = Counter(on for on, bad in clusters if bad and on is not None and on != target)
    return _most_failed(failed, len(clusters), policy)


def halted_of(share: Share, policy: Policy) -> str | None:
    """``halted_revision`` of the clusters of ``share`` (of them all, or of shares of
    them all combined), from the revisions it keeps."""
    failed = {other.revision: other.failed for other in share.others}
    return _most_failed(failed, share.fleet, policy)


def _most_failed(failed: Mapping[str, int], fleet: int, policy: Policy) -> str | None:
    """The revision the most clusters failed taking, then the first by name, if more
    failed it than ``maxFailures`` of ``fleet`` allows."""
    allowed = count(policy.max_failures, fleet, round_up=False)
    over = [on for on, n in failed.items() if n > allowed]
    return min(over, key=lambda on: (-failed[on], on)) if over else None


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
    made, gate = planned(share_of(target, clusters, policy, halted), policy, now, approved)
    return admit(made, gate, clusters)


def planned(
    share: Share, policy: Policy, now: datetime, approved: int | None = None
) -> tuple[Plan, Gate]:
    """The plan the clusters of ``share`` make, naming none of them yet (``admit``
    does), and the gate they pass through."""
    if share.steps != len(policy.steps):
        raise ValueError(f"a share of {share.steps} steps planned with {len(policy.steps)}")
    now = utc(now)
    position = _position(share, policy.steps, now)
    gate = Gate(share.target, policy.steps, share.halted)
    base = Plan(frozenset(), "Progressing", position.step, share.updated, "", None)
    base = replace(base, held=share.held)
    active = share.fleet - share.held
    if sum(g.done for g in share.groups) == active and not position.validating:
        return replace(base, phase="Complete", step=len(share.groups), message="complete"), gate
    allowed = count(policy.max_failures, share.fleet, round_up=False)
    if share.failed > allowed:
        message = _halted_message(share, allowed) + ("; paused" if policy.paused else "")
        return replace(base, phase="Halted", message=message), gate
    if policy.paused:
        return replace(base, phase="Paused", message="paused"), gate
    if position.validating:
        made = _validating(base, share.groups[position.step - 1], len(share.groups))
        return made, replace(gate, validating=position.step)
    window = verdict(policy.windows, now)
    if not window.open:
        return _outside(base, window.changes_at, now), gate
    made, gate = _progress(base, gate, share, policy, now, approved, position)
    return _until_closing(made, window.changes_at, now), gate


def admit(
    made: Plan, gate: Gate, own: Sequence[ClusterState], admissions: int | None = None
) -> Plan:
    """``made`` with the clusters of ``own`` it lets through: every first install, and
    at most ``admissions`` (at most the gate's budget, which is the default) of the
    gate's group that need the target, those not on it yet then retries of those that
    failed it, each in name order; and those of the validating step to validate."""
    fleet = by_name(own)
    first = frozenset(c.name for c in fleet if c.revision is None)
    active = [c for c in fleet if not c.held]
    limit = gate.budget if admissions is None else min(admissions, gate.budget)
    wanting = itertools.islice(_wanting(gate, active), max(0, limit))
    validate = frozenset(
        c.name
        for c in active
        if is_done(c, gate.target)
        and not c.validated
        and gate.validating is not None
        and step_of(gate.steps, c.labels) == gate.validating
    )
    return replace(made, admit=made.admit | first | {c.name for c in wanting}, validate=validate)


def wanting(share: Share, gate: Gate) -> int:
    """How many of the clusters of ``share`` the gate wants (``admit`` lets them
    through up to its admissions): those on the halted revision for group 0; else
    the fresh ones and the retries of its group; none without a group."""
    if gate.group is None:
        return 0
    if gate.group == 0:
        return next((o.clusters for o in share.others if o.revision == gate.halted), 0)
    group = share.groups[gate.group - 1]
    return group.fresh + group.failed


def portion(budget: int, candidates: Mapping[str, int], me: str) -> int:
    """``me``'s part of a gate's ``budget`` (admissions over the whole fleet) among
    members holding ``candidates`` clusters the gate wants each: the budget, up to
    all the candidates, split in proportion to them by largest remainder, ties to the
    first identity. No member gets more than its candidates, the parts add up to
    min(budget, candidates in all), and every member computes the same split."""
    if any(n < 0 for n in candidates.values()):
        raise ValueError("a member's candidates are not negative")
    total = sum(candidates.values())
    given = min(max(0, budget), total)
    if me not in candidates or given == 0:
        return 0
    floors = {m: given * n // total for m, n in candidates.items()}
    left = given - sum(floors.values())
    # Each left-over admission goes to a member with a remainder: never past its candidates.
    order = sorted(candidates, key=lambda m: (-(given * candidates[m] % total), m))
    return floors[me] + (me in order[:left])


def _wanting(gate: Gate, active: Sequence[ClusterState]) -> Iterator[ClusterState]:
    """The clusters of the gate's group that need the target, in the order admitted."""
    if gate.group is None:
        return iter(())
    if gate.group == 0:
        return (c for c in active if c.revision == gate.halted)
    fresh = (c for c in active if c.revision is not None and c.revision != gate.target)
    retries = (c for c in active if c.revision == gate.target and c.failed)
    chained = itertools.chain(fresh, retries)
    return (c for c in chained if step_of(gate.steps, c.labels) == gate.group)


def _validating(base: Plan, step: Group, steps: int) -> Plan:
    """The step's clusters are done: validate those not validated yet."""
    todo, of = step.unvalidated, step.clusters
    message = f"step {base.step}/{steps}: validating on {todo} of {of} {_clusters(of)}"
    return replace(base, message=message, waiting_for="Validation")


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
    gate: Gate,
    share: Share,
    policy: Policy,
    now: datetime,
    approved: int | None,
    position: _Position,
) -> tuple[Plan, Gate]:
    """Who may update now, and what the status says."""
    prior = next((o.clusters for o in share.others if o.revision == share.halted), 0)
    if not prior and position.soak_until is not None:
        until = position.soak_until
        message = f"soaking after step {position.step} until {_when(until, now)}"
        wake = (until - now).total_seconds()
        return replace(base, message=message, wake_after=wake, soaking=True), gate
    limit = max(1, count(policy.max_concurrent, share.fleet - share.held, round_up=True))
    budget = max(0, limit - sum(g.updating for g in share.groups))
    where = f"step {position.step}/{len(share.groups)}"
    if prior:
        message = f"first the {prior} {_clusters(prior)} on halted revision {share.halted}"
        return replace(base, message=f"{where}: {message}"), replace(gate, group=0, budget=budget)
    step = share.groups[position.step - 1]
    if _asks_approval(policy, position.step, step) and approved != position.step:
        message = f"{where} awaits approval"
        made = replace(base, phase="AwaitingApproval", message=message, waiting_for="Approval")
        return made, gate
    made = replace(base, message=f"{where}: {_step_message(step)}")
    return made, replace(gate, group=position.step, budget=budget)


def _asks_approval(policy: Policy, number: int, step: Group) -> bool:
    """A manual step that has not started: none of its clusters is on the target,
    and one of them needs it."""
    if number > len(policy.steps) or not policy.steps[number - 1].manual:
        return False
    started = step.done + step.failed + step.updating > 0
    return not started and step.fresh > 0


def _position(share: Share, steps: tuple[Step, ...], now: datetime) -> _Position:
    """The first step that is not done, or whose validation or soak is not."""
    for index, group in enumerate(share.groups):
        if group.done < group.clusters:
            return _Position(index + 1)
        step = steps[index] if index < len(steps) else None
        if step is not None and step.validation and group.validated < group.clusters:
            return _Position(index + 1, validating=True)
        pause = step.pause_after if step is not None else 0.0
        if pause and group.since is not None:  # a step without clusters (or times) is done at once
            until = later(group.since, pause)
            if until > now:
                return _Position(index + 1, until)
    return _Position(len(share.groups))


def _step_message(step: Group) -> str:
    message = f"{step.done} of {step.clusters} {_clusters(step.clusters)} updated"
    return message + (f", {step.failed} failed" if step.failed else "")


def _halted_message(share: Share, allowed: int) -> str:
    shown = ", ".join(share.failed_names)
    more = f" and {share.failed - NAMES_SHOWN} more" if share.failed > NAMES_SHOWN else ""
    counted = f"{share.failed} {_clusters(share.failed)} failed (maximum {allowed})"
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
