"""Change windows on real servers. The controller runs in this process with a wall
clock the test sets (the session's controller process stops meanwhile), so a window
opens a few seconds after the edit instead of at a real cron minute: outside the
windows an installed cluster keeps what it has (outcome OutsideWindow) while a first
install goes, the status says when the next window opens, and the rollout resumes by
itself at the opening, with no event but the requeue the plan asked for."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path

from crs_controller.clients.kube import KubeClient
from crs_controller.clients.kubeconfig import management_endpoint
from crs_controller.engine.io.waiting import LoopClock
from crs_controller.engine.reconcile.context import Settings
from crs_controller.engine.runtime.controller import Controller, cluster_api_version
from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    TIMEOUT,
    add_cluster,
    admin_kubeconfig,
    binding_entry,
    configmap_obj,
    crs_obj,
    crs_status,
    manifests,
    source_configmap,
    unique,
    wait_condition,
    wait_rollout,
)

LEAD = 8.0  # seconds between the edit and the window's opening, on the test's clock


class SetClock(LoopClock):
    """The loop's monotonic clock, and a time of day the test moves."""

    def __init__(self) -> None:
        self.offset = timedelta()

    def wall(self) -> datetime:
        return super().wall() + self.offset

    def show(self, moment: datetime) -> None:
        """From now on the time of day reads ``moment`` (and runs on from there)."""
        self.offset = moment - datetime.now(UTC)


@contextmanager
def in_process(kubeconfig: str, namespace: str, clock: SetClock) -> Iterator[None]:
    """A controller for ``namespace`` on ``clock``, in a thread of this process."""
    loop = asyncio.new_event_loop()
    started = threading.Event()

    async def main() -> None:
        mgmt = KubeClient(management_endpoint(kubeconfig), name="management cluster")
        settings = Settings(namespace=namespace, concurrency=2)
        controller = Controller(mgmt, settings, await cluster_api_version(mgmt), clock=clock)
        try:
            running = asyncio.ensure_future(controller.run())
            await controller.ready.wait()
            started.set()
            await running
        finally:
            await controller.close()
            await mgmt.close()

    task = loop.create_task(main())
    thread = threading.Thread(target=lambda: loop.run_until_complete(_quiet(task)), daemon=True)
    thread.start()
    try:
        assert started.wait(TIMEOUT), "the in-process controller did not start"
        yield
    finally:
        loop.call_soon_threadsafe(task.cancel)
        thread.join(TIMEOUT)


async def _quiet(task: asyncio.Task[None]) -> None:
    with suppress(asyncio.CancelledError):
        await task


@contextmanager
def alone(controller: ControllerProcess) -> Iterator[None]:
    """The session's controller process stops while the test's controller runs."""
    controller.stop()
    try:
        yield
    finally:
        controller.start()


def outcome(mgmt: TestbedClient, namespace: str, cluster: str, crs: str) -> dict[str, str]:
    return (binding_entry(mgmt, namespace, cluster, crs) or {}).get("outcome") or {}


def value(client: TestbedClient, name: str) -> str | None:
    live = client.get("v1", "ConfigMap", name, "default")
    return None if live is None else live["data"]["v"]


def test_outside_the_windows_an_update_waits_and_resumes_at_the_opening(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients: list[TestbedClient],
    namespace: str,
    tmp_path: Path,
) -> None:
    clock = SetClock()
    # A window every day at 03:00 UTC for an hour; the test's clock starts inside it.
    opening = datetime.now(UTC).replace(hour=3, minute=0, second=0, microsecond=0)
    opening += timedelta(days=1)
    clock.show(opening + timedelta(minutes=5))
    marker = unique("window")
    workload, client = control_plane.workloads[0], workload_clients[0]
    data = {"a": manifests(configmap_obj(marker, v="1"))}
    mgmt.create(source_configmap(namespace, "nightly", data))
    crs = crs_obj(namespace, "nightly", [("ConfigMap", "nightly")], {"w": "1"}, mode="Reconcile")
    window = {"kind": "Allow", "schedule": "0 3 * * *", "duration": "1h", "timeZone": "UTC"}
    crs["spec"]["rollout"] = {"windows": [window]}
    mgmt.create(crs)
    add_cluster(mgmt, workload, namespace, "installed", {"w": "1"})

    with alone(controller), in_process(admin_kubeconfig(control_plane, tmp_path), namespace, clock):
        wait_condition(mgmt, namespace, "nightly", "Ready", "True", "Applied")
        assert value(client, marker) == "1"
        first = crs_status(mgmt, namespace, "nightly").get("revision")
        assert first is not None

        # The window closed; LEAD seconds before the next one opens, the source changes.
        clock.show(opening + timedelta(days=1) - timedelta(seconds=LEAD))
        source = mgmt.get("v1", "ConfigMap", "nightly", namespace)
        source["data"] = {"a": manifests(configmap_obj(marker, v="2"))}
        mgmt.update(source)
        held = wait_for(
            lambda: (
                outcome(mgmt, namespace, "installed", "nightly").get("reason") == "OutsideWindow"
            ),
            TIMEOUT,
        )
        assert held
        # The status is folded a moment after the outcome: until then it is still the
        # first revision's (Complete).
        status = wait_rollout(mgmt, namespace, "nightly", after=first, waitingFor="Window")
        assert status.get("nextWindow") == (opening + timedelta(days=1)).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )
        # A first install goes outside the windows.
        other, other_client = control_plane.workloads[1], workload_clients[1]
        add_cluster(mgmt, other, namespace, "fresh", {"w": "1"}, user="window-fresh")
        wait_for(
            lambda: outcome(mgmt, namespace, "fresh", "nightly").get("reason") == "Applied",
            TIMEOUT,
        )
        assert value(other_client, marker) == "2"
        assert value(client, marker) == "1"
        assert outcome(mgmt, namespace, "installed", "nightly").get("reason") == "OutsideWindow"

        # At the opening the installed cluster takes it by itself.
        wait_for(lambda: value(client, marker) == "2", LEAD + TIMEOUT)
        wait_for(
            lambda: outcome(mgmt, namespace, "installed", "nightly").get("reason") == "Applied",
            TIMEOUT,
        )
        applied_at = outcome(mgmt, namespace, "installed", "nightly")["time"]
        opened = opening + timedelta(days=1)
        assert applied_at >= opened.strftime("%Y-%m-%dT%H:%M:%SZ")
        wait_rollout(mgmt, namespace, "nightly", after=first, phase="Complete")
