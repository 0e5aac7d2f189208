"""One CRS's pass over its resources on one cluster: load each source, decide with
the mode's strategy (and drift checks) whether to apply, apply, check health, run
the rollout step's validation, and record.

Returns the CRS's new binding entry and outcome; writing the binding is the scope's
job (``reconcile.scope``), once for all CRSs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Literal

import structlog

from crs_controller.core.api.models import CRSBinding, ObjectRef, ResourceBinding, ResourceRef
from crs_controller.core.errors import APIError, CRSError, ResourceError, Unreachable
from crs_controller.core.spec.modes import Apply, CheckDrift, Decision, Scope, Strategy
from crs_controller.core.spec.objects import CRS
from crs_controller.core.state.bindings import record_apply, recorded, select_objects
from crs_controller.core.state.status import NO_BUILD, Outcome
from crs_controller.core.versions.ranges import version_match
from crs_controller.engine.io import fleet_metrics, metrics
from crs_controller.engine.io.sources import Manifest, Source
from crs_controller.engine.memory.notes import Note
from crs_controller.engine.reconcile.admission import Go
from crs_controller.engine.reconcile.result import NOTHING, RETRY, Result, Wake, crs_key
from crs_controller.engine.reconcile.rollout import taking
from crs_controller.engine.reconcile.scope import ClusterScope, CRSPass, own_conflicts
from crs_controller.engine.reconcile.substitute import PassValues, Prepared, prepare
from crs_controller.engine.reconcile.validation import carried, validated
from crs_controller.engine.reconcile.workload.applying import ApplyResult, apply_objects
from crs_controller.engine.reconcile.workload.observing import Observer, check_health

log = structlog.get_logger(__name__)


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
    # No resource is for the cluster's version: those of other versions kept as applied.
    no_build: bool = False
    kept: list[str] = field(default_factory=list)

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


async def reconcile_pair(scope: ClusterScope, crs: CRS, go: Go) -> CRSPass:
    """The pass, once the gate let it go (reconcile/admission): ``go.target`` is the
    revision its rollout lets this cluster take (None: no rollout); with
    ``go.keep_installed`` (the gate could not read the revision) installed resources
    keep what they have."""
    run = _PairRun.start(scope, crs, go)
    progress = await _resources(scope, run)
    if run.drift_due:
        scope.ctx.drift.checked(run.pair, scope.ctx.clock.now())
    # Resources dropped from spec.resources leave the binding (Orphan: nothing deleted).
    entry = CRSBinding(cluster_resource_set_name=crs.name, resources=progress.resources)
    try:
        return await _finish(scope, run, progress, entry)
    except Exception as exc:  # what the pass applied stays recorded all the same
        return _ended(scope, run, entry, exc)


async def _finish(
    scope: ClusterScope, run: _PairRun, progress: _Progress, entry: CRSBinding
) -> CRSPass:
    """The pass once its resources had their turn: told, its outcome (readiness,
    what it waits for), then its step's validation."""
    crs, go = run.crs, run.go
    progress.then |= _announce(scope, crs, progress)
    outcome = _waiting(scope, run, progress, await _outcome(scope, run, progress))
    if go.keep_installed and progress.held:
        progress.then |= RETRY
    done = CRSPass(entry, outcome, progress.then)
    return await _attempted(
        scope, crs, await validated(scope, crs, done, target=go.target, run=go.validate)
    )


async def _attempted(scope: ClusterScope, crs: CRS, done: CRSPass) -> CRSPass:
    """A failed pass says which revision it failed taking (``reconcile.rollout.taking``),
    whatever resource failed and whether any was applied before: the rollout counts
    it against that revision, not against the mix of hashes the entry holds then."""
    if done.outcome.state != "Failed":
        return done
    rolled = await scope.rolled(crs)
    was = "" if rolled is None else taking(scope.ctx, crs, scope.before(crs.name), rolled)
    return replace(done, outcome=replace(done.outcome, revision=was))


def _ended(scope: ClusterScope, run: _PairRun, entry: CRSBinding, exc: Exception) -> CRSPass:
    """The pass, ended by an error once its resources had their turn: the error is
    the outcome, tried again, and what the pass applied stays recorded (its deletion
    policy still applies to it), with the validation record as it was carried."""
    crs, target = run.crs, run.go.target
    if isinstance(exc, Unreachable):
        outcome = Outcome("Failed", exc.reason, str(exc), crs.generation, revision=target or "")
    else:
        outcome = unexpected(scope, crs, exc, revision=target or "")
    return carried(scope, crs, CRSPass(entry, outcome, RETRY), target=target)


def unexpected(scope: ClusterScope, crs: CRS, exc: Exception, *, revision: str = "") -> Outcome:
    """An error nobody foresaw, as the pair's outcome: logged whole, named by its type
    alone (its text may quote what a status must not)."""
    log.exception("cluster pass failed", crs=crs.name, cluster="/".join(scope.key))
    message = f"unexpected {type(exc).__name__}; see the controller log"
    return Outcome("Failed", "ApplyFailed", message, crs.generation, revision=revision)


@dataclass(frozen=True)
class _PairRun:
    """What decides about every resource of one CRS's pass on the cluster."""

    crs: CRS
    go: Go
    now: datetime
    pair: tuple[str, str, str]  # (namespace, CRS, cluster): the drift schedule's key
    # The CRS's strategy with this pair's intervals (``Strategy.for_pair``): compiled
    # when the CRS was parsed (core/spec/objects), nothing is parsed here.
    strategy: Strategy
    drift_wait: float  # seconds until this pair's drift check is due
    observer: Observer  # one read per kind, shared by the resources' drift checks
    hold: bool  # the cluster upgrades: an installed resource keeps its revision
    values: PassValues  # read once, by the first resource with substitute

    @classmethod
    def start(cls, scope: ClusterScope, crs: CRS, go: Go) -> _PairRun:
        ctx = scope.ctx
        pair = (scope.cluster.namespace, crs.name, scope.cluster.name)
        strategy = crs.strategy.for_pair(pair)
        wait = ctx.drift.wait(pair, ctx.clock.now(), strategy.drift.interval)
        # What the CRS recorded on the cluster: all a drift LIST of this pass keeps.
        entry = scope.before(crs.name)
        inventory = [o for r in entry.resources for o in r.objects] if entry else []
        observer = Observer(scope.workload, ctx.settings.field_manager, crs.ignores, inventory)
        # While Cluster API upgrades the cluster, a new revision of an installed
        # resource waits (unless this CRS gates the upgrade): first installs still go.
        upgrading = scope.version.upgrading and not crs.valid.spec.gate_upgrades
        hold = go.keep_installed or upgrading
        values = PassValues(crs, scope.cluster)
        return cls(crs, go, ctx.clock.wall(), pair, strategy, wait, observer, hold, values)

    @property
    def drift_due(self) -> bool:
        return self.strategy.drift.enabled and self.drift_wait == 0


async def _resources(scope: ClusterScope, run: _PairRun) -> _Progress:
    """Each resource's turn, in spec order; those of another Kubernetes version leave
    the entry once the cluster's version has its resources applied (``_swap``), those
    following an unknown one stay as recorded."""
    crs, progress = run.crs, _Progress()
    drift = run.strategy.drift
    if drift.enabled:
        progress.then = Result.after(run.drift_wait or drift.interval)
    entry = scope.before(crs.name)
    progress.no_build = crs.lacks_version(scope.version.version)
    leaving: list[tuple[ResourceRef, ResourceBinding]] = []
    matched: list[_Done] = []  # the turns of the resources for the cluster's version
    taken: list[_Done] = []  # every turn for it, or for any version (no range)
    for index, ref in enumerate(crs.valid.spec.resources):
        previous = recorded(entry, ref)
        match version_match(crs.version_range(index), scope.version.version):
            case "unknown":  # kept as it is, neither applied nor withdrawn
                progress.add(_Done(ref.name, previous))
                progress.unversioned.append(f"{ref.kind}/{ref.name}")
                continue
            case "outside":  # another version's build: it leaves, or stays (_swap)
                leaving += [(ref, previous)] if previous is not None else []
                continue
        if progress.unreachable:
            done = _Done(ref.name, previous)  # not reached: unchanged
        else:
            done = await _resource_pass(scope, run, _Turn(ref, previous))
        progress.add(done)
        taken.append(done)
        matched += [done] if crs.version_range(index) is not None else []
    progress.then |= _tell_own_conflicts(scope, crs, taken)
    _swap(crs, progress, leaving, matched)
    return progress


def _tell_own_conflicts(scope: ClusterScope, crs: CRS, taken: Sequence[_Done]) -> Result:
    """Objects two resources for the cluster's version record with other content,
    told when either was applied in this pass (another version's build may differ)."""
    applied = {done.name for done in taken if done.applied_as}
    records = [done.record for done in taken if done.record is not None]
    return scope.tell_own_conflicts(crs, own_conflicts(records, applied)) if applied else NOTHING


def _swap(
    crs: CRS,
    progress: _Progress,
    leaving: list[tuple[ResourceRef, ResourceBinding]],
    matched: list[_Done],
) -> None:
    """The builds of another version leave the entry (and deletionPolicy Delete
    removes what no one else wants of them) only once every resource for the
    cluster's version is applied there. Until then (none for it, or one failing:
    a broken new build must not take the working one away) they stay as recorded."""
    if matched and all(_installed(done) for done in matched):
        return
    progress.resources += [previous for _, previous in leaving]
    progress.kept += [f"{ref.kind}/{ref.name}" for ref, _ in leaving]
    place = {(r.kind, r.name): i for i, r in enumerate(crs.valid.spec.resources)}
    progress.resources.sort(key=lambda r: place[(r.kind, r.name)])


def _installed(done: _Done) -> bool:
    """A resource's turn left it applied on the cluster."""
    return done.failure is None and done.record is not None and done.record.applied


def _waiting(scope: ClusterScope, run: _PairRun, progress: _Progress, outcome: Outcome) -> Outcome:
    """What an otherwise applied pass waits for: the sources' revision (unreadable
    when the gate asked), the end of the cluster's upgrade (a new revision kept back),
    or its version (resources that follow it)."""
    generation, cluster = run.crs.generation, scope.cluster.name
    if outcome.state == "Failed":
        return outcome
    if progress.no_build:
        return _no_build(scope, run, progress)
    if progress.held and run.go.keep_installed:
        message = (
            f"the revision of the sources could not be read: {', '.join(progress.held)} "
            "keep what they have until it can"
        )
        return Outcome("Progressing", "Progressing", message, generation)
    if progress.held:
        message = (
            f"Cluster API is upgrading cluster {cluster}: the new revision of "
            f"{', '.join(progress.held)} waits until the upgrade is done"
        )
        return Outcome("Progressing", "UpgradeInProgress", message, generation)
    if progress.unversioned:
        message = (
            f"{', '.join(progress.unversioned)} follow the Kubernetes version, unknown for "
            f"cluster {cluster}: {scope.version.unknown}"
        )
        return Outcome("Waiting", "WaitingForVersion", message, generation)
    return outcome


def _no_build(scope: ClusterScope, run: _PairRun, progress: _Progress) -> Outcome:
    """No resource of the CRS is for the version the cluster runs: what it has of
    them stays, and the operator is told to add one."""
    version = f"v{scope.version.version}"
    kept = (
        f"{', '.join(progress.kept)} stay as applied"
        if progress.kept
        else "nothing of them is applied"
    )
    message = (
        f"cluster {scope.cluster.name} runs Kubernetes {version}, which no resource's "
        f"spec.resources[].kubernetesVersions contains: {kept} until one does"
    )
    return Outcome("Waiting", NO_BUILD, message, run.crs.generation)


async def _outcome(scope: ClusterScope, run: _PairRun, progress: _Progress) -> Outcome:
    """The pass's outcome: its first failure, else applied (and Ready, when the CRS
    waits for it). The outcome says which revision it is for: a rollout's soak counts
    from when a cluster reached the new one, even if its outcome reads the same."""
    crs, rev = run.crs, run.go.target or ""
    if progress.failures:
        message = "; ".join([*(m for _, m in progress.failures), *_staying(scope, progress)])
        return Outcome("Failed", progress.failures[0][0], message, crs.generation, revision=rev)
    outcome = Outcome("Applied", "Applied", "all resources applied", crs.generation, revision=rev)
    check = crs.valid.spec.health_check
    if check is not None and check.wait:
        outcome = await _health(scope, run, progress, outcome)
    return outcome


def _staying(scope: ClusterScope, progress: _Progress) -> list[str]:
    """What a failed pass keeps of another version's builds, for its message."""
    if not progress.kept or progress.no_build:
        return []
    version = f"v{scope.version.version}"
    return [f"{', '.join(progress.kept)} stay as applied until the resources for {version} apply"]


async def _health(
    scope: ClusterScope, run: _PairRun, progress: _Progress, applied: Outcome
) -> Outcome:
    """The outcome once the applied objects' readiness is known; schedules the next
    look while waiting. A cluster that stops answering is this outcome, ClusterUnreachable:
    what the pass applied stays recorded (its deletion policy still applies to it)."""
    crs, cluster = run.crs, scope.cluster
    assert crs.valid.spec.health_check is not None
    try:
        checked = await check_health(
            run.observer,
            crs.valid.spec.health_check,
            progress.resources,
            limit=crs.strategy.durations.health_timeout,
            applied=applied,
            previous=scope.ctx.outcomes.get(cluster.namespace, crs.name, cluster.name),
            sent_now=bool(progress.applied),
            now=run.now,
            rules=crs.health_rules,
        )
    except Unreachable as exc:
        progress.then |= RETRY
        return Outcome("Failed", exc.reason, str(exc), crs.generation, revision=applied.revision)
    progress.then |= checked.then
    return checked.outcome


@dataclass(frozen=True)
class _Turn:
    """One resource's turn in a pass: its reference and what was recorded for it."""

    ref: ResourceRef
    previous: ResourceBinding | None

    @property
    def name(self) -> str:
        """Kind/name, for events and messages."""
        return f"{self.ref.kind}/{self.ref.name}"


@dataclass(frozen=True)
class _Loaded:
    """A resource's source as it is now, prepared for this cluster."""

    source: Source
    prepared: Prepared


async def _resource_pass(scope: ClusterScope, run: _PairRun, turn: _Turn) -> _Done:
    previous, name = turn.previous, turn.name
    source = await scope.source(run.crs, turn.ref)
    if source.error is not None:
        return _failed(name, previous, source.error.reason, str(source.error))
    try:
        prepared = await prepare(scope.ctx.sources, run.values, source)
    except CRSError as exc:  # UnresolvedVariable, InvalidManifest: this cluster alone
        return _failed(name, previous, exc.reason, str(exc))
    if _held(run, previous, prepared.digest):
        return _Done(name, previous, held=True)
    try:
        decision = run.strategy.decide(previous, prepared.digest, run.now, run.drift_due)
        why = await _why_apply(run.observer, decision, previous)
        if isinstance(decision, CheckDrift):
            log.debug("drift checked", **_where(scope, run), resource=name, drifted=why is not None)
        if why is None:
            assert previous is not None
            return _Done(
                name, previous, then=Result.after(run.strategy.next_due(previous, run.now))
            )
        return await _apply_resource(scope, run, turn, _Loaded(source, prepared), why)
    except Unreachable as exc:
        return _failed(name, previous, exc.reason, str(exc), retry=True, unreachable=True)
    except APIError as exc:  # e.g. a drift read refused: this resource fails alone
        return _failed(name, previous, "ApplyFailed", str(exc), retry=True)


def _held(run: _PairRun, previous: ResourceBinding | None, digest: str) -> bool:
    """A new revision of an installed resource that the strategy would apply now is
    kept back (``run.hold``); one it would not apply (ApplyOnce ignores edits) is
    nothing to wait for."""
    return (
        run.hold
        and previous is not None
        and previous.applied
        and previous.hash != digest
        and run.strategy.needs_apply(previous, digest, run.now)
    )


def _where(scope: ClusterScope, run: _PairRun) -> dict[str, str]:
    """The pair, for the log."""
    return {"crs": f"{run.crs.namespace}/{run.crs.name}", "cluster": scope.cluster.name}


def _announce(scope: ClusterScope, crs: CRS, progress: _Progress) -> Result:
    """What this pass applied, per reason: told with the other clusters' passes as one
    event for the CRS (memory/notes), which the Result wakes once they settle."""
    then = NOTHING
    if "DriftCorrected" in progress.applied:
        now = scope.ctx.clock.now()
        fleet_metrics.drift_corrected(crs.namespace, crs.name, scope.cluster.name, now)
    for why, resources in progress.applied.items():
        note = Note("Normal", why, scope.cluster.name, resources=tuple(resources))
        quiet = scope.ctx.announcements.note(crs.namespace, crs.name, note)
        then |= Result.waking(Wake(crs_key(crs.namespace, crs.name), quiet))
    return then


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
    scope: ClusterScope, run: _PairRun, turn: _Turn, loaded: _Loaded, why: _Why
) -> _Done:
    previous, name = turn.previous, turn.name
    try:
        manifest = await loaded.prepared.manifest(scope.ctx.sources, loaded.source)
    except ResourceError as exc:
        return _failed(name, previous, exc.reason, str(exc))
    chosen = select_objects(manifest.objects, manifest.hashes, previous, why.scope)
    applied, stopped = await _send(scope, run, turn, manifest, chosen.send)
    current = {**chosen.kept, **{chosen.send[i]: d for i, d in applied.applied.items()}}
    objects = [current[i] for i in sorted(current)]
    record = record_apply(
        turn.ref,
        previous,
        digest=loaded.prepared.digest,
        ok=applied.ok and stopped is None,
        objects=objects,
        skipped=applied.skipped,
        now=run.now,
    )
    then = _tell_apply(scope, run, name, applied, unchanged=len(chosen.kept))
    if stopped is not None:  # what went out before is recorded all the same
        failure = (stopped.reason, str(stopped))
        return _Done(name, record, failure, then=then | RETRY, unreachable=True)
    if not applied.ok:
        failure = ("ApplyFailed", f"{name}: {'; '.join(applied.errors)}")
        return _Done(name, record, failure, then=then | RETRY)
    then |= Result.after(run.strategy.next_due(record, run.now))
    return _Done(name, record, applied_as=why.reason if chosen.send else None, then=then)


async def _send(
    scope: ClusterScope, run: _PairRun, turn: _Turn, manifest: Manifest, send: Sequence[int]
) -> tuple[ApplyResult, Unreachable | None]:
    """Apply the objects at ``send``: what was applied, and the Unreachable that
    stopped it midway (the objects applied before it are in the result). Whatever
    went out is noted as applied but not recorded, however the apply ends (even
    cancelled): the binding write that records it settles the note."""
    applied = ApplyResult()
    inventory = _created(turn.previous, run.observer)
    claimed = _unseen(_claimed(scope.before(run.crs.name), turn.ref), run.observer)
    try:
        await apply_objects(
            scope.workload,
            [manifest.objects[i] for i in send],
            field_manager=scope.ctx.settings.field_manager,
            only_missing=run.strategy.apply.only_missing,
            confidential=turn.ref.kind == "Secret",
            hashes=[manifest.hashes[i] for i in send],
            ignores=run.crs.ignores,
            inventory=inventory,
            claimed=claimed,
            present=run.observer.seen_present([*inventory, *claimed]),
            theirs=scope.listed_by_others(run.crs.name),
            into=applied,
        )
    except Unreachable as exc:
        return applied, exc
    finally:
        sent = [*applied.applied.values(), *filter(None, [applied.sending])]
        scope.note_applied(run.crs, turn.ref, sent)
    return applied, None


def _created(previous: ResourceBinding | None, observer: Observer) -> list[ObjectRef]:
    """The objects of the resource's inventory not found missing: those sent with
    their ignored paths left out once known to exist (``apply_objects`` reads the
    ones this pass did not list). One a drift check found missing is created again,
    whole (fields left to others get their first value again)."""
    return _unseen(previous.objects, observer) if previous is not None else []


def _unseen(objects: Sequence[ObjectRef], observer: Observer) -> list[ObjectRef]:
    """``objects`` less those a drift check of this pass found missing."""
    missing = observer.seen_missing(objects)
    return [o for o in objects if o not in missing]


def _claimed(entry: CRSBinding | None, ref: ResourceRef) -> list[ObjectRef]:
    """What the CRS's other resources record on the cluster: ApplyOnce sends these
    rather than take them as its own unsent (a new build taking over the previous
    build's objects of the same names must go out)."""
    if entry is None:
        return []
    others = (r for r in entry.resources if (r.kind, r.name) != (ref.kind, ref.name))
    return [o for r in others for o in r.objects]


def _tell_apply(
    scope: ClusterScope, run: _PairRun, name: str, applied: ApplyResult, *, unchanged: int
) -> Result:
    """One resource's apply, in the metrics and the log, and the objects it applied
    that another CRS applies with other content (``ClusterScope.tell_conflicts``)."""
    metrics.OBJECTS_APPLIED.inc(len(applied.applied))
    metrics.APPLY_ERRORS.inc(len(applied.errors))
    log.info(
        "resource applied" if applied.ok else "resource apply failed",
        **_where(scope, run),
        resource=name,
        objects=len(applied.applied),
        unchanged=unchanged,
        errors=len(applied.errors),
    )
    return scope.tell_conflicts(run.crs, applied.applied.values())
