"""JSON in and out of a server, its cost bounded before any is spent: an answer is read
up to a byte limit and decoded only if the JSON values it holds fit a budget
(``AnswerLimits``: per answer, and per ``list()`` call in total); a large request body
is told apart, cheaply, to be encoded in a worker thread.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from crs_controller.clients.api import Obj
from crs_controller.clients.transport import Response
from crs_controller.core.errors import AnswerTooLarge, Unreachable

MiB = 1024 * 1024
# An apply body this many nodes or larger is JSON-encoded in a worker thread: the
# parser allows up to 500,000 (aliases expanded), which takes tens of milliseconds
# to encode, and the event loop serves every other cluster meanwhile. Counting up to
# this costs well under a millisecond.
ENCODE_IN_THREAD_NODES = 20_000


@dataclass(frozen=True)
class AnswerLimits:
    """What the client decodes of one server: per answer, and per ``list()`` call in
    total (every page of its LIST stays decoded until the call returns). A LIST read
    page by page (``pages()``) holds one page at a time: its values are bounded per
    page, so other namespaces' objects never add up to a refusal.

    ``values`` bounds the JSON values and object keys, counted from the raw bytes
    before decoding (``json_nodes``): each costs at most ~80 bytes once decoded
    (measured on CPython 3.11: 72 for ``[{"a":0},...]``, 79 for nested one-key
    objects, 80 for distinct keys), strings at most their own bytes again. Nesting is
    bounded by the interpreter's recursion limit (1000)."""

    bytes: int  # per answer
    values: int  # per answer, and per list() call in total
    items: int  # per list() or pages() call
    pages: int  # requests per list() or pages() call


# Workload clusters are the tenants' (a kubeconfig in a tenant's Secret names any
# server). One object's JSON stays under 4 MiB: kube-apiserver refuses request bodies
# over 3 MiB and etcd values over 1.5 MiB. 250,000 values are ~20 MiB decoded at
# worst, so one request peaks near 4 + 4 + 20 MiB, and 8 workers at once below
# 230 MiB: under the Deployment's 512 Mi limit with a baseline up to 260 MiB. That
# is also every object of a 500-item page of ordinary Deployments (~300 values each),
# and 100 pages of 500 names (metadata-only) in one LIST.
WORKLOAD_LIMITS = AnswerLimits(bytes=4 * MiB, values=250_000, items=50_000, pages=200)
# The management cluster is the operator's own API server, behind its API Priority and
# Fairness and quotas: its LISTs are the fleet itself (Clusters, CRSs, bindings), which
# the controller must hold anyway, so the limits only stop a broken server.
MANAGEMENT_LIMITS = AnswerLimits(bytes=64 * MiB, values=4_000_000, items=1_000_000, pages=10_000)
# A watch line is one object: never longer than a management answer.
MAX_RESPONSE_BYTES = MANAGEMENT_LIMITS.bytes


def encode(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def has_nodes(value: Any, limit: int) -> bool:
    """Does ``value`` hold at least ``limit`` nodes (shared sub-objects counted each
    time, as encoding would)? Stops counting at ``limit``."""
    stack, count = [value], 0
    while stack:
        item = stack.pop()
        count += 1
        if count >= limit:
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


async def read_answer(response: Response, where: str, limit: int) -> bytes:
    """The whole body of an answer, or AnswerTooLarge past ``limit`` bytes."""
    declared = response.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise AnswerTooLarge(f"{where}: response larger than {limit} bytes", limit="bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise AnswerTooLarge(f"{where}: response larger than {limit} bytes", limit="bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class _Line:
    """The parts of a line read so far, joined once when it ends: each byte is
    searched for the end of its line once, however many chunks the line spans."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, part: bytes) -> None:
        self.size += len(part)
        if self.size > MAX_RESPONSE_BYTES:
            raise Unreachable(f"a line longer than {MAX_RESPONSE_BYTES} bytes")
        if part:
            self.parts.append(part)

    def take(self) -> str:
        line = b"".join(self.parts).decode("utf-8", errors="replace")
        self.parts, self.size = [], 0
        return line


async def answer_lines(response: Response) -> AsyncIterator[str]:
    """Lines of a streamed answer (a watch); one longer than any answer we accept
    means the server is not one we should listen to."""
    line = _Line()
    async for chunk in response.aiter_bytes():
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            line.add(chunk[start:end])
            yield line.take().rstrip("\r")
            start = end + 1
        line.add(chunk[start:])
    if line.parts:
        yield line.take()


def json_nodes(raw: bytes) -> int:
    """An upper bound of the JSON values and object keys ``raw`` decodes to, in four
    C-speed passes and no decoding: a container of k > 0 children holds k - 1 commas,
    so values <= 1 + containers + commas; each key has its colon. The same bytes
    inside strings only count too many, never too few (also in UTF-16/32)."""
    return 1 + raw.count(b"{") + raw.count(b"[") + raw.count(b",") + raw.count(b":")


class Budget:
    """The JSON values an answer may still decode to, and those of a whole paged LIST
    it is part of (``within``). A refusal names its limit: ``values`` for one answer
    (a page asked again with fewer items may fit), ``values in total`` for the LIST."""

    def __init__(self, values: int, *, total: bool = False, within: Budget | None = None) -> None:
        self.limit = values
        self.left = values
        self._per, self._name = (
            ("in total", "values in total") if total else ("in one answer", "values")
        )
        self._within = within

    def take(self, raw: bytes, where: str) -> None:
        self._charge(json_nodes(raw), where)

    def _charge(self, nodes: int, where: str) -> None:
        if nodes > self.left:
            message = f"{where}: more than {self.limit} JSON values {self._per}"
            raise AnswerTooLarge(message, limit=self._name)
        if self._within is not None:
            self._within._charge(nodes, where)
        self.left -= nodes


def decode(raw: bytes, where: str, budget: Budget) -> Any:
    """The decoded answer, its cost bounded before decoding. Not in a thread: the C
    decoder holds the GIL throughout (measured: the event loop stood still as long),
    so the bound on values is what bounds the time too (~60 ms for the workload's)."""
    budget.take(raw, where)
    try:
        return json.loads(raw)
    except RecursionError:
        depth = sys.getrecursionlimit()
        raise AnswerTooLarge(f"{where}: nested deeper than {depth} levels", limit="depth") from None
    except ValueError:
        return None


def watch_event(line: str, where: str, limits: AnswerLimits) -> tuple[str, Obj] | None:
    """One line of a watch as (type, object), or None if it is not a watch event."""
    event = decode(line.encode(), where, Budget(limits.values))
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        return None
    return str(event.get("type")), event["object"]
