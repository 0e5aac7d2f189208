"""What every reconciler shares: clients, caches, indexes, settings. Not the queue:
reconcilers return what should happen next, and only the runtime touches the queue."""

from __future__ import annotations

from dataclasses import dataclass, field

from crs_controller.clients.kube import KubeClient
from crs_controller.clients.workload import WorkloadClients
from crs_controller.core.clock import Clock, MonotonicClock
from crs_controller.core.modes import DriftSchedule
from crs_controller.engine.index import Index
from crs_controller.engine.outcomes import Outcomes
from crs_controller.engine.runtime.events import EventRecorder
from crs_controller.engine.runtime.watching import Informer
from crs_controller.engine.sources import Sources


@dataclass(frozen=True)
class Settings:
    namespace: str | None = None
    concurrency: int = 8
    field_manager: str = "crs-controller"
    workload_timeout: float = 15.0
    allow_proxy_url: bool = False
    reconcile_timeout: float = 300.0


@dataclass
class Context:
    settings: Settings
    mgmt: KubeClient
    cluster_api_version: str
    crss: Informer
    clusters: Informer
    bindings: Informer
    configmaps: Informer
    secrets: Informer
    index: Index
    sources: Sources
    workloads: WorkloadClients
    events: EventRecorder
    outcomes: Outcomes = field(default_factory=Outcomes)
    drift: DriftSchedule = field(default_factory=DriftSchedule)
    clock: Clock = field(default_factory=MonotonicClock)


def cluster_key(namespace: str, name: str) -> tuple[str, str, str]:
    return ("cluster", namespace, name)


def crs_key(namespace: str, name: str) -> tuple[str, str, str]:
    return ("crs", namespace, name)
