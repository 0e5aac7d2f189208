"""Which addresses the HTTP servers listen on (``app.serving``, ``app.runner``).

An address without a host (``:8080``, as the Deployment passes) answers on IPv4 and
IPv6 alike, as Go's listeners do: the kubelet probes the pod's IPv6 address on an
IPv6 or IPv6-first cluster. A host given is bound as given, an IPv6 one in brackets.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import httpx
import pytest

from crs_controller.app import health
from crs_controller.app.runner import _split
from crs_controller.app.serving import Served


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


async def answers(url: str) -> bool:
    async with httpx.AsyncClient(trust_env=False, timeout=15) as client:
        try:
            return (await client.get(url)).status_code == 200
        except httpx.ConnectError:
            return False


@pytest.fixture
async def without_host() -> AsyncIterator[Served]:
    where = _split(":0")
    assert where is not None
    server = await health.serve(*where, ready=lambda: True)
    yield server
    await asyncio.wait_for(server.close(), 10)


async def test_an_address_without_a_host_answers_on_ipv4_and_ipv6(without_host: Served) -> None:
    assert await answers(f"http://127.0.0.1:{without_host.port}/healthz")
    if not has_ipv6_loopback():
        pytest.skip("this host has no IPv6 loopback: only the IPv4 half can be checked")
    assert await answers(f"http://[::1]:{without_host.port}/healthz")


def test_an_address_splits_into_host_and_port() -> None:
    assert _split(":8080") == ("", 8080)
    assert _split("127.0.0.1:8081") == ("127.0.0.1", 8081)
    assert _split("[::1]:8080") == ("[::1]", 8080)
    assert _split("0") is None
    assert _split("") is None


async def test_an_ipv6_host_in_brackets_is_bound_as_given() -> None:
    if not has_ipv6_loopback():
        pytest.skip("this host has no IPv6 loopback")
    where = _split("[::1]:0")
    assert where is not None
    server = await health.serve(*where, ready=lambda: True)
    try:
        assert await answers(f"http://[::1]:{server.port}/healthz")
    finally:
        await asyncio.wait_for(server.close(), 10)
