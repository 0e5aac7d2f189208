"""Benchmark: the memory a ``crs-controller run`` process pays whatever its number
of Clusters (its base), on a real control plane with no Cluster at all.

Prints one JSON object: for each of ``--runs`` processes started one after the
other (``run``, and ``run --shard`` with ``--shard``), once ready (with
``--clusters N``: once scale.py's add-on is applied to N Clusters) and then idle
for ``--idle`` seconds, its resident memory (VmRSS) and peak (VmHWM) from
/proc/PID/status, its threads (each one glibc may give a malloc arena of its own)
by name; and, beside it, what importing the command line and the runner alone
costs (a ``python -c`` importing them: its peak and the modules it loads). The
machine, its load average at start and end, and the code measured (the
crs_controller package on the path, and its commit) are stated; to measure another
checkout, put it first: ``PYTHONPATH=../other .venv/bin/python hack/bench/base_rss.py``.

    .venv/bin/python hack/bench/base_rss.py --runs 3 --idle 10
    .venv/bin/python hack/bench/base_rss.py --runs 1 --clusters 20
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from common import REPO, Figures, git_state, machine, rss_mib, until_applied
from scale import hashes, populate

import crs_controller
from crs_controller.testbed import ControlPlane, TestbedClient
from crs_controller.testbed.clusters import install_crds
from crs_controller.testbed.controller import ControllerProcess, install_rbac

# The source tree of the crs_controller measured (PYTHONPATH may name another).
CODE = Path(crs_controller.__file__).resolve().parents[1]

# What ``run`` imports before it starts: the command line and the runner.
IMPORT_PROBE = (
    "import resource, sys; import crs_controller.app.cli, crs_controller.app.runner; "
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, len(sys.modules))"
)


def threads(pid: int) -> Figures:
    """The process's threads, counted by name (``comm``)."""
    names = Counter(
        (task / "comm").read_text().strip() for task in Path(f"/proc/{pid}/task").iterdir()
    )
    return {"count": sum(names.values()), "by_name": dict(sorted(names.items()))}


def one_process(
    plane: ControlPlane, mgmt: TestbedClient, n: int, idle: float, args: tuple[str, ...]
) -> Figures:
    process = ControllerProcess(plane.management, *args)
    try:
        started = time.monotonic()
        process.start()  # waits for /readyz
        ready = round(time.monotonic() - started, 2)
        assert process.pid is not None
        if n:
            until_applied(n, lambda: hashes(mgmt), "the add-on applied to every Cluster")
        time.sleep(idle)
        return {
            "ready_s": ready,
            "rss_mib": round(rss_mib(process.pid), 1),
            "hwm_mib": round(rss_mib(process.pid, "VmHWM"), 1),
            "threads": threads(process.pid),
        }
    finally:
        process.close()


def import_cost() -> Figures:
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE],
        capture_output=True,
        text=True,
        check=True,
    )
    kib, modules = done.stdout.split()
    return {"max_rss_mib": round(int(kib) / 1024, 1), "modules": int(modules)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds idle once ready")
    parser.add_argument("--shard", action="store_true", help="run --shard (a shard member)")
    parser.add_argument(
        "--clusters",
        type=int,
        default=0,
        help="Clusters a Reconcile CRS selects (scale.py's), applied before the idle wait",
    )
    options = parser.parse_args()
    # `python -m` and `-c` look in the current directory first: the processes
    # measured run the code this one imported (PYTHONPATH=another checkout works).
    os.chdir(CODE)
    extra = ("--shard",) if options.shard else ()
    result: Figures = {
        "machine": machine() | {"load_average_at_start": [round(x, 2) for x in os.getloadavg()]},
        "code": str(CODE),
        "git": git_state(CODE),
        "command": ["run", *extra],
        "clusters": options.clusters,
        "idle_s": options.idle,
        # glibc's arenas (one per thread that allocates, by default): inherited.
        "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX"),
        "run_imports": import_cost(),
    }
    n = options.clusters
    with (
        ControlPlane.start(workloads=1 if n else 0) as plane,
        TestbedClient(plane.management) as mgmt,
    ):
        if n:  # scale.py's: one Reconcile CRS selecting every Cluster
            populate(mgmt, plane, n, replicas=1)
        else:
            crds = sorted((REPO / "config" / "crd" / "bases").glob("*.yaml"))
            install_crds(mgmt, crds + sorted((REPO / "config" / "testing").glob("*.yaml")))
            install_rbac(mgmt)
        runs = [one_process(plane, mgmt, n, options.idle, extra) for _ in range(options.runs)]
        result["runs"] = runs
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
