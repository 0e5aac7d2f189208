"""Wiring: every watch declared in one place, events mapped to keys, workers.

Data flows one way: informers -> index -> queue -> reconcilers -> (apply, record).
Handlers only compute which keys are affected; reconcilers read the caches.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import replace
from typing import Any, cast

import structlog

from crs_controller.clients.api import KubeAPI, Obj
from crs_controller.clients.kube import USER_AGENT
from crs_controller.clients.workload import WorkloadClients, cluster_of_kubeconfig_secret
from crs_controller.core.api.clusters import CLUSTER_GROUP
from crs_controller.core.api.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_BINDING_KIND,
    CLUSTER_RESOURCE_SET_KIND,
)
from crs_controller.core.errors import Conflict, CRSError, NotOurs
from crs_controller.core.membership.shard import buckets_of, owner
from crs_controller.core.notifications.payloads import FOUND_BY_THE_OWNER, Notice
from crs_controller.core.rollout.history import ROLLBACK_ANNOTATION
from crs_controller.core.rollout.snapshots import snapshot_name
from crs_controller.core.spec.objects import (
    CRS,
    Binding,
    Cluster,
    SourceMeta,
    binding_meta_problem,
    cluster_summary,
    parse_binding_object,
    parse_binding_summary,
    parse_cluster_kept,
    parse_cluster_summary,
    parse_crs,
    parse_source_meta,
)
from crs_controller.core.state.bindings import MISLABELLED_SELECTOR, share_selector
from crs_controller.core.state.contribution import Contribution
from crs_controller.engine.index import Index
from crs_controller.engine.io import metrics
from crs_controller.engine.io.contributions import Contributions, ContributionStore
from crs_controller.engine.io.control_planes import ControlPlanes
from crs_controller.engine.io.events import EventRecorder
from crs_controller.engine.io.informer import Informer, WatchSpec, key_of, resource_version
from crs_controller.engine.io.snapshots import Snapshots
from crs_controller.engine.io.sources import Sources
from crs_controller.engine.io.stores import BindingStore, ClusterStore, CRSStore
from crs_controller.engine.io.waiting import LoopClock, WaitingClock
from crs_controller.engine.memory.budget import Budget
from crs_controller.engine.memory.notes import Announcements
from crs_controller.engine.memory.outcomes import Outcomes
from crs_controller.engine.memory.plans import Rollouts
from crs_controller.engine.reconcile.cluster import forget_cluster, reconcile_cluster
from crs_controller.engine.reconcile.context import (
    ClusterContext,
    CRSContext,
    Settings,
    Sharded,
    Shared,
)
from crs_controller.engine.reconcile.crs import reconcile_crs
from crs_controller.engine.reconcile.result import Result, cluster_key, crs_key, sources_key
from crs_controller.engine.reconcile.source_changes import (
    Seen,
    last_seen,
    moved,
    sources_seen,
)
from crs_controller.engine.runtime.membership import ShardMembership
from crs_controller.engine.runtime.queue import WorkQueue
from crs_controller.engine.runtime.queue_metrics import QueueMetrics
from crs_controller.engine.runtime.tasks import supervised

log = structlog.get_logger(__name__)

STATUS_SETTLE_SECONDS = 1.0
# A CRS's pass reads every matching cluster's binding (the leader folds the status,
# and with a rollout every member plans it): its cost grows with the fleet, and a
# burst of binding writes (an edit reaching every cluster), or a tenant writing its
# Clusters' labels in a loop, would pay it once a second for as long as the burst
# lasts, once for each of the namespace's CRSs. Spaced after each pass by this many
# times what the last passes of all the namespace's CRSs took, one namespace's status
# passes take at most 1/20 of the time whatever its fleet and its number of CRSs (as
# long as that is under the cap), and the status lags a burst by at most the cap.
STATUS_PASS_SPACING = 20
STATUS_SETTLE_MAX_SECONDS = 30.0
# How long start-up waits for the control plane kinds the Clusters name to be read.
CONTROL_PLANES_READ_SECONDS = 30.0


def _fair_queue(clock: WaitingClock, settings: Settings, index: Index) -> WorkQueue:
    """The work queue, fair between namespaces: the reserve is kept while more than one
    namespace has objects, busy or idle, so it is there before a second tenant's key is."""
    return WorkQueue(
        clock=clock,
        concurrency=settings.concurrency,
        tenants=index.namespace_count,
        metrics=QueueMetrics(clock),
    )


def _workload_clients(settings: Settings, user_agent: str) -> WorkloadClients:
    """The workload clusters' client cache, with the settings' one deadline per
    request, whether a kubeconfig may name a proxy and how many clusters keep their
    idle connections."""
    return WorkloadClients(
        timeout=settings.workload_timeout,
        allow_proxy=settings.allow_proxy_url,
        user_agent=user_agent,
        warm=settings.workload_idle_connections,
    )


async def cluster_api_version(client: KubeAPI) -> str:
    """cluster.x-k8s.io in whichever version (v1beta2 / v1beta1) the server prefers."""
    preferred = await client.preferred_version(CLUSTER_GROUP)
    return preferred or f"{CLUSTER_GROUP}/v1beta1"


class Controller:
    # In a shard set (from ``join``): the cached Clusters this replica owns, kept as
    # ownership is decided (``reshard``, a Cluster's arrival or going), so a scrape of
    # crs_shard_owned_clusters only counts them.
    _owned: set[tuple[str, str]]
    # In a shard set (from ``join``): the members' contributions to each CRS.
    contributions: ContributionStore[Contribution] | None = None
    # In a shard set (from ``join``): the bindings whose label names no bucket.
    mislabelled: Informer[Obj] | None = None

    def __init__(
        self,
        mgmt: KubeAPI,
        settings: Settings,
        cluster_version: str,
        *,
        user_agent: str = USER_AGENT,
        clock: WaitingClock | None = None,
        notify: Callable[[Notice], None] | None = None,
    ) -> None:
        self.mgmt = mgmt
        self._notify = notify
        self.settings = settings
        self.cluster_api_version = cluster_version
        self.clock = clock or LoopClock()
        # Handlers only run once the informers do, after everything below exists.
        crss, clusters, bindings = self._object_informers()
        # Content is fetched on demand for referenced objects only (engine/sources).
        configmaps, secrets = self._source_informers()
        self.index = Index(crss, clusters, bindings)
        self.crss, self.clusters, self.bindings = crss, clusters, bindings
        # Watched per kind once a Cluster names it; a change looks at its clusters again.
        self.control_planes = ControlPlanes(
            mgmt, settings.namespace, self._look_again, clock=self.clock
        )
        self.queue = _fair_queue(self.clock, settings, self.index)
        self.workloads = _workload_clients(settings, user_agent)
        self.cluster_ctx, self.crs_ctx = self._contexts(configmaps, secrets)
        self.informers: list[Informer[Any]] = [crss, clusters, bindings, configmaps, secrets]
        self.ready = asyncio.Event()
        self.standing_by = False  # waiting for the leader lease
        self._running = False  # run() started: the informers and workers go
        # In a shard set: which Clusters are this replica's, and whether it is the
        # one that writes CRS status and finalizers (the leader Lease holder).
        self.shard: ShardMembership | None = None
        self.leading = True
        self._served: set[tuple[str, str]] = set()  # clusters this replica has reconciled
        self._passes: dict[tuple[str, str], asyncio.Task[Result]] = {}  # clusters' in flight
        self._pass_times = PassTimes()  # each CRS's last status pass
        self._woken: dict[tuple[str, str], Seen] = {}  # sources as clusters last woken for

    def _look_again(self, namespace: str, name: str) -> None:
        self.queue.add(cluster_key(namespace, name))

    def _contexts(
        self, configmaps: Informer[SourceMeta], secrets: Informer[SourceMeta]
    ) -> tuple[ClusterContext, CRSContext]:
        """What the two reconcilers share: the caches, the sources, the events, and
        the process's memory (outcomes, rollout plans, notes)."""
        mgmt, clock = self.mgmt, self.clock
        sources = Sources(
            mgmt, configmaps, secrets, on_change=self._source_moved, named=self.index.named
        )
        # A budget place freed and a plan admitting clusters queue those clusters as
        # they happen: a pass that fails afterwards returns no Result to carry them.
        wake = self._look_again
        shared = Shared(
            caches=self.index,
            sources=sources,
            snapshots=Snapshots(mgmt, sources, configmaps, secrets),
            events=EventRecorder(mgmt, self._tell if self._notify else None),
            announcements=Announcements(clock),
            outcomes=Outcomes(),
            rollouts=Rollouts(wake=wake),
            clock=clock,
        )
        cluster_ctx = ClusterContext.over(
            shared,
            settings=self.settings,
            workloads=self.workloads,
            bindings=BindingStore(mgmt, self.bindings),
            clusters=ClusterStore(mgmt, self.clusters),
            budget=Budget(self.settings.max_updating_clusters, clock, wake=wake),
            control_planes=self.control_planes,
            owns=self.owns,
            holds_every_binding=lambda: not self._knows_share(),
        )
        crss = CRSStore(mgmt, self.crss)
        crs_ctx = CRSContext.over(
            shared, crss=crss, leading=lambda: self.leading, status_settle=self._status_settle
        )
        return cluster_ctx, crs_ctx

    def _tell(self, told: Notice) -> None:
        """The rollout's notifications leave the leader alone (the replica that writes
        status); what a cluster's pass found leaves the replica that owns the cluster.
        Either way a shard set sends each once."""
        if self._notify is None:
            return
        if self.leading or told.reason in FOUND_BY_THE_OWNER:
            self._notify(told)

    def _object_informers(self) -> tuple[Informer[CRS], Informer[Cluster], Informer[Binding]]:
        mgmt, ns = self.mgmt, self.settings.namespace
        crs_spec = WatchSpec(API_VERSION, CLUSTER_RESOURCE_SET_KIND, ns)
        cluster_spec = WatchSpec(self.cluster_api_version, "Cluster", ns)
        binding_spec = WatchSpec(API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, ns)
        return (
            Informer(mgmt, crs_spec, parse_crs, self._on_crs, clock=self.clock),
            Informer(mgmt, cluster_spec, self._parse_cluster, self._on_cluster, clock=self.clock),
            Informer(
                mgmt,
                binding_spec,
                self._parse_binding,
                self._on_binding,
                clock=self.clock,
                unselected=self._unselected_binding,
                elsewhere=self._mislabelled_copy,
            ),
        )

    def _mislabelled_informer(self) -> Informer[Obj]:
        """Every binding whose label names no bucket (none, or a value that is not a
        bucket), seen by every member of a shard set: the share's watch does not
        select them, and their owner is to label them. Rare; held whole only by their
        owner, the others keep their record (``_label_record``)."""
        spec = WatchSpec(
            API_VERSION,
            CLUSTER_RESOURCE_SET_BINDING_KIND,
            self.settings.namespace,
            label_selector=MISLABELLED_SELECTOR,
        )
        return Informer(
            self.mgmt, spec, self._parse_mislabelled, self._on_mislabelled, clock=self.clock
        )

    def _source_informers(self) -> tuple[Informer[SourceMeta], Informer[SourceMeta]]:
        mgmt, ns = self.mgmt, self.settings.namespace
        configmap_spec = WatchSpec("v1", "ConfigMap", ns, metadata_only=True)
        secret_spec = WatchSpec("v1", "Secret", ns, metadata_only=True)
        return (
            Informer(
                mgmt,
                configmap_spec,
                parse_source_meta,
                self._on_source("ConfigMap"),
                clock=self.clock,
            ),
            Informer(mgmt, secret_spec, parse_source_meta, self._on_secret, clock=self.clock),
        )

    def _parse_cluster(self, raw: Obj) -> Cluster:
        """Whole for a Cluster this replica owns (or before it knows its share), else
        what a CRS's selector, status and rollout read (``cluster_summary``)."""
        holds = self._holds_whole(raw)
        return parse_cluster_kept(raw) if holds else parse_cluster_summary(raw)

    def _parse_binding(self, raw: Obj) -> Binding:
        """Whole for a Cluster this replica owns (or before it knows its share), else
        the summary a CRS's status and rollout read: another replica's inventory is
        not held here."""
        return parse_binding_object(raw) if self._holds_whole(raw) else parse_binding_summary(raw)

    def _parse_mislabelled(self, raw: Obj) -> Obj:
        """Whole for a Cluster this replica owns (or before it knows its share), else
        its record alone: another member's binding is not held here."""
        whole = self._holds_whole(raw) and binding_meta_problem(raw) is None
        return dict(raw) if whole else _label_record(raw)

    def _holds_whole(self, raw: Obj) -> bool:
        """Is the Cluster ``raw`` names (a binding is named after its Cluster) one
        whose objects this replica keeps whole?"""
        meta = raw.get("metadata") or {}
        namespace, name = meta.get("namespace", ""), meta.get("name", "")
        return not self._knows_share() or self.owns(namespace, name)

    def _knows_share(self) -> bool:
        return self.shard is not None and self.shard.ready.is_set()

    # -- event -> keys ------------------------------------------------------------

    def _on_crs(self, old: CRS | None, new: CRS | None) -> None:
        for source in self.index.update_crs(old, new):
            self.crs_ctx.sources.unnamed(*source)
        crs = new or old
        assert crs is not None
        namespace = crs.namespace
        self.queue.add(crs_key(namespace, crs.name))
        if new is None:
            self._pass_times.forget(namespace, crs.name)
            self._woken.pop((namespace, crs.name), None)
        if _status_only(old, new):
            return
        for cluster in self.index.clusters_in(namespace):
            if (old and old.selects(cluster)) or (new and new.selects(cluster)):
                self.queue.add(cluster_key(namespace, cluster.name))
        if new is not None:
            self._woken_now(new)
        if new is not None and new.deleting:
            # Its finalizer waits for every binding to let go, including those of
            # clusters it no longer selects (entries kept by an unfinished deletion).
            for cluster_name in self.index.holders(namespace, new.name):
                self.queue.add(cluster_key(namespace, cluster_name))

    def _woken_now(self, crs: CRS) -> None:
        """Every cluster ``crs`` selects was just woken: for its sources as their last
        loads found them, so that the next look at them compares with those (a
        source never loaded: the next look wakes them as a first one does)."""
        at = (crs.namespace, crs.name)
        seen = last_seen(self.crs_ctx, crs)
        if seen is None:
            self._woken.pop(at, None)
        else:
            self._woken[at] = seen

    def _on_cluster(self, old: Cluster | None, new: Cluster | None) -> None:
        self._say_refused(old, new)
        selections = self.index.update_cluster(old, new)
        self._track_owned(old, new)
        self.control_planes.track(old, new)
        cluster = new or old
        assert cluster is not None
        namespace = cluster.namespace
        if new is None:
            self._served.discard((namespace, cluster.name))  # its reconcile forgets it
        # The Cluster's own pass comes now: one newly selected takes the CRS's
        # resources, one let go removes them, without waiting for any CRS's pass.
        self.queue.add(cluster_key(namespace, cluster.name))
        for crs in sorted(selections):
            key = crs_key(namespace, crs)
            if _deletion_moved(old, new):
                # Its deletion began (once in its life): a CRS being deleted waits on it.
                self.queue.add(key)
            else:
                # Its status, annotations or labels changed, selected or let go,
                # created or deleted: each CRS's status pass (which matches every
                # Cluster of the namespace) spaced as after a binding write, so labels
                # flapped in a loop are one pass per CRS and settle, not one per write.
                self.queue.add_after(key, self._status_settle(namespace, crs))

    def _say_refused(self, old: Cluster | None, new: Cluster | None) -> None:
        """A Cluster refused (its labels over the bound), said once by its owner: as it
        arrives refused, or as the reason changes (the field and bound, no value)."""
        if new is None or new.problem is None or (old is not None and old.problem == new.problem):
            return
        if not self._knows_share() or self.owns(new.namespace, new.name):
            log.warning(
                "Cluster refused: selected by no ClusterResourceSet, left alone",
                cluster=f"{new.namespace}/{new.name}",
                problem=new.problem,
            )

    def _unselected_binding(self, binding: Binding) -> None:
        """A binding the share's watch no longer selects (its Cluster is another
        member's now): the index forgets it without the wakes of a deletion, since
        nothing was deleted. One of ours the other watch holds (its label names no
        bucket) is kept from there (``_mislabelled_copy``)."""
        self.index.update_binding(binding, None)

    def _mislabelled_copy(self, key: tuple[str, str]) -> Obj | None:
        """What the watch of bindings whose label names no bucket holds of one of this
        member's Clusters' binding: the share's watch keeps that when it stops
        holding the binding (a relist, a DELETED as its label went), as it was not
        deleted."""
        held = self.mislabelled
        if held is None or not self._knows_share() or not self.owns(*key):
            return None
        raw = held.get(*key)
        return raw if raw is not None and _whole(raw) else None

    def _on_mislabelled(self, old: Obj | None, new: Obj | None) -> None:
        """A binding whose label names no bucket, as every member sees it: its owner
        holds it with its share's, and its next pass labels it. Leaving this watch
        (labelled since, or deleted), it leaves the owner's cache too, unless a newer
        version came meanwhile (the label written, cached as it was written)."""
        key = key_of(new or old or {})
        if key is not None:
            self.cluster_ctx.bindings.seen(*key)
        if key is None or not self._knows_share() or not self.owns(*key):
            return  # before the share is known, the share's watch selects every binding
        held = self.bindings.get(*key)
        if new is not None:
            self._on_binding(held, self.bindings.put(new))
        elif held is not None and old is not None and self._not_newer(key, old):
            self._on_binding(self.bindings.remove(*key), None)

    def _not_newer(self, key: tuple[str, str], gone: Obj) -> bool:
        return self.bindings.version(*key) <= resource_version(gone)

    def _on_binding(self, old: Binding | None, new: Binding | None) -> None:
        # Only the CRSs whose entry changed (every one, once the binding is gone): the
        # others' status and rollout read the same of it. An edit of one CRS among
        # many selecting a fleet is then one CRS's status passes, not every one's.
        changed = self.index.update_binding(old, new)
        binding = new or old
        assert binding is not None
        namespace = binding.meta.namespace or ""
        self.cluster_ctx.bindings.seen(namespace, binding.meta.name)
        if not _echo(old, new):
            # Not the version this process just wrote (and reconciled): look again.
            self.queue.add(cluster_key(namespace, binding.meta.name))
        for crs in sorted(changed):
            # The CRS's status is read from the bindings: gather a burst of them
            # (a first apply, an edit reaching every cluster) into one status write.
            self.queue.add_after(crs_key(namespace, crs), self._status_settle(namespace, crs))

    def _status_settle(self, namespace: str, crs: str) -> float:
        """The wait before a status pass of ``crs``, the same for every CRS of its
        namespace: spaced by what the last passes of all of them took, the namespace's
        passes together (not each CRS's) take at most 1/STATUS_PASS_SPACING of the
        time."""
        return status_settle(self._pass_times.namespace_seconds(namespace))

    def _on_source(self, kind: str) -> Callable[[SourceMeta | None, SourceMeta | None], None]:
        def handler(old: SourceMeta | None, new: SourceMeta | None) -> None:
            self.crs_ctx.snapshots.seen(kind, old, new)
            meta = new or old
            assert meta is not None
            if meta.snapshot_of is not None:
                self._snapshot_moved(meta)
            # The watch holds metadata only: whether the content moved is known once
            # it is fetched (one GET per version, engine/io/sources). Each CRS naming
            # it looks when its key is taken (``_look_at_sources``), one CRS at a
            # time, not all in this handler.
            self._source_moved(meta.namespace, kind, meta.name)

        return handler

    def _snapshot_moved(self, meta: SourceMeta) -> None:
        """A snapshot came, changed or went: the CRS whose rollback in force returns to
        its revision looks again. A process holding that rollback until it can read
        the snapshot (``RolledOut.held``) plans it then, and wakes its clusters."""
        for crs in self.index.crss_in(meta.namespace):
            rollout, revision = crs.status.rollout, crs.status.revision
            if crs.meta.uid != meta.snapshot_of or rollout is None or revision is None:
                continue
            if rollout.rolled_back_from and snapshot_name(crs.name, revision) == meta.name:
                self.queue.add(crs_key(meta.namespace, crs.name))

    def _source_moved(self, namespace: str, kind: str, name: str) -> None:
        """A source has a new version, or a pass found its content changed: each CRS
        naming it looks at its sources."""
        for crs in self.index.referencing(namespace, kind, name):
            self.queue.add(sources_key(namespace, crs.name))

    def _on_secret(self, old: SourceMeta | None, new: SourceMeta | None) -> None:
        meta = new or old
        assert meta is not None
        if cluster := cluster_of_kubeconfig_secret(meta.name):
            self.queue.add(cluster_key(meta.namespace, cluster))
        self._on_source("Secret")(old, new)

    # -- running ------------------------------------------------------------------

    async def run(self) -> None:
        """Run until cancelled: informers, the queue's timers, and the workers."""
        self._running = True
        async with asyncio.TaskGroup() as group:
            for informer in self.informers:
                supervised(group, informer.run(), f"watch-{informer.spec.kind}")
            supervised(group, self.queue.run_timers(), "queue-timers")
            self.control_planes.attach(lambda coro, name: supervised(group, coro, name))
            for informer in self.informers:
                await informer.synced.wait()
            # The Clusters listed named their control plane kinds: read those too.
            await self.control_planes.settled(CONTROL_PLANES_READ_SECONDS)
            log.info("caches synced", kinds=[i.spec.kind for i in self.informers])
            if self.shard is not None:
                # Act only once the members are known: alone, this replica would
                # take every Cluster for a moment.
                await self.shard.ready.wait()
            self.ready.set()
            for n in range(self.settings.concurrency):
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
        if kind == "sources":
            await self._look_at_sources(namespace, name)
        elif kind == "crs" or await self._ours(namespace, name):
            await self._pass(key)

    async def _pass(self, key: Hashable) -> None:
        """One reconcile of a CRS or of a Cluster this replica owns, and what its
        outcome asks of the queue."""
        kind, namespace, name = cast(tuple[str, str, str], key)
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.settings.reconcile_timeout):
                result = await self._reconcile(kind, namespace, name)
        except NotOurs as exc:
            # Its key came back when the share changed: that turn lets the Cluster go.
            log.info("pass stopped", kind=kind, key=f"{namespace}/{name}", reason=str(exc))
            return
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
            metrics.reconciled(kind, time.monotonic() - started, "error")
            return
        except Exception:
            # A bug or an object we did not foresee: this key backs off, every other
            # CRS and cluster carries on. The traceback names no object content.
            delay = self.queue.add_rate_limited(key)
            log.exception("reconcile crashed", kind=kind, key=f"{namespace}/{name}", retry_in=delay)
            metrics.reconciled(kind, time.monotonic() - started, "error")
            return
        finally:
            # A deleted CRS's pass (its key comes once more) leaves nothing behind.
            if kind == "crs" and self.index.crs(namespace, name) is not None:
                self._pass_times.note(namespace, name, time.monotonic() - started)
        metrics.reconciled(kind, time.monotonic() - started, _result_label(result))
        log.debug("reconciled", kind=kind, key=f"{namespace}/{name}", retry=result.retry)
        self._follow(key, result)

    async def _look_at_sources(self, namespace: str, name: str) -> None:
        """A source of this CRS has a new version: when the content of its sources
        moved since its clusters were last woken (or this process has not woken them
        yet), they look again and its status pass comes now; otherwise only the
        status pass, spaced as after a binding write, so a source whose labels or
        annotations are written in a loop costs no cluster a pass. Each replica looks
        for itself and wakes every matching cluster (a cluster's key goes no further
        on the others)."""
        crs = self.index.crs(namespace, name)
        if crs is None:
            return
        key = crs_key(namespace, name)
        # With no Cluster selected there is nothing to wake, and the status pass reads
        # no source: none is fetched. A Cluster that starts matching meanwhile is
        # queued by its event. Whether one is selected is looked up, not matched; the
        # Clusters are matched only once the content moved, as they are then woken.
        if not self.index.selects_any(namespace, name) or not await self._sources_moved(crs):
            self.queue.add_after(key, self._status_settle(namespace, name))
            return
        for cluster in self.index.matching_clusters(crs):
            self.queue.add(cluster_key(namespace, cluster.name))
        self.queue.add(key)

    async def _sources_moved(self, crs: CRS) -> bool:
        """Did the content of the CRS's sources move since its clusters were last
        woken for them? When it did, they are taken as woken for it now."""
        at = (crs.namespace, crs.name)
        seen = await self._sources_seen(crs)
        if seen is None:
            return True  # cannot tell: as on any new version
        if not moved(self._woken.get(at), seen):
            return False
        if self.index.crs(*at) is not None:  # not deleted meanwhile
            self._woken[at] = seen
        return True

    async def _sources_seen(self, crs: CRS) -> Seen | None:
        """The change numbers of the CRS's sources, loaded now; None when they could
        not be read: the clusters then look, as on any new version, and their passes
        say why."""
        where = f"{crs.namespace}/{crs.name}"
        try:
            async with asyncio.timeout(self.settings.reconcile_timeout):
                return await sources_seen(self.crs_ctx, crs)
        except (CRSError, TimeoutError) as exc:
            log.info("sources not read", crs=where, error=str(exc))
        except Exception:
            log.exception("sources not read", crs=where)
        return None

    async def _reconcile(self, kind: str, namespace: str, name: str) -> Result:
        """One pass; a Cluster's runs as a task of its own, which ``_stop_passes``
        cancels when the Cluster stops being this replica's (NotOurs here)."""
        if kind != "cluster":
            return await reconcile_crs(self.crs_ctx, namespace, name)
        task = asyncio.ensure_future(reconcile_cluster(self.cluster_ctx, namespace, name))
        self._passes[(namespace, name)] = task
        try:
            return await task
        except asyncio.CancelledError:
            this = asyncio.current_task()
            if this is not None and this.cancelling():
                raise  # the worker's own cancellation (timeout, shutdown)
            raise NotOurs(f"cluster {namespace}/{name} is no longer this replica's") from None
        finally:
            self._passes.pop((namespace, name), None)

    async def _ours(self, namespace: str, name: str) -> bool:
        """Is this Cluster this replica's to reconcile? Let go of it when it was. Not
        before the bindings of the share as it is now are listed: a Cluster just taken
        over is never reconciled as if it had no binding."""
        await self.bindings.selection_listed.wait()
        if self.mislabelled is not None:
            await self.mislabelled.selection_listed.wait()
        if not self.owns(namespace, name):
            if (namespace, name) in self._served:
                await self._let_go(namespace, name)
            log.debug("not ours", kind="cluster", key=f"{namespace}/{name}")
            return False
        if self.shard is not None:
            self._served.add((namespace, name))
        return True

    def _follow(self, key: Hashable, result: Result) -> None:
        """What a Result asks for, as queue operations: this key backs off, is
        forgotten or comes back later; every key it woke is looked at (after its
        delay)."""
        if result.retry:
            self.queue.add_rate_limited(key)
        else:
            self.queue.forget(key)
            if result.requeue_after is not None:
                self.queue.add_after(key, result.requeue_after)
        for wake in sorted(result.wake, key=lambda w: (w.after, w.key)):
            self.queue.add_after(wake.key, wake.after)  # a delay of 0 adds it now

    # -- sharding -----------------------------------------------------------------

    def join(
        self, shard: ShardMembership, contributions: ContributionStore[Contribution] | None = None
    ) -> None:
        """Act as one member of a shard set: only the Clusters ``shard`` gives this
        replica; CRS status and finalizers only once ``lead`` is called. The members'
        ``contributions`` are watched with the other kinds, and the CRS pass publishes
        and combines through them (``Sharded``)."""
        self.shard = shard
        if contributions is not None:
            self.contributions = contributions
            self.informers.append(contributions.informer)
            self.crs_ctx = replace(self.crs_ctx, combining=self._sharded(contributions))
        self.leading = False
        self.mislabelled = self._mislabelled_informer()
        self.informers.append(self.mislabelled)
        metrics.LEADER.set(0)
        metrics.SHARD_MEMBERS.set_function(lambda: len(shard.members))
        metrics.SHARD_CACHED_BINDINGS.set_function(lambda: len(self.bindings))
        self._owned = {key for key in self.index.cluster_keys() if self.owns(*key)}
        metrics.SHARD_OWNED.set_function(lambda: len(self._owned))

    def _sharded(self, contributions: Contributions[Contribution]) -> Sharded:
        """How the CRS pass combines as a member: for its share, once that share's
        bindings are listed (until then its Clusters just taken over look bare)."""
        assert self.shard is not None
        shard = self.shard
        return Sharded(
            contributions,
            lambda: shard.members,
            shard.owns,
            self._share_listed,
            lambda: shard.incarnations,
        )

    def owns(self, namespace: str, name: str) -> bool:
        return self.shard is None or self.shard.owns(namespace, name)

    def reshard(self, before: frozenset[str], after: frozenset[str]) -> None:
        """The members changed: stop the passes in flight on Clusters that are not
        ours any more, reconcile the Clusters that are now ours, let go of those that
        are not (their keys come through the queue); and pass over every CRS, which
        contributes under the new member set (what each member published under the
        old one is no longer combined). Only a member's incarnation changed (``before``
        equals ``after``: it came back under the same identity): nothing moves, and
        only the CRS passes come."""
        if self.shard is None:
            return
        if before == after:
            self._pass_over_crss()
            return
        self._stop_passes()
        me = self.shard.identity
        gained = lost = 0
        owned: set[tuple[str, str]] = set()
        for namespace, name in self.index.cluster_keys():
            key = f"{namespace}/{name}"
            was, now = owner(before, key) == me, owner(after, key) == me
            if now:
                owned.add((namespace, name))
            else:
                self.clusters.reshape(namespace, name, cluster_summary)
                self._drop_binding(namespace, name)
            if was != now:
                self.queue.add(cluster_key(namespace, name))
                gained, lost = gained + now, lost + was
        self._owned = owned
        self.cluster_ctx.bindings.forget_absent()
        self._select_share(after)
        # Joining (nothing before) is not a hand-over: the first share just starts.
        if gained and before:
            metrics.SHARD_HANDOVERS.labels(direction="in").inc(gained)
        if lost:
            metrics.SHARD_HANDOVERS.labels(direction="out").inc(lost)
        log.info("shard rebalanced", members=len(after), gained=gained, lost=lost)
        self._share_budget(len(after))
        self._pass_over_crss()

    def _pass_over_crss(self) -> None:
        """Every CRS's pass, now: it contributes under the member set as it is."""
        for namespace, name in self.index.crs_keys():
            self.queue.add(crs_key(namespace, name))

    def _drop_binding(self, namespace: str, name: str) -> None:
        """Forget a binding another replica now writes, in the cache and the index,
        without the wakes of a deletion (it was not deleted)."""
        held = self.bindings.remove(namespace, name)
        if held is not None:
            self.index.update_binding(held, None)

    def _select_share(self, members: frozenset[str]) -> None:
        """Watch only the bindings of this replica's share (its buckets, by label):
        the list under the new selector brings those newly ours, whole. Ours whose
        label names no bucket come from the other watch."""
        assert self.shard is not None and self.mislabelled is not None
        me, mislabelled = self.shard.identity, self.mislabelled
        self.bindings.reselect(share_selector(buckets_of(members, me)))
        recorded = False  # one newly ours held as its record alone: listed again
        for namespace, name in mislabelled.cached_keys():
            raw = mislabelled.get(namespace, name)
            if raw is None:
                continue
            if owner(members, f"{namespace}/{name}") != me:
                mislabelled.reshape(namespace, name, _label_record)
            elif _whole(raw):
                held = self.bindings.get(namespace, name)
                self._on_binding(held, self.bindings.put(raw))
            else:
                recorded = bool(mislabelled.remove(namespace, name)) or recorded
        if recorded:
            mislabelled.list_again()  # brings them whole, to ``_on_mislabelled``

    def _share_listed(self) -> bool:
        """Are the bindings of this replica's share, as it is now, listed (its share's
        and those of its own whose label names no bucket)?"""
        held = self.mislabelled
        listed = held is None or held.selection_listed.is_set()
        return listed and self.bindings.selection_listed.is_set()

    def _stop_passes(self) -> None:
        """Cancel the passes in flight on Clusters this replica no longer owns: a
        replica cut off from the API server, or whose Lease went, stops acting at once,
        before another member takes its Clusters over.

        A pass may stop anywhere. Each write is one request, whole or not made; what
        a stopped pass leaves is what a replica killed mid-pass leaves: objects
        deleted but still recorded (a deletion finds them gone and drops them), and
        objects applied but not yet recorded in the binding. This replica forgets
        the Cluster, and with it its note of those (``memory.unrecorded``, which a
        pass stopped at the reconcile timeout keeps for the next): the new owner
        reads the binding whole and records the ones its sources still ask for as
        it applies them again (no change), but one they no longer ask for stays on
        the workload cluster unrecorded, neither pruned nor deleted with its CRS.
        The binding is never written from a partial view:
        ``ClusterContext.still_ours`` is asked right before it is, and before
        anything is deleted."""
        for (namespace, name), task in self._passes.items():
            if not task.done() and not self.owns(namespace, name):
                log.info("stopping a pass: cluster no longer ours", key=f"{namespace}/{name}")
                task.cancel()

    def _share_budget(self, members: int) -> None:
        """Each member of a shard set enforces its share of --max-updating-clusters:
        the limit divided by the members (rounded down, at least 1), so the set as a
        whole stays within it unless there are more members than places."""
        limit = self.settings.max_updating_clusters
        if limit is None or members < 1:
            return
        self.cluster_ctx.budget.set_limit(max(1, limit // members))  # wakes who may go

    def contribution_moved(self, namespace: str, name: str) -> None:
        """A member's contribution to this CRS changed: its pass, spaced as after a
        binding write, so a burst of them (every member after an edit) is one pass."""
        self.queue.add_after(crs_key(namespace, name), self._status_settle(namespace, name))

    async def sweep_contributions(self) -> None:
        """(The leader, until cancelled.) Delete the contributions of members long
        gone and of CRSs deleted, every lease duration, once the caches are synced."""
        store, shard = self.contributions, self.shard
        if store is None or shard is None:
            return
        await self.ready.wait()
        await store.keep_swept(lambda: shard.members, self._crs_uids)

    def _crs_uids(self) -> frozenset[str]:
        crss = (self.index.crs(*key) for key in self.index.crs_keys())
        return frozenset(crs.meta.uid for crs in crss if crs is not None and crs.meta.uid)

    def lead(self) -> None:
        """This replica now holds the leader Lease: write every CRS's status."""
        self.leading = True
        metrics.LEADER.set(1)
        for namespace, name in self.index.crs_keys():
            self.queue.add(crs_key(namespace, name))

    def _track_owned(self, old: Cluster | None, new: Cluster | None) -> None:
        """A Cluster cached or gone: whether it is ours is decided as it arrives (the
        members change only through ``reshard``). An update of a cached Cluster
        changes nothing of it."""
        if self.shard is None or _named(old) == _named(new):
            return
        if old is not None:
            self._owned.discard((old.namespace, old.name))
        if new is not None and self.owns(new.namespace, new.name):
            self._owned.add((new.namespace, new.name))

    async def _let_go(self, namespace: str, name: str) -> None:
        """Forget what this replica kept for a Cluster another replica now owns."""
        self._served.discard((namespace, name))
        await forget_cluster(self.cluster_ctx, namespace, name)  # its place wakes who may go

    def nudge(self, cluster: Mapping[str, Any]) -> None:
        """Reconcile this Cluster soon (Cluster API says it is being deleted: the watch
        may not have shown that yet). Nothing before ``run``: a replica standing by
        for the lease queues no key it would not work on (its depth would say it is
        stuck), and the informers' first lists bring every Cluster once it runs."""
        meta = cluster.get("metadata") or {}
        if self._running and meta.get("namespace") and meta.get("name"):
            self.queue.add(cluster_key(str(meta["namespace"]), str(meta["name"])))

    async def close(self) -> None:
        await self.workloads.close()


def status_settle(pass_seconds: float) -> float:
    """How long a binding write waits before its CRSs' pass, gathering the writes that
    follow into one status write: a second, or STATUS_PASS_SPACING times the last
    passes of the namespace's CRSs (``pass_seconds``, their sum) when that is longer,
    at most STATUS_SETTLE_MAX_SECONDS."""
    spaced = max(STATUS_SETTLE_SECONDS, STATUS_PASS_SPACING * pass_seconds)
    return min(spaced, STATUS_SETTLE_MAX_SECONDS)


class PassTimes:
    """How long each CRS's last pass took, and their sum per namespace, summed as each
    pass ends (not at each wake: a burst of binding writes asks for it once per
    write). A deleted CRS is forgotten: names come and go without growing this."""

    def __init__(self) -> None:
        self._last: dict[str, dict[str, float]] = {}  # namespace -> CRS -> seconds
        self._sums: dict[str, float] = {}

    def note(self, namespace: str, crs: str, seconds: float) -> None:
        last = self._last.setdefault(namespace, {})
        last[crs] = seconds
        self._sums[namespace] = sum(last.values())

    def forget(self, namespace: str, crs: str) -> None:
        last = self._last.get(namespace, {})
        if last.pop(crs, None) is None:
            return
        if last:
            self._sums[namespace] = sum(last.values())
        else:
            del self._last[namespace], self._sums[namespace]

    def seconds(self, namespace: str, crs: str) -> float | None:
        """The CRS's last pass (None: none kept)."""
        return self._last.get(namespace, {}).get(crs)

    def namespace_seconds(self, namespace: str) -> float:
        """The last passes of the namespace's CRSs, together."""
        return self._sums.get(namespace, 0.0)

    def __len__(self) -> int:
        return sum(len(last) for last in self._last.values())


def _result_label(result: Result) -> str:
    """controller-runtime's ``result`` label for a reconcile that returned."""
    if result.retry:
        return "requeue"
    after = result.requeue_after
    return "requeue_after" if after is not None and after > 0 else "success"


def _echo(old: Binding | None, new: Binding | None) -> bool:
    """The watch showing a binding at the version already cached: the write-through
    of this process's own write, whose reconcile is done."""
    return (
        old is not None
        and new is not None
        and bool(new.meta.resource_version)
        and old.meta.resource_version == new.meta.resource_version
    )


def _named(cluster: Cluster | None) -> tuple[str, str] | None:
    return None if cluster is None else (cluster.namespace, cluster.name)


def _deletion_moved(old: Cluster | None, new: Cluster | None) -> bool:
    """The Cluster began to be deleted (a CRS being deleted waits on its binding)."""
    return old is not None and new is not None and old.deleting != new.deleting


def _status_only(old: CRS | None, new: CRS | None) -> bool:
    """True when only status (or other bookkeeping) changed: clusters need nothing."""
    if old is None or new is None:
        return False
    if _rollback(old) != _rollback(new):
        return False  # a rollback asked for, started or ended: another revision
    # A finalizer written lets the clusters apply a CRS that awaited it.
    before = (old.generation, old.deleting, old.paused, old.awaits_finalizer)
    return before == (new.generation, new.deleting, new.paused, new.awaits_finalizer)


def _rollback(crs: CRS) -> tuple[str | None, str | None]:
    """The rollback asked for (annotation) and the one the status records."""
    back = crs.status.rollout.rolled_back_from if crs.status.rollout else None
    return crs.meta.annotations.get(ROLLBACK_ANNOTATION), back


def _label_record(raw: Obj) -> Obj:
    """What a member keeps of another member's binding whose label names no bucket (or
    of its own, refused for its metadata): its name, namespace and version (whole, it
    may hold thousands of records; its labels, thousands of labels)."""
    meta = raw.get("metadata") or {}
    kept = {k: meta[k] for k in ("name", "namespace", "resourceVersion") if k in meta}
    return {"apiVersion": raw.get("apiVersion"), "kind": raw.get("kind"), "metadata": kept}


def _whole(raw: Obj) -> bool:
    """Is this the whole binding, not its record alone (``_label_record``)?"""
    return "spec" in raw
