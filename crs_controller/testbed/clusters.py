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
) -> dict[str, Any]:
    """Create a Cluster for ``workload`` and its kubeconfig Secret; return the Cluster."""
    host, port = workload.url.removeprefix("https://").rsplit(":", 1)
    cluster = mgmt.create(
        {
            "apiVersion": api_version,
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
            "spec": {"controlPlaneEndpoint": {"host": host, "port": int(port)}},
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
