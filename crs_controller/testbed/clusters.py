"""Make workload servers look like Cluster API clusters to the controller.

Cluster API's own controllers do not run here; these helpers write what they would:
the Cluster object, its ``<name>-kubeconfig`` Secret and the status fields that say
the control plane is initialized.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from crs_controller.testbed.controlplane import ADMIN, ADMIN_GROUPS, Server
from crs_controller.testbed.kube import TestbedClient, wait_for

CRD_API = "apiextensions.k8s.io/v1"
V1BETA1 = "cluster.x-k8s.io/v1beta1"
V1BETA2 = "cluster.x-k8s.io/v1beta2"
CONTROL_PLANE_GROUP = "controlplane.cluster.x-k8s.io"
CONTROL_PLANE_API = f"{CONTROL_PLANE_GROUP}/v1beta2"
CONTROL_PLANE_KIND = "KubeadmControlPlane"


def _crd_established(client: TestbedClient, name: str) -> bool:
    crd = client.get(CRD_API, "CustomResourceDefinition", name) or {}
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def install_crds(client: TestbedClient, paths: Iterable[Path | str], timeout: float = 30.0) -> None:
    """Apply every document of every file and wait until each CRD is Established."""
    names = []
    for path in paths:
        for doc in yaml.safe_load_all(Path(path).read_text()):
            if doc:
                client.apply(doc)
                names.append(doc["metadata"]["name"])
    for name in names:
        wait_for(
            functools.partial(_crd_established, client, name),
            timeout,
            message=f"CRD {name} Established",
        )


def _initialized_status(api_version: str, initialized: bool) -> dict[str, Any]:
    if api_version == V1BETA1:
        return {"controlPlaneReady": initialized}
    return {"initialization": {"controlPlaneInitialized": initialized}}


def set_cluster_initialized(
    mgmt: TestbedClient,
    *,
    name: str,
    namespace: str,
    initialized: bool = True,
    api_version: str = V1BETA1,
) -> dict[str, Any]:
    """Report the Cluster's control plane initialized (or not), as CAPI would."""
    return mgmt.patch_merge(
        api_version,
        "Cluster",
        name,
        {"status": _initialized_status(api_version, initialized)},
        namespace=namespace,
        subresource="status",
    )


def kubeconfig_secret(
    workload: Server,
    *,
    name: str,
    namespace: str,
    user: str = ADMIN,
    groups: tuple[str, ...] = ADMIN_GROUPS,
) -> dict[str, Any]:
    """The Secret CAPI writes for a Cluster: ``<name>-kubeconfig``, key ``value``."""
    value = yaml.safe_dump(workload.kubeconfig(user, groups)).encode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"{name}-kubeconfig",
            "namespace": namespace,
            "labels": {"cluster.x-k8s.io/cluster-name": name},
        },
        "type": "cluster.x-k8s.io/secret",
        "data": {"value": base64.b64encode(value).decode()},
    }


def register_cluster(
    mgmt: TestbedClient,
    workload: Server,
    *,
    name: str,
    namespace: str,
    labels: Mapping[str, str] | None = None,
    api_version: str = V1BETA1,
    initialized: bool = True,
    kubeconfig_user: str = ADMIN,
    kubeconfig_groups: tuple[str, ...] = ADMIN_GROUPS,
    version: str | None = None,
) -> dict[str, Any]:
    """Create a Cluster for ``workload`` and its kubeconfig Secret; return the Cluster.
    With ``version``, also a control plane object (``<name>-control-plane``) the
    Cluster's ``spec.controlPlaneRef`` names, reporting that version as running."""
    host, port = workload.url.removeprefix("https://").rsplit(":", 1)
    spec: dict[str, Any] = {"controlPlaneEndpoint": {"host": host, "port": int(port)}}
    if version is not None:
        spec["controlPlaneRef"] = control_plane_ref(api_version, f"{name}-control-plane")
        create_control_plane(mgmt, name=name, namespace=namespace, version=version)
    cluster = mgmt.create(
        {
            "apiVersion": api_version,
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
            "spec": spec,
        }
    )
    mgmt.create(
        kubeconfig_secret(
            workload, name=name, namespace=namespace, user=kubeconfig_user, groups=kubeconfig_groups
        )
    )
    if initialized:
        cluster = set_cluster_initialized(
            mgmt, name=name, namespace=namespace, api_version=api_version
        )
    return cluster


def control_plane_ref(cluster_api_version: str, name: str) -> dict[str, str]:
    """``spec.controlPlaneRef`` as each Cluster version spells it."""
    if cluster_api_version == V1BETA1:
        return {"apiVersion": CONTROL_PLANE_API, "kind": CONTROL_PLANE_KIND, "name": name}
    return {"apiGroup": CONTROL_PLANE_GROUP, "kind": CONTROL_PLANE_KIND, "name": name}


def create_control_plane(
    mgmt: TestbedClient, *, name: str, namespace: str, version: str | None
) -> dict[str, Any]:
    """The stand-in control plane object of Cluster ``name``, asked for ``version`` and
    running it (``status.version``; None: not reported yet)."""
    mgmt.create(
        {
            "apiVersion": CONTROL_PLANE_API,
            "kind": CONTROL_PLANE_KIND,
            "metadata": {"name": f"{name}-control-plane", "namespace": namespace},
            "spec": {"version": version} if version else {},
        }
    )
    return set_control_plane_version(mgmt, name=name, namespace=namespace, version=version)


def set_control_plane_version(
    mgmt: TestbedClient,
    *,
    name: str,
    namespace: str,
    version: str | None,
    desired: str | None = None,
) -> dict[str, Any]:
    """Report Cluster ``name``'s control plane running ``version`` (None: unknown), as
    its provider would; ``desired`` also sets ``spec.version`` (an upgrade asked for)."""
    cp = f"{name}-control-plane"
    if desired is not None:
        mgmt.patch_merge(
            CONTROL_PLANE_API,
            CONTROL_PLANE_KIND,
            cp,
            {"spec": {"version": desired}},
            namespace=namespace,
        )
    return mgmt.patch_merge(
        CONTROL_PLANE_API,
        CONTROL_PLANE_KIND,
        cp,
        {"status": {"version": version}},
        namespace=namespace,
        subresource="status",
    )
