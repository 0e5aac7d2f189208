"""A controller that loses its rights to its leader Lease, on the real server: each
refused renewal is an error record naming the Lease and the 403, the process stops
before the Lease could expire, and everything it wrote, to its last line, is a JSON
record: ``stopped``, then one ``run failed`` record with the cause's type and message,
and exit code 2 (it used to end with a bare ExceptionGroup traceback)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest

from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess, install_rbac

from .installing import uninstall
from .support import TIMEOUT, log_records, unique

RBAC = "rbac.authorization.k8s.io"
Obj = dict[str, object]


def _rights(namespace: str, user: str) -> list[Obj]:
    """``user`` gets the shipped ClusterRole, and Lease rights in ``namespace`` through
    a RoleBinding of its own (the last object: the one the test takes away)."""
    subjects = [{"apiGroup": RBAC, "kind": "User", "name": user}]
    leases = {"name": f"{user}-leases", "namespace": namespace}
    rules = [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        }
    ]
    return [
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": user},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "crs-controller"},
            "subjects": subjects,
        },
        {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": leases, "rules": rules},
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "RoleBinding",
            "metadata": leases,
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": leases["name"]},
            "subjects": subjects,
        },
    ]


def _exit_code(pid: int, timeout: float) -> int:
    """Wait for the process to exit by itself (a SIGTERM from us would race its last
    line) and return its exit code. This test process started it, so it may reap it;
    ControllerProcess then finds it gone and sends nothing."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.1)
    raise TimeoutError(f"the controller did not exit within {timeout}s")


@pytest.fixture
def rights(mgmt: TestbedClient, namespace: str) -> Iterator[tuple[str, list[Obj]]]:
    install_rbac(mgmt)  # the ClusterRole
    user = unique("crs-rights")
    granted = _rights(namespace, user)
    for obj in granted:
        mgmt.apply(obj)
    yield user, granted
    uninstall(mgmt, granted[:-1])  # the RoleBinding may be gone already
    last = granted[-1]["metadata"]
    assert isinstance(last, dict)
    mgmt.delete(f"{RBAC}/v1", "RoleBinding", last["name"], last["namespace"])


def test_losing_the_lease_rights_ends_the_run_in_json_lines(
    mgmt: TestbedClient,
    control_plane: ControlPlane,
    namespace: str,
    rights: tuple[str, list[Obj]],
) -> None:
    user, granted = rights
    args = ("--leader-elect", "--lease-duration", "3s", "--leader-election-namespace", namespace)
    process = ControllerProcess(
        control_plane.management, *args, "--namespace", namespace, user=user
    )
    try:
        process.start()
        wait_for(lambda: log_records(process, "became leader"), TIMEOUT, message="leader")
        binding = granted[-1]["metadata"]
        assert isinstance(binding, dict)
        mgmt.delete(f"{RBAC}/v1", "RoleBinding", binding["name"], namespace)
        assert process.pid is not None
        code = _exit_code(process.pid, TIMEOUT)
    finally:
        process.close()
    records = [json.loads(line) for line in process.log_text().splitlines()]
    assert all(isinstance(r, dict) and r.get("level") for r in records)
    assert code == 2
    lease = f"{namespace}/crs-controller"
    denied = [r for r in records if r["event"] == "lease not acquired"]
    assert denied, "no refused renewal was logged"
    for record in denied:
        assert (record["level"], record["lease"], record["status"]) == ("error", lease, 403)
    assert [r["event"] for r in records[-2:]] == ["stopped", "run failed"]
    failed = records[-1]
    assert (failed["level"], failed["error_type"]) == ("error", "RuntimeError")
    assert failed["error"].startswith(f"leader lease lost: {lease} not renewed in 2s")
