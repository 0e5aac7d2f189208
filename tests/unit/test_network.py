"""The streams under the connection pools (``clients.network``): a request's small
writes leave in one, in order, before its answer is read; a large write is never held
back; an idle connection the server closed is seen from the socket itself."""

from __future__ import annotations

import socket
import ssl
from typing import Any

import httpcore
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.clients.network import HOLD_BYTES, Stream, readable


class Inner(httpcore.AsyncNetworkStream):
    """A connection that records what was written and when it was read."""

    def __init__(self) -> None:
        self.log: list[tuple[str, bytes]] = []
        self.closed = False

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self.log.append(("read", b""))
        return b"HTTP/1.1 200 OK\r\n"

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.log.append(("write", buffer))

    async def aclose(self) -> None:
        self.closed = True

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.log.append(("tls", b""))
        return Inner()

    def get_extra_info(self, info: str) -> Any:
        return f"inner {info}"


def writes(inner: Inner) -> list[bytes]:
    return [data for what, data in inner.log if what == "write"]


async def test_headers_and_body_leave_in_one_write_before_the_answer_is_read() -> None:
    inner = Inner()
    stream = Stream(inner, None)
    await stream.write(b"PUT /x HTTP/1.1\r\nContent-Length: 2\r\n\r\n")
    await stream.write(b"{}")
    await stream.write(b"")  # h11's end of a body with a length
    assert inner.log == []
    await stream.read(65536)
    assert inner.log == [
        ("write", b"PUT /x HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"),
        ("read", b""),
    ]


async def test_a_large_body_is_sent_at_once_with_the_headers_before_it() -> None:
    inner = Inner()
    stream = Stream(inner, None)
    body = b"x" * (2 * HOLD_BYTES)
    await stream.write(b"headers")
    await stream.write(body)
    assert writes(inner) == [b"headers" + body]


async def test_a_body_too_large_to_join_goes_after_the_headers_unjoined() -> None:
    inner = Inner()
    stream = Stream(inner, None)
    body = b"x" * (8 * HOLD_BYTES)
    await stream.write(b"headers")
    await stream.write(body)
    assert writes(inner) == [b"headers", body]


async def test_nothing_held_back_is_sent_after_the_stream_is_closed() -> None:
    inner = Inner()
    stream = Stream(inner, None)
    await stream.write(b"headers")
    await stream.aclose()
    await stream.flush()
    assert inner.closed and writes(inner) == []


async def test_tls_starts_after_what_was_held_back_is_sent() -> None:
    inner = Inner()
    stream = Stream(inner, None)
    await stream.write(b"CONNECT host:443 HTTP/1.1\r\n\r\n")
    tls = await stream.start_tls(ssl.create_default_context())
    assert [what for what, _ in inner.log] == ["write", "tls"]
    assert isinstance(tls, Stream)
    assert tls.get_extra_info("ssl_object") == "inner ssl_object"


@given(st.lists(st.binary(max_size=3 * HOLD_BYTES), max_size=6))
async def test_every_byte_is_sent_in_order_by_the_time_the_answer_is_read(
    chunks: list[bytes],
) -> None:
    inner = Inner()
    stream = Stream(inner, None)
    for chunk in chunks:
        await stream.write(chunk)
    await stream.read(65536)
    assert b"".join(writes(inner)) == b"".join(chunks)
    assert inner.log[-1] == ("read", b"")
    # No write was split, and none held back was larger than the bound.
    assert len(writes(inner)) <= max(1, len([c for c in chunks if c]))


def test_an_idle_connection_is_readable_once_the_server_closed_it() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        assert not readable(ours)
        theirs.close()
        assert readable(ours)


def test_without_a_socket_or_with_a_closed_one_it_counts_as_readable() -> None:
    assert readable(None)
    sock = socket.socket()
    sock.close()
    assert readable(sock)


def test_the_stream_answers_is_readable_from_its_own_socket() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        stream = Stream(Inner(), ours)
        assert stream.get_extra_info("is_readable") is False
        theirs.sendall(b"unexpected")
        assert stream.get_extra_info("is_readable") is True
