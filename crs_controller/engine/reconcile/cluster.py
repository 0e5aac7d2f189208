"""Reconcile one Cluster: bring every matching CRS's resources to it, then write its
binding once, and only if it changed.

The cluster is the unit of work because its binding is one object: one reconcile per
cluster means one writer per binding, one workload client in use at a time, and an
unreachable cluster that only ever delays itself.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import structlog

from crs_controller.clients.kube import KubeClient, Obj
from crs_controller.clients.workload import kubeconfig_secret_name
from crs_controller.core.bindings import entries_by_crs, parse_binding
from crs_controller.core.clusters import control_plane_initialized, is_deleting, is_paused
from crs_controller.core.errors import Unreachable
from crs_controller.core.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_BINDING_KIND,
    ClusterResourceSetBinding,
    CRSBinding,
)
from crs_controller.core.status import Outcome
from crs_controller.engine.context import Context
from crs_controller.engine.index import active, left_alone
from crs_controller.engine.reconcile.crs_pass import (
    CRSPass,
    crs_generation,
    earliest,
    reconcile_pair,
    wanted_by,
)
from crs_controller.engine.reconcile.pruning import Pruned, prune
from crs_controller.engine.reconcile.recording import write_binding
from crs_controller.engine.reconcile.result import Result
from crs_controller.engine.reconcile.uninstalling import targets as uninstall_targets
from crs_controller.engine.reconcile.uninstalling import uninstall

log = structlog.get_logger(__name__)


async def reconcile_cluster(ctx: Context, namespace: str, name: str) -> Result:
    cluster = ctx.index.cluster(namespace, name)
    binding = parse_binding(ctx.bindings.get(namespace, name))
    if cluster is None:
        await _forget_cluster(ctx, namespace, name, binding)
        return Result()
    if is_paused(cluster):
        log.info("cluster paused: left alone", cluster=f"{namespace}/{name}")
        return Result()
    if is_deleting(cluster):
        return await _clean_up(ctx, cluster, binding)

    matching = ctx.index.matching_crss(cluster)
    crss = [c for c in matching if active(c)]
    if paused := sorted(c["metadata"]["name"] for c in matching if is_paused(c)):
        log.info(
            "paused ClusterResourceSets left alone", cluster=f"{namespace}/{name}", crss=paused
        )
    entries = entries_by_crs(binding)
    # Paused CRSs are left alone: their entries stay exactly as they are.
    keep = {c["metadata"]["name"] for c in ctx.index.crss_in(namespace) if left_alone(c)}
    new_entries = {n: e for n, e in entries.items() if n in keep}

    client, blocked = await _workload_client(ctx, cluster)
    if client is None:
        assert blocked is not None
        result = await _record_blocked(ctx, name, crss, entries, new_entries, blocked)
    else:
        result = await _apply_all(ctx, client, cluster, crss, entries, new_entries)
    pruned = await _prune(ctx, client, cluster, crss, entries, new_entries)
    new_entries = pruned.entries
    result.retry = result.retry or bool(pruned.errors)
    await write_binding(ctx, namespace, name, binding, new_entries)
    # Pairs whose CRS no longer selects this cluster leave the CRS's status.
    for crs_name in set(entries) - set(new_entries):
        ctx.outcomes.drop_pair(namespace, crs_name, name)
    return result


async def _record_blocked(
    ctx: Context,
    cluster_name: str,
    crss: list[Obj],
    entries: dict[str, CRSBinding],
    new_entries: dict[str, CRSBinding],
    blocked: Outcome,
) -> Result:
    """The cluster cannot be contacted (pending or failing): every matching CRS gets
    that outcome and keeps its entry."""
    for crs in crss:
        outcome = replace(blocked, generation=crs_generation(crs))
        if kept := entries.get(crs["metadata"]["name"]):
            new_entries[kept.cluster_resource_set_name] = kept
        if _set_outcome(ctx, crs, cluster_name, outcome) and _news(crs, outcome):
            await ctx.events.emit(crs, "Warning", outcome.reason, outcome.message)
    # A broken kubeconfig is retried with backoff; a pending cluster waits for its next
    # event (initialized, kubeconfig created).
    return Result(retry=blocked.state == "Failed")


async def _apply_all(
    ctx: Context,
    client: KubeClient,
    cluster: Obj,
    crss: list[Obj],
    entries: dict[str, CRSBinding],
    new_entries: dict[str, CRSBinding],
) -> Result:
    """Each matching CRS's pass; their entries go into ``new_entries``."""
    result = Result()
    for crs in crss:
        crs_name = crs["metadata"]["name"]
        done = await _pass(ctx, client, cluster, crs, entries.get(crs_name))
        if done.entry.resources:
            new_entries[crs_name] = done.entry
        if _set_outcome(ctx, crs, cluster["metadata"]["name"], done.outcome) and _news(
            crs, done.outcome
        ):
            await ctx.events.emit(crs, "Warning", done.outcome.reason, done.outcome.message)
        result.retry = result.retry or done.retry
        result.requeue_after = earliest(result.requeue_after, done.requeue_after)
    return result


async def _prune(
    ctx: Context,
    client: KubeClient | None,
    cluster: Obj,
    crss: list[Obj],
    entries: dict[str, CRSBinding],
    new_entries: dict[str, CRSBinding],
) -> Pruned:
    """deletionPolicy Delete: remove what left the desired set. Every CRS that still
    exists has a say, including those being deleted or no longer matching."""
    namespace, name = cluster["metadata"]["namespace"], cluster["metadata"]["name"]
    policies = {
        c["metadata"]["name"]: (c.get("spec") or {}).get("deletionPolicy", "Orphan")
        for c in ctx.index.crss_in(namespace)
        if not left_alone(c)
    }
    if not any(policies.get(n) == "Delete" for n in entries):
        return Pruned(new_entries)
    wanted = await wanted_by(ctx, namespace, crss)
    pruned = await prune(client, entries, new_entries, policies, wanted)
    for crs_name, errors in pruned.errors.items():
        message = f"cluster {name}: deletion incomplete: " + "; ".join(errors)
        log.warning("deletion incomplete", crs=crs_name, cluster=f"{namespace}/{name}")
        if owner := ctx.index.crs(namespace, crs_name):
            await ctx.events.emit(owner, "Warning", "DeleteFailed", message)
    return pruned


async def _pass(
    ctx: Context, client: KubeClient, cluster: Obj, crs: Obj, entry: CRSBinding | None
) -> CRSPass:
    """One CRS's pass; whatever goes wrong in it becomes this pair's outcome, so one
    odd server or object never leaves the CRS without a status."""
    try:
        return await reconcile_pair(ctx, client, cluster, crs, entry)
    except Exception as exc:
        log.exception(
            "cluster pass failed",
            crs=crs["metadata"]["name"],
            cluster=f"{cluster['metadata']['namespace']}/{cluster['metadata']['name']}",
        )
        message = f"unexpected {type(exc).__name__}; see the controller log"
        outcome = Outcome("Failed", "ApplyFailed", message, crs_generation(crs))
        kept = entry or CRSBinding(cluster_resource_set_name=crs["metadata"]["name"])
        return CRSPass(kept, outcome, None, True)


async def _clean_up(
    ctx: Context, cluster: Obj, binding: ClusterResourceSetBinding | None
) -> Result:
    """A Cluster being deleted: uninstall what CRSs asked to clean up; the binding
    itself goes once the Cluster is gone."""
    if binding is None:
        return Result()
    namespace, name = cluster["metadata"]["namespace"], cluster["metadata"]["name"]
    crss = uninstall_targets(ctx, cluster, binding)
    if not crss:
        return Result()
    client, _ = await _workload_client(ctx, cluster)
    cleanup = await uninstall(ctx, client, cluster, binding, crss)
    await write_binding(ctx, namespace, name, binding, cleanup.remaining)
    return Result(requeue_after=cleanup.requeue_after, retry=cleanup.retry)


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


async def _forget_cluster(
    ctx: Context, namespace: str, name: str, binding: ClusterResourceSetBinding | None
) -> None:
    ctx.outcomes.drop_cluster(namespace, name)
    ctx.drift.forget_cluster(namespace, name)
    await ctx.workloads.forget(namespace, name)
    if binding is not None:
        await ctx.mgmt.delete(API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, name, namespace)


def _set_outcome(ctx: Context, crs: Obj, cluster: str, outcome: Outcome) -> bool:
    namespace = crs["metadata"]["namespace"]
    return ctx.outcomes.record(namespace, crs["metadata"]["name"], cluster, outcome)


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
