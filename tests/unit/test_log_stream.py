"""Every line ``crs-controller run`` writes is a log line (``app.logs``,
``app.runner.main``): the standard library's loggers (hypercorn, asyncio), Python's
warnings, exceptions in threads, in finalizers and in the main thread, and the
failure that ends the run come out as JSON records on stderr, never as a bare
traceback; the failure is one ``run failed`` record with the exception's type and
a short message, unwrapped from the task groups around it, and exit code 2."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest

from crs_controller.app.logs import FAILURE_MESSAGE_LIMIT, failure

LOST = "leader lease lost: crs-system/crs-controller not renewed in 10s"


def _group(*errors: BaseException) -> BaseExceptionGroup[BaseException]:
    return BaseExceptionGroup("unhandled errors in a TaskGroup", list(errors))


@pytest.mark.parametrize(
    ("error", "fields"),
    [
        (RuntimeError(LOST), {"error_type": "RuntimeError", "error": LOST}),
        (KeyError(), {"error_type": "KeyError", "error": "KeyError"}),
        # run's TaskGroup around _lead_and_run's, around the lease task's error; the
        # tasks cancelled because of it are not the cause.
        (
            _group(_group(asyncio.CancelledError(), RuntimeError(LOST))),
            {"error_type": "RuntimeError", "error": LOST},
        ),
        (
            _group(ValueError("a"), _group(OSError("b"))),
            {"error_type": "ValueError", "error": "a", "errors": ["ValueError: a", "OSError: b"]},
        ),
        (
            _group(asyncio.CancelledError()),
            {"error_type": "CancelledError", "error": "CancelledError"},
        ),
        (
            RuntimeError("line\r\nforged"),
            {"error_type": "RuntimeError", "error": "line\\r\\nforged"},
        ),
    ],
    ids=["plain", "no-message", "nested-groups", "several", "only-cancelled", "control-chars"],
)
def test_a_failure_is_its_first_real_cause(error: BaseException, fields: dict[str, Any]) -> None:
    assert failure(error) == fields


def test_a_failure_message_is_short() -> None:
    described = failure(RuntimeError("x" * 10_000))
    assert len(described["error"]) <= FAILURE_MESSAGE_LIMIT


NOISY_RUN = f"""
import asyncio, gc, logging, sys, threading, warnings
from crs_controller.app import logs, runner

logs.configure("json", "info")
logging.getLogger("crs_controller.http").warning("hypercorn says %s", "no")
try:
    raise ValueError("inside")
except ValueError:
    logging.getLogger("asyncio").exception("Task exception was never retrieved")
warnings.warn("a library warns", UserWarning)
thread = threading.Thread(target=lambda: 1 / 0, name="parser")
thread.start()
thread.join()

class Finalized:
    def __del__(self):
        raise RuntimeError("in a finalizer")

Finalized()
gc.collect()

async def failing(options):
    async def lease():
        raise RuntimeError({LOST!r})
    async with asyncio.TaskGroup() as group:
        group.create_task(asyncio.sleep(30))
        group.create_task(lease())

runner.run = failing
sys.exit(runner.main(None))
"""


def _records(code: str) -> tuple[int, str, list[dict[str, Any]]]:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    records = []
    for line in done.stderr.splitlines():
        record = json.loads(line)  # fails the test on any line that is not JSON
        assert isinstance(record, dict), line
        records.append(record)
    return done.returncode, done.stdout, records


def test_every_line_of_a_failed_run_is_json_and_the_last_says_why() -> None:
    code, stdout, records = _records(NOISY_RUN)
    assert (code, stdout) == (2, "")
    events = {r["event"]: r for r in records}
    assert events["hypercorn says no"]["level"] == "warning"
    assert events["hypercorn says no"]["logger"] == "crs_controller.http"
    assert "ValueError: inside" in events["Task exception was never retrieved"]["exception"]
    (warned,) = [r for r in records if r["event"].endswith("UserWarning: a library warns")]
    assert (warned["logger"], warned["level"]) == ("py.warnings", "warning")
    assert events["thread died"]["thread"] == "parser"
    assert events["thread died"]["error_type"] == "ZeroDivisionError"
    assert events["exception ignored"]["error"] == "in a finalizer"
    assert events["exception ignored"]["where"] == "Finalized.__del__"
    last = records[-1]
    assert (last["event"], last["level"]) == ("run failed", "error")
    assert (last["error_type"], last["error"]) == ("RuntimeError", LOST)
    assert all("timestamp" in r and "level" in r for r in records)


def test_an_uncaught_exception_is_one_json_record() -> None:
    code, stdout, records = _records(
        "from crs_controller.app import logs\nlogs.configure()\nraise LookupError('gone')"
    )
    assert (code, stdout) == (1, "")
    (record,) = records
    assert (record["event"], record["error_type"], record["error"]) == (
        "uncaught exception",
        "LookupError",
        "gone",
    )
    assert "Traceback" in record["exception"]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--bogus"], "crs-controller run: unrecognized arguments: --bogus"),
        (
            ["--concurrency", "x"],
            "crs-controller run: argument --concurrency: invalid int value: '\u2026'",
        ),
    ],
)
def test_an_argument_run_cannot_take_is_one_json_record(args: list[str], error: str) -> None:
    code, stdout, records = _records(
        f"import sys\nfrom crs_controller.app.cli import main\nsys.exit(main(['run', *{args!r}]))"
    )
    assert (code, stdout) == (2, "")
    (record,) = records
    assert (record["event"], record["level"], record["error"]) == ("run failed", "error", error)


def test_an_argument_error_follows_the_log_format_asked_for() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "crs_controller", "run", "--log-format=console", "--bogus"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert "run failed" in line and "unrecognized arguments: --bogus" in line
    assert not line.startswith("{")
