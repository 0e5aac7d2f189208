"""``crs-controller diff``: what the controller would change on one workload cluster
for a ClusterResourceSet now. Every object goes to the API server as a server-side
apply dry run (nothing is stored) and the answer is compared with the live object,
as a unified diff; objects the deletion policy would delete are listed as removed,
and a CustomResourceDefinition or Namespace it would keep instead (no allowDelete
names its kind) is named on stderr with why (-o json|yaml: "kept").

The content is what the controller applies: the sources, or while a rollback is in
force the snapshot of the revision it returned to (stderr says so). A snapshot that
cannot be read shows the sources, every change held: the controller holds the
cluster then, and never applies the revision rolled back from instead.

Objects are sent as the controller sends them: an object it created goes without
the fields spec.ignore leaves to others (an HPA's replicas), so those are no change;
one still to be created goes whole.

A Secret's values are masked as kubectl diff masks them: ``***``, or ``*** (before)``
and ``*** (after)`` for a value that changes.

What the controller would not do is not a change, and stderr says why: a Cluster
refused for its labels (over the bound) and not being deleted is left alone, nothing
applied nor removed; a cluster the CRS does not select gets nothing (with
deletionPolicy: Delete, what the CRS applied there before is listed as removed);
under mode ApplyOnce an object already on the cluster is never changed, and a
resource already applied is never applied again; an object changed or deleted on the
cluster since the controller applied the content it has now (drift) is left so
unless the CRS corrects drift (spec.driftDetection) or reapplies on an interval
(spec.reapplyInterval). A change the controller holds for now is shown, and stderr
says what holds it: a paused Cluster or CRS, a Cluster that holds updates, a paused
rollout, Cluster API upgrading the cluster, a rollback whose snapshot cannot be read
(-o json|yaml: each change's "held").

A ClusterResourceSet with a field this version's schema does not declare is refused,
naming it as the API server does (unknown field "spec.healthCheck.wiat").

Exit code 0: no change, 1: changes (held ones too), 2: an error (kubectl diff's
convention)."""

from __future__ import annotations

import argparse
import asyncio
import difflib
import sys
from collections import Counter
from dataclasses import dataclass, field, replace

import yaml

from crs_controller.app.commands.common import (
    FINDING,
    OK,
    Obj,
    Subcommands,
    UsageError,
    add_cluster_access,
    add_namespace,
    add_output,
    command_parser,
    emit,
    get_object,
    guarded,
    management,
    read_snapshot,
    say,
)
from crs_controller.app.commands.holds import NO_HOLDS, Holds, drift_left, holds, left_alone
from crs_controller.clients.kube import KubeClient
from crs_controller.clients.workload import WorkloadClients, kubeconfig_secret_name
from crs_controller.core.api.clusters import CLUSTER_GROUP
from crs_controller.core.api.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_BINDING_KIND,
    CLUSTER_RESOURCE_SET_KIND,
    CRSBinding,
    ObjectKey,
    ObjectRef,
    ResourceBinding,
)
from crs_controller.core.api.strict import CRS_SCHEMA, describe_unknown, unknown_fields
from crs_controller.core.manifests.documents import apply_body, object_ref
from crs_controller.core.manifests.hashing import resource_hash
from crs_controller.core.render import ClusterValues, RenderedResource, render_crs
from crs_controller.core.rollout.snapshots import SnapshotRefused
from crs_controller.core.spec.ignore import Ignores, leave_out
from crs_controller.core.spec.objects import (
    CRS,
    Cluster,
    parse_binding_object,
    parse_cluster,
    parse_crs,
)
from crs_controller.core.state.deletion_guard import allowances, guard
from crs_controller.core.state.prune_decisions import inventory, stale_objects, wanted_keys
from crs_controller.core.versions.cluster_version import (
    CONTROL_PLANE_GROUP,
    ClusterVersion,
    ControlPlaneRef,
    cluster_version,
    parse_control_plane,
)
from crs_controller.engine.reconcile.rollout import revision_of

EXAMPLES = """examples:
  crs-controller diff cni --cluster prod-1 -n fleet
  crs-controller diff cni --cluster prod-1 -n fleet --kubeconfig mgmt.kubeconfig
"""
# Written by the API server, not by an apply: never part of what would change.
SERVER_FIELDS = ("managedFields", "resourceVersion", "generation", "uid", "creationTimestamp")


def register(sub: Subcommands) -> None:
    parser = command_parser(
        sub,
        "diff",
        __doc__,
        help="what applying a CRS now would change on one cluster (server-side dry run)",
        epilog=EXAMPLES,
    )
    parser.add_argument("crs", help="the ClusterResourceSet")
    parser.add_argument("--cluster", required=True, help="the Cluster (same namespace)")
    add_namespace(parser)
    parser.add_argument("--field-manager", default="crs-controller", help="as the controller's")
    add_output(parser, "diff", "json", "yaml")
    add_cluster_access(parser)
    parser.set_defaults(func=guarded("diff", run))


@dataclass(frozen=True)
class Change:
    """One object's diff chunk, and what holds it back for now (None: nothing)."""

    object: str
    chunk: str
    held: str | None = None


@dataclass
class Report:
    """The changes, and why other differences would not be changes."""

    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Objects that differ from their manifests but that the controller leaves alone.
    left_alone: list[dict[str, str]] = field(default_factory=list)
    # Protected objects leaving the desired set that would be kept, not deleted.
    kept: list[dict[str, str]] = field(default_factory=list)


def run(args: argparse.Namespace) -> int:
    found = asyncio.run(_diff(args))
    if args.output != "diff":
        changes = [{"object": c.object, "diff": c.chunk, "held": c.held} for c in found.changes]
        shown = {"changes": changes, "notApplied": found.left_alone, "kept": found.kept}
        emit(shown, args.output, str)
    else:
        colour = sys.stdout.isatty()
        for change in found.changes:
            print(_coloured(change.chunk) if colour else change.chunk, end="")
    for note in found.notes + held_notes(found.changes):
        say("diff", note)
    return FINDING if found.changes else OK


def held_notes(changes: list[Change]) -> list[str]:
    """One line per reason that holds some of ``changes``: how many, and why."""
    total = len(changes)
    notes = []
    for why, count in Counter(c.held for c in changes if c.held).items():
        if total == 1:
            what = "this change"
        elif count == total:
            what = f"these {total} changes"
        else:
            what = f"{count} of these {total} changes"
        notes.append(f"the controller holds {what}: {why}")
    return notes


@dataclass(frozen=True)
class _Target:
    """The CRS and the cluster, as the management cluster has them now."""

    crs: CRS
    cluster: Obj
    entry: CRSBinding | None  # what the CRS recorded on the cluster
    others: set[ObjectRef]  # what the cluster's other entries (other CRSs) applied


@dataclass(frozen=True)
class _Plan:
    """What the controller would send to the cluster now, and what holds it back."""

    resources: tuple[RenderedResource, ...] = ()
    holds: Holds = NO_HOLDS
    note: str | None = None  # which revision is shown, when a rollback is in force


async def _diff(args: argparse.Namespace) -> Report:
    mgmt = management(args)
    workloads = WorkloadClients()
    try:
        target = await _target(mgmt, args)
        secret = await mgmt.get(
            "v1", "Secret", kubeconfig_secret_name(args.cluster), args.namespace
        )
        if secret is None:
            raise UsageError(f"cluster {args.namespace}/{args.cluster}: no kubeconfig Secret")
        client = await workloads.get(args.namespace, args.cluster, secret)
        return await _compare(mgmt, client, target, args)
    finally:
        await workloads.close()
        await mgmt.close()


async def _target(mgmt: KubeClient, args: argparse.Namespace) -> _Target:
    raw = await get_object(mgmt, API_VERSION, CLUSTER_RESOURCE_SET_KIND, args.crs, args.namespace)
    if raw is None:
        raise UsageError(f"ClusterResourceSet {args.namespace}/{args.crs} not found")
    if unknown := unknown_fields(raw, CRS_SCHEMA):
        raise UsageError(
            f"ClusterResourceSet {args.namespace}/{args.crs}: {describe_unknown(unknown)} "
            "(not in this crs-controller's schema: the CRD installed is another version's)"
        )
    crs = parse_crs(raw)
    if crs.problem is not None:
        raise UsageError(f"ClusterResourceSet {args.namespace}/{args.crs}: {crs.problem}")
    version = await mgmt.preferred_version(CLUSTER_GROUP) or f"{CLUSTER_GROUP}/v1beta1"
    cluster = await get_object(mgmt, version, "Cluster", args.cluster, args.namespace)
    if cluster is None:
        raise UsageError(f"Cluster {args.namespace}/{args.cluster} not found")
    found = await mgmt.get(
        API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, args.cluster, args.namespace
    )
    entries: dict[str, CRSBinding] = {}
    if found is not None and (binding := parse_binding_object(found)).model is not None:
        entries = binding.entries()
    entry = entries.pop(crs.name, None)
    return _Target(crs, cluster, entry, inventory(entries.values()))


async def _planned(mgmt: KubeClient, target: _Target, cluster: Cluster) -> _Plan:
    """The CRS's resources with the live Cluster's values, as the controller renders
    them (core/render), from the sources as they are now, and what holds them."""
    crs = target.crs
    sources: dict[tuple[str, str], Obj] = {}
    for ref in crs.valid.spec.resources:
        source = await mgmt.get("v1", ref.kind, ref.name, crs.namespace)
        if source is not None:
            source.setdefault("kind", ref.kind)
            sources[(ref.kind, ref.name)] = source
    sources, note, held = await _rolled_back(mgmt, crs, sources)
    version = await _version(mgmt, target.cluster)
    rendered = render_crs(
        crs, lambda k, n: sources.get((k, n)), ClusterValues(target.cluster), version=version
    )
    if rendered.problems:
        raise UsageError(rendered.problems[0])
    now = {key: resource_hash(raw) for key, raw in sources.items()}  # in spec order
    found = holds(crs, cluster, target.entry, version, now)
    return _Plan(rendered.resources, replace(found, everything=found.everything or held), note)


async def _rolled_back(
    mgmt: KubeClient, crs: CRS, sources: dict[tuple[str, str], Obj]
) -> tuple[dict[tuple[str, str], Obj], str | None, str | None]:
    """The sources the controller renders now: ``sources`` as they are, or, while a
    rollback is in force, the snapshot of the revision it returns to, checked as the
    controller checks it (``common.read_snapshot``); a note saying which; and
    why every change is held (the snapshot refused: the controller holds the
    clusters, and never applies the sources, the revision rolled back from)."""
    keys = [(ref.kind, ref.name) for ref in crs.valid.spec.resources]
    if any(key not in sources for key in keys):
        return sources, None, None
    undo = crs.undo(revision_of({key: resource_hash(sources[key]) for key in keys}))
    if undo.rolled_back_from is None:
        return sources, None, None
    rev = undo.target
    try:
        raws = await read_snapshot(mgmt, crs, rev)
    except SnapshotRefused as exc:
        note = f"a rollback to {rev} is in force, but {exc}: shown are the sources"
        return sources, note, f"its rollback cannot read the snapshot it returns to ({exc})"
    back = undo.rolled_back_from
    note = f"a rollback is in force: revision {rev} (its snapshot), not the sources' {back}"
    return {key: {**raw, "kind": key[0]} for key, raw in raws.items()}, note, None


async def _version(mgmt: KubeClient, raw: Obj) -> ClusterVersion:
    """The version the Cluster's control plane runs, read as the controller reads it
    (resources outside their kubernetesVersions are left out of the diff)."""
    cluster = parse_cluster(raw)
    ref = cluster.control_plane
    if not isinstance(ref, ControlPlaneRef):
        return ClusterVersion(None, ref.message if ref else ClusterVersion().unknown)
    api_version = await mgmt.preferred_version(CONTROL_PLANE_GROUP)
    found = None
    if api_version is not None:
        found = await mgmt.get(api_version, ref.kind, ref.name, cluster.namespace)
    return cluster_version(
        upgrading_condition=cluster.upgrading,
        wanted=cluster.topology_version,
        control_plane=None if found is None else parse_control_plane(found),
    )


async def _compare(
    mgmt: KubeClient, client: KubeClient, target: _Target, args: argparse.Namespace
) -> Report:
    crs, report, cluster = target.crs, Report(), parse_cluster(target.cluster)
    plan = _Plan(holds=Holds(left_alone(crs, cluster)))
    if cluster.refused_alive:
        # Selected by no CRS, yet nothing it has is removed either: no change at all.
        report.notes.append(str(plan.holds.everything))
        return report
    if crs.selects(cluster):
        plan = await _planned(mgmt, target, cluster)
        report.notes += [plan.note] if plan.note else []
    else:
        removes = crs.valid.spec.deletion_policy == "Delete" and target.entry is not None
        report.notes.append(
            f"ClusterResourceSet {crs.namespace}/{crs.name} does not select Cluster "
            f"{args.cluster}: nothing would be applied there"
            + (" (deletionPolicy: Delete: what it applied there is removed)" if removes else "")
        )
    kept: dict[ObjectKey, str] = {}  # objects of held resources, and why they are held
    for resource in plan.resources:
        held = await _resource(client, target, resource, plan.holds, args.field_manager, report)
        recorded = _recorded(target.entry, resource)
        if held is not None and recorded is not None:
            kept.update(dict.fromkeys((o.key for o in recorded.objects), held))
    if crs.valid.spec.deletion_policy == "Delete" and target.entry is not None:
        await _deletions(client, target, target.entry, plan, kept, report)
    return report


async def _deletions(
    client: KubeClient,
    target: _Target,
    entry: CRSBinding,
    plan: _Plan,
    held: dict[ObjectKey, str],
    report: Report,
) -> None:
    """What deletionPolicy: Delete would delete of ``entry`` (the target's), as removed
    objects, and the protected ones it would keep instead
    (core/state/deletion_guard), each with why."""
    wanted = wanted_keys(o for r in plan.resources for o in r.objects)
    held_all = plan.holds.everything or plan.holds.update
    stale = stale_objects(entry, target.others, wanted)
    guarded = guard(entry, stale, allowances(target.crs.valid.spec.resources))
    for ref in guarded.delete:
        chunk = await _removed(client, ref)
        if chunk:
            report.changes.append(Change(_name(ref), chunk, held_all or held.get(ref.key)))
    for kept in guarded.kept:
        live = await client.get(kept.ref.api_version, kept.ref.kind, kept.ref.name)
        if live is not None:
            report.kept.append({"object": _name(kept.ref), "reason": kept.why})
            report.notes.append(f"{_name(kept.ref)} would be kept, not deleted: {kept.why}")


async def _resource(
    client: KubeClient,
    target: _Target,
    resource: RenderedResource,
    holds: Holds,
    manager: str,
    report: Report,
) -> str | None:
    """Each object's diff, or, under ApplyOnce, why it would not be applied. Returns
    what holds the resource's change back (None: nothing)."""
    once = target.crs.strategy.apply.only_missing
    recorded = _recorded(target.entry, resource)
    done = once and recorded is not None and recorded.applied
    created = frozenset(o.key for o in recorded.objects) if recorded else frozenset()
    held = holds.of(resource.kind, resource.name, recorded, resource.hash)
    drifted = None if held else drift_left(target.crs, recorded, resource.hash)
    for obj in resource.objects:
        ref, live, chunk = await _one(client, obj, manager, target.crs.ignores, created)
        if not chunk:
            continue
        if done or (once and live is not None) or drifted:
            why = drifted or (
                f"ApplyOnce applied {resource.kind} {resource.name} here already and "
                "never applies it again"
                if done
                else "it exists, and ApplyOnce never changes an existing object"
            )
            report.left_alone.append({"object": _name(ref), "reason": why})
            report.notes.append(f"{_name(ref)} differs from its manifest, not applied: {why}")
        else:
            report.changes.append(Change(_name(ref), chunk, held))
    return held


def _recorded(entry: CRSBinding | None, resource: RenderedResource) -> ResourceBinding | None:
    records = [] if entry is None else entry.resources
    return next((r for r in records if (r.kind, r.name) == (resource.kind, resource.name)), None)


async def _one(
    client: KubeClient,
    obj: Obj,
    field_manager: str,
    ignores: Ignores,
    created: frozenset[ObjectKey],
) -> tuple[ObjectRef, Obj | None, str]:
    """One object's diff: the live object against the server's answer to a dry run of
    the body the controller would send; ``created`` is the resource's inventory."""
    body = apply_body(obj)
    info = await client.resource_info(body["apiVersion"], body["kind"])
    meta = body["metadata"]
    if info.namespaced:  # as the controller does (engine/reconcile/workload/applying)
        meta["namespace"] = meta.get("namespace") or "default"
    else:
        meta.pop("namespace", None)
    ref = object_ref(body)
    live = await client.get(ref.api_version, ref.kind, ref.name, ref.namespace or None)
    # As the controller sends it: an object of the resource's inventory without the
    # paths left to others (spec.ignore); one to create, whole.
    left_out = ignores.left_out(ref, created if live is not None else frozenset())
    if left_out:
        body = apply_body(leave_out(body, left_out))
    after = await client.apply(body, field_manager=field_manager, dry_run=True)
    return ref, live, _unified(ref, live, after)


async def _removed(client: KubeClient, ref: ObjectRef) -> str:
    live = await client.get(ref.api_version, ref.kind, ref.name, ref.namespace or None)
    return "" if live is None else _unified(ref, live, None)


def _name(ref: ObjectRef) -> str:
    return f"{ref.api_version.replace('/', '.')}.{ref.kind}.{ref.namespace or '-'}.{ref.name}"


def _unified(ref: ObjectRef, before: Obj | None, after: Obj | None) -> str:
    name = _name(ref)
    if ref.kind == "Secret" and ref.api_version == "v1":
        before, after = _masked(before, after)
    lines = difflib.unified_diff(
        _text(before), _text(after), fromfile=f"live/{name}", tofile=f"applied/{name}"
    )
    return "".join(lines)


def _text(obj: Obj | None) -> list[str]:
    if obj is None:
        return []
    shown = {k: v for k, v in obj.items() if k != "status"}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in SERVER_FIELDS}
    shown["metadata"] = meta
    return yaml.safe_dump(shown, sort_keys=True).splitlines(keepends=True)


# As kubectl diff shows a Secret: which keys changed, never their values.
MASK = "***"
_MASK_BEFORE = "*** (before)"
_MASK_AFTER = "*** (after)"
# The paths of a Secret that hold its values: data, stringData, and a copy of them all
# in kubectl's last-applied annotation.
_SECRET_VALUES: tuple[tuple[tuple[str, ...], str | None], ...] = (
    (("data",), None),
    (("stringData",), None),
    (("metadata", "annotations"), "kubectl.kubernetes.io/last-applied-configuration"),
)


def _masked(before: Obj | None, after: Obj | None) -> tuple[Obj | None, Obj | None]:
    """Copies of a Secret's two sides with each value replaced by a mask: ``***``
    where both sides hold the same (or one side alone holds it), ``*** (before)`` and
    ``*** (after)`` where it changed."""
    old, new = _values_copied(before), _values_copied(after)
    for path, only in _SECRET_VALUES:
        was, now = _at(old, path), _at(new, path)
        for key in (set(was) | set(now)) if only is None else {only}:
            changed = key in was and key in now and was[key] != now[key]
            if key in was:
                was[key] = _MASK_BEFORE if changed else MASK
            if key in now:
                now[key] = _MASK_AFTER if changed else MASK
    return old, new


def _values_copied(obj: Obj | None) -> Obj | None:
    """``obj`` with the mappings on the paths of _SECRET_VALUES copied, so masking
    them leaves ``obj`` as it was; a value that is no mapping is masked whole."""
    if obj is None:
        return None
    copied = dict(obj)
    for path, _ in _SECRET_VALUES:
        parent = copied
        for step in path[:-1]:
            child = parent.get(step)
            if not isinstance(child, dict):
                break
            parent[step] = dict(child)
            parent = parent[step]
        else:
            last = parent.get(path[-1])
            if last is not None:
                parent[path[-1]] = dict(last) if isinstance(last, dict) else MASK
    return copied


def _at(obj: Obj | None, path: tuple[str, ...]) -> dict[str, object]:
    """The mapping at ``path``, or an empty one (which nothing reads again)."""
    node: object = obj
    for step in path:
        node = node.get(step) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _coloured(chunk: str) -> str:
    out = []
    for line in chunk.splitlines(keepends=True):
        if line.startswith("+") and not line.startswith("+++"):
            out.append(f"\033[32m{line.rstrip()}\033[0m\n")
        elif line.startswith("-") and not line.startswith("---"):
            out.append(f"\033[31m{line.rstrip()}\033[0m\n")
        else:
            out.append(line)
    return "".join(out)
