"""The work queue's controller-runtime metrics (``workqueue_*``): adds and depth count
a key once however often it is added while waiting, a key added while processed counts
once and is not counted again when it comes back; waits and work are timed on the
queue's clock; every ``add_after`` is a retry, as client-go counts it; keys of no
controller are not counted. Values are read as deltas of the process's registry."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from prometheus_client import REGISTRY

from crs_controller.engine.runtime.queue import WorkQueue
from crs_controller.engine.runtime.queue_metrics import QueueMetrics, controller_of_key
from tests.unit.fake_clock import FakeClock

CLUSTER = ("cluster", "ns", "c1")
CRS = ("crs", "ns", "addons")


def sample(name: str, controller: str, suffix: str = "") -> float:
    labels = {"name": controller, "controller": controller}
    return REGISTRY.get_sample_value(name + suffix, labels) or 0.0


@pytest.fixture
def delta() -> Iterator[Callable[[str, str, str], float]]:
    """How much a sample moved since the test began."""
    names = (
        "workqueue_adds_total",
        "workqueue_depth",
        "workqueue_retries_total",
        "workqueue_queue_duration_seconds",
        "workqueue_work_duration_seconds",
    )
    start = {
        (n, c, s): sample(n, c, s)
        for n in names
        for c in ("cluster", "clusterresourceset")
        for s in ("", "_sum", "_count")
    }

    def moved(name: str, controller: str, suffix: str = "") -> float:
        return sample(name, controller, suffix) - start[(name, controller, suffix)]

    yield moved


def queue() -> tuple[WorkQueue, FakeClock]:
    clock = FakeClock()
    return WorkQueue(clock=clock, metrics=QueueMetrics(clock)), clock


@pytest.mark.parametrize(
    ("key", "controller"),
    [
        (CLUSTER, "cluster"),
        (CRS, "clusterresourceset"),
        (("other", "ns", "x"), None),
        ("plain", None),
    ],
)
def test_each_key_counts_under_its_controller(key: object, controller: str | None) -> None:
    assert controller_of_key(key) == controller  # type: ignore[arg-type]


def test_adds_and_depth_count_a_waiting_key_once(delta: Callable[..., float]) -> None:
    q, _ = queue()
    for _ in range(3):
        q.add(CLUSTER)
    q.add(CRS)
    assert delta("workqueue_adds_total", "cluster") == 1
    assert delta("workqueue_depth", "cluster") == 1
    assert delta("workqueue_adds_total", "clusterresourceset") == 1
    q.get_nowait()
    q.get_nowait()
    assert delta("workqueue_depth", "cluster") == 0
    assert delta("workqueue_depth", "clusterresourceset") == 0


def test_a_key_added_while_processed_counts_once(delta: Callable[..., float]) -> None:
    q, _ = queue()
    q.add(CLUSTER)
    assert q.get_nowait() == CLUSTER
    q.add(CLUSTER)  # while processed: waits for done
    q.add(CLUSTER)
    assert delta("workqueue_adds_total", "cluster") == 2
    assert delta("workqueue_depth", "cluster") == 1
    q.done(CLUSTER)  # comes back: not a new add
    assert q.ready_keys() == [CLUSTER]
    assert delta("workqueue_adds_total", "cluster") == 2
    assert delta("workqueue_depth", "cluster") == 1


def test_waits_and_work_are_timed_on_the_queue_clock(delta: Callable[..., float]) -> None:
    q, clock = queue()
    q.add(CRS)
    clock.advance(3.0)
    q.add(CRS)  # already waiting: the wait still counts from the first add
    clock.advance(2.0)
    q.get_nowait()
    clock.advance(7.0)
    q.done(CRS)
    assert delta("workqueue_queue_duration_seconds", "clusterresourceset", "_sum") == 5.0
    assert delta("workqueue_queue_duration_seconds", "clusterresourceset", "_count") == 1
    assert delta("workqueue_work_duration_seconds", "clusterresourceset", "_sum") == 7.0


def test_work_in_progress_is_read_when_scraped() -> None:
    clock = FakeClock()
    metrics = QueueMetrics(clock)
    q = WorkQueue(clock=clock, metrics=metrics)
    assert metrics.longest("cluster") == 0.0
    q.add(CLUSTER)
    q.add(("cluster", "ns", "c2"))
    q.get_nowait()
    clock.advance(4.0)
    q.get_nowait()
    clock.advance(1.0)
    assert metrics.longest("cluster") == 5.0
    assert metrics.unfinished("cluster") == 6.0
    assert sample("workqueue_longest_running_processor_seconds", "cluster") == 5.0
    q.done(CLUSTER)
    assert metrics.longest("cluster") == 1.0
    assert metrics.unfinished("clusterresourceset") == 0.0


def test_every_add_after_is_a_retry(delta: Callable[..., float]) -> None:
    q, clock = queue()
    q.add_after(CLUSTER, 5.0)
    q.add_after(CLUSTER, 1.0)
    q.add_rate_limited(CLUSTER)
    assert delta("workqueue_retries_total", "cluster") == 3
    assert delta("workqueue_adds_total", "cluster") == 0  # not waiting yet
    q.fire_due(clock.now() + 5.0)
    assert delta("workqueue_adds_total", "cluster") == 1


def test_a_queue_without_metrics_counts_nothing(delta: Callable[..., float]) -> None:
    q = WorkQueue(clock=FakeClock())
    q.add(CLUSTER)
    q.add_after(CRS, 1.0)
    assert delta("workqueue_adds_total", "cluster") == 0
    assert delta("workqueue_retries_total", "clusterresourceset") == 0


def test_keys_of_no_controller_are_not_counted(delta: Callable[..., float]) -> None:
    q, _ = queue()
    q.add("plain")
    q.get_nowait()
    q.done("plain")
    for controller in ("cluster", "clusterresourceset"):
        assert delta("workqueue_adds_total", controller) == 0
