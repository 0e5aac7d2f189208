"""Who may read the fleet page: a request without the run's token or its cookie, or
with a wrong one, is refused (403, a short plain message, no data) on every path,
the page's files and its data alike; the page opened with the token sets an
HttpOnly, SameSite=Strict cookie for every path and redirects to itself without the
token, and that cookie is then served everything; another Host is still refused
first. Each run makes a new token of 256 bits, printed in the page's URL and nowhere
else: not in an answer, not in a log line. An address other than loopback is warned
about on stderr."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from crs_controller.app import cli
from crs_controller.app.commands.dashboard import page_url
from crs_controller.app.dashboard.access import Access, cookies
from crs_controller.app.dashboard.server import REFUSED, Feed, page_app
from crs_controller.core.notifications.delivery import loopback

from .test_dashboard import ACCESS, SIGNED_IN, Exchange, ask

DATA = ["/events", "/record?namespace=a&cluster=b&crs=c"]
PATHS = ["/", "/app.js", "/style.css", *DATA, "/nothing"]
WRONG = Access().token  # another run's


def joined(path: str, query: str) -> str:
    return f"{path}{'&' if '?' in path else '?'}{query}"


async def refused(path: str, cookie: str | None) -> Exchange:
    feed = Feed()
    feed.publish({"crs": {"fleet/cni": {"secretish": 1}}, "cells": {}, "clusters": {}})
    answer = await ask(feed, path, cookie=cookie)
    assert answer.status == 403, (path, cookie)
    assert answer.body == REFUSED.encode()
    assert answer.headers[b"content-type"].startswith(b"text/plain")
    assert b"set-cookie" not in answer.headers
    return answer


@pytest.mark.parametrize("path", PATHS)
async def test_a_request_without_the_token_or_its_cookie_is_refused(path: str) -> None:
    await refused(path, None)
    await refused(path, "")
    await refused(path, "theme=dark")


@pytest.mark.parametrize("path", PATHS)
async def test_a_wrong_token_or_cookie_is_refused(path: str) -> None:
    await refused(joined(path, f"token={WRONG}"), None)
    await refused(joined(path, "token="), None)
    await refused(joined(path, "token=%C3%A9t%C3%A9"), None)  # not ASCII: refused, no error
    await refused(path, f"{ACCESS.cookie}={WRONG}")
    await refused(path, f"{ACCESS.cookie}=")
    await refused(path, f"crs-dashboard-9090={ACCESS.token}")  # another port's cookie
    # The token in the query decides alone: a wrong one is refused beside a right cookie.
    await refused(joined(path, f"token={WRONG}"), SIGNED_IN)
    await refused(joined(path, f"token={ACCESS.token}&token={WRONG}"), None)


async def test_the_page_opened_with_its_token_sets_the_cookie_and_drops_the_token() -> None:
    answer = await ask(Feed(), f"/?token={ACCESS.token}", cookie=None)
    assert answer.status == 303
    assert answer.headers[b"location"] == b"/"
    cookie = answer.headers[b"set-cookie"].decode()
    pair, *flags = [part.strip() for part in cookie.split(";")]
    assert pair == f"crs-dashboard-8080={ACCESS.token}"
    assert sorted(flags) == ["HttpOnly", "Path=/", "SameSite=Strict"]
    assert ACCESS.token.encode() not in answer.body
    kept = await ask(Feed(), f"/?view=x&token={ACCESS.token}", cookie=None)
    assert kept.headers[b"location"] == b"/?view=x"

    # The browser sends the cookie back: the page and its data are served.
    page = await ask(Feed(), "/", cookie=pair)
    assert page.status == 200
    assert b'<script src="/app.js"' in page.body
    record = await ask(Feed(), DATA[1], cookie=f"theme=dark; {pair}")
    assert json.loads(record.body) == {"asked": ["a", "b", "c"]}


async def test_the_feed_is_served_to_the_cookie_and_to_the_token() -> None:
    feed = Feed()
    feed.publish({"crs": {"fleet/cni": {"n": 1}}, "cells": {}, "clusters": {}})
    for path, cookie in [("/events", SIGNED_IN), (f"/events?token={ACCESS.token}", None)]:
        app = page_app(feed, lambda *_: None, {"127.0.0.1:8080"}, ACCESS)
        exchange = Exchange(path, cookie=cookie)
        streaming = asyncio.create_task(app(exchange.scope, exchange.receive, exchange.send))
        await exchange.until(b"\n\n")
        assert exchange.status == 200
        assert exchange.body.startswith(b"event: snapshot\ndata: ")
        assert b"fleet/cni" in exchange.body
        exchange.gone.set()
        await streaming
    # A script may use the token without the redirect.
    record = await ask(Feed(), f"{DATA[1]}&token={ACCESS.token}", cookie=None)
    assert record.status == 200


async def test_another_host_is_refused_even_with_the_cookie() -> None:
    answer = await ask(Feed(), "/events", host="rebound.example:8080")
    assert answer.status == 403
    assert b"own address" in answer.body


def test_each_run_has_its_own_long_token_in_the_printed_url() -> None:
    first, second = Access(), Access()
    assert first.token != second.token
    assert len(first.token) >= 43  # 32 bytes, base64: 256 bits
    assert page_url("127.0.0.1", 8080, first) == f"http://127.0.0.1:8080/?token={first.token}"
    assert page_url("::1", 80, first).startswith("http://[::1]:80/?token=")
    assert first.token not in repr(first)


def test_cookies_are_read_as_browsers_send_them() -> None:
    assert cookies(["a=1; b=2", "c=3"]) == {"a": "1", "b": "2", "c": "3"}
    assert cookies(["a=1; a=2; junk; =x"]) == {"a": "1", "": "x"}


async def test_the_token_is_in_no_log_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for query in ("", f"token={WRONG}", f"token={ACCESS.token}"):
        for path in PATHS:
            for cookie in (None, SIGNED_IN, f"{ACCESS.cookie}={WRONG}"):
                await ask(Feed(), joined(path, query) if query else path, cookie=cookie)
    assert ACCESS.token not in caplog.text
    assert WRONG not in caplog.text


@pytest.mark.parametrize(
    ("host", "alone"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("bastion.example", False),
    ],
)
def test_only_loopback_addresses_are_this_machines_alone(host: str, alone: bool) -> None:
    assert loopback(host) is alone


@pytest.mark.parametrize(
    ("address", "warned"), [("0.0.0.0:0", True), ("10.0.0.5:0", True), ("127.0.0.1:0", False)]
)
def test_an_address_beyond_loopback_is_warned_about(
    address: str, warned: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "none.kubeconfig"  # the command stops there, before serving
    argv = ["dashboard", "--address", address, "--kubeconfig", str(missing)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert ("not a loopback address" in err) is warned, err
    assert ("without TLS" in err) is warned
