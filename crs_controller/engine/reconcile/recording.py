"""Recording: the cluster's ClusterResourceSetBinding, written once per reconcile and
only when it changed, with optimistic concurrency."""

from __future__ import annotations

import logging
from typing import Any

import structlog

from crs_controller.core.api.models import ClusterResourceSetBinding, CRSBinding, to_api
from crs_controller.core.errors import Conflict
from crs_controller.core.state.bindings import binding_changed, desired_binding
from crs_controller.engine.io.stores import BindingStore

BINDING_WRITE_ATTEMPTS = 5

log = structlog.get_logger(__name__)


async def write_binding(
    store: BindingStore,
    namespace: str,
    cluster: str,
    current: ClusterResourceSetBinding | None,
    entries: dict[str, CRSBinding],
    owners: list[dict[str, Any]],
) -> None:
    """Write the binding with ``entries`` and ``owners`` if it changed; delete it when
    ``entries`` is empty."""
    if not entries:
        if current is not None:
            await store.delete(namespace, cluster)
        return

    async def put(base: ClusterResourceSetBinding | None) -> None:
        desired = desired_binding(
            base, namespace=namespace, cluster=cluster, entries=entries, owners=owners
        )
        if binding_changed(base, desired):
            if log.is_enabled_for(logging.DEBUG):  # worked out only when it is logged
                changed = _what(base, desired)
                log.debug("binding written", cluster=f"{namespace}/{cluster}", changed=changed)
            await store.write(to_api(desired), create=base is None)

    # Optimistic concurrency: PUT with the resourceVersion we read. On a Conflict
    # re-read the binding and put our entries on the fresh copy at once, rather than
    # failing the whole reconcile (which would redo every apply to record them).
    for _ in range(BINDING_WRITE_ATTEMPTS - 1):
        try:
            await put(current)
            return
        except Conflict:
            fresh = await store.read(namespace, cluster)
            current = None if fresh is None else fresh.valid
    await put(current)


def _what(before: ClusterResourceSetBinding | None, after: ClusterResourceSetBinding) -> list[str]:
    """Which parts of the binding a write changes, named (never their values)."""
    if before is None:
        return ["created"]
    old = {e.cluster_resource_set_name: to_api(e) for e in before.spec.bindings}
    changed = (
        [] if before.metadata.owner_references == after.metadata.owner_references else ["owners"]
    )
    for entry in after.spec.bindings:
        new, was = to_api(entry), old.pop(entry.cluster_resource_set_name, None) or {}
        fields = sorted(k for k in new.keys() | was.keys() if new.get(k) != was.get(k))
        if fields == ["outcome"]:
            outcome, prior = new.get("outcome") or {}, was.get("outcome") or {}
            fields = [
                f"outcome.{k}"
                for k in sorted(outcome.keys() | prior.keys())
                if outcome.get(k) != prior.get(k)
            ]
        changed += [f"{entry.cluster_resource_set_name}: {', '.join(fields)}"]
    return changed + [f"{name}: removed" for name in old]
