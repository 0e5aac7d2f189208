"""``crs-controller run``: connect, elect a leader, run the controller, shut down cleanly."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass

import structlog

from crs_controller.app import health
from crs_controller.app.leader import LeaderElector
from crs_controller.clients.kube import KubeClient
from crs_controller.engine.context import Settings
from crs_controller.engine.controller import Controller, cluster_api_version
from crs_controller.engine.tasks import supervised

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class RunOptions:
    kubeconfig: str | None
    settings: Settings
    metrics_addr: str = ":8080"
    health_addr: str = ":8081"
    leader_elect: bool = False
    leader_namespace: str | None = None


def _split(addr: str) -> tuple[str, int] | None:
    if not addr or addr == "0":
        return None
    host, _, port = addr.rpartition(":")
    return host or "0.0.0.0", int(port)


async def run(options: RunOptions) -> None:
    mgmt = await KubeClient.connect(options.kubeconfig, name="management cluster")
    controller = Controller(mgmt, options.settings, await cluster_api_version(mgmt))
    servers = []
    for addr in {options.metrics_addr, options.health_addr}:
        if where := _split(addr):
            servers.append(await health.serve(*where, ready=controller.ready.is_set))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("starting", namespace=options.settings.namespace or "(all)")
    try:
        async with asyncio.TaskGroup() as group:
            main = supervised(group, _lead_and_run(options, mgmt, controller), "controller")
            await _first(stop, main)
            main.cancel()
    finally:
        for server in servers:
            server.close()
        await controller.close()
        await mgmt.close()
        log.info("stopped")


async def _first(stop: asyncio.Event, main: asyncio.Task[None]) -> None:
    waiter = asyncio.ensure_future(stop.wait())
    await asyncio.wait({waiter, main}, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()


async def _lead_and_run(options: RunOptions, mgmt: KubeClient, controller: Controller) -> None:
    if not options.leader_elect:
        await controller.run()
        return
    namespace = options.leader_namespace or os.environ.get("POD_NAMESPACE") or "crs-system"
    elector = LeaderElector(mgmt, namespace)
    await elector.acquire()
    try:
        async with asyncio.TaskGroup() as group:
            supervised(group, elector.keep(), "leader-lease")
            supervised(group, controller.run(), "controller-main")
    finally:
        await asyncio.shield(elector.release())
