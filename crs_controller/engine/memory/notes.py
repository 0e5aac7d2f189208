"""Events about what the cluster passes did, told once per CRS and not once per
cluster: an edit that reaches 500 clusters is one Event ("applied ConfigMap/cni to
500 clusters"), not 500; so are deletions ("deleted apps/v1 DaemonSet ... from 500
clusters") and their refusals and keeps (one ``DeletionRefused`` Warning for every
cluster, and so one notification, not one per cluster).

Cluster reconciles ``note`` what happened; the CRS reconcile ``take``s the notes once
they have settled (no new note for ``quiet`` seconds, or ``longest`` after the
first) and emits one Event per type and reason. ``note`` answers when the notes may
be told at the earliest, for the cluster reconcile to wake the CRS then (in its
Result): nobody here sees the queue.

A missing source is often only late: a CRS applied before its ConfigMap in one
``kubectl apply`` (Cluster API providers' templates do that) fails its first pass.
Such a Warning waits out a grace period, and is told only if the cluster's outcome
is still the same then: a source that arrives within it never produces the Warning.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from crs_controller.core.api.models import CRSKey
from crs_controller.core.clock import Clock
from crs_controller.core.state.deletion_guard import DELETION_SKIPPED
from crs_controller.core.state.prune_decisions import DELETION_REFUSED
from crs_controller.core.text import safe

EventType = Literal["Normal", "Warning"]

QUIET_SECONDS = 2.0
LONGEST_SECONDS = 10.0
GRACE_SECONDS = 5.0
# Failures that often heal by themselves within seconds (see the module's docstring).
GRACED_REASONS = frozenset({"ResourceNotFound"})
# Two CRSs apply one object with different content on a cluster (reconcile.scope).
OBJECT_CONFLICT = "ObjectConflict"
# Warnings that tell of no failure: the clusters they name did not fail.
NOT_FAILURES = frozenset({DELETION_SKIPPED, DELETION_REFUSED, OBJECT_CONFLICT})
NAMES_SHOWN = 5
# Resources (or, for deletions, objects) named in one Event; the count of the rest.
RESOURCES_SHOWN = 20
MESSAGES_SHOWN = 3
# Each cluster's message in a Warning, so that all MESSAGES_SHOWN fit in an Event's
# 1000 characters instead of the first one taking them all.
MESSAGE_SHARE = 300


@dataclass(frozen=True)
class Note:
    """What one cluster's pass did for a CRS: resources applied (Normal), or a
    failure's message (Warning)."""

    type: EventType
    reason: str
    cluster: str
    message: str = ""
    resources: tuple[str, ...] = ()
    more: int = 0  # resources left out of ``resources`` (kept bounded), counted


@dataclass(frozen=True)
class Announcement:
    type: EventType
    reason: str
    message: str
    clusters: tuple[str, ...] = ()  # the clusters it is about, in name order


@dataclass
class _Pending:
    first: float
    last: float
    notes: list[Note] = field(default_factory=list)
    graced_until: float | None = None  # not due before, while a graced Warning waits


class Announcements:
    def __init__(
        self,
        clock: Clock,
        quiet: float = QUIET_SECONDS,
        longest: float = LONGEST_SECONDS,
        grace: float = GRACE_SECONDS,
    ) -> None:
        self._clock = clock
        self._quiet = quiet
        self._longest = longest
        self._grace = grace
        self._pending: dict[CRSKey, _Pending] = {}

    def note(self, namespace: str, crs: str, note: Note) -> float:
        """Keep the note; returns the seconds after which the CRS should look (the
        quiet period)."""
        now = self._clock.now()
        pending = self._pending.setdefault((namespace, crs), _Pending(now, now))
        pending.last = now
        pending.notes.append(note)
        if note.type == "Warning" and note.reason in GRACED_REASONS:
            # Bounded like the quiet period: a trickle of such notes cannot hold
            # the others back for ever.
            until = min(now + self._grace, pending.first + self._longest + self._grace)
            pending.graced_until = max(pending.graced_until or until, until)
        return self._quiet

    def wait(self, namespace: str, crs: str) -> float | None:
        """Seconds until the notes for this CRS are due to be told (0: now), or None
        when there is nothing to tell."""
        pending = self._pending.get((namespace, crs))
        if pending is None:
            return None
        due = min(pending.last + self._quiet, pending.first + self._longest)
        if pending.graced_until is not None:
            due = max(due, pending.graced_until)
        return max(due - self._clock.now(), 0.0)

    def take(
        self, namespace: str, crs: str, current: Callable[[str], str | None] | None = None
    ) -> list[Announcement]:
        """The settled notes as announcements. ``current`` gives a cluster's outcome
        reason now: a graced Warning whose cluster has moved on (its source arrived)
        is not told. Without it, every note is."""
        pending = self._pending.pop((namespace, crs), None)
        if pending is None:
            return []
        notes = [n for n in pending.notes if current is None or still_true(n, current)]
        return gather(notes)

    def drop(self, namespace: str, crs: str) -> None:
        self._pending.pop((namespace, crs), None)


def still_true(note: Note, current: Callable[[str], str | None]) -> bool:
    """Is the note still worth telling? A graced Warning only while its cluster's
    outcome is still that failure."""
    if note.type != "Warning" or note.reason not in GRACED_REASONS:
        return True
    return current(note.cluster) == note.reason


def gather(notes: list[Note]) -> list[Announcement]:
    """One announcement per type and reason, Normal first; a later note for the same
    cluster and reason replaces an earlier one."""
    grouped: dict[tuple[EventType, str], dict[str, Note]] = {}
    for note in notes:
        grouped.setdefault((note.type, note.reason), {})[note.cluster] = note
    failed = len(
        {
            c
            for (kind, reason), by in grouped.items()
            if kind == "Warning" and reason not in NOT_FAILURES
            for c in by
        }
    )
    told = []
    for (kind, reason), by_cluster in sorted(grouped.items(), key=lambda i: i[0][0] != "Normal"):
        if kind == "Normal":
            message = _normal(reason, by_cluster, failed)
        else:
            message = _warning(reason, by_cluster)
        told.append(Announcement(kind, reason, message, tuple(sorted(by_cluster))))
    return told


VERBS = {"DriftCorrected": "reapplied after drift", "Deleted": "deleted"}
PREPOSITIONS = {"Deleted": "from"}


def _normal(reason: str, by_cluster: dict[str, Note], failed: int) -> str:
    verb, to = VERBS.get(reason, "applied"), PREPOSITIONS.get(reason, "to")
    resources = sorted({r for note in by_cluster.values() for r in note.resources})
    # A note keeps at most RESOURCES_SHOWN names: past that only a lower bound of the
    # distinct total is known (the longest note's), and the Event says so.
    cut = max((len(n.resources) + n.more for n in by_cluster.values() if n.more), default=0)
    total = max(len(resources), cut)
    shown = ", ".join(resources[:RESOURCES_SHOWN])
    if total > RESOURCES_SHOWN:
        shown += f" and {'at least ' if cut else ''}{total - RESOURCES_SHOWN} more"
    message = f"{verb} {shown} {to} {_clusters(sorted(by_cluster))}"
    return message + (f"; {_count(failed)} failed" if failed else "")


def _warning(reason: str, by_cluster: dict[str, Note]) -> str:
    names = sorted(by_cluster)
    shown = "; ".join(
        f"{name}: {safe(by_cluster[name].message, MESSAGE_SHARE)}"
        for name in names[:MESSAGES_SHOWN]
    )
    more = f"; and {len(names) - MESSAGES_SHOWN} more" if len(names) > MESSAGES_SHOWN else ""
    return f"{reason} on {_count(len(names))}: {shown}{more}"


def _clusters(names: list[str]) -> str:
    if len(names) == 1:
        return f"cluster {names[0]}"
    shown = ", ".join(names[:NAMES_SHOWN])
    more = f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else ""
    return f"{len(names)} clusters ({shown}{more})"


def _count(n: int) -> str:
    return f"{n} {'cluster' if n == 1 else 'clusters'}"
