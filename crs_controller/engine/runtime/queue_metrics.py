"""The work queue's metrics as client-go's workqueue reports them (``workqueue_*``,
labelled ``name`` and ``controller`` with the controller's name): depth, adds, retries,
how long a key waited and how long its work took, and the work still in progress.

A key counts under the controller its kind belongs to (``name_of``); a key of no
controller is not counted. Times come from the queue's clock, so tests drive them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable

from crs_controller.core.clock import Clock
from crs_controller.engine.io import metrics

__all__ = ["QueueMetrics", "controller_of_key"]


def controller_of_key(key: Hashable) -> str | None:
    """The controller a key ``(kind, namespace, name)`` belongs to."""
    if isinstance(key, tuple) and len(key) == 3 and isinstance(key[0], str):
        return metrics.QUEUE_OF_KIND.get(key[0])
    return None


class QueueMetrics:
    """What the queue tells as it goes: a key added, taken, done, retried."""

    def __init__(
        self, clock: Clock, name_of: Callable[[Hashable], str | None] = controller_of_key
    ) -> None:
        self._clock = clock
        self._name_of = name_of
        self._added_at: dict[Hashable, float] = {}  # waiting to be taken, since
        self._started_at: dict[Hashable, float] = {}  # being processed, since
        for name in metrics.CONTROLLER_OF_KIND.values():
            labels = (name, name)
            # Read when scraped.
            metrics.WORKQUEUE_UNFINISHED.labels(*labels).set_function(
                functools.partial(self.unfinished, name)
            )
            metrics.WORKQUEUE_LONGEST.labels(*labels).set_function(
                functools.partial(self.longest, name)
            )

    def added(self, key: Hashable) -> None:
        """A key newly waiting (not one already waiting: that add changes nothing)."""
        name = self._name_of(key)
        if name is None:
            return
        metrics.WORKQUEUE_ADDS.labels(name, name).inc()
        metrics.WORKQUEUE_DEPTH.labels(name, name).inc()
        self._added_at.setdefault(key, self._clock.now())

    def taken(self, key: Hashable) -> None:
        name = self._name_of(key)
        if name is None:
            return
        now = self._clock.now()
        metrics.WORKQUEUE_DEPTH.labels(name, name).dec()
        since = self._added_at.pop(key, None)
        if since is not None:
            metrics.WORKQUEUE_QUEUE_DURATION.labels(name, name).observe(now - since)
        self._started_at[key] = now

    def done(self, key: Hashable) -> None:
        name = self._name_of(key)
        since = self._started_at.pop(key, None)
        if name is not None and since is not None:
            elapsed = self._clock.now() - since
            metrics.WORKQUEUE_WORK_DURATION.labels(name, name).observe(elapsed)

    def retried(self, key: Hashable) -> None:
        """A key put back for later (client-go counts every ``AddAfter``)."""
        name = self._name_of(key)
        if name is not None:
            metrics.WORKQUEUE_RETRIES.labels(name, name).inc()

    def unfinished(self, name: str) -> float:
        """Seconds of work in progress for ``name``'s keys, summed."""
        now = self._clock.now()
        return sum(now - t for k, t in self._started_at.items() if self._name_of(k) == name)

    def longest(self, name: str) -> float:
        """Seconds the longest-running work on one of ``name``'s keys has taken so far."""
        now = self._clock.now()
        running = [now - t for k, t in self._started_at.items() if self._name_of(k) == name]
        return max(running, default=0.0)
