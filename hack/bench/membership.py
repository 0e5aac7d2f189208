"""Benchmark: a shard set's membership changing under N Clusters on real API servers.

Prints one JSON object. One Reconcile CRS (as ``scale.py``) over N Clusters; three
replicas (``run --shard --lease-duration 15s``) apply it first; then, in turn:

- **join**: a fourth replica starts. How long until it has looked at every Cluster
  of its share (its cluster queue empty and as many cluster reconciles as Clusters
  owned), how many Clusters each replica owns before and after, the handovers each
  counts (``crs_shard_handovers_total``: only Clusters moving to the newcomer should
  move), and what the set wrote meanwhile (everything is applied: nothing).
- **kill**: one replica (not the leader) gets SIGKILL and the marker is edited at
  once. How long until the edit reached every Cluster (the killed replica's included:
  counting it out takes the lease duration, then its Clusters' bindings are read
  again), and what the set wrote meanwhile (one workload write and one binding write
  per Cluster means nothing was written twice).
- **restart**: the three left stop (SIGTERM) and start again. How long until each has
  looked at every Cluster of its share, what they wrote (nothing), and each one's
  peak memory while starting against its steady memory before the restart.

    .venv/bin/python hack/bench/membership.py --clusters 200
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from collections.abc import Callable, Iterable

import httpx
import shards
from common import Figures, audit_counts, machine, rss_mib, until_applied
from scale import NS, USER, edit, hashes, populate

from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

TIMEOUT = 1800.0
SETTLE = 3.0  # audit events are written after the response; let stragglers land


def metric(process: ControllerProcess, name: str) -> float:
    """One sample of the process's /metrics (0 when absent or unreachable)."""
    try:
        return shards.scrape(process).get(name, 0.0)
    except httpx.HTTPError:
        return 0.0


def owned(process: ControllerProcess) -> int:
    return int(metric(process, "crs_shard_owned_clusters"))


def looked_at_all(process: ControllerProcess) -> bool:
    """Has the replica (started in this phase) looked at every Cluster of its share?
    Its queue is empty and it finished at least as many cluster reconciles as it owns
    Clusters."""
    metrics = shards.scrape(process)
    done = sum(
        value
        for key, value in metrics.items()
        if key.startswith("controller_runtime_reconcile_total{controller=cluster,")
    )
    depth = metrics.get("workqueue_depth{controller=cluster,name=cluster}", 0.0)
    share = metrics.get("crs_shard_owned_clusters", 0.0)
    return share > 0 and depth == 0 and done >= share


def writes(plane: ControlPlane, since: float, users: Iterable[str]) -> Figures:
    time.sleep(SETTLE)
    counts = audit_counts(plane, since, list(users))
    by_resource = counts["management_writes_by_resource"]
    return {
        "workload_writes": counts["workloads"],
        "binding_writes": sum(
            v for k, v in by_resource.items() if k.startswith("clusterresourcesetbindings")
        ),
        "management_writes_by_resource": by_resource,
    }


def until(predicate: Callable[[], bool], started: float, message: str) -> float:
    """Seconds from ``started`` until ``predicate`` holds."""
    wait_for(predicate, TIMEOUT, interval=1.0, message=message)
    return round(time.time() - started, 1)


def shares(processes: dict[str, ControllerProcess]) -> dict[str, int]:
    return {name: owned(p) for name, p in processes.items()}


def handovers(processes: dict[str, ControllerProcess]) -> dict[str, dict[str, int]]:
    key = "crs_shard_handovers_total{{direction={}}}"
    return {
        name: {way: int(metric(p, key.format(way))) for way in ("in", "out")}
        for name, p in processes.items()
    }


def settled(processes: dict[str, ControllerProcess], n: int) -> bool:
    counts = shares(processes)
    members = [metric(p, "crs_shard_members") for p in processes.values()]
    return sum(counts.values()) == n and all(m == len(processes) for m in members)


def join(plane: ControlPlane, pool: shards.ShardSet, live: list[str], n: int) -> Figures:
    """A fourth replica joins the three: who moves, how long, what is written."""
    before = shares({name: pool.processes[name] for name in live})
    newcomer = next(name for name in pool.processes if name not in live)
    started = time.time()
    pool.processes[newcomer].start()
    live.append(newcomer)
    processes = {name: pool.processes[name] for name in live}
    seconds = until(
        lambda: settled(processes, n) and looked_at_all(pool.processes[newcomer]),
        started,
        "the newcomer looking at its share",
    )
    return {
        "seconds_until_newcomer_looked_at_its_share": seconds,
        "owned_before": before,
        "owned_after": shares(processes),
        "handovers": handovers(processes),
    } | writes(plane, started, [*pool.users, USER])


def kill(
    plane: ControlPlane, pool: shards.ShardSet, live: list[str], mgmt: TestbedClient
) -> Figures:
    """SIGKILL one replica that is not the leader and edit at once: how long until the
    edit reached its Clusters too, and was anything written twice."""
    n = len(hashes(mgmt))
    victim = next(name for name in live if metric(pool.processes[name], "crs_leader") != 1)
    share = owned(pool.processes[victim])
    first = set(hashes(mgmt))
    started = time.time()
    pool.processes[victim].kill()
    live.remove(victim)
    edit(mgmt)
    until_applied(n, functools.partial(hashes, mgmt), "edit after the kill", replacing=first)
    seconds = round(time.time() - started, 1)
    return {
        "killed": victim,
        "killed_share": share,
        "seconds_until_edit_reached_every_cluster": seconds,
        "owned_after": shares({name: pool.processes[name] for name in live}),
    } | writes(plane, started, [*pool.users, USER])


def restart(plane: ControlPlane, pool: shards.ShardSet, live: list[str], n: int) -> Figures:
    """Stop and start the replicas left: how long until each looked at its share again,
    what they wrote, and their peak memory while starting against the steady one."""
    processes = {name: pool.processes[name] for name in live}
    steady = {name: round(rss_mib(shards.pid(p)), 1) for name, p in processes.items()}
    started = time.time()
    shards.each(ControllerProcess.stop, processes.values())
    shards.each(ControllerProcess.start, processes.values())
    seconds = until(
        lambda: settled(processes, n) and all(looked_at_all(p) for p in processes.values()),
        started,
        "every replica looking at its share again",
    )
    peak = {name: round(rss_mib(shards.pid(p), "VmHWM"), 1) for name, p in processes.items()}
    return {
        "seconds_until_every_cluster_looked_at": seconds,
        "steady_rss_mib_before": steady,
        "peak_rss_mib_while_starting": peak,
        "peak_over_steady": {name: round(peak[name] / steady[name], 2) for name in peak},
    } | writes(plane, started, [*pool.users, USER])


def phases(plane: ControlPlane, mgmt: TestbedClient, n: int, concurrency: int) -> Figures:
    args = ("--concurrency", str(concurrency), "--log-level", "warning")
    pool = shards.ShardSet(plane.management, 4, *args)
    live = list(pool.processes)[:3]
    figures: Figures = {}
    try:
        started = time.time()
        shards.each(ControllerProcess.start, [pool.processes[name] for name in live])
        until_applied(n, functools.partial(hashes, mgmt), "first apply")
        figures["first_apply_seconds"] = round(time.time() - started, 1)
        figures["join"] = join(plane, pool, live, n)
        figures["kill"] = kill(plane, pool, live, mgmt)
        figures["restart"] = restart(plane, pool, live, n)
    finally:
        pool.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clusters", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    result: Figures = {"machine": machine(), "clusters": args.clusters, "namespace": NS}
    result["machine"]["load_average_at_start"] = [round(x, 2) for x in os.getloadavg()]
    with (
        ControlPlane.start(workloads=3) as plane,
        TestbedClient(plane.management, timeout=30) as mgmt,
    ):
        populate(mgmt, plane, args.clusters, 4)
        result |= phases(plane, mgmt, args.clusters, args.concurrency)
    result["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
