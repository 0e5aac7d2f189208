"""Structured logs: JSON lines for machines, a console renderer for people."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

from crs_controller.core.text import safe

# A value in a log line: long enough for any message the controller builds (those
# that reach the API are cut at 1000), short enough that one tenant's value cannot
# fill the log. Tracebacks are made safe line by line and keep their lines.
VALUE_LIMIT = 4096
KEY_LIMIT = 200
MULTILINE = frozenset({"exception", "stack"})


def configure(fmt: str = "json", level: str = "info") -> None:
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            make_safe,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    # httpx and hypercorn log through the standard library; keep them quiet and out of
    # request-level detail (URLs can name Secrets).
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)


def make_safe(
    logger: Any, method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Every key and string value without control characters, whatever the renderer:
    log lines quote object names from manifests and servers' answers, and a raw ESC
    sequence or CR/LF would rewrite a terminal or forge a line of the console log."""
    return {
        safe(str(key), KEY_LIMIT): _lines(value) if key in MULTILINE else _value(value)
        for key, value in event.items()
    }


def _value(value: Any) -> Any:
    if isinstance(value, str):
        return safe(value, VALUE_LIMIT)
    if isinstance(value, list | tuple):
        return [_value(v) for v in value]
    if isinstance(value, dict):
        return {safe(str(k), KEY_LIMIT): _value(v) for k, v in value.items()}
    return value  # numbers, booleans, None; anything else is rendered with repr()


def _lines(value: Any) -> Any:
    if not isinstance(value, str):
        return _value(value)
    return "\n".join(safe(line, VALUE_LIMIT) for line in value.split("\n"))
