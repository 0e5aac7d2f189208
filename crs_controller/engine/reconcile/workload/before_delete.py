"""A ClusterResourceSet's ``beforeDelete`` hook on a workload cluster whose Cluster is
being deleted: apply its objects and wait for the Jobs among them.

A hook Job is stamped with the CRS it was created for (``HOOK_OF_ANNOTATION``), and
only such a Job answers for that CRS: one of the same name that another CRS's hook,
or anyone else, created is neither run nor read (the collision is reported, naming
the Job). A Job that failed is deleted (that very object, by uid) as the failure is
reported, so the retry runs it again. A Job that sets ``ttlSecondsAfterFinished``
is refused: gone once finished, it would leave no result and be created again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import structlog

from crs_controller.clients.api import KubeAPI
from crs_controller.core.errors import NotFound
from crs_controller.core.manifests.documents import ObjectRef
from crs_controller.core.spec.objects import CRS, Cluster
from crs_controller.core.state.uninstall_decisions import (
    hook_job,
    hook_of,
    is_job,
    job_ref,
    job_state,
    named,
    ttl_refusal,
)
from crs_controller.engine.reconcile.context import ClusterContext
from crs_controller.engine.reconcile.workload.applying import apply_objects

log = structlog.get_logger(__name__)

HookState = Literal["Done", "Running", "Failed"]


async def run_hooks(ctx: ClusterContext, client: KubeAPI, crs: CRS, cluster: Cluster) -> HookState:
    """Apply the beforeDelete objects: Done when every Job among them completed,
    Running while one still runs, Failed (with an event) when one failed or cannot
    be this CRS's."""
    refs = crs.valid.spec.uninstall.before_delete
    # The server's text may quote a refused value: of a Secret's objects, say only where.
    confidential = any(ref.kind == "Secret" for ref in refs)
    objects: list[dict[str, Any]] = []
    for ref in refs:
        source = await ctx.sources.load(cluster.namespace, ref)
        if source.error is not None:
            raise source.error
        objects += await ctx.sources.objects(source)
    if not objects:
        return "Done"
    hook = _Hook(ctx, client, crs, cluster)
    if (problem := ttl_refusal(filter(is_job, objects))) is not None:
        await report(ctx, crs, cluster, f"beforeDelete {problem}")
        return "Failed"
    jobs = [job_ref(obj) for obj in objects if is_job(obj)]
    if not await hook.unclaimed(jobs):
        return "Failed"
    stamped = [hook_job(obj, hook.owner) if is_job(obj) else obj for obj in objects]
    result = await apply_objects(
        client,
        stamped,
        field_manager=ctx.settings.field_manager,
        only_missing=False,
        confidential=confidential,
    )
    if not result.ok:
        await report(ctx, crs, cluster, "; ".join(result.errors))
        return "Failed"
    return await hook.verdict(jobs)


@dataclass(frozen=True)
class _Hook:
    """One look at one CRS's beforeDelete Jobs on one cluster."""

    ctx: ClusterContext
    client: KubeAPI
    crs: CRS
    cluster: Cluster

    @property
    def owner(self) -> str:
        return f"{self.crs.namespace}/{self.crs.name}"

    async def read(self, job: ObjectRef) -> dict[str, Any] | None:
        return await self.client.get(job.api_version, job.kind, job.name, job.namespace)

    async def unclaimed(self, jobs: Sequence[ObjectRef]) -> bool:
        """No Job of these names is there but this CRS's hook's (else reported)."""
        for job in jobs:
            live = await self.read(job)
            if live is None or (theirs := hook_of(live)) == self.owner:
                continue
            who = f"ClusterResourceSet {theirs}'s beforeDelete hook" if theirs else "another"
            message = (
                f"beforeDelete Job {named(job)} already exists, created by {who}: it is"
                " neither run nor read for this ClusterResourceSet (give the Job another name)"
            )
            await report(self.ctx, self.crs, self.cluster, message)
            return False
        return True

    async def verdict(self, jobs: Sequence[ObjectRef]) -> HookState:
        """Done when every Job completed, Running while one runs (or is going), Failed
        (reported) when one failed: that Job is deleted so that the retry runs it."""
        for job in jobs:
            live = await self.read(job)
            meta = (live or {}).get("metadata") or {}
            if live is None or meta.get("deletionTimestamp"):
                return "Running"  # applied again at the next look
            state = job_state(live)
            if state == "Failed":
                await self.failed(job, meta.get("uid"))
                return "Failed"
            if state == "Running":
                return "Running"
        return "Done"

    async def failed(self, job: ObjectRef, uid: str | None) -> None:
        """Report a failed Job and delete it, so that the retry creates and runs it
        again (within ``uninstall.timeout``)."""
        try:
            await self.client.delete(job.api_version, job.kind, job.name, job.namespace, uid=uid)
            then = "deleted, to run again at the next try"
        except NotFound:
            then = "gone, to run again at the next try"
        message = f"beforeDelete Job {named(job)} failed; {then}"
        await report(self.ctx, self.crs, self.cluster, message)


async def report(ctx: ClusterContext, crs: CRS, cluster: Cluster, message: str) -> None:
    """The cleanup is held: a Warning Event UninstallFailed, and the log."""
    text = f"cluster {cluster.name}: uninstall held: {message}"
    log.warning("uninstall blocked", crs=crs.name, message=text)
    await ctx.events.emit(crs, "Warning", "UninstallFailed", text)
