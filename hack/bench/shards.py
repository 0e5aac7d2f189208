"""The crs-controller phase with ``--replicas N`` (N > 1): N processes run as one shard
set (``crs-controller run --shard``), each reconciling the Clusters that rendezvous
hashing gives it, one of them (the leader Lease holder) writing CRS status.

Replica ``i`` runs with POD_NAME ``replica-<i>`` and a client certificate of its own
(user ``bench-replica-<i>``). It names itself in its User-Agent (``crs-controller
(shard member replica-<i>)``) to the management and the workload servers alike; the
workload servers see one user for all replicas (the Clusters' kubeconfigs), so a
request is attributed to a replica by its User-Agent.

Times are for the whole set (until all N clusters are done), CPU is summed over the
replicas and requests are those of all of them; ``per_replica`` gives each one's share.
There is no idle phase.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
from common import (
    Figures,
    audit_counts,
    cpu_seconds,
    derived,
    member_counts,
    rss_mib,
    until_applied,
)
from prometheus_client.parser import text_string_to_metric_families

from crs_controller.testbed import ControlPlane, Server, wait_for
from crs_controller.testbed.controller import ControllerProcess

LEASE_DURATION = "15s"


def names(replicas: int) -> list[str]:
    return [f"replica-{i}" for i in range(replicas)]


def user(name: str) -> str:
    """The replica's own client-certificate user on the management server."""
    return f"bench-{name}"


def scrape(process: ControllerProcess) -> dict[str, float]:
    """The process's /metrics: ``name`` or ``name{label=value,...}`` -> value."""
    text = httpx.get(process.url("/metrics"), timeout=5).text
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out


def each(
    action: Callable[[ControllerProcess], object], processes: Iterable[ControllerProcess]
) -> None:
    """``action`` on every process at once (start-up and shutdown take seconds each)."""
    batch = list(processes)
    with ThreadPoolExecutor(len(batch)) as pool:
        list(pool.map(action, batch))


def pid(process: ControllerProcess) -> int:
    assert process.pid is not None, "replica not running"
    return process.pid


class ShardSet:
    """N ``crs-controller run --shard`` processes, started and stopped together."""

    def __init__(self, management: Server, replicas: int, *args: str) -> None:
        shard = ("--shard", "--lease-duration", LEASE_DURATION)
        self.processes = {
            name: ControllerProcess(
                management, *shard, *args, user=user(name), env={"POD_NAME": name}
            )
            for name in names(replicas)
        }

    @property
    def users(self) -> list[str]:
        return [user(name) for name in self.processes]

    def start(self) -> None:
        """Spawn every replica at once; return when each answers /readyz and sees all."""
        each(ControllerProcess.start, self.processes.values())
        wait_for(
            self._all_members, 60, message=f"every replica seeing {len(self.processes)} members"
        )

    def _all_members(self) -> bool:
        try:
            seen = [scrape(p).get("crs_shard_members") for p in self.processes.values()]
        except httpx.HTTPError:
            return False
        return all(count == len(self.processes) for count in seen)

    def cpu(self) -> dict[str, float]:
        """CPU seconds each replica has used since it was spawned."""
        return {name: cpu_seconds(pid(p)) for name, p in self.processes.items()}

    def close(self) -> None:
        each(ControllerProcess.close, self.processes.values())


@dataclass
class Span:
    """One phase: when it started, how long until every cluster was done, and the
    CPU seconds each replica used meanwhile."""

    started: float
    seconds: float
    cpu: dict[str, float]

    @property
    def total_cpu(self) -> float:
        return round(sum(self.cpu.values()), 2)


def _first_apply(shards: ShardSet, n: int, hashes: Callable[[], list[str]]) -> tuple[Span, Span]:
    """Start-up, and the first apply counted from the spawn (as for one process)."""
    started = time.time()
    shards.start()
    startup = Span(started, round(time.time() - started, 2), shards.cpu())
    until_applied(n, hashes, "first apply")
    return startup, Span(started, round(time.time() - started, 2), shards.cpu())


def _edit(
    shards: ShardSet, n: int, hashes: Callable[[], list[str]], edit: Callable[[], None]
) -> Span:
    first = set(hashes())
    edited, before = time.time(), shards.cpu()
    edit()
    until_applied(n, hashes, "edit applied", replacing=first)
    seconds, after = round(time.time() - edited, 2), shards.cpu()
    return Span(edited, seconds, {name: after[name] - before[name] for name in after})


def _replica(name: str, process: ControllerProcess, first: Span, change: Span) -> Figures:
    metrics = scrape(process)
    owned = int(metrics.get("crs_shard_owned_clusters", 0))
    return {
        "name": name,
        "leader": metrics.get("crs_leader") == 1,
        "owned_clusters": owned,
        "handovers": {
            way: int(metrics.get(f"crs_shard_handovers_total{{direction={way}}}", 0))
            for way in ("in", "out")
        },
        "first_apply_cpu_seconds": round(first.cpu[name], 2),
        "edit_cpu_seconds": round(change.cpu[name], 2),
        "edit_cpu_ms_per_owned_cluster": (
            round(change.cpu[name] * 1000 / owned, 2) if owned else None
        ),
        "rss_mib": round(rss_mib(pid(process)), 1),
        "peak_rss_mib": round(rss_mib(pid(process), "VmHWM"), 1),
    }


def _per_replica(plane: ControlPlane, shards: ShardSet, first: Span, change: Span) -> list[Figures]:
    """Each replica's figures, with its requests during the edit (by User-Agent)."""
    requests = member_counts(plane, change.started, shards.processes)
    return [
        _replica(name, process, first, change) | {"edit_requests": requests[name]}
        for name, process in shards.processes.items()
    ]


def measure(
    plane: ControlPlane,
    shards: ShardSet,
    *,
    n: int,
    users: Collection[str],
    hashes: Callable[[], list[str]],
    edit: Callable[[], None],
) -> Figures:
    """common.measure for a shard set, without the idle phase: first apply to ``n``
    clusters, one edit reaching all of them; then what each replica did. ``users``
    are the identities whose requests make the totals (the replicas' and the
    workloads')."""
    try:
        startup, first = _first_apply(shards, n, hashes)
        time.sleep(3)  # audit events are written after the response; let stragglers land
        first_requests = audit_counts(plane, first.started, users)
        change = _edit(shards, n, hashes, edit)
        time.sleep(3)
        figures: Figures = {
            "startup_seconds": startup.seconds,
            "startup_cpu_seconds": startup.total_cpu,
            "first_apply_seconds": first.seconds,
            "first_apply_cpu_seconds": first.total_cpu,
            "first_apply_requests": first_requests,
            "edit_seconds": change.seconds,
            "edit_cpu_seconds": change.total_cpu,
            "edit_requests": audit_counts(plane, change.started, users),
        }
        replicas = _per_replica(plane, shards, first, change)
    finally:
        shards.close()
    return figures | derived(figures, n) | {"per_replica": replicas}
