"""Structured logs: JSON lines for machines, a console renderer for people."""

from __future__ import annotations

import logging
import sys

import structlog


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
