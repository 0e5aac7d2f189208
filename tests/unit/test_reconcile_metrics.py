"""A finished reconcile counts once, under its controller, in both conventions: each
way a reconcile ends (a Result asking nothing, a retry, a delay, an error raised or a
crash) moves ``controller_runtime_reconcile_total`` under its ``result``,
``controller_runtime_reconcile_errors_total`` for an error only,
``controller_runtime_reconcile_time_seconds`` always, and the matching
``crs_reconciles_total``. The reconcilers are replaced by ones that end as the case
says; the worker's own ``_process`` does the counting. Also the ``result`` label a
Result is given, as a table. A replica whose controller does not run yet (standing by
for the lease) counts no key waiting when asked to look at a Cluster."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from prometheus_client import REGISTRY

from crs_controller.core.errors import APIError
from crs_controller.engine.reconcile.context import Settings
from crs_controller.engine.reconcile.result import NOTHING, RETRY, Result, Wake, cluster_key
from crs_controller.engine.runtime import controller as runtime
from crs_controller.engine.runtime.controller import Controller, _result_label
from tests.unit.fake_clock import FakeClock
from tests.unit.memory_kube import MemoryKube

Sample = tuple[str, tuple[tuple[str, str], ...]]


def samples(kind: str) -> list[Sample]:
    """Every sample a reconcile of ``kind`` may move."""
    controller = {"crs": "clusterresourceset", "cluster": "cluster"}[kind]
    found: list[Sample] = []
    for result in ("success", "error", "requeue", "requeue_after"):
        labels = (("controller", controller), ("result", result))
        found.append(("controller_runtime_reconcile_total", labels))
    found.append(("controller_runtime_reconcile_errors_total", (("controller", controller),)))
    found.append(("controller_runtime_reconcile_time_seconds_count", (("controller", controller),)))
    for own in ("ok", "retry", "error"):
        found.append(("crs_reconciles_total", (("kind", kind), ("result", own))))
    found.append(("crs_reconcile_duration_seconds_count", (("kind", kind),)))
    return found


def value(sample: Sample) -> float:
    name, labels = sample
    return REGISTRY.get_sample_value(name, dict(labels)) or 0.0


@pytest.fixture
def moved() -> Iterator[Callable[[str], dict[Sample, float]]]:
    """The samples of a kind that moved since the test began, and by how much."""
    start = {s: value(s) for kind in ("cluster", "crs") for s in samples(kind)}

    def since(kind: str) -> dict[Sample, float]:
        deltas = {s: value(s) - start[s] for s in samples(kind)}
        return {s: d for s, d in deltas.items() if d}

    yield since


def ending(how: str) -> Callable[..., object]:
    """A reconciler that ends as ``how`` says."""

    async def reconcile(*_: object) -> Result:
        if how == "raised":
            raise APIError("the server refused")
        if how == "crashed":
            raise RuntimeError("a bug")
        return {"nothing": NOTHING, "retry": RETRY, "delay": Result.after(30.0)}[how]

    return reconcile


CASES = [
    # (how it ends, controller-runtime's result, this controller's own)
    ("nothing", "success", "ok"),
    ("retry", "requeue", "retry"),
    ("delay", "requeue_after", "ok"),
    ("raised", "error", "error"),
    ("crashed", "error", "error"),
]


@pytest.mark.parametrize("kind", ["cluster", "crs"])
@pytest.mark.parametrize(("how", "result", "own"), CASES)
async def test_each_way_a_reconcile_ends_is_counted_once_under_its_controller(
    monkeypatch: pytest.MonkeyPatch,
    moved: Callable[[str], dict[Sample, float]],
    kind: str,
    how: str,
    result: str,
    own: str,
) -> None:
    name = "reconcile_cluster" if kind == "cluster" else "reconcile_crs"
    monkeypatch.setattr(runtime, name, ending(how))
    controller = Controller(
        MemoryKube("management"), Settings(), "cluster.x-k8s.io/v1beta1", clock=FakeClock()
    )
    await controller._process((kind, "ns", "x"))
    label = {"crs": "clusterresourceset", "cluster": "cluster"}[kind]
    expected = {
        ("controller_runtime_reconcile_total", (("controller", label), ("result", result))): 1.0,
        ("controller_runtime_reconcile_time_seconds_count", (("controller", label),)): 1.0,
        ("crs_reconciles_total", (("kind", kind), ("result", own))): 1.0,
        ("crs_reconcile_duration_seconds_count", (("kind", kind),)): 1.0,
    }
    if result == "error":
        expected[("controller_runtime_reconcile_errors_total", (("controller", label),))] = 1.0
    assert moved(kind) == expected
    other = "crs" if kind == "cluster" else "cluster"
    assert moved(other) == {}  # the other controller's series stay where they were


@pytest.mark.parametrize(
    ("result", "label"),
    [
        (NOTHING, "success"),
        (RETRY, "requeue"),
        (Result.after(30.0), "requeue_after"),
        (Result.after(0.0), "success"),  # controller-runtime: a delay of 0 is no requeue
        (Result(requeue_after=5.0, retry=True), "requeue"),  # the retry wins, as queued
        (Result.waking(Wake(cluster_key("ns", "c1"), 2.0)), "success"),  # other keys only
    ],
)
def test_a_result_is_labelled_as_controller_runtime_labels_it(result: Result, label: str) -> None:
    assert _result_label(result) == label


def test_a_controller_not_running_yet_counts_no_nudged_cluster_as_waiting() -> None:
    """Standing by for the lease, the runtime extension's answers still nudge it: a
    key waiting there would never be worked on, and the depth would say the replica
    is stuck. Once it runs, a nudge queues the Cluster."""
    controller = Controller(
        MemoryKube("management"), Settings(), "cluster.x-k8s.io/v1beta1", clock=FakeClock()
    )
    labels = {"name": "cluster", "controller": "cluster"}

    def depth() -> float:
        return REGISTRY.get_sample_value("workqueue_depth", labels) or 0.0

    before = depth()
    controller.nudge({"metadata": {"namespace": "ns", "name": "standing-by"}})
    assert depth() == before
    assert len(controller.queue) == 0
    controller._running = True  # as run() has it
    controller.nudge({"metadata": {"namespace": "ns", "name": "standing-by"}})
    assert depth() == before + 1
    key = controller.queue.get_nowait()  # leave the depth as it was
    controller.queue.done(key)
    assert depth() == before
