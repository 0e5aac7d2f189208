"""``crs-controller rollback CRS``: put the clusters a ClusterResourceSet selects back
on an earlier revision of its sources, as ``kubectl rollout undo`` does for a
Deployment: the last revision whose rollout completed, or ``--to-revision`` (one of
``crs-controller history``; a prefix naming one alone will do). The clusters
converge to it through the usual rollout (steps, health, windows, budget; the
clusters on the revision rolled back from first), from the revision's snapshot,
checked against its hash. The revision rolled back from is not applied again until
the sources change to another revision, or ``--resume``.

The request is the CRS annotation ``addons.crs.dev/rollback:
"<sources' revision>/<revision>"`` (``.../resume`` for ``--resume``), written with the
resourceVersion that was read; the controller keeps the rollback in the status
(``status.rollout.rolledBackFrom``), so it survives restarts, holds on every replica
and is not undone by re-applying the same sources. Exit 2 for no such CRS, a revision
not in its history or without a snapshot, or a CRS not in Reconcile mode."""

from __future__ import annotations

import argparse
import asyncio

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
)
from crs_controller.clients.kube import KubeClient
from crs_controller.core.rollout.history import ROLLBACK_ANNOTATION, request_for
from crs_controller.core.rollout.snapshots import snapshot_name
from crs_controller.core.spec.objects import CRS

EXAMPLES = """examples:
  crs-controller rollback cni -n fleet                          # the last completed revision
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
        help="the revision to go back to (default: the last one whose rollout completed)",
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
        value = _request(crs, args, where)
        if value is None:
            return f"{where}: nothing rolled back, nothing to do"
        if not value.endswith("/resume"):
            await _has_snapshot(client, crs, value.split("/")[1], where)
        # Over what was read: a CRS whose sources moved on meanwhile is not touched.
        await annotate(client, crs, ROLLBACK_ANNOTATION, value, where)
    finally:
        await client.close()
    if value.endswith("/resume"):
        return f"{where}: resuming revision {value.split('/')[0]}"
    back, to = value.split("/")
    return f"{where}: rolling back from revision {back} to {to}"


def _request(crs: CRS, args: argparse.Namespace, where: str) -> str | None:
    if crs.model is None or crs.model.spec.mode != "Reconcile":
        raise UsageError(f"{where}: a rollback needs mode: Reconcile")
    status = crs.status
    back = status.rollout.rolled_back_from if status.rollout else None
    try:
        return request_for(
            status.revision, back, status.history or [], args.to_revision, resume=args.resume
        )
    except ValueError as exc:
        raise UsageError(f"{where}: {exc}") from None


async def _has_snapshot(client: KubeClient, crs: CRS, revision: str, where: str) -> None:
    """Refuse a revision whose snapshot is gone (too large to keep, or deleted)."""
    name = snapshot_name(crs.name, revision)
    if await client.get("v1", "ConfigMap", name, crs.namespace) is None:
        raise UsageError(f"{where}: revision {revision} has no snapshot (ConfigMap {name})")
