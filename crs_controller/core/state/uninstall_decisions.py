"""Pure decisions for cleaning up before a Cluster is deleted (``uninstall``).

Deadlines run from the Cluster's deletionTimestamp; Jobs among the beforeDelete hook
objects decide whether deletion may go ahead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Literal

from crs_controller.core.api.models import ObjectRef, Uninstall
from crs_controller.core.durations import parse_duration
from crs_controller.core.manifests.documents import object_ref

DEFAULT_TIMEOUT = "10m"
JobState = Literal["Complete", "Failed", "Running"]


def deadline(started: datetime | None, timeout: str | None) -> datetime | None:
    """When we stop holding the Cluster's deletion, counted from its
    deletionTimestamp ``started`` (None: not being deleted)."""
    if started is None:
        return None
    return started + timedelta(seconds=parse_duration(timeout or DEFAULT_TIMEOUT))


def cleanup_due(uninstall: Uninstall | None, started: datetime | None, now: datetime) -> bool:
    """Does a CRS with this ``uninstall`` (None: gone, or refused by the model) still
    hold the deletion of a Cluster deleted since ``started``: it asks for ``ensure``
    and its timeout has not passed?"""
    if uninstall is None or not uninstall.ensure:
        return False
    until = deadline(started, uninstall.timeout)
    return until is not None and now < until


# A dependency stops waiting for its dependents' cleanups this share of its own
# timeout before it ends (at most MAX_WAIT_MARGIN): the time left is its own hook's
# and deletions', so that it is never dropped from the cleanup unrun.
WAIT_MARGIN_SHARE = 0.25
MAX_WAIT_MARGIN = timedelta(minutes=5)


def dependents_waited_until(uninstall: Uninstall, started: datetime) -> datetime:
    """Until when a CRS whose cleanup has ``uninstall`` waits for the cleanups of the
    CRSs that depend on it, on a Cluster deleted since ``started``: its own deadline
    less the margin."""
    timeout = timedelta(seconds=parse_duration(uninstall.timeout or DEFAULT_TIMEOUT))
    return started + timeout - min(timeout * WAIT_MARGIN_SHARE, MAX_WAIT_MARGIN)


def waits_for_dependents(
    uninstall: Uninstall | None, started: datetime | None, now: datetime
) -> bool:
    """Does a CRS whose cleanup has ``uninstall`` still wait at ``now`` for the
    cleanups of the CRSs that depend on it, on a Cluster deleted since ``started``?
    Until its own deadline less the margin; past it, it cleans up anyway."""
    if uninstall is None or started is None:
        return False
    return now < dependents_waited_until(uninstall, started)


def job_state(job: Mapping[str, Any]) -> JobState:
    """A batch/v1 Job's verdict from its conditions (Complete / Failed)."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") in ("Complete", "SuccessCriteriaMet"):
            return "Complete"
        if condition.get("type") in ("Failed", "FailureTarget"):
            return "Failed"
    return "Running"


def is_job(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == "Job" and str(obj.get("apiVersion", "")).startswith("batch/")


# Stamped on a beforeDelete Job: the ClusterResourceSet (namespace/name) whose hook
# created it. Only such a Job answers for that CRS's hook: one of the same name made
# by another CRS's hook, or by anyone else, is neither run nor read as its result.
HOOK_OF_ANNOTATION = "addons.crs.dev/before-delete-of"
TTL_FIELD = "spec.ttlSecondsAfterFinished"


def hook_job(job: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """A copy of the beforeDelete Job ``job`` stamped as created for ``owner``."""
    body = dict(job)
    meta = dict(body.get("metadata") or {})
    annotations = meta.get("annotations")
    meta["annotations"] = {
        **(annotations if isinstance(annotations, Mapping) else {}),
        HOOK_OF_ANNOTATION: owner,
    }
    body["metadata"] = meta
    return body


def hook_of(live: Mapping[str, Any]) -> str | None:
    """The CRS a live Job was created for by a beforeDelete hook (None: not by one)."""
    annotations = (live.get("metadata") or {}).get("annotations")
    found = annotations.get(HOOK_OF_ANNOTATION) if isinstance(annotations, Mapping) else None
    return found if isinstance(found, str) else None


def ttl_refusal(jobs: Iterable[Mapping[str, Any]]) -> str | None:
    """Why these Jobs cannot be awaited, or None: a Job the server deletes once
    finished (``ttlSecondsAfterFinished``) leaves no result to read, and would be
    created and run again at the next look."""
    for job in jobs:
        spec = job.get("spec")
        if isinstance(spec, Mapping) and spec.get("ttlSecondsAfterFinished") is not None:
            name = (job.get("metadata") or {}).get("name")
            return (
                f"Job {name} sets {TTL_FIELD}, which is not supported: the controller"
                " reads the finished Job's result"
            )
    return None


def job_ref(obj: Mapping[str, Any]) -> ObjectRef:
    """A Job's identity (always namespaced: "default" when it names none)."""
    ref = object_ref(obj)
    return ref.model_copy(update={"namespace": ref.namespace or "default"})


def named(ref: ObjectRef) -> str:
    """namespace/name, as a Job is named in messages."""
    return f"{ref.namespace}/{ref.name}"
