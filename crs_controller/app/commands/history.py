"""``crs-controller history CRS``: the revisions a ClusterResourceSet keeps
(``status.history``, at most ``spec.revisionHistoryLimit``), oldest first, with when
each was first seen and how its rollout ended, as ``kubectl rollout history`` lists
a Deployment's. The revision rolled out now is marked, and during a rollback the
sources' revision rolled back from. Exit 2 when there is no such CRS."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from crs_controller.app.commands.common import (
    OK,
    Subcommands,
    add_cluster_access,
    add_namespace,
    add_output,
    command_parser,
    emit,
    format_table,
    get_crs,
    guarded,
    management,
)
from crs_controller.core.api.models import to_api
from crs_controller.core.spec.objects import CRS

EXAMPLES = """examples:
  crs-controller history cni -n fleet
  crs-controller history cni -n fleet -o yaml

exit status: 0 shown, 2 an error (no such ClusterResourceSet)
"""

HEADER = ("REVISION", "FIRST SEEN", "OUTCOME", "NOW")


def register(sub: Subcommands) -> None:
    parser = command_parser(
        sub,
        "history",
        __doc__,
        help="list the revisions a ClusterResourceSet keeps to roll back to",
        epilog=EXAMPLES,
    )
    parser.add_argument("crs", help="the ClusterResourceSet")
    add_namespace(parser)
    add_output(parser)
    add_cluster_access(parser)
    parser.set_defaults(func=guarded("history", run))


def run(args: argparse.Namespace) -> int:
    crs = asyncio.run(read_crs(args))
    emit(records(crs), args.output, table)
    return OK


async def read_crs(args: argparse.Namespace) -> CRS:
    """The CRS ``args`` names; UsageError (exit 2) when there is none."""
    client = management(args)  # settles args.namespace
    try:
        return await get_crs(client, args.namespace, args.crs)
    finally:
        await client.close()


def records(crs: CRS) -> list[dict[str, Any]]:
    """The history as the status has it, each entry saying whether it is rolled out
    now (``now``: rolledOut, or rolledBackFrom for the sources' revision)."""
    status = crs.status
    back = status.rollout.rolled_back_from if status.rollout else None
    shown = []
    for record in status.history or []:
        entry = to_api(record)
        if record.revision == status.revision:
            entry["now"] = "rolledOut"
        elif record.revision == back:
            entry["now"] = "rolledBackFrom"
        shown.append(entry)
    return shown


def table(entries: list[dict[str, Any]]) -> str:
    now = {"rolledOut": "rolled out", "rolledBackFrom": "rolled back from"}
    rows = [
        (e["revision"], e["firstSeen"], e["outcome"], now.get(e.get("now", ""), ""))
        for e in entries
    ]
    return format_table(HEADER, rows)
