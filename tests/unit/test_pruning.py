"""Pruning decisions for deletionPolicy Delete: which applied objects are stale (not
recorded any more and not wanted by any CRS's sources), in safe deletion order, and
what stays recorded while a deletion is unfinished."""

from __future__ import annotations

from crs_controller.core.models import CRSBinding, ObjectRef, ResourceBinding
from crs_controller.core.pruning import inventory, keep_pending, stale_objects, wanted_keys

NS = ObjectRef(api_version="v1", kind="Namespace", name="addon")
CRD = ObjectRef(
    api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition", name="ws.x.io"
)
CR = ObjectRef(api_version="x.io/v1", kind="Widget", namespace="addon", name="w")
CM = ObjectRef(api_version="v1", kind="ConfigMap", namespace="default", name="cm")


def entry(name: str, **resources: list[ObjectRef]) -> CRSBinding:
    return CRSBinding(
        cluster_resource_set_name=name,
        resources=[
            ResourceBinding(kind="ConfigMap", name=r, hash="xxh3:0", applied=True, objects=objs)
            for r, objs in resources.items()
        ],
    )


def names(refs: list) -> list[str]:
    return [r.name for r in refs]


def test_everything_unwanted_is_stale_in_reverse_apply_order() -> None:
    old = entry("a", res=[NS, CRD, CR, CM])
    assert names(stale_objects(old, set(), set())) == ["cm", "w", "ws.x.io", "addon"]


def test_recorded_objects_are_never_stale() -> None:
    old = entry("a", res=[NS, CM])
    keep = inventory([entry("b", other=[CM])])
    assert names(stale_objects(old, keep, set())) == ["addon"]


def test_objects_wanted_by_some_source_are_never_stale() -> None:
    # The manifest had no namespace; the object landed in "default".
    wanted = wanted_keys([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}])
    assert names(stale_objects(entry("a", res=[CM, NS]), set(), wanted)) == ["addon"]
    # Wanted under another version of the same group: the same object.
    crd_v1beta1 = {
        "apiVersion": "apiextensions.k8s.io/v1beta1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "ws.x.io"},
    }
    assert stale_objects(entry("a", res=[CRD]), set(), wanted_keys([crd_v1beta1])) == []


def test_a_namespace_elsewhere_does_not_protect_an_object() -> None:
    wanted = wanted_keys(
        [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "x"}}]
    )
    assert names(stale_objects(entry("a", res=[CM]), set(), wanted)) == ["cm"]


def test_keep_pending_remembers_old_resources_and_objects() -> None:
    old = entry("a", first=[NS, CM], gone=[CR])
    new = entry("a", first=[NS])
    merged = keep_pending(new, old)
    by_name = {r.name: r.objects for r in merged.resources}
    assert by_name == {"first": [NS, CM], "gone": [CR]}
    assert keep_pending(None, old) == old
