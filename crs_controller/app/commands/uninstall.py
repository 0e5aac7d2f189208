"""``crs-controller uninstall``: delete the ClusterResourceSets and wait until the
running controller has cleaned up after them (their ``addons.crs.dev/finalizer``
gone: bindings released, the objects of ``deletionPolicy: Delete`` sets removed from
the workload clusters); only then is it safe to delete the release, which
``--delete-release FILE`` does in a safe order (the controller's Deployment first,
its rights next, the CRDs last and the bindings CRD last of all).

Nothing is deleted without ``--yes``: the command says what it would do. It refuses
(exit code 2) when no controller holds the leader Lease, since nothing would clean
up, and names ``--controller-namespace`` (the Lease is looked for in crs-system, or
in the namespace of the ``--delete-release`` file's controller); ``--force`` then
removes the finalizers itself and lists what that leaves behind: the objects on the
workload clusters, and the bindings that still record them."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field

from pydantic import ValidationError

from crs_controller.app.commands.common import (
    FINDING,
    OK,
    Obj,
    Subcommands,
    UsageError,
    add_cluster_access,
    add_namespace,
    command_parser,
    duration,
    guarded,
    listed,
    management,
    metadata,
    named,
    printable,
    read_documents,
)
from crs_controller.app.commands.release_deletion import (
    controller_namespaces,
    delete_release,
    plan_release,
)
from crs_controller.clients.kube import KubeClient
from crs_controller.core.api.clusters import CLUSTER_GROUP, PAUSED_ANNOTATION
from crs_controller.core.api.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_BINDING_KIND,
    CLUSTER_RESOURCE_SET_KIND,
    FINALIZER,
)
from crs_controller.core.errors import APIError, Conflict, NotFound
from crs_controller.core.membership.lease import LeaseRecord
from crs_controller.core.membership.shard import Members
from crs_controller.core.spec.objects import deletion_spec, parse_cluster
from crs_controller.core.state.bindings import parse_binding
from crs_controller.core.values.dependencies import removal_order
from crs_controller.engine.io.waiting import LoopClock, WaitingClock, sleep_for

LEASE_API = "coordination.k8s.io/v1"
LEADER_LEASE = "crs-controller"  # the Lease the controller's leader holds
LEASE_POLL = 1.0  # seconds between reads of it while it is not seen renewed
DEFAULT_LEASE = 15.0  # seconds, for a Lease stating no duration
SYSTEM_NAMESPACE = "crs-system"  # where config/default runs the controller
FIELD_MANAGER = "crs-controller"
POLL_SECONDS = 1.0
NAMESPACES_NAMED = 5  # the namespaces still holding sets that are named; the rest counted

EXAMPLES = """examples:
  crs-controller uninstall -A                                   # what it would delete
  crs-controller uninstall -A --yes                             # delete, wait for cleanup
  crs-controller uninstall -A --yes --delete-release out/install.yaml
  crs-controller uninstall -n fleet --yes --timeout 5m
  crs-controller uninstall -A --yes --force                     # no controller: drop finalizers

exit status: 0 cleaned up (or nothing to do), 1 ClusterResourceSets still left at
--timeout, 2 refused (no controller holds the leader Lease; --delete-release while
a ClusterResourceSet is left in any namespace) or an error
"""


# --- pure decisions -------------------------------------------------------------------


def holding(lease: Obj | None) -> LeaseRecord | None:
    """The leader Lease if someone holds it (not absent nor released)."""
    record = LeaseRecord.parse(lease) if lease is not None else None
    return record if record is not None and record.holder else None


async def leader(
    read: Callable[[], Awaitable[Obj | None]], clock: WaitingClock, poll: float = LEASE_POLL
) -> str | None:
    """Who holds the leader Lease, judged on this machine's own clock, as a standby
    judges it: a holder is named once the Lease is seen renewed (or taken), and nobody
    once it stays unchanged for its lease duration, or is absent or released. Its
    ``renewTime`` is never compared with our wall clock, which may be skewed. A live
    holder renews every few seconds, so this answers within about that; a holder that
    is gone costs the lease duration."""
    first = holding(await read())
    if first is None:
        return None
    seen = Members()
    seen.observe(first.holder, first.renew_marker, first.duration or DEFAULT_LEASE, clock.now())
    while first.holder in seen.live(clock.now()):
        await sleep_for(clock, poll)
        later = holding(await read())
        if later is None:
            return None
        if (later.holder, later.renew_marker) != (first.holder, first.renew_marker):
            return later.holder
    return None


@dataclass(frozen=True)
class Wait:
    """Delete the sets and wait for the controller ``holder`` to clean up."""

    holder: str


@dataclass(frozen=True)
class Force:
    """Delete the sets and remove their finalizers: nothing cleans up."""


@dataclass(frozen=True)
class Refuse:
    reason: str


def decide(holder: str | None, *, force: bool, lease: str) -> Wait | Force | Refuse:
    """What ``uninstall`` does with ClusterResourceSets to delete."""
    if force:
        return Force()
    if holder is None:
        return Refuse(
            f"no controller holds the leader Lease {lease}: nothing would remove the "
            f"ClusterResourceSets' finalizer {FINALIZER} (a controller running in another "
            "namespace: --controller-namespace NS; none running, or one without leader "
            "election: start it with --leader-elect; --force removes the finalizer but "
            "cleans nothing up)"
        )
    return Wait(holder)


def release_verdict(crss: Sequence[Obj]) -> str:
    """Whether the release can be deleted, given every namespace's sets: only once
    none is left in any namespace (the CRDs hold them all)."""
    if not crss:
        return "no ClusterResourceSet is left in any namespace: the release can be deleted now"
    held = Counter(str(metadata(c).get("namespace", "")) for c in crss)
    named = sorted(held)
    shown = ", ".join(named[:NAMESPACES_NAMED])
    if len(named) > NAMESPACES_NAMED:
        shown += f" and {len(named) - NAMESPACES_NAMED} more"
    return (
        f"{len(crss)} ClusterResourceSet(s) are still in namespace(s) {shown}: "
        "do not delete the release yet (uninstall -A deletes every namespace's)"
    )


def kept(crs: Obj) -> Obj:
    """What uninstall keeps of a listed set: its name and deletion (``named``), the
    names it depends on (dependents are deleted first) and what says why its deletion
    may wait (paused; its Ready condition), never its content."""
    meta, status = metadata(crs), crs.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    ready = [c for c in conditions or [] if isinstance(c, dict) and c.get("type") == "Ready"]
    return {
        **named(crs),
        "dependsOn": list(deletion_spec(crs).depends_on),
        "paused": PAUSED_ANNOTATION in (meta.get("annotations") or {}),
        "ready": {k: str(ready[0].get(k, "")) for k in ("reason", "message")} if ready else {},
    }


def deletion_order(crss: Sequence[Obj]) -> list[Obj]:
    """The sets (as ``kept`` keeps them) in the order they are deleted: in each
    namespace, a set that depends on another before it, as the controller removes
    their objects (the others by name)."""
    by_key = {"/".join(_key(c)): c for c in crss}
    graph = {
        key: [f"{_key(crs)[0]}/{name}" for name in crs.get("dependsOn", [])]
        for key, crs in by_key.items()
    }
    return [by_key[key] for key in removal_order(by_key, graph)]


def why_waiting(crs: Obj, left: Sequence[Obj]) -> str:
    """Why the deletion of ``crs`` (as ``kept`` keeps it) may be waiting, among the
    sets ``left``: paused, a dependent of it still there, or what its Ready
    condition says."""
    namespace, name = _key(crs)
    if crs.get("paused"):
        return f"blocked: annotation {PAUSED_ANNOTATION} is set (nothing goes until it is removed)"
    dependents = [
        "/".join(_key(o))
        for o in left
        if _key(o)[0] == namespace and name in o.get("dependsOn", [])
    ]
    if dependents:
        return f"waits for {', '.join(dependents)}, which depend(s) on it, to be cleaned up first"
    ready = crs.get("ready") or {}
    if ready.get("reason") == "InvalidSpec" and ready.get("message", "").startswith(
        "deletion waits"
    ):
        return f"blocked: {ready['message']}"
    if ready.get("reason"):
        return f"Ready {ready['reason']}: {ready.get('message', '')}"
    return "no status yet"


@dataclass(frozen=True)
class Leftover:
    """What a forced removal leaves of one set on one cluster."""

    crs: str  # namespace/name
    binding: str  # namespace/name of the ClusterResourceSetBinding
    objects: tuple[str, ...]


def leftovers(bindings: Iterable[Obj], crss: set[tuple[str, str]]) -> list[Leftover]:
    """The inventory the bindings keep for the sets ``crss`` (namespace, name)."""
    found = []
    for raw in bindings:
        try:
            binding = parse_binding(raw)
        except ValidationError:
            continue  # not one the controller would read either
        if binding is None:
            continue
        namespace = binding.metadata.namespace or ""
        for entry in binding.spec.bindings:
            if (namespace, entry.cluster_resource_set_name) not in crss:
                continue
            objects = tuple(str(o) for r in entry.resources for o in r.objects)
            where = f"{namespace}/{binding.metadata.name}"
            found.append(Leftover(f"{namespace}/{entry.cluster_resource_set_name}", where, objects))
    return found


def describe_leftovers(found: Sequence[Leftover]) -> list[str]:
    """The lines ``--force`` prints: every object left on a workload cluster and where
    its record stays."""
    lines = []
    for left in found:
        lines.append(
            f"left behind by {left.crs}: {len(left.objects)} object(s) stay on the workload "
            f"cluster of ClusterResourceSetBinding {left.binding}, which keeps their "
            "inventory while the bindings CRD exists"
        )
        lines += [f"  {name}" for name in left.objects]
    if found:
        lines.append(
            f"those objects carry the field manager {FIELD_MANAGER} in their managedFields; "
            "delete them by hand where deletionPolicy was Delete (docs/install.md#uninstall)"
        )
    return lines


# --- the command ------------------------------------------------------------------------


def register(sub: Subcommands) -> None:
    parser = command_parser(
        sub,
        "uninstall",
        __doc__,
        help="delete the ClusterResourceSets, wait for the controller's cleanup",
        epilog=EXAMPLES,
    )
    add_namespace(parser)
    parser.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="every namespace (needed with --delete-release)",
    )
    parser.add_argument("--yes", action="store_true", help="delete (default: only say what)")
    parser.add_argument(
        "--timeout",
        type=duration,
        default=600.0,
        metavar="DURATION",
        help="how long to wait for the cleanup (default: 10m)",
    )
    parser.add_argument(
        "--force", action="store_true", help="remove the finalizers: nothing is cleaned up"
    )
    parser.add_argument(
        "--delete-release",
        metavar="FILE",
        help="then delete the objects of this release file in a safe order (needs -A)",
    )
    parser.add_argument(
        "--controller-namespace",
        metavar="NS",
        help="where the controller's leader Lease is (default: the namespace of the "
        f"--delete-release file's controller Deployment, else {SYSTEM_NAMESPACE})",
    )
    add_cluster_access(parser)
    parser.set_defaults(func=guarded("uninstall", run))


def run(args: argparse.Namespace) -> int:
    if args.delete_release and not args.all_namespaces:
        raise UsageError("--delete-release needs -A: the CRDs hold every namespace's sets")
    release = (
        [doc for _, doc in read_documents([args.delete_release])] if args.delete_release else []
    )
    args.controller_namespace = controller_namespace(args.controller_namespace, release)
    return asyncio.run(_uninstall(args, release))


def controller_namespace(given: str | None, release: Sequence[Obj]) -> str:
    """Where the leader Lease is looked for: ``given`` (--controller-namespace), else
    the namespace of the release file's controller Deployment, else crs-system;
    UsageError when the release runs controllers in several namespaces."""
    if given is not None:
        return given
    found = sorted(controller_namespaces(release))
    if len(found) > 1:
        raise UsageError(
            f"--delete-release runs the controller in {len(found)} namespaces "
            f"({', '.join(found)}): name the one to watch with --controller-namespace"
        )
    return found[0] if found else SYSTEM_NAMESPACE


def _out(message: str) -> None:
    print(printable(message), flush=True)


@dataclass
class _Run:
    """One uninstall: the client, the scope and the options; the clock the leader
    Lease is watched on."""

    client: KubeClient
    namespace: str | None
    args: argparse.Namespace
    clock: WaitingClock = field(default_factory=LoopClock)

    async def crss(self) -> list[Obj]:
        """The sets in scope, as ``kept`` keeps them: read page by page, so a tenant's
        large sets do not stop the command for every namespace."""
        found: list[Obj] = []
        async for page, _ in self.client.pages(
            API_VERSION, CLUSTER_RESOURCE_SET_KIND, self.namespace
        ):
            found += [kept(obj) for obj in page]
        return found

    async def every_crs(self) -> list[Obj] | None:
        """The sets of every namespace, by name; None when this user may not list
        them all."""
        try:
            return await listed(self.client, API_VERSION, CLUSTER_RESOURCE_SET_KIND, None)
        except APIError as exc:
            if exc.status != 403:
                raise
            return None

    async def left_behind(self, crss: set[tuple[str, str]]) -> list[Leftover]:
        """What the bindings in scope keep for the sets ``crss``, read page by page."""
        found: list[Leftover] = []
        pages = self.client.pages(API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, self.namespace)
        async for page, _ in pages:
            found += leftovers(page, crss)
        return found

    async def refused(self) -> dict[str, str]:
        """Why the controller refuses each Cluster in scope it refuses (its labels over
        the bound), by namespace/name, as its binding is named: it leaves such a
        Cluster alone but for the entries of sets being deleted. One LIST, page by
        page and of metadata alone (the labels say it), however many bindings are
        left; none refused when this user may not list them."""
        found: dict[str, str] = {}
        try:
            version = await self.client.preferred_version(CLUSTER_GROUP)
            api = version or f"{CLUSTER_GROUP}/v1beta1"
            pages = self.client.pages(api, "Cluster", self.namespace, metadata_only=True)
            async for page, _ in pages:
                for raw in page:
                    cluster = parse_cluster(raw)
                    if cluster.refused_alive and cluster.problem is not None:
                        found[f"{cluster.namespace}/{cluster.name}"] = cluster.problem
        except APIError:
            return {}
        return found

    async def holder(self) -> str | None:
        return await leader(self._lease, self.clock)

    async def _lease(self) -> Obj | None:
        return await self.client.get(
            LEASE_API, "Lease", LEADER_LEASE, self.args.controller_namespace
        )


async def _uninstall(args: argparse.Namespace, release: list[Obj]) -> int:
    client = management(args)
    try:
        work = _Run(client, None if args.all_namespaces else args.namespace, args)
        code = await _sets(work)
        if code == OK and release:
            if not args.yes:
                await plan_release(client, release)
            else:
                await delete_release(client, release)
        return code
    finally:
        await client.close()


async def _sets(work: _Run) -> int:
    crss = await work.crss()
    if not crss:
        return await _gone(work, "no ClusterResourceSets left")
    lease = f"{work.args.controller_namespace}/{LEADER_LEASE}"
    decision = decide(await work.holder(), force=work.args.force, lease=lease)
    if isinstance(decision, Refuse):
        raise UsageError(decision.reason)
    if not work.args.yes:
        _out(f"would delete {len(crss)} ClusterResourceSet(s): {', '.join(_names(crss))}")
        _out("nothing deleted: run again with --yes")
        return OK
    for crs in deletion_order(crss):
        await _delete(work.client, crs)
    if isinstance(decision, Force):
        return await _force(work, crss)
    _out(f"deleted {len(crss)} ClusterResourceSet(s); {decision.holder} cleans up")
    return await _wait(work)


def _key(crs: Obj) -> tuple[str, str]:
    meta = metadata(crs)
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


def _names(crss: Iterable[Obj]) -> list[str]:
    return ["/".join(_key(c)) for c in crss]


async def _delete(client: KubeClient, crs: Obj) -> None:
    namespace, name = _key(crs)
    if metadata(crs).get("deletionTimestamp"):
        return
    await client.delete(API_VERSION, CLUSTER_RESOURCE_SET_KIND, name, namespace)


async def _wait(work: _Run) -> int:
    deadline = time.monotonic() + work.args.timeout
    told: list[str] = []
    while True:
        left = await work.crss()
        names = _names(left)
        if not left:
            return await _gone(work, "every ClusterResourceSet is cleaned up")
        if names != told:
            _out(f"waiting for the cleanup of {len(left)}: {', '.join(names)}")
            told = names
        if time.monotonic() >= deadline:
            return await _timed_out(work, left)
        await asyncio.sleep(POLL_SECONDS)


async def _gone(work: _Run, said: str) -> int:
    """Say the sets in scope are gone; with one namespace, the release can be deleted
    only if no other namespace has any either."""
    if work.namespace is None:
        _out(f"{said}: the release can be deleted now")
        return OK
    _out(f"{said} in {work.namespace}")
    every = await work.every_crs()
    if every is None:
        _out(
            "other namespaces' ClusterResourceSets cannot be listed (forbidden): delete the "
            "release only once no namespace has any (uninstall -A)"
        )
    else:
        _out(release_verdict(every))
    return OK


async def _timed_out(work: _Run, left: list[Obj]) -> int:
    keys = {_key(c) for c in left}
    _out(f"timed out: {len(left)} ClusterResourceSet(s) still being cleaned up")
    for crs in left:
        _out(f"  {'/'.join(_key(crs))}: {why_waiting(crs, left)}")
    left_behind = await work.left_behind(keys)
    refusals = await work.refused() if left_behind else {}
    for item in left_behind:
        said = f"  {item.crs} still bound in ClusterResourceSetBinding {item.binding}"
        if (refused := refusals.get(item.binding)) is not None:
            said += (
                f": its Cluster is refused ({refused}) and left alone but for the entries of "
                "sets being deleted: a paused set's stays, a Delete set's until its objects "
                "there are removed (the cluster out of reach, say)"
            )
        _out(said)
    _out(
        "their Conditions and the controller's log say more; do not delete the release yet "
        "(--force leaves behind every object of a set whose deletionPolicy is Delete)"
    )
    return FINDING


async def _force(work: _Run, crss: list[Obj]) -> int:
    for crs in crss:
        await _drop_finalizer(work.client, crs)
    _out(f"removed the finalizer {FINALIZER} from {len(crss)} ClusterResourceSet(s)")
    for line in describe_leftovers(await work.left_behind({_key(c) for c in crss})):
        _out(line)
    return OK


async def _drop_finalizer(client: KubeClient, crs: Obj) -> None:
    namespace, name = _key(crs)
    for _ in range(5):
        live = await client.get(API_VERSION, CLUSTER_RESOURCE_SET_KIND, name, namespace)
        if live is None:
            return
        meta = metadata(live)
        finalizers = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
        patch = {
            "metadata": {"resourceVersion": meta.get("resourceVersion"), "finalizers": finalizers}
        }
        try:
            await client.merge_patch(API_VERSION, CLUSTER_RESOURCE_SET_KIND, name, namespace, patch)
            return
        except Conflict:
            continue  # the controller or someone else wrote it meanwhile: read again
        except NotFound:
            return
    raise UsageError(f"ClusterResourceSet {namespace}/{name} keeps changing, run again")
