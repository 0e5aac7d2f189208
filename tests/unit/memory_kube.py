"""An in-memory ``clients.api.KubeAPI`` and the engine context built on it: the unit
seam for reconcile decisions. Integration tests stay on real servers;
this only keeps objects in dicts, stamps what server-side apply would (generation,
managedFields), enforces resourceVersions on PUT, and records every request."""

from __future__ import annotations

import builtins
import copy
import re
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from crs_controller.clients.answers import encode, json_nodes
from crs_controller.clients.api import KubeAPI, Obj, ResourceInfo, WorkloadAPIs
from crs_controller.core.api.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_BINDING_KIND,
    CLUSTER_RESOURCE_SET_KIND,
)
from crs_controller.core.errors import AnswerTooLarge, Conflict, NotFound, Unreachable
from crs_controller.core.spec.objects import (
    Binding,
    parse_binding_object,
    parse_cluster,
    parse_crs,
    parse_source_meta,
)
from crs_controller.engine.index import Index
from crs_controller.engine.io.events import EventRecorder
from crs_controller.engine.io.informer import Informer, WatchSpec
from crs_controller.engine.io.snapshots import Snapshots
from crs_controller.engine.io.sources import Sources
from crs_controller.engine.io.stores import BindingStore, ClusterStore, CRSStore
from crs_controller.engine.memory.notes import Announcements
from crs_controller.engine.memory.outcomes import Outcomes
from crs_controller.engine.memory.plans import Rollouts
from crs_controller.engine.reconcile.context import ClusterContext, CRSContext, Settings, Shared

from .fake_clock import FakeClock

Key = tuple[str, str, str, str]  # apiVersion, kind, namespace ("" if cluster-scoped), name
CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition", "ClusterRole"}
CLUSTER_API = "cluster.x-k8s.io/v1beta1"
T = TypeVar("T")


class MemoryKube:
    """Objects by (apiVersion, kind, namespace, name); ``requests`` lists (verb, kind/name)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.objects: dict[Key, Obj] = {}
        self.requests: list[tuple[str, str]] = []
        self.down = False  # every request raises Unreachable
        self.fail_with: Exception | None = None  # raised by the next apply
        self.cluster_scoped = set(CLUSTER_SCOPED)  # kinds served cluster-scoped
        self.keeps_status = False  # an apply keeps the stored status, as a server does
        # The JSON values a KubeClient decodes: list() refuses past them in total (it
        # holds every page), pages() only a page over them, one object alone (each
        # object is its own page here, as a page too large is asked again smaller).
        self.values: int | None = None
        self._version = 0

    def _key(self, api_version: str, kind: str, namespace: str | None, name: str) -> Key:
        return (api_version, kind, "" if kind in self.cluster_scoped else namespace or "", name)

    def _check(self, verb: str, what: str) -> None:
        self.requests.append((verb, what))
        if self.down:
            raise Unreachable(f"{self.name}: {verb} {what}: ConnectError")

    def _stamp(self, obj: Obj) -> Obj:
        self._version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._version)
        obj["metadata"].setdefault("uid", str(uuid.uuid4()))
        return obj

    def writes(self) -> builtins.list[tuple[str, str]]:
        return [
            r for r in self.requests if r[0] in ("apply", "create", "replace", "patch", "delete")
        ]

    # -- clients.api.KubeAPI --------------------------------------------------------

    async def close(self) -> None:
        pass

    async def resource_info(self, api_version: str, kind: str) -> ResourceInfo:
        return ResourceInfo(api_version, kind, kind.lower() + "s", kind not in self.cluster_scoped)

    def forget_discovery(self, api_version: str) -> None:
        pass

    async def preferred_version(self, group: str) -> str | None:
        return CLUSTER_API if group == CLUSTER_API.partition("/")[0] else None

    async def served_versions(self, group: str) -> builtins.list[str]:
        if not group:
            return ["v1"]
        return [CLUSTER_API] if group == CLUSTER_API.partition("/")[0] else []

    async def path(
        self, api_version: str, kind: str, namespace: str | None = None, name: str | None = None
    ) -> str:
        info = await self.resource_info(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        scope = f"/namespaces/{namespace}" if info.namespaced and namespace else ""
        return f"{base}{scope}/{info.plural}" + (f"/{name}" if name else "")

    async def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        self._check("get", f"{kind}/{name}")
        found = self.objects.get(self._key(api_version, kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    async def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        metadata_only: bool = False,
    ) -> tuple[builtins.list[Obj], str]:
        """Label selectors of ``key`` and ``key=value`` terms; field selectors ignored."""
        self._check("list", f"{kind}/{namespace or '*'}")
        found = self._listed(api_version, kind, namespace, label_selector, metadata_only)
        if self.values is not None and sum(map(_values, found)) > self.values:
            where = f"{self.name}: LIST {kind}"
            message = f"{where}: more than {self.values} JSON values in total"
            raise AnswerTooLarge(message, limit="values in total")
        return found, str(self._version)

    def _listed(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        label_selector: str | None,
        metadata_only: bool,
    ) -> builtins.list[Obj]:
        return [
            copy.deepcopy({"metadata": o["metadata"]} if metadata_only else o)
            for (v, k, ns, _), o in self.objects.items()
            if (v, k) == (api_version, kind)
            and namespace in (None, ns)
            and _selected(o, label_selector)
        ]

    async def pages(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        metadata_only: bool = False,
    ) -> AsyncIterator[tuple[builtins.list[Obj], str]]:
        """``list`` as one page; with ``values``, one page per object, and an object
        alone over ``values`` refused."""
        if self.values is None:
            yield await self.list(
                api_version,
                kind,
                namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                metadata_only=metadata_only,
            )
            return
        self._check("list", f"{kind}/{namespace or '*'}")
        found = self._listed(api_version, kind, namespace, label_selector, metadata_only)
        for index, obj in enumerate(found):
            if _values(obj) > self.values:
                message = f"{self.name}: LIST {kind}: more than {self.values} JSON values"
                raise AnswerTooLarge(f"{message} in one answer", limit="values")
            yield [obj], str(self._version) if index == len(found) - 1 else ""
        if not found:
            yield [], str(self._version)

    async def watch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        resource_version: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        metadata_only: bool = False,
    ) -> AsyncIterator[tuple[str, Obj]]:
        """Ends at once, as a server may end any watch: the tests show objects to the
        caches themselves (``World.sync``)."""
        self._check("watch", f"{kind}/{namespace or '*'}")
        events: tuple[tuple[str, Obj], ...] = ()
        for event in events:
            yield event

    async def apply(
        self,
        obj: Mapping[str, Any],
        *,
        field_manager: str,
        force: bool = True,
        dry_run: bool = False,
    ) -> Obj:
        """Stores ``obj`` whole, stamped; ``dry_run`` answers the same and stores nothing."""
        self._check("apply", f"{obj['kind']}/{obj['metadata']['name']}")
        if self.fail_with is not None:
            raise self.fail_with
        meta = obj["metadata"]
        key = self._key(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        live = copy.deepcopy(dict(obj))
        old = self.objects.get(key)
        if self.keeps_status and old is not None and "status" in old:
            live["status"] = copy.deepcopy(old["status"])
        generation = int((old or {}).get("metadata", {}).get("generation") or 0)
        changed = old is None or {k: v for k, v in old.items() if k != "metadata"} != {
            k: v for k, v in live.items() if k != "metadata"
        }
        live["metadata"]["generation"] = generation + 1 if changed else generation
        if old is not None and "uid" in old.get("metadata", {}):
            live["metadata"]["uid"] = old["metadata"]["uid"]  # the same object, updated
        live["metadata"]["managedFields"] = [
            {"manager": field_manager, "operation": "Apply", "fieldsV1": {"f:all": {}}}
        ]
        if dry_run:
            return live
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
        if subresource == "status":  # the server keeps all but the status as stored
            stored = {**copy.deepcopy(current), "status": copy.deepcopy(obj.get("status"))}
        else:
            stored = copy.deepcopy(dict(obj))
        self.objects[key] = self._stamp(stored)
        return copy.deepcopy(self.objects[key])

    async def merge_patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None,
        patch: Mapping[str, Any],
    ) -> Obj:
        """Metadata merge only (what the engine patches): resourceVersion is checked."""
        self._check("patch", f"{kind}/{name}")
        current = self.objects.get(self._key(api_version, kind, namespace, name))
        if current is None:
            raise NotFound(f"{self.name}: not found", status=404)
        meta = dict(patch.get("metadata") or {})
        expected = meta.pop("resourceVersion", None)
        if expected is not None and expected != current["metadata"]["resourceVersion"]:
            raise Conflict(f"{self.name}: modified", status=409)
        _merge(current["metadata"], meta)
        return copy.deepcopy(self._stamp(current))

    async def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> bool:
        self._check("delete", f"{kind}/{name}")
        key = self._key(api_version, kind, namespace, name)
        live = self.objects.get(key)
        if live is not None and uid and live.get("metadata", {}).get("uid") not in (None, uid):
            raise Conflict(f"delete {kind}/{name}: 409 Conflict (uid precondition)", status=409)
        version = (live or {}).get("metadata", {}).get("resourceVersion")
        if live is not None and resource_version and version != resource_version:
            raise Conflict(f"delete {kind}/{name}: 409 Conflict (modified)", status=409)
        return self.objects.pop(key, None) is not None


class Workloads:
    """``clients.api.WorkloadAPIs`` with one in-memory client per cluster name."""

    def __init__(self, clients: dict[str, MemoryKube]) -> None:
        self.clients = clients

    async def get(self, namespace: str, cluster: str, secret: Mapping[str, Any]) -> MemoryKube:
        return self.clients[cluster]

    async def forget(self, namespace: str, cluster: str) -> None:
        pass


class Woken(list[tuple[str, str]]):
    """A waker for the budget and the plans, as the runtime's queue is: the clusters
    handed to it, in order."""

    def __call__(self, namespace: str, name: str) -> None:
        self.append((namespace, name))


class World:
    """A management cluster in memory, its informer caches, and the contexts."""

    def __init__(self, workloads: dict[str, MemoryKube]) -> None:
        self.mgmt = MemoryKube("management")
        mgmt = self.mgmt

        def informer(api_version: str, kind: str, parse: Callable[[Obj], T]) -> Informer[T]:
            return Informer(mgmt, WatchSpec(api_version, kind), parse, lambda old, new: None)

        self.crss = informer(API_VERSION, CLUSTER_RESOURCE_SET_KIND, parse_crs)
        self.clusters = informer(CLUSTER_API, "Cluster", parse_cluster)
        self.bindings = informer(
            API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, parse_binding_object
        )
        self.configmaps = informer("v1", "ConfigMap", parse_source_meta)
        self.secrets = informer("v1", "Secret", parse_source_meta)
        self.index = Index(self.crss, self.clusters, self.bindings)
        self._bindings_seen: dict[tuple[str, str], Binding] = {}
        clock = FakeClock()
        sources = Sources(mgmt, self.configmaps, self.secrets)
        self.shared = Shared(
            caches=self.index,
            sources=sources,
            snapshots=Snapshots(mgmt, sources, self.configmaps, self.secrets),
            events=EventRecorder(mgmt),
            announcements=Announcements(clock),
            outcomes=Outcomes(),
            rollouts=Rollouts(),
            clock=clock,
        )
        self.ctx = ClusterContext.over(
            self.shared,
            settings=Settings(),
            workloads=Workloads(workloads),
            bindings=BindingStore(mgmt, self.bindings),
            clusters=ClusterStore(mgmt, self.clusters),
        )

    def crs_context(self, *, leading: bool = True) -> CRSContext:
        """A CRS reconcile sharing the caches with the cluster reconcile and nothing of
        its memory: as another replica, or this one after a restart, would be."""
        own_memory = replace(self.shared, outcomes=Outcomes(), rollouts=Rollouts())
        return CRSContext.over(
            own_memory, crss=CRSStore(self.mgmt, self.crss), leading=lambda: leading
        )

    async def add(self, obj: Obj) -> Obj:
        """Create on the management cluster and show it to the caches, as a watch would."""
        created = await self.mgmt.create(obj)
        self.sync(created)
        return created

    def sync(self, obj: Obj) -> None:
        kind, meta = obj["kind"], obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        if kind == CLUSTER_RESOURCE_SET_KIND:
            old = self.crss.get(*key)
            self.index.update_crs(old, self.crss.put(obj))
        elif kind == "Cluster":
            old_cluster = self.clusters.get(*key)
            self.index.update_cluster(old_cluster, self.clusters.put(obj))
        elif kind in ("ConfigMap", "Secret"):
            informer = self.configmaps if kind == "ConfigMap" else self.secrets
            old_meta = informer.get(*key)
            self.shared.snapshots.seen(kind, old_meta, informer.put(obj))

    def forget(self, kind: str, namespace: str, name: str) -> None:
        """Show a ConfigMap or Secret gone to the caches, as a watch would."""
        informer = self.configmaps if kind == "ConfigMap" else self.secrets
        self.shared.snapshots.seen(kind, informer.remove(namespace, name), None)

    async def update(self, obj: Obj) -> Obj:
        written = await self.mgmt.replace(obj)
        self.sync(written)
        return written

    def sync_bindings(self) -> None:
        """Show the bindings as they are now to the binding cache (the watch's job)."""
        seen: dict[tuple[str, str], Binding] = {}
        for (_, kind, namespace, name), obj in self.mgmt.objects.items():
            if kind == CLUSTER_RESOURCE_SET_BINDING_KIND:
                old = self.bindings.get(namespace, name)
                seen[(namespace, name)] = self.bindings.put(obj)
                self.index.update_binding(old, seen[(namespace, name)])
        for (namespace, name), last in self._bindings_seen.items():
            if (namespace, name) not in seen:  # the store may have dropped it already
                self.index.update_binding(self.bindings.remove(namespace, name) or last, None)
        self._bindings_seen = seen


def _merge(into: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """A JSON merge patch (RFC 7386): maps merge, null removes, the rest replaces."""
    for key, value in patch.items():
        if value is None:
            into.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def _values(obj: Obj) -> int:
    """The JSON values a KubeClient counts in an object's answer."""
    return json_nodes(encode(obj))


def _selected(obj: Obj, selector: str | None) -> bool:
    """``key``, ``key=value``, ``key in (a,b)`` and ``key notin (a,b)`` terms, all of
    which must hold (a ``notin`` holds for an object without the label too)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in re.findall(r"[^,(]+(?:\([^)]*\))?", selector or ""):
        if sets := re.fullmatch(r"\s*(\S+)\s+(in|notin)\s+\(([^)]*)\)\s*", term):
            key, operator, values = sets.groups()
            inside = labels.get(key) in {v.strip() for v in values.split(",")}
            if inside != (operator == "in"):
                return False
            continue
        key, equals, value = term.strip().partition("=")
        if key and (key not in labels or (equals and labels[key] != value.lstrip("="))):
            return False
    return True


# mypy checks that the fakes are what the engine depends on.
_api: KubeAPI = MemoryKube("conformance")
_workloads: WorkloadAPIs = Workloads({})
