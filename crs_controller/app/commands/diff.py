"""``crs-controller diff``: what applying a ClusterResourceSet now would change on one
workload cluster. Every object goes to the API server as a server-side apply dry
run (nothing is stored) and the answer is compared with the live object, as a
unified diff; objects the deletion policy would delete are listed as removed.
Exit code 0: no change, 1: changes, 2: an error (kubectl diff's convention)."""

from __future__ import annotations

import argparse
import asyncio
import difflib
import sys
from typing import Any

import yaml

from crs_controller.app.commands.common import (
    FINDING,
    OK,
    Obj,
    UsageError,
    add_cluster_access,
    add_output,
    emit,
    guarded,
    management,
)
from crs_controller.clients.kube import KubeClient
from crs_controller.clients.workload import WorkloadClients, kubeconfig_secret_name
from crs_controller.core.clusters import CLUSTER_GROUP
from crs_controller.core.manifests import apply_body, object_ref, parse_objects
from crs_controller.core.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_BINDING_KIND,
    CLUSTER_RESOURCE_SET_KIND,
    ObjectRef,
)
from crs_controller.core.objects import CRS, parse_binding_object, parse_crs
from crs_controller.core.ordering import apply_order
from crs_controller.core.pruning import stale_objects, wanted_keys
from crs_controller.core.substitute import cluster_values, substitute
from crs_controller.engine.reconcile.values import variable_specs

EXAMPLES = """examples:
  crs-controller diff cni --cluster prod-1 -n fleet
  crs-controller diff cni --cluster prod-1 -n fleet --kubeconfig mgmt.kubeconfig
"""
# Written by the API server, not by an apply: never part of what would change.
SERVER_FIELDS = ("managedFields", "resourceVersion", "generation", "uid", "creationTimestamp")


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "diff",
        help="what applying a CRS now would change on one cluster (server-side dry run)",
        description=(__doc__ or "").replace("``", ""),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("crs", help="the ClusterResourceSet")
    parser.add_argument("--cluster", required=True, help="the Cluster (same namespace)")
    parser.add_argument("-n", "--namespace", default="default", help="namespace (default: default)")
    parser.add_argument("--field-manager", default="crs-controller", help="as the controller's")
    add_output(parser, "diff", "json", "yaml")
    add_cluster_access(parser)
    parser.set_defaults(func=guarded("diff", run))


def run(args: argparse.Namespace) -> int:
    chunks = asyncio.run(_diff(args))
    if args.output != "diff":
        changes = [{"object": _object_of(chunk), "diff": chunk} for chunk in chunks]
        emit({"changes": changes}, args.output, lambda _: "")
    else:
        colour = sys.stdout.isatty()
        for chunk in chunks:
            print(_coloured(chunk) if colour else chunk, end="")
    return FINDING if chunks else OK


def _object_of(chunk: str) -> str:
    """The object a diff chunk is about, from its header."""
    first = chunk.splitlines()[0] if chunk else ""
    return first.removeprefix("--- live/")


async def _diff(args: argparse.Namespace) -> list[str]:
    mgmt = management(args)
    workloads = WorkloadClients()
    try:
        crs, objects, inventory = await _desired(mgmt, args)
        secret = await mgmt.get(
            "v1", "Secret", kubeconfig_secret_name(args.cluster), args.namespace
        )
        if secret is None:
            raise UsageError(f"cluster {args.namespace}/{args.cluster}: no kubeconfig Secret")
        client = await workloads.get(args.namespace, args.cluster, secret)
        chunks = [await _one(client, obj, args.field_manager) for obj in objects]
        if crs.valid.spec.deletion_policy == "Delete":
            chunks += [await _removed(client, ref) for ref in _stale(inventory, objects)]
        return [c for c in chunks if c]
    finally:
        await workloads.close()
        await mgmt.close()


async def _desired(mgmt: KubeClient, args: argparse.Namespace) -> tuple[CRS, list[Obj], Any]:
    """The CRS, its objects in apply order, and its binding entry on the cluster."""
    raw = await mgmt.get(API_VERSION, CLUSTER_RESOURCE_SET_KIND, args.crs, args.namespace)
    if raw is None:
        raise UsageError(f"ClusterResourceSet {args.namespace}/{args.crs} not found")
    crs = parse_crs(raw)
    if crs.problem is not None:
        raise UsageError(f"ClusterResourceSet {args.namespace}/{args.crs}: {crs.problem}")
    version = await mgmt.preferred_version(CLUSTER_GROUP) or f"{CLUSTER_GROUP}/v1beta1"
    cluster = await mgmt.get(version, "Cluster", args.cluster, args.namespace)
    if cluster is None:
        raise UsageError(f"Cluster {args.namespace}/{args.cluster} not found")
    specs = variable_specs(crs)
    objects: list[Obj] = []
    for ref in crs.valid.spec.resources:
        source = await mgmt.get("v1", ref.kind, ref.name, args.namespace)
        if source is None:
            raise UsageError(f"{ref.kind} {args.namespace}/{ref.name} not found")
        source.setdefault("kind", ref.kind)
        parsed = apply_order(parse_objects(source))
        if ref.substitute:  # the live Cluster's values, as the controller resolves them
            values = cluster_values(cluster, specs)
            where = f"{ref.kind}/{ref.name}"
            parsed, _ = substitute(
                parsed, values, resource=where, variables=specs, secret=ref.kind == "Secret"
            )
        objects += parsed
    found = await mgmt.get(
        API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, args.cluster, args.namespace
    )
    entry = None
    if found is not None and (binding := parse_binding_object(found)).model is not None:
        entry = binding.entries().get(crs.name)
    return crs, objects, entry


def _stale(entry: Any, objects: list[Obj]) -> list[ObjectRef]:
    if entry is None:
        return []
    return stale_objects(entry, set(), wanted_keys(objects))


async def _one(client: KubeClient, obj: Obj, field_manager: str) -> str:
    body = apply_body(obj)
    info = await client.resource_info(body["apiVersion"], body["kind"])
    meta = body["metadata"]
    if info.namespaced:
        meta["namespace"] = meta.get("namespace") or "default"
    else:
        meta.pop("namespace", None)
    ref = object_ref(body)
    live = await client.get(ref.api_version, ref.kind, ref.name, ref.namespace or None)
    after = await client.apply(body, field_manager=field_manager, dry_run=True)
    return _unified(ref, live, after)


async def _removed(client: KubeClient, ref: ObjectRef) -> str:
    live = await client.get(ref.api_version, ref.kind, ref.name, ref.namespace or None)
    return "" if live is None else _unified(ref, live, None)


def _unified(ref: ObjectRef, before: Obj | None, after: Obj | None) -> str:
    name = f"{ref.api_version.replace('/', '.')}.{ref.kind}.{ref.namespace or '-'}.{ref.name}"
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
