"""Benchmark: the fleet page drawing N synthetic clusters in a real headless browser.

One ClusterResourceSet in two rollout steps (canary, then prod with a manual
approval) selects N synthetic Clusters, each with a binding (most Ready, some
waiting, failed or unreachable). The objects are held in memory as the dashboard
holds what its watches bring (no API server: the figures are the page's and the
fold's), served by the dashboard's own server, and opened in Debian's chromium
through WebDriver on the CRS's page, where every cluster is a cell.

Printed as JSON: the machine; how long the server takes to fold the view (ms); the
snapshot's size; time from navigation to the first full render of the N cells
(``first_render_ms``, the page's own performance clock, page load and the stream
included; of which parsing the snapshot and drawing it, laid out); then, for a change
of one cluster and of a wave of clusters (the server folds, sends a delta, the page
patches the cells), the time from the server's publishing to the page having drawn
it (``update_ms``). A figure, not a pass/fail.

    .venv/bin/python hack/bench/dashboard.py --clusters 10000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine

from crs_controller.app.commands.dashboard import page_url, serve_page
from crs_controller.app.commands.status import BINDING_KIND, CRS_KIND, FleetState
from crs_controller.app.dashboard import view
from crs_controller.app.dashboard.server import Feed
from crs_controller.core.api.models import API_VERSION
from crs_controller.engine.reconcile.rollout import revision_of
from crs_controller.testbed.browser import browser, missing

NAMESPACE, CRS = "bench", "addon"
HASH, OLD = "xxh3:00000000000000aa", "xxh3:00000000000000bb"
REVISION = revision_of({("ConfigMap", CRS): HASH})  # what a cluster with HASH is on
CLUSTER_API = "cluster.x-k8s.io/v1beta1"
AT = "2026-01-01T00:00:00Z"


def crs() -> dict[str, Any]:
    steps = [
        {"clusterSelector": {"matchLabels": {"ring": "canary"}}},
        {"clusterSelector": {"matchLabels": {"ring": "prod"}}, "approval": "Manual"},
    ]
    rollout = {
        "phase": "AwaitingApproval",
        "step": 2,
        "waitingFor": "Approval",
        "heldClusters": 0,
        "message": "step 2 waits for approval",
    }
    return {
        "apiVersion": API_VERSION,
        "kind": CRS_KIND,
        "metadata": {"name": CRS, "namespace": NAMESPACE},
        "spec": {
            "clusterSelector": {"matchLabels": {"fleet": "bench"}},
            "resources": [{"kind": "ConfigMap", "name": CRS}],
            "mode": "Reconcile",
            "rollout": {"steps": steps},
        },
        "status": {"revision": REVISION, "rollout": rollout},
    }


def cluster(name: str, ring: str) -> dict[str, Any]:
    labels = {"fleet": "bench", "ring": ring, "region": f"r{hash(name) % 7}"}
    meta = {"name": name, "namespace": NAMESPACE, "labels": labels}
    return {"apiVersion": CLUSTER_API, "kind": "Cluster", "metadata": meta, "spec": {}}


def binding(name: str, reason: str, revision: str, message: str = "") -> dict[str, Any]:
    resource = {"kind": "ConfigMap", "name": CRS, "hash": revision, "applied": True}
    outcome = {"reason": reason, "message": message, "time": AT}
    entry = {"clusterResourceSetName": CRS, "resources": [resource], "outcome": outcome}
    return {
        "apiVersion": API_VERSION,
        "kind": BINDING_KIND,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"clusterName": name, "bindings": [entry]},
    }


def fleet(n: int) -> FleetState:
    """N clusters: a tenth canary on the revision, the rest prod waiting for their step,
    one in fifty failed and one in a hundred unreachable."""
    state = FleetState(NAMESPACE, {kind: API_VERSION for kind in (CRS_KIND, BINDING_KIND)})
    state.apis["Cluster"] = CLUSTER_API
    state.objects = {CRS_KIND: {(NAMESPACE, CRS): crs()}, "Cluster": {}, BINDING_KIND: {}}
    for i in range(n):
        name = f"cluster-{i:05d}"
        canary = i % 10 == 0
        state.objects["Cluster"][(NAMESPACE, name)] = cluster(name, "canary" if canary else "prod")
        if canary:
            record = binding(name, "Applied", HASH)
        elif i % 100 == 1:
            record = binding(name, "ClusterUnreachable", OLD, "connection refused")
        elif i % 50 == 3:
            record = binding(name, "ApplyFailed", OLD, "Deployment x: field is immutable")
        else:
            record = binding(name, "Progressing", OLD, "waits for step 2")
        state.objects[BINDING_KIND][(NAMESPACE, name)] = record
    return state


class Server:
    """The dashboard's server on its own event loop, in a thread."""

    def __init__(self, state: FleetState) -> None:
        self.state, self.feed = state, Feed()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result()

    async def _start(self) -> str:
        lookup = partial(view.record, self.state)
        served, access = await serve_page(self.feed, lookup, "127.0.0.1", 0)
        return page_url("127.0.0.1", served.port, access)

    def fold(self) -> tuple[float, view.View]:
        started = time.perf_counter()
        built = view.build(self.state, datetime.now(UTC))
        return (time.perf_counter() - started) * 1000, built

    def publish(self, built: view.View) -> float:
        """Publish on the server's loop; the wall clock (ms) when it went out."""
        at = time.time() * 1000
        self.loop.call_soon_threadsafe(self.feed.publish, built)
        return at


def update(server: Server, page: Any, names: list[str]) -> dict[str, Any]:
    """The given clusters become Ready on the revision: fold, publish, drawn when."""
    for name in names:
        server.state.objects[BINDING_KIND][(NAMESPACE, name)] = binding(name, "Applied", HASH)
    fold_ms, built = server.fold()
    seen = page.run("return window.fleetStats.deltas")
    at = server.publish(built)
    page.wait("return window.fleetStats.deltas > arguments[0]", seen, timeout=120)
    drawn = page.wait(
        "return window.fleetStats.drawnAt >= arguments[0] && window.fleetStats.drawnAt", at
    )
    last = f"{NAMESPACE}/{CRS}/{names[-1]}"
    shown = page.run(
        "const b = document.querySelector(`button.cell[data-key='${arguments[0]}']`);"
        "return b && b.textContent",
        last,
    )
    return {
        "clusters": len(names),
        "fold_ms": round(fold_ms, 1),
        "update_ms": round(drawn - at, 1),
        "last_cell": shown,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=10_000)
    args = parser.parse_args()
    if (why := missing()) is not None:
        print(json.dumps({"skipped": why}))
        return 0
    server = Server(fleet(args.clusters))
    fold_ms, built = server.fold()
    server.publish(built)
    figures: dict[str, Any] = {"machine": machine(), "clusters": args.clusters}
    figures["fold_ms"] = round(fold_ms, 1)
    figures["snapshot_bytes"] = len(json.dumps(built, separators=(",", ":")))
    with browser() as page:
        page.open(f"{server.url}#/crs/{NAMESPACE}/{CRS}")
        page.wait("return window.fleetStats && window.fleetStats.snapshots > 0", timeout=120)
        stats = page.run("return window.fleetStats")
        figures["first_render_ms"] = round(stats["renderedAt"], 1)
        figures["of_which_parse_ms"] = round(stats["parseMs"], 1)
        figures["of_which_draw_ms"] = round(stats["drawMs"], 1)
        figures["cells_drawn"] = stats["cells"]
        prod = [f"cluster-{i:05d}" for i in range(args.clusters) if i % 10 == 5]
        figures["update_one"] = update(server, page, prod[:1])
        figures["update_wave"] = update(server, page, prod[1:1001])
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
