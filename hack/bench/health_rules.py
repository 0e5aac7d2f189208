"""Benchmark: evaluating CEL health rules (pure code, no servers).

Prints one JSON object: for a typical rule (``failed`` and ``ready`` on
``status.phase``) and for the most expensive rules the cost bound still accepts
(each run on the largest list that stays within ``COST_LIMIT``), the best of several
``evaluate`` calls on objects of about 3,000 JSON values. Figures, not a test: the
cost bound is checked deterministically in tests/unit/test_health_rules.py.

    .venv/bin/python hack/bench/health_rules.py
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from typing import Any

from crs_controller.core.api.models import HealthRule
from crs_controller.core.errors import InvalidSpec
from crs_controller.core.health.cel_rules import COST_LIMIT, CompiledRule, compile_rules, evaluate

RUNS = 5
VALUES = 3_000

Obj = dict[str, Any]


def best_ms(fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return round(min(times), 3)


def rule(ready: str, failed: str | None = None) -> CompiledRule:
    spec = HealthRule.model_construct(
        api_version="example.com/v1", kind="Widget", ready=ready, failed=failed
    )
    return compile_rules([spec])[0]


def widget(items: int, filler: int) -> Obj:
    """A Widget with ``items`` ints in ``spec.items`` and ``filler`` small maps of
    eight values each in ``spec.filler``, so its size can be chosen apart from the
    list the rule iterates."""
    rows = [{"name": f"row-{i}", "ready": True, "phase": "Running", "n": i} for i in range(filler)]
    for row in rows:
        row["labels"] = {"a": "b", "c": "d"}
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default"},
        "spec": {"items": list(range(items)), "filler": rows},
        "status": {"phase": "Ready"},
    }


def largest_accepted(make: Callable[[int], tuple[CompiledRule, Obj]]) -> int:
    """The largest ``n`` whose rule and object the cost bound still lets run."""
    low, high = 1, 100_000
    while low < high:
        mid = (low + high + 1) // 2
        try:
            compiled, obj = make(mid)
        except InvalidSpec:  # too long an expression
            high = mid - 1
            continue
        if "over the cost limit" in evaluate(compiled, obj).message:
            high = mid - 1
        else:
            low = mid
    return low


def _values(obj: Any) -> int:
    if isinstance(obj, dict):
        return 1 + sum(_values(v) for v in obj.values())
    if isinstance(obj, list):
        return 1 + sum(_values(v) for v in obj)
    return 1


def figures(name: str, compiled: CompiledRule, obj: Obj) -> Obj:
    verdict = evaluate(compiled, obj)
    return {
        "rule": name,
        "values": _values(obj),
        "verdict": verdict.state,
        "refused": "over the cost limit" in verdict.message,
        "evaluate_ms": best_ms(lambda: evaluate(compiled, obj)),
    }


def on_list(source: str) -> Callable[[int], tuple[CompiledRule, Obj]]:
    """The rule, on a Widget with ``n`` items and nothing else."""
    compiled = rule(source)
    return lambda n: (compiled, widget(n, 0))


def main() -> None:
    big = widget(0, VALUES // 8)
    typical = rule(
        ready="has(self.status) && self.status.phase == 'Ready'",
        failed="has(self.status) && self.status.phase == 'Broken'",
    )
    # On a small object, comprehensions over the longest list the bound accepts; on a
    # big one the bound refuses any comprehension over it, and the worst accepted
    # rule compares whole maps (linear work) as often as it may.
    comprehensions = {
        "all/exists depth 2": "self.spec.items.all(x, self.spec.items.exists(y, x == y))",
        "in list, depth 1": "self.spec.items.all(x, x in self.spec.items)",
        "map copy, depth 1": "self.spec.items.map(x, x + 1).size() > 0",
    }
    makers: dict[str, Callable[[int], tuple[CompiledRule, Obj]]] = {
        name: on_list(source) for name, source in comprehensions.items()
    }
    makers["map equality, depth 0, big object"] = lambda n: (
        rule(" && ".join(["self.spec == self.spec"] * n)),
        big,
    )
    result: Obj = {
        "machine": {"cpus": os.cpu_count(), "arch": platform.machine()},
        "runs": RUNS,
        "cost_limit": COST_LIMIT,
        "typical": figures("status.phase, failed and ready", typical, big),
        "refused": figures(
            "all/exists depth 2, big object",
            rule(comprehensions["all/exists depth 2"]),
            widget(10, VALUES // 8),
        ),
        "worst_accepted": [],
    }
    for name, make in makers.items():
        n = largest_accepted(make)
        compiled, obj = make(n)
        result["worst_accepted"].append(figures(name, compiled, obj) | {"n": n})
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
