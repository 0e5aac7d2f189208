"""Apply and delete order: Namespaces, then CRDs, then the rest (stable), and the exact
reverse for deletion."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.core.manifests.documents import ObjectRef, object_ref, parse_objects
from crs_controller.core.manifests.ordering import apply_order, delete_order, is_crd, is_namespace
from tests.addons import ADDONS, needs_addons

CALICO = ADDONS / "calico.yaml"


def obj(api_version: str, kind: str, name: str, namespace: str = "") -> dict[str, Any]:
    metadata = {"name": name} | ({"namespace": namespace} if namespace else {})
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata}


NS = ("v1", "Namespace")
CRD = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
DEPLOY = ("apps/v1", "Deployment")
CR = ("crd.projectcalico.org/v1", "IPPool")


@pytest.mark.parametrize(
    ("item", "namespace", "crd"),
    [
        (obj(*NS, "a"), True, False),
        (ObjectRef("v1", "Namespace", "", "a"), True, False),
        (obj(*CRD, "a"), False, True),
        (obj("apiextensions.k8s.io/v1beta1", "CustomResourceDefinition", "a"), False, True),
        (ObjectRef(*CRD, "", "a"), False, True),
        # Same kind name in another group is an ordinary custom resource.
        (obj("example.com/v1", "Namespace", "a"), False, False),
        (obj("example.com/v1", "CustomResourceDefinition", "a"), False, False),
        (obj(*DEPLOY, "a"), False, False),
        ({}, False, False),
    ],
)
def test_classification(item: Any, namespace: bool, crd: bool) -> None:
    assert is_namespace(item) is namespace
    assert is_crd(item) is crd


def test_apply_order_table() -> None:
    objects = [
        obj(*DEPLOY, "app", "ns1"),
        obj(*CR, "pool"),
        obj(*CRD, "ippools"),
        obj(*NS, "ns1"),
        obj("v1", "ConfigMap", "cfg", "ns1"),
        obj(*NS, "ns2"),
        obj(*CRD, "felix"),
    ]
    ordered = [o["metadata"]["name"] for o in apply_order(objects)]
    assert ordered == ["ns1", "ns2", "ippools", "felix", "app", "pool", "cfg"]


def test_delete_order_table() -> None:
    refs = [
        ObjectRef(*NS, "", "ns1"),
        ObjectRef(*CRD, "", "ippools"),
        ObjectRef(*DEPLOY, "ns1", "app"),
        ObjectRef(*CR, "", "pool"),
        ObjectRef(*NS, "", "ns2"),
        ObjectRef(*CRD, "", "felix"),
    ]
    assert [r.name for r in delete_order(refs)] == ["pool", "app", "felix", "ippools", "ns2", "ns1"]


kinds = st.sampled_from([NS, CRD, DEPLOY, CR, ("v1", "ConfigMap")])
object_lists = st.lists(
    st.tuples(kinds, st.integers(0, 10**6)).map(lambda t: obj(*t[0], f"o{t[1]}")), max_size=30
)


def _rank(item: Any) -> int:
    return 0 if is_namespace(item) else 1 if is_crd(item) else 2


@given(object_lists)
def test_apply_order_groups_and_is_stable(objects: list[dict[str, Any]]) -> None:
    ordered = apply_order(objects)
    assert sorted(map(id, ordered)) == sorted(map(id, objects)), "a permutation"
    ranks = [_rank(o) for o in ordered]
    assert ranks == sorted(ranks), "Namespaces, then CRDs, then the rest"
    for rank in (0, 1, 2):
        assert [o for o in ordered if _rank(o) == rank] == [o for o in objects if _rank(o) == rank]


@given(object_lists)
def test_delete_order_is_the_reverse_of_apply_order(objects: list[dict[str, Any]]) -> None:
    refs = [object_ref(o) for o in objects]
    deleted = delete_order(refs)
    assert deleted == [object_ref(o) for o in apply_order(objects)][::-1]
    ranks = [_rank(r) for r in deleted]
    assert ranks == sorted(ranks, reverse=True), "the rest, then CRDs, then Namespaces"


@needs_addons
def test_calico_crds_come_before_custom_resources() -> None:
    # The custom resource sits in a key that sorts before calico.yaml, so parsing
    # alone would put it ahead of its CRD.
    pool = "apiVersion: crd.projectcalico.org/v1\nkind: IPPool\nmetadata: {name: default-pool}\n"
    source = {
        "kind": "ConfigMap",
        "metadata": {"name": "calico", "namespace": "default"},
        "data": {"calico.yaml": CALICO.read_text(), "00-pool.yaml": pool},
    }
    parsed = parse_objects(source)
    assert parsed[0]["kind"] == "IPPool"
    ordered = apply_order(parsed)
    crd_groups = {o["spec"]["group"]: i for i, o in enumerate(ordered) if is_crd(o)}
    assert len(crd_groups) == 2 and sum(is_crd(o) for o in ordered) == 23
    last_crd = max(i for i, o in enumerate(ordered) if is_crd(o))
    pool_at = next(i for i, o in enumerate(ordered) if o["kind"] == "IPPool")
    assert pool_at > last_crd
    assert all(is_crd(o) for o in ordered[:23])
