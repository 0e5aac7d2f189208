"""Structured logs: JSON lines for machines, a console renderer for people.

Everything the process writes to stderr goes through the one renderer: structlog's
own lines, the standard library's loggers (httpx, hypercorn, asyncio's complaints),
Python's warnings, and exceptions nobody caught (in the main thread, in other
threads, or ignored in a finalizer). A log pipeline parsing JSON never meets a bare
traceback, and an exception that ends the process is one record (``failure``).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from collections.abc import MutableMapping
from types import TracebackType
from typing import Any

import structlog

from crs_controller.core.text import safe, safe_all

# A value in a log line: long enough for any message the controller builds (those
# that reach the API are cut at 1000), short enough that one tenant's value cannot
# fill the log. Tracebacks are made safe line by line and keep their lines.
VALUE_LIMIT = 4096
KEY_LIMIT = 200
MULTILINE = frozenset({"exception", "stack"})
# The message of an exception that ended the process, and how many of a group's.
FAILURE_MESSAGE_LIMIT = 300
FAILURES_LISTED = 5

log = structlog.get_logger(__name__)


def _renderer(fmt: str) -> structlog.typing.Processor:
    if fmt == "json":
        return structlog.processors.JSONRenderer()
    # Exceptions arrive already written out (format_exc_info): plain, as in JSON.
    return structlog.dev.ConsoleRenderer(
        colors=False, exception_formatter=structlog.dev.plain_traceback
    )


def _processors(fmt: str) -> list[structlog.typing.Processor]:
    """Every line's processors, the renderer last: one home for the line's shape."""
    return [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        make_safe,
        _renderer(fmt),
    ]


def line(fmt: str, level: str, event: str, **fields: Any) -> str:
    """One log line as ``configure(fmt)`` would write it, without configuring anything:
    for a way out before logging is set up (an argument ``run`` cannot take)."""
    record: Any = {**fields, "event": event}
    for processor in _processors(fmt):
        record = processor(None, level, record)
    return str(record)


def configure(fmt: str = "json", level: str = "info") -> None:
    renderer = _renderer(fmt)
    structlog.configure(
        processors=_processors(fmt),
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    _route_standard_logging(renderer)
    _route_uncaught_exceptions()


def _route_standard_logging(renderer: structlog.typing.Processor) -> None:
    """httpx and hypercorn log through the standard library: warnings and above only
    (no request-level detail: URLs can name Secrets), rendered as our own lines;
    Python's warnings go the same way."""
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            _one_line,
            structlog.stdlib.add_logger_name,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            make_safe,
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(logging.WARNING)
    logging.captureWarnings(True)


def _one_line(
    logger: Any, method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """A warning's text ends with a newline (``warnings.formatwarning``): not ours to keep."""
    if isinstance(event.get("event"), str):
        event["event"] = event["event"].rstrip("\n")
    return event


def _route_uncaught_exceptions() -> None:
    sys.excepthook = _uncaught
    threading.excepthook = _thread_died
    sys.unraisablehook = _unraisable


def _uncaught(kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
    log.error("uncaught exception", **failure(error), exc_info=(kind, error, tb))


def _thread_died(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is None or args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "?"
    info = (args.exc_type, args.exc_value, args.exc_traceback)
    log.error("thread died", thread=name, **failure(args.exc_value), exc_info=info)


def _unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    """An exception Python could not raise (in a finalizer, say); named by where it
    happened, never by the object's repr (which could hold anything)."""
    error, target = unraisable.exc_value, unraisable.object
    fields = failure(error) if error is not None else {}
    where = getattr(target, "__qualname__", type(target).__name__)
    log.warning("exception ignored", where=where, **fields)


def failure(error: BaseException) -> dict[str, Any]:
    """An exception that ended something, as log fields: the type and a short message
    of the first exception that is not a group or a cancellation (a TaskGroup wraps
    its task's error, perhaps twice), and when a group held several, each of the
    first few as "Type: message". Messages are the exceptions' own text, cut short and
    made safe; the controller's errors never carry Secret data."""
    leaves = _leaves(error)
    first = leaves[0]
    fields: dict[str, Any] = {"error_type": type(first).__name__, "error": _short(first)}
    if len(leaves) > 1:
        fields["errors"] = [f"{type(e).__name__}: {_short(e)}" for e in leaves[:FAILURES_LISTED]]
    return fields


def _leaves(error: BaseException) -> list[BaseException]:
    if not isinstance(error, BaseExceptionGroup):
        return [error]
    found = [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    causes = [e for e in found if not isinstance(e, asyncio.CancelledError)]
    return causes or found or [error]


def _short(error: BaseException) -> str:
    return safe(str(error) or type(error).__name__, FAILURE_MESSAGE_LIMIT)


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
    # Anything not a string, list, tuple or dict is rendered with repr().
    return safe_all(value, VALUE_LIMIT, KEY_LIMIT)


def _lines(value: Any) -> Any:
    if not isinstance(value, str):
        return _value(value)
    return "\n".join(safe(line, VALUE_LIMIT) for line in value.split("\n"))
