"""A rollout step's validation, seen from one CRS's pass on one cluster: the record
its binding entry carries, and the run the plan asks for (``workload.validating``).

The record belongs to one revision: a new revision drops it, unless it names objects
its run created and left (a failed run keeps them): then it stays until the next run
takes them over, and only its phase of another revision counts for nothing. A
validation that failed keeps failing the pair (outcome ``ValidationFailed``) until the
next revision, so a retry of the pass cannot turn it green by applying the same
content again; the kept Job is there for the person debugging.
"""

from __future__ import annotations

from dataclasses import replace

from crs_controller.core.api.models import ValidationRecord
from crs_controller.core.errors import Unreachable
from crs_controller.core.spec.objects import CRS
from crs_controller.core.state.status import Outcome
from crs_controller.engine.reconcile.result import NOTHING, RETRY, Result
from crs_controller.engine.reconcile.scope import ClusterScope, CRSPass
from crs_controller.engine.reconcile.workload.validating import validate

FAILED = "ValidationFailed"


async def validated(
    scope: ClusterScope, crs: CRS, done: CRSPass, *, target: str | None, run: bool
) -> CRSPass:
    """The pass with its validation record carried over, and the step's validation
    run when the plan asks for it (``run``) and the pair is done (applied, and
    Ready). ``target``: the revision the rollout lets this cluster take. A cluster
    that stops answering the validation's look is this outcome, ClusterUnreachable:
    what the pass applied stays recorded (its deletion policy still applies to it),
    with the validation record as it was carried, and the look is tried again."""
    before = _before(scope, crs)
    record = _carried(before, target)
    then, outcome = NOTHING, done.outcome
    ready = outcome.state == "Applied" and outcome.ready
    if run and ready and target is not None:
        step = _step(scope, crs)
        if step is not None:
            try:
                record, then = await _run(scope, crs, done, step, target, before)
            except Unreachable as exc:
                then = RETRY
                outcome = Outcome("Failed", exc.reason, str(exc), crs.generation, revision=target)
    if (
        record is not None
        and (record.revision, record.phase) == (target, "Failed")
        and outcome.state != "Failed"
    ):
        outcome = Outcome("Failed", FAILED, record.message, crs.generation, revision=target or "")
    entry_now = done.entry.model_copy(update={"validation": record})
    return replace(done, entry=entry_now, outcome=outcome, then=done.then | then)


def carried(scope: ClusterScope, crs: CRS, done: CRSPass, *, target: str | None) -> CRSPass:
    """The pass with its validation record carried over and nothing run: for a pass
    that ended before its validation's turn."""
    record = _carried(_before(scope, crs), target)
    return replace(done, entry=done.entry.model_copy(update={"validation": record}))


def _before(scope: ClusterScope, crs: CRS) -> ValidationRecord | None:
    """The validation record the CRS's binding entry had before the pass."""
    entry = scope.before(crs.name)
    return entry.validation if entry is not None else None


def _carried(before: ValidationRecord | None, target: str | None) -> ValidationRecord | None:
    """The record a pass keeps: the one of ``target``, else one naming objects its
    run created and left (the next run takes them over)."""
    if before is None or (before.revision != target and not before.created):
        return None
    return before


def _step(scope: ClusterScope, crs: CRS) -> int | None:
    """The step the plan validates: the one it stands at, if it has a validation."""
    made = scope.ctx.rollouts.plan(crs.namespace, crs.name)
    rollout = crs.valid.spec.rollout
    if made is None or rollout is None or not 1 <= made[1].step <= len(rollout.steps):
        return None
    return made[1].step if rollout.steps[made[1].step - 1].validation is not None else None


async def _run(
    scope: ClusterScope,
    crs: CRS,
    done: CRSPass,
    step: int,
    target: str,
    record: ValidationRecord | None,
) -> tuple[ValidationRecord, Result]:
    """Look at the step's validation once; ``record``: the entry's, of any revision
    (a new run takes over what an earlier one left)."""
    rollout = crs.valid.spec.rollout
    assert rollout is not None
    spec = rollout.steps[step - 1].validation
    timeout = crs.strategy.durations.validation_timeout[step - 1]
    assert spec is not None and timeout is not None
    checked = await validate(
        scope.ctx,
        scope.workload,
        crs,
        scope.cluster,
        step=step,
        spec=spec,
        timeout=timeout,
        revision=target,
        previous=record,
        listed=scope.listed(done.entry),
    )
    return checked.record, checked.then
