"""What the API client (``clients.kube``) accepts from a workload server, against small
TLS servers on loopback: one deadline per request however the answer drips in; what
an answer may decode to (bytes, JSON values counted before decoding, depth) and what a
paged LIST may add up to (pages, items, and values in total where every page is
held), each refused naming the limit and never the content; a LIST read page by page
is bounded in values per page; a page too large in bytes or values is asked again
with fewer items; a group/version the server does not serve (a CRD not installed) is that
kind's NotFound, not an unreachable cluster; names that are not one path segment are
never sent; an encrypted client key is refused without asking for a pass phrase."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import pty
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpcore
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.clients import answers, discovery
from crs_controller.clients.kube import AnswerLimits, KubeClient, json_nodes
from crs_controller.clients.kubeconfig import Endpoint
from crs_controller.clients.transport import Response
from crs_controller.core.errors import (
    AnswerTooLarge,
    InvalidObjectName,
    NotFound,
    Unreachable,
    UnsupportedKubeconfig,
)

from .tls import CA, CLIENT, serving_context

Handler = Callable[[str, str, asyncio.StreamWriter], Awaitable[None]]
LIMITS = AnswerLimits(bytes=20_000, values=1_000, items=50, pages=8)
DISCOVERY = {
    "kind": "APIResourceList",
    "resources": [
        {"name": "configmaps", "kind": "ConfigMap", "namespaced": True},
        {"name": "namespaces", "kind": "Namespace", "namespaced": False},
    ],
}


async def reply(
    writer: asyncio.StreamWriter, code: int, body: bytes, ctype: str = "application/json"
) -> None:
    head = f"HTTP/1.1 {code} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
    writer.write((head + "Connection: close\r\n\r\n").encode() + body)
    await writer.drain()


@asynccontextmanager
async def tls_server(handler: Handler) -> AsyncIterator[tuple[str, list[str]]]:
    """A TLS server on 127.0.0.1; yields its URL and each request's "METHOD target"."""
    seen: list[str] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            method, target, _ = (await reader.readline()).decode().split(" ", 2)
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            await reader.readexactly(length)
            seen.append(f"{method} {target}")
            await handler(method, target, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    listener = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=serving_context())
    port = listener.sockets[0].getsockname()[1]
    try:
        yield f"https://127.0.0.1:{port}", seen
    finally:
        listener.close()


@asynccontextmanager
async def client_of(
    handler: Handler, *, timeout: float = 5, limits: AnswerLimits = LIMITS
) -> AsyncIterator[tuple[KubeClient, list[str]]]:
    async with tls_server(handler) as (url, seen):
        endpoint = Endpoint(server=url, ca_pem=CA.cert_pem)
        client = KubeClient(endpoint, name="cluster ns/c1", timeout=timeout, limits=limits)
        try:
            yield client, seen
        finally:
            await client.close()


def with_discovery(objects: Handler) -> Handler:
    """Answers core/v1 discovery; everything else goes to ``objects``."""

    async def handler(method: str, target: str, writer: asyncio.StreamWriter) -> None:
        if target == "/api/v1":
            await reply(writer, 200, json.dumps(DISCOVERY).encode())
        else:
            await objects(method, target, writer)

    return handler


def query(target: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(target).query).items()}


# --- the node estimate --------------------------------------------------------------


def decoded_nodes(value: Any) -> int:
    """Values and object keys, as decoding creates them."""
    if isinstance(value, dict):
        return 1 + sum(1 + decoded_nodes(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(decoded_nodes(v) for v in value)
    return 1


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(), inner, max_size=6),
    max_leaves=60,
)


@settings(max_examples=300)
@given(
    value=json_values,
    separators=st.sampled_from([(",", ":"), (", ", ": ")]),
    indent=st.sampled_from([None, 0, 2]),
    ensure_ascii=st.booleans(),
    encoding=st.sampled_from(["utf-8", "utf-16", "utf-32"]),
)
def test_the_node_estimate_never_counts_fewer_than_decoding_makes(
    value: Any, separators: tuple[str, str], indent: int | None, ensure_ascii: bool, encoding: str
) -> None:
    text = json.dumps(value, separators=separators, indent=indent, ensure_ascii=ensure_ascii)
    raw = text.encode(encoding)
    assert json_nodes(raw) >= decoded_nodes(json.loads(raw))


@pytest.mark.parametrize(
    ("raw", "exact", "estimate"),
    [
        (b"0", 1, 1),
        (b"{}", 1, 2),
        (b"[]", 1, 2),
        (b'{"a":{}}', 3, 4),
        (b"[{},{},{}]", 4, 7),
        (b'{"a":[1,2]}', 5, 5),
        (b'{"a":"{[,:]}"}', 3, 7),
    ],
)
def test_the_node_estimate_counts_too_many_only_for_empty_containers_and_strings(
    raw: bytes, exact: int, estimate: int
) -> None:
    # So it is at most twice the count, plus what strings hold of {[,: characters.
    assert decoded_nodes(json.loads(raw)) == exact
    assert json_nodes(raw) == estimate


# --- per answer ---------------------------------------------------------------------

SECRET = "s3cr3t-answer-content"


@pytest.mark.parametrize(
    ("body", "limit", "message"),
    [
        (b'{"a":"' + SECRET.encode() * 2000 + b'"}', "bytes", "larger than 20000 bytes"),
        (
            b'{"resources":[' + b",".join([b"{}"] * 1000) + b'],"x":"' + SECRET.encode() + b'"}',
            "values",
            "more than 1000 JSON values in one answer",
        ),
        (b"[" * 999 + b"]" * 999, "depth", "nested deeper than"),
    ],
    ids=["bytes", "values", "depth"],
)
async def test_an_answer_beyond_a_limit_is_refused_naming_the_limit(
    body: bytes, limit: str, message: str
) -> None:
    async def handler(method: str, target: str, writer: asyncio.StreamWriter) -> None:
        await reply(writer, 200, body)

    async with client_of(handler) as (client, _):
        with pytest.raises(AnswerTooLarge, match=message) as caught:
            await client.resource_info("example.com/v1", "Foo")
    assert caught.value.limit == limit
    assert isinstance(caught.value, Unreachable)
    assert SECRET not in str(caught.value)


async def test_an_error_answer_is_bounded_too() -> None:
    async def handler(method: str, target: str, writer: asyncio.StreamWriter) -> None:
        await reply(writer, 500, b"[" + b",".join([b"{}"] * 2000) + b"]")

    async with client_of(handler) as (client, _):
        with pytest.raises(AnswerTooLarge, match="more than 1000 JSON values"):
            await client.resource_info("v1", "ConfigMap")


async def test_a_dripping_answer_ends_at_the_deadline_of_the_whole_request() -> None:
    # Each byte comes well within httpcore's timeout per read: only a deadline over
    # the whole request ends this before the body's 40 s.
    async def drip(method: str, target: str, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
        writer.write(b"Content-Length: 400\r\n\r\n")
        for _ in range(400):
            writer.write(b" ")
            await writer.drain()
            await asyncio.sleep(0.1)

    # The message says which limit ended it: the whole request's deadline, not the
    # end of the body (that would be no error at all).
    async with client_of(drip, timeout=1.0) as (client, _):
        with pytest.raises(Unreachable, match=r"GET /api/v1: no complete answer within 1s"):
            await client.resource_info("v1", "ConfigMap")


# --- a paged LIST -------------------------------------------------------------------


def page(items: list[dict[str, Any]], continue_token: str = "") -> bytes:
    meta = {"resourceVersion": "7", "continue": continue_token}
    return json.dumps({"kind": "List", "items": items, "metadata": meta}).encode()


def item(n: int) -> dict[str, Any]:
    return {"metadata": {"name": f"cm-{n}"}}


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({"items": {"a": 1}}, "items is not a list of objects"),
        ({"items": [{}, 1]}, "items is not a list of objects"),
        ({"items": [], "metadata": ["continue"]}, "metadata is not an object"),
    ],
)
async def test_a_list_answer_of_the_wrong_shape_is_the_clusters_unreachable(
    answer: dict[str, Any], message: str
) -> None:
    async def malformed(method: str, target: str, writer: asyncio.StreamWriter) -> None:
        await reply(writer, 200, json.dumps(answer).encode())

    async with client_of(with_discovery(malformed)) as (client, _):
        with pytest.raises(Unreachable, match=message):
            await client.list("v1", "ConfigMap", "default")


async def test_endless_continue_pages_stop_at_the_page_limit() -> None:
    async def endless(method: str, target: str, writer: asyncio.StreamWriter) -> None:
        n = int(query(target).get("continue", "0"))
        await reply(writer, 200, page([], str(n + 1)))

    async with client_of(with_discovery(endless)) as (client, seen):
        with pytest.raises(AnswerTooLarge, match="more than 8 pages") as caught:
            await client.list("v1", "ConfigMap", "default")
    assert caught.value.limit == "pages"
    assert sum("/configmaps" in s for s in seen) == 8


@pytest.mark.parametrize(
    ("per_page", "message", "limit"),
    [
        # ~47 values per item (a name, 20 labels): 1,000 in total run out on page 3.
        (10, "more than 1000 JSON values in total", "values in total"),
        # 1 value per item: 50 items in total run out first.
        (20, "more than 50 items", "items"),
    ],
)
async def test_pages_that_add_up_past_a_limit_in_total_are_refused(
    per_page: int, message: str, limit: str
) -> None:
    def fat(n: int) -> dict[str, Any]:
        labels = {f"l{i}": "v" for i in range(20)}
        return {"metadata": {"name": f"c{n}", "labels": labels}}

    async def pages(method: str, target: str, writer: asyncio.StreamWriter) -> None:
        n = int(query(target).get("continue", "0"))
        found = [fat(n) if limit != "items" else {} for _ in range(per_page)]
        await reply(writer, 200, page(found, str(n + 1)))

    async with client_of(with_discovery(pages)) as (client, _):
        with pytest.raises(AnswerTooLarge, match=message) as caught:
            await client.list("v1", "ConfigMap", "default")
    assert caught.value.limit == limit


def commas(start: int, size: int, total: int, width: int) -> tuple[list[dict[str, Any]], str]:
    """Items ``start`` to ``start + size`` of ``total``, each with an annotation of
    ``width`` commas (each counted as a value before decoding), and the next token."""
    notes = {"n": "," * width}
    names = range(start, min(start + size, total))
    found = [{"metadata": {"name": f"cm-{n}", "annotations": notes}} for n in names]
    return found, str(start + size) if start + size < total else ""


def comma_pages(total: int, width: int) -> Handler:
    async def handler(method: str, target: str, writer: asyncio.StreamWriter) -> None:
        asked = query(target)
        found, more = commas(int(asked.get("continue", "0")), int(asked["limit"]), total, width)
        await reply(writer, 200, page(found, more))

    return with_discovery(handler)


async def test_a_list_read_page_by_page_is_bounded_per_page_not_in_total() -> None:
    # 20 objects of ~155 values: 3,100 in all, over the 1,000 of one answer and
    # of a list() in total. Page by page, each page is asked with fewer items until
    # it fits, and the whole list is read.
    async with client_of(comma_pages(20, 150)) as (client, seen):
        names = [
            i["metadata"]["name"]
            async for found, _ in client.pages("v1", "ConfigMap", None)
            for i in found
        ]
    assert names == [f"cm-{n}" for n in range(20)]
    sizes = [query(s.split()[1])["limit"] for s in seen if "/configmaps" in s]
    assert sizes == ["500", "50", "5", "5", "5", "5"]


async def test_pages_grow_back_after_the_large_objects_so_the_rest_is_read() -> None:
    # 20 objects of ~155 values (read 5 at a time), then 200 small ones: ten pages
    # that fit let the size grow back, so the whole LIST fits in 20 requests.
    async def handler(method: str, target: str, writer: asyncio.StreamWriter) -> None:
        asked = query(target)
        start, size = int(asked.get("continue", "0")), int(asked["limit"])
        found, more = commas(start, size, 220, 150)
        for obj in found:
            if int(obj["metadata"]["name"].removeprefix("cm-")) >= 20:
                del obj["metadata"]["annotations"]
        await reply(writer, 200, page(found, more))

    limits = AnswerLimits(bytes=200_000, values=1_000, items=1_000, pages=20)
    async with client_of(with_discovery(handler), limits=limits) as (client, seen):
        names = [
            i["metadata"]["name"]
            async for found, _ in client.pages("v1", "ConfigMap", None)
            for i in found
        ]
    assert names == [f"cm-{n}" for n in range(220)]
    sizes = [query(s.split()[1])["limit"] for s in seen if "/configmaps" in s]
    assert sizes == ["500", "50", *["5"] * 10, "50", "50", "50", "50"]


async def test_a_long_run_of_large_objects_tries_larger_pages_ever_more_rarely() -> None:
    # 200 objects of ~155 values: only 5 fit in a page. Each try at 50 that is
    # refused doubles the pages of 5 read before the next try.
    limits = AnswerLimits(bytes=200_000, values=1_000, items=1_000, pages=100)
    async with client_of(comma_pages(200, 150), limits=limits) as (client, seen):
        read = [i async for found, _ in client.pages("v1", "ConfigMap", None) for i in found]
    assert len(read) == 200
    sizes = [query(s.split()[1])["limit"] for s in seen if "/configmaps" in s]
    tries = [n for n, size in enumerate(sizes) if size == "50"]
    assert tries == [1, 12, 33], sizes  # after 10, then 20 pages of 5


async def test_list_still_bounds_the_values_of_all_its_pages_together() -> None:
    # list() holds every page until it returns.
    async with client_of(comma_pages(20, 150)) as (client, _):
        with pytest.raises(AnswerTooLarge, match="more than 1000 JSON values in total") as caught:
            await client.list("v1", "ConfigMap", None)
    assert caught.value.limit == "values in total"


async def test_one_object_over_the_values_of_an_answer_is_refused_page_by_page() -> None:
    async with client_of(comma_pages(3, 1500)) as (client, seen):
        with pytest.raises(AnswerTooLarge, match="more than 1000 JSON values in one answer"):
            async for _ in client.pages("v1", "ConfigMap", None):
                pass
    sizes = [query(s.split()[1])["limit"] for s in seen if "/configmaps" in s]
    assert sizes == ["500", "50", "5", "1"]


async def test_a_page_too_large_in_bytes_is_asked_again_with_fewer_items() -> None:
    big = "x" * 1500  # 20 of these are more than 20,000 bytes, 5 are not

    async def sized(method: str, target: str, writer: asyncio.StreamWriter) -> None:
        asked = query(target)
        start, size = int(asked.get("continue", "0")), int(asked["limit"])
        names = range(start, min(start + size, 20))
        found = [{"metadata": {"name": f"cm-{n}"}, "data": {"k": big}} for n in names]
        more = str(start + size) if start + size < 20 else ""
        await reply(writer, 200, page(found, more))

    async with client_of(with_discovery(sized)) as (client, seen):
        items, version = await client.list("v1", "ConfigMap", "default")
    assert [i["metadata"]["name"] for i in items] == [f"cm-{n}" for n in range(20)]
    assert version == "7"
    sizes = [query(s.split()[1])["limit"] for s in seen if "/configmaps" in s]
    assert sizes == ["500", "50", "5", "5", "5", "5"]


async def test_management_limits_are_larger_but_bounded() -> None:
    workload, management = answers.WORKLOAD_LIMITS, answers.MANAGEMENT_LIMITS
    for field in ("bytes", "values", "items", "pages"):
        assert getattr(workload, field) < getattr(management, field)
    assert management.bytes <= 64 * answers.MiB


# --- the lines of a watch -----------------------------------------------------------


def streamed(chunks: list[bytes]) -> Response:
    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    return Response(httpcore.Response(200, content=body()))


def lines_of(chunks: list[bytes]) -> list[str]:
    async def read() -> list[str]:
        return [line async for line in answers.answer_lines(streamed(chunks))]

    return asyncio.run(read())


def cut(data: bytes, at: list[int]) -> list[bytes]:
    bounds = [0, *sorted({min(a, len(data)) for a in at}), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=300)
@given(
    lines=st.lists(st.binary().filter(lambda b: b"\n" not in b), max_size=8),
    end=st.sampled_from([b"", b"\n", b"\r\n"]),
    at=st.lists(st.integers(min_value=0, max_value=200), max_size=12),
)
def test_the_lines_of_a_watch_do_not_depend_on_where_the_chunks_end(
    lines: list[bytes], end: bytes, at: list[int]
) -> None:
    data = b"\n".join(lines) + end
    *whole, last = data.split(b"\n")
    expected = [line.decode("utf-8", errors="replace").rstrip("\r") for line in whole]
    expected += [last.decode("utf-8", errors="replace")] if last else []
    assert lines_of(cut(data, at)) == expected


def test_a_long_line_is_searched_for_its_end_once_not_once_per_chunk() -> None:
    # 4 MiB in 16 KiB chunks. What bytes methods run over (the object they are called
    # on) is counted: each byte a few times (searched, decoded), where searching all
    # that is held at each new chunk would be ~512 MiB.
    line = b'{"type":"ADDED","object":{"data":"' + b"x" * (4 * answers.MiB) + b'"}}'
    chunks = cut(line + b"\n", list(range(0, len(line), 16 * 1024)))
    scanned = 0

    def count(frame: object, event: str, fn: object) -> None:
        nonlocal scanned
        if event == "c_call" and isinstance(getattr(fn, "__self__", None), bytes):
            scanned += len(getattr(fn, "__self__"))  # noqa: B009

    before = sys.getprofile()
    sys.setprofile(count)
    try:
        found = lines_of(chunks)
    finally:
        sys.setprofile(before)
    assert found == [line.decode()]
    assert scanned <= 3 * len(line)


def test_a_line_longer_than_any_answer_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answers, "MAX_RESPONSE_BYTES", 100)
    assert lines_of([b"a" * 60, b"b" * 40 + b"\n"]) == ["a" * 60 + "b" * 40]
    with pytest.raises(Unreachable, match="a line longer than 100 bytes"):
        lines_of([b"a" * 60, b"b" * 41 + b"\n"])
    with pytest.raises(Unreachable, match="a line longer than 100 bytes"):
        lines_of([b"a" * 101])


# --- groups the server does not serve -----------------------------------------------


async def test_a_group_the_server_does_not_serve_is_that_kinds_not_found() -> None:
    async def kube_apiserver(method: str, target: str, writer: asyncio.StreamWriter) -> None:
        # What kube-apiserver answers for a path it does not serve.
        await reply(writer, 404, b"404 page not found\n", "text/plain; charset=utf-8")

    async with client_of(with_discovery(kube_apiserver)) as (client, _):
        with pytest.raises(NotFound, match=r"no kind Foo in example\.com/v1 .*CRD installed"):
            await client.resource_info("example.com/v1", "Foo")
        assert await client.get("v1", "ConfigMap", "gone", "default") is None
        with pytest.raises(NotFound):
            await client.apply(
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
                field_manager="m",
            )


async def test_a_server_that_does_not_serve_v1_is_not_kubernetes() -> None:
    async def nothing(method: str, target: str, writer: asyncio.StreamWriter) -> None:
        await reply(writer, 404, b"404 page not found\n", "text/plain")

    async with client_of(nothing) as (client, _):
        with pytest.raises(Unreachable, match="did not answer as a Kubernetes API server"):
            await client.resource_info("v1", "ConfigMap")


# --- names that are not a path segment ----------------------------------------------

TRAVERSAL = "../../api/v1/namespaces/kube-system/secrets/x"


@pytest.mark.parametrize(
    ("api_version", "name", "namespace"),
    [
        ("v1", TRAVERSAL, "default"),
        ("v1", "..", "default"),
        ("v1", ".", "default"),
        ("v1", "a/b", "default"),
        ("v1", "a%2Fb", "default"),
        ("v1", "evil\x1b[31m\r\nname", "default"),
        ("v1", "with space", "default"),
        ("v1", "é", "default"),
        ("v1", "x" * 254, "default"),
        ("v1", "ok", "../kube-system"),
        ("v1", "ok", "a\x00b"),
        ("../../api/v1", "ok", "default"),
        ("example.com/v1/../../x", "ok", "default"),
        ("noslash", "ok", "default"),
    ],
)
async def test_a_name_that_is_not_a_path_segment_is_never_sent(
    api_version: str, name: str, namespace: str
) -> None:
    async def objects(method: str, target: str, writer: asyncio.StreamWriter) -> None:
        await reply(writer, 200, b'{"kind": "ConfigMap"}')

    obj = {
        "apiVersion": api_version,
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
    }
    async with client_of(with_discovery(objects)) as (client, seen):
        with pytest.raises(InvalidObjectName) as caught:
            await client.apply(obj, field_manager="m")
        with pytest.raises(InvalidObjectName):
            await client.delete(api_version, "ConfigMap", name, namespace)
    assert not isinstance(caught.value, Unreachable)
    quoted = [v for v in (name, namespace) if len(v) > 2 and v in str(caught.value)]
    assert quoted == []
    assert all(s == "GET /api/v1" for s in seen), seen


@pytest.mark.parametrize("name", ["system:aggregate-to-admin", "a.b-c", "x" * 253, "Ab_9~"])
async def test_names_that_are_one_segment_are_sent_as_they_are(name: str) -> None:
    async def objects(method: str, target: str, writer: asyncio.StreamWriter) -> None:
        await reply(writer, 200, b'{"kind": "ConfigMap"}')

    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "d"}}
    async with client_of(with_discovery(objects)) as (client, seen):
        assert await client.apply(obj, field_manager="m") == {"kind": "ConfigMap"}
    assert seen[-1].startswith(f"PATCH /api/v1/namespaces/d/configmaps/{name}?")


@given(st.text(max_size=300))
def test_an_accepted_segment_can_only_name_one_segment(value: str) -> None:
    try:
        discovery._segment(value, "name")
    except InvalidObjectName:
        return
    assert value not in ("", ".", "..")
    assert not any(c in value for c in "/%?# \\")
    assert value.isascii() and value.isprintable() and len(value) <= 253


# --- an encrypted client key --------------------------------------------------------


def encrypted_key(form: serialization.PrivateFormat) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    encryption = serialization.BestAvailableEncryption(b"pass phrase")
    return key.private_bytes(serialization.Encoding.PEM, form, encryption)


FORMS = {
    "pkcs8": serialization.PrivateFormat.PKCS8,
    "traditional": serialization.PrivateFormat.TraditionalOpenSSL,
}


LOAD = """
import sys
from crs_controller.clients.kube import KubeClient
from crs_controller.clients.kubeconfig import Endpoint
cert, key = sys.stdin.buffer.read().split(b"--split--")
endpoint = Endpoint(server="https://127.0.0.1:1", cert_pem=cert, key_pem=key)
try:
    KubeClient(endpoint, name="cluster ns/c1")
except Exception as exc:
    print(type(exc).__name__, exc, flush=True)
"""


@pytest.mark.parametrize("form", sorted(FORMS))
def test_an_encrypted_key_is_refused_without_asking_for_a_pass_phrase(
    form: str, tmp_path: Path
) -> None:
    key = encrypted_key(FORMS[form])
    assert b"ENCRYPTED" in key
    # The child reads the key from a file, then has a terminal as stdin (and as its
    # only terminal): an OpenSSL prompt would wait on it until the timeout.
    source = tmp_path / "key.pem"
    source.write_bytes(CLIENT.cert_pem + b"--split--" + key)
    program = LOAD.replace("sys.stdin.buffer.read()", f"open({str(source)!r}, 'rb').read()")
    controller, terminal = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-c", program],
            stdin=terminal,
            capture_output=True,
            timeout=20,
            start_new_session=True,
            check=False,
        )
    finally:
        os.close(controller)
        os.close(terminal)
    out = done.stdout.decode()
    assert out.startswith("UnsupportedKubeconfig"), (out, done.stderr.decode()[-500:])
    assert "client-key-data is encrypted: not supported" in out
    assert b"pass phrase:" not in done.stderr.lower()


def test_an_encrypted_key_is_refused_in_process() -> None:
    endpoint = Endpoint(
        server="https://127.0.0.1:1",
        cert_pem=CLIENT.cert_pem,
        key_pem=encrypted_key(FORMS["pkcs8"]),
    )
    with pytest.raises(UnsupportedKubeconfig, match="encrypted: not supported"):
        KubeClient(endpoint, name="cluster ns/c1")


async def test_pages_come_one_at_a_time_with_the_version_on_the_last() -> None:
    async def three(method: str, target: str, writer: asyncio.StreamWriter) -> None:
        n = int(query(target).get("continue", "0"))
        await reply(writer, 200, page([item(n)], str(n + 1) if n < 2 else ""))

    async with client_of(with_discovery(three)) as (client, seen):
        got = []
        async for items, version in client.pages("v1", "ConfigMap", "default"):
            asked = sum("/configmaps" in s for s in seen)
            got.append(([i["metadata"]["name"] for i in items], version, asked))
    # Each page is handed on before the next is asked for.
    assert got == [(["cm-0"], "", 1), (["cm-1"], "", 2), (["cm-2"], "7", 3)]
