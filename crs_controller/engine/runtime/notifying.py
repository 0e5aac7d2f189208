"""Sending notifications beside the reconciles, never in their way.

``tell`` only appends to each receiver's bounded line and returns: a reconcile never
waits for a receiver. Each receiver has a task of its own (``run``), so one that
hangs holds back only its own line. A POST that takes longer than the deadline is
given up (timed on the injected clock), a failure that may pass (no answer, 5xx, 408,
429) is retried after a backoff up to ``delivery.ATTEMPTS`` attempts, and when a line
is full the oldest waiting notification goes, counted in
``crs_notifications_dropped_total``. A retry sends the same body (the same
CloudEvents ``id``): a receiver that handled a POST it answered too late sees that
``id`` again and can tell.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

import structlog

from crs_controller.core.notifications.delivery import (
    DEADLINE,
    QUEUE_LIMIT,
    Receiver,
    backoff,
    delivered,
    worth_retrying,
)
from crs_controller.core.notifications.payloads import Notice, body
from crs_controller.engine.io import metrics
from crs_controller.engine.io.waiting import WaitingClock, sleep_for
from crs_controller.engine.runtime.tasks import supervised

log = structlog.get_logger(__name__)

# (receiver, body, content type) -> the answer's status code, None when none came.
Post = Callable[[Receiver, bytes, str], Awaitable[int | None]]


class _Line:
    """One receiver's waiting notifications, oldest first."""

    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver
        self.waiting: deque[Notice] = deque()
        self.wake = asyncio.Event()


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
        self._lines = [_Line(r) for r in receivers]
        self._post = post
        self._clock = clock
        self._limit = limit
        self._deadline = deadline

    def tell(self, told: Notice) -> None:
        """Queue ``told`` for every receiver; never waits."""
        for line in self._lines:
            if len(line.waiting) >= self._limit:
                line.waiting.popleft()
                metrics.NOTIFICATIONS_DROPPED.inc()
                log.warning("notification dropped", receiver=line.receiver.shown)
            line.waiting.append(told)
            line.wake.set()

    async def run(self) -> None:
        """Deliver until cancelled: one task per receiver."""
        async with asyncio.TaskGroup() as group:
            for index, line in enumerate(self._lines):
                supervised(group, self._serve(line), f"notify-{index}")

    async def _serve(self, line: _Line) -> None:
        while True:
            if not line.waiting:
                line.wake.clear()
                await line.wake.wait()
                continue
            await self._deliver(line.receiver, line.waiting.popleft())

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
