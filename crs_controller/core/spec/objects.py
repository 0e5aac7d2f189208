"""What the controller's caches hold: each watched object parsed once, when it
arrives, into the shape the engine reads. Nothing past this boundary indexes into
``["metadata"]``.

A ClusterResourceSet or a binding the model refuses (written through a looser
schema, or before a CRD upgrade) is still held, with its metadata and the problem,
so that it can be reported on and its finalizer handled; it harms nobody else.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, TypeVar, cast

from pydantic import BaseModel, TypeAdapter, ValidationError
from semver import Version

from crs_controller.core.api.clusters import (
    CLUSTER_GROUP,
    HOLD_UPDATES_ANNOTATION,
    PAUSED_ANNOTATION,
    control_plane_initialized,
    is_paused,
)
from crs_controller.core.api.models import (
    CLUSTER_UID_ANNOTATION,
    FINALIZER,
    BindingOutcome,
    ClusterResourceSet,
    ClusterResourceSetBinding,
    ClusterResourceSetStatus,
    CRSBinding,
    DeletionPolicy,
    Dependency,
    ObjectMeta,
    ObjectRef,
    ResourceBinding,
    SourceRef,
    ValidationRecord,
    to_api,
)
from crs_controller.core.api.models import Rollout as RolloutSpec
from crs_controller.core.api.selectors import matches_validated, validate_selector
from crs_controller.core.errors import InvalidSpec
from crs_controller.core.health.cel_rules import CompiledRule, compile_rules
from crs_controller.core.manifests.limits import NODE_BYTES, json_size
from crs_controller.core.rollout.history import ROLLBACK_ANNOTATION, Undo, decide, parse_request
from crs_controller.core.rollout.plan import APPROVE_ANNOTATION
from crs_controller.core.rollout.policy import Policy, compile_windows, policy_of
from crs_controller.core.rollout.snapshots import SNAPSHOT_LABEL, size_of
from crs_controller.core.spec.ignore import NO_IGNORES, Ignores, compile_ignores
from crs_controller.core.spec.metadata import annotations_problem, kept_meta, labels_problem
from crs_controller.core.spec.modes import ApplyOnce, Reconcile, Strategy, compile_strategy
from crs_controller.core.values.substitution import readable_part
from crs_controller.core.versions.cluster_version import (
    ControlPlaneRef,
    RefProblem,
    control_plane_ref,
    topology_upgrading,
    topology_version,
)
from crs_controller.core.versions.ranges import (
    VersionRange,
    compile_range,
    first_partial_overlap,
)

T = TypeVar("T")


class Shared:
    """Equal values held once, however many cached objects hold them: the summaries of
    a fleet's bindings repeat the same resources, outcomes and names cluster after
    cluster. What is shared is never changed in place. Bounded: at most ``size``
    values, each with at most SHARED_KEY_CHARS characters of text in its key (longer
    ones are not shared), emptied when full (a value then held twice costs memory,
    never correctness)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._held: dict[Hashable, Any] = {}

    def one(self, key: tuple[Any, ...], make: Callable[[], T]) -> T:
        """The value held for ``key``, made (and kept) when there is none."""
        if _text_chars(key) > SHARED_KEY_CHARS:
            return make()
        held = self._held.get(key)
        if held is None:
            if len(self._held) >= self._size:
                self._held.clear()
            held = self._held[key] = make()
        return cast(T, held)

    def text(self, value: str) -> str:
        """One copy of a short string (a name, a namespace)."""
        return self.one((value,), lambda: value)


def _text_chars(key: tuple[Any, ...]) -> int:
    """The characters of text in a key, those of the tuples in it too (a validation's
    created uids)."""
    return sum(
        len(part) if isinstance(part, str) else _text_chars(part) if isinstance(part, tuple) else 0
        for part in key
    )


SHARED_KEY_CHARS = 1024
SHARED = Shared(8192)


def _meta(raw: Mapping[str, Any]) -> ObjectMeta:
    """The metadata the API server wrote; only what it guarantees is relied on."""
    return ObjectMeta.model_validate(raw.get("metadata") or {})


def describe_validation(exc: ValidationError, what: str = "spec") -> str:
    """Field paths and what is wrong, never the values (they are the tenant's)."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    # An error of the whole value (not a mapping, say) has no field path.
    parts = [
        ".".join(str(p) for p in e["loc"]) + ": " + e["msg"] if e["loc"] else e["msg"]
        for e in errors[:5]
    ]
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return f"invalid {what}: " + "; ".join(parts) + more


class _Named:
    """Name and namespace read from an object's metadata (its ``meta``)."""

    meta: ObjectMeta

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def namespace(self) -> str:
        return self.meta.namespace or ""


@dataclass(frozen=True)
class CRS(_Named):
    """A ClusterResourceSet as cached: ``model`` when the model accepts it, else
    ``problem`` says why not (and the CRS selects no cluster)."""

    meta: ObjectMeta
    model: ClusterResourceSet | None
    problem: InvalidSpec | None = None
    status: ClusterResourceSetStatus = field(default_factory=ClusterResourceSetStatus)
    # The selector in API form, checked once: matching runs per cluster and event.
    _selector: Mapping[str, Any] | None = None
    # The mode compiled once (with its durations): every pass reads it.
    _strategy: ApplyOnce | Reconcile | None = None
    # spec.rollout compiled once (steps, windows), None without one.
    _policy: Policy | None = None
    # Each resource's kubernetesVersions range compiled once (None: every version),
    # in spec.resources order.
    _versions: tuple[VersionRange | None, ...] = ()
    # spec.ignore compiled once (its JSON pointers parsed).
    _ignores: Ignores = NO_IGNORES
    # spec.healthCheck.rules compiled once (CEL), in spec order.
    _rules: tuple[CompiledRule, ...] = ()
    # A refused spec: what deleting it needs, read from the raw spec alone.
    refused: DeletionSpec | None = None

    @property
    def generation(self) -> int:
        return self.meta.generation or 0

    @property
    def deleting(self) -> bool:
        return self.meta.deletion_timestamp is not None

    @property
    def paused(self) -> bool:
        return PAUSED_ANNOTATION in self.meta.annotations

    @property
    def active(self) -> bool:
        """To be applied: not being deleted, not paused, a spec the model accepts,
        and its finalizer there if it deletes what it applied."""
        return not self.deleting and not self.left_alone

    @property
    def left_alone(self) -> bool:
        """Its binding entries stay exactly as they are: paused, a spec the model
        refuses (unless it is being deleted and its deletionPolicy can be read), or
        awaiting its finalizer (nothing it applied is touched)."""
        refused = self.model is None and not (self.deleting and self.deletion_policy is not None)
        return self.paused or refused or self.awaits_finalizer

    @property
    def deletion_policy(self) -> DeletionPolicy | None:
        """``spec.deletionPolicy``; for a refused spec, as read from the raw spec alone
        (None: refused too, ``refused.problem`` says why)."""
        if self.model is not None:
            return self.model.spec.deletion_policy
        return None if self.refused is None else self.refused.policy

    @property
    def deletion_resources(self) -> tuple[SourceRef, ...]:
        """``spec.resources`` as deleting reads them (their allowDelete): for a refused
        spec, those that can be read alone (one that cannot allows nothing)."""
        if self.model is not None:
            return tuple(self.model.spec.resources)
        return () if self.refused is None else self.refused.resources

    @property
    def awaits_finalizer(self) -> bool:
        """deletionPolicy Delete without the finalizer yet: applied now, it could be
        deleted (at once, by the API server) before anything it applied is."""
        needs = self.model is not None and self.model.spec.deletion_policy == "Delete"
        return needs and not self.deleting and FINALIZER not in self.meta.finalizers

    @property
    def valid(self) -> ClusterResourceSet:
        """The model; raises the problem for a CRS the model refuses."""
        if self.model is None:
            raise self.problem or InvalidSpec("invalid spec")
        return self.model

    @property
    def strategy(self) -> Strategy:
        """How it applies, checks drift and waits; raises the problem for a CRS the
        model refuses."""
        if self._strategy is None:
            raise self.problem or InvalidSpec("invalid spec")
        return self._strategy

    @property
    def policy(self) -> Policy | None:
        """The rollout policy, None without ``spec.rollout``."""
        return self._policy

    def version_range(self, index: int) -> VersionRange | None:
        """The compiled ``kubernetesVersions`` of ``spec.resources[index]`` (None:
        every version)."""
        return self._versions[index] if index < len(self._versions) else None

    @property
    def ignores(self) -> Ignores:
        """The fields it leaves to others (``spec.ignore``)."""
        return self._ignores

    @property
    def health_rules(self) -> tuple[CompiledRule, ...]:
        """The compiled ``spec.healthCheck.rules`` (empty without any)."""
        return self._rules

    @property
    def follows_versions(self) -> bool:
        """Some resource applies only to some Kubernetes versions."""
        return any(r is not None for r in self._versions)

    def lacks_version(self, version: Version | None) -> bool:
        """It follows the Kubernetes version, but none of its resources is for
        ``version`` (known): a cluster running it keeps what it has of them (outcome
        NoResourceForVersion), and a gating CRS holds an upgrade to it."""
        ranges = [r for r in self._versions if r is not None]
        return bool(ranges) and version is not None and not any(r.contains(version) for r in ranges)

    def approved(self, revision: str) -> int | None:
        """The rollout step an approval names for ``revision`` (annotation
        ``addons.crs.dev/approve: "<revision>/<step>"``), None without one."""
        value = self.meta.annotations.get(APPROVE_ANNOTATION, "")
        named, _, step = value.rpartition("/")
        if named != revision or not (step.isascii() and step.isdigit()) or len(step) > 3:
            return None
        return int(step)

    def undo(self, sources: str) -> Undo:
        """What is rolled out while the sources are on revision ``sources``: them, or
        the revision a rollback returns to (``core.rollout.history.decide``)."""
        request = parse_request(self.meta.annotations.get(ROLLBACK_ANNOTATION))
        rollout = self.status.rollout
        back = rollout.rolled_back_from if rollout is not None else None
        kept = [record.revision for record in self.status.history or ()]
        return decide(sources, request, back, self.status.revision, kept)

    @property
    def selector(self) -> Mapping[str, Any] | None:
        """The selector in API form, as ``selects`` reads it (None: it selects none)."""
        return self._selector

    def selects(self, cluster: Cluster) -> bool:
        """Its selector matches the Cluster (same namespace only). A refused Cluster
        (its labels are not kept) is selected by none, not as one without labels."""
        if self._selector is None or cluster.namespace != self.namespace or cluster.problem:
            return False
        # Validated with the model when parsed.
        return matches_validated(self._selector, cluster.meta.labels)


# What a cached CRS's metadata keeps: the engine reads its identity, generation,
# version, deletion, finalizers and these annotations, never its labels (a tenant may
# write thousands, every replica caches every CRS).
CRS_META_READ = (
    "name",
    "namespace",
    "uid",
    "generation",
    "resourceVersion",
    "deletionTimestamp",
    "finalizers",
)
CRS_ANNOTATIONS_READ = (PAUSED_ANNOTATION, APPROVE_ANNOTATION, ROLLBACK_ANNOTATION)


def parse_crs_document(raw: Mapping[str, Any]) -> CRS:
    """``parse_crs`` of a document not yet sent to the API server (a file, a
    conversion): its metadata is checked whole first, as the server would check it,
    since the parse keeps only what the controller reads."""
    _meta(raw)
    return parse_crs(raw)


def parse_crs(raw: Mapping[str, Any]) -> CRS:
    meta_raw = raw.get("metadata")
    if isinstance(meta_raw, Mapping):
        # The model holds the metadata too: trimmed before either reads it.
        raw = {**raw, "metadata": kept_meta(meta_raw, CRS_META_READ, CRS_ANNOTATIONS_READ)}
    meta = _meta(raw)
    try:
        status = ClusterResourceSetStatus.model_validate(raw.get("status") or {})
    except ValidationError:
        status = ClusterResourceSetStatus()  # rewritten by the next status write
    try:
        model = ClusterResourceSet.model_validate(raw)
        selector = (raw.get("spec") or {}).get("clusterSelector")
        validate_selector(selector)
        strategy = compile_strategy(model.spec)
        policy = _policy(model.spec.rollout, strategy.durations.pause_after)
        versions = _versions(model)
        ignores = compile_ignores(model.spec.ignore)
        rules = compile_rules(model.spec.health_check.rules if model.spec.health_check else [])
    except ValidationError as exc:
        problem = InvalidSpec(describe_validation(exc))
        return CRS(meta, None, problem, status, refused=deletion_spec(raw))
    except InvalidSpec as exc:  # a selector or mode the API server refuses too, a huge duration
        return CRS(meta, None, exc, status, refused=deletion_spec(raw))
    selector_api = to_api(model.spec.cluster_selector)
    return CRS(
        meta, model, None, model.status, selector_api, strategy, policy, versions, ignores, rules
    )


@dataclass(frozen=True)
class DeletionSpec:
    """What deleting a CRS needs of its spec, read from the raw spec alone (for one the
    model refuses: none of the refused parts; for ``uninstall``: its order): its
    ``deletionPolicy`` (None: refused too, ``problem`` names the field), the
    ``spec.resources`` whose kind, name and ``allowDelete`` can be read (for the
    protected kinds they let go) and the names in its ``dependsOn`` that can be read
    (for the removal order)."""

    policy: DeletionPolicy | None
    problem: str = ""
    resources: tuple[SourceRef, ...] = ()
    depends_on: tuple[str, ...] = ()


_POLICY: TypeAdapter[DeletionPolicy] = TypeAdapter(DeletionPolicy)
_DEPENDENCY: TypeAdapter[Dependency] = TypeAdapter(Dependency)


def deletion_spec(raw: Mapping[str, Any]) -> DeletionSpec:
    """``DeletionSpec`` of a raw CRS; a part that cannot be read is left out."""
    spec = raw.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    try:
        policy: DeletionPolicy | None = _POLICY.validate_python(
            spec.get("deletionPolicy", "Orphan")
        )
        problem = ""
    except ValidationError:
        policy, problem = None, "spec.deletionPolicy: must be Delete or Orphan"
    resources = tuple(
        _readable(SourceRef, r, ("kind", "name", "allowDelete")) for r in _items(spec, "resources")
    )
    names = tuple(_readable(Dependency, d, ("name",)) for d in _items(spec, "dependsOn"))
    return DeletionSpec(
        policy,
        problem,
        tuple(r for r in resources if r is not None),
        tuple(d.name for d in names if d is not None),
    )


def _items(spec: Mapping[str, Any], key: str) -> list[Any]:
    value = spec.get(key)
    return value if isinstance(value, list) else []


M = TypeVar("M", bound=BaseModel)


def _readable(model: type[M], item: Any, keys: tuple[str, ...]) -> M | None:
    """``item``'s ``keys`` as ``model`` reads them, None when they cannot be read."""
    if not isinstance(item, Mapping):
        return None
    try:
        return model.model_validate({k: item[k] for k in keys if k in item})
    except ValidationError:
        return None


def _versions(model: ClusterResourceSet) -> tuple[VersionRange | None, ...]:
    compiled: list[VersionRange | None] = []
    for n, ref in enumerate(model.spec.resources):
        try:
            compiled.append(
                None if ref.kubernetes_versions is None else compile_range(ref.kubernetes_versions)
            )
        except ValueError as exc:
            raise InvalidSpec(f"spec.resources[{n}].kubernetesVersions: {exc}") from None
    _check_builds(compiled)
    return tuple(compiled)


def _check_builds(ranges: list[VersionRange | None]) -> None:
    """The resources that follow the version are the builds of one add-on: two whose
    ranges share a version must hold the same versions (parts of one build, applied
    together), or a cluster at a shared version would get both builds in turn."""
    found = first_partial_overlap(ranges)
    if found is not None:
        raise InvalidSpec(
            f"spec.resources[{found[0]}].kubernetesVersions and "
            f"spec.resources[{found[1]}].kubernetesVersions share a version but not all: "
            "each build of the add-on needs versions of its own (a build in "
            "several resources gives each the same range)"
        )


def _policy(spec: RolloutSpec | None, pauses: tuple[float, ...]) -> Policy | None:
    if spec is None:
        return None
    try:
        return policy_of(spec, pauses, compile_windows(spec))
    except ValueError as exc:  # a step's selector
        raise InvalidSpec(f"spec.rollout: {exc}") from None


@dataclass(frozen=True)
class Cluster(_Named):
    """A Cluster API Cluster (v1beta1 or v1beta2): what the engine decides on.

    ``whole`` is False for a summary (``cluster_summary``): what a replica keeps of a
    Cluster it does not own, without ``raw``."""

    meta: ObjectMeta
    paused: bool = False
    initialized: bool = False
    # What per-cluster values (spec.variables and the built-ins) read: the fields a
    # variable can reach (``readable_part``), not the whole object.
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # spec.controlPlaneRef (core/versions/cluster_version), read once.
    control_plane: ControlPlaneRef | RefProblem | None = None
    upgrading: bool = False  # its TopologyReconciled condition says it upgrades
    topology_version: str | None = None
    whole: bool = True
    # The version it was read in: an owner reference to it names one the server serves.
    api_version: str = f"{CLUSTER_GROUP}/v1beta1"
    # Why it is refused, naming the field (labels over the bound, not kept): it is
    # selected by no CRS and left alone. None for a Cluster taken as it is.
    problem: str | None = None

    @property
    def deleting(self) -> bool:
        return self.meta.deletion_timestamp is not None

    @property
    def refused_alive(self) -> bool:
        """Refused (its labels over the bound) and not being deleted: left alone, nothing
        applied or pruned. Being deleted, it is cleaned up as any other: the cleanup
        reads the binding's entries and the CRSs they name, never the labels."""
        return self.problem is not None and not self.deleting

    @property
    def holds_updates(self) -> bool:
        """It takes no new revision of any CRS (first installs still go)."""
        return self.meta.annotations.get(HOLD_UPDATES_ANNOTATION) == "true"


# What a cached Cluster's metadata keeps: the engine reads its name, uid (its binding
# records it), labels (the selectors, rollout steps), deletion and these annotations;
# a variable reads the others from ``raw``.
CLUSTER_META_READ = ("name", "namespace", "uid", "labels", "deletionTimestamp")
CLUSTER_ANNOTATIONS_READ = (HOLD_UPDATES_ANNOTATION, PAUSED_ANNOTATION)


def parse_cluster(raw: Mapping[str, Any]) -> Cluster:
    meta, problem = _cluster_meta(raw)
    return Cluster(
        meta,
        is_paused(raw),
        control_plane_initialized(raw),
        readable_part(raw),
        control_plane_ref(raw),
        topology_upgrading(raw),
        topology_version(raw),
        api_version=str(raw.get("apiVersion") or f"{CLUSTER_GROUP}/v1beta1"),
        problem=problem,
    )


def cluster_summary(cluster: Cluster) -> Cluster:
    """What any replica reads of a Cluster (a CRS's selector, status and rollout plan,
    the control plane it names): everything but ``raw``, which only a pass on the
    Cluster reads, after reading it whole (``whole`` is False)."""
    return replace(cluster, raw={}, whole=False) if cluster.whole else cluster


def parse_cluster_summary(raw: Mapping[str, Any]) -> Cluster:
    return cluster_summary(parse_cluster(raw))


# What a replica keeps whole of a Cluster of its own, at most: the estimated bytes of
# what a variable can read of it (``readable_part``), its JSON characters and
# NODE_BYTES a node. A real Cluster holds a few KiB; one over this (a tenant may fill
# spec, status and annotations up to etcd's 1.5 MiB) is kept as its summary, and each
# pass on it reads it whole, as one of another replica's.
MAX_KEPT_BYTES = 256 * 1024


def parse_cluster_kept(raw: Mapping[str, Any]) -> Cluster:
    """What the cache of a replica owning the Cluster keeps: the whole Cluster, or its
    summary past MAX_KEPT_BYTES."""
    cluster = parse_cluster(raw)
    return cluster if _weighs_at_most(cluster.raw, MAX_KEPT_BYTES) else cluster_summary(cluster)


def _weighs_at_most(value: Mapping[str, Any], limit: int) -> bool:
    nodes, _ = json_size(value, max_nodes=limit // NODE_BYTES, max_depth=limit)
    held = nodes * NODE_BYTES
    return held <= limit and held + len(json.dumps(value, default=str)) <= limit


def _cluster_meta(raw: Mapping[str, Any]) -> tuple[ObjectMeta, str | None]:
    """The metadata kept, and why the Cluster is refused (None: it is not): labels
    over the bound (``core.spec.metadata``) are not kept."""
    meta = raw.get("metadata")
    if not isinstance(meta, Mapping):
        return _meta(raw), None
    kept = kept_meta(meta, CLUSTER_META_READ, CLUSTER_ANNOTATIONS_READ)
    problem = labels_problem(meta.get("labels"), "metadata.labels")
    if problem is not None:
        del kept["labels"]
    return ObjectMeta.model_validate(kept), problem


@dataclass(frozen=True)
class Binding:
    """A ClusterResourceSetBinding as cached: ``model``, or ``problem`` when the model
    refuses it (then the cluster's reconcile stops rather than overwrite it).

    ``whole`` is False for a summary (``summary_of``): what a replica keeps of the
    binding of a Cluster it does not own."""

    meta: ObjectMeta
    model: ClusterResourceSetBinding | None
    problem: InvalidSpec | None = None
    whole: bool = True

    @property
    def valid(self) -> ClusterResourceSetBinding:
        if self.model is None:
            raise self.problem or InvalidSpec("invalid binding")
        return self.model

    def entries(self) -> dict[str, CRSBinding]:
        return {b.cluster_resource_set_name: b for b in self.valid.spec.bindings}

    @cached_property
    def entry_of(self) -> Mapping[str, CRSBinding]:
        """Each CRS's entry, as a CRS's status and rollout read it: the first one when
        a binding (tenant-writable) names a CRS twice; none when the model refuses it.
        Built once per cached version, not per lookup."""
        found: dict[str, CRSBinding] = {}
        for entry in self.model.spec.bindings if self.model is not None else ():
            found.setdefault(entry.cluster_resource_set_name, entry)
        return found


# What a refused binding's metadata keeps: what tells whose it is (``of_another_cluster``)
# and its version.
BINDING_META_READ = ("name", "namespace", "uid", "resourceVersion", "ownerReferences")


def binding_meta_problem(raw: Mapping[str, Any]) -> str | None:
    """Why a binding is refused for its metadata (labels or annotations over their
    bounds in ``core.spec.metadata``; a write sends them back, so they are kept whole
    or not at all), None when it is not."""
    meta = raw.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    return labels_problem(meta.get("labels"), "metadata.labels") or annotations_problem(
        meta.get("annotations"), "metadata.annotations"
    )


def parse_binding_object(raw: Mapping[str, Any]) -> Binding:
    refused = binding_meta_problem(raw)
    if refused is not None:
        kept = kept_meta(raw["metadata"], BINDING_META_READ, (CLUSTER_UID_ANNOTATION,))
        meta = ObjectMeta.model_validate(kept)
        return Binding(meta, None, InvalidSpec(f"binding {meta.namespace}/{meta.name}: {refused}"))
    try:
        model = ClusterResourceSetBinding.model_validate(raw)
    except ValidationError as exc:
        meta = _meta(raw)
        problem = InvalidSpec(describe_validation(exc, f"binding {meta.namespace}/{meta.name}"))
        return Binding(meta, None, problem)
    for entry in model.spec.bindings:
        _share_equal_parts(entry)
    # One copy of the metadata, not two.
    return Binding(model.metadata, model)


def _share_equal_parts(entry: CRSBinding) -> None:
    """Equal values in a just parsed entry become the one value every cached binding
    holds (never changed in place): its CRS's name, its records and its inventory."""
    entry.cluster_resource_set_name = SHARED.text(entry.cluster_resource_set_name)
    if entry.outcome is not None:
        entry.outcome = _shared_record(entry.outcome)
    if entry.validation is not None:
        entry.validation = _shared_record(entry.validation)
    for resource in entry.resources:
        resource.objects = [_shared_ref(ref) for ref in resource.objects]


def _shared_ref(ref: ObjectRef) -> ObjectRef:
    """An inventory entry (frozen): one value for equal ones, records included, as a
    fleet's bindings list the same objects cluster after cluster."""
    key = (ObjectRef, ref.api_version, ref.kind, ref.namespace, ref.name, ref.hash)
    return SHARED.one((*key, ref.generation, ref.fields), lambda: ref)


def summary_of(binding: Binding) -> Binding:
    """What a CRS's status and rollout plan read of a binding, for any replica: each
    entry's outcome, validation, kept objects and resources' hashes; of the inventory
    of applied objects only whether there is one (its first object's identity). A
    pass on the Cluster reads the whole binding first (``whole`` is False)."""
    if binding.model is None or not binding.whole:
        return binding
    return _summarized(binding.meta, binding.model)


def parse_binding_summary(raw: Mapping[str, Any]) -> Binding:
    """``summary_of`` the binding ``raw``, never building the inventory it leaves out."""
    spec = raw.get("spec")
    if isinstance(spec, Mapping) and isinstance(spec.get("bindings"), list):
        entries = [_trimmed_entry(entry) for entry in spec["bindings"]]
        raw = {**raw, "spec": {**spec, "bindings": entries}}
    parsed = parse_binding_object(raw)
    if parsed.model is None:
        return replace(parsed, meta=_summary_meta(parsed.meta), whole=False)
    return _summarized(parsed.meta, parsed.model)


def _summarized(meta: ObjectMeta, model: ClusterResourceSetBinding) -> Binding:
    meta = _summary_meta(meta)
    entries = [_summary_entry(entry) for entry in model.spec.bindings]
    spec = model.spec.model_copy(update={"bindings": entries})
    # One copy of the metadata, not two.
    return Binding(meta, model.model_copy(update={"spec": spec, "metadata": meta}), whole=False)


def _summary_meta(meta: ObjectMeta) -> ObjectMeta:
    """A binding's identity and version; the rest of its metadata matters only to the
    pass that writes it, which reads it whole."""
    return ObjectMeta(
        name=meta.name,
        namespace=SHARED.text(meta.namespace or ""),
        resource_version=meta.resource_version,
    )


def _summary_entry(entry: CRSBinding) -> CRSBinding:
    """Equal parts of entries are one value, shared by every summary holding them: a
    fleet's bindings repeat the same resources and outcomes cluster after cluster."""
    outcome, check = entry.outcome, entry.validation
    return entry.model_copy(
        update={
            "cluster_resource_set_name": SHARED.text(entry.cluster_resource_set_name),
            "resources": [_summary_resource(r) for r in entry.resources],
            "outcome": outcome and _shared_record(outcome),
            "validation": check and _shared_record(check),
        }
    )


def _summary_resource(resource: ResourceBinding) -> ResourceBinding:
    """What a rollout plan reads of a resource (``entry_revision``): its name, hash,
    whether it was applied, and whether it has applied objects."""
    first = resource.objects[0].identity() if resource.objects else None
    held = () if first is None else (first.api_version, first.kind, first.namespace, first.name)
    key = (ResourceBinding, resource.kind, resource.name, resource.hash, resource.applied, *held)
    return SHARED.one(
        key,
        lambda: ResourceBinding(
            kind=resource.kind,
            name=resource.name,
            hash=resource.hash,
            applied=resource.applied,
            objects=[] if first is None else [first],
        ),
    )


R = TypeVar("R", BindingOutcome, ValidationRecord)


def _shared_record(record: R) -> R:
    """An outcome or a validation: one value for equal ones."""
    kind: type[BaseModel] = type(record)
    parts: list[Any] = [getattr(record, name) for name in kind.model_fields]
    # A list (a validation's created uids) as a tuple: the key must hash.
    key = (kind, *(tuple(part) if isinstance(part, list) else part for part in parts))
    return SHARED.one(key, lambda: record)


def _trimmed_entry(entry: Any) -> Any:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("resources"), list):
        return entry
    resources = [
        {**r, "objects": r["objects"][:1]}
        if isinstance(r, Mapping) and isinstance(r.get("objects"), list)
        else r
        for r in entry["resources"]
    ]
    return {**entry, "resources": resources}


@dataclass(frozen=True, slots=True)
class SourceMeta:
    """A ConfigMap or Secret as cached: watched for its metadata only (content is
    fetched on demand), and only what is read of it: that it exists, the snapshot it
    is (``SNAPSHOT_LABEL``, a CRS's uid; and then the bytes it holds) and the uid a
    delete is checked against. A replica watches every one, kubeconfig Secrets of
    other replicas' Clusters too, so it is kept small."""

    name: str
    namespace: str = ""
    uid: str | None = None
    snapshot_of: str | None = None
    snapshot_bytes: int | None = None


def parse_source_meta(raw: Mapping[str, Any]) -> SourceMeta:
    meta = _meta(raw)
    of = meta.labels.get(SNAPSHOT_LABEL)
    size = size_of(meta.annotations) if of is not None else None
    return SourceMeta(meta.name, SHARED.text(meta.namespace or ""), meta.uid, of, size)


def depends_on(crs: CRS) -> tuple[str, ...]:
    """The names in a CRS's ``spec.dependsOn``, in spec order; a CRS the model refuses
    depends on nothing it could say, unless it is being deleted: then on the names
    that can be read (its objects still go before theirs)."""
    if crs.model is not None:
        return tuple(d.name for d in crs.model.spec.depends_on)
    refused = crs.refused if crs.deleting else None
    return () if refused is None else refused.depends_on


def dependency_graph(crss: Iterable[CRS]) -> dict[str, list[str]]:
    """Each CRS of a namespace and the names it depends on (``spec.dependsOn``)."""
    return {c.name: list(depends_on(c)) for c in crss}
