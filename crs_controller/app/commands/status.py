"""``crs-controller status``: every ClusterResourceSet and matching cluster, from the
CRS status and the bindings (where each CRS entry records its outcome on that
cluster), like ``clusterctl describe``: the revision each cluster is on, whether
its resources are applied, its outcome, and when it was last applied."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from crs_controller.app.commands.common import (
    OK,
    Obj,
    UsageError,
    add_cluster_access,
    emit,
    format_table,
    guarded,
    management,
)
from crs_controller.clients.kube import KubeClient
from crs_controller.core.clusters import CLUSTER_GROUP
from crs_controller.core.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_BINDING_KIND,
    CLUSTER_RESOURCE_SET_KIND,
    MESSAGE_LIMIT,
    CRSBinding,
    rfc3339,
)
from crs_controller.core.objects import CRS, Binding, parse_binding_object, parse_cluster, parse_crs
from crs_controller.core.text import safe
from crs_controller.engine.reconcile.rolling import entry_revision

EXAMPLES = """examples:
  crs-controller status -n fleet
  crs-controller status cni -n fleet -o wide
  crs-controller status -A -o json
"""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "status",
        help="ClusterResourceSets x clusters: revision, applied, outcome, last applied",
        description=(__doc__ or "").replace("``", ""),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("crs", nargs="?", help="one ClusterResourceSet (default: all)")
    parser.add_argument("-n", "--namespace", default="default", help="namespace (default: default)")
    parser.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    parser.add_argument(
        "-o", "--output", choices=("table", "wide", "json", "yaml"), default="table"
    )
    add_cluster_access(parser)
    parser.set_defaults(func=guarded("status", run))


def run(args: argparse.Namespace) -> int:
    rows = asyncio.run(_gather(args))
    if args.crs and not rows["clusterResourceSets"]:
        raise UsageError(f"ClusterResourceSet {args.namespace}/{args.crs} not found")
    emit(rows, "table" if args.output == "wide" else args.output, _table(args.output == "wide"))
    return OK


async def _gather(args: argparse.Namespace) -> Obj:
    namespace = None if args.all_namespaces else args.namespace
    client = management(args)
    try:
        crss = [
            parse_crs(o)
            for o in await _list(client, API_VERSION, CLUSTER_RESOURCE_SET_KIND, namespace)
        ]
        raw = await _list(client, API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, namespace)
        bindings = {
            (b.meta.namespace or "", b.meta.name): b for b in map(parse_binding_object, raw)
        }
        version = await client.preferred_version(CLUSTER_GROUP) or f"{CLUSTER_GROUP}/v1beta1"
        clusters = [parse_cluster(o) for o in await _list(client, version, "Cluster", namespace)]
    finally:
        await client.close()
    chosen = [c for c in crss if args.crs in (None, c.name)]
    return {"clusterResourceSets": [_crs(crs, clusters, bindings) for crs in chosen]}


async def _list(
    client: KubeClient, api_version: str, kind: str, namespace: str | None
) -> list[Obj]:
    items, _ = await client.list(api_version, kind, namespace)
    return items


def _crs(crs: CRS, clusters: list[Any], bindings: dict[tuple[str, str], Binding]) -> Obj:
    names = {c.name for c in clusters if crs.selects(c)}
    names |= {
        name
        for (ns, name), b in bindings.items()
        if ns == crs.namespace and crs.name in b.crs_names
    }
    ready = next((c for c in crs.status.conditions if c.type == "Ready"), None)
    return {
        "namespace": crs.namespace,
        "name": crs.name,
        "revision": crs.status.revision,
        "rollout": None if crs.status.rollout is None else crs.status.rollout.phase,
        "ready": None if ready is None else ready.status,
        "reason": crs.problem.reason if crs.problem else (None if ready is None else ready.reason),
        "clusters": [
            _row(crs, name, bindings.get((crs.namespace, name))) for name in sorted(names)
        ],
    }


def _row(crs: CRS, cluster: str, binding: Binding | None) -> Obj:
    entry: CRSBinding | None = None
    if binding is not None and binding.model is not None:
        entry = binding.entries().get(crs.name)
    if entry is None:
        return {"cluster": cluster, "reason": "Pending", "applied": False}
    times = [r.last_applied_time for r in entry.resources if r.last_applied_time is not None]
    outcome = entry.outcome
    return {
        "cluster": cluster,
        "revision": entry_revision(crs, entry) if crs.model is not None else None,
        "applied": bool(entry.resources) and all(r.applied for r in entry.resources),
        "reason": outcome.reason if outcome else None,
        # Read from a binding, which a tenant can write: shown safe in every output
        # (JSON and YAML too), escaped as the controller itself records messages.
        "message": safe(outcome.message, MESSAGE_LIMIT) if outcome else None,
        "since": rfc3339(outcome.time) if outcome and outcome.time else None,
        "lastApplied": rfc3339(max(times)) if times else None,
    }


def _table(wide: bool) -> Any:
    def render(data: Obj) -> str:
        header = ["CRS", "CLUSTER", "REVISION", "APPLIED", "CURRENT", "REASON", "LAST APPLIED"]
        rows = []
        for crs in data["clusterResourceSets"]:
            for row in crs["clusters"] or [{"cluster": "-", "reason": crs["reason"] or "-"}]:
                current = (
                    "-"
                    if row.get("revision") is None
                    else str(row["revision"] == crs["revision"]).lower()
                )
                cells = [
                    f"{crs['namespace']}/{crs['name']}",
                    row["cluster"],
                    (row.get("revision") or "-")[:17],
                    "yes" if row.get("applied") else "no",
                    current,
                    row.get("reason") or "-",
                    row.get("lastApplied") or "-",
                ]
                rows.append([*cells, row.get("message") or ""] if wide else cells)
        return format_table([*header, "MESSAGE"] if wide else header, rows)

    return render
