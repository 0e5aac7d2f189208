"""A CRS's revisions, kept by the CRS reconcile of the leader: the snapshot of each
new revision of the sources (written once per revision, never per cluster),
``status.history`` with at most ``spec.revisionHistoryLimit`` entries whose
snapshots hold at most ``MAX_HISTORY_BYTES`` together, the deletion of the snapshots
of the revisions neither in it nor rolled out (on every pass, until they are gone;
a rollback held touches neither), and the rollback a halted rollout starts by
itself under ``spec.rollout.onFailure: Rollback`` (``core.rollout.history`` decides).
"""

from __future__ import annotations

import logging
from dataclasses import replace

import structlog

from crs_controller.core.api.models import ClusterResourceSetStatus, RevisionRecord
from crs_controller.core.errors import APIError, CRSError, failure_level
from crs_controller.core.rollout.history import (
    ROLLBACK_ANNOTATION,
    Undo,
    advance,
    outcome_of_phase,
    parse_request,
    rollback_on_failure,
    within_bytes,
)
from crs_controller.core.rollout.plan import Plan
from crs_controller.core.rollout.snapshots import MAX_HISTORY_BYTES, SnapshotTooLarge
from crs_controller.core.spec.objects import CRS
from crs_controller.core.state.status import READY
from crs_controller.engine.io import metrics
from crs_controller.engine.reconcile.context import CRSContext
from crs_controller.engine.reconcile.rollout import RolledOut, roll_to

log = structlog.get_logger(__name__)


async def by_itself(ctx: CRSContext, crs: CRS, rolled: RolledOut, made: Plan) -> RolledOut:
    """``rolled``, or the rollback its halted rollout starts under ``onFailure:
    Rollback``: to the last revision whose rollout completed (its snapshot checked).
    ``made``: the plan of ``rolled`` every matching cluster makes (the members'
    shares combined), which says whether it halted. A snapshot refused starts none:
    ``rolled`` saying why, halted as under Halt."""
    if rolled.undo.rolled_back_from:
        return rolled
    spec = crs.valid.spec.rollout
    if spec is None or spec.on_failure != "Rollback":
        return rolled
    to = rollback_on_failure(rolled.undo, made.phase, spec.on_failure, crs.status.history or [])
    if to is None:
        return rolled
    back = await roll_to(ctx, crs, Undo(to, rolled.target), rolled.hashes, rolled.current)
    if back.refused is not None:  # not started: the rollout stays halted, as under Halt
        return replace(rolled, refused=back.refused)
    ctx.rollouts.rolled_back(crs.namespace, crs.name, made.message)
    log.warning("rolling back", crs=f"{crs.namespace}/{crs.name}", to=to, reason=made.message)
    return back


def history(
    ctx: CRSContext,
    crs: CRS,
    rolled: RolledOut | None,
    made: Plan | None,
    status: ClusterResourceSetStatus,
) -> list[RevisionRecord] | None:
    """The history with this pass's revision recorded: how its rollout stands (the
    plan's phase; without a rollout, Complete once Ready). The revisions it drops
    lose their snapshots once it is written (``sweep``). A rollback ``held`` (its
    snapshot cannot be read) records nothing: the history stays as it is."""
    if rolled is None or rolled.held:
        return crs.status.history
    if made is not None:
        outcome = outcome_of_phase(made.phase)
    else:
        ready = next((c for c in status.conditions if c.type == READY), None)
        outcome = "Complete" if ready is not None and ready.status == "True" else "Progressing"
    limit = crs.valid.spec.revision_history_limit
    kept, _ = advance(crs.status.history or [], rolled.undo, outcome, ctx.clock.wall(), limit)
    sizes = {r.revision: ctx.snapshots.size(crs, r.revision) for r in kept}
    return within_bytes(kept, sizes, MAX_HISTORY_BYTES)[0]


async def sweep(
    ctx: CRSContext,
    crs: CRS,
    rolled: RolledOut | None,
    status: ClusterResourceSetStatus,
    *,
    confirmed: bool,
) -> None:
    """Delete the snapshots of ``crs`` of revisions neither in the history of
    ``status`` nor rolled out by this pass. ``confirmed``: ``status`` is the one the
    server returned for this pass's write; else it is the cached CRS's, which may lag
    a status the leader before wrote (a revision that has just entered the history):
    with anything to delete, the CRS is read again and its history kept instead. A
    request that fails, or a process that stops before it, leaves them to the next
    pass, which looks again (what the watch shows labelled with the CRS's uid). A
    rollback ``held`` deletes nothing: a later pass does, once it is not."""
    if rolled is not None and rolled.held:
        return
    keep = _kept(status, rolled)
    try:
        if not confirmed and ctx.snapshots.others(crs, keep):
            fresh = await ctx.crss.read(crs)
            if fresh is None or fresh.meta.uid != crs.meta.uid:
                return  # gone: its finalizer deletes them all
            keep = _kept(fresh.status, rolled)
        await ctx.snapshots.delete_others(crs, keep)
    except CRSError as exc:  # deleted on a later pass
        level = failure_level(exc, otherwise=logging.INFO)
        code = exc.status if isinstance(exc, APIError) else None
        where = f"{crs.namespace}/{crs.name}"
        log.log(level, "snapshot deletion failed", crs=where, status=code, error=str(exc))


def _kept(status: ClusterResourceSetStatus, rolled: RolledOut | None) -> set[str]:
    """The revisions whose snapshots stay: the history's, and those rolled out and
    rolled back from."""
    keep = {r.revision for r in status.history or []}
    if rolled is not None:
        keep |= {rolled.target, rolled.sources}
    return keep


async def snapshot(ctx: CRSContext, crs: CRS, rolled: RolledOut) -> None:
    """Write the snapshot of the sources' revision, unless it is there, from the
    sources exactly as they were hashed (a source edited since is not read again: its
    content would not hash to the revision). Too large, it is not written: a Warning
    Event says so the first time the revision is seen."""
    rev = rolled.sources
    if rolled.undo.rolled_back_from is not None or ctx.snapshots.kept(crs, rev):
        return
    try:
        written = await ctx.snapshots.write(crs, rev, rolled.current)
    except SnapshotTooLarge as exc:
        if all(r.revision != rev for r in crs.status.history or []):
            message = f"revision {rev} cannot be rolled back to: {exc}"
            await ctx.events.emit(crs, "Warning", exc.reason, message)
        return
    except APIError as exc:  # written on a later pass
        level = failure_level(exc, otherwise=logging.INFO)
        where = f"{crs.namespace}/{crs.name}"
        log.log(level, "snapshot not written", crs=where, status=exc.status, error=str(exc))
        return
    if written:
        metrics.SNAPSHOTS_WRITTEN.inc()


async def drop_stale_request(ctx: CRSContext, crs: CRS, rolled: RolledOut) -> CRS:
    """A rollback request about another revision than the sources' is over (the
    sources moved on): removed, so that sources changed back to that revision later
    are rolled out, not rolled back again."""
    request = parse_request(crs.meta.annotations.get(ROLLBACK_ANNOTATION))
    if request is None or request.source == rolled.sources:
        return crs
    try:
        return await ctx.crss.drop_annotation(crs, ROLLBACK_ANNOTATION)
    except CRSError as exc:  # removed on a later pass
        log.info("rollback request kept", crs=f"{crs.namespace}/{crs.name}", error=str(exc))
        return crs
