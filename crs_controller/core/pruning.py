"""Pure pruning decisions for ``deletionPolicy: Delete``.

An object applied by a CRS is deleted from a workload cluster when it leaves the
desired set: it left its ConfigMap/Secret, its resource left ``spec.resources``, the
cluster stopped matching, or the CRS is being deleted. Objects that any entry of the
cluster's binding still lists (another CRS, another resource) are never deleted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from crs_controller.core.manifests import ObjectRef
from crs_controller.core.models import AppliedObject, CRSBinding, ResourceBinding
from crs_controller.core.ordering import delete_order


def inventory(entries: Iterable[CRSBinding]) -> set[AppliedObject]:
    return {o for entry in entries for resource in entry.resources for o in resource.objects}


ObjectKey = tuple[str, str, str, str]  # group, kind, namespace ("" = not given), name


def object_key(api_version: str, kind: str, namespace: str | None, name: str) -> ObjectKey:
    # The group, not the version: apps/v1 and apps/v1beta2 name the same object.
    group = api_version.rpartition("/")[0]
    return (group, kind, namespace or "", name)


def wanted_keys(objects: Iterable[Mapping[str, Any]]) -> set[ObjectKey]:
    """Keys of the objects some CRS wants on the cluster, as parsed from its sources
    (so also objects ApplyOnce found already there and left alone)."""
    keys = set()
    for obj in objects:
        meta = obj.get("metadata") or {}
        keys.add(object_key(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"]))
    return keys


def _is_wanted(obj: AppliedObject, wanted: set[ObjectKey]) -> bool:
    key = object_key(obj.api_version, obj.kind, obj.namespace, obj.name)
    # A manifest without a namespace went to "default" (or is cluster-scoped).
    unqualified = (*key[:2], "", key[3])
    return key in wanted or (obj.namespace in (None, "default") and unqualified in wanted)


def stale_objects(
    old: CRSBinding, recorded: set[AppliedObject], wanted: set[ObjectKey]
) -> list[ObjectRef]:
    """What ``old`` applied that nothing wants any more — neither recorded in the
    binding as it will be written, nor in any CRS's current sources — in safe
    deletion order (custom resources before their CRDs, namespaced objects before
    Namespaces)."""
    stale = dict.fromkeys(
        o
        for r in old.resources
        for o in r.objects
        if o not in recorded and not _is_wanted(o, wanted)
    )
    refs = [ObjectRef(o.api_version, o.kind, o.namespace or "", o.name) for o in stale]
    return delete_order(refs)


def keep_pending(new: CRSBinding | None, old: CRSBinding) -> CRSBinding:
    """The entry to record while a deletion is unfinished: the new entry plus every
    old resource and object, so nothing still to delete is forgotten."""
    if new is None:
        return old
    merged: dict[tuple[str, str], ResourceBinding] = {(r.kind, r.name): r for r in new.resources}
    for resource in old.resources:
        key = (resource.kind, resource.name)
        current = merged.get(key)
        if current is None:
            merged[key] = resource
        else:
            objects = list(dict.fromkeys([*current.objects, *resource.objects]))
            merged[key] = current.model_copy(update={"objects": objects})
    return new.model_copy(update={"resources": list(merged.values())})
