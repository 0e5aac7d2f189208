"""``crs-controller run``: connect, elect a leader, run the controller, shut down cleanly."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import structlog
from semver import Version

from crs_controller.app import extension, health, logs
from crs_controller.app.commands.common import ERROR, INTERRUPTED
from crs_controller.app.serving import Served
from crs_controller.clients.kube import MANAGEMENT_LIMITS, USER_AGENT, KubeClient
from crs_controller.clients.kubeconfig import management_endpoint
from crs_controller.core.notifications.delivery import Receiver
from crs_controller.core.state.contribution import Contribution
from crs_controller.core.text import safe
from crs_controller.engine.io import metrics
from crs_controller.engine.io.contributions import ContributionStore
from crs_controller.engine.io.parsed_crss import ParsedCRSs
from crs_controller.engine.io.waiting import LoopClock
from crs_controller.engine.io.webhooks import WebhookPoster
from crs_controller.engine.reconcile.context import Settings
from crs_controller.engine.reconcile.hook import hook_status, upgrade_status
from crs_controller.engine.runtime.controller import Controller, cluster_api_version
from crs_controller.engine.runtime.membership import (
    STALE_AFTER,
    LeaderElector,
    Leases,
    ShardMembership,
    replica_identity,
)
from crs_controller.engine.runtime.notifying import Notifier
from crs_controller.engine.runtime.tasks import supervised

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class RunOptions:
    kubeconfig: str | None
    settings: Settings
    metrics_addr: str = "127.0.0.1:8080"
    health_addr: str = "127.0.0.1:8081"
    leader_elect: bool = False
    leader_namespace: str | None = None
    shard: bool = False
    lease_seconds: float = 15.0
    extension_addr: str = ""
    extension_cert_dir: str = ""
    extension_hooks: tuple[str, ...] | None = None  # None: every hook served
    receivers: tuple[Receiver, ...] = ()  # where notifications go (--notify-url)


def _split(addr: str) -> tuple[str, int] | None:
    if not addr or addr == "0":
        return None
    host, _, port = addr.rpartition(":")
    return host, int(port)  # no host: every address, both stacks (serving._listen)


def main(options: RunOptions) -> int:
    """Run until stopped and return the exit code. Every way out is a log line, never
    a traceback: a failure is one error record, ``run failed``, with the exception's
    type and a short message (the tasks that died logged theirs as they did)."""
    try:
        asyncio.run(run(options))
    except KeyboardInterrupt:  # before the signal handlers are installed
        log.info("interrupted")
        return INTERRUPTED
    except BaseException as exc:  # the last place to turn it into a line
        log.error("run failed", **logs.failure(exc))
        return ERROR
    return 0


def user_agent(identity: str, *, shard: bool) -> str:
    """``crs-controller/<version> (<replica>)``, and ``(shard member <replica>)`` in a
    shard set: the audit logs of the management and workload API servers tell the
    replicas apart."""
    replica = f"shard member {identity}" if shard else identity
    return safe(f"{USER_AGENT}/{_version()} ({replica})", 256)


def _version() -> str:
    try:
        return metadata.version("crs_controller")
    except metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "unknown"


async def run(options: RunOptions) -> None:
    # Drawn once: the User-Agent and the Leases must name the same replica.
    identity = replica_identity()
    agent = user_agent(identity, shard=options.shard)
    mgmt = KubeClient(
        management_endpoint(options.kubeconfig),
        name="management cluster",
        user_agent=agent,
        limits=MANAGEMENT_LIMITS,  # the operator's own server: the fleet's lists are large
    )
    version = await cluster_api_version(mgmt)
    poster = WebhookPoster(agent)
    notifier = Notifier(options.receivers, poster.post, LoopClock())
    tell = notifier.tell if options.receivers else None
    controller = Controller(mgmt, options.settings, version, user_agent=agent, notify=tell)
    servers = await _serve(options, controller)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("starting", namespace=options.settings.namespace or "(all)", identity=identity)
    try:
        async with asyncio.TaskGroup() as group:
            # Apart from the reconciles: a receiver that hangs holds only its own line.
            sending = supervised(group, notifier.run(), "notifications")
            running = _lead_and_run(options, mgmt, controller, identity)
            task = supervised(group, running, "controller")
            await _first(stop, task)
            task.cancel()
            sending.cancel()
    finally:
        for server in servers:
            await server.close()
        await poster.close()
        await controller.close()
        await mgmt.close()
        log.info("stopped")


async def _serve(options: RunOptions, controller: Controller) -> list[Served]:
    """Start the metrics and health endpoints and, when it has a certificate, the
    runtime extension: the servers to close on the way out."""
    servers = []
    for addr in {options.metrics_addr, options.health_addr}:
        if where := _split(addr):
            servers.append(await health.serve(*where, ready=lambda: _ready(controller)))
    cert_dir = Path(options.extension_cert_dir) if options.extension_cert_dir else None
    if cert_dir and not (cert_dir / "tls.crt").exists():
        log.warning("runtime extension off: no tls.crt", cert_dir=str(cert_dir))
    elif cert_dir and (where := _split(options.extension_addr)):
        # One cache of parsed CRSs for every answer, beside the CRS informer's own.
        parsed = ParsedCRSs(controller.crss.get)
        status = functools.partial(_hook_answer, controller, parsed)
        gate = functools.partial(_gate_answer, controller, parsed)
        hooks = options.extension_hooks
        servers.append(await extension.serve(*where, str(cert_dir), status, gate, hooks))
        log.info("runtime extension serving", addr=options.extension_addr)
    return servers


async def _hook_answer(
    controller: Controller, parsed: ParsedCRSs, cluster: dict[str, Any]
) -> tuple[int, str]:
    """BeforeClusterDelete: the answer read from the API; while cleanup is pending,
    make sure this replica's reconcile of the Cluster is under way."""
    retry_after, message = await hook_status(
        controller.mgmt,
        controller.cluster_api_version,
        cluster,
        controller.clock.wall(),
        parsed=parsed,
        watched=controller.settings.namespace,
    )
    if retry_after:
        controller.nudge(cluster)
    return retry_after, message


async def _gate_answer(
    controller: Controller,
    parsed: ParsedCRSs,
    cluster: dict[str, Any],
    version: Version,
    before: bool,
) -> tuple[int, str]:
    """The upgrade hooks: the answer read from the API, as for BeforeClusterDelete."""
    retry_after, message = await upgrade_status(
        controller.mgmt,
        controller.cluster_api_version,
        cluster,
        version,
        parsed=parsed,
        before=before,
        watched=controller.settings.namespace,
    )
    if retry_after:
        controller.nudge(cluster)
    return retry_after, message


def _ready(controller: Controller) -> bool:
    """Ready once the caches are synced — or while standing by for the lease, so a
    rolling update can bring the new pod up before the old one lets go."""
    return controller.ready.is_set() or controller.standing_by


async def _first(stop: asyncio.Event, main: asyncio.Task[None]) -> None:
    waiter = asyncio.ensure_future(stop.wait())
    await asyncio.wait({waiter, main}, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()


async def _lead_and_run(
    options: RunOptions, mgmt: KubeClient, controller: Controller, identity: str
) -> None:
    if options.shard:
        await _run_sharded(options, mgmt, controller, identity)
        return
    if not options.leader_elect:
        await controller.run()
        return
    elector = _elector(options, mgmt, controller, _lease_namespace(options), identity)
    controller.standing_by = True
    metrics.LEADER.set(0)
    await elector.acquire()
    controller.standing_by = False
    metrics.LEADER.set(1)
    try:
        async with asyncio.TaskGroup() as group:
            supervised(group, elector.keep(), "leader-lease")
            supervised(group, controller.run(), "controller-main")
    finally:
        await asyncio.shield(elector.release())


def _elector(
    options: RunOptions, mgmt: KubeClient, controller: Controller, namespace: str, identity: str
) -> LeaderElector:
    return LeaderElector(
        Leases(mgmt, namespace),
        clock=controller.clock,
        identity=identity,
        lease_seconds=options.lease_seconds,
    )


def _lease_namespace(options: RunOptions) -> str:
    return options.leader_namespace or os.environ.get("POD_NAMESPACE") or "default"


async def _run_sharded(
    options: RunOptions, mgmt: KubeClient, controller: Controller, identity: str
) -> None:
    """Every replica reconciles its share of the Clusters from the start; the one
    holding the leader Lease also writes CRS status and finalizers."""
    namespace = _lease_namespace(options)
    membership = ShardMembership(
        mgmt,
        namespace,
        identity,
        lease_seconds=options.lease_seconds,
        clock=controller.clock,
        on_change=controller.reshard,
    )
    contributions = _contributions(options, mgmt, controller, namespace, identity)
    controller.join(membership, contributions)
    elector = _elector(options, mgmt, controller, namespace, identity)
    try:
        async with asyncio.TaskGroup() as group:
            supervised(group, membership.run(), "shard-membership")
            supervised(group, controller.run(), "controller-main")
            await elector.acquire()
            controller.lead()
            supervised(group, elector.keep(), "leader-lease")
            supervised(group, controller.sweep_contributions(), "contribution-sweep")
    finally:
        await asyncio.shield(_leave(membership, elector, contributions))


async def _leave(
    membership: ShardMembership,
    elector: LeaderElector,
    contributions: ContributionStore[Contribution],
) -> None:
    """A clean shutdown: give up the shard Lease, the leader Lease and this member's
    contributions, so the others take over at once. Not while standing aside for
    another process under this identity: all three are that process's then."""
    aside = membership.standing_aside
    await membership.release()
    if aside:
        log.info("left to the other process under this identity", identity=membership.identity)
        return
    await elector.release()
    await contributions.drop_own()


def _contributions(
    options: RunOptions, mgmt: KubeClient, controller: Controller, namespace: str, identity: str
) -> ContributionStore[Contribution]:
    """The members' contributions to each CRS, beside their Leases."""
    return ContributionStore(
        mgmt,
        namespace,
        identity,
        parse=Contribution.from_api,
        dump=Contribution.to_api,
        on_change=controller.contribution_moved,
        clock=controller.clock,
        lease_seconds=options.lease_seconds,
        stale_after=STALE_AFTER,
    )
