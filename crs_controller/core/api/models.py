"""Pydantic models of the objects crs-controller reads and writes.

Python attributes are snake_case; the API names are their camelCase aliases. Models
ignore unknown fields so that a newer API server never breaks parsing. Validation
stays within what the CRDs in ``config/crd`` enforce (the unit tests keep both in
step): the model never refuses an object the API server has accepted. Cross-field
rules (``reapplyInterval`` needs ``mode: Reconcile`` …) are CEL rules of the CRD and
are not repeated here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    StringConstraints,
    field_validator,
    model_serializer,
)
from pydantic.alias_generators import to_camel

GROUP = "addons.crs.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
FINALIZER = f"{GROUP}/finalizer"
# On a binding: the uid of the Cluster it records (a Cluster recreated under the same
# name is another cluster). Kept beside the owner reference, which the garbage
# collector removes once that Cluster is gone.
CLUSTER_UID_ANNOTATION = f"{GROUP}/cluster-uid"
# On a binding: the shard bucket of its Cluster (core.membership.shard.bucket_of), so
# a shard member can watch only its own share's bindings with a label selector.
SHARD_BUCKET_LABEL = f"{GROUP}/shard-bucket"

CLUSTER_RESOURCE_SET_KIND = "ClusterResourceSet"
CLUSTER_RESOURCE_SET_PLURAL = "clusterresourcesets"
CLUSTER_RESOURCE_SET_BINDING_KIND = "ClusterResourceSetBinding"
CLUSTER_RESOURCE_SET_BINDING_PLURAL = "clusterresourcesetbindings"


# Go's time.ParseDuration syntax without sign ("90s", "10m", "1h30m", "500ms", "0").
# The same pattern guards the duration fields of the CRD.
DURATION_PATTERN = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+)$"

ResourceKind = Literal["ConfigMap", "Secret"]
Mode = Literal["ApplyOnce", "Reconcile"]
DriftDetection = Literal["None", "Generation", "Content"]
DeletionPolicy = Literal["Orphan", "Delete"]
# The kinds pruning and uninstall keep unless a resource's allowDelete names them:
# deleting one takes every custom resource of its kind, or everything in it, along.
ProtectedKind = Literal["CustomResourceDefinition", "Namespace"]
ConditionStatus = Literal["True", "False", "Unknown"]
SelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist"]

Duration = Annotated[str, StringConstraints(pattern=DURATION_PATTERN)]


def _as_utc(value: datetime) -> datetime:
    # Naive datetimes are taken as UTC, the only zone the API server writes.
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        # 0001-01-01T00:00:00+01:00 is before year 1 in UTC. A ValueError, which the
        # model reports as a field's problem; an OverflowError would escape it.
        raise ValueError("time out of range") from None


def rfc3339(value: datetime) -> str:
    """A metav1.Time as the API writes it."""
    # metav1.Time precision: whole seconds, always "Z".
    return _as_utc(value).strftime("%Y-%m-%dT%H:%M:%SZ")


DEFAULT_DRIFT_CHECK_INTERVAL = "1m"

Timestamp = Annotated[
    datetime,
    AfterValidator(_as_utc),
    PlainSerializer(rfc3339, return_type=str, when_used="json"),
]


class APIModel(BaseModel):
    """Base of every model: camelCase aliases, snake_case attributes, extras ignored."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


def to_api(model: BaseModel) -> dict[str, Any]:
    """The JSON-ready API form of ``model``: camelCase keys, no ``None`` values."""
    data: dict[str, Any] = model.model_dump(by_alias=True, exclude_none=True, mode="json")
    return data


class ObjectMeta(APIModel):
    """The parts of ``metadata`` the controller reads or writes."""

    name: str = ""
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = None
    creation_timestamp: Timestamp | None = None
    deletion_timestamp: Timestamp | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: list[str] = Field(default_factory=list)
    owner_references: list[dict[str, Any]] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _drop_empty(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Empty collections are left out: sent in a merge patch, ``finalizers: []``
        # would clear what other controllers put there.
        data: dict[str, Any] = handler(self)
        return {key: value for key, value in data.items() if value not in ({}, [])}


class LabelSelectorRequirement(APIModel):
    key: str
    operator: SelectorOperator
    values: list[str] = Field(default_factory=list)


class LabelSelector(APIModel):
    """metav1.LabelSelector. An empty selector matches no cluster (CAPI's rule)."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)


class ResourceRef(APIModel):
    """A ConfigMap or Secret in the ClusterResourceSet's namespace."""

    model_config = ConfigDict(frozen=True)

    kind: ResourceKind
    name: str = Field(min_length=1)


class SourceRef(ResourceRef):
    """One of ``spec.resources``: a ResourceRef that may opt in to per-cluster values,
    and may apply only to clusters whose control plane runs a version in a range."""

    substitute: bool = False
    # A semver range (">=1.34.0, <1.35.0"), compiled by core/versions/ranges.
    kubernetes_versions: str | None = Field(default=None, min_length=1, max_length=200)
    # The protected kinds this resource's objects may be deleted of (core/state/deletion_guard).
    allow_delete: list[ProtectedKind] | None = Field(default=None, max_length=2)

    @field_validator("allow_delete")
    @classmethod
    def _a_set(cls, value: list[ProtectedKind] | None) -> list[ProtectedKind] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError("allowDelete lists a kind twice")
        return value


# Names of variables, and of topology variables.
VARIABLE_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"


class VariableSource(APIModel):
    cluster_field: str | None = None
    topology_variable: str | None = None


class Variable(APIModel):
    name: Annotated[str, StringConstraints(pattern=VARIABLE_NAME_PATTERN)]
    value: str | None = None
    value_from: VariableSource | None = None
    default: str | None = None


class Dependency(APIModel):
    name: str = Field(min_length=1)


class Uninstall(APIModel):
    ensure: bool = False
    timeout: Duration | None = None
    before_delete: list[ResourceRef] = Field(default_factory=list)


# An int, or "N%" of the matching clusters (the CRD holds the bounds).
IntOrPercent = int | Annotated[str, StringConstraints(pattern=r"^[0-9]{1,3}%$")]


class HealthRule(APIModel):
    """How to tell whether objects of one kind are Ready: CEL expressions on the live
    object (``self``), compiled by core/health/cel_rules. It wins over kstatus."""

    api_version: str = Field(min_length=1, max_length=253)
    kind: str = Field(min_length=1, max_length=63)
    ready: str = Field(min_length=1, max_length=1024)
    failed: str | None = Field(default=None, min_length=1, max_length=1024)


class HealthCheck(APIModel):
    wait: bool = False
    timeout: Duration = "5m"
    rules: list[HealthRule] = Field(default_factory=list, max_length=20)


class Validation(APIModel):
    """Resources applied to each cluster of a step once it is done (typically a Job
    running a smoke test); the step is done when every Job among them is Complete."""

    resources: list[ResourceRef] = Field(min_length=1, max_length=10)
    timeout: Duration = "10m"


class RolloutStep(APIModel):
    cluster_selector: LabelSelector
    pause_after: Duration | None = None
    approval: Literal["Automatic", "Manual"] | None = None  # None: Automatic
    validation: Validation | None = None


class RolloutWindow(APIModel):
    """A change window: a new revision starts on an installed cluster only inside an
    Allow window (when there is one) and never inside a Deny window."""

    kind: Literal["Allow", "Deny"]
    schedule: str = Field(min_length=1, max_length=100)  # 5-field cron
    duration: Duration
    time_zone: str = Field(default="UTC", min_length=1, max_length=64)


class Rollout(APIModel):
    max_concurrent: IntOrPercent = "100%"
    steps: list[RolloutStep] = Field(default_factory=list)
    max_failures: IntOrPercent = 0
    paused: bool = False
    windows: list[RolloutWindow] | None = Field(default=None, max_length=20)
    on_failure: Literal["Halt", "Rollback"] = "Halt"


class IgnoreTarget(APIModel):
    """Which applied objects an ignore rule is about: every field given must match
    (like a selector); none given matches every object."""

    group: str | None = Field(default=None, max_length=253)
    version: str | None = Field(default=None, max_length=63)
    kind: str | None = Field(default=None, max_length=63)
    name: str | None = Field(default=None, max_length=253)
    namespace: str | None = Field(default=None, max_length=63)


class IgnoreRule(APIModel):
    """Fields left to others (JSON pointers, compiled by core/spec/ignore): sent when the
    object is created, then left out of applies and drift checks."""

    target: IgnoreTarget = Field(default_factory=IgnoreTarget)
    paths: list[Annotated[str, StringConstraints(min_length=1, max_length=256)]] = Field(
        min_length=1, max_length=20
    )


class ClusterResourceSetSpec(APIModel):
    cluster_selector: LabelSelector
    resources: list[SourceRef] = Field(min_length=1, max_length=100)
    mode: Mode = "ApplyOnce"
    reapply_interval: Duration | None = None
    drift_detection: DriftDetection = "None"
    drift_check_interval: Duration = DEFAULT_DRIFT_CHECK_INTERVAL
    deletion_policy: DeletionPolicy = "Orphan"
    uninstall: Uninstall = Field(default_factory=Uninstall)
    health_check: HealthCheck | None = None
    rollout: Rollout | None = None
    variables: list[Variable] = Field(default_factory=list, max_length=50)
    depends_on: list[Dependency] = Field(default_factory=list, max_length=10)
    gate_upgrades: bool = False
    revision_history_limit: int = Field(default=10, ge=1, le=100)
    ignore: list[IgnoreRule] = Field(default_factory=list, max_length=20)


CONDITION_REASON = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"  # metav1.Condition
MESSAGE_LIMIT = 1000  # what the controller writes in a binding or a condition


class Condition(APIModel):
    """metav1.Condition."""

    type: str
    status: ConditionStatus
    reason: str
    message: str = ""
    last_transition_time: str
    observed_generation: int | None = None


RolloutPhase = Literal[
    "Progressing", "Paused", "Halted", "Complete", "AwaitingApproval", "RolledBack"
]
# How a revision's rollout ended, as status.history says.
RevisionOutcome = Literal["Progressing", "Complete", "Halted", "RolledBack"]
WaitingFor = Literal["Window", "Approval", "Validation", "Budget"]


class RolloutStatus(APIModel):
    phase: RolloutPhase
    step: int = 1
    updated_clusters: int = 0
    message: str = ""
    held_clusters: int | None = None  # written only when some cluster holds
    waiting_for: WaitingFor | None = None
    next_window: Timestamp | None = None
    rolled_back_from: str | None = None  # the sources' revision, not applied meanwhile


class RevisionRecord(APIModel):
    """One kept revision of the sources (status.history)."""

    revision: str
    first_seen: Timestamp
    outcome: RevisionOutcome


class SkippedDeletion(APIModel):
    """A protected object (cluster-scoped: a CustomResourceDefinition or Namespace)
    kept on a cluster when it left the desired set, as status.deletionsSkipped names
    it (``cluster``: which one)."""

    cluster: str
    api_version: str
    kind: str
    name: str


class ClusterResourceSetStatus(APIModel):
    observed_generation: int | None = None
    revision: str | None = None
    rollout: RolloutStatus | None = None
    history: list[RevisionRecord] | None = None
    conditions: list[Condition] = Field(default_factory=list)
    matching_clusters: int = 0
    applied_clusters: int = 0
    failed_clusters: int = 0
    deletions_skipped: list[SkippedDeletion] | None = None  # written only when some


class ClusterResourceSet(APIModel):
    api_version: str = API_VERSION
    kind: str = CLUSTER_RESOURCE_SET_KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ClusterResourceSetSpec
    status: ClusterResourceSetStatus = Field(default_factory=ClusterResourceSetStatus)


# The keys the controller indexes by, each defined once.
ObjectKey = tuple[str, str, str, str]  # ObjectRef.key: group, kind, namespace, name
CRSKey = tuple[str, str]  # namespace, CRS name
PairKey = tuple[str, str, str]  # namespace, CRS name, cluster name (a CRS on a cluster)
SourceKey = tuple[str, str, str]  # namespace, kind, name of a ConfigMap or Secret


class ObjectRef(APIModel):
    """The identity of one object on a workload cluster, and the binding's inventory
    entry: one type, serialized one way. ``namespace`` is "" when none (and then not
    written). May be built positionally as (apiVersion, kind, namespace, name).

    As an inventory entry it also carries what was recorded right after the object
    was applied: ``hash``, its content's hash (only changed objects are sent again),
    its ``generation``, and ``fields``, the hash of the fields our manager owned
    (drift checks compare both). These records take no part in identity: two refs
    are equal, hash and sort alike when they name the same object."""

    model_config = ConfigDict(frozen=True)

    api_version: str
    kind: str
    namespace: str = ""
    name: str
    hash: str | None = None
    generation: int | None = None
    fields: str | None = None

    def __init__(self, *args: str, **data: Any) -> None:
        data.update(zip(("api_version", "kind", "namespace", "name"), args, strict=False))
        super().__init__(**data)

    @field_validator("namespace", mode="before")
    @classmethod
    def _no_namespace(cls, value: Any) -> Any:
        return "" if value is None else value

    @model_serializer(mode="wrap")
    def _without_empty_namespace(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if not (k == "namespace" and not v)}

    def __lt__(self, other: ObjectRef) -> bool:
        return self._fields() < other._fields()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ObjectRef):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def identity(self) -> ObjectRef:
        """The reference without its records."""
        return ObjectRef(self.api_version, self.kind, self.namespace, self.name)

    def _fields(self) -> tuple[str, str, str, str]:
        return (self.api_version, self.kind, self.namespace, self.name)

    @property
    def group(self) -> str:
        group, slash, _version = self.api_version.rpartition("/")
        return group if slash else ""

    @property
    def key(self) -> ObjectKey:
        """The object whatever its API version: apps/v1 and apps/v1beta2 name the same."""
        return (self.group, self.kind, self.namespace, self.name)

    def to_api(self) -> dict[str, str]:
        return to_api(self)

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.api_version} {self.kind} {where}"


class ResourceBinding(APIModel):
    """What was applied from one ConfigMap/Secret. A failed resource has
    ``applied=False`` and keeps its previous inventory."""

    kind: ResourceKind
    name: str = Field(min_length=1)
    hash: str = ""
    applied: bool = False
    last_applied_time: Timestamp | None = None
    # Sum of metadata.generation of ``objects`` as recorded after their applies.
    generation: int | None = None
    # Written by earlier versions (one hash over all objects' owned fields); read as a
    # drift baseline only while the objects carry no ``fields`` of their own.
    fields_hash: str | None = None
    objects: list[ObjectRef] = Field(default_factory=list)


class BindingOutcome(APIModel):
    """This CRS on this cluster: the reason (a condition reason of the CRS), what to
    act on, and when it last changed. ``observedGeneration`` is the CRS generation it
    was reached for; ``ready: false`` marks a Progressing cluster that has everything
    applied and waits for its objects to be Ready (otherwise Progressing means held
    back by the rollout). With these, any replica reads the CRS's status from the
    bindings alone."""

    # A binding is tenant-writable: its reason becomes a condition reason of the CRS,
    # which the API server checks against metav1's pattern, so one forged entry must
    # not be able to make every status write of the CRS fail.
    reason: str = Field(pattern=CONDITION_REASON, max_length=1024)
    message: str = Field(default="", max_length=MESSAGE_LIMIT)
    time: Timestamp | None = None
    observed_generation: int | None = Field(default=None, ge=0)
    ready: bool | None = None
    # A failure: the revision the pass was taking (a rollout counts it against that
    # revision). Absent when the cluster had the revision and failed afterwards.
    revision: str | None = Field(default=None, min_length=1, max_length=100)


class KeptObject(APIModel):
    """A protected object a binding entry names as kept (cluster-scoped, no namespace)."""

    api_version: str = Field(min_length=1, max_length=316)
    kind: str = Field(min_length=1, max_length=63)
    name: str = Field(min_length=1, max_length=253)

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.api_version, self.kind, "", self.name)


CREATED_LIMIT = 50  # the validation objects a record remembers creating; more are kept
Uid = Annotated[str, StringConstraints(min_length=1, max_length=64)]


class ValidationRecord(APIModel):
    """A rollout step's validation on this cluster, for one revision: running since
    ``started``, or how it ended (``finished``) and why."""

    revision: str = Field(min_length=1, max_length=100)
    step: int = Field(ge=1)
    phase: Literal["Running", "Succeeded", "Failed"]
    started: Timestamp
    finished: Timestamp | None = None
    message: str = Field(default="", max_length=MESSAGE_LIMIT)
    # The uids of the validation objects a run created (absent before its apply) and
    # has not deleted yet: the only ones a validation deletes. A later run takes them
    # over (it clears the Jobs among them first).
    created: list[Uid] | None = Field(default=None, max_length=CREATED_LIMIT)


class CRSBinding(APIModel):
    cluster_resource_set_name: str = Field(min_length=1)
    resources: list[ResourceBinding] = Field(default_factory=list)
    outcome: BindingOutcome | None = None
    validation: ValidationRecord | None = None
    # Protected objects kept when they left the desired set (forgotten from
    # ``resources``): what the status names, until applied again.
    deletions_skipped: list[KeptObject] | None = Field(default=None, max_length=20)


class ClusterResourceSetBindingSpec(APIModel):
    cluster_name: str = Field(min_length=1)
    bindings: list[CRSBinding] = Field(default_factory=list)


class ClusterResourceSetBinding(APIModel):
    api_version: str = API_VERSION
    kind: str = CLUSTER_RESOURCE_SET_BINDING_KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ClusterResourceSetBindingSpec
