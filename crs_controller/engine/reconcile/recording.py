"""Recording: the cluster's ClusterResourceSetBinding, written once per reconcile and
only when it changed, with optimistic concurrency."""

from __future__ import annotations

from typing import Any

from crs_controller.core.bindings import (
    binding_changed,
    desired_binding,
    owner_reference,
    parse_binding,
)
from crs_controller.core.errors import Conflict
from crs_controller.core.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_BINDING_KIND,
    ClusterResourceSetBinding,
    CRSBinding,
    to_api,
)
from crs_controller.engine.context import Context

BINDING_WRITE_ATTEMPTS = 5


async def write_binding(
    ctx: Context,
    namespace: str,
    cluster: str,
    current: ClusterResourceSetBinding | None,
    entries: dict[str, CRSBinding],
) -> None:
    """Write the binding with ``entries`` if it changed; delete it when empty."""
    owners = [
        owner_reference(c) for c in ctx.index.crss_in(namespace) if c["metadata"]["name"] in entries
    ]
    if not entries:
        if current is not None:
            await ctx.mgmt.delete(
                API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, cluster, namespace
            )
        return
    # Optimistic concurrency: PUT with the resourceVersion we read. On a Conflict
    # re-read the binding and put our entries on the fresh copy at once, rather than
    # failing the whole reconcile (which would redo every apply to record them).
    for _ in range(BINDING_WRITE_ATTEMPTS - 1):
        try:
            await _put_binding(ctx, namespace, cluster, current, entries, owners)
            return
        except Conflict:
            fresh = await ctx.mgmt.get(
                API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, cluster, namespace
            )
            current = parse_binding(fresh)
    await _put_binding(ctx, namespace, cluster, current, entries, owners)


async def _put_binding(
    ctx: Context,
    namespace: str,
    cluster: str,
    current: ClusterResourceSetBinding | None,
    entries: dict[str, CRSBinding],
    owners: list[dict[str, Any]],
) -> None:
    desired = desired_binding(
        current, namespace=namespace, cluster=cluster, entries=entries, owners=owners
    )
    if not binding_changed(current, desired):
        return
    body = to_api(desired)
    written = await (ctx.mgmt.create(body) if current is None else ctx.mgmt.replace(body))
    # Cache what we wrote at once, so a reconcile racing the watch does not act on
    # the binding as it was before.
    ctx.bindings.put(written)
