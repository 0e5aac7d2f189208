"""The answers to Cluster API's lifecycle hooks: BeforeClusterDelete holds the
Cluster's deletion while a ClusterResourceSet still has cleanup to do on it;
AfterControlPlaneUpgrade and BeforeWorkersUpgrade hold an upgrade while a CRS with
``gateUpgrades`` has not put in place what the new version needs; BeforeClusterUpgrade
holds one to a version such a CRS has no resource for.

Read from the API, not from the caches: Cluster API takes 0 as final, and a standby
replica, or one whose caches are not synced yet, would otherwise answer 0 from
ignorance. The rules are pure elsewhere: the cleanup's own
(``workload.uninstall.holds_deletion``) and ``core.state.upgrade_gate``.

Cluster API asks again every few seconds while an answer is "retry", so a CRS is
parsed (its CEL health rules compiled) only when it can matter — it has
``gateUpgrades``, or asks for ``uninstall.ensure`` — and then once per version, off the
event loop (``engine.io.parsed_crss``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog
from semver import Version

from crs_controller.clients.api import KubeAPI
from crs_controller.core.api.clusters import PAUSED_ANNOTATION
from crs_controller.core.api.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_BINDING_KIND,
    CLUSTER_RESOURCE_SET_KIND,
    ClusterResourceSetBinding,
)
from crs_controller.core.spec.objects import (
    CRS,
    Cluster,
    parse_binding_object,
    parse_cluster,
)
from crs_controller.core.state.bindings import of_another_cluster
from crs_controller.core.state.prune_decisions import inventory
from crs_controller.core.state.upgrade_gate import Go, describe, gate, gates, without_build
from crs_controller.engine.io.parsed_crss import ParsedCRSs
from crs_controller.engine.reconcile.workload.uninstall import holds_deletion

log = structlog.get_logger(__name__)

HOOK_RETRY_SECONDS = 5
NOTHING_TO_DO = "crs-controller: nothing (more) to clean up"
NO_CLUSTER = "crs-controller: the request names no Cluster"


async def hook_status(
    mgmt: KubeAPI,
    cluster_api_version: str,
    cluster: Mapping[str, Any],
    now: datetime,
    *,
    parsed: ParsedCRSs,
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
    target = parse_cluster(live)
    binding = parse_binding_object(raw)
    if of_another_cluster(binding.meta, target.meta.uid):
        return 0, NOTHING_TO_DO  # an earlier Cluster's: nothing was applied to this one
    if binding.model is None:
        return await _unreadable_binding(mgmt, parsed, target, now)
    pending = await _pending(mgmt, parsed, target, binding.model, now)
    if not pending:
        return 0, NOTHING_TO_DO
    return HOOK_RETRY_SECONDS, f"crs-controller: removing add-ons of {', '.join(pending)}"


async def _pending(
    mgmt: KubeAPI,
    parsed: ParsedCRSs,
    cluster: Cluster,
    binding: ClusterResourceSetBinding,
    now: datetime,
) -> list[str]:
    """The CRSs with cleanup still to do on the deleted ``cluster``, by name."""
    pending = []
    for entry in binding.spec.bindings:
        if not inventory([entry]):
            continue  # nothing was ever applied there by this CRS
        crs_name = entry.cluster_resource_set_name
        found = await mgmt.get(API_VERSION, CLUSTER_RESOURCE_SET_KIND, crs_name, cluster.namespace)
        if found is None or not _asks_cleanup(found):
            continue  # gone, or no uninstall.ensure: holds nothing
        if holds_deletion(await parsed.parse(found), cluster, now):
            pending.append(crs_name)
    return pending


async def _unreadable_binding(
    mgmt: KubeAPI, parsed: ParsedCRSs, cluster: Cluster, now: datetime
) -> tuple[int, str]:
    """A binding the model refuses tells nothing of what was applied, and the cluster's
    reconcile stops on it (and reports it): hold on while a CRS of the namespace that
    asks for cleanup is within its ``uninstall.timeout`` (the longest decides), then
    let the deletion go, as the timeout promises."""
    if await _cleanup_holds(mgmt, parsed, cluster, now):
        return HOOK_RETRY_SECONDS, "crs-controller: the binding cannot be read"
    log.warning(
        "BeforeClusterDelete: the binding cannot be read and uninstall.timeout has passed;"
        " letting the deletion go without cleanup",
        cluster=f"{cluster.namespace}/{cluster.name}",
    )
    return 0, "crs-controller: the binding cannot be read; uninstall.timeout has passed"


async def _cleanup_holds(
    mgmt: KubeAPI, parsed: ParsedCRSs, cluster: Cluster, now: datetime
) -> bool:
    """Does a CRS of the cluster's namespace that asks for cleanup still hold its
    deletion? Read page by page, each page bounded on its own: the namespace's other
    large sets do not add up to a refused LIST."""
    holds = False
    async for page, _ in mgmt.pages(API_VERSION, CLUSTER_RESOURCE_SET_KIND, cluster.namespace):
        for raw in page:
            if not holds and _asks_cleanup(raw):
                holds = holds_deletion(await parsed.parse(raw), cluster, now)
    return holds


async def upgrade_status(
    mgmt: KubeAPI,
    cluster_api_version: str,
    cluster: Mapping[str, Any],
    version: Version,
    *,
    parsed: ParsedCRSs,
    before: bool = False,
) -> tuple[int, str]:
    """(retryAfterSeconds, message) for taking ``cluster`` on to ``version``: positive
    while a gating CRS has not applied (or, with healthCheck.wait, made Ready) what the
    version needs; ``before`` (BeforeClusterUpgrade): while a gating CRS has no
    resource for it. A failed read raises (the extension then asks for a retry)."""
    read = await _gating(mgmt, parsed, cluster_api_version, cluster)
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
    parsed_binding = None if raw is None else parse_binding_object(raw)
    if parsed_binding is not None and of_another_cluster(parsed_binding.meta, target.meta.uid):
        parsed_binding = None  # an earlier Cluster's: nothing was applied to this one
    binding = None if parsed_binding is None else parsed_binding.model
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
    mgmt: KubeAPI, parsed: ParsedCRSs, cluster_api_version: str, cluster: Mapping[str, Any]
) -> _Gating | tuple[int, str]:
    """The live Cluster and the CRSs of its namespace that may gate it, or the answer
    when the request names no Cluster (retry) or one that is gone (0)."""
    namespace, name = _named(cluster)
    if not namespace or not name:
        return HOOK_RETRY_SECONDS, NO_CLUSTER
    live = await mgmt.get(cluster_api_version, "Cluster", name, namespace)
    if live is None:
        return 0, "crs-controller: no such Cluster"
    crss: list[CRS] = []  # read page by page, only those that may gate kept
    async for page, _ in mgmt.pages(API_VERSION, CLUSTER_RESOURCE_SET_KIND, namespace):
        crss += [await parsed.parse(item) for item in page if _may_gate(item)]
    return _Gating(parse_cluster(live), crss)


def _may_gate(raw: Mapping[str, Any]) -> bool:
    """Read from the raw object, before any parse: could this CRS gate an upgrade
    (``upgrade_gate.gates``: ``gateUpgrades``, not paused, not being deleted)? The
    parse decides the rest (a spec the model accepts, a selector that matches)."""
    meta, spec = raw.get("metadata"), raw.get("spec")
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        return False
    annotations = meta.get("annotations")
    paused = isinstance(annotations, Mapping) and PAUSED_ANNOTATION in annotations
    return (
        spec.get("gateUpgrades") not in (None, False)
        and not paused
        and not meta.get("deletionTimestamp")
    )


def _asks_cleanup(raw: Mapping[str, Any]) -> bool:
    """Read from the raw object, before any parse: could this CRS hold a Cluster's
    deletion (``uninstall.ensure``)? ``holds_deletion`` decides on the parsed CRS."""
    spec = raw.get("spec")
    uninstall = spec.get("uninstall") if isinstance(spec, Mapping) else None
    return isinstance(uninstall, Mapping) and uninstall.get("ensure") not in (None, False)


def _named(cluster: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of the Cluster object in a hook request, "" when missing."""
    meta = cluster.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")
