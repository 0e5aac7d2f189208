"""The mode of a ClusterResourceSet as one strategy, compiled once from its spec.

``compile_strategy`` runs when a CRS is parsed (``core.spec.objects.parse_crs``) and turns
the spec into an ``ApplyOnce`` or a ``Reconcile``: the per-resource decision (apply?
every object or only the changed ones? check drift?), how the applier sends objects,
the drift settings, and the spec's durations in seconds. A pass reads attributes of
it; nothing is parsed again or compared against a mode's name. Like Cluster API's
``clusterresourceset_scope.go``, which holds needsApply and apply together.

Each decision is a pure function of what the binding recorded, the current hash and
the time, so tables can test it and a restart cannot change it.

A pass uses the strategy of its pair (``for_pair``): the intervals of each CRS on each
cluster (``reapplyInterval``, ``driftCheckInterval``) shortened by a fixed offset of
up to ``JITTER`` of the interval, a hash of the pair (``jittered``), so the clusters
one wave applied do not reapply and check drift as one wave each interval. The
offset is the same in every replica and after a restart, and applies to every period
of the pair, the first after an apply or an edit too: a pair is due up to a tenth of
its interval before the interval, never after it (the interval stays a promise),
never under the 10s floor (an interval that is the floor stays there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime
from typing import ClassVar, Literal, Protocol

import xxhash

from crs_controller.core.api.models import (
    DEFAULT_DRIFT_CHECK_INTERVAL,
    ClusterResourceSetSpec,
    HealthCheck,
    Mode,
    PairKey,
)
from crs_controller.core.durations import parse_duration
from crs_controller.core.errors import InvalidSpec

__all__ = [
    "JITTER",
    "MIN_INTERVAL",
    "Apply",
    "ApplyOnce",
    "ApplyOptions",
    "CheckDrift",
    "Decision",
    "Drift",
    "Durations",
    "Reconcile",
    "RecordedResource",
    "Scope",
    "Skip",
    "Strategy",
    "compile_strategy",
    "jittered",
    "pair_spread",
]

DriftMode = Literal["None", "Generation", "Content"]
# Which of a resource's objects an apply sends: every one, or only those whose own
# content changed since their last successful apply to the cluster.
Scope = Literal["All", "Changed"]

DEFAULT_DRIFT_SECONDS = parse_duration(DEFAULT_DRIFT_CHECK_INTERVAL)
# The shortest reapplyInterval and driftCheckInterval besides 0 (the CRD's CEL rules
# say the same).
MIN_INTERVAL = "10s"
MIN_INTERVAL_SECONDS = parse_duration(MIN_INTERVAL)
DEFAULT_HEALTH_SECONDS = parse_duration(HealthCheck().timeout)
# How far each pair's reapply and drift intervals move from the spec's, either way.
JITTER = 0.1


def pair_spread(pair: PairKey) -> float:
    """A number in [-1, 1) fixed for a CRS on a cluster: XXH3-64 of its namespace, CRS
    and cluster names (NUL-separated, so ("ab", "c") and ("a", "bc") differ), the same
    in every process and version, unlike Python's salted ``hash``."""
    digest = xxhash.xxh3_64_intdigest("\x00".join(pair).encode())
    return digest / 2**63 - 1.0


def jittered(interval: float, pair: PairKey) -> float:
    """``interval`` shortened by up to ``JITTER`` of it, by the pair's fixed offset, so
    a pair is still reapplied or checked at least every interval; never below the
    floor (nor below ``interval`` when that is under the floor)."""
    moved = interval * (1.0 - JITTER * (pair_spread(pair) + 1.0) / 2.0)
    return max(moved, min(interval, MIN_INTERVAL_SECONDS))


class RecordedResource(Protocol):
    """What a binding remembers about one resource on one cluster."""

    @property
    def hash(self) -> str: ...

    @property
    def applied(self) -> bool: ...

    @property
    def last_applied_time(self) -> datetime | None: ...


# --- the values a strategy holds -------------------------------------------------


@dataclass(frozen=True)
class Durations:
    """A spec's durations in seconds, parsed once."""

    reapply_interval: float | None = None  # None: no interval reapplies
    drift_check_interval: float = DEFAULT_DRIFT_SECONDS
    health_timeout: float = DEFAULT_HEALTH_SECONDS  # healthCheck.timeout
    pause_after: tuple[float, ...] = ()  # each rollout step's soak, in spec order
    # each rollout step's validation timeout, in spec order (None: no validation)
    validation_timeout: tuple[float | None, ...] = ()

    def __post_init__(self) -> None:
        if self.reapply_interval is not None and not self.reapply_interval > 0:
            raise ValueError("reapply_interval must be positive (None disables it)")
        if not self.drift_check_interval > 0:
            raise ValueError("drift_check_interval must be positive")
        for seconds in (self.health_timeout, *self.pause_after):
            if not (math.isfinite(seconds) and seconds >= 0):
                raise ValueError(f"a duration must be a non-negative number, not {seconds}")

    def for_pair(self, pair: PairKey) -> Durations:
        """The reapply and drift intervals of one CRS on one cluster (``jittered``)."""
        reapply = self.reapply_interval
        return replace(
            self,
            reapply_interval=None if reapply is None else jittered(reapply, pair),
            drift_check_interval=jittered(self.drift_check_interval, pair),
        )


@dataclass(frozen=True)
class ApplyOptions:
    """How the applier sends a resource's objects: ``only_missing`` creates what the
    cluster lacks and leaves existing objects untouched (ApplyOnce); otherwise a
    server-side apply with force takes the fields over (Reconcile)."""

    only_missing: bool


@dataclass(frozen=True)
class Drift:
    """How a CRS checks for drift: the mode ("None": never) and how often."""

    mode: DriftMode
    interval: float

    @property
    def enabled(self) -> bool:
        return self.mode != "None"


@dataclass(frozen=True)
class Skip:
    """Leave the resource as it is on this cluster."""


@dataclass(frozen=True)
class Apply:
    """Send the resource's objects: all of them (never applied, or an interval
    reapply), or only the changed ones (its content changed, or a retry)."""

    scope: Scope = "All"


@dataclass(frozen=True)
class CheckDrift:
    """Read what the resource put on the cluster; reapply if someone changed it."""

    mode: Literal["Generation", "Content"]


Decision = Skip | Apply | CheckDrift


# --- the strategies --------------------------------------------------------------


class Strategy(Protocol):
    """A compiled mode: its decisions and the settings that go with them."""

    @property
    def name(self) -> Mode: ...

    @property
    def apply(self) -> ApplyOptions: ...

    @property
    def drift(self) -> Drift: ...

    @property
    def durations(self) -> Durations: ...

    def needs_apply(
        self, recorded: RecordedResource | None, current_hash: str, now: datetime
    ) -> bool: ...

    def scope(self, recorded: RecordedResource | None, now: datetime) -> Scope: ...

    def next_due(self, recorded: RecordedResource | None, now: datetime) -> float | None: ...

    def decide(
        self, recorded: RecordedResource | None, current_hash: str, now: datetime, drift_due: bool
    ) -> Decision: ...

    def for_pair(self, pair: PairKey) -> Strategy:
        """This strategy with the intervals of one CRS on one cluster
        (``Durations.for_pair``): what a pass of the pair decides with."""
        ...


@dataclass(frozen=True)
class ApplyOnce:
    """Apply each resource once per cluster; later changes are ignored (CAPI's
    default), and drift is never checked."""

    durations: Durations = Durations()
    name: ClassVar[Mode] = "ApplyOnce"
    # Objects already on the workload cluster are left untouched, so the applier only
    # creates what is missing instead of taking ownership of existing objects.
    apply: ClassVar[ApplyOptions] = ApplyOptions(only_missing=True)

    @property
    def drift(self) -> Drift:
        return Drift("None", self.durations.drift_check_interval)

    def needs_apply(
        self, recorded: RecordedResource | None, current_hash: str, now: datetime
    ) -> bool:
        return recorded is None or not recorded.applied

    def scope(self, recorded: RecordedResource | None, now: datetime) -> Scope:
        return "All"  # only what is missing is created anyway

    def next_due(self, recorded: RecordedResource | None, now: datetime) -> float | None:
        return None

    def decide(
        self, recorded: RecordedResource | None, current_hash: str, now: datetime, drift_due: bool
    ) -> Decision:
        return _decide(self, recorded, current_hash, now, "None")

    def for_pair(self, pair: PairKey) -> ApplyOnce:
        return replace(self, durations=self.durations.for_pair(pair))


@dataclass(frozen=True)
class Reconcile:
    """Reapply when the content changed, every ``reapply_interval`` seconds if set,
    and when a drift check finds the objects changed on the cluster."""

    durations: Durations = Durations()
    drift_mode: DriftMode = "None"
    name: ClassVar[Mode] = "Reconcile"
    apply: ClassVar[ApplyOptions] = ApplyOptions(only_missing=False)

    @property
    def drift(self) -> Drift:
        return Drift(self.drift_mode, self.durations.drift_check_interval)

    @property
    def reapply_interval(self) -> float | None:
        return self.durations.reapply_interval

    def needs_apply(
        self, recorded: RecordedResource | None, current_hash: str, now: datetime
    ) -> bool:
        return (
            recorded is None
            or not recorded.applied
            or recorded.hash != current_hash
            or self.next_due(recorded, now) == 0
        )

    def scope(self, recorded: RecordedResource | None, now: datetime) -> Scope:
        """An interval reapply sends everything; a change or a retry only what changed
        (a failed object kept its old hash, so it is sent again)."""
        if recorded is None or self.next_due(recorded, now) == 0:
            return "All"
        return "Changed"

    def next_due(self, recorded: RecordedResource | None, now: datetime) -> float | None:
        """Seconds until the interval reapply is due: 0 if due now, None without interval."""
        interval = self.durations.reapply_interval
        if interval is None:
            return None
        if recorded is None or recorded.last_applied_time is None:
            return 0.0  # never applied, or the time was lost: due now
        elapsed = (now - recorded.last_applied_time).total_seconds()
        return max(0.0, interval - elapsed)

    def decide(
        self, recorded: RecordedResource | None, current_hash: str, now: datetime, drift_due: bool
    ) -> Decision:
        """``drift_due``: this pair's drift check is due in this pass (the schedule's
        answer); it matters only when the strategy checks drift."""
        return _decide(self, recorded, current_hash, now, self.drift_mode if drift_due else "None")

    def for_pair(self, pair: PairKey) -> Reconcile:
        return replace(self, durations=self.durations.for_pair(pair))


def _decide(
    strategy: Strategy,
    recorded: RecordedResource | None,
    current_hash: str,
    now: datetime,
    drift_due: DriftMode,
) -> Decision:
    """What to do with one resource on one cluster in this pass; ``drift_due`` is the
    drift mode to check with in this pass, "None" for no check. A change to apply
    comes first: it rewrites the objects anyway."""
    if strategy.needs_apply(recorded, current_hash, now):
        return Apply(strategy.scope(recorded, now))
    if drift_due != "None":
        return CheckDrift(drift_due)
    return Skip()


# --- compiling a spec ------------------------------------------------------------


def compile_strategy(spec: ClusterResourceSetSpec) -> ApplyOnce | Reconcile:
    """The strategy of a spec the model accepted. Raises InvalidSpec for what the
    CRD's CEL rules refuse too (``reapplyInterval`` or ``driftDetection`` outside
    Reconcile), and for a duration Go's int64 nanoseconds cannot hold. An interval
    below ``MIN_INTERVAL``, which the CRD refuses on write, is taken as the floor."""
    rollout_steps = spec.rollout.steps if spec.rollout is not None else []
    health = spec.health_check or HealthCheck()
    durations = Durations(
        reapply_interval=_reapply_interval(spec.mode, spec.reapply_interval),
        drift_check_interval=_drift_interval(spec.drift_check_interval),
        health_timeout=parse_duration(health.timeout),
        pause_after=tuple(parse_duration(s.pause_after or "0") for s in rollout_steps),
        validation_timeout=tuple(
            None if s.validation is None else parse_duration(s.validation.timeout)
            for s in rollout_steps
        ),
    )
    if spec.mode == "ApplyOnce":
        if spec.drift_detection != "None":
            # Refused rather than ignored: the user expects drift repairs that would never come.
            raise InvalidSpec("spec.driftDetection other than None only applies to mode Reconcile")
        return ApplyOnce(durations)
    return Reconcile(durations, spec.drift_detection)


def _reapply_interval(mode: Mode, text: str | None) -> float | None:
    """``reapplyInterval: 0`` disables interval reapplies, like ``0`` periods elsewhere
    in Kubernetes."""
    if text is None:
        return None
    if mode == "ApplyOnce":
        # Refused rather than ignored: the user expects reapplies that would never come.
        raise InvalidSpec("reapplyInterval only applies to mode Reconcile")
    return _at_least_the_floor(parse_duration(text)) or None


def _drift_interval(text: str | None) -> float:
    """An interval of 0 (or none) means the default."""
    seconds = parse_duration(text or DEFAULT_DRIFT_CHECK_INTERVAL)
    return _at_least_the_floor(seconds) or DEFAULT_DRIFT_SECONDS


def _at_least_the_floor(seconds: float) -> float:
    """``seconds``, raised to ``MIN_INTERVAL`` when shorter (0 keeps its meaning): each
    interval is a pass over every matching cluster, so a tenant's ``1ns`` would keep
    the controller reapplying, listing and writing bindings without a pause. The CRD
    refuses a shorter one on write; one stored before is taken as the floor rather
    than refused, so an upgrade does not stop a set that worked."""
    return max(seconds, MIN_INTERVAL_SECONDS) if seconds > 0 else seconds
