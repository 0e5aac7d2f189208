"""``crs-controller rollback CRS``: put the clusters a ClusterResourceSet selects back
on an earlier revision of its sources, as ``kubectl rollout undo`` does for a
Deployment: the last revision whose rollout completed and whose snapshot the
controller would use (newer completed ones it would refuse are skipped, saying why),
or ``--to-revision`` (one of ``crs-controller history``; a prefix naming one alone
will do). The clusters converge to it through the usual rollout (steps, health,
windows, budget; the clusters on the revision rolled back from first), from the
revision's snapshot, checked against its hash. The revision rolled back from is not
applied again until the sources change to another revision, or ``--resume``.

Before anything is written the snapshot is read and checked as the controller checks
it (``common.read_snapshot``: present, this CRS's, listing the resources
``spec.resources`` names now, its Secret half there when the CRS names Secrets,
hashing to the revision): a rollback the controller refuses would stay in force and
hold every selected cluster, so it is refused here instead.

The request is the CRS annotation ``addons.crs.dev/rollback:
"<sources' revision>/<revision>"`` (``.../resume`` for ``--resume``), written with the
resourceVersion that was read; the controller keeps the rollback in the status
(``status.rollout.rolledBackFrom``), so it survives restarts, holds on every replica
and is not undone by re-applying the same sources. Exit 2 for no such CRS, a revision
not in its history or whose snapshot the controller would refuse (no completed one
usable, without ``--to-revision``), or a CRS not in Reconcile mode."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Mapping

from crs_controller.app.commands.common import (
    OK,
    Subcommands,
    UsageError,
    add_cluster_access,
    add_namespace,
    annotate,
    command_parser,
    get_crs,
    guarded,
    management,
    printable,
    read_snapshot,
)
from crs_controller.clients.kube import KubeClient
from crs_controller.core.rollout.history import RESUME, ROLLBACK_ANNOTATION, request_for
from crs_controller.core.rollout.snapshots import SnapshotRefused
from crs_controller.core.spec.objects import CRS

EXAMPLES = """examples:
  crs-controller rollback cni -n fleet                          # the last completed one it can use
  crs-controller rollback cni -n fleet --to-revision xxh3:5f0c  # one of `history`
  crs-controller rollback cni -n fleet --resume                 # the sources' revision again

exit status: 0 asked (or nothing to do), 2 refused or an error
"""


def register(sub: Subcommands) -> None:
    parser = command_parser(
        sub,
        "rollback",
        __doc__,
        help="roll a ClusterResourceSet's clusters back to an earlier revision",
        epilog=EXAMPLES,
    )
    parser.add_argument("crs", help="the ClusterResourceSet")
    add_namespace(parser)
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--to-revision",
        metavar="HASH",
        help="the revision to go back to (default: the last one whose rollout completed"
        " and whose snapshot the controller would use)",
    )
    which.add_argument(
        "--resume",
        action="store_true",
        help="end the rollback: the sources' revision is rolled out again",
    )
    add_cluster_access(parser)
    parser.set_defaults(func=guarded("rollback", run))


def run(args: argparse.Namespace) -> int:
    print(printable(asyncio.run(_rollback(args))))
    return OK


async def _rollback(args: argparse.Namespace) -> str:
    client = management(args)  # settles args.namespace
    where = f"ClusterResourceSet {args.namespace}/{args.crs}"
    try:
        crs = await get_crs(client, args.namespace, args.crs)
        value, skipped = await _usable_request(client, crs, args, where)
        if value is None:
            return f"{where}: nothing rolled back, nothing to do"
        # Over what was read: a CRS whose sources moved on meanwhile is not touched.
        await annotate(client, crs, ROLLBACK_ANNOTATION, value, where)
    finally:
        await client.close()
    if value.endswith(f"/{RESUME}"):
        return f"{where}: resuming revision {value.split('/')[0]}"
    back, to = value.split("/")
    return f"{where}: rolling back from revision {back} to {to}{_skipped(skipped)}"


async def _usable_request(
    client: KubeClient, crs: CRS, args: argparse.Namespace, where: str
) -> tuple[str | None, list[str]]:
    """The request to write, once the snapshot of the revision it goes to passes the
    check the controller makes before using it (``read_snapshot``), and why newer
    completed revisions were skipped. A revision named with ``--to-revision`` whose
    snapshot is refused is refused (exit 2); without it, the newest completed revision
    whose snapshot passes: the controller would hold every selected cluster for a
    rollback to one it refuses."""
    refused: dict[str, str] = {}
    while True:
        value = _request(crs, args, where, refused)
        if value is None or value.endswith(f"/{RESUME}"):
            return value, list(refused.values())
        to = value.split("/")[1]
        try:
            await read_snapshot(client, crs, to)
        except SnapshotRefused as exc:
            if args.to_revision is not None:
                raise UsageError(f"{where}: {exc}") from None
            refused[to] = str(exc)
            continue
        return value, list(refused.values())


def _request(
    crs: CRS, args: argparse.Namespace, where: str, refused: Mapping[str, str]
) -> str | None:
    if crs.model is None or crs.model.spec.mode != "Reconcile":
        raise UsageError(f"{where}: a rollback needs mode: Reconcile")
    status = crs.status
    back = status.rollout.rolled_back_from if status.rollout else None
    try:
        return request_for(
            status.revision,
            back,
            status.history or [],
            args.to_revision,
            resume=args.resume,
            unusable=refused,
        )
    except ValueError as exc:
        raise UsageError(f"{where}: {exc}{_skipped(list(refused.values()))}") from None


def _skipped(reasons: list[str]) -> str:
    """Which completed revisions the default target skipped, and why."""
    if not reasons:
        return ""
    return f" (skipped, the controller would refuse them: {'; '.join(reasons)})"
