"""The terminal commands as a kubectl user meets them, against the real servers:
``status -w`` prints the table then each change until its timeout, ``-o name``,
"No resources found" on stderr for an empty namespace; and the events a CRS applied
before its ConfigMap leaves behind (none: a source arriving within the grace never
produces a ResourceNotFound Warning; one that stays missing still does)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from crs_controller.app.cli import main
from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    TIMEOUT,
    add_cluster,
    admin_kubeconfig,
    configmap_obj,
    crs_obj,
    manifests,
    source_configmap,
    unique,
    wait_condition,
)


def events_with(mgmt: TestbedClient, namespace: str, reason: str) -> list[dict]:
    return [e for e in mgmt.list("v1", "Event", namespace) if e["reason"] == reason]


def test_crs_applied_before_its_configmap_leaves_no_resource_not_found_warning(
    controller: ControllerProcess, mgmt: TestbedClient, workloads, namespace: str
) -> None:
    add_cluster(mgmt, workloads[0], namespace, "early", {"order": "crs-first"})
    # One `kubectl apply -f` of CAPV's template: the CRS first, its ConfigMap next.
    mgmt.create(crs_obj(namespace, "ordered", [("ConfigMap", "ordered")], {"order": "crs-first"}))
    name = unique("ordered")
    mgmt.create(source_configmap(namespace, "ordered", {"a": manifests(configmap_obj(name))}))
    wait_condition(mgmt, namespace, "ordered", "Ready", "True", "Applied")
    # The positive sign: the Applied event, told once the clusters' notes settled.
    wait_for(lambda: events_with(mgmt, namespace, "Applied"), TIMEOUT)
    assert events_with(mgmt, namespace, "ResourceNotFound") == []


def test_a_source_that_stays_missing_still_gets_its_warning(
    controller: ControllerProcess, mgmt: TestbedClient, workloads, namespace: str
) -> None:
    add_cluster(mgmt, workloads[1], namespace, "waiting", {"order": "missing"})
    mgmt.create(crs_obj(namespace, "missing", [("ConfigMap", "absent")], {"order": "missing"}))
    (event,) = wait_for(lambda: events_with(mgmt, namespace, "ResourceNotFound"), TIMEOUT)
    assert event["type"] == "Warning"
    assert f"ConfigMap {namespace}/absent not found" in event["message"]


def test_status_says_no_resources_found_and_prints_names(
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    access = ["-n", namespace, "--kubeconfig", admin_kubeconfig(control_plane, tmp_path)]
    assert main(["status", *access]) == 0
    assert capsys.readouterr() == ("", f"No resources found in {namespace} namespace.\n")
    assert main(["status", *access, "-o", "name"]) == 0
    assert capsys.readouterr() == ("", f"No resources found in {namespace} namespace.\n")
    assert main(["status", *access, "-o", "json"]) == 0  # a document, as kubectl's List
    assert capsys.readouterr() == ('{\n  "clusterResourceSets": []\n}\n', "")

    for name in ("named-b", "named-a"):
        mgmt.create(crs_obj(namespace, name, [("ConfigMap", "x")], {"no": "match"}))
    assert main(["status", *access, "-o", "name"]) == 0
    assert capsys.readouterr() == (
        "clusterresourceset.addons.crs.dev/named-a\nclusterresourceset.addons.crs.dev/named-b\n",
        "",
    )


class Lines:
    """A running command's stdout, line by line, read as it comes."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._reader.start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, predicate: Callable[[str], bool]) -> str:
        return wait_for(lambda: next((x for x in self.lines if predicate(x)), None), TIMEOUT)


INTERRUPTIBLE_CLI = (
    "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from crs_controller.app.cli import main; raise SystemExit(main())"
)


def test_status_watch_prints_the_table_then_each_change_until_interrupted(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workloads,
    namespace: str,
    tmp_path: Path,
) -> None:
    name = unique("watched")
    mgmt.create(source_configmap(namespace, "watched", {"a": manifests(configmap_obj(name))}))
    mgmt.create(crs_obj(namespace, "watched", [("ConfigMap", "watched")], {"w": "1"}))
    add_cluster(mgmt, workloads[0], namespace, "w0", {"w": "1"})
    wait_condition(mgmt, namespace, "watched", "Ready", "True", "Applied")
    # Ctrl-C as a terminal sends it, whatever this run inherited: a shell starting the
    # tests in the background sets SIGINT to be ignored, and the child inherits that.
    command = [sys.executable, "-c", INTERRUPTIBLE_CLI, "status", "-w", "-n", namespace]
    command += ["--timeout", "2m", "--kubeconfig", admin_kubeconfig(control_plane, tmp_path)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        out = Lines(process)
        out.wait_for(lambda line: line.split()[:2] == ["CRS", "CLUSTER"])
        out.wait_for(lambda line: line.split()[1:2] == ["w0"] and "Applied" in line)
        first = len(out.lines)
        assert first == 2  # the table: header and one row

        add_cluster(mgmt, workloads[1], namespace, "w1", {"w": "1"})
        # The new cluster's row, as it changes, until it is applied: no header again.
        # (w0's row comes again only when its CRS's STATE cell changed meanwhile.)
        out.wait_for(lambda line: line.split()[1:2] == ["w1"] and "Applied" in line)
        assert all(line.split()[1] in ("w0", "w1") for line in out.lines[first:]), out.lines
        assert any(line.split()[1] == "w1" for line in out.lines[first:]), out.lines
        assert process.poll() is None  # still watching
        process.send_signal(signal.SIGINT)
        assert process.wait(TIMEOUT) == 130
    finally:
        process.kill()
        process.wait()


def test_status_watch_stops_at_its_timeout(
    control_plane: ControlPlane, mgmt: TestbedClient, namespace: str, tmp_path: Path
) -> None:
    mgmt.create(crs_obj(namespace, "quiet", [("ConfigMap", "x")], {"no": "match"}))
    command = [sys.executable, "-m", "crs_controller.app.cli", "status", "-w", "-n", namespace]
    command += ["--timeout", "2s", "--kubeconfig", admin_kubeconfig(control_plane, tmp_path)]
    started = time.monotonic()
    # Stops by itself (a hang fails at TIMEOUT), and not before its --timeout: a timer
    # never fires early, so this lower bound holds on any machine.
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started >= 2
    assert [line.split()[:2] for line in done.stdout.splitlines()] == [
        ["CRS", "CLUSTER"],
        [f"{namespace}/quiet", "-"],
    ]
