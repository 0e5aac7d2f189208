"""``coordination.k8s.io`` Leases, decided without I/O: what a Lease says, whether
one may be taken, and the body to write.

Two kinds of Lease are held: the leader Lease (one per controller, taken over by a
standby once its holder stops renewing it, as client-go's leaderelection does) and a
shard member's own Lease (one per replica, never contended). Both carry the same
fields and the same time format, defined here once. Time is passed in (``now``): nothing
here reads a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from crs_controller.core.membership.shard import Members, incarnation_of

__all__ = [
    "INCARNATION_ANNOTATION",
    "LEASE_API",
    "LEASE_KIND",
    "LeaseRecord",
    "format_micro_time",
    "free_for",
    "leader_lease",
    "member_lease",
    "parse_micro_time",
    "released",
]

LEASE_API = "coordination.k8s.io/v1"
LEASE_KIND = "Lease"
# A shard member's incarnation token (``core.membership.shard.new_incarnation``).
INCARNATION_ANNOTATION = "addons.crs.dev/shard-incarnation"
# metav1.MicroTime, as the API server writes it: RFC 3339 with microseconds, in UTC.
_MICRO_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"


def format_micro_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(_MICRO_TIME)


def parse_micro_time(text: object) -> datetime | None:
    """A MicroTime (or a plain RFC 3339 time, which other writers may use); None when
    absent or unreadable: such a Lease counts as never renewed."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@dataclass(frozen=True)
class LeaseRecord:
    """What a Lease says, read once at the boundary."""

    name: str
    holder: str  # "" when released or never held
    duration: float  # seconds; 0 when unset
    renew_marker: str  # spec.renewTime as written (or the resourceVersion), for change only
    renewed: datetime | None
    transitions: int
    # A shard member's incarnation token ("": none, or not 32 lowercase hex digits).
    incarnation: str = ""

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> LeaseRecord:
        meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
        renew = spec.get("renewTime")
        try:
            transitions = int(spec.get("leaseTransitions") or 0)
        except (TypeError, ValueError):
            transitions = 0
        try:
            duration = float(spec.get("leaseDurationSeconds") or 0)
        except (TypeError, ValueError):
            duration = 0.0
        return cls(
            name=str(meta.get("name") or ""),
            holder=str(spec.get("holderIdentity") or ""),
            duration=duration,
            renew_marker=str(renew or meta.get("resourceVersion") or ""),
            renewed=parse_micro_time(renew),
            transitions=transitions,
            incarnation=incarnation_of((meta.get("annotations") or {}).get(INCARNATION_ANNOTATION)),
        )


def free_for(
    record: LeaseRecord | None, identity: str, seen: Members, now: float, duration: float
) -> bool:
    """May ``identity`` write the leader Lease at ``now`` (monotonic seconds, our own
    clock)? Yes when there is none, nobody holds it, ``identity`` already does, or
    its holder's renewal was last seen to change a lease duration (its own, else
    ``duration``) ago or more. ``seen`` keeps what was seen and is told of this
    sighting: like the shard Leases, and client-go, the ``renewTime`` is compared only
    for equality, never with our wall clock, so skew between nodes does not matter.
    The price: a candidate that has just started waits a lease duration for a holder
    that is gone."""
    if record is None or record.holder in ("", identity):
        return True
    seen.observe(record.holder, record.renew_marker, record.duration or duration, now)
    return record.holder not in seen.live(now)


def _seconds(duration: float) -> int:
    # leaseDurationSeconds is an integer of at least one second.
    return max(1, round(duration))


def leader_lease(
    current: Mapping[str, Any] | None,
    *,
    name: str,
    namespace: str,
    identity: str,
    duration: float,
    now: datetime,
) -> dict[str, Any]:
    """The leader Lease held (or renewed) by ``identity`` at ``now``: a replacement for
    ``current`` (its metadata and resourceVersion kept, for optimistic concurrency),
    or a new Lease. A change of holder stamps acquireTime and counts a transition."""
    record = LeaseRecord.parse(current) if current is not None else None
    spec: dict[str, Any] = dict((current or {}).get("spec") or {})
    stamp = format_micro_time(now)
    taken = record is None or record.holder != identity
    if taken:
        spec["acquireTime"] = stamp
    spec.update(
        holderIdentity=identity,
        leaseDurationSeconds=_seconds(duration),
        renewTime=stamp,
        leaseTransitions=(record.transitions + taken) if record is not None else 0,
    )
    metadata = (current or {}).get("metadata") or {"name": name, "namespace": namespace}
    return {"apiVersion": LEASE_API, "kind": LEASE_KIND, "metadata": metadata, "spec": spec}


def released(current: Mapping[str, Any]) -> dict[str, Any]:
    """``current`` given up: no holder and the shortest duration, so a standby takes
    it at once instead of after the lease duration."""
    spec = {**(current.get("spec") or {}), "holderIdentity": "", "leaseDurationSeconds": 1}
    return {**current, "spec": spec}


def member_lease(
    *,
    name: str,
    namespace: str,
    identity: str,
    label: str,
    duration: float,
    now: datetime,
    incarnation: str,
) -> dict[str, Any]:
    """A shard member's own Lease, for server-side apply (only the fields we own),
    annotated with its incarnation token."""
    metadata = {
        "name": name,
        "namespace": namespace,
        "labels": {label: "true"},
        "annotations": {INCARNATION_ANNOTATION: incarnation},
    }
    return {
        "apiVersion": LEASE_API,
        "kind": LEASE_KIND,
        "metadata": metadata,
        "spec": {
            "holderIdentity": identity,
            "leaseDurationSeconds": _seconds(duration),
            "renewTime": format_micro_time(now),
        },
    }
