"""``crs-controller render``: offline, what each ClusterResourceSet in some manifests
would apply: whether it selects a cluster with the given labels, its revision (the
one its status shows), each resource's hash (the one the binding records) and its
objects in apply order. ``-o manifests`` prints those objects as the controller
sends them, a YAML stream for ``kubectl apply -f -`` or ``kubectl diff -f -``. The
parsing, hashing, substitution and ordering are the controller's own (core/render).

A resource with kubernetesVersions is rendered only when the cluster's version is in
its range: the version is --kubernetes-version, else status.version of the control
plane object the --cluster Cluster names, when that object is among the input
manifests. Otherwise the version is unknown, and such resources are left out as the
controller leaves them (WaitingForVersion), said on stderr. A pre-release version a
range holds while its release is outside (1.35.0-rc.1 and "<1.35.0") is noted there
too, with the bound that leaves it out. A resource left out is
absent from every output; -o json|yaml list it under leftOut with its reason.

A ClusterResourceSet with a field its schema does not declare (a typo like
healthCheck.wiat) is refused, naming the field as the API server's strict field
validation does (unknown field "spec.healthCheck.wiat"): kubectl apply would refuse it.

Exit code 0: rendered (also when no CRS selects the given cluster, or a resource
waits for the version: stderr says so), 2: an error, with nothing on stdout."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from semver import Version

from crs_controller.app.capi_convert import CAPI_GROUP
from crs_controller.app.commands.common import (
    ERROR,
    OK,
    SHORT_REVISION,
    Obj,
    Subcommands,
    UsageError,
    add_files,
    add_output,
    command_parser,
    dump_manifest,
    emit,
    format_table,
    guarded,
    metadata,
    printable,
    read_documents,
    say,
    warn,
)
from crs_controller.core.api.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_KIND,
    ObjectMeta,
    SourceKey,
)
from crs_controller.core.api.strict import CRS_SCHEMA, describe_unknown, unknown_fields
from crs_controller.core.manifests.documents import object_ref
from crs_controller.core.render import (
    ClusterValues,
    Lookup,
    RenderedCRS,
    crs_order,
    render_crs,
    waiting_for_version,
)
from crs_controller.core.spec.objects import (
    CRS,
    Cluster,
    describe_validation,
    parse_cluster,
    parse_crs_document,
)
from crs_controller.core.versions.cluster_version import (
    CONTROL_PLANE_GROUP,
    ClusterVersion,
    ControlPlaneRef,
    RefProblem,
    cluster_version,
    control_plane_ref,
    parse_control_plane,
    topology_version,
)
from crs_controller.core.versions.ranges import below_its_release, parse_version

EXAMPLES = """examples:
  crs-controller render -f config/samples
  crs-controller render -f config/samples -o manifests | kubectl apply --dry-run=server -f -
  crs-controller render -f calico/ --cluster prod-1-cluster.yaml --set MTU=1400 -o manifests
  crs-controller render -f cpi/ --cluster prod-1.yaml -f prod-1-control-plane.yaml
  crs-controller render -f cpi/ --kubernetes-version v1.34.2 -o manifests
  crs-controller render -f crs.yaml -f addons/ --cluster-labels env=prod,cni=calico
  kustomize build deploy/ | crs-controller render -f - -o yaml
"""
# The revision as status's table shows it, so the two can be compared by eye.


def register(sub: Subcommands) -> None:
    parser = command_parser(
        sub,
        "render",
        __doc__,
        help="show what ClusterResourceSets in manifests would apply (offline)",
        epilog=EXAMPLES,
    )
    add_files(parser)
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
        "--kubernetes-version",
        metavar="VERSION",
        help="the cluster's Kubernetes version (like v1.34.2), over its control plane's "
        "status.version: resources with kubernetesVersions apply only inside their range",
    )
    parser.add_argument(
        "--cluster-labels",
        action="append",
        default=[],
        help="render only the CRSs that select a cluster with these labels (k=v,k2=v2; repeatable)",
    )
    add_output(parser, "table", "json", "yaml", "manifests")
    parser.set_defaults(func=guarded("render", run))


@dataclass(frozen=True)
class _Target:
    """The cluster a render is for, as the flags and files describe it."""

    cluster: Obj | None
    version: ClusterVersion | None
    labels: dict[str, str] | None
    values: ClusterValues | None
    overrides: dict[str, str]


def _target(args: argparse.Namespace, documents: list[tuple[str, Obj]]) -> _Target:
    flag = parse_kubernetes_version(args.kubernetes_version)
    beside = read_documents([args.cluster]) if args.cluster else []
    cluster = _cluster_manifest(args.cluster, beside) if args.cluster else None
    version = flag or cluster_version_in(cluster, documents + beside)
    labels = parse_labels(args.cluster_labels) if args.cluster_labels else None
    if cluster is not None:
        found = _cluster_labels(args.cluster, cluster)
        labels = dict(found) if labels is None else labels
    overrides = parse_pairs(args.set, "--set")
    values = ClusterValues(cluster or {}, overrides) if cluster or overrides else None
    if values is None and args.output == "manifests":
        # The controller never sends a placeholder: without a Cluster, the CRS's own
        # values and defaults, and any other variable is an error naming it.
        values = ClusterValues({})
    return _Target(cluster, version, labels, values, overrides)


def run(args: argparse.Namespace) -> int:
    documents = read_documents(args.filename)
    target = _target(args, documents)
    cluster, version, labels, values = target.cluster, target.version, target.labels, target.values
    overrides = target.overrides
    inputs = read_inputs(documents)
    for warning in inputs.warnings:
        warn("render", warning)
    selected = [c for c in crs_order(inputs.crss) if labels is None or c.selects(_at(c, labels))]
    rendered = [
        render_crs(c, inputs.lookup(c), values, missing=MISSING, version=version) for c in selected
    ]
    problems = [p for r in rendered for p in r.problems]
    if problems and not (cluster or overrides):
        problems = [
            p + UNRESOLVED_HINT if p.endswith("(UnresolvedVariable)") else p for p in problems
        ]
    if problems:  # nothing on stdout: a pipe must never apply half
        for problem in problems:
            say("render", problem)
        return ERROR
    if not selected:
        print(printable(nothing_selected(args.cluster, labels, len(inputs.crss))), file=sys.stderr)
    for note in version_notes(rendered, cluster):
        say("render", f"note: {note}")
    if args.output == "manifests":
        print(manifest_stream(rendered), end="")
    else:
        reports = [report(r) for r in rendered]
        # A table with no row is a header alone: kubectl prints nothing then.
        if args.output != "table" or any(r["resources"] for r in reports):
            emit({"clusterResourceSets": reports}, args.output, _table)
    return OK


MISSING = "not in the given manifests"
UNRESOLVED_HINT = ": give its value with --cluster FILE or --set NAME=VALUE"


def nothing_selected(cluster: str | None, labels: Mapping[str, str] | None, read: int) -> str:
    """kubectl's "No resources found", saying what was asked."""
    shown = ",".join(f"{k}={v}" for k, v in (labels or {}).items()) or "(none)"
    asked = f"the Cluster in {cluster} (labels {shown})" if cluster else f"labels {shown}"
    return f"No resources found: none of the {read} ClusterResourceSets selects {asked}"


def parse_kubernetes_version(text: str | None) -> ClusterVersion | None:
    """``--kubernetes-version`` as a known version; None when it is not given."""
    if text is None:
        return None
    version = parse_version(text)
    if version is None:
        raise UsageError(
            f"--kubernetes-version: {text[:60]!r} is not a Kubernetes version "
            "(MAJOR.MINOR.PATCH, like v1.34.2)"
        )
    return ClusterVersion(version, "")


NO_VERSION = "neither --kubernetes-version nor --cluster is given"
VERSION_HINTS = (
    "give it with --kubernetes-version VERSION",
    "or the control plane object the Cluster names (reporting status.version) with -f",
)


def cluster_version_in(cluster: Obj | None, documents: list[tuple[str, Obj]]) -> ClusterVersion:
    """The version the given Cluster's control plane object reports, when that object
    is among ``documents``; else unknown, saying why (the controller's own reasons)."""
    if cluster is None:
        return ClusterVersion(None, NO_VERSION)
    ref = control_plane_ref(cluster)
    if ref is None:
        return ClusterVersion()
    if isinstance(ref, RefProblem):
        return ClusterVersion(None, ref.message)
    found = _control_plane(ref, str(metadata(cluster).get("namespace") or ""), documents)
    if found is None:
        return ClusterVersion(None, f"its {ref.kind} {ref.name} is not in the given manifests")
    return cluster_version(
        upgrading_condition=False,  # render shows what applies, not when
        wanted=topology_version(cluster),
        control_plane=parse_control_plane(found),
    )


def _control_plane(
    ref: ControlPlaneRef, namespace: str, documents: list[tuple[str, Obj]]
) -> Obj | None:
    """The object ``ref`` names in ``namespace`` (or given without one). The same object
    may come twice (a file given as -f and as --cluster); two different ones are an
    error, as for sources."""
    found: tuple[str, Obj] | None = None
    for where, doc in documents:
        meta = metadata(doc)
        if (
            doc.get("kind") == ref.kind
            and str(doc.get("apiVersion") or "").rpartition("/")[0] == CONTROL_PLANE_GROUP
            and meta.get("name") == ref.name
            and str(meta.get("namespace") or "") in ("", namespace or "default")
        ):
            if found is not None and found[1] != doc:
                raise UsageError(
                    f"{ref.kind} {ref.name} is given twice: {found[0]} and {where}; give it once"
                )
            found = (where, doc)
    return found[1] if found else None


def version_notes(rendered: list[RenderedCRS], cluster: Obj | None) -> list[str]:
    """One line per CRS with resources waiting for an unknown version, or with no
    resource for the version given (the controller keeps what a cluster has)."""
    name = metadata(cluster).get("name") if cluster else None
    shown = f"cluster {name}" if name else "the cluster"
    hint = ", ".join(VERSION_HINTS if cluster else VERSION_HINTS[:1])
    notes = []
    for each in rendered:
        crs = f"{each.crs.namespace}/{each.crs.name}"
        waiting = waiting_for_version(each, shown)
        if waiting is not None:
            notes.append(f"{crs}: left out (WaitingForVersion): {waiting}; {hint}")
        version = each.version.version if each.version is not None else None
        if each.crs.lacks_version(version):
            notes.append(
                f"{crs}: no resource is for Kubernetes v{version} (NoResourceForVersion): "
                f"{shown} keeps what it has of the others until one is"
            )
        if (before := pre_release_note(each, version)) is not None:
            notes.append(f"{crs}: {before}")
    return notes


def pre_release_note(rendered: RenderedCRS, version: Version | None) -> str | None:
    """Said when ``version`` is a pre-release some resource's range holds but not its
    release: most likely the build before, bounded ``<1.35.0`` for ``1.35.0-rc.1``."""
    crs = rendered.crs
    if version is None or version.prerelease is None:
        return None
    names = [
        f"{ref.kind} {ref.name}"
        for index, ref in enumerate(crs.valid.spec.resources)
        if (versions := crs.version_range(index)) is not None
        and below_its_release(versions, version)
    ]
    if not names:
        return None
    release = version.finalize_version()
    return (
        f"Kubernetes v{version} is a pre-release inside the range of {', '.join(names)}, "
        f"v{release} is not (in SemVer a pre-release sorts before its release): an "
        f"upper bound <{release}-0 leaves it out"
    )


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


def _cluster_manifest(path: str, documents: list[tuple[str, Obj]]) -> Obj:
    for _, doc in documents:
        if doc.get("kind") == "Cluster":
            return doc
    raise UsageError(f"{path}: no Cluster in it")


def _cluster_labels(path: str, cluster: Obj) -> dict[str, str]:
    """The Cluster's labels; UsageError for a Cluster the controller refuses (its
    labels over the bound: it applies nothing there), naming the field, no value."""
    try:
        parsed = parse_cluster(cluster)
    except ValidationError as exc:
        raise UsageError(f"{path}: Cluster: {describe_validation(exc, 'metadata')}") from None
    if parsed.problem is not None:
        raise UsageError(
            f"{path}: Cluster {parsed.name} is refused: {parsed.problem}; the controller "
            "selects no ClusterResourceSet for it and applies nothing there"
        )
    return parsed.meta.labels


def _at(crs: CRS, labels: dict[str, str]) -> Cluster:
    """A cluster with ``labels`` in the CRS's namespace (a CRS selects only there)."""
    return Cluster(ObjectMeta(name="(given labels)", namespace=crs.namespace, labels=labels))


# --- the inputs: CRSs and their sources, each given once ----------------------------


@dataclass(frozen=True)
class Inputs:
    crss: list[CRS]
    sources: dict[SourceKey, Obj]
    warnings: list[str]

    def lookup(self, crs: CRS) -> Lookup:
        """A source of ``crs``: in its namespace, or given without one."""
        namespace = crs.namespace or "default"

        def find(kind: str, name: str) -> Obj | None:
            key = (namespace, kind, name)
            return self.sources.get(key) or self.sources.get(("", kind, name))

        return find


def read_inputs(documents: list[tuple[str, Obj]]) -> Inputs:
    """The CRSs and ConfigMaps/Secrets in ``documents``. Raises UsageError for one
    given twice (which one the controller would read depends on what was applied
    last: never guessed) and, when there is no CRS of ours, for Cluster API's."""
    crss: dict[tuple[str, str], tuple[str, CRS]] = {}
    sources: dict[SourceKey, tuple[str, Obj]] = {}
    capi: list[str] = []
    for where, doc in documents:
        kind = str(doc.get("kind"))
        namespace, name = _identity(where, kind, metadata(doc))
        if kind == CLUSTER_RESOURCE_SET_KIND and doc.get("apiVersion") == API_VERSION:
            crs = _parsed_crs(where, doc)
            _once(crss, (crs.namespace, crs.name), (where, crs), f"ClusterResourceSet {crs.name}")
        elif kind == CLUSTER_RESOURCE_SET_KIND and _is_capi(doc):
            capi.append(
                f"{where}: ClusterResourceSet {name} is Cluster API's ({doc['apiVersion']})"
            )
        elif doc.get("apiVersion") == "v1" and kind in ("ConfigMap", "Secret"):
            _once(sources, (namespace, kind, name), (where, doc), f"{kind} {name}")
    hint = "convert it first: crs-controller convert -f FILE | crs-controller render -f -"
    if not crss:
        first = f"; {capi[0]}: {hint}" if capi else ""
        raise UsageError(f"no ClusterResourceSet ({API_VERSION}) in the given manifests{first}")
    warnings = [f"{found}, not rendered: {hint}" for found in capi]
    by_key = {key: doc for key, (_, doc) in sources.items()}
    return Inputs([crs for _, crs in crss.values()], by_key, warnings)


def _identity(where: str, kind: str, meta: Obj) -> tuple[str, str]:
    """A document's namespace and name; UsageError for one that is not a string, as
    kubectl refuses it (YAML reads an unquoted ``n``, ``no`` or ``1e3`` as a boolean
    or a number)."""
    for field in ("namespace", "name"):
        if meta.get(field) is not None and not isinstance(meta[field], str):
            raise UsageError(
                f"{where}: {kind}: metadata.{field} must be a string (quote it in the YAML)"
            )
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _parsed_crs(where: str, doc: Obj) -> CRS:
    name = str(metadata(doc).get("name") or "")
    if unknown := unknown_fields(doc, CRS_SCHEMA):
        # As kubectl apply would be answered (strict field validation).
        raise UsageError(f"{where}: ClusterResourceSet {name}: {describe_unknown(unknown)}")
    try:
        crs = parse_crs_document(doc)
    except ValidationError as exc:  # metadata: the API server would refuse it
        what = describe_validation(exc, "metadata")
        raise UsageError(f"{where}: ClusterResourceSet {name}: {what}") from None
    if crs.problem is not None:
        raise UsageError(f"{where}: ClusterResourceSet {crs.name}: {crs.problem}")
    return crs


def _is_capi(doc: Obj) -> bool:
    return str(doc.get("apiVersion") or "").startswith(f"{CAPI_GROUP}/")


def _once(held: dict[Any, tuple[str, Any]], key: Any, value: tuple[str, Any], what: str) -> None:
    namespace = key[0]
    if key in held:
        place = f" in namespace {namespace}" if namespace else ""
        raise UsageError(
            f"{what}{place} is given twice: {held[key][0]} and {value[0]}; give it once"
        )
    held[key] = value


# --- the outputs -----------------------------------------------------------------------


def report(rendered: RenderedCRS) -> Obj:
    crs = rendered.crs
    return {
        "name": crs.name,
        "namespace": crs.namespace,
        "revision": rendered.revision,
        "resources": [
            {"kind": r.kind, "name": r.name, "hash": r.hash, "objects": list(r.objects)}
            for r in rendered.resources
        ],
        "leftOut": [
            {
                "kind": r.kind,
                "name": r.name,
                "kubernetesVersions": r.versions,
                "reason": LEFT_OUT_REASONS[r.why],
            }
            for r in rendered.left_out
        ],
    }


# Why a resource is not rendered, as -o json|yaml say it.
LEFT_OUT_REASONS = {"outside": "OutsideVersionRange", "unknown": "WaitingForVersion"}


def manifest_stream(rendered: list[RenderedCRS]) -> str:
    """Every object as the controller sends it, in apply order, one YAML document
    each, after a comment naming where it comes from (as ``helm template``'s
    ``# Source:``). Names in comments are escaped: a newline in one must not start
    a document of its own."""
    documents = []
    for each in rendered:
        crs = f"{each.crs.namespace}/{each.crs.name}"
        for resource in each.resources:
            source = (
                f"# Source: ClusterResourceSet {crs}, {resource.kind} {resource.name}, "
                f"hash {resource.hash}, revision {each.revision}"
            )
            for body in resource.bodies():
                documents.append(f"---\n{printable(source)}\n{_dump(body)}")
    return "".join(documents)


def _dump(body: Obj) -> str:
    return dump_manifest(body)


def _table(data: Obj) -> str:
    rows = []
    for crs in data["clusterResourceSets"]:
        revision = (crs["revision"] or "-")[:SHORT_REVISION]
        for resource in crs["resources"]:
            objects = resource["objects"] or [None]
            for position, obj in enumerate(objects, 1):
                rows.append(
                    [
                        f"{crs['namespace']}/{crs['name']}",
                        revision,
                        f"{resource['kind']}/{resource['name']}",
                        resource["hash"] if position == 1 else "",
                        *_object_cells(position, obj),
                    ]
                )
                revision = ""
    header = ["CRS", "REVISION", "RESOURCE", "HASH", "#", "KIND", "OBJECT"]
    return format_table(header, rows)


def _object_cells(position: int, obj: Obj | None) -> list[str]:
    if obj is None:
        return ["-", "-", "(no objects)"]
    ref = object_ref(obj)
    where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
    return [str(position), f"{ref.api_version} {ref.kind}", where]
