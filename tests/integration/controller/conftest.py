"""Fixtures for the controller tests: one controller process for the session, run
with exactly the RBAC in config/rbac, against the session's real control plane."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from crs_controller.testbed import ControlPlane, TestbedClient
from crs_controller.testbed.controller import ControllerProcess, install_rbac


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
