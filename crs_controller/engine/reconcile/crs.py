"""Reconcile one ClusterResourceSet: its finalizer and its status.

Applying happens per cluster (``cluster_reconcile``); this folds the per-cluster
outcomes and the state of the referenced resources into the status, written once and
only when it changed. On deletion (Orphan) the finalizer goes once no binding names
the CRS any more; the cluster reconciles remove the entries.
"""

from __future__ import annotations

from datetime import UTC, datetime

import structlog
from pydantic import ValidationError

from crs_controller.clients.kube import Obj
from crs_controller.core.bindings import crs_names, parse_binding
from crs_controller.core.clusters import is_deleting, is_paused
from crs_controller.core.errors import InvalidSpec, ResourceError
from crs_controller.core.models import (
    FINALIZER,
    ClusterResourceSetStatus,
    to_api,
)
from crs_controller.core.status import Problem, invalid_spec, summarize
from crs_controller.engine.context import Context
from crs_controller.engine.index import crs_model, spec_problem
from crs_controller.engine.reconcile.result import Result

log = structlog.get_logger(__name__)

DELETION_POLL = 2.0


async def reconcile_crs(ctx: Context, namespace: str, name: str) -> Result:
    crs = ctx.index.crs(namespace, name)
    if crs is None:
        ctx.outcomes.drop_crs(namespace, name)
        return Result()
    finalizers = list(crs["metadata"].get("finalizers") or [])
    if is_deleting(crs):
        return await _finalize(ctx, crs, finalizers)
    if is_paused(crs):
        return Result()
    if FINALIZER not in finalizers:
        written = await ctx.mgmt.replace(_with_finalizers(crs, [*finalizers, FINALIZER]))
        ctx.crss.put(written)
        crs = written
    if (problem := spec_problem(crs)) is not None:
        await _write_invalid_status(ctx, crs, problem)
        return Result()
    await _write_status(ctx, crs)
    return Result()


async def _write_invalid_status(ctx: Context, crs: Obj, problem: InvalidSpec) -> None:
    """The model refuses the spec: say so on this CRS alone, nothing else changes."""
    try:
        previous = ClusterResourceSetStatus.model_validate(crs.get("status") or {})
    except ValidationError:
        previous = ClusterResourceSetStatus()
    generation = int(crs["metadata"].get("generation") or 0)
    status = invalid_spec(previous, generation, str(problem), datetime.now(UTC))
    if to_api(status) == to_api(previous):
        return
    await _put_status(ctx, crs, status)
    log.warning("invalid spec", crs=f"{crs['metadata']['namespace']}/{crs['metadata']['name']}")


async def _finalize(ctx: Context, crs: Obj, finalizers: list[str]) -> Result:
    if FINALIZER not in finalizers:
        return Result()
    namespace, name = crs["metadata"]["namespace"], crs["metadata"]["name"]
    holders = [
        key[1]
        for key, raw in ctx.bindings.store.items()
        if key[0] == namespace and name in crs_names(parse_binding(raw))
    ]
    if holders:
        # The deletion's watch event brought those clusters' reconciles (see
        # Controller._on_crs); check back until their bindings let go.
        return Result(requeue_after=DELETION_POLL)
    remaining = [f for f in finalizers if f != FINALIZER]
    await ctx.mgmt.replace(_with_finalizers(crs, remaining))
    ctx.outcomes.drop_crs(namespace, name)
    return Result()


def _with_finalizers(crs: Obj, finalizers: list[str]) -> Obj:
    body = {k: v for k, v in crs.items() if k != "status"}
    body["apiVersion"] = crs.get("apiVersion", "addons.crs.dev/v1alpha1")
    body["kind"] = "ClusterResourceSet"
    body["metadata"] = {**crs["metadata"], "finalizers": finalizers}
    return body


async def _write_status(ctx: Context, crs: Obj) -> None:
    model = crs_model(crs)
    namespace = model.metadata.namespace or ""
    problems: list[Problem] = []
    for ref in model.spec.resources:
        source = await ctx.sources.load(namespace, ref)
        if source.error is not None:
            problems.append(Problem(source.error.reason, str(source.error)))
            continue
        try:
            await ctx.sources.objects(source)
        except ResourceError as exc:
            problems.append(Problem(exc.reason, str(exc)))
    outcomes = [
        (
            c["metadata"]["name"],
            ctx.outcomes.get(namespace, model.metadata.name, c["metadata"]["name"]),
        )
        for c in ctx.index.matching_clusters(crs)
    ]
    if any(outcome is None for _, outcome in outcomes):
        # A cluster this process has not reconciled yet (just started, or just
        # matched): its reconcile enqueues this CRS when done. Writing now would
        # only flap the status, e.g. on every restart.
        return
    status = summarize(
        generation=model.metadata.generation or 0,
        outcomes=sorted(outcomes, key=lambda pair: pair[0]),
        resource_problems=problems,
        previous=model.status,
        now=datetime.now(UTC),
    )
    if to_api(status) == to_api(model.status):
        return
    await _put_status(ctx, crs, status)
    ready = status.conditions[-1]
    log.info(
        "status updated",
        crs=f"{namespace}/{model.metadata.name}",
        ready=ready.status,
        reason=ready.reason,
        matching=status.matching_clusters,
        applied=status.applied_clusters,
        failed=status.failed_clusters,
    )


async def _put_status(ctx: Context, crs: Obj, status: ClusterResourceSetStatus) -> None:
    body = {
        "apiVersion": crs.get("apiVersion", "addons.crs.dev/v1alpha1"),
        "kind": "ClusterResourceSet",
        "metadata": crs["metadata"],
        "status": to_api(status),
    }
    written = await ctx.mgmt.replace(body, subresource="status")
    ctx.crss.put(written)
