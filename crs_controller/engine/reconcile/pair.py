"""One CRS's pass over its resources on one cluster: load each source, decide with
the mode's strategy (and drift checks) whether to apply, apply, and record.

Returns the CRS's new binding entry and outcome; writing the binding is the cluster
reconcile's job, once for all CRSs.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import structlog

from crs_controller.clients.api import KubeAPI
from crs_controller.core.api.models import (
    CRSBinding,
    ObjectKey,
    ObjectRef,
    ResourceBinding,
    ResourceRef,
)
from crs_controller.core.errors import APIError, CRSError, ResourceError, Unreachable
from crs_controller.core.spec.modes import Apply, CheckDrift, Decision, Scope, Strategy
from crs_controller.core.spec.objects import CRS, Cluster
from crs_controller.core.state.bindings import record_apply, recorded, select_objects
from crs_controller.core.state.prune_decisions import wanted_keys
from crs_controller.core.state.status import Outcome
from crs_controller.core.versions.cluster_version import ClusterVersion
from crs_controller.core.versions.ranges import version_match
from crs_controller.engine.io import metrics
from crs_controller.engine.io.sources import Source
from crs_controller.engine.memory.notes import Note
from crs_controller.engine.reconcile.context import ClusterContext
from crs_controller.engine.reconcile.result import NOTHING, RETRY, Result, Wake, crs_key
from crs_controller.engine.reconcile.substitute import Prepared, prepare
from crs_controller.engine.reconcile.workload.applying import ApplyResult, apply_objects
from crs_controller.engine.reconcile.workload.observing import Observer, check_health

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class CRSPass:
    """How one CRS's pass on one cluster ended: its binding entry and outcome, and
    what should happen next."""

    entry: CRSBinding
    outcome: Outcome
    then: Result = NOTHING


@dataclass
class _Progress:
    """What one CRS's pass over its resources has gathered so far."""

    resources: list[ResourceBinding] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)
    then: Result = NOTHING
    unreachable: bool = False  # stop contacting the cluster for the rest of the pass
    applied: dict[str, list[str]] = field(default_factory=dict)  # event reason -> resources
    held: list[str] = field(default_factory=list)  # new revisions waiting for an upgrade
    unversioned: list[str] = field(default_factory=list)  # waiting for a known version

    def add(self, done: _Done) -> None:
        """Fold one resource's result into the pass."""
        self.resources += [done.record] if done.record else []
        self.failures += [done.failure] if done.failure else []
        self.held += [done.name] if done.held else []
        if done.applied_as:
            self.applied.setdefault(done.applied_as, []).append(done.name)
        self.then |= done.then
        self.unreachable = self.unreachable or done.unreachable


@dataclass(frozen=True)
class _Done:
    """How one resource's turn in a pass ended."""

    name: str  # Kind/name, for events and messages
    record: ResourceBinding | None  # what the binding keeps for it
    failure: tuple[str, str] | None = None  # (reason, message)
    applied_as: str | None = None  # the event reason, when it was applied
    then: Result = NOTHING
    unreachable: bool = False  # stop contacting the cluster for the rest of the pass
    held: bool = False  # a new revision kept back while the cluster upgrades


def _failed(
    name: str,
    previous: ResourceBinding | None,
    reason: str,
    message: str,
    *,
    retry: bool = False,
    unreachable: bool = False,
) -> _Done:
    """A failed resource keeps its previous record (and inventory)."""
    then = RETRY if retry else NOTHING
    return _Done(name, previous, (reason, message), then=then, unreachable=unreachable)


async def reconcile_pair(
    ctx: ClusterContext,
    client: KubeAPI,
    cluster: Cluster,
    crs: CRS,
    entry: CRSBinding | None,
    target: str | None,
    *,
    keep: bool = False,
) -> CRSPass:
    """The pass, once the gate let it go (reconcile/admission); ``target`` is the
    revision its rollout lets this cluster take (None: no rollout); with ``keep``
    (the gate could not read the revision) installed resources keep what they have."""
    spec = crs.valid.spec
    # Compiled when the CRS was parsed (core/spec/objects): nothing is parsed here.
    strategy = crs.strategy
    now = ctx.clock.wall()
    progress = _Progress()
    drift = strategy.drift
    pair = (cluster.namespace, crs.name, cluster.name)
    wait = ctx.drift.wait(pair, ctx.clock.now())
    drift_due = drift.enabled and wait == 0
    # One read per kind for the whole pass, shared by its resources' drift checks.
    observer = Observer(client, ctx.settings.field_manager, crs.ignores)
    if drift.enabled:
        progress.then = Result.after(wait or drift.interval)
    version = ctx.control_planes.of(cluster)
    # While Cluster API upgrades the cluster, a new revision of an installed resource
    # waits (unless this CRS gates the upgrade): first installs still go.
    hold = keep or (version.upgrading and not spec.gate_upgrades)
    for index, ref in enumerate(spec.resources):
        previous = recorded(entry, ref)
        match version_match(crs.version_range(index), version.version):
            case "unknown":  # kept as it is, neither applied nor withdrawn
                progress.add(_Done(ref.name, previous))
                progress.unversioned.append(f"{ref.kind}/{ref.name}")
                continue
            case "outside":  # leaves the entry (deletionPolicy Delete removes it)
                continue
        if progress.unreachable:
            progress.add(_Done(ref.name, previous))  # not reached: unchanged
            continue
        step = _Step(ref, previous, strategy, now, drift_due, observer, hold)
        progress.add(await _resource_pass(ctx, client, crs, cluster, step))
    if drift_due:
        ctx.drift.checked(pair, ctx.clock.now(), drift.interval)
    progress.then |= _announce(ctx, crs, cluster, progress)
    outcome = await _outcome(ctx, observer, crs, cluster, progress, target or "", now)
    outcome = _waiting(crs, cluster, version, progress, outcome, keep)
    if keep and progress.held:
        progress.then |= RETRY
    # Resources dropped from spec.resources leave the binding (Orphan: nothing deleted).
    new_entry = CRSBinding(cluster_resource_set_name=crs.name, resources=progress.resources)
    return CRSPass(new_entry, outcome, progress.then)


def _waiting(
    crs: CRS,
    cluster: Cluster,
    version: ClusterVersion,
    progress: _Progress,
    outcome: Outcome,
    keep: bool,
) -> Outcome:
    """What an otherwise applied pass waits for: the sources' revision (unreadable
    when the gate asked), the end of the cluster's upgrade (a new revision kept back),
    or its version (resources that follow it)."""
    if outcome.state == "Failed":
        return outcome
    if progress.held and keep:
        message = (
            f"the revision of the sources could not be read: {', '.join(progress.held)} "
            "keep what they have until it can"
        )
        return Outcome("Progressing", "Progressing", message, crs.generation)
    if progress.held:
        message = (
            f"Cluster API is upgrading cluster {cluster.name}: the new revision of "
            f"{', '.join(progress.held)} waits until the upgrade is done"
        )
        return Outcome("Progressing", "UpgradeInProgress", message, crs.generation)
    if progress.unversioned:
        message = (
            f"{', '.join(progress.unversioned)} follow the Kubernetes version, unknown for "
            f"cluster {cluster.name}: {version.unknown}"
        )
        return Outcome("Waiting", "WaitingForVersion", message, crs.generation)
    return outcome


async def _outcome(
    ctx: ClusterContext,
    observer: Observer,
    crs: CRS,
    cluster: Cluster,
    progress: _Progress,
    rev: str,
    now: datetime,
) -> Outcome:
    """The pass's outcome: its first failure, else applied (and Ready, when the CRS
    waits for it). ``rev`` says which revision it is for: a rollout's soak counts
    from when a cluster reached the new one, even if its outcome reads the same."""
    if progress.failures:
        message = "; ".join(m for _, m in progress.failures)
        return Outcome("Failed", progress.failures[0][0], message, crs.generation, revision=rev)
    outcome = Outcome("Applied", "Applied", "all resources applied", crs.generation, revision=rev)
    check = crs.valid.spec.health_check
    if check is not None and check.wait:
        outcome = await _health(ctx, observer, crs, cluster, progress, outcome, now)
    return outcome


async def _health(
    ctx: ClusterContext,
    observer: Observer,
    crs: CRS,
    cluster: Cluster,
    progress: _Progress,
    applied: Outcome,
    now: datetime,
) -> Outcome:
    """The outcome once the applied objects' readiness is known; schedules the next
    look while waiting."""
    assert crs.valid.spec.health_check is not None
    checked = await check_health(
        observer,
        crs.valid.spec.health_check,
        progress.resources,
        limit=crs.strategy.durations.health_timeout,
        applied=applied,
        previous=ctx.outcomes.get(cluster.namespace, crs.name, cluster.name),
        sent_now=bool(progress.applied),
        now=now,
        rules=crs.health_rules,
    )
    progress.then |= checked.then
    return checked.outcome


@dataclass(frozen=True)
class _Step:
    """One resource of a pass: what was recorded, and what decides about it."""

    ref: ResourceRef
    previous: ResourceBinding | None
    strategy: Strategy
    now: datetime
    drift_due: bool  # this pair's drift check is due in this pass
    observer: Observer
    hold: bool = False  # the cluster upgrades: an installed resource keeps its revision

    @property
    def name(self) -> str:
        """Kind/name, for events and messages."""
        return f"{self.ref.kind}/{self.ref.name}"


async def _resource_pass(
    ctx: ClusterContext, client: KubeAPI, crs: CRS, cluster: Cluster, step: _Step
) -> _Done:
    previous, name = step.previous, step.name
    source = await ctx.sources.load(cluster.namespace, step.ref)
    if source.error is not None:
        return _failed(name, previous, source.error.reason, str(source.error))
    try:
        prepared = await prepare(ctx.sources, crs, cluster, source)
    except CRSError as exc:  # UnresolvedVariable, InvalidManifest: this cluster alone
        return _failed(name, previous, exc.reason, str(exc))
    if step.hold and previous is not None and previous.applied and previous.hash != prepared.digest:
        return _Done(name, previous, held=True)
    try:
        decision = step.strategy.decide(previous, prepared.digest, step.now, step.drift_due)
        why = await _why_apply(step.observer, decision, previous)
        if isinstance(decision, CheckDrift):
            log.debug(
                "drift checked",
                crs=f"{crs.namespace}/{crs.name}",
                cluster=cluster.name,
                resource=name,
                drifted=why is not None,
            )
        if why is None:
            assert previous is not None
            due = step.strategy.next_due(previous, step.now)
            return _Done(name, previous, then=Result.after(due))
        return await _apply_resource(ctx, client, crs, cluster, source, prepared, step, why)
    except Unreachable as exc:
        return _failed(name, previous, exc.reason, str(exc), retry=True, unreachable=True)
    except APIError as exc:  # e.g. a drift read refused: this resource fails alone
        return _failed(name, previous, "ApplyFailed", str(exc), retry=True)


def _announce(ctx: ClusterContext, crs: CRS, cluster: Cluster, progress: _Progress) -> Result:
    """What this pass applied, per reason: told with the other clusters' passes as one
    event for the CRS (memory/notes), which the Result wakes once they settle."""
    then = NOTHING
    for why, resources in progress.applied.items():
        note = Note("Normal", why, cluster.name, resources=tuple(resources))
        quiet = ctx.announcements.note(crs.namespace, crs.name, note)
        then |= Result.waking(Wake(crs_key(crs.namespace, crs.name), quiet))
    return then


async def wanted_by(
    ctx: ClusterContext, namespace: str, crss: list[CRS], version: ClusterVersion
) -> set[ObjectKey]:
    """What the matching CRSs' sources ask for now on a cluster running ``version``
    (parsing is cached per content); resources following an unknown version count."""
    wanted: set[ObjectKey] = set()
    for crs in crss:
        for index, ref in enumerate(crs.valid.spec.resources):
            if version_match(crs.version_range(index), version.version) == "outside":
                continue
            source = await ctx.sources.load(namespace, ref)
            if source.error is None:
                with contextlib.suppress(ResourceError):
                    wanted |= wanted_keys(await ctx.sources.objects(source))
    return wanted


@dataclass(frozen=True)
class _Why:
    """Why a resource is applied now (the event reason), and which objects go out."""

    reason: Literal["Applied", "DriftCorrected"]
    scope: Scope


async def _why_apply(
    observer: Observer, step: Decision, previous: ResourceBinding | None
) -> _Why | None:
    """Why to apply this resource now, or None to leave it."""
    if isinstance(step, Apply):
        return _Why("Applied", step.scope)
    if isinstance(step, CheckDrift):
        assert previous is not None  # plan() checks drift only for what was applied
        if await observer.drifted(previous, step.mode):
            return _Why("DriftCorrected", "All")
    return None


async def _apply_resource(
    ctx: ClusterContext,
    client: KubeAPI,
    crs: CRS,
    cluster: Cluster,
    source: Source,
    prepared: Prepared,
    step: _Step,
    why: _Why,
) -> _Done:
    ref, previous, name = source.ref, step.previous, step.name
    try:
        manifest = await prepared.manifest(ctx.sources, source)
    except ResourceError as exc:
        return _failed(name, previous, exc.reason, str(exc))
    chosen = select_objects(manifest.objects, manifest.hashes, previous, why.scope)
    applied = await apply_objects(
        client,
        [manifest.objects[i] for i in chosen.send],
        field_manager=ctx.settings.field_manager,
        only_missing=step.strategy.apply.only_missing,
        confidential=ref.kind == "Secret",
        hashes=[manifest.hashes[i] for i in chosen.send],
        ignores=crs.ignores,
        inventory=_created(previous, step.observer),
    )
    current = {**chosen.kept, **{chosen.send[i]: d for i, d in applied.applied.items()}}
    record = record_apply(
        ref,
        previous,
        digest=prepared.digest,
        ok=applied.ok,
        objects=[current[i] for i in sorted(current)],
        skipped=applied.skipped,
        now=step.now,
    )
    _tell_apply(crs, cluster, name, applied, unchanged=len(chosen.kept))
    if not applied.ok:
        failure = ("ApplyFailed", f"{name}: {'; '.join(applied.errors)}")
        return _Done(name, record, failure, then=RETRY)
    then = Result.after(step.strategy.next_due(record, step.now))
    return _Done(name, record, applied_as=why.reason if chosen.send else None, then=then)


def _created(previous: ResourceBinding | None, observer: Observer) -> list[ObjectRef]:
    """The objects of the resource's inventory that exist: those sent with their
    ignored paths left out. One a drift check found missing is created again, whole
    (fields left to others get their first value again)."""
    if previous is None:
        return []
    missing = observer.seen_missing(previous.objects)
    return [o for o in previous.objects if o not in missing]


def _tell_apply(
    crs: CRS, cluster: Cluster, name: str, applied: ApplyResult, *, unchanged: int
) -> None:
    """One resource's apply, in the metrics and the log."""
    metrics.OBJECTS_APPLIED.inc(len(applied.applied))
    metrics.APPLY_ERRORS.inc(len(applied.errors))
    log.info(
        "resource applied" if applied.ok else "resource apply failed",
        crs=f"{crs.namespace}/{crs.name}",
        cluster=cluster.name,
        resource=name,
        objects=len(applied.applied),
        unchanged=unchanged,
        errors=len(applied.errors),
    )
