"""Connection limits of both HTTP servers — health/metrics (``app.health``, plain HTTP)
and the Runtime Extension (``app.extension``, TLS) — over real sockets on loopback.

For both: a client that sends nothing, or dribbles its request head a byte at a time,
is disconnected after the idle timeout while a request on another connection is served;
an oversized head (one huge header, or a thousand header lines) is refused with 431 and
the server keeps serving; 200 idle connections neither block a request nor outlive the
idle timeout; keep-alive serves two requests on one connection. For the extension also:
a TLS handshake that never starts is dropped, a body dribbled past its deadline gets
408, and a chunked body over ``MAX_BODY`` gets 413.

``serve`` takes shortened timeouts here so the file runs in seconds. Every wait is for
a positive sign — the server's answer or its closing the connection — with a bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from crs_controller.app import extension, health
from crs_controller.app.extension import DISCOVERY_PATH, HOOK_PATH, MAX_BODY
from crs_controller.app.serving import MAX_HEAD
from crs_controller.testbed.certs import CertificateAuthority

KEEP_ALIVE = 0.5
# Longer than any wait below, so a close seen within one is the idle timer's doing.
READ_TIMEOUT = 40
HANDSHAKE_TIMEOUT = 0.5
BODY_TIMEOUT = 0.5
# Scheduling slack for a busy machine (a full run on two cores has reached a load of
# 28); a test that passes waits only as long as the server takes.
SLACK = 15
# hypercorn reads up to 64 KiB at a time and h11 checks MAX_HEAD only while the head is
# incomplete, so a head is refused for sure only beyond MAX_HEAD plus one read.
OVERSIZED = MAX_HEAD + 64 * 1024 + 1024


@dataclass(frozen=True)
class Target:
    """A running server and the one ordinary request it answers with 200."""

    port: int
    tls: ssl.SSLContext | None
    head: str  # request line and Host, no final line break
    body: bytes = b""

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port, ssl=self.tls)

    def request(self, close: bool = True) -> bytes:
        head = f"{self.head}\r\nContent-Length: {len(self.body)}"
        head += "\r\nConnection: close" if close else ""
        return head.encode() + b"\r\n\r\n" + self.body


async def status(cluster: dict[str, Any]) -> tuple[int, str]:
    return 30, "removing add-ons"


def certificates(cert_dir: Path) -> ssl.SSLContext:
    ca = CertificateAuthority.generate("limits-ca")
    serving = ca.issue_serving(("127.0.0.1",))
    (cert_dir / "tls.crt").write_bytes(serving.cert_pem)
    (cert_dir / "tls.key").write_bytes(serving.key_pem)
    return ssl.create_default_context(cadata=ca.cert_pem.decode())


@contextlib.asynccontextmanager
async def running(kind: str, cert_dir: Path, keep_alive: float) -> AsyncIterator[Target]:
    if kind == "health":
        server = await health.serve(
            "127.0.0.1", 0, lambda: True, keep_alive=keep_alive, read_timeout=READ_TIMEOUT
        )
        target = Target(server.port, None, "GET /healthz HTTP/1.1\r\nHost: t")
    else:
        verify = certificates(cert_dir)
        server = await extension.serve(
            "127.0.0.1",
            0,
            str(cert_dir),
            status,
            keep_alive=keep_alive,
            read_timeout=READ_TIMEOUT,
            handshake_timeout=HANDSHAKE_TIMEOUT,
            body_timeout=BODY_TIMEOUT,
        )
        body = (
            b'{"apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1", "kind": "DiscoveryRequest"}'
        )
        target = Target(server.port, verify, f"POST {DISCOVERY_PATH} HTTP/1.1\r\nHost: t", body)
    try:
        yield target
    finally:
        await asyncio.wait_for(server.close(), 10)


@pytest.fixture(params=["health", "extension"])
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Target]:
    async with running(request.param, tmp_path, KEEP_ALIVE) as started:
        yield started


@pytest.fixture
async def hook(tmp_path: Path) -> AsyncIterator[Target]:
    async with running("extension", tmp_path, KEEP_ALIVE) as started:
        yield started


async def _read(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.read(65536)
    except (ConnectionError, ssl.SSLError):
        return b""  # a reset is a hang-up too


async def hangs_up(reader: asyncio.StreamReader, within: float) -> bytes:
    """All the server sends until it closes the connection, which must be within
    ``within`` seconds."""
    data = b""
    try:
        async with asyncio.timeout(within):
            while chunk := await _read(reader):
                data += chunk
    except TimeoutError:
        pytest.fail(f"the server kept the connection open for over {within} s")
    return data


async def read_response(reader: asyncio.StreamReader) -> bytes:
    """One response (head and Content-Length body), leaving the connection open."""
    async with asyncio.timeout(SLACK):
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.lower().split(b"\r\n")
            if line.startswith(b"content-length:")
        )
        return head + await reader.readexactly(length)


async def served_ok(target: Target) -> None:
    """An ordinary request on a new connection is answered 200."""
    reader, writer = await target.connect()
    try:
        writer.write(target.request())
        await writer.drain()
        assert (await hangs_up(reader, SLACK)).startswith(b"HTTP/1.1 200 ")
    finally:
        writer.close()


async def dribble(writer: asyncio.StreamWriter, data: bytes, interval: float = 0.02) -> None:
    """Send ``data`` a byte at a time until done or the server hangs up."""
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        for byte in data:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(interval)


async def test_a_silent_connection_is_closed_after_the_idle_timeout(target: Target) -> None:
    reader, writer = await target.connect()
    try:
        await served_ok(target)
        assert await hangs_up(reader, KEEP_ALIVE + SLACK) == b""
    finally:
        writer.close()


async def test_a_client_dribbling_its_head_is_disconnected(target: Target) -> None:
    # Each byte comes well within the read timeout: only the idle timer can end this,
    # as hypercorn stops it on a complete request head, not on bytes.
    reader, writer = await target.connect()
    head = target.head.encode() + b"\r\nX-Slow: " + b"a" * 1000
    dribbler = asyncio.create_task(dribble(writer, head))
    try:
        await served_ok(target)
        assert await hangs_up(reader, KEEP_ALIVE + SLACK) == b""
    finally:
        dribbler.cancel()
        writer.close()


@pytest.mark.parametrize(
    "headers",
    [
        f"X-Big: {'a' * OVERSIZED}",
        "\r\n".join(f"X-Line-{n:04}: {'v' * (OVERSIZED // 1000)}" for n in range(1000)),
    ],
    ids=["one-huge-header", "1000-header-lines"],
)
async def test_an_oversized_head_is_refused_and_the_server_keeps_serving(
    target: Target, headers: str
) -> None:
    reader, writer = await target.connect()
    try:
        writer.write(f"{target.head}\r\n{headers}\r\n\r\n".encode())
        await writer.drain()
        assert (await hangs_up(reader, SLACK)).startswith(b"HTTP/1.1 431 ")
    finally:
        writer.close()
    await served_ok(target)


@pytest.mark.parametrize("kind", ["health", "extension"])
async def test_many_idle_connections_neither_block_a_request_nor_outlive_the_timeout(
    kind: str, tmp_path: Path
) -> None:
    # Longer than 200 TLS handshakes take on loopback (about 0.5 s), so all are open at once.
    keep_alive = 1.5
    async with running(kind, tmp_path, keep_alive) as target:
        idle = [await target.connect() for _ in range(200)]
        try:
            await served_ok(target)
            replies = await asyncio.gather(
                *(hangs_up(reader, keep_alive + SLACK) for reader, _ in idle)
            )
            assert replies == [b""] * len(idle)
        finally:
            for _, writer in idle:
                writer.close()


async def test_keep_alive_serves_two_requests_on_one_connection(tmp_path: Path) -> None:
    async with running("health", tmp_path, KEEP_ALIVE) as target:
        await _two_requests(target)


async def test_the_extension_closes_each_connection_after_its_answer(hook: Target) -> None:
    # Cluster API would otherwise reuse it just as the idle timer closes it (extension).
    reader, writer = await hook.connect()
    try:
        writer.write(hook.request(close=False))
        await writer.drain()
        assert (await read_response(reader)).startswith(b"HTTP/1.1 200 ")
        assert await hangs_up(reader, SLACK) == b""
    finally:
        writer.close()


async def _two_requests(target: Target) -> None:
    reader, writer = await target.connect()
    try:
        writer.write(target.request(close=False))
        await writer.drain()
        assert (await read_response(reader)).startswith(b"HTTP/1.1 200 ")
        writer.write(target.request(close=True))
        await writer.drain()
        assert (await read_response(reader)).startswith(b"HTTP/1.1 200 ")
        assert await hangs_up(reader, SLACK) == b""  # as the second request asked
    finally:
        writer.close()


async def test_a_tls_handshake_that_never_starts_is_dropped(hook: Target) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", hook.port)
    try:
        await served_ok(hook)
        assert await hangs_up(reader, HANDSHAKE_TIMEOUT + SLACK) == b""
    finally:
        writer.close()


async def test_a_body_dribbled_past_its_deadline_gets_408(hook: Target) -> None:
    reader, writer = await hook.connect()
    writer.write(f"POST {HOOK_PATH} HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n".encode())
    dribbler = asyncio.create_task(dribble(writer, b" " * 1000))
    try:
        await served_ok(hook)
        assert (await hangs_up(reader, BODY_TIMEOUT + SLACK)).startswith(b"HTTP/1.1 408 ")
    finally:
        dribbler.cancel()
        writer.close()


async def test_a_chunked_body_over_the_limit_gets_413(hook: Target) -> None:
    reader, writer = await hook.connect()
    head = f"POST {HOOK_PATH} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"%x\r\n%s\r\n" % (64 * 1024, b"x" * 64 * 1024)

    async def feed() -> None:
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            writer.write(head.encode())
            for _ in range(MAX_BODY // (64 * 1024) + 2):
                writer.write(chunk)
                await writer.drain()

    feeder = asyncio.create_task(feed())
    try:
        assert (await hangs_up(reader, SLACK)).startswith(b"HTTP/1.1 413 ")
    finally:
        feeder.cancel()
        writer.close()
    await served_ok(hook)
