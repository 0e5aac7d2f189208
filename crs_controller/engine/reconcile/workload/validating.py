"""A rollout step's validation on one workload cluster (``spec.rollout.steps[].
validation``): apply its resources' objects, wait until every Job among them is
Complete, then delete them.

One call looks once and returns the record the binding entry keeps, with when to look
again: nothing here sleeps or loops on the cluster. The record carries the state from
one pass to the next:

* Running, ``finished`` unset: the objects are applied (again: server-side apply is
  idempotent, so a Job that exists is neither recreated nor run again, and one
  deleted meanwhile comes back) and each Job is read.
* Running, ``finished`` set: every Job was Complete at ``finished``; what is left is
  deleting the objects, which failed once and is tried again. A deletion error is
  no failure of the validation.
* Running, ``message`` beginning ``not started:``: a new run could not delete the
  Jobs an earlier run left; each look tries again, and nothing is applied or judged
  until they are gone. At the timeout this is the failure.
* Running, ``message`` beginning ``not applied:``: the server refused the last
  look's apply of an object (its creation, or the update of a copy already there),
  each named with the server's cause. At the timeout this is the failure, whether
  the object is missing or still as it was: the last look sends nothing.
* Succeeded / Failed: the end, returned as is without contacting the cluster. A
  failure keeps the objects, for whoever debugs it.

A new run (another revision or step) first deletes the Jobs an earlier run left
(kept after its failure), found by the uids its record names whatever the new run's
Jobs are named: a finished Job would otherwise answer for the new run, or stay for
ever. A Job that sets ``ttlSecondsAfterFinished`` fails the run at once: the server
would delete it once finished, leaving no result, and the next look would run it again.
Only a Job the run created (its uid in ``created``) decides it: one of the same name
there before the run, not the earlier run's to clear (someone else's, or made by a
look whose record was lost), neither passes nor fails it. The run waits, naming it
as already present, and fails at the timeout unless it goes meanwhile (then the run
creates its own).

Objects are applied as their sources hold them, for every cluster alike: validation
resources take no per-cluster values. A validation deletes only the objects it
created: before each apply it reads every object, and one absent then is recorded
(its uid, in the record's ``created``, the run's Jobs first: a record holds
``CREATED_LIMIT`` uids, and the verdict reads only Jobs it names) once the apply made
it. One that was there before (made by another tool, or by a look whose record was
lost) is never deleted,
nor one an entry of the cluster's binding lists (a ClusterResourceSet applied it),
nor a Namespace or CustomResourceDefinition (validation resources have no
allowDelete, the deletion guard's rule); each is kept, and named in the log. A new
run takes over what the earlier run's record names. What is deleted must also show
our field manager's apply (``pruning.delete_objects``)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import structlog

from crs_controller.clients.api import KubeAPI
from crs_controller.core.api.models import (
    CREATED_LIMIT,
    MESSAGE_LIMIT,
    ObjectKey,
    Validation,
    ValidationRecord,
)
from crs_controller.core.errors import APIError, NotFound, ResourceError, Unreachable
from crs_controller.core.manifests.documents import (
    APPLIED_BY,
    APPLIED_BY_LABEL,
    ObjectRef,
    object_ref,
)
from crs_controller.core.spec.objects import CRS, Cluster
from crs_controller.core.state.deletion_guard import protected_kind
from crs_controller.core.state.uninstall_decisions import is_job, job_ref, named, ttl_refusal
from crs_controller.core.text import safe
from crs_controller.engine.reconcile.context import ClusterContext
from crs_controller.engine.reconcile.result import NOTHING, RETRY, Result
from crs_controller.engine.reconcile.workload.applying import apply_objects
from crs_controller.engine.reconcile.workload.pruning import delete_objects

log = structlog.get_logger(__name__)

POLL_SECONDS = 5.0
NOT_APPLIED = "not applied: "  # begins a Running message: the last apply was refused
NOT_STARTED = "not started: "  # begins a Running message: an earlier run's Jobs are left
PRESENT = "already present, not created by this validation"  # a Job that decides nothing
DETAIL_LIMIT = 200  # a Job condition's reason or message, as quoted in a failure


@dataclass(frozen=True)
class Validated:
    """How one look at a validation ended."""

    record: ValidationRecord  # what the binding entry records now
    then: Result  # when to look again (while Running)

    @property
    def failure(self) -> str | None:
        """The ValidationFailed message when it failed (None otherwise)."""
        return self.record.message if self.record.phase == "Failed" else None


@dataclass(frozen=True)
class _Part:
    """One validation resource's objects, in apply order, and their content hashes."""

    objects: tuple[dict[str, Any], ...]
    hashes: tuple[str, ...]
    confidential: bool  # from a Secret: the server's messages are kept to causes


@dataclass(frozen=True)
class _Look:
    """What the Jobs say: the first failure of the run's own Jobs, else the first Job
    still running, and the first one the run did not create (it decides nothing)."""

    failed: str | None = None
    waiting: ObjectRef | None = None
    present: ObjectRef | None = None

    @property
    def passed(self) -> bool:
        """Every Job is the run's own, and Complete."""
        return self.waiting is None and self.present is None


async def validate(
    ctx: ClusterContext,
    client: KubeAPI,
    crs: CRS,
    cluster: Cluster,
    *,
    step: int,
    spec: Validation,
    timeout: float,
    revision: str,
    previous: ValidationRecord | None,
    listed: frozenset[ObjectKey],
) -> Validated:
    """Look once at step ``step``'s validation of ``revision`` on ``cluster``, from
    the record of the last look (``previous``; of another revision or step, an
    earlier run's). ``timeout`` is ``spec.timeout`` in seconds; ``listed``: every
    object an entry of the cluster's binding lists (never deleted here). Raises
    Unreachable when the cluster does not answer."""
    now = ctx.clock.wall()
    record = _continued(previous, revision=revision, step=step)
    if record is not None and record.phase in ("Succeeded", "Failed"):
        return Validated(record, NOTHING)  # decided: nothing to contact
    fresh = record is None or record.message.startswith(NOT_STARTED)
    if record is None:
        left = previous.created if previous is not None else None  # taken over
        record = ValidationRecord(
            revision=revision, step=step, phase="Running", started=now, created=left
        )
    run = _Run(ctx, client, crs, cluster, spec, record, now, timeout, listed)
    parts = await _load(ctx, cluster, spec)
    if isinstance(parts, str):
        return run.unusable(parts)
    objects = [obj for part in parts for obj in part.objects]
    if record.finished is not None:
        return await run.clean_up(objects, record.finished)
    if (problem := ttl_refusal(filter(is_job, objects))) is not None:
        return run.unusable(problem)
    return await run.attempt(parts, objects, fresh=fresh)


def _continued(
    previous: ValidationRecord | None, *, revision: str, step: int
) -> ValidationRecord | None:
    """The record of the last look when it was about this revision and step (a new
    run starts otherwise)."""
    if previous is not None and (previous.revision, previous.step) == (revision, step):
        return previous
    return None


async def _load(ctx: ClusterContext, cluster: Cluster, spec: Validation) -> list[_Part] | str:
    """Each validation resource's objects (parsed once per content, shared with the
    apply path), or why one of them cannot be used."""
    parts = []
    for ref in spec.resources:
        source = await ctx.sources.load(cluster.namespace, ref)
        try:
            if source.error is not None:
                raise source.error
            manifest = await ctx.sources.manifest(source)
        except ResourceError as exc:  # messages about sources never quote their data
            return f"{exc.reason}: {exc}"
        parts.append(_Part(manifest.objects, manifest.hashes, ref.kind == "Secret"))
    return parts


@dataclass(frozen=True)
class _Run:
    """One look at one cluster's validation, with the record it started from."""

    ctx: ClusterContext
    client: KubeAPI
    crs: CRS
    cluster: Cluster
    spec: Validation
    record: ValidationRecord
    now: datetime
    timeout: float  # spec.timeout, in seconds
    listed: frozenset[ObjectKey]  # what the cluster's binding lists: never deleted here

    @property
    def elapsed(self) -> float:
        """Seconds since the run started."""
        return (self.now - self.record.started).total_seconds()

    @property
    def where(self) -> dict[str, Any]:
        """Who it is about, for the log."""
        crs = f"{self.crs.namespace}/{self.crs.name}"
        return {"crs": crs, "cluster": self.cluster.name, "step": self.record.step}

    @property
    def manager(self) -> str:
        return self.ctx.settings.field_manager

    def unusable(self, problem: str) -> Validated:
        """A validation resource cannot be used: the validation fails, unless every
        Job passed already (then only the cleanup is lost)."""
        if self.record.finished is not None:
            log.info("validation objects not removed", **self.where, problem=problem)
            return self.succeeded(self.record.finished)
        return self.failed(f"validation on cluster {self.cluster.name}: {problem}")

    async def attempt(
        self, parts: Sequence[_Part], objects: Sequence[dict[str, Any]], *, fresh: bool
    ) -> Validated:
        """Apply the objects (a fresh run first clears an earlier run's Jobs) and read
        the Jobs, then judge what they say."""
        if not fresh:
            return await self.go(parts, objects)
        started = await self.start(objects)
        if isinstance(started, Validated):
            return started
        return await started.go(parts, objects)

    async def start(self, objects: Sequence[dict[str, Any]]) -> _Run | Validated:
        """A new run: the earlier run's Jobs are cleared first. Until they are, the run
        is not started (each look tries again), and the timeout fails it."""
        try:
            return await self.clear_leftovers(objects)
        except Unreachable:
            raise
        except APIError as exc:
            log.info("validation not started", **self.where, error=str(exc))
            message = f"{NOT_STARTED}removing an earlier run's Jobs: {exc}"
            if self.elapsed >= self.timeout:
                return self.failed(self.timed_out(message))
            return Validated(self.running(message), RETRY)

    async def go(self, parts: Sequence[_Part], objects: Sequence[dict[str, Any]]) -> Validated:
        """Apply the objects and read the Jobs, then judge what they say."""
        late = self.elapsed >= self.timeout
        run: _Run = self
        errors: list[str] = []
        try:
            # Past the deadline only a last look: nothing is sent again as it fails;
            # an object the server refused until then is missing, or as it was.
            if late:
                errors = await self.missing(objects)
            else:
                run, errors = await self.apply(parts, objects)
            look = await run.look(objects)
        except Unreachable:
            raise  # the caller makes it the cluster's outcome
        except APIError as exc:
            return run.unanswered(exc, errors, late=late)
        return await run.judge(look, errors, objects)

    def unanswered(self, exc: APIError, errors: Sequence[str], *, late: bool) -> Validated:
        """A request of the look failed: the timeout's failure, else look again."""
        log.info("validation request failed", **self.where, error=str(exc))
        if late:
            return self.failed(self.timed_out(str(exc)))
        # A refused apply is kept on record over a read that failed after it.
        waiting = NOT_APPLIED + "; ".join(errors) if errors else f"waiting: {exc}"
        return Validated(self.running(waiting), RETRY)

    async def judge(
        self, look: _Look, errors: Sequence[str], objects: Sequence[dict[str, Any]]
    ) -> Validated:
        """The verdict of one look: failed, passed (then clean up), timed out, or
        still running with when to look again."""
        if look.failed is not None:
            return self.failed(look.failed)
        late = self.elapsed >= self.timeout
        if look.passed and not errors and not (late and self.refused):
            return await self.clean_up(objects, self.now)
        if late:
            return self.failed(self.timed_out(self.pending(look, errors)))
        if errors:
            log.info("validation objects not applied", **self.where, errors=len(errors))
            return Validated(self.running(NOT_APPLIED + "; ".join(errors)), RETRY)
        if look.present is not None:
            waiting = f"Job {named(look.present)} {PRESENT}"
        else:
            assert look.waiting is not None
            waiting = f"waiting for Job {named(look.waiting)} to complete"
        return Validated(
            self.running(waiting), Result.after(min(POLL_SECONDS, self.timeout - self.elapsed))
        )

    @property
    def refused(self) -> bool:
        """Whether the server refused the last look's apply (its record says so)."""
        return self.record.message.startswith(NOT_APPLIED)

    def pending(self, look: _Look, errors: Sequence[str]) -> str:
        """What the run still waits for at the timeout: a Job it did not create, else a
        Job not Complete, else the objects the server refused (as the last apply was
        answered), else those the last look found missing."""
        if look.present is not None:
            return f"Job {named(look.present)} {PRESENT}"
        if look.waiting is not None:
            return f"Job {named(look.waiting)} not Complete"
        if self.refused or not errors:
            return self.record.message or "objects not applied"
        return "; ".join(errors)

    async def clear_leftovers(self, objects: Sequence[dict[str, Any]]) -> _Run:
        """Delete the Jobs an earlier run created and left behind (a failed run keeps
        them), so that this run's Jobs run afresh: the run, its record no longer
        naming a Job still there (one kept is not this run's, and decides nothing)."""
        refs = [job_ref(obj) for obj in objects if is_job(obj)]
        refs += [ref for ref in await self.earlier_jobs() if ref not in refs]
        done = await delete_objects(
            self.client, self.deletable(refs), self.manager, uids=self.created
        )
        self.kept(done.skipped, "not created by a validation")
        if done.failed:
            raise APIError(done.failed[0])
        there = set()
        for ref in refs:
            live = await self.client.get(ref.api_version, ref.kind, ref.name, ref.namespace)
            there.add(((live or {}).get("metadata") or {}).get("uid"))
        created = [uid for uid in self.record.created or () if uid not in there]
        record = self.record.model_copy(update={"created": created or None})
        return replace(self, record=record)

    async def earlier_jobs(self) -> list[ObjectRef]:
        """The Jobs the record names as created (by an earlier run), whatever this
        run's Jobs are named: every object we apply carries our label. A list the
        server refuses (a kubeconfig without that right) finds none."""
        if not self.created:
            return []
        selector = f"{APPLIED_BY_LABEL}={APPLIED_BY}"
        try:
            jobs, _ = await self.client.list("batch/v1", "Job", label_selector=selector)
        except Unreachable:
            raise
        except APIError as exc:
            log.info("an earlier run's Jobs not listed", **self.where, error=str(exc))
            return []
        return [
            job_ref(job) for job in jobs if (job.get("metadata") or {}).get("uid") in self.created
        ]

    @property
    def created(self) -> frozenset[str]:
        """The uids of the objects validation runs created and did not delete yet."""
        return frozenset(self.record.created or ())

    def deletable(self, refs: Sequence[ObjectRef]) -> list[ObjectRef]:
        """``refs`` but those a validation never deletes (each named in the log): one
        an entry of the cluster's binding lists, a Namespace or a CRD."""
        found = []
        for ref in refs:
            if ref.key in self.listed:
                self.kept([ref], "applied by a ClusterResourceSet")
            elif (kind := protected_kind(ref)) is not None:
                self.kept([ref], f"{kind}: validation resources have no allowDelete")
            else:
                found.append(ref)
        return found

    def kept(self, refs: Sequence[ObjectRef], why: str) -> None:
        for ref in refs:
            log.info("validation object kept", **self.where, object=_label(ref), reason=why)

    async def apply(
        self, parts: Sequence[_Part], objects: Sequence[dict[str, Any]]
    ) -> tuple[_Run, list[str]]:
        """Apply every resource's objects: the run, its record naming what it created
        (absent before, there now), and the errors of those that failed."""
        refs = [ref for ref in [await self._where(obj) for obj in objects] if ref is not None]
        before = await self._uids(refs)
        errors = await self._apply(parts)
        absent = [ref for ref in refs if ref in before and before[ref] is None]
        now = await self._uids(absent)
        made = [uid for uid in now.values() if uid is not None]
        jobs = {uid for ref, uid in [*before.items(), *now.items()] if _is_job_ref(ref)}
        # What no object carries any more is forgotten (the record stays bounded),
        # once every object could be read.
        mine = [uid for uid in before.values() if uid in self.created]
        if len(before) < len(refs):
            mine = list(self.record.created or ())
        created = self.bounded([*mine, *made], jobs)
        record = self.record.model_copy(update={"created": created or None})
        return replace(self, record=record), errors

    def bounded(self, uids: Sequence[str], jobs: Collection[str | None]) -> list[str]:
        """``uids`` once each, the Jobs' first (the verdict reads only Jobs the run
        created), cut to what a record holds: the rest are kept, named in the log."""
        ordered = sorted(dict.fromkeys(uids), key=lambda uid: uid not in jobs)
        if len(ordered) > CREATED_LIMIT:
            why = f"more than the {CREATED_LIMIT} objects a validation record holds"
            log.info(
                "validation objects kept",
                **self.where,
                count=len(ordered) - CREATED_LIMIT,
                reason=why,
            )
        return ordered[:CREATED_LIMIT]

    async def _uids(self, refs: Sequence[ObjectRef]) -> dict[ObjectRef, str | None]:
        """Each object's uid on the cluster (None: not there), of those the server
        answered for: one it did not is neither absent nor there, so never taken
        for created (the look's own reads report the error)."""
        found: dict[ObjectRef, str | None] = {}
        for ref in refs:
            namespace = ref.namespace or None
            try:
                live = await self.client.get(ref.api_version, ref.kind, ref.name, namespace)
            except Unreachable:
                raise
            except APIError:
                continue
            uid = (live.get("metadata") or {}).get("uid") if live is not None else None
            found[ref] = uid if isinstance(uid, str) else None
        return found

    async def _apply(self, parts: Sequence[_Part]) -> list[str]:
        """Apply every resource's objects; the errors of those that failed."""
        errors: list[str] = []
        for part in parts:
            applied = await apply_objects(
                self.client,
                part.objects,
                field_manager=self.manager,
                only_missing=False,
                confidential=part.confidential,
                hashes=part.hashes,
            )
            errors += applied.errors
        return errors

    async def missing(self, objects: Sequence[dict[str, Any]]) -> list[str]:
        """The objects other than Jobs (``look`` reads those) that are not on the
        cluster: never applied, so the run cannot pass."""
        absent = []
        for obj in objects:
            ref = None if is_job(obj) else await self._where(obj)
            if ref is None:
                continue
            namespace = ref.namespace or None
            if await self.client.get(ref.api_version, ref.kind, ref.name, namespace) is None:
                absent.append(f"{ref} not applied")
        return absent

    async def look(self, objects: Sequence[dict[str, Any]]) -> _Look:
        """Read each Job: the first of the run's own that failed, else the first not
        yet Complete, and the first the run did not create (its state is no answer)."""
        waiting = present = None
        for job in (job_ref(obj) for obj in objects if is_job(obj)):
            live = await self.client.get(job.api_version, job.kind, job.name, job.namespace)
            meta = (live or {}).get("metadata") or {}
            if live is None or meta.get("deletionTimestamp"):
                waiting = waiting or job  # gone: applied again on the next look
            elif meta.get("uid") not in self.created:
                present = present or job
            elif (condition := _verdict(live)) is None:
                waiting = waiting or job
            elif condition.get("type") in ("Failed", "FailureTarget"):
                return _Look(failed=self._job_failed(job, condition))
        return _Look(waiting=waiting, present=present)

    def _job_failed(self, job: ObjectRef, condition: Mapping[str, Any]) -> str:
        reason = safe(str(condition.get("reason") or "Failed"), DETAIL_LIMIT)
        detail = safe(str(condition.get("message") or ""), DETAIL_LIMIT)
        return f"validation on cluster {self.cluster.name}: Job {named(job)} failed: {reason}" + (
            f": {detail}" if detail else ""
        )

    def timed_out(self, pending: str) -> str:
        timeout = self.spec.timeout
        return f"validation on cluster {self.cluster.name} timed out after {timeout}: {pending}"

    async def clean_up(self, objects: Sequence[dict[str, Any]], passed: datetime) -> Validated:
        """Every Job is Complete (at ``passed``): delete the objects, in reverse order.
        An error leaves the record Running, marked passed, and tries again soon."""
        try:
            found = [await self._where(obj) for obj in objects]
            refs = self.deletable([ref for ref in reversed(found) if ref is not None])
            done = await delete_objects(self.client, refs, self.manager, uids=self.created)
        except Unreachable:
            raise
        except APIError as exc:
            failed = [str(exc)]
        else:
            failed = done.failed
            self.kept(done.skipped, "not created by the validation")
        if failed:
            log.info("validation objects not removed yet", **self.where, errors=len(failed))
            message = f"passed; removing its objects: {failed[0]}"
            record = self.running(message).model_copy(update={"finished": passed})
            return Validated(record, Result.after(POLL_SECONDS))
        return self.succeeded(passed, removed=True)

    async def _where(self, obj: Mapping[str, Any]) -> ObjectRef | None:
        """Where ``obj`` lives: the namespace the apply gave it ("default" when it
        names none). None when the cluster does not serve its kind (nothing to delete)."""
        ref = object_ref(obj)
        try:
            info = await self.client.resource_info(ref.api_version, ref.kind)
        except NotFound:
            return None
        namespace = (ref.namespace or "default") if info.namespaced else ""
        return ref.model_copy(update={"namespace": namespace})

    def running(self, message: str) -> ValidationRecord:
        return self.record.model_copy(update={"message": safe(message, MESSAGE_LIMIT)})

    def succeeded(self, passed: datetime, *, removed: bool = False) -> Validated:
        """Passed at ``passed``; ``removed``: its objects are deleted, or kept for good
        (forgotten: no later run deletes them either)."""
        log.info("validation succeeded", **self.where)
        update: dict[str, Any] = {"phase": "Succeeded", "finished": passed, "message": ""}
        if removed:
            update["created"] = None
        return Validated(self.record.model_copy(update=update), NOTHING)

    def failed(self, message: str) -> Validated:
        text = safe(message, MESSAGE_LIMIT)
        log.info("validation failed", **self.where, message=text)
        update = {"phase": "Failed", "finished": self.now, "message": text}
        return Validated(self.record.model_copy(update=update), NOTHING)


_FINISHED = frozenset({"Complete", "SuccessCriteriaMet", "Failed", "FailureTarget"})


def _verdict(job: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The Job's finishing condition (Complete, Failed and their early targets),
    or None while it runs."""
    status = job.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for condition in conditions if isinstance(conditions, list) else []:
        if (
            isinstance(condition, Mapping)
            and condition.get("status") == "True"
            and condition.get("type") in _FINISHED
        ):
            return condition
    return None


def _is_job_ref(ref: ObjectRef) -> bool:
    return is_job({"apiVersion": ref.api_version, "kind": ref.kind})


def _label(ref: ObjectRef) -> str:
    """kind/namespace/name (kind/name when cluster-scoped), for the log."""
    return f"{ref.kind}/{named(ref)}" if ref.namespace else f"{ref.kind}/{ref.name}"
