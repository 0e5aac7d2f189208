"""Sending notifications beside the reconciles, never in their way.

``tell`` only appends to each receiver's bounded line and returns: a reconcile never
waits for a receiver. Each receiver has a task of its own (``run``), so one that
hangs holds back only its own line. A POST that takes longer than the deadline is
given up (timed on the injected clock), a failure that may pass (no answer, 5xx, 408,
429) is retried after a backoff up to ``delivery.ATTEMPTS`` attempts. A line merges a
CRS's repeated notices and, full, drops fairly between tenants
(``core.notifications.line``); each drop is counted in
``crs_notifications_dropped_total`` and logged in one line per receiver at most every
``delivery.DROPS_LOGGED_EVERY`` seconds, with the counts, so that a flood of notices
is not a flood of log lines too. A retry sends the same body (the same CloudEvents
``id``): a receiver that handled a POST it answered too late sees that ``id`` again
and can tell.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence

import structlog

from crs_controller.core.notifications.delivery import (
    DEADLINE,
    DROPS_LOGGED_EVERY,
    QUEUE_LIMIT,
    Receiver,
    backoff,
    delivered,
    worth_retrying,
)
from crs_controller.core.notifications.line import Line
from crs_controller.core.notifications.payloads import Notice, body
from crs_controller.engine.io import metrics
from crs_controller.engine.io.waiting import WaitingClock, sleep_for
from crs_controller.engine.runtime.tasks import supervised

log = structlog.get_logger(__name__)

# (receiver, body, content type) -> the answer's status code, None when none came.
Post = Callable[[Receiver, bytes, str], Awaitable[int | None]]


# The namespaces a "notifications dropped" line names, those it dropped most from.
NAMESPACES_SHOWN = 5


class _Line:
    """One receiver's waiting notifications, and its drops not logged yet."""

    def __init__(self, receiver: Receiver, limit: int) -> None:
        self.receiver = receiver
        self.waiting = Line(limit)
        self.wake = asyncio.Event()
        self.dropped: Counter[str] = Counter()  # by namespace, since the last log line
        self.logged: float | None = None  # when drops were last logged


class Notifier:
    def __init__(
        self,
        receivers: Sequence[Receiver],
        post: Post,
        clock: WaitingClock,
        *,
        limit: int = QUEUE_LIMIT,
        deadline: float = DEADLINE,
    ) -> None:
        self._lines = [_Line(r, limit) for r in receivers]
        self._post = post
        self._clock = clock
        self._deadline = deadline

    def tell(self, told: Notice) -> None:
        """Queue ``told`` for every receiver; never waits."""
        for line in self._lines:
            dropped = line.waiting.add(told)
            if dropped is not None:
                metrics.NOTIFICATIONS_DROPPED.inc()
                line.dropped[dropped.namespace] += 1
                self._log_drops(line)
            line.wake.set()

    async def run(self) -> None:
        """Deliver until cancelled: one task per receiver."""
        async with asyncio.TaskGroup() as group:
            for index, line in enumerate(self._lines):
                supervised(group, self._serve(line), f"notify-{index}")

    async def _serve(self, line: _Line) -> None:
        while True:
            self._log_drops(line)
            if not line.waiting:
                line.wake.clear()
                due = self._drops_due(line)
                if due is None:
                    await line.wake.wait()
                else:  # the drops not logged yet are, once their interval is over
                    await self._clock.sleep_until(due, line.wake)
                continue
            await self._deliver(line.receiver, line.waiting.take())

    def _drops_due(self, line: _Line) -> float | None:
        """When the line's drops not logged yet may be; None: there are none."""
        if not line.dropped:
            return None
        return self._clock.now() if line.logged is None else line.logged + DROPS_LOGGED_EVERY

    def _log_drops(self, line: _Line) -> None:
        """One line for the drops since the last, once that is old enough."""
        due = self._drops_due(line)
        if due is None or self._clock.now() < due:
            return
        log.warning(
            "notifications dropped",
            receiver=line.receiver.shown,
            dropped=line.dropped.total(),
            namespaces=dict(line.dropped.most_common(NAMESPACES_SHOWN)),
            namespaces_omitted=max(len(line.dropped) - NAMESPACES_SHOWN, 0),
        )
        line.dropped.clear()
        line.logged = self._clock.now()

    async def _deliver(self, receiver: Receiver, told: Notice) -> None:
        payload, content_type = body(told, receiver.format)
        raw = json.dumps(payload).encode()
        attempt = 0
        while True:
            attempt += 1
            status = await self._answer(receiver, raw, content_type)
            if delivered(status):
                metrics.NOTIFICATIONS.labels(result="sent").inc()
                return
            if not worth_retrying(status, attempt):
                metrics.NOTIFICATIONS.labels(result="failed").inc()
                log.warning(
                    "notification failed",
                    receiver=receiver.shown,
                    reason=told.reason,
                    status=status,
                    attempts=attempt,
                )
                return
            await sleep_for(self._clock, backoff(attempt))

    async def _answer(self, receiver: Receiver, raw: bytes, content_type: str) -> int | None:
        """The POST's status code; None if it did not end within the deadline or
        raised, whatever it raised: no receiver can end the sender."""
        answered = asyncio.Event()
        posting = asyncio.ensure_future(self._post(receiver, raw, content_type))
        posting.add_done_callback(lambda _: answered.set())
        try:
            await self._clock.sleep_until(self._clock.now() + self._deadline, answered)
        finally:
            if not posting.done():
                posting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await posting
        if posting.cancelled():
            return None
        failure = posting.exception()
        if failure is not None:
            # Its type only: the text may quote the URL, whose path can be a secret.
            log.info(
                "notification not answered", receiver=receiver.shown, error=type(failure).__name__
            )
            return None
        return posting.result()
