"""Benchmark: the controller against N Clusters on real API servers.

Prints one JSON object: time to first apply everywhere, time for one ConfigMap edit
to reach every cluster, requests per cluster (from the servers' audit logs), and
the controller's CPU and memory while idle. N Clusters share the test bed's
workload servers (each server stands for many clusters), so the figures measure the
controller's own cost, not N separate control planes.

``edit_cpu_system_seconds`` is the kernel's part of ``edit_cpu_seconds``: with the
API servers on the same machine, it includes their side of the loopback TCP work.

``edit_settled_seconds`` and ``edit_settled_cpu_seconds`` last until the CRS's
status names the new revision applied on every cluster (the status passes after
the last binding write); the idle 10 s start after that.

Times and CPU count from the moment the process is spawned (``startup_seconds`` and
``startup_cpu_seconds`` say how much of that went to reaching ``/readyz``).

With ``--replicas N`` (default 1; N > 1), the crs-controller phase runs N processes
as one shard set (``run --shard --lease-duration 15s``, POD_NAME ``replica-<i>``,
user ``bench-replica-<i>``) instead of one, all spawned at once (hack/bench/shards.py).
Start-up then lasts until every replica answers ``/readyz`` and sees all N members;
first apply and edit still end when every cluster is done; CPU figures are summed
over the replicas and requests counted for all of them; ``per_replica`` gives each
one's owned clusters, handovers, CPU, edit requests (by User-Agent), RSS at the end and
its peak (VmHWM). There
is no idle phase, and ``replicas`` is printed beside ``concurrency``. With N = 1 the
output is as without the option.

With ``--capi-manager``, Cluster API's own manager (its ClusterResourceSet
controller) is then measured the same way on the same servers (hack/bench/capi.py):
its figures go under ``capi`` and ``ratios`` gives crs-controller / Cluster API.
Several ``--clusters`` values run one fresh control plane each and print
``{"machine", "concurrency", "results": [...]}``; one value prints that one result
with ``machine`` and ``concurrency`` merged in, as before.

    .venv/bin/python hack/bench/scale.py --clusters 100
    .venv/bin/python hack/bench/scale.py --clusters 100 --replicas 3
    .venv/bin/python hack/bench/scale.py --clusters 200 500 \\
        --capi-manager ~/.cache/capi/manager --capi-crds /tmp/capi-src/core/config/crd/bases
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
from pathlib import Path

import capi
import shards
from common import REPO, Figures, addon, measure, objects_in, poll_interval, ratios, warm_up

from crs_controller.testbed import ControlPlane, KubeError, TestbedClient
from crs_controller.testbed.clusters import install_crds, register_cluster
from crs_controller.testbed.controller import SA_USER, ControllerProcess, install_rbac

CRS_API = "addons.crs.dev/v1alpha1"
NS = "bench"
USER = "bench-workload-admin"
CAPI_CRDS = Path("/tmp/capi-src/core/config/crd/bases")


def hashes(mgmt: TestbedClient) -> list[str]:
    out = []
    for b in mgmt.list(CRS_API, "ClusterResourceSetBinding", NS):
        for entry in b["spec"].get("bindings", []):
            out += [r["hash"] for r in entry["resources"] if r.get("applied")]
    return out


def edit(mgmt: TestbedClient) -> None:
    live = mgmt.get("v1", "ConfigMap", "addon", NS)
    assert live is not None
    live["data"]["addon.yaml"] = addon("2")
    mgmt.update(live)


def status(mgmt: TestbedClient, n: int) -> tuple[str | None, bool]:
    """The CRS's status revision, and whether it says all ``n`` clusters have it applied."""
    crs = mgmt.get(CRS_API, "ClusterResourceSet", "addon", NS) or {}
    found = crs.get("status", {})
    conditions = {c["type"]: c["status"] for c in found.get("conditions", [])}
    done = found.get("appliedClusters") == n and conditions.get("ResourcesApplied") == "True"
    return found.get("revision"), done


def populate(mgmt: TestbedClient, plane: ControlPlane, n: int, replicas: int) -> None:
    crds = sorted((REPO / "config" / "crd" / "bases").glob("*.yaml"))
    crds += sorted((REPO / "config" / "testing").glob("*.yaml"))
    install_crds(mgmt, crds)
    warm_up(mgmt, crds)
    if replicas > 1:
        users = [shards.user(name) for name in shards.names(replicas)]
        install_rbac(mgmt, users=users)
    else:
        install_rbac(mgmt)
    mgmt.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    mgmt.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "addon", "namespace": NS},
            "data": {"addon.yaml": addon("1")},
        }
    )
    mgmt.create(
        {
            "apiVersion": CRS_API,
            "kind": "ClusterResourceSet",
            "metadata": {"name": "addon", "namespace": NS},
            "spec": {
                "clusterSelector": {"matchLabels": {"bench": "yes"}},
                "resources": [{"kind": "ConfigMap", "name": "addon"}],
                "mode": "Reconcile",
            },
        }
    )
    for i in range(n):
        register_cluster(
            mgmt,
            plane.workloads[i % len(plane.workloads)],
            name=f"c{i:04d}",
            namespace=NS,
            labels={"bench": "yes"},
            kubeconfig_user=USER,
        )


def shard_phase(
    plane: ControlPlane, mgmt: TestbedClient, n: int, args: tuple[str, ...], replicas: int
) -> Figures:
    shard_set = shards.ShardSet(plane.management, replicas, *args)
    return shards.measure(  # starts the replicas, to time start-up as well; stops them
        plane,
        shard_set,
        n=n,
        users=(*shard_set.users, USER),
        hashes=functools.partial(hashes, mgmt),
        edit=functools.partial(edit, mgmt),
    )


def crs_phase(plane: ControlPlane, n: int, concurrency: int, replicas: int) -> Figures:
    with TestbedClient(plane.management, timeout=30) as mgmt:
        populate(mgmt, plane, n, replicas)
        args = ("--concurrency", str(concurrency), "--log-level", "warning")
        if replicas > 1:
            return shard_phase(plane, mgmt, n, args, replicas)
        controller = ControllerProcess(plane.management, *args)
        try:  # measure() starts it, to time start-up as well
            return measure(
                plane,
                controller,
                n=n,
                users=(SA_USER, USER),
                hashes=functools.partial(hashes, mgmt),
                edit=functools.partial(edit, mgmt),
                settled=functools.partial(status, mgmt, n),
            )
        finally:
            controller.close()


def both_phases(plane: ControlPlane, n: int, args: argparse.Namespace, result: Figures) -> None:
    """crs-controller first, on the test bed's Cluster CRD as always; then Cluster
    API, which swaps in its own CRDs (see capi.install). Figures go into ``result``
    as they come, so a failure keeps what was measured."""
    log(f"{n} clusters: crs-controller")
    result |= crs_phase(plane, n, args.concurrency, args.replicas)
    if args.capi_manager:
        log(f"{n} clusters: Cluster API manager")
        result["capi"] = capi.run(plane, args.capi_manager, args.capi_crds, n, args.concurrency)
        result["ratios"] = ratios(result, result["capi"])


def one_size(n: int, args: argparse.Namespace) -> Figures:
    """Both phases for ``n`` clusters in a fresh control plane."""
    result: Figures = {
        "clusters": n,
        "objects_per_cluster": objects_in(addon("1")),
        "poll_interval_seconds": poll_interval(n),
    }
    try:
        with ControlPlane.start(workloads=3) as plane:
            both_phases(plane, n, args, result)
    except (RuntimeError, TimeoutError, KubeError) as exc:
        # Keep what was measured (other sizes, this size's first phase) and say why.
        log(f"{n} clusters failed: {exc}")
        result["error"] = str(exc)
    return result


def log(message: str) -> None:
    print(f"scale.py: {message}", file=sys.stderr, flush=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clusters", type=int, nargs="+", default=[100])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="crs-controller processes, run as one shard set when more than one",
    )
    parser.add_argument(
        "--capi-manager",
        type=Path,
        help="Cluster API's core manager binary: also measure its ClusterResourceSet controller",
    )
    parser.add_argument(
        "--capi-crds",
        type=Path,
        default=CAPI_CRDS,
        help="Cluster API's CRDs (core/config/crd/bases of the manager's source)",
    )
    args = parser.parse_args()
    if args.replicas < 1:
        parser.error("--replicas must be at least 1")
    if args.capi_manager and not args.capi_crds.is_dir():
        parser.error(f"--capi-crds {args.capi_crds} is not a directory")
    return args


def main() -> None:
    args = parse_args()
    shared: Figures = {
        "machine": {
            "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            # Others may share the cores: the 1, 5 and 15 minute load at start and end.
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        },
        "concurrency": args.concurrency,
    }
    if args.replicas > 1:
        shared["replicas"] = args.replicas
    results = [one_size(n, args) for n in args.clusters]
    shared["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    if len(results) == 1:
        print(json.dumps(shared | results[0], indent=2))
    else:
        print(json.dumps(shared | {"results": results}, indent=2))
    if any("error" in r for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
