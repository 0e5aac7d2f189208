"""Starting asyncio tasks through one helper: named, and loud when they die."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

log = structlog.get_logger(__name__)


def supervised(
    group: asyncio.TaskGroup, coro: Coroutine[Any, Any, Any], name: str
) -> asyncio.Task[Any]:
    """Start ``coro`` in ``group``; an unexpected exit is logged, then propagates so
    the group (and so the process) stops instead of running half-alive."""

    async def guarded() -> Any:
        try:
            return await coro
        except asyncio.CancelledError:
            raise
        except BaseException:
            log.exception("task died", task=name)
            raise

    return group.create_task(guarded(), name=name)
