"""The Runtime Extension serves a renewed certificate without a restart (``app.tls``).

A server started with pair A is given pair B from another CA — by the kubelet's
``..data`` symlink swap, or written over in place — and once ``CHECK_INTERVAL`` has
passed on the injected clock the next handshake presents B: a client trusting B
connects, one trusting only A no longer does. Before the interval has passed A is
still served, so the check is bounded by that interval and no more frequent. A pair
that cannot be loaded (garbage, a key that does not match) keeps A served, is logged
once by file name without its contents, and is read again at the next check.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import structlog.testing

from crs_controller.app import extension
from crs_controller.app.serving import Served
from crs_controller.app.tls import CHECK_INTERVAL
from crs_controller.testbed.certs import CertificateAuthority
from tests.unit.fake_clock import FakeClock


@dataclass(frozen=True)
class Pair:
    cert: bytes
    key: bytes
    trust: ssl.SSLContext  # a client context trusting this pair's CA only


def issue(name: str) -> Pair:
    ca = CertificateAuthority.generate(name)
    serving = ca.issue_serving(("127.0.0.1",))
    return Pair(
        serving.cert_pem, serving.key_pem, ssl.create_default_context(cadata=ca.cert_pem.decode())
    )


def in_place(cert_dir: Path, cert: bytes, key: bytes) -> None:
    """Overwrite the files where they are, one after the other."""
    (cert_dir / "tls.crt").write_bytes(cert)
    (cert_dir / "tls.key").write_bytes(key)


def kubelet(cert_dir: Path, cert: bytes, key: bytes) -> None:
    """Write as the kubelet updates a Secret volume: a new timestamped directory, then
    the ``..data`` symlink replaced at once; ``tls.crt`` and ``tls.key`` link through it."""
    version = f"..2026_11_28_{len(list(cert_dir.glob('..2026_*')))}"
    (cert_dir / version).mkdir()
    in_place(cert_dir / version, cert, key)
    (cert_dir / "..data_tmp").symlink_to(version)
    os.replace(cert_dir / "..data_tmp", cert_dir / "..data")
    for name in ("tls.crt", "tls.key"):
        if not (cert_dir / name).is_symlink():
            (cert_dir / name).symlink_to(f"..data/{name}")


Writer = Callable[[Path, bytes, bytes], None]


async def status(cluster: dict[str, Any]) -> tuple[int, str]:
    return 0, "nothing to clean up"


@dataclass
class Server:
    served: Served
    clock: FakeClock

    async def trusted_by(self, pair: Pair) -> bool:
        """Whether a client trusting ``pair``'s CA completes a handshake."""
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", self.served.port, ssl=pair.trust), 15
            )
        except ssl.SSLCertVerificationError:
            return False
        writer.close()
        return True


@pytest.fixture
def first() -> Pair:
    return issue("first-ca")


@pytest.fixture
def second() -> Pair:
    return issue("second-ca")


@contextlib.asynccontextmanager
async def serving(cert_dir: Path, pair: Pair, write: Writer) -> AsyncIterator[Server]:
    write(cert_dir, pair.cert, pair.key)
    clock = FakeClock()
    served = await extension.serve("127.0.0.1", 0, str(cert_dir), status, clock=clock)
    try:
        yield Server(served, clock)
    finally:
        await asyncio.wait_for(served.close(), 10)


@pytest.mark.parametrize("write", [kubelet, in_place], ids=["symlink-swap", "in-place"])
async def test_a_renewed_pair_is_served_at_the_first_handshake_after_the_interval(
    tmp_path: Path, first: Pair, second: Pair, write: Writer
) -> None:
    async with serving(tmp_path, first, write) as server:
        assert await server.trusted_by(first)
        write(tmp_path, second.cert, second.key)
        server.clock.advance(CHECK_INTERVAL / 2)
        assert await server.trusted_by(first), "files read again before the interval"
        assert not await server.trusted_by(second)

        server.clock.advance(CHECK_INTERVAL / 2)
        assert await server.trusted_by(second)
        assert not await server.trusted_by(first)


async def test_a_pair_that_cannot_be_loaded_keeps_the_one_served_until_a_good_one_comes(
    tmp_path: Path, first: Pair, second: Pair
) -> None:
    async with serving(tmp_path, first, in_place) as server:
        with structlog.testing.capture_logs() as logs:
            in_place(tmp_path, b"not a certificate", b"not a key")
            for _ in range(2):  # logged once, however many checks find it
                server.clock.advance(CHECK_INTERVAL)
                assert await server.trusted_by(first)
            in_place(tmp_path, second.cert, first.key)  # half written: the old key
            server.clock.advance(CHECK_INTERVAL)
            assert await server.trusted_by(first)
            assert not await server.trusted_by(second)

            (tmp_path / "tls.key").write_bytes(second.key)
            server.clock.advance(CHECK_INTERVAL)
            assert await server.trusted_by(second)
    refused = [e for e in logs if e["log_level"] == "warning"]
    assert len(refused) == 2, logs
    for entry in refused:
        assert str(tmp_path / "tls.crt") in entry["files"]
        assert "not a" not in str(entry) and b"PRIVATE" not in str(entry).encode()
        assert "BEGIN" not in str(entry)
    assert [e["event"] for e in logs if e["log_level"] == "info"] == ["TLS certificate reloaded"]


async def test_a_missing_file_keeps_the_pair_served(tmp_path: Path, first: Pair) -> None:
    async with serving(tmp_path, first, in_place) as server:
        with structlog.testing.capture_logs() as logs:
            (tmp_path / "tls.key").unlink()
            server.clock.advance(CHECK_INTERVAL)
            assert await server.trusted_by(first)
    assert [e["files"] for e in logs if e["log_level"] == "warning"] == [
        [str(tmp_path / "tls.key")]
    ]
