"""An in-memory stand-in for ``clients.kube.KubeClient`` and the engine context built
on it: the unit seam for reconcile decisions. Integration tests stay on real servers;
this only keeps objects in dicts, stamps what server-side apply would (generation,
managedFields), enforces resourceVersions on PUT, and records every request."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping
from typing import Any

from crs_controller.clients.kube import ResourceInfo
from crs_controller.core.errors import Conflict, NotFound, Unreachable
from crs_controller.core.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_BINDING_KIND,
    CLUSTER_RESOURCE_SET_KIND,
)
from crs_controller.engine.context import Context, Settings
from crs_controller.engine.index import Index
from crs_controller.engine.runtime.events import EventRecorder
from crs_controller.engine.runtime.watching import Informer, WatchSpec
from crs_controller.engine.sources import Sources

Obj = dict[str, Any]
CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition", "ClusterRole"}
CLUSTER_API = "cluster.x-k8s.io/v1beta1"


class MemoryKube:
    """Objects by (apiVersion, kind, namespace, name); ``requests`` lists (verb, kind/name)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.objects: dict[tuple[str, str, str, str], Obj] = {}
        self.requests: list[tuple[str, str]] = []
        self.down = False  # every request raises Unreachable
        self.fail_with: Exception | None = None  # raised by the next apply
        self._version = 0

    def _key(self, api_version: str, kind: str, namespace: str | None, name: str) -> tuple:
        return (api_version, kind, "" if kind in CLUSTER_SCOPED else namespace or "", name)

    def _check(self, verb: str, what: str) -> None:
        self.requests.append((verb, what))
        if self.down:
            raise Unreachable(f"{self.name}: {verb} {what}: ConnectError")

    def _stamp(self, obj: Obj) -> Obj:
        self._version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._version)
        obj["metadata"].setdefault("uid", str(uuid.uuid4()))
        return obj

    def writes(self) -> list[tuple[str, str]]:
        return [r for r in self.requests if r[0] in ("apply", "create", "replace", "delete")]

    # -- the KubeClient surface the engine uses --------------------------------------

    async def resource_info(self, api_version: str, kind: str) -> ResourceInfo:
        return ResourceInfo(api_version, kind, kind.lower() + "s", kind not in CLUSTER_SCOPED)

    def forget_discovery(self, api_version: str) -> None:
        pass

    async def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        self._check("get", f"{kind}/{name}")
        found = self.objects.get(self._key(api_version, kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    async def apply(self, obj: Mapping[str, Any], *, field_manager: str, force: bool = True) -> Obj:
        self._check("apply", f"{obj['kind']}/{obj['metadata']['name']}")
        if self.fail_with is not None:
            raise self.fail_with
        meta = obj["metadata"]
        key = self._key(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        live = copy.deepcopy(dict(obj))
        old = self.objects.get(key)
        generation = int((old or {}).get("metadata", {}).get("generation") or 0)
        changed = old is None or {k: v for k, v in old.items() if k != "metadata"} != {
            k: v for k, v in live.items() if k != "metadata"
        }
        live["metadata"]["generation"] = generation + 1 if changed else generation
        live["metadata"]["managedFields"] = [
            {"manager": field_manager, "operation": "Apply", "fieldsV1": {"f:all": {}}}
        ]
        self.objects[key] = self._stamp(live)
        return copy.deepcopy(live)

    async def create(self, obj: Mapping[str, Any]) -> Obj:
        self._check("create", f"{obj['kind']}/{obj['metadata']['name']}")
        meta = obj["metadata"]
        key = self._key(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        if key in self.objects:
            raise Conflict(f"{self.name}: {obj['kind']} exists", status=409)
        self.objects[key] = self._stamp(copy.deepcopy(dict(obj)))
        return copy.deepcopy(self.objects[key])

    async def replace(self, obj: Mapping[str, Any], *, subresource: str | None = None) -> Obj:
        self._check("replace", f"{obj['kind']}/{obj['metadata']['name']}")
        meta = obj["metadata"]
        key = self._key(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        current = self.objects.get(key)
        if current is None:
            raise NotFound(f"{self.name}: not found", status=404)
        if meta.get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise Conflict(f"{self.name}: modified", status=409)
        self.objects[key] = self._stamp(copy.deepcopy(dict(obj)))
        return copy.deepcopy(self.objects[key])

    async def delete(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> bool:
        self._check("delete", f"{kind}/{name}")
        return self.objects.pop(self._key(api_version, kind, namespace, name), None) is not None


class Workloads:
    """``WorkloadClients`` with one in-memory client per cluster name."""

    def __init__(self, clients: dict[str, MemoryKube]) -> None:
        self.clients = clients

    async def get(self, namespace: str, cluster: str, secret: Mapping[str, Any]) -> MemoryKube:
        return self.clients[cluster]

    async def forget(self, namespace: str, cluster: str) -> None:
        pass


class World:
    """A management cluster in memory, its informer caches, and the context."""

    def __init__(self, workloads: dict[str, MemoryKube]) -> None:
        self.mgmt = MemoryKube("management")

        def ignore(old: Obj | None, new: Obj | None) -> None:
            pass

        def informer(api_version: str, kind: str) -> Informer:
            return Informer(self.mgmt, WatchSpec(api_version, kind), ignore)  # type: ignore[arg-type]

        self.crss = informer(API_VERSION, CLUSTER_RESOURCE_SET_KIND)
        self.clusters = informer(CLUSTER_API, "Cluster")
        self.bindings = informer(API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND)
        self.configmaps = informer("v1", "ConfigMap")
        self.secrets = informer("v1", "Secret")
        self.index = Index(self.crss, self.clusters)
        self.ctx = Context(
            settings=Settings(),
            mgmt=self.mgmt,  # type: ignore[arg-type]
            cluster_api_version=CLUSTER_API,
            crss=self.crss,
            clusters=self.clusters,
            bindings=self.bindings,
            configmaps=self.configmaps,
            secrets=self.secrets,
            index=self.index,
            sources=Sources(self.mgmt, self.configmaps, self.secrets),  # type: ignore[arg-type]
            workloads=Workloads(workloads),  # type: ignore[arg-type]
            events=EventRecorder(self.mgmt),  # type: ignore[arg-type]
        )

    def _cache(self, informer: Informer, obj: Obj) -> None:
        informer.store[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj

    async def add(self, obj: Obj) -> Obj:
        """Create on the management cluster and show it to the caches, as a watch would."""
        created = await self.mgmt.create(obj)
        self.sync(created)
        return created

    def sync(self, obj: Obj) -> None:
        kind = obj["kind"]
        if kind == CLUSTER_RESOURCE_SET_KIND:
            old = self.crss.get(obj["metadata"]["namespace"], obj["metadata"]["name"])
            self._cache(self.crss, obj)
            self.index.update_crs(old, obj)
        elif kind == "Cluster":
            self._cache(self.clusters, obj)
        elif kind == "ConfigMap":
            self._cache(self.configmaps, obj)
        elif kind == "Secret":
            self._cache(self.secrets, obj)

    async def update(self, obj: Obj) -> Obj:
        written = await self.mgmt.replace(obj)
        self.sync(written)
        return written

    def sync_bindings(self) -> None:
        """Show the bindings written so far to the binding cache (the watch's job)."""
        self.bindings.store.clear()
        for (_, kind, namespace, name), obj in self.mgmt.objects.items():
            if kind == CLUSTER_RESOURCE_SET_BINDING_KIND:
                self.bindings.store[(namespace, name)] = obj
