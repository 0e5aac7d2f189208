"""``crs-controller demo --keep``: the demo's control plane and controller left running
as a sandbox on real servers. The kubeconfigs it prints work with the CLI while it
runs (``uninstall`` too: its controller holds the leader Lease), and an interrupt
(Ctrl-C's SIGINT) stops every server it started."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from crs_controller.app.cli import main

STARTED = "The sandbox stays up until Ctrl-C"
WAIT = 180.0  # a fresh etcd and three kube-apiservers on a busy two-core machine


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    """The process's output, line by line, read in a thread (never blocking a test)."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _until(lines: queue.Queue[str], text: str, seen: list[str]) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            continue
        seen.append(line)
        if text in line:
            return
    raise AssertionError(f"{text!r} not printed within {WAIT}s:\n{''.join(seen)}")


def test_demo_keep_leaves_a_sandbox_the_cli_and_uninstall_can_use_until_interrupted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    command = [sys.executable, "-m", "crs_controller", "demo", "--keep", "--workloads", "2"]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        lines, seen = _lines(proc), []
        _until(lines, STARTED, seen)
        _until(lines, "crs-controller status demo", seen)
        [sandbox] = list(tmp_path.glob("crs-demo-*"))
        kubeconfig = sandbox / "management.kubeconfig"
        assert f"export KUBECONFIG={kubeconfig}" in "".join(seen)
        assert (sandbox / "workload-0.kubeconfig").exists()

        # The CLI works against the sandbox, as a user would run it: workload-0 is
        # the matching cluster, workload-1 the one the sample does not select.
        assert main(["status", "demo", "--kubeconfig", str(kubeconfig), "-o", "wide"]) == 0
        out = capsys.readouterr().out
        assert "workload-0" in out and "workload-1" not in out
        server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]

        # The sandbox's controller holds the leader Lease, as an installed one does:
        # uninstall finds it, deletes the sample set and sees it cleaned up.
        uninstall = ["uninstall", "-n", "default", "--yes", "--timeout", "2m"]
        assert main([*uninstall, "--kubeconfig", str(kubeconfig)]) == 0, capsys.readouterr()
        assert "no controller holds the leader Lease" not in capsys.readouterr().err
        assert main(["status", "--kubeconfig", str(kubeconfig), "-o", "json"]) == 0
        assert json.loads(capsys.readouterr().out)["clusterResourceSets"] == []

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=WAIT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # Every server it started is gone with it.
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{server}/livez", verify=False, timeout=5.0)
