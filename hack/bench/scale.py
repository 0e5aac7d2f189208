"""Benchmark: the controller against N Clusters on real API servers.

Prints one JSON object: time to first apply everywhere, time for one ConfigMap edit
to reach every cluster, requests per cluster (from the servers' audit logs), and
the controller's CPU and memory while idle. N Clusters share the test bed's
workload servers (each server stands for many clusters), so the figures measure the
controller's own cost, not N separate control planes.

    .venv/bin/python hack/bench/scale.py --clusters 100
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from crs_controller.testbed import ControlPlane, KubeClient, wait_for
from crs_controller.testbed.clusters import install_crds, register_cluster
from crs_controller.testbed.controller import SA_USER, ControllerProcess, install_rbac

REPO = Path(__file__).resolve().parents[2]
ADDONS = REPO.parent / "shared" / "data" / "addons"
CRS_API = "addons.crs.dev/v1alpha1"
NS = "bench"
USER = "bench-workload-admin"
WRITES = {"create", "update", "patch", "delete"}


def addon(version: str) -> str:
    """kindnet when the shared data is there, else a small synthetic add-on."""
    path = ADDONS / "kindnet.yaml"
    if path.exists():
        text = path.read_text()
    else:
        docs = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench-addon"}},
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "agent", "namespace": "bench-addon"},
            },
        ]
        text = yaml.safe_dump_all(docs)
    marker = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "bench-version", "namespace": "default"},
        "data": {"version": version},
    }
    return text + "\n---\n" + yaml.safe_dump(marker)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def audit_writes(plane: ControlPlane, since: float) -> dict[str, int]:
    counts = {"management": 0, "workloads": 0, "workload_reads": 0}
    for server in plane.servers:
        for event in server.audit_events():
            stamp = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
            if stamp.timestamp() < since or event["user"]["username"] not in (SA_USER, USER):
                continue
            write = event["verb"] in WRITES
            if server is plane.management:
                counts["management"] += write
            else:
                counts["workloads" if write else "workload_reads"] += 1
    return counts


def hashes(mgmt: KubeClient) -> list[str]:
    out = []
    for b in mgmt.list(CRS_API, "ClusterResourceSetBinding", NS):
        for entry in b["spec"].get("bindings", []):
            out += [r["hash"] for r in entry["resources"] if r.get("applied")]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    n = args.clusters
    result: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(),
        },
        "clusters": n,
        "concurrency": args.concurrency,
    }
    with ControlPlane.start(workloads=3) as plane:
        mgmt = KubeClient(plane.management, timeout=30)
        install_crds(mgmt, sorted((REPO / "config" / "crd" / "bases").glob("*.yaml")))
        install_crds(mgmt, sorted((REPO / "config" / "testing").glob("*.yaml")))
        install_rbac(mgmt)
        mgmt.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        source = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "addon", "namespace": NS},
            "data": {"addon.yaml": addon("1")},
        }
        mgmt.create(source)
        objects = len([d for d in yaml.safe_load_all(source["data"]["addon.yaml"]) if d])
        result["objects_per_cluster"] = objects
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
        extra = ("--concurrency", str(args.concurrency), "--log-level", "warning")
        with ControllerProcess(plane.management, *extra) as controller:
            assert controller.pid is not None
            started = time.time()
            cpu0 = cpu_seconds(controller.pid)
            wait_for(lambda: len(hashes(mgmt)) == n, 600, interval=0.5, message="first apply")
            result["first_apply_seconds"] = round(time.time() - started, 2)
            result["first_apply_cpu_seconds"] = round(cpu_seconds(controller.pid) - cpu0, 2)
            time.sleep(3)
            result["first_apply_requests"] = audit_writes(plane, started)

            first = set(hashes(mgmt))
            edited = time.time()
            cpu1 = cpu_seconds(controller.pid)
            live = mgmt.get("v1", "ConfigMap", "addon", NS)
            assert live is not None
            live["data"]["addon.yaml"] = addon("2")
            mgmt.update(live)
            wait_for(
                lambda: (h := hashes(mgmt)) and len(h) == n and not set(h) & first,
                600,
                interval=0.5,
                message="edit applied",
            )
            result["edit_seconds"] = round(time.time() - edited, 2)
            result["edit_cpu_seconds"] = round(cpu_seconds(controller.pid) - cpu1, 2)
            time.sleep(3)
            result["edit_requests"] = audit_writes(plane, edited)

            idle = time.time()
            cpu2 = cpu_seconds(controller.pid)
            time.sleep(10)
            result["idle_10s_cpu_seconds"] = round(cpu_seconds(controller.pid) - cpu2, 3)
            result["idle_10s_requests"] = audit_writes(plane, idle)
            result["controller_rss_mib"] = round(rss_mib(controller.pid), 1)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
