"""A shard replica's identity (``app.runner.shard_identity``): the pod's name when the
Downward API gives one, else the host name plus a random suffix, so two processes on
one host are two members; either way it makes a valid shard Lease name."""

from __future__ import annotations

import re
import socket

import pytest

from crs_controller.app.runner import shard_identity
from crs_controller.core.membership.shard import lease_name

SUFFIXED = re.compile(re.escape(socket.gethostname()) + r"-[0-9a-f]{8}")


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"POD_NAME": "crs-controller-0"}, "crs-controller-0"),
        ({"POD_NAME": "crs-controller-1", "HOSTNAME": "node"}, "crs-controller-1"),
    ],
)
def test_the_pod_name_is_the_identity(environ: dict[str, str], expected: str) -> None:
    assert shard_identity(environ) == expected
    assert shard_identity(environ) == expected  # stable across restarts of a pod


@pytest.mark.parametrize("environ", [{}, {"POD_NAME": ""}], ids=["unset", "empty"])
def test_without_a_pod_name_each_process_is_its_own_member(environ: dict[str, str]) -> None:
    first, second = shard_identity(environ), shard_identity(environ)
    assert SUFFIXED.fullmatch(first), first
    assert SUFFIXED.fullmatch(second), second
    assert first != second  # two processes on one host
    assert lease_name(first) != lease_name(second)
