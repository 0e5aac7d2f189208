"""A tally of a CRS's clusters: what a set of (cluster name, outcome) pairs says about
the CRS's status, as counts and bounded samples, never one entry per cluster.

The status (``status.status_of``) is made from a ``Tally`` alone: the tally of every
matching cluster, or tallies of disjoint sets of them combined (``combine``), which
is the same tally. ``status.summarize`` is the status of one tally of every cluster.

Which clusters the status names: of the failed ones, the one whose reason ranks first
(``reasons.rank``), and the same of the waiting ones; of those applied and waiting
for their objects to be Ready, the first; among clusters alike in that, the first by
name (then by message). Held clusters are shown by their first ``NAMES_SHOWN``
names, in name order: all of them, and those held for the reason that ranks first
among them. A tally keeps just these, so combining keeps the first of the parts'.

A tally is small whatever the number of clusters: seven counts, the lowest and
highest generation its outcomes record, three samples (a cluster's name, reason and
message, the message cut at ``MESSAGE_LIMIT`` characters, where every condition
message is cut, so the status is the same), the first held reason and at most
``2 * NAMES_SHOWN`` names. Its JSON (``Tally.to_api``, as ``json.dumps`` writes it)
is at most 44,032 characters for cluster names of at most 253 characters, reasons of
at most 1,024 (as a binding records them), counts below a billion and generations of
64 bits, whatever the number of clusters and what their messages say (a message
character takes at most 12 characters of JSON).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter

from crs_controller.core.api.models import MESSAGE_LIMIT
from crs_controller.core.state.reasons import Outcome, rank

__all__ = ["NAMES_SHOWN", "Held", "Sample", "Tally", "combine", "tally_of"]

NAMES_SHOWN = 5  # held clusters a status names


@dataclass(frozen=True)
class Sample:
    """One cluster a status names: its outcome's reason and message."""

    cluster: str
    reason: str
    message: str  # at most MESSAGE_LIMIT characters

    def __post_init__(self) -> None:
        if len(self.message) > MESSAGE_LIMIT:
            raise ValueError(f"a sample's message is over {MESSAGE_LIMIT} characters")


@dataclass(frozen=True)
class Held:
    """The held clusters whose reason ranks first among the held: how many, and the
    first ``NAMES_SHOWN`` of their names."""

    reason: str
    clusters: int
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.clusters < 1 or len(self.names) != min(self.clusters, NAMES_SHOWN):
            raise ValueError(f"{self.clusters} held clusters with {len(self.names)} names")


@dataclass(frozen=True)
class Tally:
    """What a set of clusters says about a CRS's status. Every cluster counts in one of
    applied, failed, held, waiting and pending."""

    applied: int = 0  # Applied, their objects Ready or not
    unready: int = 0  # of those, waiting for their objects to be Ready
    failed: int = 0
    held: int = 0  # held back from a revision (Progressing), keeping what they have
    waiting: int = 0
    pending: int = 0  # Pending, or no outcome recorded
    unrecorded: int = 0  # of those, no outcome recorded
    oldest: int | None = None  # the lowest generation an outcome records (None: none)
    newest: int | None = None  # the highest
    first_failed: Sample | None = None
    first_waiting: Sample | None = None
    first_unready: Sample | None = None
    held_names: tuple[str, ...] = ()  # the first NAMES_SHOWN, by name
    first_held: Held | None = None

    def __post_init__(self) -> None:
        counts = (self.applied, self.failed, self.held, self.waiting, self.pending)
        if min(*counts, self.unready, self.unrecorded) < 0:
            raise ValueError("a tally's counts are not negative")
        if self.unready > self.applied or self.unrecorded > self.pending:
            raise ValueError("a tally counts more clusters in a part than in the whole")
        sampled = (
            (self.failed, self.first_failed),
            (self.waiting, self.first_waiting),
            (self.unready, self.first_unready),
            (self.held, self.first_held),
        )
        if any((count == 0) != (sample is None) for count, sample in sampled):
            raise ValueError("a tally has a sample exactly for the kinds it counts")
        _check_held(self)
        _check_generations(self)

    @property
    def clusters(self) -> int:
        """How many clusters the tally counts."""
        return self.applied + self.failed + self.held + self.waiting + self.pending

    def current(self, generation: int) -> bool:
        """Whether every cluster's outcome is recorded, for ``generation``."""
        recorded = (self.oldest, self.newest)
        return self.unrecorded == 0 and all(g in (None, generation) for g in recorded)

    def to_api(self) -> dict[str, Any]:
        """The tally as JSON values; ``from_api`` reads it back."""
        data: dict[str, Any] = _JSON.dump_python(self, mode="json")
        return data

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Tally:
        """A tally from its JSON values; ValueError when they are not one."""
        return _JSON.validate_python(data)


def _check_held(tally: Tally) -> None:
    if len(tally.held_names) != min(tally.held, NAMES_SHOWN):
        raise ValueError(f"{tally.held} held clusters with {len(tally.held_names)} names")
    if tally.first_held is not None and tally.first_held.clusters > tally.held:
        raise ValueError("a tally holds more clusters for one reason than in all")


def _check_generations(tally: Tally) -> None:
    recorded = tally.clusters - tally.unrecorded
    if (tally.oldest is None) != (recorded == 0) or (tally.newest is None) != (recorded == 0):
        raise ValueError("a tally has generations exactly when it has outcomes")
    if tally.oldest is not None and tally.newest is not None and tally.oldest > tally.newest:
        raise ValueError("a tally's oldest generation is after its newest")


_JSON = TypeAdapter(Tally)

Pair = tuple[str, Outcome]


def tally_of(outcomes: Iterable[tuple[str, Outcome | None]]) -> Tally:
    """The tally of the clusters' outcomes (cluster name, outcome; None: none recorded
    yet), in whatever order they come."""
    states: dict[str, list[Pair]] = {
        s: [] for s in ("Applied", "Failed", "Pending", "Progressing", "Waiting")
    }
    unrecorded = 0
    for name, outcome in outcomes:
        if outcome is None:
            unrecorded += 1
        else:
            states[outcome.state].append((name, outcome))
    applied, failed, held = states["Applied"], states["Failed"], states["Progressing"]
    unready = [(name, outcome) for name, outcome in applied if not outcome.ready]
    generations = [outcome.generation for pairs in states.values() for _, outcome in pairs]
    return Tally(
        applied=len(applied),
        unready=len(unready),
        failed=len(failed),
        held=len(held),
        waiting=len(states["Waiting"]),
        pending=len(states["Pending"]) + unrecorded,
        unrecorded=unrecorded,
        oldest=min(generations, default=None),
        newest=max(generations, default=None),
        first_failed=_first(failed, _ranked),
        first_waiting=_first(states["Waiting"], _ranked),
        first_unready=_first(unready, _named),
        held_names=_names(name for name, _ in held),
        first_held=_first_held(held),
    )


def combine(tallies: Iterable[Tally]) -> Tally:
    """The tally of the clusters of ``tallies`` together (tallies of disjoint sets of
    clusters; none: the tally of no cluster); in any order or grouping it is the same
    tally, its samples chosen and cut again as ``tally_of`` chooses and cuts them."""
    parts = tuple(tallies)
    oldest = [part.oldest for part in parts if part.oldest is not None]
    newest = [part.newest for part in parts if part.newest is not None]
    return Tally(
        applied=sum(part.applied for part in parts),
        unready=sum(part.unready for part in parts),
        failed=sum(part.failed for part in parts),
        held=sum(part.held for part in parts),
        waiting=sum(part.waiting for part in parts),
        pending=sum(part.pending for part in parts),
        unrecorded=sum(part.unrecorded for part in parts),
        oldest=min(oldest, default=None),
        newest=max(newest, default=None),
        first_failed=_earliest((part.first_failed for part in parts), _ranked),
        first_waiting=_earliest((part.first_waiting for part in parts), _ranked),
        first_unready=_earliest((part.first_unready for part in parts), _named),
        held_names=_names(name for part in parts for name in part.held_names),
        first_held=_first_of_held([part.first_held for part in parts if part.first_held]),
    )


# A cluster as a status may name it: (name, reason, message).
Told = tuple[str, str, str]
Order = Callable[[Told], tuple[Any, ...]]


def _ranked(told: Told) -> tuple[Any, ...]:
    """Failed and waiting clusters: the reason that ranks first, then by name."""
    cluster, reason, message = told
    return (rank(reason), cluster, message)


def _named(told: Told) -> tuple[Any, ...]:
    """Clusters whose objects are not Ready yet: by name."""
    return told


def _first(pairs: Sequence[Pair], order: Order) -> Sample | None:
    """The sample of the pair that comes first in ``order``; None for no pair."""
    told = ((name, o.reason, o.message[:MESSAGE_LIMIT]) for name, o in pairs)
    first = min(told, key=order, default=None)
    return None if first is None else Sample(*first)


def _earliest(samples: Iterable[Sample | None], order: Order) -> Sample | None:
    told = ((s.cluster, s.reason, s.message) for s in samples if s is not None)
    first = min(told, key=order, default=None)
    return None if first is None else Sample(*first)


def _names(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(heapq.nsmallest(NAMES_SHOWN, names))


def _first_held(held: Sequence[Pair]) -> Held | None:
    """The held clusters whose reason ranks first among them."""
    if not held:
        return None
    reason = min((outcome.reason for _, outcome in held), key=rank)
    names = [name for name, outcome in held if outcome.reason == reason]
    return Held(reason, len(names), _names(names))


def _first_of_held(parts: Sequence[Held]) -> Held | None:
    """The parts' ``first_held`` together: a part whose first reason ranks after the
    first of all holds no cluster for that one (no two reasons rank alike)."""
    if not parts:
        return None
    reason = min((part.reason for part in parts), key=rank)
    kept = [part for part in parts if part.reason == reason]
    names = _names(name for part in kept for name in part.names)
    return Held(reason, sum(part.clusters for part in kept), names)
