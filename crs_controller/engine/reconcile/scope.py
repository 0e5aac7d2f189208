"""One cluster's pass as one value, in the spirit of Cluster API's scope objects.

A ``ClusterScope`` holds what a cluster's pass works with: the context, the Cluster,
its workload client (None while it cannot be contacted), the version its control
plane runs, the binding's entries as recorded before the pass and as the pass writes
them, the sources the pass loaded, and the cluster's place in the fleet-wide update
budget. The gate, the pairs, validation and pruning take the scope and read it; only
its methods change it: ``settle`` writes a pair's entry, the budget is asked and
given back here and nowhere else in a pass (a place given back wakes the clusters it
lets go at once, through the budget: not in the Result, which a pass that fails later
never returns), ``prune`` deletes what left, ``record`` writes the binding once.

Every function of the cluster's pass takes the scope first, then the CRS (or the
pair's own pass, which holds it), then what it works on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import structlog

from crs_controller.clients.api import KubeAPI
from crs_controller.clients.workload import kubeconfig_secret_name
from crs_controller.core.api.models import (
    ClusterResourceSetBinding,
    CRSBinding,
    ObjectKey,
    ObjectRef,
    ResourceBinding,
    ResourceRef,
)
from crs_controller.core.errors import CRSError, ResourceError, Unreachable
from crs_controller.core.spec.objects import CRS, Cluster
from crs_controller.core.state.bindings import (
    cluster_owner_reference,
    conflicts,
    entries_by_crs,
    owner_reference,
    with_outcome,
    with_unrecorded,
)
from crs_controller.core.state.deletion_guard import (
    DELETION_SKIPPED,
    Allowances,
    Kept,
    allowances,
    carried,
    describe,
)
from crs_controller.core.state.prune_decisions import DELETION_REFUSED, inventory, wanted_keys
from crs_controller.core.state.status import WARNING_REASONS, Outcome
from crs_controller.core.values.dependencies import removal_order
from crs_controller.core.versions.ranges import version_match
from crs_controller.engine.io import metrics
from crs_controller.engine.io.sources import Source
from crs_controller.engine.memory.notes import OBJECT_CONFLICT, RESOURCES_SHOWN, Note
from crs_controller.engine.memory.unrecorded import Terms
from crs_controller.engine.reconcile.context import ClusterContext
from crs_controller.engine.reconcile.recording import write_binding
from crs_controller.engine.reconcile.result import (
    NOTHING,
    RETRY,
    Result,
    Wake,
    crs_key,
)
from crs_controller.engine.reconcile.rollout import RolledOut, rolled_out
from crs_controller.engine.reconcile.substitute import PassValues, prepare
from crs_controller.engine.reconcile.workload.pruning import Pruned, prune

log = structlog.get_logger(__name__)

BUDGET_WAIT = "BudgetExhausted"
DELETED = "Deleted"  # the Event reason of objects deleted as they left the desired set
CONFLICTS_SHOWN = 3  # objects named in one cluster's ObjectConflict message
REFERENCE_START = "${"  # how every reference a substitution replaces begins


@dataclass(frozen=True)
class CRSPass:
    """How one CRS's pass on one cluster ended: its binding entry and outcome, and
    what should happen next; ``hold`` is the outcome of what held the pass when it
    records another (a held retry keeps its failure: ``admission.Held.keeps``), which
    the fleet-wide budget goes by."""

    entry: CRSBinding
    outcome: Outcome
    then: Result = NOTHING
    hold: Outcome | None = None


class ClusterScope:
    """What one cluster's pass works with, and the only writer of its new entries."""

    def __init__(
        self, ctx: ClusterContext, cluster: Cluster, binding: ClusterResourceSetBinding | None
    ) -> None:
        self.ctx = ctx
        self.cluster = cluster
        self.binding = binding
        self.client: KubeAPI | None = None
        self.version = ctx.control_planes.of(cluster)
        recorded = entries_by_crs(binding)
        # Paused CRSs are left alone: their entries stay exactly as they are.
        keep = {c.name for c in ctx.caches.crss_in(cluster.namespace) if c.left_alone}
        self._now = {n: e for n, e in recorded.items() if n in keep}
        # What earlier passes applied and could not record counts as recorded before
        # this one (``memory.unrecorded``): kept, recorded, pruned like the rest.
        noted = ctx.unrecorded.of(self.key, self.uid)
        self._taken = {n: objects for n, objects in noted.items() if n not in keep}
        self._before = with_unrecorded(recorded, self._taken)
        self._settled: set[str] = set()  # the CRSs whose pass ran here
        self._budget_waits: set[str] = set()  # the CRSs whose pass waits for the budget
        self._sources: dict[tuple[str, str], Source] = {}
        self._rolled: dict[str, RolledOut | None] = {}

    @property
    def key(self) -> tuple[str, str]:
        return (self.cluster.namespace, self.cluster.name)

    @property
    def where(self) -> str:
        return "/".join(self.key)

    @property
    def uid(self) -> str:
        return self.cluster.meta.uid or ""

    def entries(self) -> dict[str, CRSBinding]:
        """Every entry as recorded before this pass, with what earlier passes applied
        and did not record."""
        return dict(self._before)

    def note_applied(self, crs: CRS, ref: ResourceRef, sent: Iterable[ObjectRef]) -> None:
        """``sent`` went out from ``crs``'s resource ``ref``: applied until a binding
        write records it (``memory.unrecorded``), with what deleting it needs should
        the CRS be gone by the next pass."""
        spec = crs.valid.spec
        terms = Terms(spec.deletion_policy, allowances(spec.resources))
        resource = (ref.kind, ref.name)
        self.ctx.unrecorded.note(self.key, self.uid, crs.name, resource, sent, terms)

    def keep_as_recorded(self, names: Collection[str]) -> None:
        """The entries of ``names`` stay as recorded before this pass (with what
        earlier passes applied and did not record): no pass of theirs runs here."""
        self._now |= {n: e for n, e in self._before.items() if n in names}

    @property
    def workload(self) -> KubeAPI:
        """The workload cluster's client: a pair's pass runs only once connected."""
        assert self.client is not None
        return self.client

    def before(self, crs_name: str) -> CRSBinding | None:
        """The CRS's entry as the binding had it before this pass."""
        return self._before.get(crs_name)

    def kept(self, crs_name: str) -> CRSBinding:
        """The entry a pass that changed nothing records: the one before, or a new one."""
        return self._before.get(crs_name) or CRSBinding(cluster_resource_set_name=crs_name)

    def recorded(self, crs_name: str) -> CRSBinding | None:
        """The CRS's entry as this pass wrote it, else as the binding had it: what a
        dependent asks (a dependency done earlier in the pass counts at once)."""
        return self._now.get(crs_name) or self._before.get(crs_name)

    def listed(self, entry: CRSBinding) -> frozenset[ObjectKey]:
        """Every object an entry of the binding lists: as recorded before this pass, as
        this pass wrote it, or in ``entry`` (a pair's, not settled yet)."""
        entries = [*self._before.values(), *self._now.values(), entry]
        return frozenset(ref.key for ref in inventory(entries))

    def listed_by_others(self, crs_name: str) -> list[ObjectRef]:
        """Every object the entries of other CRSs than ``crs_name`` list: as recorded
        before this pass, or as this pass wrote them."""
        entries = [*self._before.items(), *self._now.items()]
        return list(inventory(e for name, e in entries if name != crs_name))

    def tell_conflicts(self, crs: CRS, applied: Iterable[ObjectRef]) -> Result:
        """Objects ``crs`` just applied that another CRS selecting this cluster records
        with other content: told as a Warning naming the objects and the other CRSs
        (never content), with the other clusters' as one Event for ``crs``. (An entry
        of a CRS that left keeps its inventory only until pruning.)"""
        others = {**self._before, **self._now}
        others.pop(crs.name, None)
        found = conflicts(applied, others)
        if found:  # rare: only then are the selecting CRSs looked up
            selecting = {c.name for c in self.ctx.caches.matching_crss(self.cluster)}
            found = [(ref, name) for ref, name in found if name in selecting]
        told = [f"{ref} also applied by ClusterResourceSet {name}" for ref, name in found]
        return self._warn_conflicts(crs, told)

    def tell_own_conflicts(self, crs: CRS, found: Sequence[tuple[ObjectRef, str, str]]) -> Result:
        """Objects two resources of ``crs`` record with other content (``own_conflicts``):
        told like ``tell_conflicts``, naming both resources."""
        told = [f"{ref} applied by both {a} and {b}" for ref, a, b in found]
        return self._warn_conflicts(crs, told)

    def _warn_conflicts(self, crs: CRS, told: Sequence[str]) -> Result:
        """One ObjectConflict Warning for ``crs`` on this cluster, ``told`` naming each
        object and its other writer (the first CONFLICTS_SHOWN, then a count)."""
        if not told:
            return NOTHING
        more = f" and {len(told) - CONFLICTS_SHOWN} more" if len(told) > CONFLICTS_SHOWN else ""
        shown = ", ".join(told[:CONFLICTS_SHOWN])
        message = f"{shown}{more}: with other content, each apply undoes the other"
        log.warning("object conflict", crs=crs.name, cluster=self.cluster.name, objects=len(told))
        note = Note("Warning", OBJECT_CONFLICT, self.cluster.name, message=message)
        quiet = self.ctx.announcements.note(crs.namespace, crs.name, note)
        return Result.waking(Wake(crs_key(crs.namespace, crs.name), quiet))

    async def connect(self) -> Outcome | None:
        """Open the cluster's client, or say why it cannot be contacted."""
        ctx, (namespace, name) = self.ctx, self.key
        secret_name = kubeconfig_secret_name(name)
        if not self.cluster.initialized:
            message = (
                "control plane not initialized "
                "(status.initialization.controlPlaneInitialized / status.controlPlaneReady)"
            )
            return Outcome("Pending", "WaitingForCluster", message, 0)
        secret = await ctx.sources.content(namespace, "Secret", secret_name)
        if secret is None:
            message = f"kubeconfig Secret {secret_name} not found"
            return Outcome("Pending", "WaitingForCluster", message, 0)
        try:
            self.client = await ctx.workloads.get(namespace, name, secret)
        except Unreachable as exc:
            return Outcome("Failed", exc.reason, str(exc), 0)
        except Exception as exc:  # this cluster's failure, retried with backoff
            # The outcome (tenants read it) names the type alone; the log keeps the
            # traceback for the operator, as every unexpected failure's does.
            log.exception("workload client not built", cluster=f"{namespace}/{name}")
            message = f"unexpected {type(exc).__name__}; see the controller log"
            return Outcome("Failed", Unreachable.reason, message, 0)
        return None

    async def rolled(self, crs: CRS) -> RolledOut | None:
        """What ``crs`` rolls out now (``reconcile.rollout.rolled_out``), found once in
        this pass whoever asks (the gate, the pair, pruning's wanted set)."""
        if crs.name not in self._rolled:
            self._rolled[crs.name] = await rolled_out(self.ctx, crs)
        return self._rolled[crs.name]

    async def source(self, crs: CRS, ref: ResourceRef) -> Source:
        """A source of ``crs`` as it rolls out now: from the snapshot of the revision
        a rollback returns to, else as it is now, loaded once in this pass whoever
        asks (a pair, then pruning's wanted set)."""
        rolled = await self.rolled(crs)
        if rolled is not None and rolled.snapshot is not None:
            return rolled.snapshot[(ref.kind, ref.name)]
        key = (ref.kind, ref.name)
        if key not in self._sources:
            self._sources[key] = await self.ctx.sources.load(self.cluster.namespace, ref)
        return self._sources[key]

    def settle(self, crs: CRS, done: CRSPass) -> Result:
        """Record a pass's outcome in its entry and in memory, noting a new failure,
        and give back the cluster's budget place once the pair no longer updates.
        Every matching CRS gets an entry, even before anything was applied: the
        binding is where every replica reads this pair's outcome from."""
        ctx, previous = self.ctx, self._before.get(crs.name)
        told = with_outcome(carried(done.entry, previous), previous, done.outcome, ctx.clock.wall())
        self._now[crs.name] = told
        self._settled.add(crs.name)
        then = done.then
        self._budget_after(crs.name, done.hold or done.outcome)
        changed = ctx.outcomes.record(crs.namespace, crs.name, self.cluster.name, done.outcome)
        if changed and _news(previous, told, done.outcome):
            then |= self._warn(crs, done.outcome)
        return then

    def _warn(self, crs: CRS, outcome: Outcome) -> Result:
        """Note a failure, told with the other clusters' as one event for the CRS,
        which the Result wakes once they settle."""
        note = Note("Warning", outcome.reason, self.cluster.name, message=outcome.message)
        quiet = self.ctx.announcements.note(crs.namespace, crs.name, note)
        return Result.waking(Wake(crs_key(crs.namespace, crs.name), quiet))

    # The fleet-wide budget of clusters updating at once: asked, waited for and given
    # back here alone in a pass (``memory.budget`` counts; the runtime sets its limit).

    def ask_budget(self, crs_name: str, step: int) -> bool:
        """May this cluster take a new revision of ``crs_name`` now (rollout step
        ``step`` orders the waiters)? A cluster counts once, whatever it updates."""
        return self.ctx.budget.ask(self.key, crs_name, step)

    def budget_waiters(self, order: Iterable[str]) -> list[str]:
        """The pairs told to wait for the budget earlier in this pass, if the cluster
        may go now (another cluster freed a place meanwhile, or a later pair of this
        cluster took one): they go in the same pass."""
        held = [n for n in order if n in self._budget_waits]
        return held if held and self.ctx.budget.may_go(self.key) else []

    def _budget_after(self, crs_name: str, outcome: Outcome) -> None:
        """A pair that no longer takes a new revision (done, or held for another
        reason) gives its place back, or leaves the line. Applied and not Ready yet,
        it still updates; failed, it keeps its place for its retry (as a Deployment's
        failing Pod counts against maxUnavailable): given back, a retry on the revision
        it already has would update beside the clusters that took the place. Not for
        ever, though: a holder failing for long while its namespace holds more than
        its share and another namespace waits gives it back (``Budget.failed``). A
        failed pair that only waited steps aside: at the head of the line, a pass that
        keeps failing before it can ask (a broken kubeconfig) would hold every cluster
        behind it with a place free."""
        failed = outcome.state == "Failed"
        still = failed or (outcome.state == "Applied" and not outcome.ready)
        if outcome.reason == BUDGET_WAIT:
            self._budget_waits.add(crs_name)
        else:
            self._budget_waits.discard(crs_name)
        if outcome.reason != BUDGET_WAIT and not still:
            self.ctx.budget.release(self.key, crs_name)
        elif failed:
            self.ctx.budget.failed(self.key, crs_name)
        else:
            self.ctx.budget.going(self.key)
        _count(self.ctx)

    def forget_left(self) -> None:
        """Pairs whose CRS no longer selects this cluster leave the CRS's status and
        memory. A place taken mid-update goes back to the budget unless this pass ran
        the pair: its CRS left, or is left alone (paused, or a spec the model refuses)
        and takes no revision while it is."""
        ctx, (namespace, name) = self.ctx, self.key
        for crs_name in set(self._before) - set(self._now):
            ctx.outcomes.drop_pair(namespace, crs_name, name)
            ctx.drift.forget_pair((namespace, crs_name, name))
        for crs_name in ctx.budget.pairs(self.key) - self._settled:
            ctx.budget.release(self.key, crs_name)
        _count(ctx)

    async def prune(self, crss: list[CRS]) -> Result:
        """deletionPolicy Delete: remove what left the desired set. Every CRS that
        still exists has a say, including those being deleted or no longer matching;
        one gone has a say on what this replica applied for it and did not record, by
        the terms it had then (``memory.unrecorded``)."""
        ctx, namespace = self.ctx, self.cluster.namespace
        present = ctx.caches.crss_in(namespace)
        deciding = [c for c in present if not c.left_alone]
        # Read alone from a refused spec of a CRS being deleted (CRS.deletion_policy).
        policies = {c.name: c.deletion_policy or "Orphan" for c in deciding}
        before = dict(self._before)
        gone = self._gone({c.name for c in present})
        for name, terms in gone.items():
            # Its entry is what was noted alone: a recorded one the CRS left behind
            # is dropped, as any entry of a CRS gone entirely.
            before[name] = with_unrecorded({}, {name: self._taken[name]})[name]
            policies[name] = terms.policy
        if not any(policies.get(n) == "Delete" for n in before):
            return self._waits_over()
        allowed: dict[str, Allowances] = {
            c.name: allowances(c.deletion_resources) for c in deciding
        }
        allowed |= {name: terms.allowed for name, terms in gone.items()}
        order = removal_order(before, ctx.caches.dependencies(namespace))
        ctx.still_ours(*self.key)
        pruned = await prune(
            self.client,
            before,
            self._now,
            policies,
            await self._wanted(crss),
            order,
            allowed=allowed,
            after=self._dependents_first(present, order),
            field_manager=ctx.settings.field_manager,
        )
        self._now = self._without_gone(pruned.entries, gone)
        then = self._waits_over(pruned.waiting) | await self._tell_pruned(pruned)
        return then | (RETRY if pruned.errors or pruned.waiting else NOTHING)

    def _waits_over(self, waiting: Mapping[str, str] | None = None) -> Result:
        """Noted for the CRS passes: the CRSs being deleted whose deletion waits here
        for a dependent (``waiting``, by CRS); every other wait here is over."""
        self.ctx.deletion_waits.settle(self.cluster.namespace, self.cluster.name, waiting or {})
        return NOTHING

    def _dependents_first(
        self, present: Iterable[CRS], order: Sequence[str]
    ) -> dict[str, list[str]]:
        """Removal runs the other way: a CRS being deleted deletes nothing here while a
        CRS that depends on it, being deleted too, still has objects here (its own
        deletion failed, or waits: it is paused, say). A dependent that stays is not
        waited for: deleting the CRS it depends on is what was asked. Only dependents
        earlier in the removal ``order`` count, so no two CRSs wait for each other."""
        graph = self.ctx.caches.dependencies(self.cluster.namespace).graph
        rank = {name: index for index, name in enumerate(order)}
        deleting = sorted(c.name for c in present if c.deleting and c.name in rank)
        return {
            name: [d for d in deleting if name in graph.get(d, ()) and rank[d] < rank[name]]
            for name in deleting
        }

    def _gone(self, present: Collection[str]) -> dict[str, Terms]:
        """The CRSs no longer in the cache whose noted objects this pass took, with the
        terms of their deletion."""
        terms = self.ctx.unrecorded.terms(self.key, self.uid)
        return {n: terms[n] for n in self._taken if n not in present and n in terms}

    def _without_gone(
        self, entries: dict[str, CRSBinding], gone: Mapping[str, Terms]
    ) -> dict[str, CRSBinding]:
        """No entry is written for a CRS that is gone: what of its noted objects could
        not be deleted now (an error, the cluster out of reach) stays noted, and the
        next pass deletes it."""
        for name in gone:
            if entries.pop(name, None) is not None:
                del self._taken[name]
                log.info("objects of a deleted CRS left to delete", crs=name, cluster=self.where)
        return entries

    async def _wanted(self, crss: list[CRS]) -> set[ObjectKey]:
        """What the matching CRSs' sources ask for now on this cluster's version
        (parsing is cached per content); resources following an unknown version count."""
        wanted: set[ObjectKey] = set()
        for crs in crss:
            for index, ref in enumerate(crs.valid.spec.resources):
                if version_match(crs.version_range(index), self.version.version) == "outside":
                    continue
                source = await self.source(crs, ref)
                if source.error is None:
                    with contextlib.suppress(ResourceError):
                        wanted |= await self._wanted_from(crs, source)
        return wanted

    async def _wanted_from(self, crs: CRS, source: Source) -> set[ObjectKey]:
        """What one source asks for on this cluster: a ``substitute: true`` resource
        whose objects' names hold a reference wants them as substituted with this
        cluster's values. One that cannot be substituted here wants what it names as
        written, which protects no object its references would name."""
        keys = wanted_keys(await self.ctx.sources.objects(source))
        if not any(REFERENCE_START in part for key in keys for part in key):
            return keys
        try:
            prepared = await prepare(self.ctx.sources, PassValues(crs, self.cluster), source)
            manifest = await prepared.manifest(self.ctx.sources, source)
        except CRSError:  # UnresolvedVariable, InvalidManifest: this cluster alone
            return keys
        return wanted_keys(manifest.objects)

    async def _tell_pruned(self, pruned: Pruned) -> Result:
        """Deletions and their refusals told as applies are: one Event per CRS and
        reason for every cluster's (memory/notes); failures as Warnings at once."""
        ctx, (namespace, name) = self.ctx, self.key
        then = NOTHING
        for crs_name, deleted in pruned.deleted.items():
            # At most the names an Event shows are kept; the rest are counted.
            shown = tuple(str(r) for r in deleted[:RESOURCES_SHOWN])
            note = Note("Normal", DELETED, name, resources=shown, more=len(deleted) - len(shown))
            quiet = ctx.announcements.note(namespace, crs_name, note)
            then |= Result.waking(Wake(crs_key(namespace, crs_name), quiet))
        for crs_name, refused in pruned.refused.items():
            # A binding entry naming objects we cannot show we applied: forged or
            # stale. Told with the other clusters' (one notification, not one each).
            note = Note("Warning", DELETION_REFUSED, name, message=refused)
            quiet = ctx.announcements.note(namespace, crs_name, note)
            then |= Result.waking(Wake(crs_key(namespace, crs_name), quiet))
        for crs_name, kept in pruned.kept.items():
            then |= await self._tell_kept(crs_name, kept)
        for crs_name, errors in pruned.errors.items():
            message = f"cluster {name}: deletion incomplete: " + "; ".join(errors)
            log.warning("deletion incomplete", crs=crs_name, cluster=f"{namespace}/{name}")
            if owner := ctx.caches.crs(namespace, crs_name):
                await ctx.events.emit(owner, "Warning", "DeleteFailed", message)
        return then

    async def _tell_kept(self, crs_name: str, kept: list[Kept]) -> Result:
        """Protected objects no allowDelete names, left on the cluster and forgotten:
        told with the other clusters' as one Warning for the CRS, or at once for a
        CRS being deleted (its notes are never told)."""
        ctx, (namespace, name) = self.ctx, self.key
        owner = ctx.caches.crs(namespace, crs_name)
        if owner is None:
            return NOTHING
        if owner.deleting:
            message = f"cluster {name}: {describe(kept)}"
            await ctx.events.emit(owner, "Warning", DELETION_SKIPPED, message)
            return NOTHING
        note = Note("Warning", DELETION_SKIPPED, name, message=describe(kept))
        quiet = ctx.announcements.note(namespace, crs_name, note)
        return Result.waking(Wake(crs_key(namespace, crs_name), quiet))

    async def record(self, entries: Mapping[str, CRSBinding] | None = None) -> Result:
        """Write the binding once (``entries``: what a cleanup left instead of this
        pass's), owned by the CRSs it has entries for and by the Cluster. A retry when
        another writer changed an entry this pass changed too: the pass is redone on
        its binding."""
        ctx, (namespace, name) = self.ctx, self.key
        kept = dict(self._now if entries is None else entries)
        owners = [owner_reference(c.meta) for c in ctx.caches.crss_in(namespace)]
        owners = [o for o in owners if o["name"] in kept]
        cluster = cluster_owner_reference(self.cluster.api_version, self.cluster.meta)
        ctx.still_ours(namespace, name)
        written = await write_binding(
            ctx.bindings, namespace, name, self.binding, kept, owners, cluster
        )
        if not written:
            return RETRY
        ctx.unrecorded.recorded(self.key, self.uid, self._taken, kept)
        return NOTHING


def forget_budget(ctx: ClusterContext, key: tuple[str, str]) -> None:
    """A cluster gone, paused, or now another replica's: its budget place goes back
    and its pairs leave the line (the budget wakes the clusters that may go now)."""
    ctx.budget.forget_cluster(key)
    _count(ctx)


def step_aside(ctx: ClusterContext, key: tuple[str, str]) -> None:
    """A cluster pass ended without an outcome (timed out, crashed): its waiting pairs
    leave the line and ask again on the retry, behind the others; a place it holds
    stays, as after a failed pass (the budget wakes the clusters that may go now)."""
    ctx.budget.step_aside_cluster(key)
    _count(ctx)


def _count(ctx: ClusterContext) -> None:
    """The gauge of clusters updating, set on every pair, not only on a release: the
    gate may have granted a place just now."""
    metrics.UPDATING_CLUSTERS.set(ctx.budget.updating)


def _news(previous: CRSBinding | None, told: CRSBinding, outcome: Outcome) -> bool:
    """Is a failure (or a reason told as a Warning) worth an event? Not when the
    binding already recorded it (after a restart, which forgets the outcomes in
    memory, or a hand-over from another replica): the binding is where every replica
    reads a pair's outcome."""
    after = told.outcome
    if (outcome.state != "Failed" and outcome.reason not in WARNING_REASONS) or after is None:
        return False
    before = previous.outcome if previous is not None else None
    return before is None or (before.reason, before.message) != (after.reason, after.message)


def own_conflicts(
    records: Iterable[ResourceBinding], applied: Collection[str]
) -> list[tuple[ObjectRef, str, str]]:
    """Each object two resources of one CRS record with other content, one of them
    applied in this pass (``applied``, by Kind/name): the object and both resources,
    the first to record it first. Both apply it under the one field manager, so each
    apply undoes the other's. An object recorded without a content hash is not compared."""
    first: dict[ObjectKey, tuple[str, ObjectRef]] = {}
    found: dict[ObjectKey, tuple[ObjectRef, str, str]] = {}
    for record in records:
        name = f"{record.kind}/{record.name}"
        for ref in record.objects:
            other, theirs = first.setdefault(ref.key, (name, ref))
            if other == name or not (ref.hash and theirs.hash) or ref.hash == theirs.hash:
                continue
            if name in applied or other in applied:
                found.setdefault(ref.key, (ref, other, name))
    return list(found.values())
