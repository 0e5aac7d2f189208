"""Benchmark: parsing and hashing real add-on manifests (pure code, no servers).

Prints one JSON object with the median of several runs per manifest, and the
parse/hash ratio: hashing must stay negligible next to parsing, since it runs on
every content change while parsing runs only when something is applied.

    .venv/bin/python hack/bench/core.py
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crs_controller.core.manifests.documents import parse_objects
from crs_controller.core.manifests.hashing import resource_hash
from crs_controller.core.manifests.ordering import apply_order

ADDONS = Path(__file__).resolve().parents[3] / "shared" / "data" / "addons"
RUNS = 7


def median_ms(fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 3)


def main() -> None:
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "arch": platform.machine()},
        "runs": RUNS,
        "manifests": {},
    }
    for path in sorted(ADDONS.glob("*.yaml")):
        source = {
            "kind": "ConfigMap",
            "metadata": {"name": path.stem, "namespace": "default"},
            "data": {path.name: path.read_text()},
        }
        parse = median_ms(lambda s=source: apply_order(parse_objects(s)))
        digest = median_ms(lambda s=source: resource_hash(s))
        result["manifests"][path.name] = {
            "bytes": path.stat().st_size,
            "objects": len(parse_objects(source)),
            "parse_and_order_ms": parse,
            "hash_ms": digest,
            "parse_to_hash_ratio": round(parse / digest, 1) if digest else None,
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
