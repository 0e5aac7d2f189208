"""Is one object read from a workload cluster Ready? (``healthCheck.wait``)

The rules are the kstatus ones that Flux and ``kubectl wait`` use, so a user who has
watched a rollout with either tool sees the same verdict here: generic checks first
(being deleted, a generation not observed yet, the standard ``Stalled`` and
``Reconciling`` conditions), then a rule per built-in kind, then a ``Ready``
condition for anything else, and otherwise existing is enough. A CRS's own rule
for a kind (``spec.healthCheck.rules``, CEL, ``core.health.cel_rules``) wins over all of
these for objects of exactly its apiVersion and kind.

Where kstatus reports an object Current that cannot be what the user waits for, we
are stricter, because a health wait exists to tell "done" from "still going":
a running Job is not Ready until it completes, a failed Pod is Failed, a
LoadBalancer Service waits for its ingress, and OnDelete StatefulSets still need
their replicas ready. A Lost PVC is Failed: its volume is gone for good.

Workload objects are written by other controllers and by tenants, so every field is
read defensively: a value of the wrong type makes the object InProgress with a
message naming the field, never an exception. Messages carry counts, condition
types and reasons (capped), never free text from the object: a condition's
``message`` can quote anything, even Secret data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from crs_controller.core.health.cel_rules import CheckBudget, CompiledRule, evaluate

__all__ = ["Health", "HealthState", "describe", "first_not_ready", "object_health"]

HealthState = Literal["Ready", "InProgress", "Failed"]

REASON_LIMIT = 100
NO_DEADLINE = 2**31 - 1  # spec.progressDeadlineSeconds meaning "none"
_CONDITION_STATUSES = ("True", "False", "Unknown")


@dataclass(frozen=True)
class Health:
    """The verdict on one object. Failed means waiting will not make it Ready (a
    failed Job, a Deployment past its progress deadline, CRD names not accepted)."""

    state: HealthState
    message: str = ""  # why not Ready, for a person; empty when Ready

    @property
    def ready(self) -> bool:
        return self.state == "Ready"


READY = Health("Ready")


def object_health(
    obj: Mapping[str, Any] | None,
    rule: CompiledRule | None = None,
    budget: CheckBudget | None = None,
) -> Health:
    """The verdict on ``obj`` as read from the API (None: it does not exist), by
    ``rule`` when its kind has one (spending from the check's ``budget``), else by
    kstatus."""
    if obj is None:
        return Health("InProgress", "not found")
    if not isinstance(obj, Mapping):
        return Health("InProgress", "object is unreadable")
    if rule is not None:
        verdict = evaluate(rule, obj, budget)
        return Health(verdict.state, verdict.message)
    try:
        return _health(_Fields(obj))
    except _Unreadable as unreadable:
        return Health("InProgress", f"{unreadable.path} is unreadable")


def first_not_ready(
    objects: Sequence[tuple[str, Mapping[str, Any] | Health | None]],
    rules: Sequence[CompiledRule | None] = (),
) -> tuple[str, Health] | None:
    """The object to name when a cluster is not healthy: the first Failed one, since
    it will not recover by waiting, else the first InProgress one (objects are in
    apply order, so that is the one holding the others up). None: all Ready.
    ``rules[i]``, when given, is the health rule for ``objects[i]``'s kind. A Health
    in place of an object is its verdict already (its read was refused)."""
    waiting: tuple[str, Health] | None = None
    budget = CheckBudget()  # what the rules may cost across this check's objects
    for n, (label, obj) in enumerate(objects):
        if isinstance(obj, Health):
            health = obj
        else:
            health = object_health(obj, rules[n] if n < len(rules) else None, budget)
        if health.state == "Failed":
            return label, health
        if waiting is None and not health.ready:
            waiting = label, health
    return waiting


def describe(label: str, health: Health) -> str:
    """One line for conditions and events: ``Deployment web/api: 1/2 replicas available``."""
    return f"{label}: {health.message or health.state}"


class _Unreadable(Exception):
    """A field holds a value of the wrong type; ``path`` names it."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


@dataclass(frozen=True)
class _Condition:
    status: str
    reason: str  # already made safe to show


@dataclass(frozen=True)
class _Fields:
    """Typed reads from a raw object: absent or null gives the default, a wrong type
    raises ``_Unreadable`` (turned into InProgress at the top)."""

    raw: Mapping[str, Any]

    def value(self, path: str) -> Any:
        current: Any = self.raw
        walked: list[str] = []
        for key in path.split("."):
            if current is None:
                return None
            if not isinstance(current, Mapping):
                raise _Unreadable(".".join(walked) or "object")
            current = current.get(key)
            walked.append(key)
        return current

    def optional_count(self, path: str) -> int | None:
        value = self.value(path)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Unreadable(path)
        return value

    def count(self, path: str, default: int = 0) -> int:
        value = self.optional_count(path)
        return default if value is None else value

    def text(self, path: str) -> str:
        value = self.value(path)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise _Unreadable(path)
        return value

    def items(self, path: str) -> list[Any]:
        value = self.value(path)
        if value is None:
            return []
        if not isinstance(value, list | tuple):
            raise _Unreadable(path)
        return list(value)

    def conditions(self) -> dict[str, _Condition]:
        """``status.conditions`` by type; the first entry of a type wins, as in kstatus."""
        found: dict[str, _Condition] = {}
        for entry in self.items("status.conditions"):
            if not isinstance(entry, Mapping):
                raise _Unreadable("status.conditions")
            kind, status = entry.get("type"), entry.get("status")
            if not isinstance(kind, str) or not isinstance(status, str):
                raise _Unreadable("status.conditions")
            found.setdefault(kind, _Condition(status, _safe_reason(entry.get("reason"))))
        return found


def _safe_reason(reason: Any) -> str:
    """A reason is meant to be a CamelCase word; anyone can write anything there, so
    it is capped and stripped of control characters. A non-string reason is only
    cosmetic and is dropped rather than making the object unreadable."""
    if not isinstance(reason, str):
        return ""
    return "".join(ch if ch.isprintable() else "?" for ch in reason[:REASON_LIMIT])


def _status_is(condition: _Condition | None, status: str) -> bool:
    return condition is not None and condition.status == status


def _is_true(condition: _Condition | None) -> bool:
    return _status_is(condition, "True")


def _reason_is(condition: _Condition | None, reason: str) -> bool:
    return condition is not None and condition.reason == reason


def _condition_says(kind: str, condition: _Condition | None) -> str:
    """``condition Ready is False: Reason`` (the status is named only when it is a
    valid one, since it is written by whoever owns the object)."""
    if condition is None:
        return f"condition {kind} not reported yet"
    status = condition.status if condition.status in _CONDITION_STATUSES else "not True"
    said = f"condition {kind} is {status}"
    return f"{said}: {condition.reason}" if condition.reason else said


def _in_progress(message: str) -> Health:
    return Health("InProgress", message)


def _shortfall(checks: Iterable[tuple[int, int, str]]) -> Health | None:
    """The first (have, want, what) with have < want, as ``have/want what``."""
    for have, want, what in checks:
        if have < want:
            return _in_progress(f"{have}/{want} {what}")
    return None


def _extra(replicas: int, wanted: int) -> Health | None:
    """Pods beyond the desired count: a rollout is still replacing old ones."""
    if replicas > wanted:
        return _in_progress(f"{replicas - wanted} old replicas pending termination")
    return None


def _health(fields: _Fields) -> Health:
    generic = _generic(fields)
    if generic is not None:
        return generic
    rule = _rule_for(fields)
    if rule is not None:
        return rule(fields)
    ready = fields.conditions().get("Ready")
    if ready is None or _is_true(ready):
        return READY  # no Ready condition: existing is enough
    return _in_progress(_condition_says("Ready", ready))


def _generic(fields: _Fields) -> Health | None:
    """Checks that hold for every kind, before its own rule (kstatus's order)."""
    if fields.value("metadata.deletionTimestamp") is not None:
        return _in_progress("being deleted")
    generation = fields.optional_count("metadata.generation")
    observed = fields.optional_count("status.observedGeneration")
    if generation is not None and observed is not None and observed < generation:
        return _in_progress(f"generation {generation} not observed yet ({observed})")
    conditions = fields.conditions()
    if _is_true(conditions.get("Stalled")):
        return Health("Failed", _condition_says("Stalled", conditions["Stalled"]))
    if _is_true(conditions.get("Reconciling")):
        return _in_progress(_condition_says("Reconciling", conditions["Reconciling"]))
    return None


def _deployment(fields: _Fields) -> Health:
    """Every replica updated and available, no old ones left, and the controller
    says the new ReplicaSet is available; past the progress deadline is Failed."""
    conditions = fields.conditions()
    progressing = conditions.get("Progressing")
    if progressing is not None and progressing.reason == "ProgressDeadlineExceeded":
        return Health("Failed", "progress deadline exceeded")
    spec = fields.count("spec.replicas", 1)  # the controller's default
    replicas = fields.count("status.replicas")
    updated = fields.count("status.updatedReplicas")
    counted = (
        _shortfall([(replicas, spec, "replicas created"), (updated, spec, "replicas updated")])
        or _extra(replicas, spec)
        or _shortfall(
            [
                (fields.count("status.availableReplicas"), updated, "replicas available"),
                (fields.count("status.readyReplicas"), spec, "replicas ready"),
            ]
        )
    )
    if counted is not None:
        return counted
    # Without a progress deadline (absent, or MaxInt32, which the controller reads
    # as none) Progressing is never set, so only Available can tell.
    deadline = fields.optional_count("spec.progressDeadlineSeconds")
    has_deadline = deadline is not None and deadline != NO_DEADLINE
    settled = _is_true(progressing) and _reason_is(progressing, "NewReplicaSetAvailable")
    if has_deadline and not settled:
        return _in_progress(_condition_says("Progressing", progressing))
    if not _is_true(conditions.get("Available")):
        return _in_progress(_condition_says("Available", conditions.get("Available")))
    return READY


def _statefulset(fields: _Fields) -> Health:
    """Every replica created and ready, then (RollingUpdate) updated up to the
    partition. OnDelete leaves updates to the user, so only readiness counts."""
    spec = fields.count("spec.replicas", 1)
    replicas = fields.count("status.replicas")
    counted = _shortfall(
        [
            (replicas, spec, "replicas created"),
            (fields.count("status.readyReplicas"), spec, "replicas ready"),
        ]
    ) or _extra(replicas, spec)
    if counted is not None:
        return counted
    if fields.text("spec.updateStrategy.type") == "OnDelete":
        return READY
    return _statefulset_rollout(fields, spec)


def _statefulset_rollout(fields: _Fields, spec: int) -> Health:
    """Pods at or above the partition ordinal take the update; below stay old."""
    partition = fields.count("spec.updateStrategy.rollingUpdate.partition")
    wanted = max(spec - max(partition, 0), 0)
    updated = fields.count("status.updatedReplicas")
    if updated < wanted:
        return _in_progress(f"{updated}/{wanted} replicas updated")
    # A partitioned rollout keeps two revisions by design; a full one ends on one.
    current = fields.text("status.currentRevision")
    if partition <= 0 and current != fields.text("status.updateRevision"):
        return _in_progress("update revision not rolled out yet")
    return READY


def _daemonset(fields: _Fields) -> Health:
    """Every node that should run a pod runs an updated, available, ready one. The
    controller always sets these fields once it has seen the object, so their
    absence means it has not yet."""
    if fields.optional_count("status.observedGeneration") is None:
        return _in_progress("status.observedGeneration not set yet")
    desired = fields.optional_count("status.desiredNumberScheduled")
    if desired is None:
        return _in_progress("status.desiredNumberScheduled not set yet")
    checks = [(fields.count("status.currentNumberScheduled"), desired, "pods scheduled")]
    if fields.text("spec.updateStrategy.type") != "OnDelete":
        checks.append((fields.count("status.updatedNumberScheduled"), desired, "pods updated"))
    checks.append((fields.count("status.numberAvailable"), desired, "pods available"))
    checks.append((fields.count("status.numberReady"), desired, "pods ready"))
    return _shortfall(checks) or READY


def _replicaset(fields: _Fields) -> Health:
    """Every replica labelled, available and ready, none extra."""
    failure = fields.conditions().get("ReplicaFailure")
    if _is_true(failure):
        return _in_progress(_condition_says("ReplicaFailure", failure))
    spec = fields.count("spec.replicas", 1)
    counted = _shortfall(
        [
            (fields.count("status.fullyLabeledReplicas"), spec, "replicas labelled"),
            (fields.count("status.availableReplicas"), spec, "replicas available"),
            (fields.count("status.readyReplicas"), spec, "replicas ready"),
        ]
    ) or _extra(fields.count("status.replicas"), spec)
    return counted or READY


def _pod(fields: _Fields) -> Health:
    """Succeeded, or Running and Ready. Failed is terminal: the kubelet never
    restarts a pod out of that phase."""
    phase = fields.text("status.phase")
    conditions = fields.conditions()
    if phase == "Succeeded":
        return READY
    if phase == "Failed":
        reason = _safe_reason(fields.text("status.reason"))
        return Health("Failed", f"Pod failed: {reason}" if reason else "Pod failed")
    if phase == "Running":
        if _is_true(conditions.get("Ready")):
            return READY
        looping = _crash_looping(fields)
        if looping:
            return _in_progress(f"{looping} containers in CrashLoopBackOff")
        return _in_progress(_condition_says("Ready", conditions.get("Ready")))
    if phase == "Pending":
        scheduled = conditions.get("PodScheduled")
        if _reason_is(scheduled, "Unschedulable"):
            return _in_progress("Pod is Pending: Unschedulable")
        return _in_progress("Pod is Pending")
    return _in_progress("Pod phase not reported yet" if not phase else "Pod phase unrecognised")


def _crash_looping(fields: _Fields) -> int:
    """How many containers wait in CrashLoopBackOff (kstatus calls this Failed; it
    can clear by itself, e.g. once a dependency comes up, so we keep waiting)."""
    looping = 0
    for status in fields.items("status.containerStatuses"):
        if not isinstance(status, Mapping):
            raise _Unreadable("status.containerStatuses")
        waiting = _Fields(status).text("state.waiting.reason")
        looping += waiting == "CrashLoopBackOff"
    return looping


def _job(fields: _Fields) -> Health:
    """Complete (or SuccessCriteriaMet) is Ready; Failed (or FailureTarget, its
    forerunner) is Failed for good; anything else is still running."""
    conditions = fields.conditions()
    for kind in ("FailureTarget", "Failed"):
        condition = conditions.get(kind)
        if condition is not None and condition.status == "True":
            reason = condition.reason
            return Health("Failed", f"Job failed: {reason}" if reason else "Job failed")
    if any(_is_true(conditions.get(kind)) for kind in ("SuccessCriteriaMet", "Complete")):
        return READY
    if _is_true(conditions.get("Suspended")):
        return _in_progress("Job is suspended")
    active = fields.count("status.active")
    succeeded = fields.count("status.succeeded")
    return _in_progress(f"Job not complete yet: {active} active, {succeeded} succeeded")


def _crd(fields: _Fields) -> Health:
    """Established is Ready; names that clash with another CRD never will be."""
    conditions = fields.conditions()
    names = conditions.get("NamesAccepted")
    if _status_is(names, "False"):
        return Health("Failed", _condition_says("NamesAccepted", names))
    established = conditions.get("Established")
    if _is_true(established):
        return READY
    if _status_is(established, "False") and not _reason_is(established, "Installing"):
        return Health("Failed", _condition_says("Established", established))
    return _in_progress(_condition_says("Established", established))


def _apiservice(fields: _Fields) -> Health:
    """Available means the aggregated API answers; its backend may come up later."""
    available = fields.conditions().get("Available")
    return READY if _is_true(available) else _in_progress(_condition_says("Available", available))


def _pvc(fields: _Fields) -> Health:
    """Bound is Ready; Lost means its volume is gone, which waiting cannot undo."""
    phase = fields.text("status.phase")
    if phase == "Bound":
        return READY
    if phase == "Lost":
        return Health("Failed", "PVC lost its volume")
    if phase == "Pending":
        return _in_progress("PVC is Pending")
    return _in_progress("PVC phase not reported yet" if not phase else "PVC phase unrecognised")


def _service(fields: _Fields) -> Health:
    """A LoadBalancer Service is usable once the cloud has assigned an ingress."""
    if fields.text("spec.type") != "LoadBalancer":
        return READY
    if fields.items("status.loadBalancer.ingress"):
        return READY
    return _in_progress("load balancer ingress not assigned yet")


_Rule = Callable[[_Fields], Health]

# kind -> (API groups it is a built-in of, its rule); other groups are generic.
_RULES: dict[str, tuple[frozenset[str], _Rule]] = {
    "Deployment": (frozenset({"apps", "extensions"}), _deployment),
    "StatefulSet": (frozenset({"apps"}), _statefulset),
    "DaemonSet": (frozenset({"apps", "extensions"}), _daemonset),
    "ReplicaSet": (frozenset({"apps", "extensions"}), _replicaset),
    "Pod": (frozenset({""}), _pod),
    "Job": (frozenset({"batch"}), _job),
    "PersistentVolumeClaim": (frozenset({""}), _pvc),
    "Service": (frozenset({""}), _service),
    "CustomResourceDefinition": (frozenset({"apiextensions.k8s.io"}), _crd),
    "APIService": (frozenset({"apiregistration.k8s.io"}), _apiservice),
}


def _rule_for(fields: _Fields) -> _Rule | None:
    """The kind's own rule. An object without apiVersion (a LIST item) is matched
    by kind alone; with one, its group must be the built-in's."""
    entry = _RULES.get(fields.text("kind"))
    if entry is None:
        return None
    groups, rule = entry
    api_version = fields.text("apiVersion")
    if not api_version:
        return rule
    group = api_version.rpartition("/")[0]
    return rule if group in groups else None
