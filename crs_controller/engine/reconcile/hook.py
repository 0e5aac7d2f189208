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
event loop (``engine.io.parsed_crss``). For the same reason an answer reads each CRS
a binding records once, and a bounded number of times whatever the binding (which a
tenant may write) says; its message names a few of them and counts the others.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
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
from crs_controller.core.errors import InvalidObjectName
from crs_controller.core.spec.objects import (
    CRS,
    Cluster,
    parse_binding_object,
    parse_cluster,
)
from crs_controller.core.state.bindings import entries_by_crs, of_another_cluster
from crs_controller.core.state.prune_decisions import inventory
from crs_controller.core.state.upgrade_gate import Go, describe, gate, gates, without_build
from crs_controller.core.text import safe
from crs_controller.engine.io.parsed_crss import ParsedCRSs
from crs_controller.engine.reconcile.workload.uninstall import holds_deletion

log = structlog.get_logger(__name__)

HOOK_RETRY_SECONDS = 5
NOTHING_TO_DO = "crs-controller: nothing (more) to clean up"
NO_CLUSTER = "crs-controller: the request names no Cluster"
NOT_WATCHED = "crs-controller: nothing to do in a namespace it does not watch"
# A binding is tenant-writable and its entries unbounded: past this many CRSs recorded
# with something applied, the namespace's CRSs are read page by page instead of one
# GET each, so an answer costs a bounded number of reads whatever the binding says.
GETS_AT_MOST = 20
NAMES_SHOWN = 5  # the CRSs an answer names; the others are counted
NAME_SHOWN_CHARS = 63


async def hook_status(
    mgmt: KubeAPI,
    cluster_api_version: str,
    cluster: Mapping[str, Any],
    now: datetime,
    *,
    parsed: ParsedCRSs,
    watched: str | None = None,
) -> tuple[int, str]:
    """(retryAfterSeconds, message) for ``cluster`` as Cluster API sent it: positive
    while cleanup is still to be done. A failed read raises (the extension then asks
    for a retry). ``watched``: the one namespace the controller watches (--namespace)."""
    namespace, name = _named(cluster)
    if not namespace or not name:
        return HOOK_RETRY_SECONDS, NO_CLUSTER
    if not _in_scope(namespace, watched, "BeforeClusterDelete"):
        return 0, NOT_WATCHED
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
    return HOOK_RETRY_SECONDS, f"crs-controller: removing add-ons of {_names(pending)}"


async def _pending(
    mgmt: KubeAPI,
    parsed: ParsedCRSs,
    cluster: Cluster,
    binding: ClusterResourceSetBinding,
    now: datetime,
) -> list[str]:
    """The CRSs with cleanup still to do on the deleted ``cluster``, by name, in the
    binding's order. A CRS the binding records twice counts once, by its last entry,
    as the cluster's reconcile reads it (``entries_by_crs``)."""
    # A CRS that recorded no object applied nothing there, and has nothing to remove.
    recorded = [name for name, entry in entries_by_crs(binding).items() if inventory([entry])]
    holding: set[str] = set()
    async for name, raw in _recorded_crss(mgmt, cluster.namespace, recorded):
        if not _asks_cleanup(raw):
            continue  # no uninstall.ensure: holds nothing
        if holds_deletion(await parsed.parse(raw), cluster, now):
            holding.add(name)
    return [name for name in recorded if name in holding]


async def _recorded_crss(
    mgmt: KubeAPI, namespace: str, names: Sequence[str]
) -> AsyncIterator[tuple[str, Mapping[str, Any]]]:
    """The CRSs of ``namespace`` named in ``names`` (distinct) that exist, as read from
    the API: a GET each, or past GETS_AT_MOST names, the namespace's CRSs page by page."""
    if len(names) <= GETS_AT_MOST:
        for name in names:
            try:
                found = await mgmt.get(API_VERSION, CLUSTER_RESOURCE_SET_KIND, name, namespace)
            except InvalidObjectName:
                continue  # a binding (tenants write them) naming what no CRS can be named
            if found is not None:
                yield name, found
        return
    wanted = set(names)
    async for page, _ in mgmt.pages(API_VERSION, CLUSTER_RESOURCE_SET_KIND, namespace):
        for raw in page:
            name = _named(raw)[1]
            if name in wanted:
                yield name, raw


def _names(names: Sequence[str]) -> str:
    """``names`` for a message: the first NAMES_SHOWN, each cut, the others counted."""
    shown = ", ".join(safe(name, NAME_SHOWN_CHARS) for name in names[:NAMES_SHOWN])
    more = len(names) - NAMES_SHOWN
    return f"{shown} and {more} more" if more > 0 else shown


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
    watched: str | None = None,
) -> tuple[int, str]:
    """(retryAfterSeconds, message) for taking ``cluster`` on to ``version``: positive
    while a gating CRS has not applied (or, with healthCheck.wait, made Ready) what the
    version needs; ``before`` (BeforeClusterUpgrade): while a gating CRS has no
    resource for it. A failed read raises (the extension then asks for a retry).
    ``watched``: the one namespace the controller watches (--namespace)."""
    read = await _gating(mgmt, parsed, cluster_api_version, cluster, watched)
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
    mgmt: KubeAPI,
    parsed: ParsedCRSs,
    cluster_api_version: str,
    cluster: Mapping[str, Any],
    watched: str | None,
) -> _Gating | tuple[int, str]:
    """The live Cluster and the CRSs of its namespace that may gate it, or the answer
    when the request names no Cluster (retry), one outside ``watched`` or one that is
    gone (0)."""
    namespace, name = _named(cluster)
    if not namespace or not name:
        return HOOK_RETRY_SECONDS, NO_CLUSTER
    if not _in_scope(namespace, watched, "upgrade hook"):
        return 0, NOT_WATCHED
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


def _in_scope(namespace: str, watched: str | None, hook: str) -> bool:
    """Is ``namespace`` one the controller watches? Cluster API calls the hooks for
    every namespace, and a controller run with --namespace may read no other (a read
    there is refused, which would hold the Cluster for ever): outside it this
    controller applied nothing, and holds nothing."""
    if not watched or namespace == watched:
        return True
    log.debug(
        f"{hook}: a Cluster outside the watched namespace; nothing to do", namespace=namespace
    )
    return False


def _named(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of an object (the Cluster of a hook request), "" when missing."""
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")
