"""``crs-controller status``: every ClusterResourceSet and matching cluster, from the
CRS status and the bindings (where each CRS entry records its outcome on that
cluster), like ``clusterctl describe``: the revision each cluster is on, whether
its resources are applied, its outcome, and when it was last applied. A CRS with a
rollout shows its phase and step, what it waits for (a change window, an approval,
a validation, the update budget) and how many of its clusters hold updates.

A Cluster the controller refuses (its labels over the bound) keeps the rows of its
binding's entries, marked ``refused``: left alone, its outcomes are the last recorded.

A cluster's revision is the controller's count: a resource with kubernetesVersions
that the cluster does not have is on its source's content now, so the sources of
those resources are read and hashed too."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from asyncio import FIRST_COMPLETED
from collections import defaultdict
from collections.abc import AsyncGenerator, Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import yaml

from crs_controller.app.commands.common import (
    OK,
    SHORT_REVISION,
    Obj,
    Subcommands,
    UsageError,
    add_cluster_access,
    add_namespace,
    add_output,
    command_parser,
    duration,
    emit,
    guarded,
    management,
    no_resources,
    object_name,
    printable,
    warn,
)
from crs_controller.clients.kube import KubeClient
from crs_controller.core.api.clusters import CLUSTER_GROUP
from crs_controller.core.api.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_BINDING_KIND,
    CLUSTER_RESOURCE_SET_KIND,
    MESSAGE_LIMIT,
    CRSBinding,
    KeptObject,
    ResourceRef,
    RolloutStatus,
    rfc3339,
)
from crs_controller.core.errors import APIError, ResourceError
from crs_controller.core.manifests.hashing import resource_hash
from crs_controller.core.spec.objects import (
    CRS,
    Binding,
    Cluster,
    parse_binding_object,
    parse_cluster,
    parse_crs,
)
from crs_controller.core.state.fleet import cluster_state
from crs_controller.core.text import safe
from crs_controller.engine.reconcile.rollout import Hashes, on_revision

EXAMPLES = """examples:
  crs-controller status -n fleet
  crs-controller status cni -n fleet -o wide
  crs-controller status -A -o json
  crs-controller status -n fleet -w                # then each change, until Ctrl-C
  crs-controller status -n fleet -o name           # clusterresourceset.addons.crs.dev/cni
"""
OUTPUTS = ("table", "wide", "json", "yaml", "name")
CRS_KIND, BINDING_KIND = CLUSTER_RESOURCE_SET_KIND, CLUSTER_RESOURCE_SET_BINDING_KIND
T = TypeVar("T")


def register(sub: Subcommands) -> None:
    parser = command_parser(
        sub,
        "status",
        __doc__,
        help="ClusterResourceSets x clusters: revision, applied, outcome, last applied",
        epilog=EXAMPLES,
    )
    parser.add_argument("crs", nargs="?", help="one ClusterResourceSet (default: all)")
    add_namespace(parser)
    parser.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    add_output(parser, *OUTPUTS)
    parser.add_argument(
        "-w",
        "--watch",
        action="store_true",
        help="after the table, print each row (or object) that changes, until interrupted",
    )
    parser.add_argument(
        "--timeout",
        type=duration,
        help="with --watch: stop after this long, e.g. 30s or 5m (default: never)",
    )
    add_cluster_access(parser)
    parser.set_defaults(func=guarded("status", run))


def run(args: argparse.Namespace) -> int:
    if args.timeout is not None and not args.watch:
        raise UsageError("--timeout is for --watch")
    return asyncio.run(_status(args))


async def _status(args: argparse.Namespace) -> int:
    client = management(args)  # settles args.namespace
    namespace = None if args.all_namespaces else args.namespace
    try:
        state = await FleetState.load(client, namespace)
        await state.hash_sources(client, args.crs)
        document = state.document(args.crs)
        if args.crs and not document["clusterResourceSets"]:
            raise UsageError(f"ClusterResourceSet {args.namespace}/{args.crs} not found")
        shown = _Printer(args.output)
        shown.first(document, namespace)
        if args.watch:
            await _follow(client, state, args.crs, shown, args.timeout)
    finally:
        await client.close()
    return OK


@dataclass
class FleetState:
    """What the table is made of, kept current by watches while ``--watch`` runs."""

    namespace: str | None
    apis: dict[str, str]  # kind: apiVersion
    objects: dict[str, dict[tuple[str, str], Obj]] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)  # kind: resourceVersion
    # CRS (namespace, name): the status revision its sources were hashed at, and the
    # hashes of those that follow the Kubernetes version (see hash_sources).
    hashes: dict[tuple[str, str], tuple[str | None, Hashes]] = field(default_factory=dict)
    # Each object parsed once per version seen: (kind, key): (the raw object, parsed).
    parsed: dict[tuple[str, tuple[str, str]], tuple[Obj, Any]] = field(default_factory=dict)

    @classmethod
    async def load(cls, client: KubeClient, namespace: str | None) -> FleetState:
        version = await client.preferred_version(CLUSTER_GROUP) or f"{CLUSTER_GROUP}/v1beta1"
        state = cls(
            namespace, {CRS_KIND: API_VERSION, BINDING_KIND: API_VERSION, "Cluster": version}
        )
        for kind in state.apis:
            await state.relist(client, kind)
        return state

    async def relist(self, client: KubeClient, kind: str) -> None:
        """Every object of ``kind`` in scope, read page by page: each page is bounded
        on its own, so a tenant's large objects (a last-applied annotation, say) do
        not add up to a refusal of every namespace's LIST."""
        objects: dict[tuple[str, str], Obj] = {}
        version = ""
        async for page, listed in client.pages(self.apis[kind], kind, self.namespace):
            objects.update((_key(o), o) for o in page)
            version = listed  # the last page's: where the watch starts
        self.objects[kind], self.versions[kind] = objects, version
        self.parsed = {k: v for k, v in self.parsed.items() if k[0] != kind}

    def copy(self) -> FleetState:
        """A copy to fold away from the event loop, which the watches leave alone:
        they replace this state's objects as they change, never change one in place."""
        return replace(
            self,
            objects={kind: dict(objects) for kind, objects in self.objects.items()},
            versions=dict(self.versions),
            hashes=dict(self.hashes),
            parsed=dict(self.parsed),
        )

    def keep_parsed(self, folded: FleetState) -> None:
        """Keep what the fold of ``folded`` (a copy) parsed, for each object still as
        it was: one that changed or went since is parsed again or forgotten."""
        for (kind, key), held in folded.parsed.items():
            if self.objects[kind].get(key) is held[0]:
                self.parsed[(kind, key)] = held

    def seen(self, kind: str, event: str, obj: Obj) -> None:
        """One watch event: the object as it is now, or gone."""
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.versions[kind] = str(version)
        if event == "DELETED":
            self.objects[kind].pop(_key(obj), None)
            self.parsed.pop((kind, _key(obj)), None)
        elif event in ("ADDED", "MODIFIED"):
            self.objects[kind][_key(obj)] = obj

    async def hash_sources(self, client: KubeClient, crs_name: str | None) -> None:
        """The sources' hashes the controller counts a cluster on the revision with:
        a resource that follows the Kubernetes version and that a cluster does not
        have (another version's) is on its source's hash now. Read again only when
        a CRS's revision moves, as a source's new content moves it."""
        for crs in self.crss(crs_name):
            key, refs = (crs.namespace, crs.name), _version_following(crs)
            held = self.hashes.get(key)
            if refs and (held is None or held[0] != crs.status.revision):
                hashes = await _hashes(client, crs.namespace, refs)
                self.hashes[key] = (crs.status.revision, hashes)

    def crss(self, crs_name: str | None) -> list[CRS]:
        crss = [c for _, c in sorted(self.each(CRS_KIND, parse_crs).items())]
        return [c for c in crss if crs_name in (None, c.name)]

    def clusters(self) -> dict[tuple[str, str], Cluster]:
        return self.each("Cluster", parse_cluster)

    def each(self, kind: str, parse: Callable[[Obj], T]) -> dict[tuple[str, str], T]:
        """Every object of ``kind`` parsed, each parsed again only once it changed: a
        fleet of thousands is folded again on every change while the command runs."""
        found: dict[tuple[str, str], T] = {}
        for key, raw in self.objects[kind].items():
            held = self.parsed.get((kind, key))
            if held is None or held[0] is not raw:
                held = self.parsed[(kind, key)] = (raw, parse(raw))
            found[key] = held[1]
        return found

    def document(self, crs_name: str | None) -> Obj:
        fold = _Fold(self.clusters().values(), self.each(BINDING_KIND, parse_binding_object))
        records = [fold.record(crs, self._now(crs)) for crs in self.crss(crs_name)]
        return {"clusterResourceSets": records}

    def _now(self, crs: CRS) -> Hashes | None:
        held = self.hashes.get((crs.namespace, crs.name))
        return None if held is None else held[1]


def _version_following(crs: CRS) -> list[ResourceRef]:
    """The resources of ``crs`` with ``kubernetesVersions``: only their hashes count
    for a cluster that does not have them (none for a spec the model refuses)."""
    if crs.model is None:
        return []
    resources = crs.model.spec.resources
    return [ref for index, ref in enumerate(resources) if crs.version_range(index) is not None]


async def _hashes(client: KubeClient, namespace: str, refs: list[ResourceRef]) -> Hashes:
    """Each source's hash now, as the controller hashes it. One that is missing or
    cannot be hashed is left out, as the controller has no hash for it (the CRS's
    status says why); one the user may not read is left out with a warning."""
    hashes: dict[tuple[str, str], str] = {}
    for ref in refs:
        try:
            raw = await client.get("v1", ref.kind, ref.name, namespace)
            if raw is not None:
                hashes[(ref.kind, ref.name)] = resource_hash({**raw, "kind": ref.kind})
        except ResourceError:
            continue
        except APIError as exc:
            if exc.status != 403:
                raise
            where = f"{ref.kind} {namespace}/{ref.name}"
            warn("status", f"cannot read {where} (forbidden): CURRENT may be false for it")
    return hashes


def _key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


async def _follow(
    client: KubeClient, state: FleetState, crs: str | None, shown: _Printer, timeout: float | None
) -> None:
    """Print what changes as the watches bring it, until ``timeout`` (or Ctrl-C)."""
    async with contextlib.aclosing(watched(client, state, timeout=timeout)) as changes:
        async for _ in changes:
            await state.hash_sources(client, crs)
            shown.changes(state.document(crs))


async def watched(
    client: KubeClient,
    state: FleetState,
    *,
    timeout: float | None = None,
    tick: float | None = None,
    settle: float = 0.0,
) -> AsyncGenerator[bool, None]:
    """Keep ``state`` current with one watch per kind and tell each change: True once
    the watches changed it (and ``settle`` seconds passed, so that changes arriving
    together are told once), False when ``tick`` seconds passed without one; until
    ``timeout``. A watch that fails ends it with its error."""
    changed = asyncio.Event()
    watches = [asyncio.create_task(watch_kind(client, state, kind, changed)) for kind in state.apis]
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    try:
        while deadline is None or loop.time() < deadline:
            left = None if deadline is None else deadline - loop.time()
            waiting = asyncio.create_task(changed.wait())
            done, _ = await asyncio.wait(
                [waiting, *watches], timeout=_soonest(left, tick), return_when=FIRST_COMPLETED
            )
            waiting.cancel()
            for task in done - {waiting}:
                task.result()  # a watch that failed ends the command with its error
            if waiting in done:
                await asyncio.sleep(settle)
                changed.clear()
                yield True
            elif tick is not None:
                yield False
    finally:
        for task in watches:
            task.cancel()
        await asyncio.gather(*watches, return_exceptions=True)


def _soonest(*delays: float | None) -> float | None:
    given = [d for d in delays if d is not None]
    return min(given) if given else None


async def watch_kind(
    client: KubeClient, state: FleetState, kind: str, changed: asyncio.Event
) -> None:
    """One kind's watch, resumed where it ended (the server closes it now and
    then); listed again when the server no longer has that version (410)."""
    while True:
        async for event, obj in client.watch(
            state.apis[kind], kind, state.namespace, state.versions[kind]
        ):
            if event == "ERROR":
                await state.relist(client, kind)
                changed.set()
                break
            state.seen(kind, event, obj)
            if event != "BOOKMARK":
                changed.set()


class _Printer:
    """The first answer in full, then only what changed (kubectl get -w): table rows
    by (CRS, cluster), aligned to the first table; objects and names by CRS."""

    def __init__(self, output: str) -> None:
        self.output = output
        self.shown: dict[Any, Any] = {}
        self.widths: list[int] | None = None

    def first(self, document: Obj, namespace: str | None) -> None:
        records = document["clusterResourceSets"]
        if not records and self.output in ("table", "wide", "name"):
            no_resources(namespace)
        if self.output in ("json", "yaml"):
            emit(document, self.output, str)
        else:
            self._print(list(self._keyed(document).items()))
        self.shown = self._keyed(document)
        sys.stdout.flush()

    def changes(self, document: Obj) -> None:
        keyed = self._keyed(document)
        changed = [(k, v) for k, v in keyed.items() if self.shown.get(k) != v]
        self.shown = keyed
        if self.output == "json":
            for _, record in changed:
                print(json.dumps(record, indent=2))
        elif self.output == "yaml":
            for _, record in changed:
                print("---\n" + yaml.safe_dump(record, sort_keys=False), end="")
        else:
            self._print(changed)
        sys.stdout.flush()

    def _keyed(self, document: Obj) -> dict[Any, Any]:
        records = document["clusterResourceSets"]
        if self.output in ("table", "wide"):
            return dict(table_rows(records, self.output == "wide"))
        if self.output == "name":
            return {(r["namespace"], r["name"]): r for r in records}
        return {(r["namespace"], r["name"]): r for r in records}

    def _print(self, items: list[tuple[Any, Any]]) -> None:
        if self.output == "name":
            for _, record in items:
                print(object_name(CRS_KIND, record["name"]))
            return
        if not items:
            return
        header = table_header(self.output == "wide")
        rows = [cells for _, cells in items]
        if self.widths is None:
            self.widths = [
                max(len(printable(r[i])) for r in [header, *rows]) for i in range(len(header))
            ]
            rows = [header, *rows]
        for cells in rows:
            print(_aligned(cells, self.widths))


def _aligned(cells: list[str], widths: list[int]) -> str:
    """A row as format_table prints it, in the first table's columns."""
    shown = [printable(c) for c in cells]
    return "   ".join(c.ljust(w) for c, w in zip(shown, widths, strict=True)).rstrip()


class _Fold:
    """The fleet indexed by namespace once per fold: a CRS selects only the Clusters
    of its own namespace, and its entries are in the bindings there. Folding every
    CRS then costs each one its namespace's Clusters and its own clusters' rows, not
    the whole fleet: a tenant's thousand CRSs do not make the operator's fleet of
    thousands be matched a thousand times on each change."""

    def __init__(
        self, clusters: Iterable[Cluster], bindings: dict[tuple[str, str], Binding]
    ) -> None:
        self.bindings = bindings
        self.clusters: dict[str, list[Cluster]] = defaultdict(list)
        # (namespace, cluster): why the controller refuses it and leaves it alone.
        self.refused: dict[tuple[str, str], str] = {}
        for cluster in clusters:
            self.clusters[cluster.namespace].append(cluster)
            if cluster.refused_alive:
                self.refused[(cluster.namespace, cluster.name)] = str(cluster.problem)
        # (namespace, cluster): its binding's entries by CRS name, each binding's
        # built once per fold, not once for each of the many CRSs over its cluster.
        self.entries: dict[tuple[str, str], dict[str, CRSBinding]] = {}
        # (namespace, CRS name): the clusters whose binding has an entry for it.
        self.bound: dict[tuple[str, str], set[str]] = defaultdict(set)
        for (namespace, cluster_name), binding in bindings.items():
            if binding.model is None:
                continue  # the model refuses it: no entry known
            self.entries[(namespace, cluster_name)] = entries = binding.entries()
            for name in entries:
                self.bound[(namespace, name)].add(cluster_name)

    def record(self, crs: CRS, now: Hashes | None) -> Obj:
        """The CRS's record: the clusters it selects and those bound to it."""
        names = {c.name for c in self.clusters.get(crs.namespace, ()) if crs.selects(c)}
        names |= self.bound.get((crs.namespace, crs.name), set())
        rows = [_row(crs, name, self._entry(crs, name), now) for name in sorted(names)]
        for row in rows:
            refused = self.refused.get((crs.namespace, row["cluster"]))
            if refused is not None:
                # Bound, not selected: its entry stays as last recorded, untouched.
                row["refused"] = refused
        return _record(crs, rows)

    def _entry(self, crs: CRS, cluster: str) -> CRSBinding | None:
        return self.entries.get((crs.namespace, cluster), {}).get(crs.name)


def _crs(
    crs: CRS,
    clusters: list[Any],
    bindings: dict[tuple[str, str], Binding],
    now: Hashes | None = None,
) -> Obj:
    """One CRS's record over ``clusters`` and ``bindings``."""
    return _Fold(clusters, bindings).record(crs, now)


def _record(crs: CRS, rows: list[Obj]) -> Obj:
    ready = next((c for c in crs.status.conditions if c.type == "Ready"), None)
    # Why the CRS is not Ready, as its Ready condition says; a spec the model refuses
    # is judged here too, so it shows before the controller has written its status.
    message = str(crs.problem) if crs.problem else (None if ready is None else ready.message)
    return {
        "namespace": crs.namespace,
        "name": crs.name,
        "revision": crs.status.revision,
        "rollout": _rollout(crs.status.rollout),
        "ready": None if ready is None else ready.status,
        "reason": crs.problem.reason if crs.problem else (None if ready is None else ready.reason),
        "message": None if message is None else safe(message, MESSAGE_LIMIT),
        "paused": crs.paused,
        "clusters": rows,
    }


def _rollout(rollout: RolloutStatus | None) -> Obj | None:
    if rollout is None:
        return None
    return {
        "phase": rollout.phase,
        "step": rollout.step,
        "waitingFor": rollout.waiting_for,
        "nextWindow": rfc3339(rollout.next_window) if rollout.next_window else None,
        "heldClusters": rollout.held_clusters,
        "rolledBackFrom": rollout.rolled_back_from,
        # Names from tenants' objects can be part of it: shown safe, as conditions are.
        "message": safe(rollout.message, MESSAGE_LIMIT),
    }


def _row(crs: CRS, cluster: str, entry: CRSBinding | None, now: Hashes | None = None) -> Obj:
    """One cluster's row, from its binding's ``entry`` for ``crs``; its revision as the
    controller counts it (``now``: the hashes of the sources that follow the
    Kubernetes version)."""
    if entry is None:
        return {"cluster": cluster, "state": "Pending", "reason": "Pending", "applied": False}
    times = [r.last_applied_time for r in entry.resources if r.last_applied_time is not None]
    outcome = entry.outcome
    revision = on_revision(crs, entry, now) if crs.model is not None else None
    target = crs.status.revision
    current = None if revision is None or not target else revision == target
    return {
        "cluster": cluster,
        "state": cluster_state(entry, current),
        "revision": revision,
        "applied": bool(entry.resources) and all(r.applied for r in entry.resources),
        "reason": outcome.reason if outcome else None,
        # Read from a binding, which a tenant can write: shown safe in every output
        # (JSON and YAML too), escaped as the controller itself records messages.
        "message": safe(outcome.message, MESSAGE_LIMIT) if outcome else None,
        "since": rfc3339(outcome.time) if outcome and outcome.time else None,
        "lastApplied": rfc3339(max(times)) if times else None,
        "deletionsSkipped": [_kept(k) for k in entry.deletions_skipped or ()],
    }


def _kept(kept: KeptObject) -> Obj:
    """A protected object kept on the cluster (``deletionsSkipped``), read from a
    binding: shown safe, as its message is."""
    return {
        "apiVersion": safe(kept.api_version, MESSAGE_LIMIT),
        "kind": safe(kept.kind, MESSAGE_LIMIT),
        "name": safe(kept.name, MESSAGE_LIMIT),
    }


def table_header(wide: bool) -> list[str]:
    header = ["CRS", "CLUSTER", "REVISION", "APPLIED", "CURRENT", "REASON", "LAST APPLIED"]
    header += ["STATE", "ROLLOUT", "STEP", "WAITING", "HELD"]
    return [*header, "MESSAGE"] if wide else header


def crs_state(crs: Obj) -> str:
    """The CRS's own state in a word (from its record): ``Paused`` (annotation
    cluster.x-k8s.io/paused), ``Ready`` when its Ready condition is True, else that
    condition's reason (``InvalidSpec``, ``RolloutHalted``, ``Progressing`` ...); '-'
    before the controller has written one."""
    if crs.get("paused"):
        return "Paused"
    if crs.get("ready") == "True":
        return "Ready"
    return str(crs.get("reason") or "-")


def row_message(crs: Obj, row: Obj) -> str:
    """The wide MESSAGE of a row: the cluster's own outcome, except where the CRS
    itself says why nothing moves — a spec the model refuses (the clusters' outcomes
    are as they were before), or no cluster to show."""
    if crs_state(crs) == "InvalidSpec" or not crs["clusters"]:
        return str(crs.get("message") or "")
    message = with_refusal(row, str(row.get("message") or ""))
    kept = row.get("deletionsSkipped") or []
    if kept:
        names = ", ".join(f"{k['kind']}/{k['name']}" for k in kept)
        message += f"{'; ' if message else ''}kept (not deleted): {names}"
    return message


def with_refusal(row: Obj, message: str) -> str:
    """A row's ``message``, after why its Cluster is refused when it is: the
    controller leaves it alone, so its outcome is the last recorded."""
    refused = row.get("refused")
    if not refused:
        return message
    said = (
        f"Cluster refused: {refused}; left alone (nothing applied or removed), "
        "outcome as last recorded"
    )
    return f"{said}; {message}" if message else said


def rollout_cells(rollout: Obj | None, now: datetime) -> list[str]:
    """ROLLOUT, STEP, WAITING and HELD of a CRS (from its record): '-' without a
    rollout, or for a field an older controller did not write."""
    if rollout is None:
        return ["-", "-", "-", "-"]
    held = rollout.get("heldClusters")
    return [
        rollout.get("phase") or "-",
        str(rollout.get("step") or "-"),
        waiting(rollout.get("waitingFor"), rollout.get("nextWindow"), now),
        "-" if held is None else str(held),
    ]


def waiting(waiting_for: str | None, next_window: str | None, now: datetime) -> str:
    """What the rollout waits for, in a word: ``window until 22:00Z`` (the time the
    next change window opens: its clock time alone within a day from ``now``, else
    the date too), ``approval``, ``validation``, ``budget``; '-' for nothing."""
    if not waiting_for:
        return "-"
    if waiting_for != "Window" or not next_window:
        return waiting_for.lower()
    try:
        opens = datetime.fromisoformat(next_window).astimezone(UTC)
    except (ValueError, OverflowError):  # not a time, or not one in UTC's range
        return "window"
    soon = now < opens <= now + timedelta(days=1)
    return "window until " + opens.strftime("%H:%MZ" if soon else "%Y-%m-%dT%H:%MZ")


def table_rows(
    records: list[Obj], wide: bool, now: datetime | None = None
) -> list[tuple[tuple[str, str], list[str]]]:
    """Each (CRS, cluster) row, keyed by both: one row per CRS with no cluster. The
    STATE and rollout columns repeat the CRS's on each of its rows, as the CRS column
    does."""
    now = now or datetime.now(UTC)
    rows = []
    for crs in records:
        of_crs = [crs_state(crs), *rollout_cells(crs["rollout"], now)]
        for row in crs["clusters"] or [{"cluster": "-", "reason": crs["reason"] or "-"}]:
            current = (
                "-"
                if row.get("revision") is None
                else str(row["revision"] == crs["revision"]).lower()
            )
            name = f"{crs['namespace']}/{crs['name']}"
            cells = [
                name,
                row["cluster"],
                (row.get("revision") or "-")[:SHORT_REVISION],
                "yes" if row.get("applied") else "no",
                current,
                row.get("reason") or "-",
                row.get("lastApplied") or "-",
                *of_crs,
            ]
            rows.append(
                ((name, row["cluster"]), [*cells, row_message(crs, row)] if wide else cells)
            )
    return rows
