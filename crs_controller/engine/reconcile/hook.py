"""The answers to Cluster API's lifecycle hooks: BeforeClusterDelete holds the
Cluster's deletion while a ClusterResourceSet still has cleanup to do on it;
AfterControlPlaneUpgrade and BeforeWorkersUpgrade hold an upgrade while a CRS with
``gateUpgrades`` has not put in place what the new version needs; BeforeClusterUpgrade
holds one to a version such a CRS has no resource for.

Read from the API, not from the caches: Cluster API takes 0 as final, and a standby
replica, or one whose caches are not synced yet, would otherwise answer 0 from
ignorance. The rules are pure elsewhere: the cleanup's own
(``workload.uninstall.holds_deletion``) and ``core.state.upgrade_gate``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from semver import Version

from crs_controller.clients.api import KubeAPI
from crs_controller.core.api.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_BINDING_KIND,
    CLUSTER_RESOURCE_SET_KIND,
)
from crs_controller.core.spec.objects import (
    CRS,
    Cluster,
    parse_binding_object,
    parse_cluster,
    parse_crs,
)
from crs_controller.core.state.prune_decisions import inventory
from crs_controller.core.state.upgrade_gate import Go, describe, gate, gates, without_build
from crs_controller.engine.reconcile.workload.uninstall import holds_deletion

HOOK_RETRY_SECONDS = 5
NOTHING_TO_DO = "crs-controller: nothing (more) to clean up"
NO_CLUSTER = "crs-controller: the request names no Cluster"


async def hook_status(
    mgmt: KubeAPI, cluster_api_version: str, cluster: Mapping[str, Any], now: datetime
) -> tuple[int, str]:
    """(retryAfterSeconds, message) for ``cluster`` as Cluster API sent it: positive
    while cleanup is still to be done. A failed read raises (the extension then asks
    for a retry)."""
    namespace, name = _named(cluster)
    if not namespace or not name:
        return HOOK_RETRY_SECONDS, NO_CLUSTER
    live = await mgmt.get(cluster_api_version, "Cluster", name, namespace)
    raw = await mgmt.get(API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, name, namespace)
    if live is None or raw is None:
        return 0, NOTHING_TO_DO
    binding = parse_binding_object(raw)
    if binding.model is None:
        # Not ours to read: hold on, the cluster's reconcile reports it.
        return HOOK_RETRY_SECONDS, "crs-controller: the binding cannot be read"
    pending = []
    for entry in binding.model.spec.bindings:
        if not inventory([entry]):
            continue  # nothing was ever applied there by this CRS
        crs_name = entry.cluster_resource_set_name
        found = await mgmt.get(API_VERSION, CLUSTER_RESOURCE_SET_KIND, crs_name, namespace)
        crs = None if found is None else parse_crs(found)
        if holds_deletion(crs, parse_cluster(live), now):
            pending.append(crs_name)
    if not pending:
        return 0, NOTHING_TO_DO
    return HOOK_RETRY_SECONDS, f"crs-controller: removing add-ons of {', '.join(pending)}"


async def upgrade_status(
    mgmt: KubeAPI,
    cluster_api_version: str,
    cluster: Mapping[str, Any],
    version: Version,
    *,
    before: bool = False,
) -> tuple[int, str]:
    """(retryAfterSeconds, message) for taking ``cluster`` on to ``version``: positive
    while a gating CRS has not applied (or, with healthCheck.wait, made Ready) what the
    version needs; ``before`` (BeforeClusterUpgrade): while a gating CRS has no
    resource for it. A failed read raises (the extension then asks for a retry)."""
    read = await _gating(mgmt, cluster_api_version, cluster)
    if isinstance(read, tuple):
        return read
    target, crss = read.cluster, read.crss
    if not any(gates(crs, target) for crs in crss):
        return 0, describe(Go(), version)
    if before:
        decision = without_build(target, crss, version)
        return (0 if isinstance(decision, Go) else HOOK_RETRY_SECONDS), describe(decision, version)
    raw = await mgmt.get(
        API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, target.name, target.namespace
    )
    binding = None if raw is None else parse_binding_object(raw).model
    # No binding, or one that cannot be read: nothing is known applied, every gating
    # CRS holds (the cluster's reconcile reports an unreadable binding).
    entries = (
        {} if binding is None else {b.cluster_resource_set_name: b for b in binding.spec.bindings}
    )
    decision = gate(target, crss, entries, version)
    return (0 if isinstance(decision, Go) else HOOK_RETRY_SECONDS), describe(decision, version)


@dataclass(frozen=True)
class _Gating:
    """The live Cluster a hook asks about, and its namespace's CRSs."""

    cluster: Cluster
    crss: list[CRS]


async def _gating(
    mgmt: KubeAPI, cluster_api_version: str, cluster: Mapping[str, Any]
) -> _Gating | tuple[int, str]:
    """The live Cluster and the CRSs of its namespace, or the answer when the request
    names no Cluster (retry) or one that is gone (0)."""
    namespace, name = _named(cluster)
    if not namespace or not name:
        return HOOK_RETRY_SECONDS, NO_CLUSTER
    live = await mgmt.get(cluster_api_version, "Cluster", name, namespace)
    if live is None:
        return 0, "crs-controller: no such Cluster"
    items, _ = await mgmt.list(API_VERSION, CLUSTER_RESOURCE_SET_KIND, namespace)
    return _Gating(parse_cluster(live), [parse_crs(item) for item in items])


def _named(cluster: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of the Cluster object in a hook request, "" when missing."""
    meta = cluster.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")
