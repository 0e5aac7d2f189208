"""Cluster API's ClusterResourceSets (``addons.cluster.x-k8s.io`` v1beta1 and v1beta2)
as this project's (``addons.crs.dev/v1alpha1``), for ``crs-controller convert``.

A CAPI ClusterResourceSet keeps its name, namespace, labels and annotations, its
``clusterSelector`` and ``resources``; ``strategy`` becomes ``mode`` (none means
ApplyOnce, as Cluster API defaults it). What the API server wrote (uid,
resourceVersion, managedFields, status …) is left out, as are owner references and
finalizers, which belong to the old object. Anything else without a counterpart
here is left out with a warning, never silently: an unknown spec field (a newer
Cluster API's), the ``cluster.x-k8s.io/paused`` annotation (it pauses the CAPI
object during the switch and would pause the converted one too), a v1beta1 CRS
without resources (this API needs at least one). Cluster API's bindings are left
out with a warning: the controller writes its own. Every other document passes
through unchanged, in order.

A CAPI ClusterResourceSet that cannot be converted (an unknown API version, a
strategy or resource Cluster API would refuse as well) raises InvalidSpec, so that
no partial output is ever applied.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import ValidationError

from crs_controller.core.api.clusters import PAUSED_ANNOTATION
from crs_controller.core.api.models import API_VERSION, CLUSTER_RESOURCE_SET_KIND
from crs_controller.core.errors import InvalidSpec
from crs_controller.core.spec.objects import describe_validation, parse_crs_document

__all__ = ["CAPI_GROUP", "CAPI_VERSIONS", "convert_crs", "convert_documents"]

Obj = dict[str, Any]

CAPI_GROUP = "addons.cluster.x-k8s.io"
CAPI_VERSIONS = ("v1beta1", "v1beta2")
CAPI_BINDING_KIND = "ClusterResourceSetBinding"
STRATEGIES = ("ApplyOnce", "Reconcile")
DEFAULT_STRATEGY = "ApplyOnce"  # what Cluster API's defaulting webhook writes

_TOP_FIELDS = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
_KEPT_METADATA = ("name", "namespace", "labels", "annotations")
# Written by the API server or by controllers for the old object: meaningless (or
# refused on create) for a new one, so left out without a word.
_OLD_OBJECT_METADATA = frozenset(
    {
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
        "generation",
        "ownerReferences",
        "finalizers",
        "selfLink",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generateName",
    }
)
# kubectl's record of the Cluster API object: kubectl apply writes a fresh one.
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_SPEC_FIELDS = frozenset({"clusterSelector", "resources", "strategy"})
_SELECTOR_FIELDS = frozenset({"matchLabels", "matchExpressions"})
_EXPRESSION_FIELDS = frozenset({"key", "operator", "values"})
_RESOURCE_FIELDS = frozenset({"kind", "name"})


def convert_documents(docs: list[Obj]) -> tuple[list[Obj], list[str]]:
    """``docs`` with every CAPI ClusterResourceSet converted and CAPI bindings left
    out, in order; and the warnings, each naming the object (``ns/name: …``)."""
    converted: list[Obj] = []
    warnings: list[str] = []
    for doc in _expanded(docs):
        out, notes = _convert_one(doc)
        warnings += notes
        if out is not None:
            converted.append(out)
    return converted, warnings


def convert_crs(crs: Mapping[str, Any]) -> tuple[Obj | None, list[str]]:
    """One CAPI ClusterResourceSet as ours (None: nothing to convert), with warnings."""
    who = describe(crs)
    _, version = _group_version(crs)
    if version not in CAPI_VERSIONS:
        raise InvalidSpec(
            f"{who}: {crs.get('apiVersion')} ClusterResourceSet: only "
            f"{' and '.join(CAPI_VERSIONS)} can be converted"
        )
    spec = crs.get("spec")
    if not isinstance(spec, Mapping):
        raise InvalidSpec(f"{who}: spec must be an object")
    warnings = [f"{who}: {path} has no counterpart; left out" for path in _unknown_fields(crs)]
    if not spec.get("resources"):
        warnings.append(
            f"{who}: spec.resources is empty and a ClusterResourceSet here needs at least "
            "one; the ClusterResourceSet is left out"
        )
        return None, warnings
    metadata, metadata_notes = _metadata(who, crs.get("metadata"))
    converted_spec, spec_notes = _spec(who, spec)
    out: Obj = {
        "apiVersion": API_VERSION,
        "kind": CLUSTER_RESOURCE_SET_KIND,
        "metadata": metadata,
        "spec": converted_spec,
    }
    _check(who, out)
    return out, warnings + metadata_notes + spec_notes


def describe(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` (or ``name``) as warnings and errors name an object."""
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    name = metadata.get("name") or "<unnamed>"
    namespace = metadata.get("namespace")
    return f"{namespace}/{name}" if namespace else str(name)


def _expanded(docs: list[Obj]) -> Iterator[Obj]:
    """The documents, a CAPI ``…List`` (as the API itself returns one) as its items."""
    for doc in docs:
        items = _capi_list_items(doc)
        yield from [doc] if items is None else items


def _capi_list_items(doc: Obj) -> list[Obj] | None:
    group, version = _group_version(doc)
    kind, items = doc.get("kind"), doc.get("items")
    if group != CAPI_GROUP or not isinstance(kind, str) or not kind.endswith("List"):
        return None
    if not isinstance(items, list):
        return None
    # Items of a typed list may leave out their apiVersion and kind.
    defaults = {"apiVersion": f"{group}/{version}", "kind": kind.removesuffix("List")}
    return [{**defaults, **item} for item in items if isinstance(item, dict)]


def _convert_one(doc: Obj) -> tuple[Obj | None, list[str]]:
    group, _ = _group_version(doc)
    if group != CAPI_GROUP:
        return doc, []
    if doc.get("kind") == CAPI_BINDING_KIND:
        return None, [
            f"{describe(doc)}: Cluster API's ClusterResourceSetBinding left out "
            "(crs-controller writes its own bindings)"
        ]
    if doc.get("kind") == CLUSTER_RESOURCE_SET_KIND:
        return convert_crs(doc)
    return doc, []


def _group_version(obj: Mapping[str, Any]) -> tuple[str, str]:
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str):
        return "", ""
    group, _, version = api_version.rpartition("/")
    return group, version


def _unknown_fields(crs: Mapping[str, Any]) -> list[str]:
    """Paths (``spec.foo``, ``spec.resources[0].bar``) of what has no counterpart."""
    spec = crs["spec"]
    found = [key for key in crs if key not in _TOP_FIELDS]
    found += [f"spec.{key}" for key in spec if key not in _SPEC_FIELDS]
    selector = spec.get("clusterSelector")
    if isinstance(selector, Mapping):
        found += _extra("spec.clusterSelector", selector, _SELECTOR_FIELDS)
        for index, expression in enumerate(_list(selector.get("matchExpressions"))):
            where = f"spec.clusterSelector.matchExpressions[{index}]"
            found += _extra(where, expression, _EXPRESSION_FIELDS)
    for index, resource in enumerate(_list(spec.get("resources"))):
        found += _extra(f"spec.resources[{index}]", resource, _RESOURCE_FIELDS)
    return found


def _extra(where: str, value: Any, known: frozenset[str]) -> list[str]:
    if not isinstance(value, Mapping):
        return []
    return [f"{where}.{key}" for key in value if key not in known]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _metadata(who: str, raw: Any) -> tuple[Obj, list[str]]:
    if not isinstance(raw, Mapping):
        return {}, []
    metadata = {key: copy.deepcopy(raw[key]) for key in _KEPT_METADATA if raw.get(key) is not None}
    warnings = [
        f"{who}: metadata.{key} has no counterpart; left out"
        for key in raw
        if key not in _KEPT_METADATA and key not in _OLD_OBJECT_METADATA
    ]
    annotations = metadata.get("annotations")
    if isinstance(annotations, dict):
        annotations.pop(_LAST_APPLIED, None)
        if annotations.pop(PAUSED_ANNOTATION, None) is not None:
            warnings.append(
                f"{who}: annotation {PAUSED_ANNOTATION} left out: it pauses Cluster API's "
                "ClusterResourceSet and would pause the converted one too"
            )
        if not annotations:
            del metadata["annotations"]
    return metadata, warnings


def _spec(who: str, spec: Mapping[str, Any]) -> tuple[Obj, list[str]]:
    out: Obj = {}
    if "clusterSelector" in spec:
        out["clusterSelector"] = _selector(spec["clusterSelector"])
    out["resources"], warnings = _resources(who, spec["resources"])
    out["mode"] = _mode(who, spec.get("strategy"))
    return out, warnings


def _selector(selector: Any) -> Any:
    if not isinstance(selector, Mapping):
        return copy.deepcopy(selector)  # for the final check to name
    out = _known(selector, _SELECTOR_FIELDS)
    if isinstance(out.get("matchExpressions"), list):
        out["matchExpressions"] = [_known(e, _EXPRESSION_FIELDS) for e in out["matchExpressions"]]
    return out


def _resources(who: str, resources: Any) -> tuple[Any, list[str]]:
    """The references; a repeated one is left out (Cluster API's list may repeat an
    entry, this API's is keyed by kind and name)."""
    if not isinstance(resources, list):
        return copy.deepcopy(resources), []
    out: list[Any] = []
    warnings: list[str] = []
    seen: set[str] = set()
    for index, resource in enumerate(resources):
        ref = _known(resource, _RESOURCE_FIELDS)
        key = _ref_key(ref)
        if key and key in seen:
            warnings.append(f"{who}: spec.resources[{index}] repeats {key}; left out")
            continue
        seen.add(key)
        out.append(ref)
    return out, warnings


def _ref_key(ref: Any) -> str:
    """``Kind/name``, or "" for a malformed reference (left for the final check)."""
    if not isinstance(ref, dict):
        return ""
    kind, name = ref.get("kind"), ref.get("name")
    return f"{kind}/{name}" if isinstance(kind, str) and isinstance(name, str) else ""


def _known(value: Any, fields: frozenset[str]) -> Any:
    """A copy of ``value`` holding only ``fields`` (the others are warned about by
    _unknown_fields); anything but an object is copied as is, for the final check."""
    if not isinstance(value, Mapping):
        return copy.deepcopy(value)
    return {key: copy.deepcopy(item) for key, item in value.items() if key in fields}


def _mode(who: str, strategy: Any) -> str:
    if strategy is None or strategy == "":
        return DEFAULT_STRATEGY
    if strategy not in STRATEGIES:
        raise InvalidSpec(f"{who}: spec.strategy {strategy!r} is neither ApplyOnce nor Reconcile")
    return str(strategy)


def _check(who: str, converted: Obj) -> None:
    """What the controller would refuse is refused here, not after kubectl apply."""
    try:
        problem = parse_crs_document(converted).problem
    except ValidationError as exc:  # metadata the API server would refuse too
        problem = InvalidSpec(describe_validation(exc, "metadata"))
    if problem is not None:
        raise InvalidSpec(f"{who}: cannot be converted: {problem}") from problem
