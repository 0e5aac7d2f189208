"""The shard set's contributions (engine/io/contributions) on the real API server, each
member with exactly the controller's RBAC from config/rbac and under the shipped policy
on its ConfigMap writes (config/admission/controller_writes.yaml), which refuses the
same object in any other namespace: a contribution one member
publishes is watched back by another; publishing it again unchanged makes no request;
a member's clean release deletes its own contributions and no other's; the leader's
sweep deletes a gone member's once it was counted out for four lease durations (the
times are handed in)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from crs_controller.clients.kube import KubeClient
from crs_controller.clients.kubeconfig import management_endpoint
from crs_controller.core.membership.shard import members_stamp
from crs_controller.core.state.contribution import Contribution
from crs_controller.core.state.tally import Tally
from crs_controller.engine.io.contributions import (
    ContributionStore,
    contribution_body,
    object_name,
)
from crs_controller.engine.io.waiting import LoopClock
from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.controller import (
    SA_GROUPS,
    SA_USER,
    SYSTEM_NAMESPACE,
    ControllerProcess,
    install_rbac,
)

from .support import TIMEOUT

LEASE = 1.0
UID = str(uuid.uuid4())
POLICY = Path(__file__).resolve().parents[3] / "config" / "admission" / "controller_writes.yaml"


def dry_create(client: TestbedClient, obj: dict[str, Any]) -> httpx.Response:
    path = client.path("v1", "ConfigMap", namespace=obj["metadata"]["namespace"])
    return client.http.post(path, params={"dryRun": "All"}, json=obj)


@pytest.fixture
def sa(control_plane: ControlPlane, mgmt: TestbedClient) -> Iterator[TestbedClient]:
    """The controller's identity, under its RBAC and the shipped write policy (for
    this test only: installed, and removed after, each step waited for)."""
    install_rbac(mgmt)
    documents = [d for d in yaml.safe_load_all(POLICY.read_text()) if d]
    plain = {"apiVersion": "v1", "kind": "ConfigMap"}
    plain["metadata"] = {"name": "policy-probe", "namespace": SYSTEM_NAMESPACE}
    with TestbedClient(control_plane.management.kubeconfig(SA_USER, SA_GROUPS)) as client:
        for document in documents:
            mgmt.apply(document)
        try:
            wait_for(lambda: dry_create(client, plain).status_code == 403, TIMEOUT)
            yield client
        finally:
            for document in reversed(documents):
                mgmt.delete(document["apiVersion"], document["kind"], document["metadata"]["name"])
            wait_for(lambda: dry_create(client, plain).status_code == 201, TIMEOUT)


class Counted(KubeClient):
    """Counts the requests a store makes outside its watch."""

    made: list[str]

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        self.made.append("get")
        return await super().get(*args, **kwargs)

    async def create(self, obj: Mapping[str, Any]) -> Any:
        self.made.append("create")
        return await super().create(obj)

    async def replace(self, obj: Mapping[str, Any], **kwargs: Any) -> Any:
        self.made.append("replace")
        return await super().replace(obj, **kwargs)

    async def delete(self, *args: Any, **kwargs: Any) -> bool:
        self.made.append("delete")
        return await super().delete(*args, **kwargs)


class Member:
    def __init__(self, kubeconfig: Path, identity: str) -> None:
        self.identity = identity
        self.client = Counted(management_endpoint(str(kubeconfig)), name="management cluster")
        self.client.made = []
        self.woken: list[tuple[str, str]] = []
        self.store: ContributionStore[dict[str, Any]] = ContributionStore(
            self.client,
            SYSTEM_NAMESPACE,
            identity,
            parse=dict,
            dump=dict,
            on_change=lambda namespace, name: self.woken.append((namespace, name)),
            clock=LoopClock(),
            lease_seconds=LEASE,
            stale_after=4,
        )

    def names(self) -> set[str]:
        return {object_name(self.identity, UID)}


@contextlib.asynccontextmanager
async def watching(*members: Member) -> AsyncIterator[None]:
    tasks = [asyncio.ensure_future(m.store.informer.run()) for m in members]
    try:
        for member in members:
            await asyncio.wait_for(member.store.informer.synced.wait(), TIMEOUT)
        yield
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for member in members:
            await member.client.close()


async def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def sees(member: Member, published: dict[str, Any]) -> Callable[[], bool]:
    return lambda: member.store.published(UID) == published


def stored(mgmt: TestbedClient) -> set[str]:
    """The contributions to UID on the server."""
    items = mgmt.list("v1", "ConfigMap", SYSTEM_NAMESPACE)
    return {i["metadata"]["name"] for i in items if i["metadata"]["name"].endswith(UID)}


async def test_contributions_are_watched_written_once_released_and_swept(
    control_plane: ControlPlane, mgmt: TestbedClient, sa: TestbedClient, tmp_path: Path
) -> None:
    # The policy lets the controller write contributions in its namespace only.
    elsewhere = contribution_body("default", "replica-x", "fleet", "crs-1", UID, "{}")
    refused = dry_create(sa, elsewhere)
    assert refused.status_code == 403 and "shard contributions" in refused.text
    kubeconfig = control_plane.management.write_kubeconfig(
        tmp_path / "kubeconfig", user=SA_USER, groups=SA_GROUPS
    )
    suffix = uuid.uuid4().hex[:6]
    a, b, c = (Member(kubeconfig, f"replica-{n}-{suffix}") for n in "abc")
    async with watching(a, b, c):
        await a.store.publish("fleet", "crs-1", UID, {"ready": 3})
        await b.store.publish("fleet", "crs-1", UID, {"ready": 1})
        await c.store.publish("fleet", "crs-1", UID, {"ready": 2})
        every = {a.identity: {"ready": 3}, b.identity: {"ready": 1}, c.identity: {"ready": 2}}
        # Each member watches the others' back (and wakes the CRS's pass).
        for member in (a, b, c):
            await until(sees(member, every), "every contribution")
        assert ("fleet", "crs-1") in b.woken
        assert a.client.made == ["create"]
        # Unchanged: no request at all, whoever publishes it.
        for member in (a, b, c):
            await member.store.publish("fleet", "crs-1", UID, every[member.identity])
        assert [m.client.made for m in (a, b, c)] == [["create"]] * 3
        await a.store.publish("fleet", "crs-1", UID, {"ready": 4})
        assert a.client.made == ["create", "replace"]
        await until(lambda: b.store.published(UID)[a.identity] == {"ready": 4}, "the update")
        # A clean release: only its own go, and the others see them go.
        await b.store.drop_own()
        assert stored(mgmt) == a.names() | c.names()
        await until(lambda: set(a.store.published(UID)) == {a.identity, c.identity}, "b gone")
        # c dies without a word; a leads and sweeps: c's go after four lease durations.
        live, known, t0 = frozenset({a.identity}), frozenset({UID}), 1000.0
        await a.store.sweep(live, known, t0)
        await a.store.sweep(live, known, t0 + 4 * LEASE - 0.1)
        assert stored(mgmt) == a.names() | c.names()
        await a.store.sweep(live, known, t0 + 4 * LEASE)
        assert stored(mgmt) == a.names()
        await a.store.drop_own()
        assert stored(mgmt) == set()


def test_a_shard_sets_leader_sweeps_the_contributions_of_a_deleted_crs(
    control_plane: ControlPlane, mgmt: TestbedClient, sa: TestbedClient, namespace: str
) -> None:
    # A contribution to a CRS no replica knows (deleted), left by a member gone.
    uid = str(uuid.uuid4())
    text = Contribution("gone", members_stamp(frozenset({"gone"})), uid, 1, Tally()).to_json()
    gone = contribution_body(SYSTEM_NAMESPACE, "gone", "fleet", "crs-1", uid, text)
    mgmt.create(gone)
    name = gone["metadata"]["name"]
    args = ("--shard", "--lease-duration", "3s", "--namespace", namespace)
    with ControllerProcess(control_plane.management, *args, env={"POD_NAME": "sweeper"}) as run:
        wait_for(lambda: "became leader" in run.log_text(), TIMEOUT, message="leading")
        wait_for(lambda: mgmt.get("v1", "ConfigMap", name, SYSTEM_NAMESPACE) is None, TIMEOUT)
        assert "removed a stale contribution" in run.log_text()
        assert run.stop() == 0
