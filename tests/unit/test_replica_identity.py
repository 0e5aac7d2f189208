"""A replica's identity (``engine.runtime.membership.replica_identity``) and its
User-Agent (``app.runner.user_agent``): the pod's name when the Downward API gives
one, else the host name plus a random suffix, so two processes on one host are two
replicas; either way it makes a valid shard Lease name, is the leader Lease's holder,
and names the replica in every request's User-Agent, sharded or not."""

from __future__ import annotations

import re
import socket
from typing import cast

import pytest

from crs_controller.app.runner import user_agent
from crs_controller.clients.kube import KubeClient
from crs_controller.core.membership.shard import lease_name
from crs_controller.engine.runtime.membership import LeaderElector, Leases, replica_identity

from .fake_clock import FakeClock
from .memory_kube import MemoryKube

SUFFIXED = re.compile(re.escape(socket.gethostname()) + r"-[0-9a-f]{8}")
AGENT = re.compile(r"crs-controller/(?P<version>[^ ]+) \((?P<replica>.+)\)")


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"POD_NAME": "crs-controller-0"}, "crs-controller-0"),
        ({"POD_NAME": "crs-controller-1", "HOSTNAME": "node"}, "crs-controller-1"),
    ],
)
def test_the_pod_name_is_the_identity(environ: dict[str, str], expected: str) -> None:
    assert replica_identity(environ) == expected
    assert replica_identity(environ) == expected  # stable across restarts of a pod


@pytest.mark.parametrize("environ", [{}, {"POD_NAME": ""}], ids=["unset", "empty"])
def test_without_a_pod_name_each_process_is_its_own_replica(environ: dict[str, str]) -> None:
    first, second = replica_identity(environ), replica_identity(environ)
    assert SUFFIXED.fullmatch(first), first
    assert SUFFIXED.fullmatch(second), second
    assert first != second  # two processes on one host
    assert lease_name(first) != lease_name(second)


async def test_the_leader_lease_names_the_pod() -> None:
    kube, clock = MemoryKube("management"), FakeClock()
    identity = replica_identity({"POD_NAME": "crs-controller-7d9f-x2"})
    leases = Leases(cast(KubeClient, kube), "crs-system")
    await LeaderElector(leases, clock=clock, identity=identity).acquire()
    lease = await kube.get("coordination.k8s.io/v1", "Lease", "crs-controller", "crs-system")
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "crs-controller-7d9f-x2"


@pytest.mark.parametrize(
    ("shard", "replica"),
    [(False, "crs-controller-7d9f-x2"), (True, "shard member crs-controller-7d9f-x2")],
    ids=["leader-elected", "sharded"],
)
def test_the_user_agent_names_the_version_and_the_replica(shard: bool, replica: str) -> None:
    agent = user_agent("crs-controller-7d9f-x2", shard=shard)
    found = AGENT.fullmatch(agent)
    assert found is not None, agent
    assert found["replica"] == replica
    assert found["version"][0].isdigit() or found["version"] == "unknown"


def test_a_user_agent_never_carries_a_control_character() -> None:
    # $POD_NAME outside a pod is whatever the environment says; a header cannot hold
    # CR/LF, and an audit log line should not either.
    agent = user_agent("evil\r\nX-Injected: 1", shard=False)
    assert not any(ord(c) < 0x20 for c in agent)
    assert "\\r\\n" in agent
