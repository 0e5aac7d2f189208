"""What each reconciler may use, and nothing more: read-only caches, its own
writers, and the collaborators it calls. Not the queue: reconcilers return what
should happen next, and only the runtime touches the queue."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from crs_controller.clients.api import WorkloadAPIs
from crs_controller.clients.workload import WARM_CLIENTS
from crs_controller.core.clock import Clock, MonotonicClock
from crs_controller.core.errors import NotOurs
from crs_controller.core.membership.shard import members_stamp
from crs_controller.core.spec.objects import CRS
from crs_controller.core.state.contribution import Combined, Contribution, Waiting, combined
from crs_controller.engine.index import Caches
from crs_controller.engine.io.contributions import Contributions
from crs_controller.engine.io.control_planes import ControlPlaneVersions, NoControlPlanes
from crs_controller.engine.io.events import EventRecorder
from crs_controller.engine.io.snapshots import Snapshots
from crs_controller.engine.io.sources import Sources
from crs_controller.engine.io.stores import BindingStore, ClusterStore, CRSStore
from crs_controller.engine.memory.budget import Budget
from crs_controller.engine.memory.deletion_waits import DeletionWaits
from crs_controller.engine.memory.drift import DriftSchedule
from crs_controller.engine.memory.notes import Announcements
from crs_controller.engine.memory.outcomes import Outcomes
from crs_controller.engine.memory.plans import Rollouts
from crs_controller.engine.memory.unrecorded import Unrecorded


@dataclass(frozen=True)
class Settings:
    namespace: str | None = None
    concurrency: int = 8
    field_manager: str = "crs-controller"
    workload_timeout: float = 15.0
    allow_proxy_url: bool = False
    # At most this many workload clusters keep their idle connection and TLS context.
    workload_idle_connections: int = WARM_CLIENTS
    reconcile_timeout: float = 300.0
    # At most this many clusters take a new revision at once, across every CRS (this
    # replica's share in a shard set); None: no limit.
    max_updating_clusters: int | None = None


@dataclass(frozen=True, kw_only=True)
class Shared:
    """What both reconcilers use: the caches, the sources, the events, and the
    process's memory (outcomes, rollout plans, notes, what is applied but not
    recorded yet)."""

    caches: Caches
    sources: Sources
    snapshots: Snapshots  # each revision's content, to roll back to
    events: EventRecorder
    announcements: Announcements  # for what a pass did: told once per CRS
    outcomes: Outcomes
    rollouts: Rollouts
    clock: Clock = field(default_factory=MonotonicClock)
    # What passes applied that no binding write recorded yet, per Cluster.
    unrecorded: Unrecorded = field(default_factory=Unrecorded)
    # The dependents the CRSs being deleted wait for, per cluster (its last pruning).
    deletion_waits: DeletionWaits = field(default_factory=DeletionWaits)

    def _parts(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(Shared)}


def _every(namespace: str, name: str) -> bool:
    """A replica alone owns every Cluster."""
    return True


def _always() -> bool:
    """Alone, a replica's binding cache holds every binding, listed once it synced."""
    return True


def _no_incarnations() -> Mapping[str, str]:
    """Members known by their identities alone."""
    return {}


def _a_second(namespace: str, name: str) -> float:
    """A status wake's spacing where the runtime gives none (its least)."""
    return 1.0


@dataclass(frozen=True, kw_only=True)
class ClusterContext(Shared):
    """The cluster reconcile: applies to one workload cluster and writes its binding.
    ``events`` is for what happens once per cluster (deletion, cleanup)."""

    settings: Settings
    workloads: WorkloadAPIs
    bindings: BindingStore
    clusters: ClusterStore
    drift: DriftSchedule = field(default_factory=DriftSchedule)
    budget: Budget = field(default_factory=lambda: Budget(None, MonotonicClock()))
    # The version each cluster's control plane runs (resources that follow it).
    control_planes: ControlPlaneVersions = field(default_factory=NoControlPlanes)
    # Whether this replica owns a Cluster now: its share in a shard set, else all.
    owns: Callable[[str, str], bool] = _every
    # Whether the binding cache holds every binding there is (alone, or a member not
    # knowing its share yet); a shard member's holds only those its watches select.
    holds_every_binding: Callable[[], bool] = _always
    # (namespace, Cluster): the refusal its Event told (uid and problem), so that a
    # refused Cluster's Event is written once as it comes, not at every pass.
    refusals_told: dict[tuple[str, str], str] = field(default_factory=dict)
    # (namespace, Cluster): the Cluster's uid and the CRSs whose DependentNotWaited
    # its deletion told, once each however often their cleanup is retried.
    not_waited_told: dict[tuple[str, str], tuple[str, set[str]]] = field(default_factory=dict)

    def still_ours(self, namespace: str, name: str) -> None:
        """Raise NotOurs unless this replica owns the Cluster now: asked right before
        a pass deletes or records anything, so a replica whose share shrank mid-pass
        leaves the rest to the new owner."""
        if not self.owns(namespace, name):
            raise NotOurs(f"cluster {namespace}/{name} is no longer this replica's")

    @classmethod
    def over(
        cls,
        shared: Shared,
        *,
        settings: Settings,
        workloads: WorkloadAPIs,
        bindings: BindingStore,
        clusters: ClusterStore,
        budget: Budget | None = None,
        control_planes: ControlPlaneVersions | None = None,
        owns: Callable[[str, str], bool] | None = None,
        holds_every_binding: Callable[[], bool] | None = None,
    ) -> ClusterContext:
        budget = budget or Budget(settings.max_updating_clusters, shared.clock)
        return cls(
            **shared._parts(),
            settings=settings,
            workloads=workloads,
            bindings=bindings,
            clusters=clusters,
            budget=budget,
            control_planes=control_planes or NoControlPlanes(),
            owns=owns or _every,
            holds_every_binding=holds_every_binding or _always,
        )


class Combining(Protocol):
    """Where a CRS pass's contribution (``core.state.contribution``) meets those of
    the other members: which Clusters this process contributes for (``owns``), as
    whom (``me``) and under which member set (``members``, whose ``stamp`` its
    contribution carries), and the contributions of them all combined
    (``combined``), or the members it waits for."""

    @property
    def me(self) -> str: ...

    def members(self) -> frozenset[str]: ...

    def stamp(self) -> str: ...

    def owns(self, namespace: str, name: str) -> bool: ...

    async def combined(self, crs: CRS, mine: Contribution) -> Combined | Waiting: ...


@dataclass(frozen=True)
class Alone:
    """A process that contributes alone: for every Cluster, its own contribution
    combined with none other (nothing is published)."""

    me: str = ""

    def members(self) -> frozenset[str]:
        return frozenset({self.me})

    def stamp(self) -> str:
        return members_stamp(self.members())

    def owns(self, namespace: str, name: str) -> bool:
        return True

    async def combined(self, crs: CRS, mine: Contribution) -> Combined | Waiting:
        return combined({self.me: mine}, self.members(), mine.crs_uid, crs.generation, mine.target)


@dataclass(frozen=True)
class Sharded:
    """A member of a shard set: it contributes for the Clusters it owns (``owner``)
    under the member set it acts with (``live``; empty while it does not act), as
    the identity of its contributions' ``store``, and combines every live member's
    contribution there with its own, published first. Until the bindings of its
    share as it is now are listed (``listed``), it has nothing to contribute: the
    Clusters it just took over look as if they held nothing. The member set's
    stamp covers each member's incarnation token (``incarnations``), so a member
    back under the same identity is waited for, never its old contribution taken."""

    store: Contributions[Contribution]
    live: Callable[[], frozenset[str]]
    owner: Callable[[str, str], bool]
    listed: Callable[[], bool] = _always
    incarnations: Callable[[], Mapping[str, str]] = _no_incarnations

    @property
    def me(self) -> str:
        return self.store.identity

    def members(self) -> frozenset[str]:
        return self.live()

    def stamp(self) -> str:
        return members_stamp(self.live(), self.incarnations())

    def owns(self, namespace: str, name: str) -> bool:
        return self.owner(namespace, name)

    async def combined(self, crs: CRS, mine: Contribution) -> Combined | Waiting:
        """``mine`` published, then combined with the others' under the current
        member set. Not acting (not a member of it), this member waits for itself:
        it knows nothing of the others, and a combination of none counts nothing.
        So it does while its share's bindings are not listed yet: a count of its
        Clusters then would say those just taken over hold nothing (a finalizer
        removed while they still hold, a status that looks like a regression)."""
        members, stamp, uid = self.members(), self.stamp(), crs.meta.uid or ""
        if self.me not in members or not uid or not self.listed():
            return Waiting(missing=(self.me,))
        await self.store.publish(crs.namespace, crs.name, uid, mine)
        held = {**self.store.published(uid), self.me: mine}
        return combined(held, members, uid, crs.generation, mine.target, stamp=stamp)


@dataclass(frozen=True, kw_only=True)
class CRSContext(Shared):
    """The CRS reconcile: its finalizer and its status, from the bindings. In a shard
    set only the leader writes them (``leading``); every replica still plans the
    rollouts its clusters follow and tells what its own passes did. Status and plan
    are made from the members' contributions, combined (``combining``)."""

    crss: CRSStore
    leading: Callable[[], bool] = lambda: True
    # How long a status wake of a CRS waits (by namespace, name): spaced by what its
    # last pass took, as the runtime times it; also a pass waiting for contributions.
    status_settle: Callable[[str, str], float] = _a_second
    # How the pass's contribution is combined with the other members' into the status
    # and plan it makes: alone, its own is the whole; in a shard set (``Sharded``),
    # through the members' published contributions.
    combining: Combining = field(default_factory=Alone)

    @classmethod
    def over(
        cls,
        shared: Shared,
        *,
        crss: CRSStore,
        leading: Callable[[], bool],
        status_settle: Callable[[str, str], float] = _a_second,
    ) -> CRSContext:
        return cls(**shared._parts(), crss=crss, leading=leading, status_settle=status_settle)
