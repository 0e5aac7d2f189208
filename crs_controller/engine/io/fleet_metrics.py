"""Per-CRS gauges with a bounded number of series, however many CRSs tenants make.

A CRS's series carry its own ``namespace`` and ``crs`` labels while there is room: at
most ``PER_NAMESPACE`` CRSs of one namespace and ``TOTAL`` label pairs in all, first
come first served (a CRS keeps its place until it is deleted). A CRS that finds no
room is counted, summed with the others that found none, under its namespace's
``crs="_other"`` while that pair still fits in ``TOTAL``, else under the one pair
``namespace="_other", crs="_other"``. So each gauge has at most ``TOTAL + 1`` label
pairs times its values. Summed, the gauges stay right: a ``_other`` series is the
sum over the CRSs it holds.

The revisions of ``crs_rollout_clusters`` are bounded too, since the revision a
cluster is on comes from its binding, which tenants can write: a CRS shows by name
only revisions the controller computed: its target, the revision a rollback
replaces, of the revisions its status's history keeps (and the one a rollout halted
on) the one most of its other clusters are on (the one a rollout moves them from),
and ``none``; any other revision is summed under ``revision="_other"``. A CRS
summed under a ``_other`` pair shows only ``none`` and ``_other``. So at most five
revisions per CRS, however many bindings differ.
"""

from __future__ import annotations

import contextlib
from collections import Counter as Tally
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping, Sequence

from prometheus_client import Counter, Gauge

from crs_controller.core.api.models import CRSBinding
from crs_controller.core.state.fleet import CLUSTER_STATES, cluster_state
from crs_controller.core.state.status import HELD_REASONS, NO_BUILD, outcome_of

__all__ = [
    "NOT_INSTALLED",
    "OTHER",
    "RepeatWatch",
    "SeriesSlots",
    "SlottedGauge",
    "bounded_revisions",
    "clear_rollout",
    "drift_corrected",
    "fleet_counts",
    "forget_crs",
    "show_fleet",
    "show_rollout",
]

OTHER = "_other"
NOT_INSTALLED = "none"  # the revision of a cluster nothing is installed on yet
TOTAL = 200
PER_NAMESPACE = 20

Labels = tuple[str, str]


class SeriesSlots:
    """Which (namespace, crs) label values each CRS's series carry."""

    def __init__(self, total: int = TOTAL, per_namespace: int = PER_NAMESPACE) -> None:
        self._total = total
        self._per_namespace = per_namespace
        self._of: dict[Labels, Labels] = {}
        self._members: Tally[Labels] = Tally()  # CRSs per label pair in use
        self._own: Tally[str] = Tally()  # CRSs with their own labels, per namespace

    def of(self, namespace: str, name: str) -> Labels:
        """The labels of this CRS's series, taking a place the first time."""
        key = (namespace, name)
        labels = self._of.get(key)
        if labels is None:
            labels = self._place(namespace, name)
            self._of[key] = labels
            self._members[labels] += 1
            if labels == key:
                self._own[namespace] += 1
        return labels

    def _place(self, namespace: str, name: str) -> Labels:
        # The one (_other, _other) pair is the extra one, beyond ``total``.
        room = len(self._members) - ((OTHER, OTHER) in self._members) < self._total
        if room and self._own[namespace] < self._per_namespace:
            return (namespace, name)
        if (namespace, OTHER) in self._members or room:
            return (namespace, OTHER)
        return (OTHER, OTHER)

    def placed(self, namespace: str, name: str) -> Labels | None:
        """The labels this CRS's series carry, if it has a place (none is taken)."""
        return self._of.get((namespace, name))

    def release(self, namespace: str, name: str) -> Labels | None:
        """The CRS is gone: its place is freed. Returns the labels it had, if any."""
        labels = self._of.pop((namespace, name), None)
        if labels is None:
            return None
        self._members[labels] -= 1
        if self._members[labels] <= 0:
            del self._members[labels]
        if labels == (namespace, name):
            self._own[namespace] -= 1
        return labels

    def holds(self, labels: Labels) -> bool:
        """Whether some CRS's series still carry these labels."""
        return labels in self._members


class SlottedGauge:
    """A gauge labelled ``namespace``, ``crs`` and one more label, whose per-CRS values
    are summed per label pair the slots give. ``always``: values of the third label
    shown (at 0) for every CRS; any other shows while its sum is not 0."""

    def __init__(self, gauge: Gauge, always: Sequence[str] = ()) -> None:
        self._gauge = gauge
        self._always = tuple(always)
        self._values: dict[Labels, dict[str, float]] = {}
        self._sums: dict[Labels, Tally[str]] = {}

    def show(self, labels: Labels, key: Labels, values: Mapping[str, float]) -> None:
        """Set CRS ``key``'s values; its series carry ``labels``."""
        before = self._values.get(key, {})
        self._values[key] = dict(values)
        sums = self._sums.setdefault(labels, Tally())
        sums.subtract(before)
        sums.update(values)
        self._publish(labels, set(before) | set(values))

    def forget(self, labels: Labels, key: Labels) -> None:
        """CRS ``key`` no longer adds to the series carrying ``labels``."""
        if key not in self._values:
            return
        before = self._values.pop(key)
        sums = self._sums.setdefault(labels, Tally())
        sums.subtract(before)
        self._publish(labels, set(before))

    def drop(self, labels: Labels) -> None:
        """No CRS carries these labels any more: their series go."""
        for value in set(self._sums.pop(labels, Tally())) | set(self._always):
            self._remove(labels, value)

    def _publish(self, labels: Labels, touched: Iterable[str]) -> None:
        sums = self._sums[labels]
        for value in (*self._always, *touched):
            total = sums.get(value, 0)
            if total or value in self._always:
                self._gauge.labels(*labels, value).set(total)
            else:
                sums.pop(value, None)
                self._remove(labels, value)

    def _remove(self, labels: Labels, value: str) -> None:
        with contextlib.suppress(KeyError):  # never shown
            self._gauge.remove(*labels, value)


# What holds a Waiting cluster back (core/state/status: the reasons recorded as held
# or waiting), all shown for every CRS.
WAITING_REASONS = (*HELD_REASONS, "DependencyNotReady", "WaitingForVersion", NO_BUILD)
ROLLOUT_PHASES = (
    "Progressing", "Paused", "Halted", "Complete", "AwaitingApproval", "RolledBack"
)  # fmt: skip

FLEET_CLUSTERS = Gauge(
    "crs_fleet_clusters",
    "Matching clusters of a CRS by state (Ready, Progressing, Waiting, Unreachable, Failed, "
    "Pending, as status shows them); CRSs past the series bound are summed under crs=_other",
    ["namespace", "crs", "state"],
)
FLEET_WAITING = Gauge(
    "crs_fleet_waiting_clusters",
    "Matching clusters of a CRS waiting, by reason; CRSs past the series bound are summed "
    "under crs=_other",
    ["namespace", "crs", "reason"],
)
CLUSTERS_BY_REVISION = Gauge(
    "crs_rollout_clusters",
    "Matching clusters of a CRS with a rollout, by the revision they are on (none: not "
    "installed; the target, the revision a rollback replaces and the most common other "
    "one the history keeps by name, the rest summed under _other)",
    ["namespace", "crs", "revision"],
)
ROLLOUT_PHASE = Gauge(
    "crs_rollout_phase",
    "1 for the phase the CRS's rollout is in (Progressing, Paused, Halted, Complete, "
    "AwaitingApproval, RolledBack), else 0; under crs=_other, how many of the CRSs it "
    "sums are in it",
    ["namespace", "crs", "phase"],
)
_SLOTS = SeriesSlots()
_FLEET = SlottedGauge(FLEET_CLUSTERS, CLUSTER_STATES)
_WAITING = SlottedGauge(FLEET_WAITING, WAITING_REASONS)
_REVISIONS = SlottedGauge(CLUSTERS_BY_REVISION)
_PHASE = SlottedGauge(ROLLOUT_PHASE, ROLLOUT_PHASES)
_GAUGES = (_FLEET, _WAITING, _REVISIONS, _PHASE)


def bounded_revisions(
    revisions: Mapping[str, int],
    named: Iterable[str | None],
    own: bool = True,
    known: Collection[str | None] = (),
) -> dict[str, int]:
    """The clusters on each revision as ``crs_rollout_clusters`` shows them (see the
    module's docstring): ``named`` (the target, the revision a rollback replaces),
    ``none``, and of the other revisions the controller ``known`` (the history's) the
    most common by name, the rest summed under ``_other``; without labels of its
    ``own`` (a CRS under a ``_other`` pair), only ``none`` and ``_other``."""
    keep = {NOT_INSTALLED}
    if own:
        keep |= {r for r in named if r}
        rest = {r: n for r, n in revisions.items() if r in known and r not in keep and n}
        if rest:
            keep.add(max(rest, key=lambda r: (rest[r], r)))
    shown: Tally[str] = Tally()
    for revision, count in revisions.items():
        shown[revision if revision in keep else OTHER] += count
    return dict(shown)


def show_rollout(
    namespace: str,
    name: str,
    revisions: Mapping[str, int],
    phase: str,
    named: Iterable[str | None] = (),
    known: Collection[str | None] = (),
) -> None:
    """Set both rollout gauges for one CRS, its revisions bounded (``bounded_revisions``:
    ``named`` are the target and the revision a rollback replaces, ``known`` the other
    revisions the controller computed); revisions no cluster is on any more go."""
    key = (namespace, name)
    labels = _SLOTS.of(namespace, name)
    shown = bounded_revisions(revisions, named, own=labels == key, known=known)
    _REVISIONS.show(labels, key, shown)
    _PHASE.show(labels, key, {phase: 1})


def clear_rollout(namespace: str, name: str) -> None:
    """No rollout of the CRS is planned now (none in its spec, no matching cluster,
    a source unreadable, paused, refused, being deleted), and its status shows none:
    its rollout series go, or it no longer adds to the ``_other`` series it was summed
    in. Its place and its other series stay."""
    key = (namespace, name)
    labels = _SLOTS.placed(namespace, name)
    if labels is None:
        return
    for gauge in (_REVISIONS, _PHASE):
        gauge.forget(labels, key)
        if labels == key:
            gauge.drop(labels)


def fleet_counts(
    clusters: Iterable[tuple[CRSBinding | None, bool | None]],
) -> tuple[Tally[str], Tally[str]]:
    """The clusters by state, and the Waiting ones by reason, from each one's binding
    entry for the CRS and whether it is on the CRS's revision (None: not known)."""
    states: Tally[str] = Tally()
    waiting: Tally[str] = Tally()
    for entry, current in clusters:
        state = cluster_state(entry, current)
        states[state] += 1
        outcome = outcome_of(entry)
        if state == "Waiting" and outcome is not None:
            waiting[outcome.reason] += 1
    return states, waiting


def show_fleet(
    namespace: str, name: str, clusters: Iterable[tuple[CRSBinding | None, bool | None]]
) -> None:
    """Set the fleet gauges of one CRS from its matching clusters (see ``fleet_counts``)."""
    key = (namespace, name)
    labels = _SLOTS.of(namespace, name)
    states, waiting = fleet_counts(clusters)
    _FLEET.show(labels, key, states)
    _WAITING.show(labels, key, waiting)
    # The drift counters exist at 0 from the first status on: an increase over a
    # series that appears with its first correction would miss that correction.
    DRIFT_CORRECTIONS.labels(*labels)
    DRIFT_REPEATS.labels(*labels)


def forget_crs(namespace: str, name: str) -> None:
    """The CRS is gone: its counts leave the gauges (fleet, rollout, drift), its place
    is freed."""
    _REPEATS.forget(namespace, name)
    labels = _SLOTS.release(namespace, name)
    if labels is None:
        return
    key = (namespace, name)
    for gauge in _GAUGES:
        gauge.forget(labels, key)
        if not _SLOTS.holds(labels):
            gauge.drop(labels)
    if not _SLOTS.holds(labels):
        for counter in (DRIFT_CORRECTIONS, DRIFT_REPEATS):
            with contextlib.suppress(KeyError):  # never counted
                counter.remove(*labels)


# -- drift corrected again and again -----------------------------------------------------
REPEAT_WINDOW = 3600.0  # seconds: a correction this soon after the last is a repeat

DRIFT_CORRECTIONS = Counter(
    "crs_drift_corrections_total",
    "Passes that reapplied a CRS's resources on a cluster after drift",
    ["namespace", "crs"],
)
DRIFT_REPEATS = Counter(
    "crs_drift_corrections_repeated_total",
    "Drift corrections on a cluster whose previous correction for the same CRS was less "
    "than an hour before (something on the cluster keeps undoing the CRS)",
    ["namespace", "crs"],
)


class RepeatWatch:
    """When each (namespace, CRS, cluster) was last corrected, within the window only:
    older entries are dropped as new ones come, so memory follows the pairs corrected
    in the last hour. Each CRS's clusters are filed apart too, so forgetting a CRS
    costs its own entries, not every tenant's."""

    def __init__(self, window: float = REPEAT_WINDOW) -> None:
        self._window = window
        # oldest correction first, so that expiry only looks at what leaves
        self._last: OrderedDict[tuple[str, str, str], float] = OrderedDict()
        # (namespace, CRS) -> the clusters it has an entry for
        self._clusters: dict[tuple[str, str], set[str]] = {}

    def corrected(self, pair: tuple[str, str, str], now: float) -> bool:
        """Note a correction at ``now``; True when the pair's previous one is recent."""
        while self._last and next(iter(self._last.values())) <= now - self._window:
            (namespace, name, cluster), _ = self._last.popitem(last=False)
            clusters = self._clusters[(namespace, name)]
            clusters.discard(cluster)
            if not clusters:
                del self._clusters[(namespace, name)]
        repeated = pair in self._last
        self._last.pop(pair, None)
        self._last[pair] = now
        self._clusters.setdefault(pair[:2], set()).add(pair[2])
        return repeated

    def forget(self, namespace: str, name: str) -> None:
        """The CRS is gone: a CRS made again under its name starts with no repeat."""
        for cluster in self._clusters.pop((namespace, name), ()):
            del self._last[(namespace, name, cluster)]

    def __len__(self) -> int:
        return len(self._last)


_REPEATS = RepeatWatch()


def drift_corrected(namespace: str, name: str, cluster: str, now: float) -> None:
    """One pass corrected drift of CRS ``namespace/name`` on ``cluster`` at ``now``
    (monotonic seconds). The repeat counter exists at 0 from the CRS's first correction
    here on: a replica that writes no status (no ``show_fleet``) would otherwise make
    it at its first repeat, already at 1, and an increase over it would miss that one."""
    labels = _SLOTS.of(namespace, name)
    DRIFT_CORRECTIONS.labels(*labels).inc()
    repeats = DRIFT_REPEATS.labels(*labels)
    if _REPEATS.corrected((namespace, name, cluster), now):
        repeats.inc()
