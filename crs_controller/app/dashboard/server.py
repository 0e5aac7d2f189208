"""The fleet page's HTTP side: the page and its two assets (shipped in the package,
nothing fetched from elsewhere), the live feed as server-sent events (``/events``:
one ``snapshot`` of the whole view, then a ``delta`` per change) and one binding's
record on selection (``/record``). Read-only: GET alone is answered, and only to a
request holding this run's token or its cookie (``access``); anything else gets 403
and no data.

Every answer carries a Content-Security-Policy that lets the page run only its own
script and style (no inline script, no other origin), and a request naming another
``Host`` than the address served is refused, so a web page elsewhere cannot reach
the fleet through a name it points at 127.0.0.1 (DNS rebinding)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Collection
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope

from crs_controller.app.dashboard.access import Access, admit
from crs_controller.app.dashboard.view import View, changes
from crs_controller.app.serving import App, Headers, lifespan, respond

ASSETS = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS: Headers = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
)
# Changes a follower may be behind by; one further behind is closed, and its browser
# reconnects and starts again from a snapshot.
BACKLOG = 64
# A comment line this often keeps proxies and the browser from closing a quiet stream.
KEEP_ALIVE = 15.0
# Said to a request without the token or its cookie, or with a wrong one.
REFUSED = "open the URL crs-controller dashboard printed: this page needs its token\n"

# The binding's record of one CRS on one cluster: (namespace, cluster, crs) -> record.
Lookup = Callable[[str, str, str], dict[str, Any] | None]


def asset(name: str) -> bytes:
    """One of the page's files, as the package ships it."""
    return (resources.files("crs_controller.app.dashboard") / "static" / name).read_bytes()


def event(name: str, data: object) -> bytes:
    """One server-sent event; JSON holds no raw newline, so ``data`` is one line."""
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class Feed:
    """The view now and the pages following it: each gets the snapshot when it
    starts, then every change in order."""

    def __init__(self) -> None:
        self.view: View = {"crs": {}, "cells": {}, "clusters": {}}
        self.followers: set[asyncio.Queue[bytes | None]] = set()
        self._snapshot: bytes | None = None  # the view encoded, once per view

    def publish(self, view: View) -> None:
        delta = changes(self.view, view)
        self.view = view
        if delta is None:
            return
        self._snapshot = None
        message = event("delta", delta)
        for queue in list(self.followers):
            if queue.full():
                self._drop(queue)
            else:
                queue.put_nowait(message)

    def follow(self) -> tuple[bytes, asyncio.Queue[bytes | None]]:
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(BACKLOG + 1)
        self.followers.add(queue)
        if self._snapshot is None:
            self._snapshot = event("snapshot", self.view)
        return self._snapshot, queue

    def leave(self, queue: asyncio.Queue[bytes | None]) -> None:
        self.followers.discard(queue)

    def _drop(self, queue: asyncio.Queue[bytes | None]) -> None:
        self.followers.discard(queue)
        while not queue.empty():
            queue.get_nowait()
        queue.put_nowait(None)  # its stream ends


def page_app(feed: Feed, lookup: Lookup, hosts: Collection[str], access: Access) -> App:
    """The ASGI app of the page; ``hosts``: the Host headers it answers; ``access``:
    the token a request must hold."""
    files = {path: (asset(name), kind) for path, (name, kind) in ASSETS.items()}

    async def app(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
        elif scope["type"] == "http":
            await _answer(scope, receive, send, feed, lookup, hosts, access, files)
        else:
            await send({"type": "websocket.close", "code": 1000, "reason": None})

    return app


async def _answer(
    scope: HTTPScope,
    receive: ASGIReceiveCallable,
    send: ASGISendCallable,
    feed: Feed,
    lookup: Lookup,
    hosts: Collection[str],
    access: Access,
    files: dict[str, tuple[bytes, str]],
) -> None:
    host = dict(scope["headers"]).get(b"host", b"").decode("latin-1").lower()
    presented = [value.decode("latin-1") for name, value in scope["headers"] if name == b"cookie"]
    verdict = admit(access, scope["query_string"].decode("latin-1"), presented)
    path = scope["path"]
    if host not in hosts:
        await _plain(send, 403, "this page answers to its own address only\n")
    elif not verdict.allowed:
        await _plain(send, 403, REFUSED)
    elif scope["method"] != "GET":
        await _plain(send, 405, "read-only: GET only\n", ((b"allow", b"GET"),))
    elif verdict.by_token and path == "/":
        await _enter(send, access, verdict.rest)
    elif path in files:
        await respond(send, 200, files[path][0], files[path][1], SECURITY_HEADERS)
    elif path == "/events":
        await _stream(receive, send, feed)
    elif path == "/record":
        await _record(scope, send, lookup)
    else:
        await _plain(send, 404, "not found\n")


async def _enter(send: ASGISendCallable, access: Access, rest: str) -> None:
    """The page opened with its token: the cookie set, and on to the page without the
    token, so it stays in neither the address bar nor the history."""
    location = f"/?{rest}" if rest else "/"
    extra = ((b"location", location.encode()), (b"set-cookie", access.set_cookie()))
    await _plain(send, 303, "see /\n", extra)


async def _plain(send: ASGISendCallable, status: int, text: str, extra: Headers = ()) -> None:
    headers = (*SECURITY_HEADERS, *extra)
    await respond(send, status, text.encode(), "text/plain; charset=utf-8", headers)


async def _record(scope: HTTPScope, send: ASGISendCallable, lookup: Lookup) -> None:
    query = parse_qs(scope["query_string"].decode("latin-1"))
    asked = [query.get(name, [""])[0] for name in ("namespace", "cluster", "crs")]
    found = lookup(*asked) if all(asked) else None
    if found is None:
        await _plain(send, 404, "no record\n")
        return
    body = json.dumps(found).encode()
    await respond(send, 200, body, "application/json", SECURITY_HEADERS)


async def _stream(receive: ASGIReceiveCallable, send: ASGISendCallable, feed: Feed) -> None:
    """The snapshot, then each change, until the page goes away or falls behind."""
    snapshot, queue = feed.follow()
    gone = asyncio.create_task(_disconnected(receive))
    try:
        headers = [(b"content-type", b"text/event-stream"), *SECURITY_HEADERS]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        message: bytes | None = snapshot
        while message is not None and not gone.done():
            await send({"type": "http.response.body", "body": message, "more_body": True})
            message = await _next(queue, gone)
        with contextlib.suppress(Exception):
            await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        feed.leave(queue)
        gone.cancel()


async def _next(queue: asyncio.Queue[bytes | None], gone: asyncio.Task[None]) -> bytes | None:
    """The next change; a keep-alive comment when none came for a while; None once
    the page went away or the feed dropped it."""
    getting = asyncio.ensure_future(queue.get())
    done, _ = await asyncio.wait({getting, gone}, timeout=KEEP_ALIVE, return_when="FIRST_COMPLETED")
    if getting not in done:
        getting.cancel()
        return None if gone in done else b": keep-alive\n\n"
    return getting.result()


async def _disconnected(receive: ASGIReceiveCallable) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
