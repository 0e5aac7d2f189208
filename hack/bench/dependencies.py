"""Benchmark: ``spec.dependsOn`` decisions for 800 CRSs each depending on the next 10
(pure code, no servers).

Prints one JSON object, for a chain (each CRS on the next ten) and for one big cycle
(the same, wrapping around, so every CRS is on a cycle): the best of several runs of
building the graph and deciding every CRS's gate once (done once per change of the
namespace's CRSs), of deciding every gate again with that graph (what each cluster's
reconcile does), and, for comparison, of building a graph for every CRS's decision
(estimated from 20 of them). Figures, not a test: the decisions themselves are
checked in tests/unit/test_dependencies.py.

    .venv/bin/python hack/bench/dependencies.py
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from typing import Any

from crs_controller.core.values.dependencies import Dependencies, gate

RUNS = 5
SIZE, LINKS, SAMPLE = 800, 10, 20

Graph = dict[str, list[str]]


def tangle(size: int, links: int, wrap: bool) -> Graph:
    names = [f"crs-{i:04d}" for i in range(size)]
    if wrap:  # one strongly connected component: every CRS on a cycle
        return {
            n: [names[(i + k) % size] for k in range(1, links + 1)] for i, n in enumerate(names)
        }
    return {n: names[i + 1 : i + 1 + links] for i, n in enumerate(names)}


def best_ms(fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return round(min(times), 2)


def always(_: str) -> bool:
    return True


def figures(wrap: bool) -> dict[str, Any]:
    graph = tangle(SIZE, LINKS, wrap)

    def build_and_decide() -> Dependencies:
        built = Dependencies(graph)
        decide = built.gates(always, always)
        for name in built.dependency_order(graph):
            decide(name)
        return built

    built = build_and_decide()
    order = built.dependency_order(graph)

    def decide_again() -> None:
        decide = built.gates(always, always)
        for name in order:
            decide(name)

    def fresh_graph_each() -> None:
        for name in order[:SAMPLE]:
            gate(name, graph, always, always)

    return {
        "graph": "one big cycle" if wrap else "chain of 10",
        "crss": SIZE,
        "links": LINKS,
        "graph_and_first_use_ms": best_ms(build_and_decide),
        "per_cluster_reconcile_ms": best_ms(decide_again),
        "graph_built_for_every_crs_ms": round(best_ms(fresh_graph_each) / SAMPLE * SIZE, 1),
    }


def main() -> None:
    result = {
        "machine": {"cpus": os.cpu_count(), "arch": platform.machine()},
        "runs": RUNS,
        "results": [figures(wrap) for wrap in (False, True)],
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
