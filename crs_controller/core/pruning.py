"""Pure pruning decisions for ``deletionPolicy: Delete``.

An object applied by a CRS is deleted from a workload cluster when it leaves the
desired set: it left its ConfigMap/Secret, its resource left ``spec.resources``, the
cluster stopped matching, or the CRS is being deleted. Objects that any entry of the
cluster's binding still lists (another CRS, another resource) are never deleted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from crs_controller.core.manifests import object_ref
from crs_controller.core.models import CRSBinding, ObjectRef, ResourceBinding
from crs_controller.core.ordering import delete_order


def inventory(entries: Iterable[CRSBinding]) -> set[ObjectRef]:
    return {o for entry in entries for resource in entry.resources for o in resource.objects}


ObjectKey = tuple[str, str, str, str]  # ObjectRef.key: group, kind, namespace, name


def wanted_keys(objects: Iterable[Mapping[str, Any]]) -> set[ObjectKey]:
    """Keys of the objects some CRS wants on the cluster, as parsed from its sources
    (so also objects ApplyOnce found already there and left alone)."""
    return {object_ref(obj).key for obj in objects}


def _is_wanted(ref: ObjectRef, wanted: set[ObjectKey]) -> bool:
    # A manifest without a namespace went to "default" (or is cluster-scoped).
    group, kind, namespace, name = ref.key
    return ref.key in wanted or (namespace in ("", "default") and (group, kind, "", name) in wanted)


def stale_objects(
    old: CRSBinding, recorded: set[ObjectRef], wanted: set[ObjectKey]
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
    return delete_order(list(stale))


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
