"""Fixtures for the controller tests: one controller process for the session, run
with exactly the RBAC in config/rbac, against the session's real control plane."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from crs_controller.testbed import ControlPlane, TestbedClient
from crs_controller.testbed.controller import SYSTEM_NAMESPACE, ControllerProcess, install_rbac


@pytest.fixture(scope="session")
def controller(control_plane: ControlPlane, mgmt: TestbedClient) -> Iterator[ControllerProcess]:
    install_rbac(mgmt)
    # Debug level: each reconcile is logged, the positive sign tests wait for before
    # asserting that something did not happen.
    debug = ("--log-level", "debug")
    with ControllerProcess(control_plane.management, *debug, extension=True) as process:
        yield process
        # Workload kubeconfigs carry client keys: none may be left on disk.
        assert process.files_with_private_keys() == []
    # A controller that logged secret material would fail every test that ran;
    # checked once here against the kubeconfig keys it was given.
    assert "PRIVATE KEY" not in process.log_text()


@pytest.fixture
def workloads(control_plane: ControlPlane) -> list:  # type: ignore[type-arg]
    return control_plane.workloads


@pytest.fixture
def foreign_lease(mgmt: TestbedClient) -> Iterator[None]:
    """The leader Lease held by someone else, so a --leader-elect process stands by."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "crs-controller", "namespace": SYSTEM_NAMESPACE},
        "spec": {
            "holderIdentity": "another-replica",
            "leaseDurationSeconds": 3600,
            "acquireTime": now,
            "renewTime": now,
        },
    }
    mgmt.delete("coordination.k8s.io/v1", "Lease", "crs-controller", SYSTEM_NAMESPACE)
    mgmt.create(lease)
    yield
    mgmt.delete("coordination.k8s.io/v1", "Lease", "crs-controller", SYSTEM_NAMESPACE)
