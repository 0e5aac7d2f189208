"""``crs-controller dashboard``: the fleet page, served locally from the operator's
kubeconfig, read-only and live. Every ClusterResourceSet with its revision, rollout
phase and step, what it waits for and its clusters counted by state; one CRS's
clusters grouped by rollout step, each with its state, reason and binding record;
one cluster's CRSs. It reads what ``status`` reads, kept current by watches (no
polling), and folds it on this side: the browser only draws.

It listens on 127.0.0.1 unless told otherwise and never writes to the API; the page
runs only its own script (a Content-Security-Policy) and shows every name, label and
message as text."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from datetime import UTC, datetime

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
)
from crs_controller.app.commands.status import FleetState, watched
from crs_controller.app.dashboard import view
from crs_controller.app.dashboard.server import Feed, page_app
from crs_controller.clients.kube import KubeClient

EXAMPLES = """examples:
  crs-controller dashboard -n fleet                  # http://127.0.0.1:8080/
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


def hosts(host: str, port: int) -> frozenset[str]:
    """The Host headers a browser sends for the address served (and for localhost,
    when it is a loopback address)."""
    shown = f"[{host}]" if ":" in host else host
    names = {f"{shown}:{port}"}
    if host in ("127.0.0.1", "::1", "localhost"):
        names |= {f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"}
    return frozenset(name.lower() for name in names)


def run(args: argparse.Namespace) -> int:
    host, port = address(args.address)
    return asyncio.run(_dashboard(args, host, port))


async def _dashboard(args: argparse.Namespace, host: str, port: int) -> int:
    client = management(args)  # settles args.namespace
    namespace = None if args.all_namespaces else args.namespace
    try:
        state = await FleetState.load(client, namespace)
        feed = Feed()
        await _refresh(client, state, feed)
        served = await _serve(feed, state, host, port)
        shown = f"[{host}]" if ":" in host else host
        print(f"Serving the fleet page on http://{shown}:{served.port}/ (Ctrl-C to stop)")
        sys.stdout.flush()
        try:
            await _follow(client, state, feed)
        finally:
            await served.close()
    finally:
        await client.close()
    return OK


async def _serve(feed: Feed, state: FleetState, host: str, port: int) -> serving.Served:
    allowed: set[str] = set()  # port 0 is known once bound: filled then
    app = page_app(feed, lambda ns, c, crs: view.record(state, ns, c, crs), allowed)
    # No read timeout: a page following the feed sends nothing after its request.
    served = await serving.launch(app, serving.config(read_timeout=None), host, port, "dashboard")
    allowed |= hosts(host, served.port)
    return served


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
