"""Object health (``core.health.readiness``): the kstatus rules per kind (Deployment,
StatefulSet, DaemonSet, ReplicaSet, Pod, Job, PVC, Service, CRD, APIService) and
for any other object (Ready condition, existing is enough), in Ready, InProgress
and Failed states; an observed generation behind; being deleted; malformed objects
that must give InProgress naming the field, never an exception; messages that never
quote a condition's free text; and which object ``first_not_ready`` names."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.core.health.readiness import (
    REASON_LIMIT,
    Health,
    describe,
    first_not_ready,
    object_health,
)

DROP: Any = object()  # in a patch: remove the key
STATES = {"Ready", "InProgress", "Failed"}
MARKER = "tenant-secret-text"


def cond(kind: str, status: str = "True", reason: str = "") -> dict[str, Any]:
    """A condition whose free-text message must never reach our messages."""
    return {"type": kind, "status": status, "reason": reason, "message": MARKER}


def patch(base: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of ``base`` with dotted paths set (``DROP`` removes the key)."""
    result = copy.deepcopy(dict(base))
    for path, value in changes.items():
        *parents, last = path.split(".")
        node = result
        for key in parents:
            node = node.setdefault(key, {})
        if value is DROP:
            node.pop(last, None)
        else:
            node[last] = value
    return result


def make(
    api_version: str,
    kind: str,
    spec: Mapping[str, Any] | None = None,
    status: Mapping[str, Any] | None = None,
    generation: int | None = 3,
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "api", "namespace": "web"},
    }
    if generation is not None:
        obj["metadata"]["generation"] = generation
    if spec is not None:
        obj["spec"] = dict(spec)
    if status is not None:
        obj["status"] = dict(status)
    return obj


DEPLOYMENT = make(
    "apps/v1",
    "Deployment",
    {"replicas": 2, "progressDeadlineSeconds": 600},
    {
        "observedGeneration": 3,
        "replicas": 2,
        "updatedReplicas": 2,
        "readyReplicas": 2,
        "availableReplicas": 2,
        "conditions": [
            cond("Available", "True", "MinimumReplicasAvailable"),
            cond("Progressing", "True", "NewReplicaSetAvailable"),
        ],
    },
)
STATEFULSET = make(
    "apps/v1",
    "StatefulSet",
    {"replicas": 3, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}},
    {
        "observedGeneration": 3,
        "replicas": 3,
        "readyReplicas": 3,
        "currentReplicas": 3,
        "updatedReplicas": 3,
        "currentRevision": "db-1",
        "updateRevision": "db-1",
    },
)
DAEMONSET = make(
    "apps/v1",
    "DaemonSet",
    {"updateStrategy": {"type": "RollingUpdate"}},
    {
        "observedGeneration": 3,
        "desiredNumberScheduled": 3,
        "currentNumberScheduled": 3,
        "updatedNumberScheduled": 3,
        "numberAvailable": 3,
        "numberReady": 3,
    },
)
REPLICASET = make(
    "apps/v1",
    "ReplicaSet",
    {"replicas": 2},
    {
        "observedGeneration": 3,
        "replicas": 2,
        "fullyLabeledReplicas": 2,
        "availableReplicas": 2,
        "readyReplicas": 2,
    },
)
POD = make("v1", "Pod", {}, {"phase": "Running", "conditions": [cond("Ready")]}, None)
JOB = make("batch/v1", "Job", {}, {"active": 1, "succeeded": 0}, 1)
CRD = make("apiextensions.k8s.io/v1", "CustomResourceDefinition", {}, {}, 1)
APISERVICE = make("apiregistration.k8s.io/v1", "APIService", {}, {}, None)
PVC = make("v1", "PersistentVolumeClaim", {}, {"phase": "Bound"}, None)
LB_SERVICE = make("v1", "Service", {"type": "LoadBalancer"}, {"loadBalancer": {}}, None)
WIDGET = make("example.com/v1", "Widget", {}, {"observedGeneration": 3})
CONFIGMAP = make("v1", "ConfigMap", None, None, None)


def with_conditions(base: Mapping[str, Any], *conditions: dict[str, Any]) -> dict[str, Any]:
    return patch(base, {"status.conditions": list(conditions)})


DEPLOYMENT_CASES = [
    pytest.param(DEPLOYMENT, "Ready", "", id="deployment-ready"),
    pytest.param(
        patch(DEPLOYMENT, {"status.availableReplicas": 1}),
        "InProgress",
        "1/2 replicas available",
        id="deployment-too-few-available",
    ),
    pytest.param(
        patch(DEPLOYMENT, {"status.replicas": 3, "status.updatedReplicas": 1}),
        "InProgress",
        "1/2 replicas updated",
        id="deployment-rollout-updating",
    ),
    pytest.param(
        patch(DEPLOYMENT, {"status.replicas": 3}),
        "InProgress",
        "1 old replicas pending termination",
        id="deployment-rollout-extra-replicas",
    ),
    pytest.param(
        patch(DEPLOYMENT, {"status.replicas": 1}),
        "InProgress",
        "1/2 replicas created",
        id="deployment-too-few-replicas",
    ),
    pytest.param(
        patch(DEPLOYMENT, {"status.readyReplicas": 1}),
        "InProgress",
        "1/2 replicas ready",
        id="deployment-too-few-ready",
    ),
    pytest.param(
        patch(
            DEPLOYMENT,
            {"spec.replicas": DROP, "status.replicas": 0, "status.updatedReplicas": 0},
        ),
        "InProgress",
        "0/1 replicas created",
        id="deployment-replicas-default-to-one",
    ),
    pytest.param(
        patch(
            DEPLOYMENT,
            {
                "spec.replicas": 0,
                "status.replicas": 0,
                "status.updatedReplicas": 0,
                "status.readyReplicas": 0,
                "status.availableReplicas": 0,
            },
        ),
        "Ready",
        "",
        id="deployment-scaled-to-zero",
    ),
    pytest.param(
        with_conditions(
            DEPLOYMENT,
            cond("Available", "True", "MinimumReplicasAvailable"),
            cond("Progressing", "True", "ReplicaSetUpdated"),
        ),
        "InProgress",
        "condition Progressing is True: ReplicaSetUpdated",
        id="deployment-new-replicaset-not-available",
    ),
    pytest.param(
        with_conditions(DEPLOYMENT, cond("Available", "True")),
        "InProgress",
        "condition Progressing not reported yet",
        id="deployment-progressing-missing",
    ),
    pytest.param(
        patch(
            with_conditions(DEPLOYMENT, cond("Available", "True")),
            {"spec.progressDeadlineSeconds": DROP},
        ),
        "Ready",
        "",
        id="deployment-no-deadline-needs-no-progressing",
    ),
    pytest.param(
        patch(
            with_conditions(DEPLOYMENT, cond("Available", "True")),
            {"spec.progressDeadlineSeconds": 2**31 - 1},
        ),
        "Ready",
        "",
        id="deployment-maxint-deadline-means-none",
    ),
    pytest.param(
        with_conditions(
            DEPLOYMENT,
            cond("Available", "False", "MinimumReplicasUnavailable"),
            cond("Progressing", "True", "NewReplicaSetAvailable"),
        ),
        "InProgress",
        "condition Available is False: MinimumReplicasUnavailable",
        id="deployment-not-available",
    ),
    pytest.param(
        patch(
            with_conditions(
                DEPLOYMENT,
                cond("Available", "False", "MinimumReplicasUnavailable"),
                cond("Progressing", "False", "ProgressDeadlineExceeded"),
            ),
            {"status.availableReplicas": 0},
        ),
        "Failed",
        "progress deadline exceeded",
        id="deployment-progress-deadline-exceeded",
    ),
    pytest.param(
        patch(DEPLOYMENT, {"status.observedGeneration": 2}),
        "InProgress",
        "generation 3 not observed yet (2)",
        id="deployment-generation-behind",
    ),
    pytest.param(
        patch(DEPLOYMENT, {"apiVersion": DROP}),
        "Ready",
        "",
        id="deployment-list-item-without-apiversion",
    ),
    pytest.param(
        patch(DEPLOYMENT, {"apiVersion": DROP, "status.updatedReplicas": 0}),
        "InProgress",
        "0/2 replicas updated",
        id="deployment-list-item-uses-deployment-rule",
    ),
]

STATEFULSET_CASES = [
    pytest.param(STATEFULSET, "Ready", "", id="statefulset-ready"),
    pytest.param(
        patch(STATEFULSET, {"status.readyReplicas": 2}),
        "InProgress",
        "2/3 replicas ready",
        id="statefulset-too-few-ready",
    ),
    pytest.param(
        patch(STATEFULSET, {"status.replicas": 2}),
        "InProgress",
        "2/3 replicas created",
        id="statefulset-too-few-replicas",
    ),
    pytest.param(
        patch(STATEFULSET, {"status.replicas": 4}),
        "InProgress",
        "1 old replicas pending termination",
        id="statefulset-extra-replicas",
    ),
    pytest.param(
        patch(STATEFULSET, {"status.updatedReplicas": 1, "status.updateRevision": "db-2"}),
        "InProgress",
        "1/3 replicas updated",
        id="statefulset-rolling-update",
    ),
    pytest.param(
        patch(STATEFULSET, {"status.updateRevision": "db-2"}),
        "InProgress",
        "update revision not rolled out yet",
        id="statefulset-revision-mismatch",
    ),
    pytest.param(
        patch(
            STATEFULSET,
            {
                "spec.updateStrategy.rollingUpdate.partition": 2,
                "status.updatedReplicas": 1,
                "status.updateRevision": "db-2",
            },
        ),
        "Ready",
        "",
        id="statefulset-partition-done",
    ),
    pytest.param(
        patch(
            STATEFULSET,
            {
                "spec.updateStrategy.rollingUpdate.partition": 2,
                "status.updatedReplicas": 0,
                "status.updateRevision": "db-2",
            },
        ),
        "InProgress",
        "0/1 replicas updated",
        id="statefulset-partition-pending",
    ),
    pytest.param(
        patch(
            STATEFULSET,
            {
                "spec.updateStrategy": {"type": "OnDelete"},
                "status.updatedReplicas": 0,
                "status.updateRevision": "db-2",
            },
        ),
        "Ready",
        "",
        id="statefulset-ondelete-ignores-updates",
    ),
    pytest.param(
        patch(
            STATEFULSET, {"spec.updateStrategy": {"type": "OnDelete"}, "status.readyReplicas": 1}
        ),
        "InProgress",
        "1/3 replicas ready",
        id="statefulset-ondelete-still-needs-ready",
    ),
    pytest.param(
        patch(STATEFULSET, {"spec.updateStrategy": DROP, "status.updatedReplicas": 2}),
        "InProgress",
        "2/3 replicas updated",
        id="statefulset-default-strategy-is-rolling",
    ),
    pytest.param(
        patch(STATEFULSET, {"status.observedGeneration": 1}),
        "InProgress",
        "generation 3 not observed yet (1)",
        id="statefulset-generation-behind",
    ),
]

DAEMONSET_CASES = [
    pytest.param(DAEMONSET, "Ready", "", id="daemonset-ready"),
    pytest.param(
        patch(DAEMONSET, {"status.desiredNumberScheduled": 0, "status.numberReady": 0}),
        "Ready",
        "",
        id="daemonset-no-nodes",
    ),
    pytest.param(
        patch(DAEMONSET, {"status.currentNumberScheduled": 2}),
        "InProgress",
        "2/3 pods scheduled",
        id="daemonset-too-few-scheduled",
    ),
    pytest.param(
        patch(DAEMONSET, {"status.updatedNumberScheduled": 1}),
        "InProgress",
        "1/3 pods updated",
        id="daemonset-rolling-update",
    ),
    pytest.param(
        patch(DAEMONSET, {"status.numberAvailable": 2}),
        "InProgress",
        "2/3 pods available",
        id="daemonset-too-few-available",
    ),
    pytest.param(
        patch(DAEMONSET, {"status.numberReady": 2}),
        "InProgress",
        "2/3 pods ready",
        id="daemonset-too-few-ready",
    ),
    pytest.param(
        patch(
            DAEMONSET, {"spec.updateStrategy.type": "OnDelete", "status.updatedNumberScheduled": 1}
        ),
        "Ready",
        "",
        id="daemonset-ondelete-ignores-updates",
    ),
    pytest.param(
        patch(DAEMONSET, {"status.observedGeneration": DROP}),
        "InProgress",
        "status.observedGeneration not set yet",
        id="daemonset-not-seen-by-controller",
    ),
    pytest.param(
        patch(DAEMONSET, {"status.desiredNumberScheduled": DROP}),
        "InProgress",
        "status.desiredNumberScheduled not set yet",
        id="daemonset-no-desired-number",
    ),
    pytest.param(
        patch(DAEMONSET, {"status.observedGeneration": 2}),
        "InProgress",
        "generation 3 not observed yet (2)",
        id="daemonset-generation-behind",
    ),
]

REPLICASET_CASES = [
    pytest.param(REPLICASET, "Ready", "", id="replicaset-ready"),
    pytest.param(
        patch(REPLICASET, {"status.availableReplicas": 1}),
        "InProgress",
        "1/2 replicas available",
        id="replicaset-too-few-available",
    ),
    pytest.param(
        patch(REPLICASET, {"status.replicas": 3}),
        "InProgress",
        "1 old replicas pending termination",
        id="replicaset-extra-replicas",
    ),
    pytest.param(
        with_conditions(REPLICASET, cond("ReplicaFailure", "True", "FailedCreate")),
        "InProgress",
        "condition ReplicaFailure is True: FailedCreate",
        id="replicaset-replica-failure",
    ),
]

POD_CASES = [
    pytest.param(POD, "Ready", "", id="pod-running-ready"),
    pytest.param(patch(POD, {"status.phase": "Succeeded"}), "Ready", "", id="pod-succeeded"),
    pytest.param(
        patch(POD, {"status.phase": "Failed", "status.reason": "Evicted"}),
        "Failed",
        "Pod failed: Evicted",
        id="pod-failed-with-reason",
    ),
    pytest.param(patch(POD, {"status.phase": "Failed"}), "Failed", "Pod failed", id="pod-failed"),
    pytest.param(
        with_conditions(POD, cond("Ready", "False", "ContainersNotReady")),
        "InProgress",
        "condition Ready is False: ContainersNotReady",
        id="pod-running-not-ready",
    ),
    pytest.param(
        patch(
            with_conditions(POD, cond("Ready", "False", "ContainersNotReady")),
            {
                "status.containerStatuses": [
                    {"name": "a", "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
                    {"name": "b", "state": {"running": {}}},
                ]
            },
        ),
        "InProgress",
        "1 containers in CrashLoopBackOff",
        id="pod-crash-looping",
    ),
    pytest.param(
        patch(POD, {"status.phase": "Pending", "status.conditions": []}),
        "InProgress",
        "Pod is Pending",
        id="pod-pending",
    ),
    pytest.param(
        with_conditions(
            patch(POD, {"status.phase": "Pending"}),
            cond("PodScheduled", "False", "Unschedulable"),
        ),
        "InProgress",
        "Pod is Pending: Unschedulable",
        id="pod-unschedulable",
    ),
    pytest.param(
        patch(POD, {"status": DROP}), "InProgress", "Pod phase not reported yet", id="pod-no-status"
    ),
    pytest.param(
        patch(POD, {"status.phase": MARKER}),
        "InProgress",
        "Pod phase unrecognised",
        id="pod-unknown-phase-not-quoted",
    ),
]

JOB_CASES = [
    pytest.param(with_conditions(JOB, cond("Complete", "True")), "Ready", "", id="job-complete"),
    pytest.param(
        with_conditions(JOB, cond("SuccessCriteriaMet", "True")),
        "Ready",
        "",
        id="job-success-criteria-met",
    ),
    pytest.param(
        with_conditions(JOB, cond("Failed", "True", "BackoffLimitExceeded")),
        "Failed",
        "Job failed: BackoffLimitExceeded",
        id="job-failed",
    ),
    pytest.param(
        with_conditions(JOB, cond("FailureTarget", "True", "DeadlineExceeded")),
        "Failed",
        "Job failed: DeadlineExceeded",
        id="job-failure-target",
    ),
    pytest.param(
        with_conditions(JOB, cond("Failed", "True")),
        "Failed",
        "Job failed",
        id="job-failed-no-reason",
    ),
    pytest.param(
        JOB, "InProgress", "Job not complete yet: 1 active, 0 succeeded", id="job-running"
    ),
    pytest.param(
        with_conditions(JOB, cond("Complete", "False"), cond("Failed", "False")),
        "InProgress",
        "Job not complete yet: 1 active, 0 succeeded",
        id="job-false-conditions-ignored",
    ),
    pytest.param(
        with_conditions(JOB, cond("Suspended", "True", "JobSuspended")),
        "InProgress",
        "Job is suspended",
        id="job-suspended",
    ),
    pytest.param(
        patch(JOB, {"metadata.generation": 2, "status.observedGeneration": 1}),
        "InProgress",
        "generation 2 not observed yet (1)",
        id="job-generation-behind",
    ),
]

CRD_CASES = [
    pytest.param(
        with_conditions(CRD, cond("NamesAccepted", "True"), cond("Established", "True")),
        "Ready",
        "",
        id="crd-established",
    ),
    pytest.param(
        with_conditions(
            CRD,
            cond("NamesAccepted", "False", "MultipleNamesNotAllowed"),
            cond("Established", "False", "NotAccepted"),
        ),
        "Failed",
        "condition NamesAccepted is False: MultipleNamesNotAllowed",
        id="crd-names-not-accepted",
    ),
    pytest.param(
        with_conditions(CRD, cond("Established", "False", "NotAccepted")),
        "Failed",
        "condition Established is False: NotAccepted",
        id="crd-not-established-for-good",
    ),
    pytest.param(
        with_conditions(
            CRD, cond("NamesAccepted", "True"), cond("Established", "False", "Installing")
        ),
        "InProgress",
        "condition Established is False: Installing",
        id="crd-installing",
    ),
    pytest.param(
        CRD, "InProgress", "condition Established not reported yet", id="crd-no-conditions"
    ),
]

APISERVICE_CASES = [
    pytest.param(
        with_conditions(APISERVICE, cond("Available", "True", "Passed")),
        "Ready",
        "",
        id="apiservice-available",
    ),
    pytest.param(
        with_conditions(APISERVICE, cond("Available", "False", "MissingEndpoints")),
        "InProgress",
        "condition Available is False: MissingEndpoints",
        id="apiservice-unavailable",
    ),
    pytest.param(
        APISERVICE,
        "InProgress",
        "condition Available not reported yet",
        id="apiservice-no-conditions",
    ),
]

PVC_SERVICE_CASES = [
    pytest.param(PVC, "Ready", "", id="pvc-bound"),
    pytest.param(
        patch(PVC, {"status.phase": "Pending"}), "InProgress", "PVC is Pending", id="pvc-pending"
    ),
    pytest.param(
        patch(PVC, {"status.phase": "Lost"}), "Failed", "PVC lost its volume", id="pvc-lost"
    ),
    pytest.param(
        patch(PVC, {"status": DROP}),
        "InProgress",
        "PVC phase not reported yet",
        id="pvc-no-status",
    ),
    pytest.param(
        patch(LB_SERVICE, {"spec.type": "ClusterIP"}), "Ready", "", id="service-cluster-ip"
    ),
    pytest.param(patch(LB_SERVICE, {"spec.type": DROP}), "Ready", "", id="service-default-type"),
    pytest.param(
        LB_SERVICE,
        "InProgress",
        "load balancer ingress not assigned yet",
        id="service-lb-pending",
    ),
    pytest.param(
        patch(LB_SERVICE, {"status.loadBalancer.ingress": []}),
        "InProgress",
        "load balancer ingress not assigned yet",
        id="service-lb-empty-ingress",
    ),
    pytest.param(
        patch(LB_SERVICE, {"status.loadBalancer.ingress": [{"ip": "192.0.2.1"}]}),
        "Ready",
        "",
        id="service-lb-ingress-assigned",
    ),
]

GENERIC_CASES = [
    pytest.param(None, "InProgress", "not found", id="missing"),
    pytest.param(CONFIGMAP, "Ready", "", id="configmap-exists"),
    pytest.param(WIDGET, "Ready", "", id="custom-without-conditions"),
    pytest.param(
        with_conditions(WIDGET, cond("Synced", "False")), "Ready", "", id="custom-other-conditions"
    ),
    pytest.param(with_conditions(WIDGET, cond("Ready", "True")), "Ready", "", id="custom-ready"),
    pytest.param(
        with_conditions(WIDGET, cond("Ready", "False", "DependencyNotReady")),
        "InProgress",
        "condition Ready is False: DependencyNotReady",
        id="custom-ready-false",
    ),
    pytest.param(
        with_conditions(WIDGET, cond("Ready", "Unknown")),
        "InProgress",
        "condition Ready is Unknown",
        id="custom-ready-unknown",
    ),
    pytest.param(
        with_conditions(WIDGET, cond("Ready", MARKER)),
        "InProgress",
        "condition Ready is not True",
        id="custom-ready-invalid-status-not-quoted",
    ),
    pytest.param(
        with_conditions(WIDGET, cond("Ready", "True"), cond("Stalled", "True", "InvalidSpec")),
        "Failed",
        "condition Stalled is True: InvalidSpec",
        id="custom-stalled",
    ),
    pytest.param(
        with_conditions(WIDGET, cond("Reconciling", "True", "Progressing")),
        "InProgress",
        "condition Reconciling is True: Progressing",
        id="custom-reconciling",
    ),
    pytest.param(
        patch(with_conditions(WIDGET, cond("Ready", "True")), {"status.observedGeneration": 2}),
        "InProgress",
        "generation 3 not observed yet (2)",
        id="custom-generation-behind",
    ),
    pytest.param(
        patch(WIDGET, {"status.observedGeneration": DROP}),
        "Ready",
        "",
        id="custom-without-observed-generation",
    ),
    pytest.param(
        patch(DEPLOYMENT, {"metadata.deletionTimestamp": "2026-01-01T00:00:00Z"}),
        "InProgress",
        "being deleted",
        id="being-deleted",
    ),
    pytest.param(
        patch(DEPLOYMENT, {"apiVersion": "example.com/v1", "status.updatedReplicas": 0}),
        "Ready",
        "",
        id="deployment-kind-in-another-group-is-generic",
    ),
]

MALFORMED_CASES = [
    pytest.param(
        patch(DEPLOYMENT, {"status.replicas": "2"}),
        "status.replicas is unreadable",
        id="string-instead-of-int",
    ),
    pytest.param(
        patch(DEPLOYMENT, {"spec.replicas": 2.0}),
        "spec.replicas is unreadable",
        id="float-instead-of-int",
    ),
    pytest.param(
        patch(DEPLOYMENT, {"metadata.generation": True}),
        "metadata.generation is unreadable",
        id="bool-instead-of-int",
    ),
    pytest.param(patch(DEPLOYMENT, {"status": [1, 2]}), "status is unreadable", id="status-list"),
    pytest.param(
        patch(DEPLOYMENT, {"metadata": "api"}), "metadata is unreadable", id="metadata-string"
    ),
    pytest.param(
        patch(DEPLOYMENT, {"status.conditions": {"type": "Available"}}),
        "status.conditions is unreadable",
        id="conditions-dict",
    ),
    pytest.param(
        patch(DEPLOYMENT, {"status.conditions": ["Available"]}),
        "status.conditions is unreadable",
        id="condition-string",
    ),
    pytest.param(
        patch(DEPLOYMENT, {"status.conditions": [{"type": "Available", "status": True}]}),
        "status.conditions is unreadable",
        id="condition-status-bool",
    ),
    pytest.param(
        patch(WIDGET, {"status.conditions": [{"status": "True"}]}),
        "status.conditions is unreadable",
        id="condition-without-type",
    ),
    pytest.param(patch(DEPLOYMENT, {"kind": 7}), "kind is unreadable", id="kind-int"),
    pytest.param(
        patch(DEPLOYMENT, {"apiVersion": ["apps/v1"]}),
        "apiVersion is unreadable",
        id="apiversion-list",
    ),
    pytest.param(
        patch(LB_SERVICE, {"status.loadBalancer.ingress": {"ip": "192.0.2.1"}}),
        "status.loadBalancer.ingress is unreadable",
        id="ingress-dict",
    ),
    pytest.param(
        patch(
            with_conditions(POD, cond("Ready", "False")),
            {"status.containerStatuses": ["CrashLoopBackOff"]},
        ),
        "status.containerStatuses is unreadable",
        id="container-status-string",
    ),
    pytest.param(
        patch(STATEFULSET, {"spec.updateStrategy": "RollingUpdate"}),
        "spec.updateStrategy is unreadable",
        id="strategy-string",
    ),
    pytest.param(patch(POD, {"status.phase": 1}), "status.phase is unreadable", id="phase-int"),
    pytest.param(cast(Any, ["Deployment"]), "object is unreadable", id="object-list"),
]


@pytest.mark.parametrize(
    ("obj", "state", "message"),
    DEPLOYMENT_CASES
    + STATEFULSET_CASES
    + DAEMONSET_CASES
    + REPLICASET_CASES
    + POD_CASES
    + JOB_CASES
    + CRD_CASES
    + APISERVICE_CASES
    + PVC_SERVICE_CASES
    + GENERIC_CASES,
)
def test_object_health(obj: Mapping[str, Any] | None, state: str, message: str) -> None:
    health = object_health(obj)
    assert (health.state, health.message) == (state, message)
    assert health.ready is (state == "Ready")


@pytest.mark.parametrize(("obj", "message"), MALFORMED_CASES)
def test_malformed_object_is_in_progress_naming_the_field(
    obj: Mapping[str, Any], message: str
) -> None:
    assert object_health(obj) == Health("InProgress", message)


def test_a_non_string_reason_is_dropped_not_unreadable() -> None:
    obj = with_conditions(WIDGET, {"type": "Ready", "status": "False", "reason": 5})
    assert object_health(obj) == Health("InProgress", "condition Ready is False")


def test_a_long_reason_is_capped() -> None:
    obj = with_conditions(WIDGET, cond("Ready", "False", "A" * 500))
    assert object_health(obj).message == "condition Ready is False: " + "A" * REASON_LIMIT


def test_control_characters_in_a_reason_are_replaced() -> None:
    obj = with_conditions(JOB, cond("Failed", "True", "Backoff\nLimit\x1b[31m"))
    assert object_health(obj).message == "Job failed: Backoff?Limit?[31m"


@pytest.mark.parametrize(
    ("objects", "expected"),
    [
        pytest.param([], None, id="nothing"),
        pytest.param(
            [("ConfigMap web/a", CONFIGMAP), ("Deployment web/api", DEPLOYMENT)],
            None,
            id="all-ready",
        ),
        pytest.param(
            [
                ("ConfigMap web/a", CONFIGMAP),
                ("Deployment web/api", patch(DEPLOYMENT, {"status.availableReplicas": 1})),
                ("Pod web/p", patch(POD, {"status.phase": "Pending"})),
            ],
            ("Deployment web/api", Health("InProgress", "1/2 replicas available")),
            id="first-in-progress-in-apply-order",
        ),
        pytest.param(
            [
                ("Deployment web/api", patch(DEPLOYMENT, {"status.availableReplicas": 1})),
                (
                    "Job web/migrate",
                    with_conditions(JOB, cond("Failed", "True", "BackoffLimitExceeded")),
                ),
                ("PersistentVolumeClaim web/data", patch(PVC, {"status.phase": "Lost"})),
            ],
            ("Job web/migrate", Health("Failed", "Job failed: BackoffLimitExceeded")),
            id="failed-beats-earlier-in-progress",
        ),
        pytest.param(
            [("ConfigMap web/a", CONFIGMAP), ("Secret web/gone", None)],
            ("Secret web/gone", Health("InProgress", "not found")),
            id="missing-object",
        ),
    ],
)
def test_first_not_ready(
    objects: list[tuple[str, Mapping[str, Any] | None]], expected: tuple[str, Health] | None
) -> None:
    assert first_not_ready(objects) == expected


@pytest.mark.parametrize(
    ("health", "line"),
    [
        pytest.param(
            Health("InProgress", "1/2 replicas available"),
            "Deployment web/api: 1/2 replicas available",
            id="not-ready",
        ),
        pytest.param(Health("Ready"), "Deployment web/api: Ready", id="ready"),
    ],
)
def test_describe(health: Health, line: str) -> None:
    assert describe("Deployment web/api", health) == line


# Fuzzing: tenants and other controllers write these objects.

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-3, max_value=5)
    | st.floats()
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
counts = st.integers(min_value=-2, max_value=4) | json_values
KINDS = [
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Pod",
    "Job",
    "PersistentVolumeClaim",
    "Service",
    "CustomResourceDefinition",
    "APIService",
    "ConfigMap",
    "Widget",
]
API_VERSIONS = [
    "v1",
    "apps/v1",
    "extensions/v1beta1",
    "batch/v1",
    "apiextensions.k8s.io/v1",
    "apiregistration.k8s.io/v1",
    "example.com/v1",
]
CONDITION_TYPES = [
    "Ready",
    "Available",
    "Progressing",
    "Complete",
    "Failed",
    "FailureTarget",
    "SuccessCriteriaMet",
    "Suspended",
    "Established",
    "NamesAccepted",
    "Stalled",
    "Reconciling",
    "ReplicaFailure",
    "PodScheduled",
]
REASONS = ["ProgressDeadlineExceeded", "NewReplicaSetAvailable", "Installing", "Unschedulable"]
COUNT_FIELDS = [
    "observedGeneration",
    "replicas",
    "updatedReplicas",
    "readyReplicas",
    "availableReplicas",
    "currentReplicas",
    "fullyLabeledReplicas",
    "desiredNumberScheduled",
    "currentNumberScheduled",
    "updatedNumberScheduled",
    "numberAvailable",
    "numberReady",
    "active",
    "succeeded",
]


def text_or(values: list[str]) -> st.SearchStrategy[Any]:
    return st.sampled_from(values) | json_values


conditions = st.lists(
    st.fixed_dictionaries(
        {"type": text_or(CONDITION_TYPES), "status": text_or(["True", "False", "Unknown"])},
        optional={"reason": text_or(REASONS) | st.text(max_size=200), "message": st.just(MARKER)},
    )
    | json_values,
    max_size=5,
)
statuses = st.fixed_dictionaries(
    {},
    optional={
        **dict.fromkeys(COUNT_FIELDS, counts),
        "conditions": conditions | json_values,
        "phase": text_or(["Running", "Pending", "Succeeded", "Failed", "Bound", "Lost"]),
        "currentRevision": text_or(["r1", "r2"]),
        "updateRevision": text_or(["r1", "r2"]),
        "loadBalancer": st.fixed_dictionaries({}, optional={"ingress": json_values}) | json_values,
        "containerStatuses": st.lists(
            st.fixed_dictionaries(
                {
                    "state": st.fixed_dictionaries(
                        {"waiting": st.just({"reason": "CrashLoopBackOff"})}
                    )
                }
            )
            | json_values,
            max_size=3,
        )
        | json_values,
    },
)
specs = st.fixed_dictionaries(
    {},
    optional={
        "replicas": counts,
        "progressDeadlineSeconds": counts,
        "type": text_or(["LoadBalancer", "ClusterIP"]),
        "updateStrategy": st.fixed_dictionaries(
            {},
            optional={
                "type": text_or(["RollingUpdate", "OnDelete"]),
                "rollingUpdate": st.fixed_dictionaries({}, optional={"partition": counts})
                | json_values,
            },
        )
        | json_values,
    },
)
objects = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": text_or(API_VERSIONS),
        "kind": text_or(KINDS),
        "metadata": st.fixed_dictionaries(
            {}, optional={"generation": counts, "deletionTimestamp": json_values}
        )
        | json_values,
        "spec": specs | json_values,
        "status": statuses | json_values,
    },
)
FUZZ = settings(max_examples=400, deadline=None)


@FUZZ
@given(objects)
def test_any_object_gets_a_verdict_without_quoting_it(obj: dict[str, Any]) -> None:
    health = object_health(obj)
    assert health.state in STATES
    assert MARKER not in health.message
    assert bool(health.message) is not health.ready
    assert len(health.message) < 200


@FUZZ
@given(st.dictionaries(st.text(max_size=10), json_values, max_size=6) | json_values)
def test_arbitrary_json_never_raises(obj: Any) -> None:
    assert object_health(obj).state in STATES


@FUZZ
@given(st.lists(st.tuples(st.text(max_size=5), st.none() | objects), max_size=5))
def test_first_not_ready_is_none_only_when_all_are_ready(
    labelled: list[tuple[str, Mapping[str, Any] | None]],
) -> None:
    found = first_not_ready(labelled)
    verdicts = [object_health(obj) for _, obj in labelled]
    assert (found is None) is all(health.ready for health in verdicts)
    if found is not None and any(health.state == "Failed" for health in verdicts):
        assert found[1].state == "Failed"
