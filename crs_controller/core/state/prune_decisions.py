"""Pure pruning decisions for ``deletionPolicy: Delete``.

An object applied by a CRS is deleted from a workload cluster when it leaves the
desired set: it left its ConfigMap/Secret, its resource left ``spec.resources``, the
cluster stopped matching, or the CRS is being deleted. Objects that any entry of the
cluster's binding still lists (another CRS, another resource) are never deleted.

The binding is tenant-writable, so its inventory is a claim, not a proof: before a
delete, the live object must show that our field manager applied it
(``provably_ours``). An entry naming something else is refused, not deleted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from crs_controller.core.api.models import CRSBinding, ObjectKey, ObjectRef, ResourceBinding
from crs_controller.core.manifests.documents import object_ref
from crs_controller.core.manifests.ordering import delete_order


def inventory(entries: Iterable[CRSBinding]) -> set[ObjectRef]:
    return {o for entry in entries for resource in entry.resources for o in resource.objects}


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


def refusal(live: Mapping[str, Any], field_manager: str) -> str | None:
    """Why deleting ``live`` is refused; None when it is provably ours.

    Ours means: its managedFields hold an ``Apply`` entry of ``field_manager`` on the
    object itself (not on a subresource). The API server writes managedFields, and
    only a writer to the workload cluster can change them, so a forged binding entry
    cannot make an object look applied by us. An object someone else took over
    entirely (our entry is gone once we own no field) is no longer ours either."""
    entries = (live.get("metadata") or {}).get("managedFields")
    if not isinstance(entries, list) or not entries:
        return "it has no managedFields"
    for entry in entries:
        if (
            isinstance(entry, Mapping)
            and entry.get("manager") == field_manager
            and entry.get("operation") == "Apply"
            and not entry.get("subresource")
        ):
            return None
    return f"{field_manager} never applied it"


def provably_ours(live: Mapping[str, Any], field_manager: str) -> bool:
    return refusal(live, field_manager) is None


def without(entry: CRSBinding, refused: Iterable[ObjectRef]) -> CRSBinding:
    """``entry`` with the ``refused`` objects dropped from its resources: a refused
    inventory entry is reported once, never retried."""
    gone = set(refused)
    if not gone:
        return entry
    resources = [
        r.model_copy(update={"objects": [o for o in r.objects if o not in gone]})
        for r in entry.resources
    ]
    return entry.model_copy(update={"resources": resources})


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
