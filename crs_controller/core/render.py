"""One render pipeline: what a ClusterResourceSet applies to one cluster.

    sources (ConfigMap/Secret) -> parse, apply order -> per-cluster values -> apply bodies

The controller runs these steps one at a time, each behind its own cache and
limits: ``engine/io/sources`` parses with ``parse_source``, ``engine/reconcile/substitute``
substitutes with ``substitute_resource`` and hashes with ``cluster_hash``,
``engine/reconcile/workload/applying`` sends ``apply_body``. ``render`` and ``diff`` run them
whole with ``render_crs``, so what they show is what the controller sends, with the
hashes its bindings record and the revision its status shows.

A resource with ``kubernetesVersions`` is rendered as the controller applies it: only
while the cluster's version is in its range, and not while that version is unknown
(``left_out`` says which and why).

Pure: the caller hands in the sources (``Lookup``), the Cluster and its version.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crs_controller.core.api.models import ResourceRef, SourceRef
from crs_controller.core.errors import CRSError, ResourceError, ResourceNotFound
from crs_controller.core.manifests.documents import apply_body, parse_objects
from crs_controller.core.manifests.hashing import resource_hash
from crs_controller.core.manifests.ordering import apply_order
from crs_controller.core.rollout.plan import revision
from crs_controller.core.spec.objects import CRS, dependency_graph
from crs_controller.core.values import dependencies
from crs_controller.core.values.substitution import (
    VariableSpec,
    cluster_values,
    substitute,
    values_digest,
)
from crs_controller.core.versions.cluster_version import ClusterVersion
from crs_controller.core.versions.ranges import version_match

__all__ = [
    "ClusterValues",
    "LeftOut",
    "Lookup",
    "RenderedCRS",
    "RenderedResource",
    "apply_body",
    "cluster_hash",
    "crs_order",
    "parse_source",
    "render_crs",
    "source_hash",
    "substitute_resource",
    "variable_specs",
    "waiting_for_version",
]

Obj = dict[str, Any]
# A source of the CRS's namespace by (kind, name); None: it does not exist.
Lookup = Callable[[str, str], Mapping[str, Any] | None]


def parse_source(raw: Mapping[str, Any]) -> list[Obj]:
    """A ConfigMap's/Secret's objects in the order they are applied; raises
    InvalidManifest (or WrongSecretType)."""
    return apply_order(parse_objects(raw))


def variable_specs(crs: CRS) -> list[VariableSpec]:
    """The CRS's ``spec.variables`` as substitution reads them."""
    specs = []
    for variable in crs.valid.spec.variables:
        origin = variable.value_from
        specs.append(
            VariableSpec(
                name=variable.name,
                value=variable.value,
                cluster_field=origin.cluster_field if origin else None,
                topology_variable=origin.topology_variable if origin else None,
                default=variable.default,
            )
        )
    return specs


def substitute_resource(
    ref: ResourceRef,
    objects: Sequence[Obj],
    values: Mapping[str, Any],
    specs: Sequence[VariableSpec],
) -> tuple[list[Obj], frozenset[str]]:
    """Copies of a resource's parsed objects with one cluster's values, and the names
    they use. Raises UnresolvedVariable or InvalidManifest (a malformed reference)."""
    return substitute(
        objects,
        values,
        resource=f"{ref.kind}/{ref.name}",
        variables=specs,
        secret=ref.kind == "Secret",
    )


def cluster_hash(source: str, used: frozenset[str], values: Mapping[str, Any]) -> str:
    """The hash a binding records for a substituted resource: its source's hash and the
    values it used, so a Cluster whose used value changes gets it again."""
    return f"{source}+{values_digest(used, values)}"


def source_hash(recorded: str) -> str:
    """The source's part of a recorded hash (see ``cluster_hash``)."""
    return recorded.split("+", 1)[0]


@dataclass(frozen=True)
class ClusterValues:
    """Where one cluster's values come from: its Cluster object, and overrides over it
    (the CLI's ``--set``; the controller has none)."""

    cluster: Mapping[str, Any]
    overrides: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RenderedResource:
    """One of ``spec.resources`` rendered: the hash the binding records (with the
    values digest when substituted), its source's own hash, its objects in apply
    order (values substituted, not yet apply bodies)."""

    kind: str
    name: str
    hash: str
    source_hash: str
    objects: tuple[Obj, ...]

    def bodies(self) -> list[Obj]:
        """What the controller sends for each object (before the workload server's
        discovery: a namespaced object without a namespace gets "default" there)."""
        return [apply_body(obj) for obj in self.objects]


@dataclass(frozen=True)
class LeftOut:
    """A resource the controller would not apply at the cluster's version: its
    ``kubernetesVersions`` (as written) does not contain it ("outside"), or the version
    is not known ("unknown": the engine's WaitingForVersion)."""

    kind: str
    name: str
    versions: str
    why: str


@dataclass(frozen=True)
class RenderedCRS:
    """A CRS rendered for one cluster. ``revision`` is the one its status shows
    (``status.revision``, over every resource, whatever the version): None while a
    source is missing or unreadable, as there. ``version`` is the cluster's, as given
    (None: resources were not matched against a version)."""

    crs: CRS
    resources: tuple[RenderedResource, ...] = ()
    problems: tuple[str, ...] = ()
    revision: str | None = None
    left_out: tuple[LeftOut, ...] = ()
    version: ClusterVersion | None = None


def render_crs(
    crs: CRS,
    lookup: Lookup,
    values: ClusterValues | None,
    *,
    missing: str = "not found",
    version: ClusterVersion | None = None,
) -> RenderedCRS:
    """Every resource of ``crs`` that applies at ``version`` rendered; what cannot be is
    a problem (one line naming the resource, never its content). Without ``values`` a
    ``substitute: true`` resource is shown as written, with its source's hash. Without
    ``version`` every resource is rendered, whatever its ``kubernetesVersions``; with
    one, the others are ``left_out`` — still hashed (the revision covers them), never
    parsed nor substituted, as the controller leaves them."""
    specs = variable_specs(crs)
    resources, problems, left_out = [], [], []
    parts: list[tuple[str, str, str]] | None = []
    for index, ref in enumerate(crs.valid.spec.resources):
        label = f"{crs.namespace}/{crs.name}: {ref.kind} {ref.name}"
        try:
            raw, digest = _read(lookup, ref, missing)
        except ResourceError as exc:
            problems.append(f"{label}: {exc} ({exc.reason})")
            parts = None
            continue
        if parts is not None:
            parts.append((ref.kind, ref.name, digest))
        if (out := _left_out(crs, index, ref, version)) is not None:
            left_out.append(out)
            continue
        try:
            resources.append(_resource(ref, raw, digest, values, specs))
        except CRSError as exc:  # names the resource and document, never the content
            problems.append(f"{label}: {exc} ({exc.reason})")
    rev = None if parts is None else revision(parts)
    return RenderedCRS(crs, tuple(resources), tuple(problems), rev, tuple(left_out), version)


def _read(lookup: Lookup, ref: ResourceRef, missing: str) -> tuple[Mapping[str, Any], str]:
    """A resource's source and its hash; raises ResourceError when it is missing
    (``missing`` says how) or cannot be read."""
    raw = lookup(ref.kind, ref.name)
    if raw is None:
        raise ResourceNotFound(missing)
    return raw, resource_hash(raw)


def _left_out(
    crs: CRS, index: int, ref: SourceRef, version: ClusterVersion | None
) -> LeftOut | None:
    """Why the controller would not apply resource ``index`` at ``version`` (None: it
    would, or no version was given)."""
    if version is None:
        return None
    match = version_match(crs.version_range(index), version.version)
    if match == "yes":
        return None
    return LeftOut(ref.kind, ref.name, ref.kubernetes_versions or "", match)


def waiting_for_version(rendered: RenderedCRS, cluster: str) -> str | None:
    """What the CRS waits for on ``cluster`` (named as the caller wants it shown), as the
    controller's WaitingForVersion outcome says it; None when it waits for nothing."""
    waiting = [f"{r.kind}/{r.name}" for r in rendered.left_out if r.why == "unknown"]
    if not waiting or rendered.version is None:
        return None
    return (
        f"{', '.join(waiting)} follow the Kubernetes version, unknown for {cluster}: "
        f"{rendered.version.unknown}"
    )


def _resource(
    ref: SourceRef,
    raw: Mapping[str, Any],
    digest: str,
    values: ClusterValues | None,
    specs: Sequence[VariableSpec],
) -> RenderedResource:
    objects = parse_source(raw)
    recorded = digest
    if ref.substitute and values is not None:
        found = cluster_values(values.cluster, specs, values.overrides)
        objects, used = substitute_resource(ref, objects, found, specs)
        recorded = cluster_hash(digest, used, found)
    return RenderedResource(ref.kind, ref.name, recorded, digest, tuple(objects))


def crs_order(crss: Iterable[CRS]) -> list[CRS]:
    """The order a cluster gets them in: each namespace's CRSs after those they
    depend on (``spec.dependsOn``), namespaces in the order they first come."""
    by_namespace: dict[str, dict[str, CRS]] = {}
    for crs in crss:
        by_namespace.setdefault(crs.namespace, {})[crs.name] = crs
    ordered = []
    for group in by_namespace.values():
        graph = dependency_graph(group.values())
        ordered += [group[name] for name in dependencies.dependency_order(group, graph)]
    return ordered
