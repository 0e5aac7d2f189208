"""Unknown fields as the API server's strict field validation finds them
(``core.api.strict``): tables over structural schemas — nested objects, arrays of
objects, maps, ``x-kubernetes-preserve-unknown-fields`` subtrees, the root's and an
embedded resource's metadata, values of the wrong type — the message (paths only,
never values, at most five); the ClusterResourceSet's schema made from the models is
the CRD's own, reduced; and the samples in config/samples have no unknown field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from crs_controller.core.api.strict import (
    CRS_SCHEMA,
    EMBEDDED,
    PRESERVE,
    describe_unknown,
    structural_schema,
    unknown_fields,
)

CONFIG = Path(__file__).resolve().parents[2] / "config"
CRS_CRD = CONFIG / "crd" / "bases" / "addons.crs.dev_clusterresourcesets.yaml"

SCHEMA: dict[str, Any] = {
    "properties": {
        "apiVersion": {},
        "kind": {},
        "metadata": {},
        "spec": {
            "properties": {
                "check": {"properties": {"wait": {}, "timeout": {}}},
                "resources": {"items": {"properties": {"kind": {}, "name": {}}}},
                "labels": {"additionalProperties": {}},
                "byName": {"additionalProperties": {"properties": {"size": {}}}},
                "tags": {"items": {}},
                "values": {PRESERVE: True},
                "partly": {PRESERVE: True, "properties": {"known": {"properties": {"a": {}}}}},
                "template": {EMBEDDED: True, "properties": {"spec": {"properties": {"x": {}}}}},
            }
        },
    }
}


@pytest.mark.parametrize(
    ("obj", "unknown"),
    [
        pytest.param({"spec": {"check": {"wait": True}}}, [], id="known"),
        pytest.param({"spec": {"check": {"wiat": True}}}, ["spec.check.wiat"], id="nested"),
        pytest.param({"spce": {"check": {"wiat": 1}}}, ["spce"], id="unknown-parent-only"),
        pytest.param(
            {"spec": {"resources": [{"kind": "ConfigMap"}, {"nmae": "a", "kind": "Secret"}]}},
            ["spec.resources[1].nmae"],
            id="array-of-objects",
        ),
        pytest.param({"spec": {"tags": ["a", "b"]}}, [], id="array-of-scalars"),
        pytest.param({"spec": {"labels": {"any": "key", "x.y/z": "1"}}}, [], id="map"),
        pytest.param(
            {"spec": {"byName": {"a": {"size": 1}, "b": {"sise": 2}}}},
            ["spec.byName.b.sise"],
            id="map-of-objects",
        ),
        pytest.param(
            {"spec": {"values": {"anything": {"deep": [{"at": "all"}]}}}},
            [],
            id="preserve-unknown-subtree",
        ),
        pytest.param(
            {"spec": {"partly": {"other": 1, "known": {"a": 1, "b": 2}}}},
            ["spec.partly.known.b"],
            id="preserve-unknown-with-known-properties",
        ),
        pytest.param(
            {
                "metadata": {
                    "name": "n",
                    "generateName": "g",
                    "labels": {"a": "b"},
                    "annotations": {"c": "d"},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "K", "name": "o", "uid": "u"}],
                    "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}],
                    "finalizers": ["f"],
                }
            },
            [],
            id="root-metadata",
        ),
        pytest.param(
            {"metadata": {"lables": {"a": "b"}, "ownerReferences": [{"nmae": "o"}]}},
            ["metadata.lables", "metadata.ownerReferences[0].nmae"],
            id="root-metadata-is-objectmeta",
        ),
        pytest.param(
            {
                "spec": {
                    "template": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"labels": {"a": "b"}, "nmae": "x"},
                        "spec": {"x": 1, "y": 2},
                    }
                }
            },
            ["spec.template.metadata.nmae", "spec.template.spec.y"],
            id="embedded-resource",
        ),
        pytest.param(
            {"spec": {"check": "not an object", "tags": "not a list"}},
            [],
            id="a-scalar-of-the-wrong-type",
        ),
        pytest.param(
            {"spec": {"resources": {"kind": "x"}, "check": [{"wait": True}]}},
            ["spec.check[0].wait", "spec.resources.kind"],
            id="an-object-or-a-list-of-the-wrong-type-as-the-api-server-walks-it",
        ),
        pytest.param(
            {"spec": {"values": [{"a": 1}], "partly": {"known": [{"z": 1}]}}},
            ["spec.partly.known[0].z"],
            id="lists-under-preserve-unknown",
        ),
        pytest.param(
            {"status": {}, "spec": {"zeta": 1, "alpha": {"b": 1}}},
            ["spec.alpha", "spec.zeta", "status"],
            id="sorted-as-the-api-server-lists-them",
        ),
    ],
)
def test_unknown_fields(obj: dict[str, Any], unknown: list[str]) -> None:
    assert unknown_fields(obj, SCHEMA) == unknown


def test_metadata_is_objectmeta_only_at_the_root_and_in_embedded_resources() -> None:
    obj = {"spec": {"check": {"metadata": {"name": "x"}, "kind": "K"}}}
    assert unknown_fields(obj, SCHEMA) == ["spec.check.kind", "spec.check.metadata"]


def test_the_message_names_paths_as_the_api_server_does_never_values() -> None:
    assert describe_unknown(["spec.a", "spec.b[0].c"]) == (
        'strict decoding error: unknown field "spec.a", unknown field "spec.b[0].c"'
    )
    many = describe_unknown([f"spec.f{i}" for i in range(7)])
    assert many.endswith('unknown field "spec.f4" (and 2 more)')
    assert "spec.f5" not in many
    long = describe_unknown(["spec." + "k" * 1000])
    assert len(long) < 300 and long.endswith('…"')
    secret = {"spec": {"check": {"pasword": "hunter2"}}}
    assert "hunter2" not in describe_unknown(unknown_fields(secret, SCHEMA))


def _reduced(node: Any) -> Any:
    """A CRD schema reduced to what decides whether a field is known."""
    reduced: dict[str, Any] = {}
    if "properties" in node:
        reduced["properties"] = {k: _reduced(v) for k, v in node["properties"].items()}
    if "items" in node:
        reduced["items"] = _reduced(node["items"])
    if isinstance(node.get("additionalProperties"), dict):
        reduced["additionalProperties"] = _reduced(node["additionalProperties"])
    for flag in (PRESERVE, EMBEDDED):
        if node.get(flag):
            reduced[flag] = True
    return reduced


def test_the_crs_schema_made_from_the_models_is_the_crds() -> None:
    (crd,) = [d for d in yaml.safe_load_all(CRS_CRD.read_text()) if d]
    (version,) = crd["spec"]["versions"]
    assert _reduced(version["schema"]["openAPIV3Schema"]) == CRS_SCHEMA


def test_the_schema_of_free_form_and_scalar_types() -> None:
    assert structural_schema(Any) == {PRESERVE: True}
    assert structural_schema(dict[str, Any]) == {"additionalProperties": {PRESERVE: True}}
    assert structural_schema(list[int] | None) == {"items": {}}
    assert structural_schema(int | str) == {}


@pytest.mark.parametrize(
    "path",
    sorted(p for p in (CONFIG / "samples").rglob("*.yaml") if p.name != "kustomization.yaml"),
)
def test_the_samples_have_no_unknown_field(path: Path) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        if doc and doc.get("kind") == "ClusterResourceSet":
            assert unknown_fields(doc, CRS_SCHEMA) == [], path
