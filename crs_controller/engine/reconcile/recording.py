"""Recording: the cluster's ClusterResourceSetBinding, written once per reconcile and
only when it changed, with optimistic concurrency."""

from __future__ import annotations

from typing import Any

from crs_controller.core.api.models import ClusterResourceSetBinding, CRSBinding, to_api
from crs_controller.core.errors import Conflict
from crs_controller.core.state.bindings import binding_changed, desired_binding
from crs_controller.engine.io.stores import BindingStore

BINDING_WRITE_ATTEMPTS = 5


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
