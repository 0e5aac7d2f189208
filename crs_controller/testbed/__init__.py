"""The test bed: real kube-apiservers and etcd for integration tests and the demo.

Only tests, the demo and tooling import this package; the controller never does
(an import-linter contract checks it).
"""

from crs_controller.testbed.controlplane import ControlPlane, ControlPlaneError, Server
from crs_controller.testbed.kube import TEST_NAMESPACE_PREFIX, KubeError, TestbedClient, wait_for

__all__ = [
    "TEST_NAMESPACE_PREFIX",
    "ControlPlane",
    "ControlPlaneError",
    "KubeError",
    "Server",
    "TestbedClient",
    "wait_for",
]
