"""Unknown fields, refused as the API server's strict field validation refuses them
(``fieldValidation=Strict``, what ``kubectl apply`` asks for): a field the CRD's
schema does not declare is named by its path, ``unknown field
"spec.healthCheck.wiat"``, never by its value.

The schema is a CRD's structural schema, reduced to what decides whether a field is
known: ``properties``, ``items``, ``additionalProperties`` (a map: any key, each value
checked), ``x-kubernetes-preserve-unknown-fields`` (any field kept) and
``x-kubernetes-embedded-resource`` (an object with its own apiVersion, kind and
metadata). The root's ``metadata``, which a CRD only declares as ``type: object``,
is the API server's ObjectMeta, checked against its fields (``OBJECT_META``): labels,
annotations and the rest are known, ``metadata.lables`` is not. As the API server
does, a value of another type than the schema's is walked too (the fields of an
object where a list is declared are unknown); its type is the model's concern.

The ClusterResourceSet's schema is made from the models (``CRS_SCHEMA``): the CRD in
config/crd/bases is written by hand, the models follow it field for field (the unit
tests prove it both ways, and that this schema is the CRD's own, reduced), so the
check has no copy of the CRD to keep in step.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from types import NoneType, UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

from crs_controller.core.api.models import ClusterResourceSet, ObjectMeta

__all__ = [
    "CRS_SCHEMA",
    "EMBEDDED",
    "OBJECT_META",
    "PRESERVE",
    "Schema",
    "describe_unknown",
    "structural_schema",
    "unknown_fields",
]

Schema = Mapping[str, Any]
PRESERVE = "x-kubernetes-preserve-unknown-fields"
EMBEDDED = "x-kubernetes-embedded-resource"
# The fields of an object the API server decodes itself, whatever the schema says.
_OWN_FIELDS = ("apiVersion", "kind", "metadata")


def _leaves(*names: str) -> dict[str, Schema]:
    return {name: {} for name in names}


# meta/v1 ObjectMeta, as the API server decodes it.
OBJECT_META: Schema = {
    "properties": {
        **_leaves(
            "name",
            "generateName",
            "namespace",
            "selfLink",
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "finalizers",
        ),
        "labels": {"additionalProperties": {}},
        "annotations": {"additionalProperties": {}},
        "ownerReferences": {
            "items": {
                "properties": _leaves(
                    "apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion"
                )
            }
        },
        "managedFields": {
            "items": {
                "properties": {
                    **_leaves(
                        "manager", "operation", "apiVersion", "time", "fieldsType", "subresource"
                    ),
                    "fieldsV1": {PRESERVE: True},
                }
            }
        },
    }
}
_SHOWN = 5  # unknown fields named in one message
_PATH_LIMIT = 256  # a path is made of the input's keys: a long one is cut


def unknown_fields(obj: Mapping[str, Any], schema: Schema) -> list[str]:
    """The path of every field of ``obj`` that ``schema`` does not declare, as the API
    server names it (``spec.resources[0].nmae``), sorted as it lists them."""
    found: list[str] = []
    _object(obj, schema, "", found, own=True)
    return sorted(found)


def describe_unknown(paths: list[str]) -> str:
    """The API server's words for ``paths`` (at most five are named)."""
    named = [f'unknown field "{_cut(p)}"' for p in paths[:_SHOWN]]
    more = f" (and {len(paths) - _SHOWN} more)" if len(paths) > _SHOWN else ""
    return "strict decoding error: " + ", ".join(named) + more


def _cut(path: str) -> str:
    return path if len(path) <= _PATH_LIMIT else path[: _PATH_LIMIT - 1] + "…"


def _value(value: Any, schema: Schema, path: str, found: list[str]) -> None:
    if isinstance(value, Mapping):
        _object(value, schema, path, found, own=bool(schema.get(EMBEDDED)))
    elif isinstance(value, list):
        items = schema.get("items")
        items = items if isinstance(items, Mapping) else {}
        if schema.get(PRESERVE) is True:
            if not items:
                return  # kept whole
            items = {**items, PRESERVE: True}  # the items keep what they do not declare
        for index, item in enumerate(value):
            _value(item, items, f"{path}[{index}]", found)


def _object(
    value: Mapping[str, Any], schema: Schema, path: str, found: list[str], *, own: bool
) -> None:
    """``own``: the root, or an embedded resource, whose apiVersion, kind and metadata
    are the API server's."""
    properties: Schema = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    free = schema.get(PRESERVE) is True or extra is True
    for key, child in value.items():
        here = f"{path}.{key}" if path else str(key)
        if own and key == "metadata":
            _value(child, OBJECT_META, here, found)
        elif own and key in _OWN_FIELDS:
            continue
        elif key in properties:
            _value(child, properties[key], here, found)
        elif isinstance(extra, Mapping):
            _value(child, extra, here, found)
        elif not free:
            found.append(here)


# --- the schema, from the models ----------------------------------------------------


def structural_schema(annotation: Any) -> dict[str, Any]:
    """The reduced structural schema of a model (or of a field's type): objects for
    models, ``items`` for lists, ``additionalProperties`` for maps, any field kept
    under ``Any``; ObjectMeta is the API server's (``{}``), as are scalars."""
    annotation = _unwrapped(annotation)
    origin = get_origin(annotation)
    if annotation is Any:
        return {PRESERVE: True}
    if isinstance(annotation, type) and issubclass(annotation, ObjectMeta):
        return {}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        fields = annotation.model_fields.items()
        return {
            "properties": {
                (info.alias or name): structural_schema(info.annotation) for name, info in fields
            }
        }
    if origin is list:
        return {"items": structural_schema(get_args(annotation)[0])}
    if origin is dict:
        return {"additionalProperties": structural_schema(get_args(annotation)[1])}
    return {}  # str, int, bool, a Literal, a datetime, an int-or-string


def _unwrapped(annotation: Any) -> Any:
    """``X`` of ``Annotated[X, ...]`` and ``X | None``; a union of several scalars (an
    int-or-string) is a scalar."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, UnionType):
            members = [a for a in get_args(annotation) if a is not NoneType]
            if len(members) != 1:
                return str if all(_scalar(m) for m in members) else Any
            annotation = members[0]
        else:
            return annotation


def _scalar(annotation: Any) -> bool:
    plain = get_args(annotation)[0] if get_origin(annotation) is Annotated else annotation
    return plain in (str, int, float, bool, datetime)


CRS_SCHEMA: Schema = structural_schema(ClusterResourceSet)
