"""``crs-controller dashboard``: the fleet page, served locally from the operator's
kubeconfig, read-only and live. Every ClusterResourceSet with its revision, rollout
phase and step, what it waits for and its clusters counted by state; one CRS's
clusters grouped by rollout step, each with its state, reason and binding record;
one cluster's CRSs. It reads what ``status`` reads, kept current by watches (no
polling), and folds it on this side: the browser only draws.

It listens on 127.0.0.1 unless told otherwise and never writes to the API. It
answers only the URL it prints, which holds a new token each run (others on the same
host cannot read the page); another address than loopback is warned about, as the
page is served without TLS. The page runs only its own script (a
Content-Security-Policy) and shows every name, label and message as text."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from datetime import UTC, datetime
from functools import partial

from crs_controller.app import serving
from crs_controller.app.commands.common import (
    OK,
    Subcommands,
    UsageError,
    add_cluster_access,
    add_namespace,
    command_parser,
    guarded,
    management,
    warn,
)
from crs_controller.app.commands.status import FleetState, watched
from crs_controller.app.dashboard import view
from crs_controller.app.dashboard.access import TOKEN_PARAMETER, Access
from crs_controller.app.dashboard.server import Feed, Lookup, page_app
from crs_controller.clients.kube import KubeClient
from crs_controller.core.notifications.delivery import loopback

EXAMPLES = """examples:
  crs-controller dashboard -n fleet                  # http://127.0.0.1:8080/?token=…
  crs-controller dashboard -A --address 127.0.0.1:9000
  crs-controller dashboard --kubeconfig mgmt.kubeconfig --context prod
"""
DEFAULT_ADDRESS = "127.0.0.1:8080"
# Changes arriving together are drawn together: a rollout step moving dozens of
# bindings at once makes one delta, not dozens.
SETTLE = 0.2
# Waiting times ("window until 22:00Z") are told again this often with no change.
RETELL = 30.0


def register(sub: Subcommands) -> None:
    parser = command_parser(
        sub,
        "dashboard",
        __doc__,
        help="serve a live, read-only page of every CRS on every cluster",
        epilog=EXAMPLES,
    )
    parser.add_argument(
        "--address",
        default=DEFAULT_ADDRESS,
        metavar="HOST:PORT",
        help="where to listen (default: %(default)s; port 0: any free port)",
    )
    add_namespace(parser)
    parser.add_argument(
        "-A", "--all-namespaces", action="store_true", help="every namespace (the page filters)"
    )
    add_cluster_access(parser)
    parser.set_defaults(func=guarded("dashboard", run))


def address(text: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets) as (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise UsageError(f"--address {text!r}: expected HOST:PORT, e.g. {DEFAULT_ADDRESS}")
    return host.strip("[]"), int(port)


def netloc(host: str, port: int) -> str:
    """HOST:PORT as a URL and a Host header write it (an IPv6 host in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def hosts(host: str, port: int) -> frozenset[str]:
    """The Host headers a browser sends for the address served (and for localhost,
    when it is a loopback address)."""
    names = {netloc(host, port)}
    if host in ("127.0.0.1", "::1", "localhost"):
        names |= {f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"}
    return frozenset(name.lower() for name in names)


def page_url(host: str, port: int, access: Access) -> str:
    """The URL to open: the address served, with this run's token."""
    return f"http://{netloc(host, port)}/?{TOKEN_PARAMETER}={access.token}"


def run(args: argparse.Namespace) -> int:
    host, port = address(args.address)
    if not loopback(host):
        warn(
            "dashboard",
            f"--address {args.address} is not a loopback address and the page is served "
            "without TLS: anyone on that network who sees the URL, or its traffic, can "
            "read everything this kubeconfig can list",
        )
    return asyncio.run(_dashboard(args, host, port))


async def _dashboard(args: argparse.Namespace, host: str, port: int) -> int:
    client = management(args)  # settles args.namespace
    namespace = None if args.all_namespaces else args.namespace
    try:
        state = await FleetState.load(client, namespace)
        feed = Feed()
        await _refresh(client, state, feed)
        served, access = await serve_page(feed, partial(view.record, state), host, port)
        url = page_url(host, served.port, access)
        print(f"Serving the fleet page on {url} (Ctrl-C to stop)")
        sys.stdout.flush()
        try:
            await _follow(client, state, feed)
        finally:
            await served.close()
    finally:
        await client.close()
    return OK


async def serve_page(
    feed: Feed, lookup: Lookup, host: str, port: int
) -> tuple[serving.Served, Access]:
    """The page served on ``host:port`` with a new token: the server, and the token."""
    allowed: set[str] = set()  # port 0 is known once bound: filled then
    access = Access()
    app = page_app(feed, lookup, allowed, access)
    # No read timeout: a page following the feed sends nothing after its request.
    served = await serving.launch(app, serving.config(read_timeout=None), host, port, "dashboard")
    allowed |= hosts(host, served.port)
    access.serve_on(served.port)
    return served, access


async def _refresh(client: KubeClient, state: FleetState, feed: Feed) -> None:
    """Fold the view again and publish it. A fleet of thousands takes a while to
    fold: it is folded from a copy in a thread, so the page, its streams and the
    watches go on meanwhile."""
    await state.hash_sources(client, None)
    held = state.copy()
    built = await asyncio.to_thread(view.build, held, datetime.now(UTC))
    state.keep_parsed(held)
    feed.publish(built)


async def _follow(client: KubeClient, state: FleetState, feed: Feed) -> None:
    """Fold each change the watches bring into the view, until interrupted."""
    changes = watched(client, state, tick=RETELL, settle=SETTLE)
    async with contextlib.aclosing(changes) as told:
        async for _ in told:
            await _refresh(client, state, feed)
