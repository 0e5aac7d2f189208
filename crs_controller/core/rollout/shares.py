"""A share of a rollout: what a set of clusters says about one CRS's rollout of a
target, as counts and bounded samples, never one entry per cluster.

The planner (``core.rollout.plan``) reads a rollout's progress from a ``Share`` alone:
the share of every cluster, or shares of disjoint sets of clusters combined
(``combine``), which give the same counts. Which of its clusters may take the target
now is then decided by whoever holds them (``plan.admit``).

A share is small whatever the fleet: one ``Group`` of counts per step (the policy's
steps and the implicit last one), a handful of totals, the first ``NAMES_SHOWN``
names of the clusters failed on the target, and at most ``MAX_REVISIONS`` other
revisions. Its JSON (``Share.to_api``) is at most 4,608 bytes plus 200 for each
group (each step and the implicit last one), for cluster names of at most 253
characters, revisions of at most 100 (as a binding records them) and counts below a
billion, whatever the number of clusters and of revisions they are on.

Decided here: the revisions a share keeps are the halted one (the share's
``halted``), then those with the most clusters failed taking them, then by name.
Bindings carry revisions tenants can write, so a fleet may name any number of them;
a revision beyond the first ``MAX_REVISIONS`` of a share is left out of it, and its
counts from that share are missing when shares are combined.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import reduce
from typing import Any

from pydantic import TypeAdapter

from crs_controller.core.rollout.policy import Policy, step_of

__all__ = [
    "MAX_REVISIONS",
    "NAMES_SHOWN",
    "ClusterState",
    "Group",
    "Other",
    "Share",
    "by_name",
    "combine",
    "is_done",
    "is_updating",
    "share_of",
    "utc",
]

NAMES_SHOWN = 5  # clusters failed on the target a share names
MAX_REVISIONS = 16  # revisions other than the target a share counts clusters on


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
class Group:
    """The clusters of one step that do not hold updates, counted."""

    clusters: int = 0
    done: int = 0  # on the target, done and not failed
    failed: int = 0  # failed taking the target
    updating: int = 0  # on the target, neither done nor failed
    validated: int = 0
    unvalidated: int = 0  # done, not validated
    fresh: int = 0  # on another revision (installed, not on the target yet)
    since: datetime | None = None  # the latest ``since`` among them, in UTC


@dataclass(frozen=True)
class Other:
    """A revision other than the target, and the clusters on it."""

    revision: str
    clusters: int = 0  # on it and not holding updates
    failed: int = 0  # failed taking it, holding updates or not


@dataclass(frozen=True)
class Share:
    """What a set of clusters says about the rollout of ``target`` under a policy of
    ``steps`` steps, with ``halted`` the revision whose clusters go first (None: none)."""

    target: str
    steps: int
    halted: str | None
    groups: tuple[Group, ...]  # one per step, then the implicit last step
    fleet: int = 0  # clusters, holding updates or not
    held: int = 0  # clusters holding updates
    updated: int = 0  # done on the target, holding updates or not
    failed: int = 0  # failed taking the target, holding updates or not
    failed_names: tuple[str, ...] = ()  # the first NAMES_SHOWN of those, by name
    others: tuple[Other, ...] = ()  # at most MAX_REVISIONS, kept as the module says
    first_installs: int = 0  # clusters nothing was ever applied to

    def __post_init__(self) -> None:
        if self.steps < 0 or len(self.groups) != self.steps + 1:
            raise ValueError(f"a share of {self.steps} steps has {len(self.groups)} groups")
        if len(self.failed_names) > NAMES_SHOWN or len(self.others) > MAX_REVISIONS:
            raise ValueError("a share names too many clusters or revisions")

    def to_api(self) -> dict[str, Any]:
        """The share as JSON values; ``from_api`` reads it back."""
        data: dict[str, Any] = _JSON.dump_python(self, mode="json")
        return data

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Share:
        """A share from its JSON values; ValueError when they are not one."""
        return _JSON.validate_python(data)


_JSON = TypeAdapter(Share)


def share_of(
    target: str, clusters: Sequence[ClusterState], policy: Policy, halted: str | None = None
) -> Share:
    """The share of ``clusters`` in the rollout of ``target``: each counted in the
    group of its step (``step_of``) unless it holds updates."""
    fleet = by_name(clusters)
    halted = None if halted == target else halted
    members: list[list[ClusterState]] = [[] for _ in range(len(policy.steps) + 1)]
    for cluster in fleet:
        if not cluster.held:
            members[step_of(policy.steps, cluster.labels) - 1].append(cluster)
    failed = [c.name for c in fleet if c.revision == target and c.failed]
    return Share(
        target,
        len(policy.steps),
        halted,
        tuple(_group(group, target) for group in members),
        fleet=len(fleet),
        held=sum(c.held for c in fleet),
        updated=sum(is_done(c, target) for c in fleet),
        failed=len(failed),
        failed_names=tuple(failed[:NAMES_SHOWN]),
        others=_others(fleet, target, halted),
        first_installs=sum(c.revision is None for c in fleet),
    )


def combine(shares: Iterable[Share]) -> Share:
    """The share of the clusters of ``shares`` together (shares of disjoint sets of
    clusters, for one target, step count and halted revision); in any order or
    grouping it is the same share, its samples cut again as ``share_of`` cuts them."""
    parts = tuple(shares)
    if not parts:
        raise ValueError("no share to combine")
    first = parts[0]
    for part in parts[1:]:
        if (part.target, part.steps, part.halted) != (first.target, first.steps, first.halted):
            raise ValueError("shares of different rollouts cannot be combined")
    columns = zip(*(part.groups for part in parts), strict=True)
    others: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    for other in itertools.chain.from_iterable(part.others for part in parts):
        others[other.revision] += other.clusters
        failures[other.revision] += other.failed
    kept = (Other(name, others[name], failures[name]) for name in others)
    return Share(
        first.target,
        first.steps,
        first.halted,
        tuple(reduce(_plus, column) for column in columns),
        fleet=sum(part.fleet for part in parts),
        held=sum(part.held for part in parts),
        updated=sum(part.updated for part in parts),
        failed=sum(part.failed for part in parts),
        failed_names=tuple(sorted(n for part in parts for n in part.failed_names)[:NAMES_SHOWN]),
        others=_cut(kept, first.halted),
        first_installs=sum(part.first_installs for part in parts),
    )


def _group(members: Sequence[ClusterState], target: str) -> Group:
    """The counts of one step's clusters."""
    times = [utc(c.since) for c in members if c.since is not None]
    return Group(
        clusters=len(members),
        done=sum(is_done(c, target) for c in members),
        failed=sum(c.revision == target and c.failed for c in members),
        updating=sum(is_updating(c, target) for c in members),
        validated=sum(c.validated for c in members),
        unvalidated=sum(is_done(c, target) and not c.validated for c in members),
        fresh=sum(c.revision not in (None, target) for c in members),
        since=max(times, default=None),
    )


def _plus(one: Group, other: Group) -> Group:
    """The counts of two disjoint sets of one step's clusters, together."""
    times = [t for t in (one.since, other.since) if t is not None]
    return Group(
        clusters=one.clusters + other.clusters,
        done=one.done + other.done,
        failed=one.failed + other.failed,
        updating=one.updating + other.updating,
        validated=one.validated + other.validated,
        unvalidated=one.unvalidated + other.unvalidated,
        fresh=one.fresh + other.fresh,
        since=max(times, default=None),
    )


def _others(fleet: Sequence[ClusterState], target: str, halted: str | None) -> tuple[Other, ...]:
    """The revisions other than ``target`` the clusters are on or failed taking."""
    on: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    for cluster in fleet:
        if cluster.revision is None or cluster.revision == target:
            continue
        on[cluster.revision] += not cluster.held
        failed[cluster.revision] += cluster.failed
    kept = (Other(name, on[name], failed[name]) for name in on if on[name] or failed[name])
    return _cut(kept, halted)


def _cut(others: Iterable[Other], halted: str | None) -> tuple[Other, ...]:
    """The revisions a share keeps: the halted one, then the most failed, then by name."""
    ranked = sorted(others, key=lambda o: (o.revision != halted, -o.failed, o.revision))
    return tuple(ranked[:MAX_REVISIONS])


def by_name(clusters: Sequence[ClusterState]) -> tuple[ClusterState, ...]:
    """The clusters in name order, so nothing depends on the input's order."""
    fleet = tuple(sorted(clusters, key=lambda c: c.name))
    for before, after in itertools.pairwise(fleet):
        if before.name == after.name:
            raise ValueError(f"cluster {before.name} appears twice")
    return fleet


def is_done(cluster: ClusterState, target: str) -> bool:
    return cluster.revision == target and cluster.done and not cluster.failed


def is_updating(cluster: ClusterState, target: str) -> bool:
    return cluster.revision == target and not cluster.done and not cluster.failed


def utc(moment: datetime) -> datetime:
    """``moment`` in UTC; a naive datetime is UTC."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
