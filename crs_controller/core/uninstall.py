"""Pure decisions for cleaning up before a Cluster is deleted (``uninstall``).

Deadlines run from the Cluster's deletionTimestamp; Jobs among the beforeDelete hook
objects decide whether deletion may go ahead.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Literal

from crs_controller.core.durations import parse_duration

DEFAULT_TIMEOUT = "10m"
JobState = Literal["Complete", "Failed", "Running"]


def deletion_started(cluster: Mapping[str, Any]) -> datetime | None:
    stamp = (cluster.get("metadata") or {}).get("deletionTimestamp")
    if not stamp:
        return None
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))


def deadline(cluster: Mapping[str, Any], timeout: str | None) -> datetime | None:
    """When we stop holding the Cluster's deletion (None: not being deleted)."""
    started = deletion_started(cluster)
    if started is None:
        return None
    return started + timedelta(seconds=parse_duration(timeout or DEFAULT_TIMEOUT))


def cleanup_due(crs: Mapping[str, Any] | None, cluster: Mapping[str, Any], now: datetime) -> bool:
    """Does this CRS (raw, None when gone) still hold this Cluster's deletion for
    cleanup: it asks for ``uninstall.ensure`` and its timeout has not passed?"""
    spec = (crs or {}).get("spec")
    uninstall = spec.get("uninstall") if isinstance(spec, Mapping) else None
    if not isinstance(uninstall, Mapping) or uninstall.get("ensure") is not True:
        return False
    until = deadline(cluster, uninstall.get("timeout"))
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
