"""What the informers keep of a ConfigMap/Secret no ClusterResourceSet references
(``strip``): identity, labels, resourceVersion and type, marked ``STRIPPED``; never its
data or managedFields."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from crs_controller.engine.watching import STRIPPED, strip

SECRET: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Secret",
    "type": "addons.cluster.x-k8s.io/resource-set",
    "metadata": {
        "name": "calico-secret",
        "namespace": "default",
        "uid": "0b6c0f4e",
        "resourceVersion": "1234",
        "generation": 1,
        "labels": {"app": "calico"},
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": '{"data": {}}'},
        "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:data": {}}}],
        "creationTimestamp": "2026-11-22T10:00:00Z",
    },
    "data": {"token.yaml": "c2VjcmV0"},
    "stringData": {"plain": "hunter2-plain"},
}

CONFIGMAP: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "big", "namespace": "kube-system", "resourceVersion": "7"},
    "data": {"a.yaml": "x" * 10_000},
    "binaryData": {"b": "AAAA"},
}


def test_secret_keeps_identity_and_type() -> None:
    stripped = strip(SECRET)
    assert stripped == {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "addons.cluster.x-k8s.io/resource-set",
        "metadata": {
            "name": "calico-secret",
            "namespace": "default",
            "uid": "0b6c0f4e",
            "resourceVersion": "1234",
            "labels": {"app": "calico"},
        },
        STRIPPED: True,
    }


@pytest.mark.parametrize("obj", [SECRET, CONFIGMAP], ids=["secret", "configmap"])
def test_no_content_survives(obj: dict[str, Any]) -> None:
    stripped = strip(obj)
    assert stripped[STRIPPED] is True
    for field in ("data", "stringData", "binaryData"):
        assert field not in stripped
    assert "managedFields" not in stripped["metadata"]
    assert "annotations" not in stripped["metadata"]
    text = repr(stripped)
    for field in ("data", "stringData", "binaryData"):
        for value in obj.get(field, {}).values():
            assert value not in text


def test_configmap_has_no_type_and_missing_metadata_is_not_invented() -> None:
    stripped = strip(CONFIGMAP)
    assert stripped["metadata"] == {
        "name": "big",
        "namespace": "kube-system",
        "resourceVersion": "7",
    }
    assert stripped["type"] is None
    assert stripped["kind"] == "ConfigMap"


def test_the_cached_original_is_not_changed() -> None:
    obj = copy.deepcopy(SECRET)
    strip(obj)
    assert obj == SECRET


def test_a_full_object_is_not_marked() -> None:
    assert STRIPPED not in SECRET
    assert not SECRET.get(STRIPPED)
