"""Manifests: ConfigMap/Secret content, every supported format, object refs, apply bodies,
and error messages that name the resource/key/document but never the content."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crs_controller.core.errors import InvalidManifest, ResourceError, WrongSecretType
from crs_controller.core.manifests import documents as manifests
from crs_controller.core.manifests.documents import (
    APPLIED_BY,
    APPLIED_BY_LABEL,
    RESOURCE_SECRET_TYPE,
    ObjectRef,
    apply_body,
    object_ref,
    parse_objects,
    resource_entries,
)
from tests.addons import ADDONS, needs_addons


def b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode()


def configmap(data: Any = None, **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "addons", "namespace": "default", "resourceVersion": "7"},
        "data": data,
        **fields,
    }


def secret(data: dict[str, str] | None = None, **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "default"},
        "type": RESOURCE_SECRET_TYPE,
        "data": {k: b64(v) for k, v in (data or {}).items()},
        **fields,
    }


def raw_secret(data: dict[str, str]) -> dict[str, Any]:
    """A Secret whose ``data`` is given already encoded (or deliberately not)."""
    return secret() | {"data": data}


def names(objects: list[dict[str, Any]]) -> list[str]:
    return [o["metadata"]["name"] for o in objects]


def cm_doc(name: str, namespace: str | None = None) -> dict[str, Any]:
    metadata = {"name": name} | ({"namespace": namespace} if namespace else {})
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}


# --- ObjectRef ------------------------------------------------------------------------


def test_object_ref_api_round_trip() -> None:
    ref = ObjectRef("apps/v1", "DaemonSet", "kube-system", "calico-node")
    assert ref.to_api() == {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "namespace": "kube-system",
        "name": "calico-node",
    }
    assert ObjectRef.model_validate(ref.to_api()) == ref
    assert str(ref) == "apps/v1 DaemonSet kube-system/calico-node"
    assert ref.group == "apps"


def test_cluster_scoped_ref_omits_namespace() -> None:
    ref = ObjectRef("v1", "Namespace", "", "calico-system")
    assert ref.to_api() == {"apiVersion": "v1", "kind": "Namespace", "name": "calico-system"}
    assert ObjectRef.model_validate(ref.to_api()) == ref
    assert str(ref) == "v1 Namespace calico-system"
    assert ref.group == ""


@pytest.mark.parametrize(
    ("api_version", "group"),
    [("v1", ""), ("apps/v1", "apps"), ("apiextensions.k8s.io/v1", "apiextensions.k8s.io")],
)
def test_group(api_version: str, group: str) -> None:
    assert ObjectRef(api_version, "X", "", "x").group == group


def test_refs_sort_and_hash() -> None:
    a = ObjectRef("v1", "ConfigMap", "a", "x")
    b = ObjectRef("v1", "ConfigMap", "b", "x")
    assert sorted([b, a]) == [a, b]
    assert len({a, ObjectRef("v1", "ConfigMap", "a", "x")}) == 1


def test_object_ref_of_parsed_objects() -> None:
    assert object_ref(cm_doc("x", "kube-system")) == ObjectRef(
        "v1", "ConfigMap", "kube-system", "x"
    )
    assert object_ref(cm_doc("x")) == ObjectRef("v1", "ConfigMap", "", "x")


# --- resource_entries -----------------------------------------------------------------


def test_configmap_entries_are_decoded_and_sorted() -> None:
    source = configmap({"b.yaml": "b", "a.yaml": "a"}, binaryData={"c.bin": b64(b"\x00\xff")})
    assert resource_entries(source) == [("a.yaml", b"a"), ("b.yaml", b"b"), ("c.bin", b"\x00\xff")]


def test_secret_entries_decode_base64_and_string_data_wins() -> None:
    source = secret({"a": "from data", "b": "kept"}, stringData={"a": "from stringData", "c": "c"})
    assert resource_entries(source) == [("a", b"from stringData"), ("b", b"kept"), ("c", b"c")]


def test_base64_with_line_breaks_is_accepted() -> None:
    wrapped = b64("x" * 100)
    wrapped = wrapped[:40] + "\n" + wrapped[40:] + "\r\n"
    assert resource_entries(raw_secret({"k": wrapped})) == [("k", b"x" * 100)]


def test_empty_resource_has_no_entries() -> None:
    assert resource_entries(configmap(None)) == []
    assert parse_objects(configmap({})) == []


@pytest.mark.parametrize("secret_type", ["Opaque", "kubernetes.io/tls", None])
def test_wrong_secret_type_names_the_secret_and_type(secret_type: str | None) -> None:
    source = secret({"token": "TOPSECRETVALUE"}, type=secret_type)
    with pytest.raises(WrongSecretType) as info:
        resource_entries(source)
    message = str(info.value)
    assert "Secret default/creds" in message
    assert repr(secret_type or "Opaque") in message
    assert RESOURCE_SECRET_TYPE in message
    assert "TOPSECRETVALUE" not in message and b64("TOPSECRETVALUE") not in message
    assert info.value.reason == "WrongSecretType"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (raw_secret({"k": "not base64!"}), "data key 'k' is not valid base64"),
        (raw_secret({"k": "YWJjZA="}), "data key 'k' is not valid base64"),
        (raw_secret({"k": "é"}), "data key 'k' is not valid base64"),
        (configmap(binaryData={"bin": "%%%"}), "binaryData key 'bin' is not valid base64"),
        (configmap({"k": "a"}, binaryData={"k": b64("a")}), "in both data and binaryData"),
        (configmap({"k": 5}), "data key 'k' must hold a string"),
        (configmap(["a"]), "data must be a map"),
        ({"kind": "Deployment", "metadata": {"name": "d"}}, "Deployment d: a resource must be"),
        ({"metadata": {"name": "d"}}, "object d: a resource must be"),
    ],
)
def test_unusable_content(source: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidManifest, match=message) as info:
        resource_entries(source)
    assert info.value.reason == "InvalidManifest"


# --- parse_objects: formats -----------------------------------------------------------


def test_multi_document_yaml_in_document_order() -> None:
    text = yaml.safe_dump_all([cm_doc("one"), None, cm_doc("two")]) + "---\n# only a comment\n"
    text += "---\n" + yaml.safe_dump(cm_doc("three"))
    assert names(parse_objects(configmap({"k": text}))) == ["one", "two", "three"]


def test_keys_in_sorted_order_then_document_order() -> None:
    source = configmap(
        {
            "b.yaml": yaml.safe_dump_all([cm_doc("b1"), cm_doc("b2")]),
            "a.json": json.dumps(cm_doc("a1")),
        },
        binaryData={"c.yaml": b64(yaml.safe_dump(cm_doc("c1")))},
    )
    assert names(parse_objects(source)) == ["a1", "b1", "b2", "c1"]


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(json.dumps(cm_doc("x")), id="json-object"),
        pytest.param(json.dumps(cm_doc("x"), indent="\t"), id="json-with-tabs"),
        pytest.param(json.dumps([cm_doc("x")]), id="json-list"),
        pytest.param(yaml.safe_dump(cm_doc("x")), id="yaml"),
        pytest.param("---\n" + yaml.safe_dump(cm_doc("x")) + "---\n", id="yaml-separators"),
        pytest.param(yaml.safe_dump([cm_doc("x")]), id="yaml-sequence"),
        pytest.param("# header\n" + json.dumps(cm_doc("x")), id="json-after-comment"),
        pytest.param(
            json.dumps({"apiVersion": "v1", "kind": "List", "items": [cm_doc("x")]}),
            id="json-list-kind",
        ),
        pytest.param(
            yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMapList", "items": [cm_doc("x")]}),
            id="typed-list-kind",
        ),
        pytest.param(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "List",
                    "items": [{"apiVersion": "v1", "kind": "List", "items": [cm_doc("x")]}],
                }
            ),
            id="nested-list-kind",
        ),
    ],
)
def test_supported_formats(value: str) -> None:
    assert parse_objects(configmap({"k": value})) == [cm_doc("x")]


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(secret({"k": yaml.safe_dump(cm_doc("x"))}), id="secret-data"),
        pytest.param(secret(stringData={"k": yaml.safe_dump(cm_doc("x"))}), id="secret-stringData"),
        pytest.param(
            configmap(binaryData={"k": b64(yaml.safe_dump(cm_doc("x")))}), id="binaryData"
        ),
    ],
)
def test_every_source_field(source: dict[str, Any]) -> None:
    assert parse_objects(source) == [cm_doc("x")]


def test_scalars_are_read_as_kubectl_reads_them() -> None:
    text = """
apiVersion: v1
kind: ConfigMap
metadata: {name: x, creationTimestamp: 2024-01-02T03:04:05Z}
data:
  date: 2024-01-02
  clock: 10:30
  equals: =
  binary: !!binary aGk=
spec: {replicas: 3, ratio: 0.5, enabled: true, mode: 0644, none: null}
"""
    (obj,) = parse_objects(configmap({"k": text}))
    assert obj["metadata"]["creationTimestamp"] == "2024-01-02T03:04:05Z"
    assert obj["data"] == {"date": "2024-01-02", "clock": "10:30", "equals": "=", "binary": "aGk="}
    assert obj["spec"] == {"replicas": 3, "ratio": 0.5, "enabled": True, "mode": 420, "none": None}
    json.dumps(obj)  # the apply request must be encodable


def test_the_c_parser_is_used_when_available() -> None:
    if not yaml.__with_libyaml__:
        pytest.skip("PyYAML was built without libyaml")
    assert "CParser" in {base.__name__ for base in manifests._Loader.__mro__}


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("[" * 200_000 + "]" * 200_000, id="flow-sequences"),
        pytest.param("{a: " * 200_000 + "1" + "}" * 200_000, id="flow-mappings"),
        pytest.param("- " * 200_000 + "x", id="compact-block-sequences"),
        pytest.param("[" * 200_000, id="unclosed"),
    ],
)
def test_deep_nesting_is_an_error_not_a_crash(value: str) -> None:
    # libyaml's own composer recurses on the C stack and would kill the process.
    with pytest.raises(InvalidManifest, match="key 'k', document 1: nested too deeply"):
        parse_objects(configmap({"k": value}))


def test_reasonably_deep_objects_parse() -> None:
    nested: dict[str, Any] = {"leaf": True}
    for _ in range(100):
        nested = {"properties": {"field": nested}}
    obj = cm_doc("deep") | {"spec": nested}
    assert parse_objects(configmap({"yaml": yaml.safe_dump(obj), "json": json.dumps(obj)})) == [
        obj,
        obj,
    ]


# --- parse_objects: errors ------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "key 'k' holds no Kubernetes object"),
        ("---\n---\n# nothing\n", "key 'k' holds no Kubernetes object"),
        ("null", "key 'k' holds no Kubernetes object"),
        ("[]", "key 'k' holds no Kubernetes object"),
        ('{"kind": "List", "items": []}', "key 'k' holds no Kubernetes object"),
        ("just text", "key 'k', document 1: expected an object, found a string"),
        ("42", "document 1: expected an object, found a number"),
        ("true", "document 1: expected an object, found a boolean"),
        ("[1]", "document 1, item 1: expected an object, found a number"),
        ("kind: List\nitems: [null]", "document 1, item 1: expected an object"),
        ("apiVersion: v1\nkind: A", "document 1: object has no metadata.name"),
        ("kind: A\nmetadata: {name: a}", "document 1: object has no apiVersion"),
        ("metadata: {name: a}", "object has no apiVersion, kind"),
        ("apiVersion: v1\nkind: A\nmetadata: a", "object has no metadata.name"),
        ("apiVersion: v1\nkind: A\nmetadata: {name: 5}", "object has no metadata.name"),
        ("apiVersion: v1\nkind: ''\nmetadata: {name: a}", "object has no kind"),
        ("apiVersion: v1\nkind: A\nmetadata: {name: a, namespace: 5}", "namespace must be"),
        (
            yaml.safe_dump_all([cm_doc("a"), None, {"kind": "B"}]),
            "document 3: object has no apiVersion, metadata.name",
        ),
        (json.dumps([cm_doc("a"), {"kind": "B"}]), "document 1, item 2: object has no"),
        ("a: 1\n---\nb: [c\n", r"document 2: invalid YAML at line 4, column 1"),
        ("a: b: c", r"document 1: invalid YAML at line 1, column 5: mapping values"),
        ("a:\n\tb: c", r"document 1: invalid YAML at line 2, column 1"),
        ('{"a": 1', r"document 1: invalid YAML at line"),
        ("\x01", "document 1: not valid YAML"),
    ],
)
def test_invalid_values_name_resource_key_and_document(value: str, message: str) -> None:
    with pytest.raises(InvalidManifest, match=message) as info:
        parse_objects(configmap({"k": value}))
    assert str(info.value).startswith("ConfigMap default/addons: key 'k'")


def test_non_utf8_value() -> None:
    source = configmap(binaryData={"k": b64(b"kind: A\n\xff\xfe")})
    with pytest.raises(
        InvalidManifest, match=r"key 'k': not UTF-8 text \(invalid byte at offset 8\)"
    ):
        parse_objects(source)


def test_one_bad_key_fails_the_resource() -> None:
    source = configmap({"a": yaml.safe_dump(cm_doc("a")), "b": "not: [valid"})
    with pytest.raises(InvalidManifest, match="key 'b'"):
        parse_objects(source)


def test_wrong_secret_type_is_raised_by_parse_too() -> None:
    with pytest.raises(WrongSecretType):
        parse_objects(secret({"k": yaml.safe_dump(cm_doc("x"))}, type="Opaque"))


# Templates of invalid documents that embed a secret; each must fail.
INVALID_TEMPLATES = [
    "password: {s}\nbroken: [",
    "a: b: {s}",
    'token: "{s}\\q"',
    "token: !{s} value",
    "token: *{s}",
    "a: &{s} 1\nb: &{s} 2",
    "key: {s}\n\tindented: {s}",
    "{s}",
    "- {s}",
    "apiVersion: v1\nkind: Secret\nmetadata: {{}}\nstringData: {{token: {s}}}",
    "apiVersion: {s}\nkind: A",
    "kind: List\nitems: [{s}]",
    '{{"token": "{s}", ',
    "token: {s}\n---\n- [{s}",
    "%{s} directive\n--- a",
    "? [{s}\n: x",
    "'{s}",
    "token: {s}\x07",
]


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    while exc is not None:
        yield exc
        exc = exc.__cause__ or exc.__context__


@pytest.fixture(params=["libyaml", "python"])
def loader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the C loader and with the pure-Python fallback (whose messages
    quote the input)."""
    if request.param == "python":

        class PythonLoader(yaml.SafeLoader):
            pass

        PythonLoader.yaml_constructors = dict(manifests._Loader.yaml_constructors)
        monkeypatch.setattr(manifests, "_Loader", PythonLoader)
    return str(request.param)


@settings(
    max_examples=40,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    secret_text=st.text(
        st.sampled_from("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnpqrstuvwxyz23456789"),
        min_size=16,
        max_size=40,
    ),
    template=st.sampled_from(INVALID_TEMPLATES),
    as_secret=st.booleans(),
)
def test_errors_never_contain_the_content(
    loader: str, secret_text: str, template: str, as_secret: bool
) -> None:
    value = template.format(s=secret_text)
    source = secret({"config.yaml": value}) if as_secret else configmap({"config.yaml": value})
    with pytest.raises(ResourceError) as info:
        parse_objects(source)
    for exc in _chain(info.value):
        assert secret_text not in str(exc)
        assert secret_text not in repr(exc.args)
    assert "key 'config.yaml'" in str(info.value)


# --- apply_body -----------------------------------------------------------------------


def test_apply_body_keeps_only_manifest_fields() -> None:
    obj: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "d",
            "namespace": "ns",
            "labels": {"a": "b"},
            "annotations": {"c": "d"},
            "resourceVersion": "1",
            "uid": "u",
            "managedFields": [{}],
            "creationTimestamp": None,
            "generation": 3,
            "selfLink": "/x",
            "deletionTimestamp": "2024-01-01T00:00:00Z",
        },
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c"}]}}},
        "status": {"readyReplicas": 1},
    }
    body = apply_body(obj)
    assert body == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "d",
            "namespace": "ns",
            "labels": {"a": "b", APPLIED_BY_LABEL: APPLIED_BY},
            "annotations": {"c": "d"},
        },
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c"}]}}},
    }
    body["spec"]["template"]["spec"]["containers"][0]["name"] = "changed"
    body["metadata"]["labels"]["a"] = "changed"
    assert obj["spec"]["template"]["spec"]["containers"][0]["name"] == "c", "a deep copy"
    assert obj["metadata"]["labels"]["a"] == "b"
    assert "status" in obj and "uid" in obj["metadata"], "the input is left alone"


# --- real add-ons ---------------------------------------------------------------------


def _addon(name: str) -> str:
    return (ADDONS / name).read_text()


@needs_addons
def test_parse_calico() -> None:
    objects = parse_objects(configmap({"calico.yaml": _addon("calico.yaml")}))
    kinds = [o["kind"] for o in objects]
    assert len(objects) == 38
    assert kinds.count("CustomResourceDefinition") == 23
    assert {"DaemonSet", "Deployment", "ConfigMap", "PodDisruptionBudget"} <= set(kinds)
    assert all(json.dumps(apply_body(o)) for o in objects)


@needs_addons
def test_parse_kindnet() -> None:
    objects = parse_objects(configmap({"kindnet.yaml": _addon("kindnet.yaml")}))
    assert [o["kind"] for o in objects] == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ServiceAccount",
        "DaemonSet",
    ]
    assert object_ref(objects[-1]).namespace == "kube-system"


@pytest.mark.parametrize(
    ("metadata", "labels"),
    [
        ({"name": "ns"}, {APPLIED_BY_LABEL: APPLIED_BY}),
        ({"name": "ns", "labels": None}, {APPLIED_BY_LABEL: APPLIED_BY}),
        ({"name": "x", "labels": {"app": "a"}}, {"app": "a", APPLIED_BY_LABEL: APPLIED_BY}),
        ({"name": "x", "labels": {APPLIED_BY_LABEL: "other"}}, {APPLIED_BY_LABEL: APPLIED_BY}),
        ({"name": "x", "labels": ["not", "a", "map"]}, ["not", "a", "map"]),
    ],
)
def test_every_applied_object_is_stamped_so_our_manager_owns_a_field(
    metadata: dict[str, Any], labels: Any
) -> None:
    """A manifest that is only a name would leave our manager owning no field, and so
    without the managedFields entry that deletion needs as proof."""
    source = {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}
    before = copy.deepcopy(source)
    assert apply_body(source)["metadata"]["labels"] == labels
    assert source == before  # the parsed (and cached) object is never changed
