"""Cleaning a workload cluster up before its Cluster is deleted (``uninstall.ensure``).

For every CRS recorded in the cluster's binding that asks for it: apply its
``beforeDelete`` hook objects and wait for the Jobs among them; a failed Job aborts
(retried with backoff, nothing deleted meanwhile); then delete what the CRS applied,
in reverse order, sparing what other CRSs recorded. The entry leaves the binding
once done, which is what the BeforeClusterDelete hook reports on.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import structlog

from crs_controller.clients.kube import KubeClient, Obj
from crs_controller.core.bindings import entries_by_crs, parse_binding
from crs_controller.core.errors import CRSError, ResourceError, Unreachable
from crs_controller.core.manifests import object_ref
from crs_controller.core.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_BINDING_KIND,
    CLUSTER_RESOURCE_SET_KIND,
    ClusterResourceSetBinding,
    CRSBinding,
)
from crs_controller.core.pruning import inventory, stale_objects
from crs_controller.core.uninstall import cleanup_due, is_job, job_state
from crs_controller.engine.context import Context
from crs_controller.engine.index import crs_model, spec_problem
from crs_controller.engine.reconcile.applying import apply_objects
from crs_controller.engine.reconcile.pruning import delete_objects

log = structlog.get_logger(__name__)

JOB_POLL = 2.0


@dataclass
class Cleanup:
    """Where the cleanup of one deleting cluster stands."""

    remaining: dict[str, CRSBinding]  # entries to keep in the binding
    retry: bool = False
    requeue_after: float | None = None


def targets(ctx: Context, cluster: Obj, binding: ClusterResourceSetBinding | None) -> list[Obj]:
    """The recorded CRSs that want cleanup and are still within their deadline."""
    namespace = cluster["metadata"]["namespace"]
    now = datetime.now(UTC)
    found = []
    for name in entries_by_crs(binding):
        crs = ctx.index.crs(namespace, name)
        if crs is not None and _holds_deletion(crs, cluster, now):
            found.append(crs)
    return found


def _holds_deletion(crs: Obj | None, cluster: Obj, now: datetime) -> bool:
    """Does this CRS hold the Cluster's deletion for cleanup? One rule for the cleanup
    itself and for the hook's answer: a CRS the model refuses cleans nothing up, so
    it must not hold anything either."""
    return crs is not None and spec_problem(crs) is None and cleanup_due(crs, cluster, now)


async def uninstall(
    ctx: Context,
    client: KubeClient | None,
    cluster: Obj,
    binding: ClusterResourceSetBinding,
    crss: list[Obj],
) -> Cleanup:
    """Clean up for ``crss`` (from ``targets``) on the cluster behind ``client``."""
    entries = entries_by_crs(binding)
    cleanup = Cleanup(remaining=dict(entries))
    for crs in crss:
        name = crs["metadata"]["name"]
        entry = entries[name]
        if not inventory([entry]):
            del cleanup.remaining[name]  # nothing was ever applied: no hook, nothing to do
            continue
        if client is None:
            cleanup.retry = True
            continue
        try:
            hooks = await _run_hooks(ctx, client, crs, cluster)
        except (CRSError, ResourceError) as exc:
            await _report(ctx, crs, cluster, str(exc))
            hooks = "Failed"
        if hooks == "Running":
            cleanup.requeue_after = JOB_POLL
            continue
        if hooks == "Failed":
            cleanup.retry = True
            continue
        others = [e for n, e in cleanup.remaining.items() if n != name]
        stale = stale_objects(entry, inventory(others), set())
        try:
            failed = await delete_objects(client, stale)
        except Unreachable as exc:
            failed = [str(exc)]
        if failed:
            await _report(ctx, crs, cluster, "; ".join(failed))
            cleanup.retry = True
            continue
        del cleanup.remaining[name]
        message = f"removed {len(stale)} objects from cluster {cluster['metadata']['name']}"
        await ctx.events.emit(crs, "Normal", "Uninstalled", message)
    return cleanup


HookState = Literal["Done", "Running", "Failed"]


async def _run_hooks(ctx: Context, client: KubeClient, crs: Obj, cluster: Obj) -> HookState:
    """Apply the beforeDelete objects: Done when every Job among them completed,
    Running while one still runs, Failed (with an event) when one failed."""
    namespace = cluster["metadata"]["namespace"]
    model = crs_model(crs)
    objects: list[dict[str, Any]] = []
    for ref in model.spec.uninstall.before_delete:
        source = await ctx.sources.load(namespace, ref)
        if source.error is not None:
            raise source.error
        objects += await ctx.sources.objects(source)
    if not objects:
        return "Done"
    result = await apply_objects(
        client, objects, field_manager=ctx.settings.field_manager, only_missing=False
    )
    if not result.ok:
        await _report(ctx, crs, cluster, "; ".join(result.errors))
        return "Failed"
    for job in filter(is_job, objects):
        key = object_ref(job)
        live = await client.get(key.api_version, key.kind, key.name, key.namespace or "default")
        state = job_state(live or {})
        if state == "Failed":
            await _report(ctx, crs, cluster, f"beforeDelete Job {key.name} failed")
            return "Failed"
        if state == "Running":
            return "Running"
    return "Done"


async def _report(ctx: Context, crs: Obj, cluster: Obj, message: str) -> None:
    text = f"cluster {cluster['metadata']['name']}: uninstall held: {message}"
    log.warning("uninstall blocked", crs=crs["metadata"]["name"], message=text)
    await ctx.events.emit(crs, "Warning", "UninstallFailed", text)


HOOK_RETRY_SECONDS = 5


async def hook_status(ctx: Context, cluster: Obj) -> tuple[int, str]:
    """The BeforeClusterDelete answer for ``cluster`` (as sent by Cluster API):
    (retryAfterSeconds, message). Positive while cleanup is still to be done.

    Read from the API, not from the caches: Cluster API takes 0 as final, and a
    standby replica, or one whose caches are not synced yet, would otherwise answer
    0 from ignorance. A failed read raises (the extension then asks for a retry)."""
    meta = cluster.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    if not namespace or not name:
        return HOOK_RETRY_SECONDS, "crs-controller: the request names no Cluster"
    mgmt = ctx.mgmt
    live = await mgmt.get(ctx.cluster_api_version, "Cluster", name, namespace)
    raw = await mgmt.get(API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, name, namespace)
    if live is None or raw is None:
        return 0, "crs-controller: nothing (more) to clean up"
    now = datetime.now(UTC)
    pending = []
    for crs_name, entry in entries_by_crs(parse_binding(raw)).items():
        if not inventory([entry]):
            continue  # nothing was ever applied there by this CRS
        crs = await mgmt.get(API_VERSION, CLUSTER_RESOURCE_SET_KIND, crs_name, namespace)
        if _holds_deletion(crs, live, now):
            pending.append(crs_name)
    if not pending:
        return 0, "crs-controller: nothing (more) to clean up"
    return HOOK_RETRY_SECONDS, f"crs-controller: removing add-ons of {', '.join(pending)}"
