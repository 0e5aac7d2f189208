"""The controller's writes to the management cluster, each kept in step with the
cache it lands in: what was just written is cached at once, so a reconcile racing
the watch never acts on the version before. Reconcilers write only through these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crs_controller.clients.api import KubeAPI, Obj
from crs_controller.core.api.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_BINDING_KIND,
    CLUSTER_RESOURCE_SET_KIND,
    SHARD_BUCKET_LABEL,
    ClusterResourceSetStatus,
    to_api,
)
from crs_controller.core.spec.objects import (
    CRS,
    Binding,
    Cluster,
    parse_binding_object,
    parse_cluster,
)
from crs_controller.engine.io.informer import Informer, obj_key


class BindingStore:
    def __init__(self, mgmt: KubeAPI, cache: Informer[Binding]) -> None:
        self._mgmt = mgmt
        self._cache = cache
        # Read by ``read_missing`` and found absent, no event of it told since.
        self._absent: set[tuple[str, str]] = set()
        self._reading: set[tuple[str, str]] = set()  # ``read_missing`` under way

    async def read_whole(self, namespace: str, name: str) -> Binding | None:
        """The whole binding (the cache may hold only its summary: the Cluster was
        another replica's), read from the API server and cached."""
        raw = await self._mgmt.get(API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, name, namespace)
        if raw is None:
            return None
        self._cache.refresh(raw)
        return parse_binding_object(raw)

    async def read_missing(self, namespace: str, name: str) -> Binding | None:
        """A binding a shard member's watches do not hold, read whole (``read_whole``):
        its label may name another member's bucket. Found absent, it is not read
        again (None) until an event of it comes (``seen``) or the share changes
        (``forget_absent``): one read per Cluster per share, not one per pass."""
        key = (namespace, name)
        if key in self._absent:
            return None
        self._reading.add(key)
        try:
            found = await self.read_whole(namespace, name)
            if found is None and key in self._reading:  # no event of it meanwhile
                self._absent.add(key)
            return found
        finally:
            self._reading.discard(key)

    def seen(self, namespace: str, name: str) -> None:
        """A watch told of this binding: what a read found absent may be there now."""
        self._absent.discard((namespace, name))
        self._reading.discard((namespace, name))

    def forget_absent(self) -> None:
        """The share changed: what reads found absent is read again when a pass needs it."""
        self._absent.clear()
        self._reading.clear()

    async def write(self, body: Mapping[str, Any], *, create: bool) -> Binding:
        """Create, or replace with the resourceVersion in ``body`` (Conflict on a race)."""
        written = await (self._mgmt.create(body) if create else self._mgmt.replace(body))
        return self._written(written)

    async def label_bucket(
        self, namespace: str, name: str, bucket: str, *, resource_version: str | None
    ) -> Binding:
        """Set only the shard bucket label (a merge patch at ``resource_version``:
        Conflict on a race), for a binding that has nothing else to write."""
        meta = {"labels": {SHARD_BUCKET_LABEL: bucket}, "resourceVersion": resource_version}
        written = await self._mgmt.merge_patch(
            API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, name, namespace, {"metadata": meta}
        )
        return self._written(written)

    def _written(self, written: Obj) -> Binding:
        """Cache what was just written: it is there, whatever a read found before."""
        self.seen(*obj_key(written))
        return self._cache.put(written)

    async def delete(
        self, namespace: str, name: str, *, resource_version: str | None = None
    ) -> None:
        """Delete; with ``resource_version``, only that version (Conflict on a race)."""
        await self._mgmt.delete(
            API_VERSION,
            CLUSTER_RESOURCE_SET_BINDING_KIND,
            name,
            namespace,
            resource_version=resource_version,
        )
        self._cache.remove(namespace, name)


class ClusterStore:
    def __init__(self, mgmt: KubeAPI, cache: Informer[Cluster]) -> None:
        self._mgmt = mgmt
        self._cache = cache

    async def read_whole(self, namespace: str, name: str) -> Cluster | None:
        """The whole Cluster (the cache may hold only its summary: it was another
        replica's), read from the API server and cached."""
        spec = self._cache.spec
        raw = await self._mgmt.get(spec.api_version, spec.kind, name, namespace)
        if raw is None:
            return None
        self._cache.refresh(raw)
        return parse_cluster(raw)


class CRSStore:
    def __init__(self, mgmt: KubeAPI, cache: Informer[CRS]) -> None:
        self._mgmt = mgmt
        self._cache = cache

    async def set_finalizers(self, crs: CRS, finalizers: list[str]) -> CRS:
        """Only ``metadata.finalizers`` changes (a merge patch, so a spec written by a
        newer schema is never rewritten), at the cached resourceVersion."""
        meta = {"finalizers": finalizers, "resourceVersion": crs.meta.resource_version}
        written = await self._mgmt.merge_patch(
            API_VERSION, CLUSTER_RESOURCE_SET_KIND, crs.name, crs.namespace, {"metadata": meta}
        )
        return self._cache.put(written)

    async def drop_annotation(self, crs: CRS, key: str) -> CRS:
        """Remove one annotation (a merge patch at the cached resourceVersion)."""
        meta = {"annotations": {key: None}, "resourceVersion": crs.meta.resource_version}
        written = await self._mgmt.merge_patch(
            API_VERSION, CLUSTER_RESOURCE_SET_KIND, crs.name, crs.namespace, {"metadata": meta}
        )
        return self._cache.put(written)

    async def read(self, crs: CRS) -> CRS | None:
        """The CRS as the API server has it now (the cache may lag a write by another
        process), cached; None once it is gone."""
        raw = await self._mgmt.get(API_VERSION, CLUSTER_RESOURCE_SET_KIND, crs.name, crs.namespace)
        return None if raw is None else self._cache.put(raw)

    async def put_status(self, crs: CRS, status: ClusterResourceSetStatus) -> CRS:
        """Replace the status subresource at the cached resourceVersion (the server
        keeps everything but the status as stored)."""
        body = {
            "apiVersion": API_VERSION,
            "kind": CLUSTER_RESOURCE_SET_KIND,
            "metadata": {
                "name": crs.name,
                "namespace": crs.namespace,
                "resourceVersion": crs.meta.resource_version,
            },
            "status": to_api(status),
        }
        written = await self._mgmt.replace(body, subresource="status")
        return self._cache.put(written)
