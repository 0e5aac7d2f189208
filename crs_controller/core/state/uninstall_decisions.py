"""Pure decisions for cleaning up before a Cluster is deleted (``uninstall``).

Deadlines run from the Cluster's deletionTimestamp; Jobs among the beforeDelete hook
objects decide whether deletion may go ahead.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Literal

from crs_controller.core.api.models import Uninstall
from crs_controller.core.durations import parse_duration

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
