"""Wiring: every watch declared in one place, events mapped to keys, workers.

Data flows one way: informers -> index -> queue -> reconcilers -> (apply, record).
Handlers only compute which keys are affected; reconcilers read the caches.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any, cast

import structlog

from crs_controller.clients.kube import KubeClient, Obj
from crs_controller.clients.workload import WorkloadClients, cluster_of_kubeconfig_secret
from crs_controller.core.bindings import crs_names, parse_binding
from crs_controller.core.clusters import CLUSTER_GROUP, PAUSED_ANNOTATION
from crs_controller.core.errors import Conflict, CRSError
from crs_controller.core.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_BINDING_KIND,
    CLUSTER_RESOURCE_SET_KIND,
)
from crs_controller.engine.context import Context, Settings, cluster_key, crs_key
from crs_controller.engine.index import Index, selects
from crs_controller.engine.outcomes import Outcomes
from crs_controller.engine.reconcile.cluster import reconcile_cluster
from crs_controller.engine.reconcile.crs import reconcile_crs
from crs_controller.engine.reconcile.result import Result
from crs_controller.engine.runtime import metrics
from crs_controller.engine.runtime.events import EventRecorder
from crs_controller.engine.runtime.queue import WorkQueue
from crs_controller.engine.runtime.tasks import supervised
from crs_controller.engine.runtime.watching import Informer, WatchSpec
from crs_controller.engine.sources import Sources

log = structlog.get_logger(__name__)


async def cluster_api_version(client: KubeClient) -> str:
    """cluster.x-k8s.io in whichever version (v1beta2 / v1beta1) the server prefers."""
    preferred = await client.preferred_version(CLUSTER_GROUP)
    return preferred or f"{CLUSTER_GROUP}/v1beta1"


class Controller:
    def __init__(self, mgmt: KubeClient, settings: Settings, cluster_version: str) -> None:
        ns = settings.namespace
        self.queue = WorkQueue()
        # Handlers only run once the informers do, after the context below exists.
        crss = Informer(mgmt, WatchSpec(API_VERSION, CLUSTER_RESOURCE_SET_KIND, ns), self._on_crs)
        clusters = Informer(mgmt, WatchSpec(cluster_version, "Cluster", ns), self._on_cluster)
        index = Index(crss, clusters)
        bindings = Informer(
            mgmt, WatchSpec(API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, ns), self._on_binding
        )

        # Content is fetched on demand for referenced objects only (engine/sources).
        configmaps = Informer(
            mgmt,
            WatchSpec("v1", "ConfigMap", ns, metadata_only=True),
            self._on_source("ConfigMap"),
        )
        secrets = Informer(mgmt, WatchSpec("v1", "Secret", ns, metadata_only=True), self._on_secret)
        self.ctx = Context(
            settings=settings,
            mgmt=mgmt,
            cluster_api_version=cluster_version,
            crss=crss,
            clusters=clusters,
            bindings=bindings,
            configmaps=configmaps,
            secrets=secrets,
            index=index,
            sources=Sources(mgmt, configmaps, secrets),
            workloads=WorkloadClients(
                timeout=settings.workload_timeout, allow_proxy=settings.allow_proxy_url
            ),
            events=EventRecorder(mgmt),
            outcomes=Outcomes(on_change=lambda ns, crs: self.queue.add(crs_key(ns, crs))),
        )
        self.informers = [crss, clusters, bindings, configmaps, secrets]
        self.ready = asyncio.Event()
        self.standing_by = False  # waiting for the leader lease

    # -- event -> keys ------------------------------------------------------------

    def _on_crs(self, old: Obj | None, new: Obj | None) -> None:
        ctx = self.ctx
        ctx.index.update_crs(old, new)
        obj = new or old
        assert obj is not None
        namespace, name = obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
        self.queue.add(crs_key(namespace, name))
        if _status_only(old, new):
            return
        for cluster in ctx.index.clusters_in(namespace):
            if (old and selects(old, cluster)) or (new and selects(new, cluster)):
                self.queue.add(cluster_key(namespace, cluster["metadata"]["name"]))
        if new is not None and new["metadata"].get("deletionTimestamp"):
            # Its finalizer waits for every binding to let go, including those of
            # clusters it no longer selects (entries kept by an unfinished deletion).
            for cluster_name in _holders(ctx.bindings.store, namespace, name):
                self.queue.add(cluster_key(namespace, cluster_name))

    def _on_cluster(self, old: Obj | None, new: Obj | None) -> None:
        obj = new or old
        assert obj is not None
        namespace, name = obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
        self.queue.add(cluster_key(namespace, name))
        for crs in self.ctx.index.crss_in(namespace):
            if (old and selects(crs, old)) or (new and selects(crs, new)):
                self.queue.add(crs_key(namespace, crs["metadata"]["name"]))

    def _on_binding(self, old: Obj | None, new: Obj | None) -> None:
        obj = new or old
        assert obj is not None
        namespace, name = obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
        self.queue.add(cluster_key(namespace, name))
        names = crs_names(parse_binding(old)) | crs_names(parse_binding(new))
        for crs in sorted(names):
            self.queue.add(crs_key(namespace, crs))

    def _on_source(self, kind: str) -> Callable[[Obj | None, Obj | None], None]:
        def handler(old: Obj | None, new: Obj | None) -> None:
            obj = new or old
            assert obj is not None
            namespace, name = obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
            for crs in self.ctx.index.referencing(namespace, kind, name):
                self.queue.add(crs_key(namespace, crs["metadata"]["name"]))
                for cluster in self.ctx.index.matching_clusters(crs):
                    self.queue.add(cluster_key(namespace, cluster["metadata"]["name"]))

        return handler

    def _on_secret(self, old: Obj | None, new: Obj | None) -> None:
        obj = new or old
        assert obj is not None
        if cluster := cluster_of_kubeconfig_secret(str(obj["metadata"]["name"])):
            self.queue.add(cluster_key(obj["metadata"].get("namespace", ""), cluster))
        self._on_source("Secret")(old, new)

    # -- running ------------------------------------------------------------------

    async def run(self) -> None:
        """Run until cancelled: informers, the queue's timers, and the workers."""
        async with asyncio.TaskGroup() as group:
            for informer in self.informers:
                supervised(group, informer.run(), f"watch-{informer.spec.kind}")
            supervised(group, self.queue.run_timers(), "queue-timers")
            for informer in self.informers:
                await informer.synced.wait()
            log.info("caches synced", kinds=[i.spec.kind for i in self.informers])
            self.ready.set()
            for n in range(self.ctx.settings.concurrency):
                supervised(group, self._worker(), f"worker-{n}")

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            try:
                await self._process(key)
            finally:
                self.queue.done(key)

    async def _process(self, key: Hashable) -> None:
        kind, namespace, name = cast(tuple[str, str, str], key)
        reconcile: Callable[[Context, str, str], Awaitable[Result]]
        reconcile = reconcile_cluster if kind == "cluster" else reconcile_crs
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.ctx.settings.reconcile_timeout):
                result = await reconcile(self.ctx, namespace, name)
        except (CRSError, TimeoutError) as exc:
            delay = self.queue.add_rate_limited(key)
            level = log.info if isinstance(exc, Conflict) else log.warning
            level(
                "reconcile failed",
                kind=kind,
                key=f"{namespace}/{name}",
                error=str(exc),
                retry_in=delay,
            )
            metrics.RECONCILES.labels(kind=kind, result="error").inc()
            return
        except Exception:
            # A bug or an object we did not foresee: this key backs off, every other
            # CRS and cluster carries on. The traceback names no object content.
            delay = self.queue.add_rate_limited(key)
            log.exception("reconcile crashed", kind=kind, key=f"{namespace}/{name}", retry_in=delay)
            metrics.RECONCILES.labels(kind=kind, result="error").inc()
            return
        finally:
            metrics.RECONCILE_SECONDS.labels(kind=kind).observe(time.monotonic() - started)
        metrics.RECONCILES.labels(kind=kind, result="retry" if result.retry else "ok").inc()
        log.debug("reconciled", kind=kind, key=f"{namespace}/{name}", retry=result.retry)
        if result.retry:
            self.queue.add_rate_limited(key)
            return
        self.queue.forget(key)
        if result.requeue_after is not None:
            self.queue.add_after(key, result.requeue_after)

    def nudge(self, cluster: Obj) -> None:
        """Reconcile this Cluster soon (Cluster API says it is being deleted: the watch
        may not have shown that yet)."""
        meta = cluster.get("metadata") or {}
        if meta.get("namespace") and meta.get("name"):
            self.queue.add(cluster_key(str(meta["namespace"]), str(meta["name"])))

    async def close(self) -> None:
        await self.ctx.workloads.close()


def _holders(bindings: Mapping[tuple[str, str], Obj], namespace: str, crs: str) -> list[str]:
    """Clusters whose binding has an entry for ``crs`` (read raw: no model per binding)."""
    found = []
    for (ns, cluster), raw in bindings.items():
        entries = (raw.get("spec") or {}).get("bindings") or []
        if ns == namespace and any(e.get("clusterResourceSetName") == crs for e in entries):
            found.append(cluster)
    return found


def _status_only(old: Obj | None, new: Obj | None) -> bool:
    """True when only status (or other bookkeeping) changed: clusters need nothing."""
    if old is None or new is None:
        return False

    def shape(obj: Obj) -> Any:
        meta = obj["metadata"]
        annotations = meta.get("annotations") or {}
        return (
            meta.get("generation"),
            meta.get("deletionTimestamp"),
            PAUSED_ANNOTATION in annotations,
        )

    return bool(shape(old) == shape(new))
