"""Shared fixtures: one real control plane per test session, opened lazily.

Unit tests never ask for these fixtures, so they run without any server.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from crs_controller.testbed import TEST_NAMESPACE_PREFIX, ControlPlane, TestbedClient
from crs_controller.testbed.clusters import install_crds

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = 3

# The suite shares its machine with API servers and other runs: how long one example
# of a property test takes says nothing about the code under test. No deadline per
# example (200 ms by default) and no health check on slow data generation; a test
# that lists the health checks it suppresses lists too_slow as well. A failing
# example prints the blob that replays it.
settings.register_profile(
    "suite", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("suite")


def crd_paths() -> list[Path]:
    """Our CRDs plus the minimal Cluster API Cluster CRD the tests need."""
    return sorted((REPO_ROOT / "config" / "crd" / "bases").glob("*.yaml")) + sorted(
        (REPO_ROOT / "config" / "testing").glob("*.yaml")
    )


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    # No skip when binaries are missing: a silently skipped suite would look green.
    with ControlPlane.start(workloads=WORKLOADS) as plane:
        yield plane


@pytest.fixture(scope="session")
def mgmt(control_plane: ControlPlane) -> Iterator[TestbedClient]:
    """Admin client for the management server, with the CRDs installed."""
    with TestbedClient(control_plane.management) as client:
        install_crds(client, crd_paths())
        yield client


@pytest.fixture(scope="session")
def workload_clients(control_plane: ControlPlane) -> Iterator[list[TestbedClient]]:
    clients = [TestbedClient(server) for server in control_plane.workloads]
    yield clients
    for client in clients:
        client.close()


@pytest.fixture
def namespace(mgmt: TestbedClient) -> Iterator[str]:
    """A fresh namespace on the management server.

    Deletion only marks it Terminating: no controller manager runs to empty it.
    """
    name = f"{TEST_NAMESPACE_PREFIX}{uuid.uuid4().hex[:8]}"
    mgmt.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    mgmt.delete("v1", "Namespace", name)
