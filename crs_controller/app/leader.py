"""Leader election on a coordination.k8s.io Lease, like client-go's leaderelection.

Only the holder runs the controller (in a shard set: only the holder writes CRS
status and finalizers). A holder that cannot renew within two thirds of the lease
duration stops (the process exits and is restarted) before a standby, which waits
the full duration, can take over.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from datetime import UTC, datetime

import structlog

from crs_controller.clients.kube import KubeClient, Obj
from crs_controller.core.errors import CRSError

log = structlog.get_logger(__name__)

LEASE_API = "coordination.k8s.io/v1"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(ts: str | None) -> datetime | None:
    if not ts:
        return None
    return datetime.strptime(ts.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str = "crs-controller",
        *,
        lease_seconds: float = 15,
        retry_seconds: float = 2.0,
    ) -> None:
        self._client = client
        self._namespace = namespace
        self._name = name
        self.identity = f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
        self._lease_seconds = lease_seconds
        self._retry = min(retry_seconds, lease_seconds / 3)

    async def acquire(self) -> None:
        """Return once this process holds the lease."""
        while not await self._try():  # noqa: ASYNC110 - polling the API is the protocol
            await asyncio.sleep(self._retry)
        log.info("became leader", lease=f"{self._namespace}/{self._name}", identity=self.identity)

    async def keep(self) -> None:
        """Renew until cancelled; raise if the lease is lost."""
        last_renewed = asyncio.get_running_loop().time()
        while True:
            await asyncio.sleep(self._retry)
            if await self._try():
                last_renewed = asyncio.get_running_loop().time()
            elif asyncio.get_running_loop().time() - last_renewed > self._lease_seconds * 2 / 3:
                # Stop before the lease can expire: a standby waits the full duration.
                raise RuntimeError("leader lease lost")

    async def release(self) -> None:
        """Give the lease up on a clean shutdown, so a standby takes over at once
        instead of after the lease duration."""
        try:
            lease = await self._client.get(LEASE_API, "Lease", self._name, self._namespace)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"]["holderIdentity"] = ""
            lease["spec"]["leaseDurationSeconds"] = 1
            await self._client.replace(lease)
            log.info("released leadership", lease=f"{self._namespace}/{self._name}")
        except CRSError as exc:
            log.warning("lease not released", error=str(exc))

    async def _try(self) -> bool:
        try:
            lease = await self._client.get(LEASE_API, "Lease", self._name, self._namespace)
            if lease is None:
                await self._client.create(self._lease_body(None, transitions=0))
                return True
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity")
            if holder not in (None, "", self.identity) and not self._expired(spec):
                return False
            transitions = int(spec.get("leaseTransitions") or 0) + (holder != self.identity)
            await self._client.replace(self._lease_body(lease, transitions=transitions))
            return True
        except CRSError as exc:
            log.info("lease not acquired", error=str(exc))
            return False

    def _expired(self, spec: Obj) -> bool:
        renewed = _parse(spec.get("renewTime"))
        duration = int(spec.get("leaseDurationSeconds") or self._lease_seconds)
        return renewed is None or (datetime.now(UTC) - renewed).total_seconds() > duration

    def _lease_body(self, current: Obj | None, *, transitions: int) -> Obj:
        now = _now()
        spec = dict((current or {}).get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = now
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=max(1, round(self._lease_seconds)),
            renewTime=now,
            leaseTransitions=transitions,
        )
        metadata = (current or {}).get("metadata") or {
            "name": self._name,
            "namespace": self._namespace,
        }
        return {"apiVersion": LEASE_API, "kind": "Lease", "metadata": metadata, "spec": spec}
