"""Kubernetes Events on ClusterResourceSets, and on a Cluster about itself (one
refused). Emitted only when something happened or
an outcome changed, never on a reconcile that found nothing to do."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Literal

import structlog

from crs_controller.clients.api import KubeAPI, Obj
from crs_controller.core.api.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_KIND,
    ObjectMeta,
    rfc3339,
)
from crs_controller.core.errors import CRSError
from crs_controller.core.notifications.payloads import Notice, notice
from crs_controller.core.spec.objects import CRS, Cluster
from crs_controller.core.text import safe

log = structlog.get_logger(__name__)

COMPONENT = "crs-controller"
# The same 1000 characters as a binding's or a condition's message. core/v1 Events
# (what we write) have no limit of their own; events.k8s.io/v1 validation allows a
# note of 1024 bytes and a reason of 128, which kube-scheduler truncates to as well.
MESSAGE_LIMIT = 1000
REASON_LIMIT = 128
# An Event's name is a DNS subdomain like any object's: at most 253 characters.
NAME_LIMIT = 253
_TOKEN_BYTES = 8


class EventRecorder:
    """Writes the Events, and hands those of a notified reason to ``notify`` (the
    runtime's: it tells the receivers when this process writes status)."""

    def __init__(self, client: KubeAPI, notify: Callable[[Notice], None] | None = None) -> None:
        self._client = client
        self._notify = notify

    async def emit(
        self,
        crs: CRS,
        kind: Literal["Normal", "Warning"],
        reason: str,
        message: str,
        *,
        clusters: Sequence[str] = (),
        revision: str | None = None,
    ) -> None:
        """``clusters``: those the Event is about, for the notification (the message
        names them too, bounded); ``revision``: the one it is about, when not the
        status's."""
        self._tell(crs, reason, message, clusters, revision or crs.status.revision)
        await self._create(_event(_about_crs(crs), kind, reason, message))

    async def emit_on_cluster(
        self, cluster: Cluster, kind: Literal["Normal", "Warning"], reason: str, message: str
    ) -> None:
        """An Event on a Cluster, about the Cluster itself (no CRS's: never notified)."""
        await self._create(_event(_about_cluster(cluster), kind, reason, message))

    async def _create(self, event: Obj) -> None:
        try:
            await self._client.create(event)
        except CRSError as exc:
            # Events are best effort: losing one must never fail a reconcile.
            log.warning("event not recorded", reason=event["reason"], error=str(exc))

    def _tell(
        self, crs: CRS, reason: str, message: str, clusters: Sequence[str], revision: str | None
    ) -> None:
        if self._notify is None:
            return
        told = notice(
            reason,
            crs.namespace,
            crs.name,
            message,
            revision=revision,
            clusters=clusters,
            id=str(uuid.uuid4()),
            time=datetime.now(UTC),
        )
        if told is not None:
            self._notify(told)


def _about_crs(crs: CRS) -> Obj:
    return _involved(API_VERSION, CLUSTER_RESOURCE_SET_KIND, crs.meta)


def _about_cluster(cluster: Cluster) -> Obj:
    return _involved(cluster.api_version, "Cluster", cluster.meta)


def _involved(api_version: str, kind: str, meta: ObjectMeta) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": meta.name,
        "namespace": meta.namespace,
        "uid": meta.uid,
        "resourceVersion": meta.resource_version,
    }


def _event(involved: Obj, kind: Literal["Normal", "Warning"], reason: str, message: str) -> Obj:
    now = rfc3339(datetime.now(UTC))
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": event_name(involved["name"]),
            "namespace": involved["namespace"],
        },
        "involvedObject": involved,
        # Every Event goes out through here: messages quote tenants' names and
        # servers' answers, so they are made safe here, once.
        "reason": safe(reason, REASON_LIMIT),
        "message": safe(message, MESSAGE_LIMIT),
        "type": kind,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def event_name(owner: str) -> str:
    """``<owner>.<16 hex digits>``, as client-go names Events, with the owner's name
    cut short enough for the whole to stay a DNS subdomain of at most 253 characters
    (a CRS may have a name that long), and never ending in '.' or '-' where cut."""
    token = secrets.token_hex(_TOKEN_BYTES)
    prefix = owner[: NAME_LIMIT - len(token) - 1].rstrip(".-")
    return f"{prefix}.{token}" if prefix else token
