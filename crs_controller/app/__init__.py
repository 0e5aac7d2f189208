"""What people and Kubernetes meet: the command line (``cli``, ``commands/``), the
controller process (``runner``), its HTTP endpoints (``health``; ``extension``, the
Runtime Extension: BeforeClusterDelete and the upgrade hooks; ``serving``), logs and
the embedded demo."""

from __future__ import annotations

import sys


def _structlog_without_rich() -> None:
    """Import structlog before anything else does, with rich out of its sight.

    structlog loads rich (and pygments) when it can, for pretty console tracebacks
    the logs never use: ``format_exc_info`` writes every exception as Python's own
    text before any renderer sees it (app/logs.py). rich is installed only as the
    CEL interpreter's dependency; hidden from structlog, it costs the controller
    nothing (about 4 MiB of every process) until a CEL rule loads it. Once structlog
    is loaded, rich can be imported again as ever."""
    if "structlog" in sys.modules or "rich" in sys.modules:
        return
    sys.modules["rich"] = None  # type: ignore[assignment]  # import rich: ImportError
    try:
        import structlog  # noqa: F401, PLC0415 - loaded now, without rich
    finally:
        del sys.modules["rich"]


_structlog_without_rich()
