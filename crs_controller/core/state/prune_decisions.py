"""Pure pruning decisions for ``deletionPolicy: Delete``.

An object applied by a CRS is deleted from a workload cluster when it leaves the
desired set: it left its ConfigMap/Secret, its resource left ``spec.resources``, the
cluster stopped matching, or the CRS is being deleted. Objects that any entry of the
cluster's binding still lists (another CRS, another resource) or some CRS's sources
want are never deleted: compared as the same object on the cluster, whatever API
version names it and, for a cluster-scoped kind, whatever namespace.

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

DELETION_REFUSED = "DeletionRefused"  # the Event reason for an object refused


def inventory(entries: Iterable[CRSBinding]) -> set[ObjectRef]:
    return {o for entry in entries for resource in entry.resources for o in resource.objects}


def wanted_keys(objects: Iterable[Mapping[str, Any]]) -> set[ObjectKey]:
    """Keys of the objects some CRS wants on the cluster, as parsed from its sources
    (so also objects ApplyOnce found already there and left alone)."""
    return {object_ref(obj).key for obj in objects}


# Kinds every Kubernetes serves cluster-scoped, by (group, kind). The scope of any
# other kind is learnt from the inventory: the applier records an object of a
# cluster-scoped kind without a namespace, and deleting it ignores any namespace.
_CLUSTER_SCOPED = frozenset(
    {
        ("", "Namespace"),
        ("", "Node"),
        ("", "PersistentVolume"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("apiregistration.k8s.io", "APIService"),
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
        ("storage.k8s.io", "StorageClass"),
        ("storage.k8s.io", "CSIDriver"),
        ("storage.k8s.io", "CSINode"),
        ("storage.k8s.io", "VolumeAttachment"),
        ("scheduling.k8s.io", "PriorityClass"),
        ("node.k8s.io", "RuntimeClass"),
        ("networking.k8s.io", "IngressClass"),
        ("certificates.k8s.io", "CertificateSigningRequest"),
        ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
    }
)


def _cluster_scoped(refs: Iterable[ObjectRef]) -> set[tuple[str, str]]:
    """(group, kind) of the kinds known to be cluster-scoped: the built-in ones and
    those some entry records without a namespace. A forged entry can only add kinds
    here, which protects more objects, never fewer."""
    return set(_CLUSTER_SCOPED) | {(o.group, o.kind) for o in refs if not o.namespace}


def _identity(key: ObjectKey, cluster_scoped: set[tuple[str, str]]) -> ObjectKey:
    """The object ``key`` names on the cluster, whatever its API version: a
    cluster-scoped kind has no namespace (a stray one in a manifest or an entry is
    ignored, as the API server and the delete path ignore it); a manifest without a
    namespace went to "default"."""
    group, kind, namespace, name = key
    if (group, kind) in cluster_scoped:
        return (group, kind, "", name)
    return (group, kind, namespace or "default", name)


def stale_objects(
    old: CRSBinding, recorded: set[ObjectRef], wanted: set[ObjectKey]
) -> list[ObjectRef]:
    """What ``old`` applied that nothing wants any more — neither recorded in the
    binding as it will be written, nor in any CRS's current sources — in safe
    deletion order (custom resources before their CRDs, namespaced objects before
    Namespaces). Objects are compared as the cluster sees them (``_identity``): a
    record or manifest under another API version, or naming a cluster-scoped object
    with a namespace, still keeps it."""
    applied = [o for r in old.resources for o in r.objects]
    if not applied:
        return []
    scoped = _cluster_scoped([*applied, *recorded])
    kept = {_identity(o.key, scoped) for o in recorded}
    kept.update(_identity(key, scoped) for key in wanted)
    stale = dict.fromkeys(o for o in applied if _identity(o.key, scoped) not in kept)
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


def scope_refusal(ref: ObjectRef, namespaced: bool) -> str | None:
    """Why ``ref`` names no object of its kind as the server serves it (``namespaced``,
    from discovery); None when its namespace fits. The applier records a namespace
    exactly for a namespaced kind, so only a forged or careless entry disagrees, and
    a request for it would reach another object than the one it names."""
    if ref.namespace and not namespaced:
        return "namespace set on a cluster-scoped kind"
    if not ref.namespace and namespaced:
        return "no namespace on a namespaced kind"
    return None


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
