"""Pure edits of a ClusterResourceSetBinding: entries per CRS and owner references.

The reconciler builds the binding it wants from the one it read and writes only when
the two differ, so a steady state costs no write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from crs_controller.core.drift import fields_hash, generation_sum
from crs_controller.core.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_KIND,
    ClusterResourceSetBinding,
    ClusterResourceSetBindingSpec,
    CRSBinding,
    ObjectMeta,
    ObjectRef,
    ResourceBinding,
    ResourceRef,
    to_api,
)


def parse_binding(raw: Mapping[str, Any] | None) -> ClusterResourceSetBinding | None:
    return None if raw is None else ClusterResourceSetBinding.model_validate(raw)


def entries_by_crs(binding: ClusterResourceSetBinding | None) -> dict[str, CRSBinding]:
    if binding is None:
        return {}
    return {b.cluster_resource_set_name: b for b in binding.spec.bindings}


def recorded(entry: CRSBinding | None, ref: ResourceRef) -> ResourceBinding | None:
    if entry is None:
        return None
    for resource in entry.resources:
        if resource.kind == ref.kind and resource.name == ref.name:
            return resource
    return None


def record_apply(
    ref: ResourceRef,
    previous: ResourceBinding | None,
    *,
    digest: str,
    ok: bool,
    applied: Sequence[ObjectRef],
    generations: Sequence[int | None],
    now: datetime,
    skipped: Sequence[ObjectRef] = (),
    owned: Sequence[Any] = (),
) -> ResourceBinding:
    """The entry after an apply. On failure the previous inventory is kept, plus what
    did go out, so that nothing we created is ever forgotten. Objects skipped because
    they existed (ApplyOnce) stay in the inventory only if an earlier pass created them."""
    objects = list(applied)
    if previous is not None:
        ours = set(previous.objects)
        objects += [o for o in skipped if o in ours]
        if not ok:
            objects = _union(previous.objects, objects)
    return ResourceBinding(
        kind=ref.kind,
        name=ref.name,
        hash=digest,
        applied=ok,
        # A failed apply keeps the time of the last good one: retries (with backoff)
        # then leave the binding as it is instead of rewriting it on every attempt.
        last_applied_time=now if ok else (previous.last_applied_time if previous else None),
        generation=generation_sum(list(generations)),
        # Only a complete apply gives a baseline that drift checks can trust.
        fields_hash=fields_hash(owned) if ok and not skipped else None,
        objects=objects,
    )


def _union(first: Iterable[ObjectRef], second: Iterable[ObjectRef]) -> list[ObjectRef]:
    return list(dict.fromkeys([*first, *second]))


def owner_reference(crs: ObjectMeta) -> dict[str, Any]:
    """The owner reference a binding carries for a CRS it has an entry for."""
    return {
        "apiVersion": API_VERSION,
        "kind": CLUSTER_RESOURCE_SET_KIND,
        "name": crs.name,
        "uid": crs.uid,
    }


def desired_binding(
    current: ClusterResourceSetBinding | None,
    *,
    namespace: str,
    cluster: str,
    entries: Mapping[str, CRSBinding],
    owners: Sequence[Mapping[str, Any]],
) -> ClusterResourceSetBinding:
    """The binding to write: entries sorted by CRS name, one owner reference per CRS,
    other owners (not ours) left as they were."""
    meta = (
        current.metadata.model_copy() if current else ObjectMeta(name=cluster, namespace=namespace)
    )
    foreign = [o for o in meta.owner_references if o.get("kind") != CLUSTER_RESOURCE_SET_KIND]
    ours = sorted((dict(o) for o in owners), key=lambda o: str(o["name"]))
    meta.owner_references = foreign + ours
    spec = ClusterResourceSetBindingSpec(
        cluster_name=cluster, bindings=[entries[name] for name in sorted(entries)]
    )
    return ClusterResourceSetBinding(metadata=meta, spec=spec)


def binding_changed(
    current: ClusterResourceSetBinding | None, desired: ClusterResourceSetBinding
) -> bool:
    if current is None:
        return True
    return to_api(current.spec) != to_api(desired.spec) or (
        current.metadata.owner_references != desired.metadata.owner_references
    )


def crs_names(binding: ClusterResourceSetBinding | None) -> set[str]:
    return set(entries_by_crs(binding))
