"""The API models (crs_controller.core.api.models) and the CRDs in config/.

Covers: the CRDs are structural and self-consistent; every field of the CRD schemas
exists in the pydantic models and vice versa, with the same enums, defaults and no
stricter constraints in the model; API dicts round-trip through the models; model
defaults; the duration syntax; the samples in config/samples parse.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from crs_controller.core.api import models
from crs_controller.core.api.models import (
    API_VERSION,
    DURATION_PATTERN,
    FINALIZER,
    ClusterResourceSet,
    ClusterResourceSetBinding,
    ClusterResourceSetSpec,
    ClusterResourceSetStatus,
    Condition,
    Dependency,
    HealthCheck,
    ObjectMeta,
    ObjectRef,
    ResourceBinding,
    ResourceRef,
    Rollout,
    to_api,
)
from crs_controller.core.manifests.documents import RESOURCE_SECRET_TYPE
from crs_controller.core.spec.modes import MIN_INTERVAL

CONFIG = Path(__file__).resolve().parents[2] / "config"
CRS_CRD = CONFIG / "crd" / "bases" / "addons.crs.dev_clusterresourcesets.yaml"
BINDING_CRD = CONFIG / "crd" / "bases" / "addons.crs.dev_clusterresourcesetbindings.yaml"
ALL_CRDS = sorted((CONFIG / "crd" / "bases").glob("*.yaml")) + sorted(
    (CONFIG / "testing").glob("*.yaml")
)


def _load_one(path: Path) -> dict[str, Any]:
    (document,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert isinstance(document, dict)
    return document


def _schema(path: Path) -> dict[str, Any]:
    (version,) = _load_one(path)["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


# --- the CRDs on their own -------------------------------------------------------

_TYPE_OF_VALUE = {"string": str, "boolean": bool, "integer": int, "object": dict, "array": list}


def _structural_problems(node: dict[str, Any], path: str) -> list[str]:
    """The rules of a structural schema the API server would refuse, plus our own
    consistency checks (defaults valid, list-map keys required, CEL fields exist)."""
    problems = [
        *_shape_problems(node, path),
        *_value_problems(node, path),
        *_list_map_problems(node, path),
        *_cel_problems(node, path),
    ]
    for name, child in node.get("properties", {}).items():
        problems += _structural_problems(child, f"{path}.{name}")
    if "items" in node:
        problems += _structural_problems(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        problems += _structural_problems(node["additionalProperties"], f"{path}{{}}")
    return problems


def _shape_problems(node: dict[str, Any], path: str) -> list[str]:
    """A type on every node, and none of the keywords a structural schema refuses."""
    problems: list[str] = []
    open_ended = node.get("x-kubernetes-preserve-unknown-fields") or node.get(
        "x-kubernetes-int-or-string"
    )
    if "type" not in node and not open_ended:
        problems.append(f"{path}: no type")
    for keyword in ("allOf", "anyOf", "oneOf", "not", "$ref"):
        if keyword in node:
            problems.append(f"{path}: {keyword} is not used in these CRDs")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: properties and additionalProperties together")
    return problems


def _value_problems(node: dict[str, Any], path: str) -> list[str]:
    """Enum values and the default of the node's type; the default in the enum and
    matching the pattern."""
    problems: list[str] = []
    kind = node.get("type")
    expected_type = _TYPE_OF_VALUE.get(kind or "")
    for value in node.get("enum", []):
        if expected_type is not None and not isinstance(value, expected_type):
            problems.append(f"{path}: enum value {value!r} is not a {kind}")
    if "default" in node:
        default = node["default"]
        if expected_type is not None and not isinstance(default, expected_type):
            problems.append(f"{path}: default {default!r} is not a {kind}")
        if "enum" in node and default not in node["enum"]:
            problems.append(f"{path}: default {default!r} not in enum")
        if "pattern" in node and not re.search(node["pattern"], default):
            problems.append(f"{path}: default {default!r} does not match the pattern")
    return problems


def _list_map_problems(node: dict[str, Any], path: str) -> list[str]:
    """A list-map's keys are required (or defaulted) scalars."""
    problems: list[str] = []
    if node.get("x-kubernetes-list-type") != "map":
        return problems
    items = node["items"]
    for key in node.get("x-kubernetes-list-map-keys", []):
        key_schema = items["properties"].get(key, {})
        if key not in items.get("required", []) and "default" not in key_schema:
            problems.append(f"{path}: list-map key {key} must be required")
        if key_schema.get("type") not in {"string", "integer", "boolean"}:
            problems.append(f"{path}: list-map key {key} must be a scalar")
    return problems


def _cel_problems(node: dict[str, Any], path: str) -> list[str]:
    """Every CEL rule has a message and names only fields the node has."""
    problems: list[str] = []
    properties: dict[str, Any] = node.get("properties", {})
    for validation in node.get("x-kubernetes-validations", []):
        if not validation.get("message"):
            problems.append(f"{path}: CEL rule {validation['rule']!r} has no message")
        for field in re.findall(r"self\.(\w+)", validation["rule"]):
            if field not in properties:
                problems.append(f"{path}: CEL rule names unknown field {field}")
    return problems


def _schema_at(schema: dict[str, Any], json_path: str) -> dict[str, Any] | None:
    """The schema node a simple printer-column JSONPath points at."""
    node: dict[str, Any] | None = schema
    for step in re.sub(r"\[[^\]]*\]", "[]", json_path).strip(".").split("."):
        name = step.removesuffix("[]")
        node = (node or {}).get("properties", {}).get(name)
        if node is not None and step.endswith("[]"):
            node = node.get("items")
    return node


@pytest.mark.parametrize("path", ALL_CRDS, ids=lambda p: p.name)
def test_crd_schemas_are_structural(path: Path) -> None:
    crd = _load_one(path)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == f"{crd['spec']['names']['plural']}.{crd['spec']['group']}"
    assert crd["spec"]["scope"] == "Namespaced"
    versions = crd["spec"]["versions"]
    assert sum(1 for v in versions if v["storage"]) == 1
    for version in versions:
        schema = version["schema"]["openAPIV3Schema"]
        assert schema["properties"]["metadata"] == {"type": "object"}
        assert _structural_problems(schema, version["name"]) == []
        for column in version.get("additionalPrinterColumns", []):
            if column["jsonPath"].startswith(".metadata."):
                continue
            target = _schema_at(schema, column["jsonPath"])
            assert target is not None, column
            assert target["type"] == column["type"], column


def test_clusterresourceset_crd_shape() -> None:
    crd = _load_one(CRS_CRD)
    (version,) = crd["spec"]["versions"]
    assert (crd["spec"]["group"], version["name"]) == (models.GROUP, models.VERSION)
    assert crd["spec"]["names"]["kind"] == models.CLUSTER_RESOURCE_SET_KIND
    assert crd["spec"]["names"]["plural"] == models.CLUSTER_RESOURCE_SET_PLURAL
    assert version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == [
        "Mode",
        "Matching",
        "Applied",
        "Failed",
        "Revision",
        "Rollout",
        "Ready",
        "Paused",
        "Age",
    ]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    messages = {v["message"] for v in spec["x-kubernetes-validations"]}
    assert messages == {
        "reapplyInterval requires mode: Reconcile",
        "driftDetection other than None requires mode: Reconcile",
        "healthCheck requires mode: Reconcile",
        "rollout requires mode: Reconcile",
    }
    conditions = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"][
        "conditions"
    ]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


def test_binding_crd_shape() -> None:
    crd = _load_one(BINDING_CRD)
    (version,) = crd["spec"]["versions"]
    assert (crd["spec"]["group"], version["name"]) == (models.GROUP, models.VERSION)
    assert crd["spec"]["names"]["kind"] == models.CLUSTER_RESOURCE_SET_BINDING_KIND
    assert crd["spec"]["names"]["plural"] == models.CLUSTER_RESOURCE_SET_BINDING_PLURAL
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["required"] == ["clusterName"]
    # One entry per CRS, so that concurrent writers merge instead of overwriting.
    assert spec["properties"]["bindings"]["x-kubernetes-list-map-keys"] == [
        "clusterResourceSetName"
    ]
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["Cluster", "Age"]


def test_every_duration_field_uses_the_model_pattern() -> None:
    spec = _schema(CRS_CRD)["properties"]["spec"]["properties"]
    duration_fields = [
        spec["reapplyInterval"],
        spec["driftCheckInterval"],
        spec["uninstall"]["properties"]["timeout"],
    ]
    assert [f["pattern"] for f in duration_fields] == [DURATION_PATTERN] * 3


@pytest.mark.parametrize("field", ["reapplyInterval", "driftCheckInterval"])
def test_the_crd_refuses_an_interval_below_the_models_floor(field: str) -> None:
    """The API server refuses what the model would refuse (``compile_strategy``): an
    interval shorter than ``MIN_INTERVAL`` other than 0."""
    (rule,) = _schema(CRS_CRD)["properties"]["spec"]["properties"][field][
        "x-kubernetes-validations"
    ]
    assert f"duration(self) >= duration('{MIN_INTERVAL}')" in rule["rule"]
    assert "duration(self) == duration('0s')" in rule["rule"]
    assert rule["message"] == f"{field} must be 0 or at least {MIN_INTERVAL}"


# --- models and CRDs in step ----------------------------------------------------

_SCALARS: dict[Any, tuple[str, str | None]] = {
    str: ("string", None),
    bool: ("boolean", None),
    int: ("integer", None),
    datetime: ("string", "date-time"),
}


def _unwrap(annotation: Any) -> tuple[Any, list[Any]]:
    """Strip ``X | None`` and ``Annotated``; return the type and collected metadata."""
    metadata: list[Any] = []
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation, *extra = get_args(annotation)
            metadata += extra
        elif origin in (Union, UnionType):
            (annotation,) = [a for a in get_args(annotation) if a is not NoneType]
        else:
            return annotation, metadata


def _unwrap_optional(annotation: Any) -> Any:
    """``X | None`` -> X, keeping a union of several other members as a union."""
    members = [a for a in get_args(annotation) if a is not NoneType]
    if get_origin(annotation) in (Union, UnionType) and len(members) == 1:
        return members[0]
    return annotation


def _constraint_problems(node: dict[str, Any], metadata: list[Any], path: str) -> list[str]:
    # The model may be laxer than the CRD, never stricter: it must parse whatever the
    # API server accepted.
    is_array = node.get("type") == "array"
    keywords = {
        "min_length": "minItems" if is_array else "minLength",
        "max_length": "maxItems" if is_array else "maxLength",
        "pattern": "pattern",
        "ge": "minimum",
    }
    problems = []
    for item in metadata:
        for attribute, keyword in keywords.items():
            value = getattr(item, attribute, None)
            if value is not None and node.get(keyword) != value:
                problems.append(f"{path}: model {attribute}={value!r}, CRD {keyword}")
    return problems


def _field_problems(
    node: dict[str, Any], annotation: Any, path: str, field_metadata: list[Any] | None = None
) -> list[str]:
    if node.get("x-kubernetes-int-or-string"):
        # int | "N%": the CRD bounds each form (minimum, pattern); the model only
        # needs to take both.
        members = {_unwrap(a)[0] for a in get_args(_unwrap_optional(annotation))}
        return [] if members == {int, str} else [f"{path}: CRD int-or-string, model {members}"]
    tp, metadata = _unwrap(annotation)
    problems = _constraint_problems(node, [*(field_metadata or []), *metadata], path)
    origin = get_origin(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if node.get("type") != "object":
            return [*problems, f"{path}: CRD type {node.get('type')}, model object"]
        return problems + _model_problems(node, tp, path)
    if origin is list:
        if node.get("type") != "array":
            return [*problems, f"{path}: CRD type {node.get('type')}, model list"]
        return problems + _field_problems(node["items"], get_args(tp)[0], f"{path}[]")
    if origin is dict:
        values = node.get("additionalProperties")
        if node.get("type") != "object" or not isinstance(values, dict):
            return [*problems, f"{path}: CRD is not a map"]
        return problems + _field_problems(values, get_args(tp)[1], f"{path}{{}}")
    if origin is Literal:
        if node.get("type") != "string" or set(node.get("enum", [])) != set(get_args(tp)):
            problems.append(f"{path}: CRD enum {node.get('enum')}, model {get_args(tp)}")
        return problems
    return problems + _scalar_problems(node, tp, path)


def _scalar_problems(node: dict[str, Any], tp: Any, path: str) -> list[str]:
    """A plain scalar field: the CRD's type and format are the model's, without enum."""
    if tp not in _SCALARS:
        return [f"{path}: no CRD equivalent for {tp!r}"]
    problems = []
    if "enum" in node:
        problems.append(f"{path}: CRD has an enum, the model a plain {tp.__name__}")
    if (node.get("type"), node.get("format")) != _SCALARS[tp] and not (
        tp is not datetime and node.get("type") == _SCALARS[tp][0]
    ):
        problems.append(f"{path}: CRD {node.get('type')}/{node.get('format')}, model {tp}")
    return problems


def _model_problems(node: dict[str, Any], model: type[BaseModel], path: str) -> list[str]:
    properties: dict[str, Any] = node.get("properties", {})
    fields = {(info.alias or name): info for name, info in model.model_fields.items()}
    problems = [
        f"{path}.{alias}: {where}"
        for alias, where in [(a, "in the CRD only") for a in properties.keys() - fields.keys()]
        + [(a, f"in {model.__name__} only") for a in fields.keys() - properties.keys()]
    ]
    required = set(node.get("required", []))
    for alias, info in fields.items():
        field_path = f"{path}.{alias}"
        if alias not in properties:
            continue
        if info.is_required() and alias not in required:
            problems.append(f"{field_path}: required by the model, optional in the CRD")
        child = properties[alias]
        is_enum = not child.get("x-kubernetes-int-or-string") and (
            get_origin(_unwrap(info.annotation)[0]) is Literal
        )
        if "default" in child or (is_enum and not info.is_required()):
            model_default = (
                None
                if info.is_required()
                else TypeAdapter(info.annotation).dump_python(
                    info.get_default(call_default_factory=True), mode="json"
                )
            )
            if child.get("default") != model_default:
                problems.append(
                    f"{field_path}: CRD default {child.get('default')!r}, model {model_default!r}"
                )
        if alias == "metadata":
            continue  # metadata is the API server's, not declared in a CRD schema
        problems += _field_problems(child, info.annotation, field_path, info.metadata)
    return problems


@pytest.mark.parametrize(
    ("crd", "model"),
    [(CRS_CRD, ClusterResourceSet), (BINDING_CRD, ClusterResourceSetBinding)],
    ids=["ClusterResourceSet", "ClusterResourceSetBinding"],
)
def test_models_and_crds_declare_the_same_fields(crd: Path, model: type[BaseModel]) -> None:
    assert _model_problems(_schema(crd), model, model.__name__) == []


def test_the_sync_check_notices_a_difference() -> None:
    schema = _schema(CRS_CRD)
    schema["properties"]["spec"]["properties"]["mode"]["enum"].append("Sometimes")
    schema["properties"]["spec"]["properties"]["mode"]["default"] = "Reconcile"
    del schema["properties"]["spec"]["properties"]["uninstall"]["properties"]["timeout"]
    schema["properties"]["status"]["properties"]["extra"] = {"type": "string"}
    schema["properties"]["spec"]["required"].remove("resources")
    schema["properties"]["spec"]["properties"]["resources"]["maxItems"] = 50
    problems = _model_problems(schema, ClusterResourceSet, "CRS")
    assert len(problems) == 6, problems


# --- round trips ----------------------------------------------------------------

FULL_CRS: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "ClusterResourceSet",
    "metadata": {
        "name": "calico",
        "namespace": "default",
        "uid": "7d3e1c9a-0000-4000-8000-000000000001",
        "generation": 3,
        "resourceVersion": "4711",
        "creationTimestamp": "2026-11-20T08:00:00Z",
        "deletionTimestamp": "2026-11-22T10:00:00Z",
        "labels": {"team": "platform"},
        "annotations": {"note": "cni"},
        "finalizers": [FINALIZER],
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "u-1"}
        ],
    },
    "spec": {
        "clusterSelector": {
            "matchLabels": {"cni": "calico"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "staging"]},
                {"key": "legacy", "operator": "DoesNotExist", "values": []},
            ],
        },
        "resources": [
            {"kind": "ConfigMap", "name": "calico-addon", "substitute": True},
            {
                "kind": "Secret",
                "name": "calico-secret",
                "substitute": False,
                "kubernetesVersions": ">=1.34.0, <1.35.0",
            },
        ],
        "mode": "Reconcile",
        "reapplyInterval": "10m",
        "driftDetection": "Generation",
        "driftCheckInterval": "30s",
        "deletionPolicy": "Delete",
        "uninstall": {
            "ensure": True,
            "timeout": "1h30m",
            "beforeDelete": [{"kind": "ConfigMap", "name": "drain-finalizers"}],
        },
        "healthCheck": {
            "wait": True,
            "timeout": "5m",
            "rules": [
                {
                    "apiVersion": "example.com/v1",
                    "kind": "Widget",
                    "ready": "self.status.phase == 'Ready'",
                    "failed": "self.status.phase == 'Failed'",
                }
            ],
        },
        "variables": [
            {
                "name": "REGION",
                "valueFrom": {"clusterField": "metadata.labels['region']"},
                "default": "west",
            },
            {"name": "MTU", "valueFrom": {"topologyVariable": "cniMTU"}},
            {"name": "TAG", "value": "v3.29.1"},
        ],
        "dependsOn": [{"name": "cni"}],
        "gateUpgrades": True,
        "revisionHistoryLimit": 10,
        "ignore": [
            {
                "target": {"group": "apps", "kind": "Deployment", "name": "web"},
                "paths": ["/spec/replicas"],
            }
        ],
        "rollout": {
            "maxConcurrent": "25%",
            "steps": [
                {
                    "clusterSelector": {"matchLabels": {"ring": "canary"}, "matchExpressions": []},
                    "pauseAfter": "10m",
                }
            ],
            "maxFailures": 1,
            "paused": False,
            "onFailure": "Rollback",
        },
    },
    "status": {
        "observedGeneration": 3,
        "revision": "xxh3:00000000000000aa",
        "rollout": {
            "phase": "Progressing",
            "step": 1,
            "updatedClusters": 3,
            "message": "rolling back from xxh3:00000000000000bb: step 1/2",
            "rolledBackFrom": "xxh3:00000000000000bb",
        },
        "history": [
            {
                "revision": "xxh3:00000000000000bb",
                "firstSeen": "2026-11-22T09:00:00Z",
                "outcome": "RolledBack",
            },
            {
                "revision": "xxh3:00000000000000aa",
                "firstSeen": "2026-11-21T09:00:00Z",
                "outcome": "Progressing",
            },
        ],
        "conditions": [
            {
                "type": "ResourcesApplied",
                "status": "False",
                "reason": "ApplyFailed",
                "message": "1 of 12 clusters failed",
                "lastTransitionTime": "2026-11-22T10:00:00Z",
                "observedGeneration": 3,
            },
            {
                "type": "Ready",
                "status": "True",
                "reason": "Applied",
                "message": "",
                "lastTransitionTime": "2026-11-22T09:00:00Z",
            },
        ],
        "matchingClusters": 12,
        "appliedClusters": 11,
        "failedClusters": 1,
    },
}

FULL_BINDING: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "ClusterResourceSetBinding",
    "metadata": {
        "name": "workload-1",
        "namespace": "default",
        "ownerReferences": [
            {
                "apiVersion": API_VERSION,
                "kind": "ClusterResourceSet",
                "name": "calico",
                "uid": "7d3e1c9a-0000-4000-8000-000000000001",
            }
        ],
    },
    "spec": {
        "clusterName": "workload-1",
        "bindings": [
            {
                "clusterResourceSetName": "calico",
                "resources": [
                    {
                        "kind": "ConfigMap",
                        "name": "calico-addon",
                        "hash": "xxh3:9f2c0a1b2c3d4e5f",
                        "applied": True,
                        "lastAppliedTime": "2026-11-22T10:00:00Z",
                        "generation": 7,
                        "objects": [
                            {"apiVersion": "v1", "kind": "Namespace", "name": "calico-system"},
                            {
                                "apiVersion": "apps/v1",
                                "kind": "DaemonSet",
                                "namespace": "kube-system",
                                "name": "calico-node",
                                "hash": "xxh3:00000000000000cc",
                                "generation": 2,
                                "fields": "xxh3:00000000000000dd",
                            },
                        ],
                    },
                    {
                        "kind": "Secret",
                        "name": "calico-secret",
                        "hash": "xxh3:0000000000000001",
                        "applied": False,
                        "objects": [],
                    },
                ],
            }
        ],
    },
}


@pytest.mark.parametrize(
    ("model", "document"),
    [(ClusterResourceSet, FULL_CRS), (ClusterResourceSetBinding, FULL_BINDING)],
    ids=["ClusterResourceSet", "ClusterResourceSetBinding"],
)
def test_api_dicts_round_trip(model: type[BaseModel], document: dict[str, Any]) -> None:
    assert to_api(model.model_validate(document)) == document


def test_unknown_fields_are_ignored() -> None:
    document = {
        **FULL_CRS,
        "metadata": {**FULL_CRS["metadata"], "managedFields": [{"manager": "kubectl"}]},
        "spec": {**FULL_CRS["spec"], "futureField": 1},
    }
    assert to_api(ClusterResourceSet.model_validate(document)) == FULL_CRS


def test_snake_case_names_build_the_same_object() -> None:
    crs = ClusterResourceSet.model_validate(FULL_CRS)
    rebuilt = ClusterResourceSet(
        metadata=crs.metadata,
        spec=ClusterResourceSetSpec(
            cluster_selector=crs.spec.cluster_selector,
            resources=crs.spec.resources,
            mode="Reconcile",
            reapply_interval="10m",
            drift_detection="Generation",
            drift_check_interval="30s",
            deletion_policy="Delete",
            uninstall=crs.spec.uninstall,
            health_check=HealthCheck(
                wait=True,
                timeout="5m",
                rules=crs.spec.health_check.rules if crs.spec.health_check else [],
            ),
            variables=crs.spec.variables,
            depends_on=[Dependency(name="cni")],
            gate_upgrades=True,
            ignore=crs.spec.ignore,
            rollout=Rollout(
                max_concurrent="25%",
                steps=crs.spec.rollout.steps if crs.spec.rollout else [],
                max_failures=1,
                on_failure="Rollback",
            ),
        ),
        status=crs.status,
    )
    assert rebuilt == crs


def test_empty_metadata_collections_are_left_out() -> None:
    # Sent in a merge patch, "finalizers: []" would remove other controllers' finalizers.
    assert to_api(ObjectMeta(name="a", labels={}, finalizers=[])) == {"name": "a"}


@pytest.mark.parametrize(
    ("given", "written"),
    [
        (datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC), "2026-11-22T10:00:00Z"),
        (datetime(2026, 11, 22, 10, 0, 0, 999999), "2026-11-22T10:00:00Z"),
        (
            datetime(2026, 11, 22, 11, 0, tzinfo=timezone(timedelta(hours=1))),
            "2026-11-22T10:00:00Z",
        ),
        ("2026-11-22T10:00:00.5+00:00", "2026-11-22T10:00:00Z"),
    ],
)
def test_timestamps_are_written_as_rfc3339_utc(given: Any, written: str) -> None:
    binding = ResourceBinding(kind="ConfigMap", name="a", last_applied_time=given)
    assert to_api(binding)["lastAppliedTime"] == written
    assert binding.last_applied_time is not None
    assert binding.last_applied_time.tzinfo is UTC


def test_applied_objects_are_hashable_values() -> None:
    deployment = ObjectRef(api_version="apps/v1", kind="Deployment", namespace="a", name="b")
    same = ObjectRef.model_validate(
        {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "a", "name": "b"}
    )
    assert {deployment, same} == {deployment}
    with pytest.raises(ValidationError):
        deployment.name = "c"  # type: ignore[misc]


# --- defaults and validation ----------------------------------------------------

MINIMAL_SPEC = {"clusterSelector": {}, "resources": [{"kind": "ConfigMap", "name": "a"}]}


@pytest.mark.parametrize(
    ("model", "document", "attribute", "expected"),
    [
        (ClusterResourceSetSpec, MINIMAL_SPEC, "mode", "ApplyOnce"),
        (ClusterResourceSetSpec, MINIMAL_SPEC, "reapply_interval", None),
        (ClusterResourceSetSpec, MINIMAL_SPEC, "drift_detection", "None"),
        (ClusterResourceSetSpec, MINIMAL_SPEC, "drift_check_interval", "1m"),
        (ClusterResourceSetSpec, MINIMAL_SPEC, "deletion_policy", "Orphan"),
        (ClusterResourceSetSpec, MINIMAL_SPEC, "uninstall.ensure", False),
        (ClusterResourceSetSpec, MINIMAL_SPEC, "uninstall.timeout", None),
        (ClusterResourceSetSpec, MINIMAL_SPEC, "uninstall.before_delete", []),
        (ClusterResourceSetSpec, MINIMAL_SPEC, "cluster_selector.match_labels", {}),
        (ClusterResourceSetStatus, {}, "observed_generation", None),
        (ClusterResourceSetStatus, {}, "conditions", []),
        (ClusterResourceSetStatus, {}, "matching_clusters", 0),
        (ClusterResourceSetStatus, {}, "applied_clusters", 0),
        (ClusterResourceSetStatus, {}, "failed_clusters", 0),
        (ClusterResourceSet, {"spec": MINIMAL_SPEC}, "api_version", API_VERSION),
        (ClusterResourceSet, {"spec": MINIMAL_SPEC}, "kind", "ClusterResourceSet"),
        (ClusterResourceSet, {"spec": MINIMAL_SPEC}, "metadata.labels", {}),
        (ClusterResourceSet, {"spec": MINIMAL_SPEC}, "status.conditions", []),
        (ResourceBinding, {"kind": "Secret", "name": "s"}, "applied", False),
        (ResourceBinding, {"kind": "Secret", "name": "s"}, "hash", ""),
        (ResourceBinding, {"kind": "Secret", "name": "s"}, "objects", []),
        (ResourceBinding, {"kind": "Secret", "name": "s"}, "generation", None),
        (ResourceBinding, {"kind": "Secret", "name": "s"}, "last_applied_time", None),
        (ObjectRef, {"apiVersion": "v1", "kind": "Namespace", "name": "n"}, "namespace", ""),
        (
            Condition,
            {"type": "Ready", "status": "True", "reason": "R", "lastTransitionTime": "t"},
            "message",
            "",
        ),
        (
            ClusterResourceSetBinding,
            {"spec": {"clusterName": "c"}},
            "kind",
            "ClusterResourceSetBinding",
        ),
        (ClusterResourceSetBinding, {"spec": {"clusterName": "c"}}, "spec.bindings", []),
    ],
)
def test_defaults(
    model: type[BaseModel], document: dict[str, Any], attribute: str, expected: Any
) -> None:
    value: Any = model.model_validate(document)
    for step in attribute.split("."):
        value = getattr(value, step)
    assert value == expected


def _resources(count: int) -> list[dict[str, str]]:
    return [{"kind": "ConfigMap", "name": f"r{i}"} for i in range(count)]


@pytest.mark.parametrize(
    "change",
    [
        {"clusterSelector": None},
        {"resources": []},
        {"resources": _resources(101)},
        {"resources": [{"kind": "Deployment", "name": "a"}]},
        {"resources": [{"kind": "ConfigMap", "name": ""}]},
        {"mode": "Sometimes"},
        {"driftDetection": "Always"},
        {"deletionPolicy": "Keep"},
        {"driftCheckInterval": "1 minute"},
        {"reapplyInterval": "1d"},
        {"uninstall": {"timeout": "10"}},
        {"uninstall": {"beforeDelete": [{"kind": "Secret"}]}},
    ],
)
def test_invalid_specs_are_refused(change: dict[str, Any]) -> None:
    document = {**MINIMAL_SPEC, **change}
    document = {key: value for key, value in document.items() if value is not None}
    with pytest.raises(ValidationError):
        ClusterResourceSetSpec.model_validate(document)


def test_resources_bounds_are_inclusive() -> None:
    spec = ClusterResourceSetSpec.model_validate({**MINIMAL_SPEC, "resources": _resources(100)})
    assert len(spec.resources) == 100


@pytest.mark.parametrize(
    ("duration", "valid"),
    [
        ("90s", True),
        ("10m", True),
        ("1h30m", True),
        ("500ms", True),
        ("1.5h", True),
        ("2h45m30.5s", True),
        ("100ns", True),
        ("10us", True),
        ("0", True),
        ("", False),
        ("10", False),
        ("1d", False),
        ("-1m", False),
        ("1 m", False),
        ("1h 30m", False),
        ("m", False),
        ("10M", False),
    ],
)
def test_duration_syntax(duration: str, valid: bool) -> None:
    assert bool(re.search(DURATION_PATTERN, duration)) is valid
    document = {**MINIMAL_SPEC, "driftCheckInterval": duration}
    if valid:
        ClusterResourceSetSpec.model_validate(document)
    else:
        with pytest.raises(ValidationError):
            ClusterResourceSetSpec.model_validate(document)


def test_resource_refs_are_hashable() -> None:
    refs = {ResourceRef(kind="Secret", name="a"), ResourceRef(kind="Secret", name="a")}
    assert len(refs) == 1


# --- samples --------------------------------------------------------------------


def test_samples_are_self_contained() -> None:
    documents = [
        d
        for path in sorted((CONFIG / "samples").glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for d in yaml.safe_load_all(path.read_text())
        if d
    ]
    (crs_document,) = [d for d in documents if d["kind"] == "ClusterResourceSet"]
    crs = ClusterResourceSet.model_validate(crs_document)
    assert crs.spec.mode == "Reconcile"
    present = {(d["kind"], d["metadata"]["name"]) for d in documents}
    assert {(r.kind, r.name) for r in crs.spec.resources} <= present
    for document in documents:
        assert document["metadata"]["namespace"] == crs.metadata.namespace
        if document["kind"] == "Secret":
            assert document["type"] == RESOURCE_SECRET_TYPE
