"""``crs-controller approve CRS``: let a rollout go on past a step with ``approval:
Manual``. Before such a step starts, the controller sets the CRS's
``status.rollout.phase`` to AwaitingApproval and ``status.rollout.step`` to the
step that waits; the approval is the CRS annotation
``addons.crs.dev/approve: "<revision>/<step>"``, good for that revision and step
only (a newer revision waits again).

The annotation is written for the revision in ``status.revision`` and the step that
waits, with the resourceVersion that was read: a CRS that changed in between is not
approved (run again). The same approval given again (the annotation names that
revision and the step asked, or the step the rollout is at) writes nothing and
exits 0, whatever the phase: the controller moves the rollout on once it reads the
approval. Anything else is refused with exit code 2: no such CRS, a rollout that
does not wait for an approval, ``--step`` naming another step."""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass

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
from crs_controller.core.api.models import (
    ClusterResourceSetStatus,
)
from crs_controller.core.rollout.plan import APPROVE_ANNOTATION

AWAITING_APPROVAL = "AwaitingApproval"

EXAMPLES = """examples:
  crs-controller approve cni -n fleet              # the step that waits, current revision
  crs-controller approve cni -n fleet --step 2     # only if step 2 is the one that waits

exit status: 0 approved (or already approved), 2 refused or an error
"""


@dataclass(frozen=True)
class Approve:
    """Approve this step of this revision."""

    revision: str
    step: int

    @property
    def annotation(self) -> str:
        return f"{self.revision}/{self.step}"


@dataclass(frozen=True)
class Approved:
    """This step of this revision is approved already: nothing to write."""

    revision: str
    step: int


@dataclass(frozen=True)
class Refuse:
    """Nothing to approve, and why (one line for the user)."""

    reason: str


def decide(
    status: ClusterResourceSetStatus, step: int | None, approval: str | None = None
) -> Approve | Approved | Refuse:
    """What ``approve [--step step]`` does for a CRS with this status and this
    approval annotation. The same approval given again is Approved first, whatever
    the phase: the controller moves the rollout on once it reads the approval."""
    rollout = status.rollout
    asked = step if step is not None else (rollout.step if rollout is not None else None)
    same = Approve(status.revision, asked) if status.revision and asked is not None else None
    if same is not None and approval == same.annotation:
        return Approved(same.revision, same.step)
    if rollout is None:
        return Refuse("no rollout in its status: nothing waits for an approval")
    if rollout.phase != AWAITING_APPROVAL:
        return Refuse(f"the rollout is {rollout.phase}, not {AWAITING_APPROVAL}")
    if step is not None and step != rollout.step:
        return Refuse(f"step {rollout.step} waits for approval, not step {step}")
    if not status.revision:
        return Refuse("no revision in its status: the controller has not written one yet")
    return Approve(status.revision, rollout.step)


def register(sub: Subcommands) -> None:
    parser = command_parser(
        sub,
        "approve",
        __doc__,
        help="approve the rollout step of a ClusterResourceSet that waits for it",
        epilog=EXAMPLES,
    )
    parser.add_argument("crs", help="the ClusterResourceSet")
    add_namespace(parser)
    parser.add_argument(
        "--step",
        type=_step,
        metavar="N",
        help="approve only if step N (1-based) is the one that waits (default: whichever waits)",
    )
    add_cluster_access(parser)
    parser.set_defaults(func=guarded("approve", run))


def _step(text: str) -> int:
    try:
        step = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a step number: {text!r}") from None
    if step < 1:
        raise argparse.ArgumentTypeError("steps are numbered from 1")
    return step


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_approve(args))


async def _approve(args: argparse.Namespace) -> int:
    client = management(args)  # settles args.namespace
    where = f"ClusterResourceSet {args.namespace}/{args.crs}"
    try:
        crs = await get_crs(client, args.namespace, args.crs)
        decision = decide(crs.status, args.step, crs.meta.annotations.get(APPROVE_ANNOTATION))
        if isinstance(decision, Refuse):
            raise UsageError(f"{where}: {decision.reason}")
        done = f"step {decision.step} of revision {decision.revision}"
        done += f" for {crs.namespace}/{crs.name}"
        if isinstance(decision, Approved):
            print(printable(f"already approved: {done}"))
            return OK
        await annotate(client, crs, APPROVE_ANNOTATION, decision.annotation, where)
    finally:
        await client.close()
    print(printable(f"approved {done}"))
    return OK
