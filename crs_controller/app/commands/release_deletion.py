"""``crs-controller uninstall --delete-release FILE``: the release's objects deleted in
a safe order, once no ClusterResourceSet is left.

The ExtensionConfig that registers the controller with Cluster API goes first, even
when the release file does not hold it (config/extension is applied beside the
release): the hooks it registers fail closed, so once the controller's Service is
gone Cluster API could no longer delete or upgrade a Cluster. Then the controller's
Deployment, its rights, its namespace, any other object, and the CRDs last, the
bindings CRD (every inventory) last of all.

The CRDs hold every namespace's sets: deleting them deletes those sets too, and they
would stay ``Terminating`` behind their finalizer with no controller left to remove
it. So nothing is deleted while any ClusterResourceSet exists in any namespace
(looked for again right before the Deployment goes), and the CRDs are kept if one
appeared meanwhile."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from crs_controller.app.commands.common import (
    Obj,
    UsageError,
    listed,
    metadata,
    printable,
)
from crs_controller.clients.api import KubeAPI
from crs_controller.core.api.models import API_VERSION, CLUSTER_RESOURCE_SET_KIND
from crs_controller.core.errors import NotFound

CRS_CRD = "clusterresourcesets.addons.crs.dev"
BINDINGS_CRD = "clusterresourcesetbindings.addons.crs.dev"
EXTENSION_API = "runtime.cluster.x-k8s.io/v1alpha1"
EXTENSION_KIND = "ExtensionConfig"
EXTENSION_NAME = "crs-controller"  # config/extension's, before any name prefix
CONTROLLER_NAME = "crs-controller"  # config/manager's Deployment, before any name prefix
APP_LABEL = "app.kubernetes.io/name"  # crs-controller on config/'s objects, prefix or not
CRD_KIND = "CustomResourceDefinition"

# What Cluster API calls first, then what stops the controller, its rights next, the
# API last. The bindings CRD goes last of all: deleting it deletes every inventory.
DELETE_ORDER = [
    EXTENSION_KIND,
    "Deployment",
    "PodDisruptionBudget",
    "Service",
    "ValidatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy",
    "ClusterRoleBinding",
    "RoleBinding",
    "ClusterRole",
    "Role",
    "ServiceAccount",
    "Namespace",
]

Say = Callable[[str], None]


def _say(message: str) -> None:
    print(printable(message), flush=True)


# --- pure decisions -------------------------------------------------------------------


def _rank(document: Obj) -> tuple[int, int]:
    kind = document.get("kind")
    if kind == CRD_KIND:
        name = metadata(document).get("name")
        return (len(DELETE_ORDER) + 1, 2 if name == BINDINGS_CRD else 1 if name == CRS_CRD else 0)
    if kind in DELETE_ORDER:
        return (DELETE_ORDER.index(str(kind)), 0)
    return (len(DELETE_ORDER), 0)  # anything else: after the rights, before the CRDs


def deletion_order(documents: Iterable[Obj]) -> list[Obj]:
    """The release's objects in the order they are safely deleted: the ExtensionConfig
    and the controller first, then its rights, the namespace, any other kind, the CRDs
    last with the bindings CRD after the ClusterResourceSet CRD (stable otherwise)."""
    return sorted(documents, key=_rank)


def release_namespaces(release: Iterable[Obj]) -> set[str]:
    """The namespaces the release's objects live in, and the ones it creates."""
    found = set()
    for document in release:
        meta = metadata(document)
        if meta.get("namespace"):
            found.add(str(meta["namespace"]))
        if document.get("kind") == "Namespace" and meta.get("name"):
            found.add(str(meta["name"]))
    return found


def controller_namespaces(release: Iterable[Obj]) -> set[str]:
    """The namespaces of the release's controller Deployments (named crs-controller or
    labelled app.kubernetes.io/name=crs-controller, whatever name prefix an overlay
    gave them): where the controller holds its leader Lease."""
    found = set()
    for document in release:
        meta = metadata(document)
        labels = meta.get("labels") or {}
        ours = meta.get("name") == CONTROLLER_NAME or labels.get(APP_LABEL) == CONTROLLER_NAME
        if document.get("kind") == "Deployment" and ours and meta.get("namespace"):
            found.add(str(meta["namespace"]))
    return found


def registered_extensions(configs: Iterable[Obj], namespaces: set[str]) -> list[Obj]:
    """The ExtensionConfigs among ``configs`` that register this controller: named
    crs-controller or labelled app.kubernetes.io/name=crs-controller (config/extension's,
    whatever name prefix an overlay gave it), calling a Service in one of
    ``namespaces``."""
    found = []
    for config in configs:
        meta = metadata(config)
        labels = meta.get("labels") or {}
        ours = meta.get("name") == EXTENSION_NAME or labels.get(APP_LABEL) == EXTENSION_NAME
        service = ((config.get("spec") or {}).get("clientConfig") or {}).get("service") or {}
        if ours and service.get("namespace") in namespaces:
            found.append(config)
    return found


def describe(document: Obj) -> str:
    meta = metadata(document)
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{document.get('kind')} {where}{meta.get('name')}"


SETS_NAMED = 10  # the sets a refusal names; the rest are counted


def _sets_left(crss: list[Obj], then: str) -> str:
    shown = [f"{metadata(c).get('namespace')}/{metadata(c).get('name')}" for c in crss]
    names = ", ".join(shown[:SETS_NAMED])
    if len(shown) > SETS_NAMED:
        names += f" and {len(shown) - SETS_NAMED} more"
    return (
        f"{len(crss)} ClusterResourceSet(s) still exist: {names}. The CRDs hold every "
        "namespace's sets, and deleting them would delete these too; " + then
    )


# --- the deletion -----------------------------------------------------------------------


async def _all_sets(client: KubeAPI) -> list[Obj]:
    """The name of every namespace's sets, read page by page: a tenant's large sets
    do not stop the release's deletion for everyone."""
    try:
        return await listed(client, API_VERSION, CLUSTER_RESOURCE_SET_KIND, None)
    except NotFound:  # the CRD is gone already
        return []


async def _refuse_while_sets(client: KubeAPI, then: str) -> None:
    crss = await _all_sets(client)
    if crss:
        raise UsageError(_sets_left(crss, then))


async def extensions(client: KubeAPI, release: list[Obj]) -> list[Obj]:
    """The ExtensionConfigs registering the release's controller that the release
    file does not hold itself (none where Cluster API's runtime API is not served)."""
    namespaces = release_namespaces(release)
    found: list[Obj] = []
    try:  # page by page, only ours kept: another provider's large configs never add up
        async for page, _ in client.pages(EXTENSION_API, EXTENSION_KIND, None):
            found += registered_extensions(page, namespaces)
    except NotFound:
        return []
    held = {metadata(d).get("name") for d in release if d.get("kind") == EXTENSION_KIND}
    return [
        {"apiVersion": EXTENSION_API, "kind": EXTENSION_KIND, "metadata": {"name": name}}
        for name in (metadata(c).get("name") for c in found)
        if name not in held
    ]


async def plan_release(client: KubeAPI, release: list[Obj], say: Say = _say) -> None:
    say("would then delete, in this order:")
    for document in deletion_order([*await extensions(client, release), *release]):
        say(f"  {describe(document)}")


async def _delete(client: KubeAPI, document: Obj, say: Say) -> None:
    meta = metadata(document)
    try:
        gone = not await client.delete(
            str(document.get("apiVersion")),
            str(document.get("kind")),
            str(meta.get("name")),
            meta.get("namespace"),
        )
    except NotFound:  # a kind this server does not serve
        gone = True
    say(f"{'already gone' if gone else 'deleted'}: {describe(document)}")


async def delete_release(client: KubeAPI, release: list[Obj], say: Say = _say) -> None:
    """Delete the release (and the ExtensionConfig registering it) in a safe order;
    UsageError, nothing deleted, while any ClusterResourceSet exists, and the CRDs
    kept if one appeared while the rest went."""
    await _refuse_while_sets(client, "nothing of the release was deleted")
    ordered = deletion_order([*await extensions(client, release), *release])
    crds = [d for d in ordered if d.get("kind") == CRD_KIND]
    for document in (d for d in ordered if d.get("kind") != CRD_KIND):
        await _delete(client, document, say)
    await _refuse_while_sets(
        client,
        "the CRDs were kept. The controller is deleted already: docs/install.md, "
        '"When the controller is already gone", says how to remove the sets',
    )
    for document in crds:
        await _delete(client, document, say)
    say("release deleted")
