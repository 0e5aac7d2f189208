"""The order objects are applied in, and the reverse order they are deleted in.

Namespaces come first because namespaced objects need them; CRDs next because
their custom resources are refused until the CRD is served. Everything else keeps
the author's order, which manifests are usually written in on purpose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from crs_controller.core.manifests.documents import ObjectRef

__all__ = ["apply_order", "delete_order", "is_crd", "is_namespace"]

_Item = TypeVar("_Item", bound=ObjectRef | Mapping[str, Any])

_NAMESPACE, _CRD, _OTHER = 0, 1, 2


def is_namespace(ref_or_obj: ObjectRef | Mapping[str, Any]) -> bool:
    return _identity(ref_or_obj) == ("v1", "Namespace")


def is_crd(ref_or_obj: ObjectRef | Mapping[str, Any]) -> bool:
    api_version, kind = _identity(ref_or_obj)
    # Any version of the group (v1beta1 is long gone, but the name is what counts).
    return kind == "CustomResourceDefinition" and api_version.startswith("apiextensions.k8s.io/")


def apply_order(objects: Sequence[_Item]) -> list[_Item]:
    """Namespaces, then CRDs, then the rest; stable within each group."""
    return sorted(objects, key=_rank)


def delete_order(refs: Sequence[_Item]) -> list[_Item]:
    """The exact reverse of apply_order: the rest (last first), then CRDs, then Namespaces."""
    return apply_order(refs)[::-1]


def _rank(item: ObjectRef | Mapping[str, Any]) -> int:
    if is_namespace(item):
        return _NAMESPACE
    if is_crd(item):
        return _CRD
    return _OTHER


def _identity(item: ObjectRef | Mapping[str, Any]) -> tuple[str, str]:
    if isinstance(item, ObjectRef):
        return item.api_version, item.kind
    return str(item.get("apiVersion") or ""), str(item.get("kind") or "")
