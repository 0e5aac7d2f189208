"""``crs-controller render``: offline, what each ClusterResourceSet in some manifests
would apply: whether it selects a cluster with the given labels, each resource's
hash (the one the binding records) and its objects in apply order. The parsing,
hashing and ordering are the controller's own."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from crs_controller.app.commands.common import (
    ERROR,
    OK,
    Obj,
    UsageError,
    add_output,
    emit,
    format_table,
    guarded,
    printable,
    read_documents,
)
from crs_controller.core.errors import CRSError
from crs_controller.core.hashing import resource_hash
from crs_controller.core.manifests import object_ref, parse_objects
from crs_controller.core.models import API_VERSION, CLUSTER_RESOURCE_SET_KIND, ObjectMeta
from crs_controller.core.objects import CRS, Cluster, parse_crs
from crs_controller.core.ordering import apply_order
from crs_controller.core.substitute import cluster_values, substitute, values_digest
from crs_controller.engine.reconcile.values import variable_specs

EXAMPLES = """examples:
  crs-controller render -f config/samples
  crs-controller render -f calico/ --cluster prod-1-cluster.yaml --set MTU=1400
  crs-controller render -f crs.yaml -f addons/ --cluster-labels env=prod,cni=calico
  kustomize build deploy/ | crs-controller render -f - -o yaml
"""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "render",
        help="show what ClusterResourceSets in manifests would apply (offline)",
        description=(__doc__ or "").replace("``", ""),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        help="a manifest file, a directory of them, or '-' for stdin (repeatable)",
    )
    parser.add_argument(
        "--cluster",
        help="a Cluster manifest: its labels select, and its fields give the variables of "
        "resources with substitute: true",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a variable's value, over the Cluster's (repeatable)",
    )
    parser.add_argument(
        "--cluster-labels",
        action="append",
        default=[],
        help="render only the CRSs that select a cluster with these labels (k=v,k2=v2; repeatable)",
    )
    add_output(parser, "table", "json", "yaml")
    parser.set_defaults(func=guarded("render", run))


@dataclass(frozen=True)
class Sources:
    by_key: dict[tuple[str, str, str], Obj]  # namespace, kind, name

    def find(self, namespace: str, kind: str, name: str) -> Obj | None:
        return self.by_key.get((namespace, kind, name)) or self.by_key.get(("", kind, name))


def run(args: argparse.Namespace) -> int:
    documents = read_documents(args.filename)
    cluster = _cluster_manifest(args.cluster) if args.cluster else None
    labels = parse_labels(args.cluster_labels) if args.cluster_labels else None
    if labels is None and cluster is not None:
        labels = dict((cluster.get("metadata") or {}).get("labels") or {})
    values = _Values(cluster, parse_pairs(args.set, "--set")) if cluster or args.set else None
    crss, sources = _split(documents)
    if not crss:
        raise UsageError("no ClusterResourceSet in the given manifests")
    rendered, problems = [], []
    for where, crs in crss:
        if labels is not None and not crs.selects(_cluster(crs, labels)):
            continue
        entry, found = _render(where, crs, sources, values)
        rendered.append(entry)
        problems += found
    emit({"clusterResourceSets": rendered}, args.output, _table)
    for problem in problems:
        print(printable(f"crs-controller render: {problem}"), file=sys.stderr)
    return ERROR if problems else OK


def parse_labels(values: list[str]) -> dict[str, str]:
    return parse_pairs([p for v in values for p in v.split(",") if p], "--cluster-labels")


def parse_pairs(pairs: list[str], flag: str) -> dict[str, str]:
    found = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise UsageError(f"{flag}: {pair[:60]!r} is not NAME=VALUE")
        found[key.strip()] = value.strip() if flag == "--cluster-labels" else value
    return found


@dataclass(frozen=True)
class _Values:
    """Where per-cluster values come from: a Cluster manifest, and --set over it."""

    cluster: Obj | None
    overrides: dict[str, str]


def _cluster_manifest(path: str) -> Obj:
    for _, doc in read_documents([path]):
        if doc.get("kind") == "Cluster":
            return doc
    raise UsageError(f"{path}: no Cluster in it")


def _split(documents: list[tuple[str, Obj]]) -> tuple[list[tuple[str, CRS]], Sources]:
    crss, sources = [], {}
    for where, doc in documents:
        kind, meta = doc.get("kind"), doc.get("metadata") or {}
        if doc.get("apiVersion") == API_VERSION and kind == CLUSTER_RESOURCE_SET_KIND:
            crs = parse_crs(doc)
            if crs.problem is not None:
                raise UsageError(f"{where}: ClusterResourceSet {crs.name}: {crs.problem}")
            crss.append((where, crs))
        elif doc.get("apiVersion") == "v1" and kind in ("ConfigMap", "Secret"):
            key = (str(meta.get("namespace") or ""), str(kind), str(meta.get("name") or ""))
            sources[key] = doc
    return crss, Sources(sources)


def _cluster(crs: CRS, labels: dict[str, str]) -> Cluster:
    return Cluster(ObjectMeta(name="(given labels)", namespace=crs.namespace, labels=labels))


def _render(
    where: str, crs: CRS, sources: Sources, values: _Values | None
) -> tuple[Obj, list[str]]:
    entry: Obj = {"name": crs.name, "namespace": crs.namespace, "resources": []}
    problems = []
    for ref in crs.valid.spec.resources:
        source = sources.find(crs.namespace or "default", ref.kind, ref.name)
        label = f"{crs.namespace}/{crs.name}: {ref.kind} {ref.name}"
        if source is None:
            problems.append(f"{label}: not in the given manifests (ResourceNotFound)")
            continue
        try:
            objects = apply_order(parse_objects(source))
            digest = resource_hash(source)
            if ref.substitute and values is not None:
                objects, digest = _substituted(crs, ref.kind, ref.name, objects, digest, values)
        except CRSError as exc:  # names the resource and document, never the content
            problems.append(f"{label}: {exc} ({exc.reason})")
            continue
        entry["resources"].append(
            {"kind": ref.kind, "name": ref.name, "hash": digest, "objects": objects}
        )
    return entry, problems


def _substituted(
    crs: CRS, kind: str, name: str, objects: list[Obj], digest: str, values: _Values
) -> tuple[list[Obj], str]:
    """The controller's own substitution, and the hash a binding would record."""
    specs = variable_specs(crs)
    found = cluster_values(values.cluster or {}, specs, values.overrides)
    done, used = substitute(
        objects, found, resource=f"{kind}/{name}", variables=specs, secret=kind == "Secret"
    )
    return done, f"{digest}+{values_digest(used, found)}"


def _table(data: Obj) -> str:
    rows = []
    for crs in data["clusterResourceSets"]:
        for resource in crs["resources"]:
            for position, obj in enumerate(resource["objects"], 1):
                ref = object_ref(obj)
                where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
                rows.append(
                    [
                        f"{crs['namespace']}/{crs['name']}",
                        f"{resource['kind']}/{resource['name']}",
                        resource["hash"] if position == 1 else "",
                        str(position),
                        f"{ref.api_version} {ref.kind}",
                        where,
                    ]
                )
    header = ["CRS", "RESOURCE", "HASH", "#", "KIND", "OBJECT"]
    return format_table(header, rows)
