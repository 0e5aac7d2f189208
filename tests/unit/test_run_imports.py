"""What ``crs-controller run`` loads: the controller and nothing the terminal's
commands need (their modules under app/commands), nor rich, which structlog would
load for tracebacks the logs never use. Every module loaded is memory each replica
pays whatever its number of Clusters. The command line stays whole: the top-level
help lists every command however it is asked for, and rich stays importable for
the CEL interpreter that depends on it."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from crs_controller.app.cli import COMMANDS, main

# The process as `python -m crs_controller run` starts it, up to the controller's own
# main (not started: the test needs no cluster), then what it had loaded.
RUN = """\
import json, sys
from crs_controller.app import cli, runner
runner.main = lambda options: 0
code = cli.main(["run", "--log-format", "json"])
loaded = sorted(sys.modules)
import rich.console
print(json.dumps({"code": code, "modules": loaded}))
"""


def test_run_loads_no_terminal_command_and_no_rich() -> None:
    done = subprocess.run(
        [sys.executable, "-c", RUN], capture_output=True, text=True, check=True, timeout=120
    )
    result = json.loads(done.stdout)
    modules = set(result["modules"])
    assert result["code"] == 0
    assert "crs_controller.app.runner" in modules  # it did reach the controller
    commands = {f"crs_controller.app.commands.{name}" for name in COMMANDS}
    assert sorted(commands & modules) == []
    assert sorted(m for m in modules if m.split(".")[0] in ("rich", "pygments")) == []


@pytest.mark.parametrize("argv", [["--help"], ["--help", "run"], ["-h", "hash"]])
def test_the_top_level_help_lists_every_command(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out = capsys.readouterr().out
    assert exited.value.code == 0
    listed = out.partition("positional arguments:")[2]
    names = re.findall(r"^ {4}(\S+)", listed, re.MULTILINE)
    assert names == ["run", "demo", *COMMANDS, "completion"]
