"""Reconcile one Cluster: bring every matching CRS's resources to it, then write its
binding once, and only if it changed.

The cluster is the unit of work because its binding is one object: one reconcile per
cluster means one writer per binding, one workload client in use at a time, and an
unreachable cluster that only ever delays itself.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import structlog

from crs_controller.clients.kube import KubeClient, Obj
from crs_controller.clients.workload import kubeconfig_secret_name
from crs_controller.core.bindings import (
    binding_changed,
    desired_binding,
    entries_by_crs,
    owner_reference,
    parse_binding,
    record_apply,
    recorded,
)
from crs_controller.core.clusters import control_plane_initialized, is_deleting, is_paused
from crs_controller.core.durations import parse_duration
from crs_controller.core.errors import Conflict, CRSError, ResourceError, Unreachable
from crs_controller.core.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_BINDING_KIND,
    ClusterResourceSet,
    ClusterResourceSetBinding,
    CRSBinding,
    ResourceBinding,
    to_api,
)
from crs_controller.core.modes import ApplyOnce, Reconcile, strategy_for
from crs_controller.core.pruning import ObjectKey, wanted_keys
from crs_controller.core.status import Outcome
from crs_controller.engine import metrics
from crs_controller.engine.applying import apply_objects
from crs_controller.engine.context import Context, crs_key
from crs_controller.engine.drift_check import drifted
from crs_controller.engine.index import active
from crs_controller.engine.pruning import prune
from crs_controller.engine.sources import Source
from crs_controller.engine.uninstalling import targets as uninstall_targets
from crs_controller.engine.uninstalling import uninstall

log = structlog.get_logger(__name__)

BINDING_WRITE_ATTEMPTS = 5
DEFAULT_DRIFT_INTERVAL = 60.0


@dataclass
class Result:
    """What the worker does next with the key."""

    requeue_after: float | None = None
    retry: bool = False


@dataclass
class _CRSPass:
    entry: CRSBinding
    outcome: Outcome
    requeue_after: float | None
    retry: bool


async def reconcile_cluster(ctx: Context, namespace: str, name: str) -> Result:
    cluster = ctx.index.cluster(namespace, name)
    binding = parse_binding(ctx.bindings.get(namespace, name))
    if cluster is None:
        await _forget_cluster(ctx, namespace, name, binding)
        return Result()
    if is_paused(cluster):
        return Result()
    if is_deleting(cluster):
        return await _clean_up(ctx, cluster, binding)

    crss = [c for c in ctx.index.matching_crss(cluster) if active(c)]
    entries = entries_by_crs(binding)
    # Paused CRSs are left alone: their entries stay exactly as they are.
    keep = {c["metadata"]["name"] for c in ctx.index.crss_in(namespace) if is_paused(c)}
    new_entries = {n: e for n, e in entries.items() if n in keep}

    client, blocked = await _workload_client(ctx, cluster)
    result = Result()
    if client is None:
        assert blocked is not None
        for crs in crss:
            outcome = replace(blocked, generation=_generation(crs))
            if kept := entries.get(crs["metadata"]["name"]):
                new_entries[kept.cluster_resource_set_name] = kept
            _set_outcome(ctx, crs, name, outcome)
        # A broken kubeconfig is retried with backoff; a pending cluster waits for
        # its next event (initialized, kubeconfig created).
        result.retry = blocked.state == "Failed"
    else:
        for crs in crss:
            crs_name = crs["metadata"]["name"]
            done = await _reconcile_pair(ctx, client, cluster, crs, entries.get(crs_name))
            if done.entry.resources:
                new_entries[crs_name] = done.entry
            if _set_outcome(ctx, crs, name, done.outcome) and _news(crs, done.outcome):
                await ctx.events.emit(crs, "Warning", done.outcome.reason, done.outcome.message)
            result.retry = result.retry or done.retry
            result.requeue_after = _earliest(result.requeue_after, done.requeue_after)

    # deletionPolicy Delete: remove what left the desired set. Every CRS that still
    # exists has a say, including those being deleted or no longer matching.
    policies = {
        c["metadata"]["name"]: (c.get("spec") or {}).get("deletionPolicy", "Orphan")
        for c in ctx.index.crss_in(namespace)
        if not is_paused(c)
    }
    pruning_errors: list[str] = []
    if any(policies.get(n) == "Delete" for n in entries):
        wanted = await _wanted(ctx, namespace, crss)
        pruning_errors = await prune(client, entries, new_entries, policies, wanted)
    if pruning_errors:
        log.warning("deletion incomplete", cluster=f"{namespace}/{name}", errors=pruning_errors)
        result.retry = True

    owners = [
        owner_reference(c)
        for c in ctx.index.crss_in(namespace)
        if c["metadata"]["name"] in new_entries
    ]
    await _write_binding(ctx, namespace, name, binding, new_entries, owners)
    # Pairs whose CRS no longer selects this cluster leave the CRS's status.
    for crs_name in set(entries) - set(new_entries):
        if ctx.outcomes.drop_pair(namespace, crs_name, name):
            ctx.queue.add(crs_key(namespace, crs_name))
    return result


async def _clean_up(
    ctx: Context, cluster: Obj, binding: ClusterResourceSetBinding | None
) -> Result:
    """A Cluster being deleted: uninstall what CRSs asked to clean up; the binding
    itself goes once the Cluster is gone."""
    if binding is None:
        return Result()
    namespace, name = cluster["metadata"]["namespace"], cluster["metadata"]["name"]
    client = None
    if uninstall_targets(ctx, cluster, binding):
        client, _ = await _workload_client(ctx, cluster)
    cleanup = await uninstall(ctx, client, cluster, binding)
    owners = [
        owner_reference(c)
        for c in ctx.index.crss_in(namespace)
        if c["metadata"]["name"] in cleanup.remaining
    ]
    await _write_binding(ctx, namespace, name, binding, cleanup.remaining, owners)
    return Result(requeue_after=cleanup.requeue_after, retry=cleanup.retry)


@dataclass
class _Progress:
    """What one CRS's pass over its resources has gathered so far."""

    resources: list[ResourceBinding] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)
    requeue: float | None = None
    retry: bool = False
    unreachable: bool = False  # stop contacting the cluster for the rest of the pass

    def fail(self, reason: str, message: str, previous: ResourceBinding | None) -> None:
        self.failures.append((reason, message))
        self.resources += [previous] if previous else []


async def _reconcile_pair(
    ctx: Context, client: KubeClient, cluster: Obj, crs: Obj, entry: CRSBinding | None
) -> _CRSPass:
    namespace = cluster["metadata"]["namespace"]
    model = ClusterResourceSet.model_validate(crs)
    generation = _generation(crs)
    crs_name = model.metadata.name
    try:
        strategy = strategy_for(model.spec.mode, model.spec.reapply_interval)
    except CRSError as exc:
        outcome = Outcome("Failed", exc.reason, str(exc), generation)
        unchanged = entry or CRSBinding(cluster_resource_set_name=crs_name)
        return _CRSPass(unchanged, outcome, None, False)

    now = datetime.now(UTC)
    progress = _Progress()
    drift = _drift_check_due(ctx, model, cluster["metadata"]["name"], progress)
    for ref in model.spec.resources:
        previous = recorded(entry, ref)
        if progress.unreachable:
            progress.resources += [previous] if previous else []  # not reached: unchanged
            continue
        source = await ctx.sources.load(namespace, ref)
        if source.error is not None:
            progress.fail(source.error.reason, str(source.error), previous)
            continue
        try:
            why = await _why_apply(ctx, client, strategy, drift, previous, source.hash, now)
            if why is None:
                assert previous is not None
                progress.resources.append(previous)
                progress.requeue = _earliest(progress.requeue, strategy.next_due(previous, now))
                continue
            await _apply_resource(
                ctx, client, crs, cluster, source, previous, strategy, now, progress, why
            )
        except Unreachable as exc:
            progress.fail(exc.reason, str(exc), previous)
            progress.retry = progress.unreachable = True
    # Resources dropped from spec.resources leave the binding (Orphan: nothing deleted).
    if progress.failures:
        message = "; ".join(m for _, m in progress.failures)
        outcome = Outcome("Failed", progress.failures[0][0], message, generation)
    else:
        outcome = Outcome("Applied", "Applied", "all resources applied", generation)
    new_entry = CRSBinding(cluster_resource_set_name=crs_name, resources=progress.resources)
    return _CRSPass(new_entry, outcome, progress.requeue, progress.retry)


async def _wanted(ctx: Context, namespace: str, crss: list[Obj]) -> set[ObjectKey]:
    """What the matching CRSs' sources ask for now (parsing is cached per content)."""
    wanted: set[ObjectKey] = set()
    for crs in crss:
        for ref in ClusterResourceSet.model_validate(crs).spec.resources:
            source = await ctx.sources.load(namespace, ref)
            if source.error is None:
                with contextlib.suppress(ResourceError):
                    wanted |= wanted_keys(ctx.sources.objects(source))
    return wanted


def _drift_check_due(
    ctx: Context, model: ClusterResourceSet, cluster: str, progress: _Progress
) -> str:
    """The drift mode to check in this pass ("None" when not due), and schedules the
    next check. Only Reconcile mode detects drift."""
    spec = model.spec
    if spec.mode != "Reconcile" or spec.drift_detection == "None":
        return "None"
    interval = parse_duration(spec.drift_check_interval) or DEFAULT_DRIFT_INTERVAL
    key = (model.metadata.namespace or "", model.metadata.name, cluster)
    now = time.monotonic()
    due = ctx.drift_due.get(key, 0.0)
    progress.requeue = _earliest(progress.requeue, max(due - now, 0.0) or interval)
    if due > now:
        return "None"
    ctx.drift_due[key] = now + interval
    return spec.drift_detection


async def _why_apply(
    ctx: Context,
    client: KubeClient,
    strategy: ApplyOnce | Reconcile,
    drift: str,
    previous: ResourceBinding | None,
    digest: str,
    now: datetime,
) -> str | None:
    """The event reason for applying this resource now, or None to leave it."""
    if strategy.needs_apply(previous, digest, now):
        return "Applied"
    assert previous is not None
    manager = ctx.settings.field_manager
    if drift != "None" and await drifted(client, previous, drift, field_manager=manager):
        return "DriftCorrected"
    return None


async def _apply_resource(
    ctx: Context,
    client: KubeClient,
    crs: Obj,
    cluster: Obj,
    source: Source,
    previous: ResourceBinding | None,
    strategy: ApplyOnce | Reconcile,
    now: datetime,
    progress: _Progress,
    why: str,
) -> None:
    ref = source.ref
    try:
        objects = ctx.sources.objects(source)
    except ResourceError as exc:
        progress.fail(exc.reason, str(exc), previous)
        return
    applied = await apply_objects(
        client,
        objects,
        field_manager=ctx.settings.field_manager,
        only_missing=strategy.applies_only_missing,
    )
    metrics.OBJECTS_APPLIED.inc(len(applied.applied))
    metrics.APPLY_ERRORS.inc(len(applied.errors))
    record = record_apply(
        ref,
        previous,
        digest=source.hash,
        ok=applied.ok,
        applied=applied.applied,
        generations=applied.generations,
        skipped=applied.skipped,
        owned=applied.owned,
        now=now,
    )
    progress.resources.append(record)
    cluster_name = cluster["metadata"]["name"]
    log.info(
        "resource applied" if applied.ok else "resource apply failed",
        crs=f"{crs['metadata']['namespace']}/{crs['metadata']['name']}",
        cluster=cluster_name,
        resource=f"{ref.kind}/{ref.name}",
        objects=len(applied.applied),
        errors=len(applied.errors),
    )
    if applied.ok:
        count = len(applied.applied)
        verb = "reapplied after drift" if why == "DriftCorrected" else "applied"
        message = f"{verb} {ref.kind}/{ref.name} to cluster {cluster_name} ({count} objects)"
        await ctx.events.emit(crs, "Normal", why, message)
        progress.requeue = _earliest(progress.requeue, strategy.next_due(record, now))
    else:
        errors = "; ".join(applied.errors)
        progress.failures.append(("ApplyFailed", f"{ref.kind}/{ref.name}: {errors}"))
        progress.retry = True


async def _workload_client(ctx: Context, cluster: Obj) -> tuple[KubeClient | None, Outcome | None]:
    """The cluster's client, or None and the outcome that says why not."""
    namespace = cluster["metadata"]["namespace"]
    name = cluster["metadata"]["name"]
    secret_name = kubeconfig_secret_name(name)
    if not control_plane_initialized(cluster):
        return None, Outcome("Pending", "WaitingForCluster", "control plane not initialized", 0)
    secret = await ctx.sources.content(namespace, "Secret", secret_name)
    if secret is None:
        message = f"kubeconfig Secret {secret_name} not found"
        return None, Outcome("Pending", "WaitingForCluster", message, 0)
    try:
        return await ctx.workloads.get(namespace, name, secret), None
    except Unreachable as exc:
        return None, Outcome("Failed", exc.reason, str(exc), 0)


async def _write_binding(
    ctx: Context,
    namespace: str,
    cluster: str,
    current: ClusterResourceSetBinding | None,
    entries: dict[str, CRSBinding],
    owners: list[dict[str, Any]],
) -> None:
    if not entries:
        if current is not None:
            await ctx.mgmt.delete(
                API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, cluster, namespace
            )
        return
    # Optimistic concurrency: PUT with the resourceVersion we read. On a Conflict
    # re-read the binding and put our entries on the fresh copy at once, rather than
    # failing the whole reconcile (which would redo every apply to record them).
    for _ in range(BINDING_WRITE_ATTEMPTS - 1):
        try:
            await _put_binding(ctx, namespace, cluster, current, entries, owners)
            return
        except Conflict:
            fresh = await ctx.mgmt.get(
                API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, cluster, namespace
            )
            current = parse_binding(fresh)
    await _put_binding(ctx, namespace, cluster, current, entries, owners)


async def _put_binding(
    ctx: Context,
    namespace: str,
    cluster: str,
    current: ClusterResourceSetBinding | None,
    entries: dict[str, CRSBinding],
    owners: list[dict[str, Any]],
) -> None:
    desired = desired_binding(
        current, namespace=namespace, cluster=cluster, entries=entries, owners=owners
    )
    if not binding_changed(current, desired):
        return
    body = to_api(desired)
    written = await (ctx.mgmt.create(body) if current is None else ctx.mgmt.replace(body))
    # Cache what we wrote at once, so a reconcile racing the watch does not act on
    # the binding as it was before.
    ctx.bindings.put(written)


async def _forget_cluster(
    ctx: Context, namespace: str, name: str, binding: ClusterResourceSetBinding | None
) -> None:
    for crs_name in ctx.outcomes.drop_cluster(namespace, name):
        ctx.queue.add(crs_key(namespace, crs_name))
    for key in [k for k in ctx.drift_due if k[0] == namespace and k[2] == name]:
        del ctx.drift_due[key]
    await ctx.workloads.forget(namespace, name)
    if binding is not None:
        await ctx.mgmt.delete(API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, name, namespace)


def _set_outcome(ctx: Context, crs: Obj, cluster: str, outcome: Outcome) -> bool:
    namespace = crs["metadata"]["namespace"]
    changed = ctx.outcomes.record(namespace, crs["metadata"]["name"], cluster, outcome)
    if changed:
        ctx.queue.add(crs_key(namespace, crs["metadata"]["name"]))
    return changed


def _news(crs: Obj, outcome: Outcome) -> bool:
    """Is a failure worth a Warning event? Not when the CRS's Ready condition already
    says so (e.g. after a restart, which forgets the outcomes in memory)."""
    if outcome.state != "Failed":
        return False
    conditions = (crs.get("status") or {}).get("conditions") or []
    ready: dict[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
    return not (
        ready.get("reason") == outcome.reason and outcome.message in ready.get("message", "")
    )


def _generation(crs: Obj) -> int:
    return int(crs["metadata"].get("generation") or 0)


def _earliest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)
