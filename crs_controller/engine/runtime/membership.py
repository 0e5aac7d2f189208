"""Shard membership: this replica's Lease, the other members' Leases, and which
Clusters are ours.

Each member applies its own ``coordination.k8s.io`` Lease (labelled
``addons.crs.dev/shard-member``) every third of the lease duration and watches the
others'. Who is live is judged by ``core.shard.Members`` from when renewals were
*seen*; which member owns a Cluster is rendezvous hashing of ``namespace/name`` over
the live members (``core.shard.owner``), so a member joining or leaving moves only
its own Clusters.

This replica counts itself live only while its last renewal is younger than two
thirds of the lease duration: the others wait for the full duration before they take
its Clusters, so a replica cut off from the API server stops acting before anyone
else starts. A Lease deleted under it also stops it at once, until it is renewed.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from crs_controller.clients.kube import KubeClient, Obj
from crs_controller.core.clock import Clock
from crs_controller.core.errors import CRSError
from crs_controller.core.shard import Members, lease_name, owner
from crs_controller.engine.io.informer import Informer, WatchSpec
from crs_controller.engine.runtime.tasks import supervised

log = structlog.get_logger(__name__)

LEASE_API = "coordination.k8s.io/v1"
MEMBER_LABEL = "addons.crs.dev/shard-member"
FIELD_MANAGER = "crs-controller-shard"
RENEW_DEADLINE = 2 / 3  # of the lease duration
STALE_AFTER = 4  # lease durations past expiry

Changed = Callable[[frozenset[str], frozenset[str]], None]  # members before, after


@dataclass(frozen=True)
class SeenLease:
    """A member's Lease as the watch shows it."""

    name: str
    identity: str
    renewed: str  # the renew marker: compared for change only, never as a time
    duration: float


def parse_lease(raw: Obj) -> SeenLease:
    meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
    name = str(meta.get("name") or "")
    return SeenLease(
        name=name,
        identity=str(spec.get("holderIdentity") or name),
        renewed=str(spec.get("renewTime") or meta.get("resourceVersion") or ""),
        duration=float(spec.get("leaseDurationSeconds") or 0),
    )


class ShardMembership:
    """``owns(namespace, name)`` answers for this replica; ``on_change(before, after)``
    is told whenever the set of members this replica acts with changes."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        identity: str,
        *,
        lease_seconds: float,
        clock: Clock,
        on_change: Changed,
    ) -> None:
        self.identity = identity
        self.lease = lease_name(identity)
        self._client = client
        self._namespace = namespace
        self._lease_seconds = lease_seconds
        self._clock = clock
        self._on_change = on_change
        self._members = Members()
        self._lease_names: dict[str, str] = {}  # identity -> its Lease's name
        self._renewed_at: float | None = None
        self._view: frozenset[str] = frozenset()
        self._wake = asyncio.Event()
        self.ready = asyncio.Event()
        spec = WatchSpec(LEASE_API, "Lease", namespace, label_selector=MEMBER_LABEL)
        self._informer: Informer[SeenLease] = Informer(client, spec, parse_lease, self.on_lease)

    # -- what the controller asks -----------------------------------------------------

    @property
    def members(self) -> frozenset[str]:
        return self._view

    def owns(self, namespace: str, name: str) -> bool:
        return owner(self._view, f"{namespace}/{name}") == self.identity

    # -- running ----------------------------------------------------------------------

    async def run(self) -> None:
        """Renew, watch, and look again when a member may have expired."""
        async with asyncio.TaskGroup() as group:
            supervised(group, self._renew_loop(), "shard-lease")
            supervised(group, self._informer.run(), "watch-shard-leases")
            await self._informer.synced.wait()
            while self._renewed_at is None:
                await self._clock.sleep_until(None, self._wake)
                self._wake.clear()
            self.refresh()
            self.ready.set()
            log.info("joined the shard set", identity=self.identity, members=sorted(self._view))
            supervised(group, self._expiry_loop(), "shard-expiry")

    async def release(self) -> None:
        """Delete this replica's Lease on a clean shutdown: the others take its
        Clusters at once instead of after the lease duration."""
        self._renewed_at = None
        self.refresh()
        try:
            await self._client.delete(LEASE_API, "Lease", self.lease, self._namespace)
            log.info("left the shard set", identity=self.identity)
        except CRSError as exc:
            log.warning("shard lease not released", error=str(exc))

    async def _renew_loop(self) -> None:
        period = self._lease_seconds / 3
        while True:
            try:
                await self._client.apply(self._lease_body(), field_manager=FIELD_MANAGER)
                self.renewed()
            except CRSError as exc:
                log.warning("shard lease not renewed", error=str(exc))
            self._wake.set()
            await asyncio.sleep(period)

    async def _expiry_loop(self) -> None:
        while True:
            now = self._clock.now()
            # A member's expiry, our own renew deadline, or now and then anyway, to
            # clear Leases left by replicas that died.
            deadlines = [self._members.next_expiry(now), self._own_deadline()]
            due = min([d for d in deadlines if d is not None and d > now], default=None)
            await self._clock.sleep_until(
                min(due or math.inf, now + self._lease_seconds), self._wake
            )
            self._wake.clear()
            self.refresh()
            await self._clear_stale()

    async def _clear_stale(self) -> None:
        """Delete the Leases of members silent for STALE_AFTER lease durations: a
        replacement pod has a new name, so nobody else would ever renew them."""
        if not self._acting(self._clock.now()):
            return
        grace = self._lease_seconds * STALE_AFTER
        for identity in self._members.stale(self._clock.now(), grace):
            name = self._lease_names.get(identity, lease_name(identity))
            try:
                await self._client.delete(LEASE_API, "Lease", name, self._namespace)
                log.info("removed the lease of a departed member", identity=identity)
            except CRSError as exc:
                log.info("stale lease not removed", identity=identity, error=str(exc))
            self._members.forget(identity)

    def renewed(self) -> None:
        """This replica's Lease was just written."""
        self._renewed_at = self._clock.now()

    def _own_deadline(self) -> float | None:
        if self._renewed_at is None:
            return None
        return self._renewed_at + self._lease_seconds * RENEW_DEADLINE

    def _acting(self, now: float) -> bool:
        deadline = self._own_deadline()
        return deadline is not None and now < deadline

    def on_lease(self, old: SeenLease | None, new: SeenLease | None) -> None:
        """The Lease watch's handler: note a member's renewal, or its going."""
        now = self._clock.now()
        if new is None:
            assert old is not None
            self._members.forget(old.identity)
            if old.identity == self.identity:
                # Deleted under us: the others already count us out.
                self._renewed_at = None
        elif new.identity != self.identity:
            self._lease_names[new.identity] = new.name
            self._members.observe(new.identity, new.renewed, new.duration, now)
        self._wake.set()

    def refresh(self) -> None:
        """Recompute the members this replica acts with; tell ``on_change`` if they
        changed."""
        now = self._clock.now()
        others = {m for m in self._members.live(now) if m != self.identity}
        view = frozenset(others | ({self.identity} if self._acting(now) else set()))
        if self.identity not in view:
            # Not acting: owns nothing, whoever else is live.
            view = frozenset()
        if view == self._view:
            return
        before, self._view = self._view, view
        log.info("shard members changed", before=sorted(before), after=sorted(view))
        self._on_change(before, view)

    def _lease_body(self) -> Obj:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return {
            "apiVersion": LEASE_API,
            "kind": "Lease",
            "metadata": {
                "name": self.lease,
                "namespace": self._namespace,
                "labels": {MEMBER_LABEL: "true"},
            },
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, round(self._lease_seconds)),
                "renewTime": now,
            },
        }
