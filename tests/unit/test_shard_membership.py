"""Shard membership decisions (engine/runtime/membership), driven by a fake clock and
Lease events handed in directly: who this replica acts with, that it stops acting
at once when its own Lease is lost or not renewed in time, that a silent member's
Clusters come back after the lease duration, that a Lease watch gone silent counts
nobody out and is started again, that a replica starts a new incarnation (in its
Lease) each time it starts acting, never before (a refused renewal is tried again
in time; a retry cut off is followed at once by a new incarnation, not a lapse),
that a member counted out is never counted in again in its old incarnation, and
that of two processes under one identity one stands aside. No server, no
sleeping."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from crs_controller.app import runner
from crs_controller.clients.api import Obj
from crs_controller.clients.kube import KubeClient
from crs_controller.core.errors import APIError, Unreachable
from crs_controller.core.membership.lease import INCARNATION_ANNOTATION, LEASE_API, LeaseRecord
from crs_controller.core.membership.shard import incarnation_of, members_stamp, owner
from crs_controller.core.state.contribution import Contribution
from crs_controller.engine.io.contributions import ContributionStore
from crs_controller.engine.runtime import membership as membership_module
from crs_controller.engine.runtime.membership import (
    LAPSE,
    RENEW_DEADLINE,
    SERVER_REQUEST_TIMEOUT,
    STALE_AFTER,
    TOKENS_KEPT,
    LeaderElector,
    Leases,
    ShardMembership,
    member_identity,
)

from .fake_clock import FakeClock
from .memory_kube import MemoryKube

LEASE = 6.0
KEYS = [("fleet", f"c{i:02d}") for i in range(60)]


def membership(
    clock: FakeClock,
    client: object = None,
    lease_seconds: float = LEASE,
    identity: str = "replica-a",
) -> tuple[ShardMembership, list[tuple[set[str], set[str]]]]:
    """Without a ``client``: for the decisions that never call the server."""
    changes: list[tuple[set[str], set[str]]] = []
    shard = ShardMembership(
        cast(KubeClient, client),
        "crs-system",
        identity,
        lease_seconds=lease_seconds,
        clock=clock,
        on_change=lambda before, after: changes.append((set(before), set(after))),
    )
    return shard, changes


def lease(identity: str, renewed: str) -> LeaseRecord:
    return LeaseRecord(f"crs-controller-shard-{identity}", identity, LEASE, renewed, None, 0)


def own(shard: ShardMembership, marker: str) -> LeaseRecord:
    """This replica's Lease as it writes it: in its current incarnation."""
    return replace(lease(shard.identity, marker), incarnation=shard._incarnation)


def renew(shard: ShardMembership, marker: str) -> None:
    """This replica renews its Lease, and the watch shows the renewal back."""
    shard.renewed(marker)
    shard.on_lease(None, own(shard, marker))


def mine(shard: ShardMembership) -> set[str]:
    return {name for ns, name in KEYS if shard.owns(ns, name)}


def test_alone_after_renewing_it_owns_every_cluster() -> None:
    shard, changes = membership(FakeClock())
    shard.refresh()
    assert mine(shard) == set()  # never renewed: not a member yet
    shard.renewed()
    shard.refresh()
    assert mine(shard) == {name for _, name in KEYS}
    assert changes == [(set(), {"replica-a"})]


async def test_replicas_started_together_see_each_other_before_either_acts() -> None:
    clock = FakeClock()
    shard, changes = membership(clock)
    listed = asyncio.Event()
    listed.set()  # the members' Leases are listed: only its own so far
    shard.renewed()  # its own Lease is written
    joining = asyncio.ensure_future(shard.join(listed))
    await clock.until_asleep()
    assert (shard.ready.is_set(), changes) == (False, [])
    # The other replica, started at the same moment, writes its Lease a moment later.
    clock.advance(0.5)
    shard.on_lease(None, lease("replica-b", "t1"))
    clock.advance(LEASE / 3 - 0.5)  # one renewal period after its own Lease
    await joining
    assert shard.ready.is_set()
    assert changes == [(set(), {"replica-a", "replica-b"})]  # never the fleet alone
    members = ["replica-a", "replica-b"]
    assert mine(shard) == {n for ns, n in KEYS if owner(members, f"{ns}/{n}") == "replica-a"}


def test_another_member_takes_its_share_and_gives_it_back_when_silent() -> None:
    clock = FakeClock()
    shard, changes = membership(clock)
    shard.renewed()
    shard.on_lease(None, lease("replica-b", "t1"))
    shard.refresh()
    members = ["replica-a", "replica-b"]
    expected = {name for ns, name in KEYS if owner(members, f"{ns}/{name}") == "replica-a"}
    assert mine(shard) == expected and 10 < len(expected) < 50
    # replica-b renews once, then falls silent; we keep renewing, and see it.
    clock.advance(2)
    renew(shard, "a2")
    shard.on_lease(lease("replica-b", "t1"), lease("replica-b", "t2"))
    clock.advance(LEASE - 0.1)
    renew(shard, "a3")
    shard.refresh()
    assert mine(shard) == expected
    clock.advance(0.1)
    renew(shard, "a4")  # the watch brought everything written until now
    shard.refresh()
    assert mine(shard) == {name for _, name in KEYS}
    assert changes[-1] == ({"replica-a", "replica-b"}, {"replica-a"})


def test_a_resync_of_the_same_renewal_does_not_keep_a_member_alive() -> None:
    clock = FakeClock()
    shard, _ = membership(clock)
    shard.on_lease(None, lease("replica-b", "t1"))
    clock.advance(LEASE / 2)
    renew(shard, "a1")
    shard.on_lease(lease("replica-b", "t1"), lease("replica-b", "t1"))  # a relist
    clock.advance(LEASE / 2)
    renew(shard, "a2")
    shard.refresh()
    assert shard.members == {"replica-a"}


def test_a_replica_that_cannot_renew_stops_acting_before_the_others_take_over() -> None:
    clock = FakeClock()
    shard, changes = membership(clock)
    shard.renewed()
    shard.on_lease(None, lease("replica-b", "t1"))
    shard.refresh()
    assert mine(shard)
    # Two thirds of the lease without a renewal: ours are nobody's for the moment
    # (the others wait the full duration), never two replicas' at once.
    clock.advance(LEASE * 2 / 3)
    shard.on_lease(lease("replica-b", "t1"), lease("replica-b", "t2"))
    shard.refresh()
    assert mine(shard) == set()
    assert changes[-1] == ({"replica-a", "replica-b"}, set())
    shard.renewed()
    shard.refresh()
    assert shard.members == {"replica-a", "replica-b"}


def test_past_its_renew_deadline_it_owns_nothing_before_any_loop_looks_again() -> None:
    """Its acting window ends while nothing calls ``refresh`` (the loop that would is
    held up): from that moment it owns no Cluster and acts with nobody, so it never
    acts on a Cluster the others, counting it out a third of the lease later, take."""
    clock = FakeClock()
    shard, changes = membership(clock)
    renew(shard, "a1")
    shard.on_lease(None, lease("replica-b", "b1"))
    shard.refresh()
    assert mine(shard) and shard.members == {"replica-a", "replica-b"}
    clock.advance(LEASE * RENEW_DEADLINE - 0.01)
    assert mine(shard)
    clock.advance(0.01)
    assert (mine(shard), shard.members, shard.incarnations) == (set(), set(), {})
    assert changes == [(set(), {"replica-a", "replica-b"})]  # on_change not told yet
    renew(shard, "a2")  # renewed again: it acts with the members as last looked at
    assert shard.members == {"replica-a", "replica-b"}


def test_its_own_lease_deleted_stops_it_at_once() -> None:
    shard, changes = membership(FakeClock())
    shard.renewed()
    shard.refresh()
    shard.on_lease(lease("replica-a", "t1"), None)
    shard.refresh()
    assert mine(shard) == set()
    assert changes[-1] == ({"replica-a"}, set())


def test_its_own_lease_in_the_watch_is_not_another_member() -> None:
    shard, _ = membership(FakeClock())
    shard.renewed()
    shard.on_lease(None, own(shard, "t1"))
    shard.refresh()
    assert shard.members == {"replica-a"}


def test_a_departed_member_goes_at_once() -> None:
    shard, _ = membership(FakeClock())
    shard.renewed()
    shard.on_lease(None, lease("replica-b", "t1"))
    shard.refresh()
    shard.on_lease(lease("replica-b", "t1"), None)  # deleted on its clean shutdown
    shard.refresh()
    assert shard.members == {"replica-a"}


def test_it_forgets_the_lease_names_of_members_gone() -> None:
    """Members come and go under new pod names: what it remembers of each (the name of
    its Lease) goes with its Lease, so a long-lived member holds no more for it."""
    shard, _ = membership(FakeClock())
    renew(shard, "a1")
    for n in range(200):
        record = lease(f"pod-{n}", "t1")
        shard.on_lease(None, record)
        shard.on_lease(record, None)  # deleted on its clean shutdown
    shard.on_lease(None, lease("replica-b", "b1"))
    assert shard._lease_names == {"replica-b": "crs-controller-shard-replica-b"}


async def test_a_departed_members_lease_is_deleted_by_its_name_and_forgotten() -> None:
    """replica-d died; its Lease, named by hand, is silent for the lease duration and
    STALE_AFTER more: this member deletes it by the name it was seen under, and
    remembers nothing of it afterwards."""
    clock, client = FakeClock(), MemoryKube("management")
    shard, _ = membership(clock, client)
    left = member_body("replica-d", "d1")
    left["metadata"]["name"] = "lease-of-d"
    await client.apply(left, field_manager="other")
    shard.on_lease(None, replace(lease("replica-d", "d1"), name="lease-of-d"))
    for n in range(int(LEASE * (1 + STALE_AFTER) / (LEASE / 3))):
        clock.advance(LEASE / 3)
        renew(shard, f"a{n}")
    await shard._clear_stale()
    assert ("delete", "Lease/lease-of-d") in client.requests
    assert await client.get(LEASE_API, "Lease", "lease-of-d", "crs-system") is None
    assert shard._lease_names == {}


def test_a_lease_is_read_from_its_api_form() -> None:
    raw: dict[str, Any] = {
        "metadata": {"name": "crs-controller-shard-pod-1", "resourceVersion": "7"},
        "spec": {
            "holderIdentity": "pod-1",
            "renewTime": "2026-11-23T10:00:00.000000Z",
            "leaseDurationSeconds": 15,
        },
    }
    record = LeaseRecord.parse(raw)
    assert (member_identity(record), record.renew_marker, record.duration) == (
        "pod-1",
        "2026-11-23T10:00:00.000000Z",
        15.0,
    )
    assert record.renewed == datetime(2026, 11, 23, 10, tzinfo=UTC)
    bare = LeaseRecord.parse(
        {"metadata": {"name": "crs-controller-shard-x", "resourceVersion": "9"}}
    )
    assert (member_identity(bare), bare.renew_marker, bare.duration) == (
        "crs-controller-shard-x",
        "9",
        0.0,
    )
    assert bare.renewed is None


def test_a_lease_carries_its_members_incarnation_only_as_32_hex_digits() -> None:
    token = "0123456789abcdef0123456789abcdef"
    for written, read in [(token, token), (token.upper(), ""), (token * 2, ""), ("", "")]:
        raw = {"metadata": {"name": "l", "annotations": {INCARNATION_ANNOTATION: written}}}
        assert LeaseRecord.parse(raw).incarnation == read
    assert LeaseRecord.parse({"metadata": {"name": "l"}}).incarnation == ""


def test_a_member_back_in_a_new_incarnation_changes_the_set_but_not_the_shares() -> None:
    """replica-b renews with a new token before replica-a counted it out (it lapsed
    and came back, or restarted): the same identities and buckets, but another set,
    told as a change whose before and after are alike."""
    shard, changes = membership(FakeClock())
    shard.renewed()
    shard.on_lease(None, replace(lease("replica-b", "t1"), incarnation="1" * 32))
    shard.refresh()
    first, owned = dict(shard.incarnations), mine(shard)
    assert set(first) == {"replica-a", "replica-b"} and first["replica-b"] == "1" * 32
    shard.on_lease(None, replace(lease("replica-b", "t2"), incarnation="2" * 32))
    shard.refresh()
    assert shard.incarnations == {**first, "replica-b": "2" * 32}
    assert changes[-1] == ({"replica-a", "replica-b"}, {"replica-a", "replica-b"})
    assert mine(shard) == owned
    count = len(changes)
    shard.on_lease(None, replace(lease("replica-b", "t3"), incarnation="2" * 32))
    shard.refresh()  # a renewal in the same incarnation changes nothing
    assert len(changes) == count


@dataclass
class Renewing:
    """A replica's renewals, on a fake clock and a server in memory."""

    clock: FakeClock
    client: MemoryKube
    shard: ShardMembership

    async def token(self) -> str:
        """The incarnation its Lease carries, once the renewal due has been made."""
        await self.clock.until_idle()
        raw = await self.client.get(LEASE_API, "Lease", self.shard.lease, "crs-system")
        assert raw is not None
        return incarnation_of(raw["metadata"]["annotations"][INCARNATION_ANNOTATION])


@contextlib.asynccontextmanager
async def renewing() -> AsyncIterator[Renewing]:
    clock, client = FakeClock(), MemoryKube("management")
    shard, _ = membership(clock, client)
    running = asyncio.ensure_future(shard._renew_loop())
    try:
        yield Renewing(clock, client, shard)
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running


async def test_a_replica_starts_a_new_incarnation_each_time_it_starts_acting() -> None:
    """Its renewals carry its token while it acts; once it stopped acting (its Lease
    not renewed within the deadline, or deleted under it), the renewal that brings
    it back carries a new one."""
    async with renewing() as it:
        first = await it.token()
        it.clock.advance(LEASE / 3)
        assert await it.token() == first != ""  # acting: the same incarnation
        it.client.fail_with = APIError("unavailable", status=503)
        for _ in range(3):  # no renewal for a lease duration: it stopped acting
            it.clock.advance(LEASE / 3)
            await it.clock.until_idle()
        it.client.fail_with = None
        it.clock.advance(LEASE / 3)
        second = await it.token()
        assert second not in ("", first)
        it.shard.on_lease(lease("replica-a", "a9"), None)  # deleted under it
        it.clock.advance(LEASE / 3)
        assert await it.token() not in ("", first, second)


async def test_a_renewal_answered_after_the_deadline_lets_the_lease_lapse() -> None:
    """The others may have counted it out before that renewal landed: it does not
    act on it, renews no more for LAPSE lease durations (so the others count it out
    and take its Clusters), then again in a new incarnation."""
    async with renewing() as it:
        first = await it.token()
        real = it.shard._leases.apply

        async def landing_late(body: Obj) -> None:
            it.shard._leases.apply = real  # type: ignore[method-assign]  # this one alone
            await real(body)
            it.clock.advance(LEASE)  # its answer comes after the renew deadline

        it.shard._leases.apply = landing_late  # type: ignore[method-assign]
        it.clock.advance(LEASE / 3)
        await it.clock.until_idle()
        assert it.clock.deadlines() == [it.clock.now() + LEASE * LAPSE]
        assert await it.token() == first and not it.shard._acting(it.clock.now())
        it.clock.advance(LEASE * LAPSE)
        assert await it.token() not in ("", first)
        assert it.shard._acting(it.clock.now())


async def test_one_refused_renewal_is_tried_again_in_time_in_the_same_incarnation() -> None:
    """A single 429 (or 5xx, or timeout) on its Lease is retried well before the renew
    deadline: it never stops acting, and its incarnation (so every member's set, and
    every contribution's stamp) stays as it was."""
    async with renewing() as it:
        first = await it.token()
        it.shard.refresh()
        view = it.shard.members
        it.clock.advance(LEASE / 3)
        assert await it.token() == first
        it.client.fail_with = APIError("throttled", status=429)
        it.clock.advance(LEASE / 3)
        await it.clock.until_idle()  # that one renewal refused
        it.client.fail_with = None
        for _ in range(4):  # two thirds of the lease duration, and more
            it.clock.advance(LEASE / 6)
            assert await it.token() == first
            it.shard.refresh()
            assert it.shard.members == view == {"replica-a"}


async def test_a_renewal_never_answered_is_cut_off_at_the_renew_deadline() -> None:
    """A request the server never answers fails at the renew deadline, not at the
    client's request timeout (which may be far longer). It may yet be committed: the
    Lease is left to lapse, as for one answered too late."""
    async with renewing() as it:
        first = await it.token()
        deadline = it.clock.now() + LEASE * RENEW_DEADLINE
        real = it.shard._leases.apply

        async def no_answer(body: Obj) -> None:
            it.shard._leases.apply = real  # type: ignore[method-assign]  # this one alone
            await it.clock.sleep_until(None, asyncio.Event())

        it.shard._leases.apply = no_answer  # type: ignore[method-assign]
        it.clock.advance(LEASE / 3)
        await it.clock.until_idle()
        it.clock.advance(deadline - it.clock.now())
        for _ in range(8):  # the cut-off's turns of the loop
            await asyncio.sleep(0)
        assert it.clock.deadlines() == [deadline + LEASE * LAPSE]
        it.clock.advance(LEASE * LAPSE)
        assert await it.token() not in ("", first)  # its window had lapsed meanwhile
        assert it.shard._acting(it.clock.now())


async def test_a_renewal_is_acted_on_from_when_it_was_sent() -> None:
    """The others see a renewal no earlier than it was sent: its acting window is
    timed from then, never from its answer, which may come much later."""
    clock, client = FakeClock(), MemoryKube("management")
    shard, _ = membership(clock, client)
    real = shard._leases.apply
    sent = clock.now()

    async def slow_answer(body: Obj) -> None:
        await real(body)  # committed now: the others see it now
        clock.advance(LEASE / 2)  # but its answer takes half the lease duration

    shard._leases.apply = slow_answer  # type: ignore[method-assign]
    wait = await shard._renew()
    assert shard._own_deadline() == sent + LEASE * RENEW_DEADLINE
    assert shard._acting(clock.now())
    assert wait == 0.0  # the next is due a third of the lease after this one's sending


async def test_a_first_renewal_answered_after_its_deadline_is_not_acted_on() -> None:
    """Starting (or back after a lapse), a renewal whose answer comes after its sending
    plus the renew deadline is not acted on either: the others may have counted it
    out by then. It lets the Lease lapse, then renews in a new incarnation."""
    clock, client = FakeClock(), MemoryKube("management")
    shard, _ = membership(clock, client)
    real = shard._leases.apply
    landed: list[float] = []

    async def late_answer(body: Obj) -> None:
        shard._leases.apply = real  # type: ignore[method-assign]  # this one alone
        await real(body)
        landed.append(clock.now())
        clock.advance(LEASE * 0.9)

    shard._leases.apply = late_answer  # type: ignore[method-assign]
    assert await shard._renew() == LEASE * LAPSE
    assert not shard._acting(clock.now()) and shard._own_deadline() is None
    first = shard._incarnation
    assert await shard._renew() == LEASE / 3
    assert shard._incarnation != first and shard._acting(clock.now())
    deadline = shard._own_deadline()
    assert deadline is not None and deadline < clock.now() + LEASE


class SlowServer(MemoryKube):
    """Answers every request ``latency`` seconds on the clock after it was sent, and
    notes the incarnation of each Lease applied."""

    def __init__(self, clock: FakeClock, latency: float) -> None:
        super().__init__("management")
        self.clock, self.latency = clock, latency
        self.tokens: list[str] = []

    async def apply(self, obj: Any, **kw: Any) -> Obj:
        await self.clock.sleep_until(self.clock.now() + self.latency, asyncio.Event())
        applied = await super().apply(obj, **kw)
        self.tokens.append(LeaseRecord.parse(applied).incarnation)
        return applied


async def acting_while_renewing(clock: FakeClock, client: MemoryKube, steps: int) -> list[bool]:
    """A lone member with a 15 s lease renewing through ``client``: whether it acts,
    every half second for ``steps`` of them."""
    shard, _ = membership(clock, client, lease_seconds=15.0)
    running = asyncio.ensure_future(shard._renew_loop())
    samples: list[bool] = []
    try:
        for _ in range(steps):
            await clock.until_idle()
            clock.advance(0.5)
            await clock.until_idle()
            samples.append(shard._acting(clock.now()))
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    return samples


@pytest.mark.parametrize("latency", [3.0, 4.0])
async def test_a_slow_server_answering_within_a_renewal_period_costs_no_lapse(
    latency: float,
) -> None:
    """With the default 15 s lease, renewals answered 3 or 4 s after they were sent
    (under a third of the lease): each is sent a third of the lease after the last
    was sent, so it is answered before the window that one opened ends. A lone
    member keeps one incarnation and acts but for its first answer's wait."""
    clock = FakeClock()
    client = SlowServer(clock, latency)
    samples = await acting_while_renewing(clock, client, 240)  # two minutes
    assert len(set(client.tokens)) == 1
    assert len(client.tokens) >= 20  # one renewal every 5 s
    assert sum(samples) >= 0.95 * len(samples)


class RefusingOnce(SlowServer):
    """A ``SlowServer`` that refuses its fifth apply (a 429, as slow as an answer)."""

    applies = 0

    async def apply(self, obj: Any, **kw: Any) -> Obj:
        self.applies += 1
        if self.applies == 5:
            await self.clock.sleep_until(self.clock.now() + self.latency, asyncio.Event())
            raise APIError("throttled", status=429)
        return await super().apply(obj, **kw)


@pytest.mark.parametrize("latency", [1.6, 2.0, 3.0])
async def test_one_refused_renewal_on_a_slow_server_costs_no_lapse(latency: float) -> None:
    """With the default 15 s lease, renewals answered 1.6, 2 or 3 s after they were
    sent, one of them refused: the retry goes out in time to be answered within the
    acting window, or, cut off at its end, is followed at once by a renewal in a new
    incarnation; never a lapse (no renewal for LAPSE lease durations)."""
    clock = FakeClock()
    client = RefusingOnce(clock, latency)
    samples = await acting_while_renewing(clock, client, 240)  # two minutes
    starts = 1 if latency < 15.0 / 6 else 2  # a retry answered in the window, or not
    assert client.applies >= 24  # one renewal every 5 s: no lapse
    assert len(set(client.tokens)) == starts
    assert len(samples) - sum(samples) <= starts * (latency + 0.5) / 0.5  # each start's wait


class RefusedThenHung(SlowServer):
    """Refuses its fifth apply at once and never answers its sixth."""

    applies = 0

    async def apply(self, obj: Any, **kw: Any) -> Obj:
        self.applies += 1
        if self.applies == 5:
            raise APIError("throttled", status=429)
        if self.applies == 6:
            await self.clock.sleep_until(None, asyncio.Event())
        return await super().apply(obj, **kw)


async def test_a_retry_cut_off_at_the_window_end_renews_again_at_once() -> None:
    """A refused renewal's retry the server never answers is cut off at the end of
    the acting window: one refusal, not a server answering too late, so the member
    renews again at once in a new incarnation instead of letting its Lease lapse."""
    clock = FakeClock()
    client = RefusedThenHung(clock, 0.0)
    samples = await acting_while_renewing(clock, client, 120)  # a minute
    assert len(set(client.tokens)) == 2 and client.applies >= 12  # every 5 s, no lapse
    assert samples.count(False) <= 1


class LateAnswer(MemoryKube):
    """Commits every Lease applied at once and shows it to ``observer``, as its watch
    would, but answers ``latency`` seconds later."""

    def __init__(self, clock: FakeClock, latency: float, observer: ShardMembership) -> None:
        super().__init__("management")
        self.clock, self.latency, self.observer = clock, latency, observer

    async def apply(self, obj: Any, **kw: Any) -> Obj:
        applied = await super().apply(obj, **kw)
        self.observer.on_lease(None, LeaseRecord.parse(applied))
        await self.clock.sleep_until(self.clock.now() + self.latency, asyncio.Event())
        return applied


@pytest.mark.parametrize("latency", [10.0, 12.0])
async def test_a_member_answered_too_late_to_act_is_counted_out_by_the_others(
    latency: float,
) -> None:
    """With the default 15 s lease, renewals committed at once but answered 10 or 12 s
    later (two thirds of the lease or more): it never acts on one. The others see its
    Lease renewed, but it lets the Lease lapse after each, so they count it out: its
    Clusters are nobody's for at most a lease duration and the others' renewal period
    (their lag in counting out) at a time, not for as long as this lasts."""
    clock = FakeClock()
    observer = ShardMembership(
        cast(KubeClient, None),
        "crs-system",
        "observer",
        lease_seconds=15.0,
        clock=clock,
        on_change=lambda before, after: None,
    )
    shard, _ = membership(clock, LateAnswer(clock, latency, observer), lease_seconds=15.0)
    running = asyncio.ensure_future(shard._renew_loop())
    unowned, longest, out = 0.0, 0.0, 0
    try:
        for n in range(240):  # two minutes
            if n % 10 == 0:
                renew(observer, f"o{n}")  # the observer renews every 5 s, shown at once
            await clock.until_idle()
            clock.advance(0.5)
            await clock.until_idle()
            observer.refresh()
            counted_in = "replica-a" in observer.members
            out += not counted_in
            unowned = unowned + 0.5 if counted_in and not shard._acting(clock.now()) else 0.0
            longest = max(longest, unowned)
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    assert out > 0 and not shard.ready.is_set()
    assert longest <= 15.0 + 15.0 / 3 + 0.5


async def test_a_renewal_shown_before_its_answer_is_not_taken_for_unseen() -> None:
    """The watch showed the renewal before its answer came: no renewal of ours is
    unseen then, so a lease duration later the watch is not taken for stale."""
    clock, client = FakeClock(), SharedLease()  # shown while the request is in flight
    shard, _ = membership(clock, client)
    client.shards = [shard]
    await shard._renew()
    assert shard._acting(clock.now())
    clock.advance(LEASE)
    assert not shard._watch_stale(clock.now()) and shard._stale_at() is None


def test_a_late_renewal_does_not_bring_a_member_back_in_its_old_incarnation() -> None:
    """replica-b falls silent and is counted out; then a renewal of its old
    incarnation lands (in flight past its deadline): it stays out, so the set is
    never the one it left, and its old contribution is never taken as current."""
    clock = FakeClock()
    shard, _ = membership(clock)
    old, new = "a" * 32, "b" * 32
    shard.renewed()
    shard.on_lease(None, replace(lease("replica-b", "b1"), incarnation=old))
    shard.refresh()
    before = members_stamp(shard.members, shard.incarnations)
    for n in range(4):
        clock.advance(LEASE / 3)
        renew(shard, f"a{n}")
    shard.refresh()
    assert shard.members == {"replica-a"}  # counted out
    shard.on_lease(None, replace(lease("replica-b", "b2"), incarnation=old))
    shard.refresh()
    assert shard.members == {"replica-a"}
    shard.on_lease(None, replace(lease("replica-b", "b3"), incarnation=new))
    shard.refresh()
    assert shard.members == {"replica-a", "replica-b"}
    assert shard.incarnations["replica-b"] == new
    assert members_stamp(shard.members, shard.incarnations) != before


def test_a_renewal_landing_within_the_servers_timeout_leaves_a_member_out() -> None:
    """With the default 15 s lease, replica-b's renewal b2 is cut off (it counts out in
    that incarnation), it comes back in a new one and is counted out in that too;
    then b2 is committed, 58 s after it was sent (within the server's 60 s request
    timeout): replica-b stays out, in both."""
    clock = FakeClock()
    shard, _ = membership(clock, lease_seconds=15.0)
    old, new = "a" * 32, "b" * 32
    start = clock.now()
    shown = {0.0: ("b1", old), 30.0: ("b3", new), 63.0: ("b2", old)}
    for at in [0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0, 40.0, 45.0, 50.0, 55.0, 60.0, 63.0]:
        clock.advance(start + at - clock.now())
        renew(shard, f"a{at}")
        if at in shown:
            marker, token = shown[at]
            renewal = replace(lease("replica-b", marker), duration=15.0, incarnation=token)
            shard.on_lease(None, renewal)
        shard.refresh()
        assert ("replica-b" in shard.members) is (at < 15.0 or 30.0 <= at < 45.0)


class SharedLease(MemoryKube):
    """One server for two processes under one identity; every Lease applied is shown
    to both at once, as their watches would."""

    def __init__(self) -> None:
        super().__init__("management")
        self.shards: list[ShardMembership] = []
        self.tokens: list[str] = []

    async def apply(self, obj: Any, **kw: Any) -> Obj:
        applied = await super().apply(obj, **kw)
        record = LeaseRecord.parse(applied)
        self.tokens.append(record.incarnation)
        for shard in self.shards:
            shard.on_lease(None, record)
        return applied


async def test_of_two_processes_under_one_identity_one_stands_aside() -> None:
    """A second process under this replica's identity (a hard-coded pod name, a pod
    force-deleted while it still runs) renews the same Lease: one of them stops acting
    and renewing, so its incarnation stops flipping the others' member set; once the
    other is gone a lease duration, it starts again in a new incarnation."""
    clock, client = FakeClock(), SharedLease()
    one, _ = membership(clock, client)
    two, _ = membership(clock, client)
    client.shards = [one, two]
    loops = {s: asyncio.ensure_future(s._renew_loop()) for s in (one, two)}
    try:
        for _ in range(18):  # three lease durations
            clock.advance(LEASE / 6)
            await clock.until_idle(2)
        assert len(set(client.tokens[-6:])) == 1  # one process renews, the last two
        acting = [s for s in (one, two) if s._acting(clock.now())]
        assert len(acting) == 1
        (standing,) = {one, two} - set(acting)
        standing.refresh()
        assert standing.members == set()
        await standing.release()  # the Lease is the other's: left alone
        assert await client.get(LEASE_API, "Lease", standing.lease, "crs-system") is not None
        seen = set(client.tokens)
        loops.pop(acting[0]).cancel()  # the other process is gone
        for _ in range(12):
            clock.advance(LEASE / 6)
            await clock.until_idle(1)
        assert standing._acting(clock.now())
        assert client.tokens[-1] == standing._incarnation not in seen
    finally:
        for task in loops.values():
            task.cancel()


class Contributions:
    """A member's contributions, as far as its shutdown goes: whether it dropped them."""

    def __init__(self) -> None:
        self.dropped = False

    async def drop_own(self) -> None:
        self.dropped = True


async def test_of_two_processes_under_one_identity_the_one_aside_leaves_all_to_the_other() -> None:
    """The process standing aside shuts down cleanly: the shard Lease, the leader
    Lease and the identity's contributions are the other's, which acts on: it
    releases none of them (the other would lose leadership, and its contributions
    be gone, at once). The one acting releases them all on its own shutdown."""
    clock, client = FakeClock(), SharedLease()
    one, _ = membership(clock, client)
    two, _ = membership(clock, client)
    client.shards = [one, two]
    loops = [asyncio.ensure_future(s._renew_loop()) for s in (one, two)]
    try:
        for _ in range(18):  # three lease durations: one stands aside
            clock.advance(LEASE / 6)
            await clock.until_idle(2)
    finally:
        for task in loops:
            task.cancel()
    (standing,) = [s for s in (one, two) if s.standing_aside]
    (acting,) = {one, two} - {standing}
    leases = Leases(cast(KubeClient, client), "crs-system")
    leader = LeaderElector(leases, clock=clock, identity="replica-a", lease_seconds=LEASE)
    await leader.acquire()  # held by the identity: by either process, as each sees it
    for shard, kept in [(standing, True), (acting, False)]:
        contributions = Contributions()
        await runner._leave(shard, leader, cast(ContributionStore[Contribution], contributions))
        raw = await client.get(LEASE_API, "Lease", "crs-controller", "crs-system")
        assert raw is not None and LeaseRecord.parse(raw).holder == ("replica-a" if kept else "")
        assert contributions.dropped is not kept
        shard_lease = await client.get(LEASE_API, "Lease", shard.lease, "crs-system")
        assert (shard_lease is not None) is kept


@pytest.fixture
def falling_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each incarnation this replica draws is smaller than the one before, and all
    smaller than ``RIVAL``'s: which process stands aside is known in advance."""
    drawn = itertools.count()
    monkeypatch.setattr(
        membership_module, "new_incarnation", lambda: f"{2**127 - next(drawn):032x}"
    )


RIVAL = "f" * 32


def rival(marker: str, token: str = RIVAL) -> LeaseRecord:
    """Another process's renewal of this replica's Lease."""
    return replace(lease("replica-a", marker), incarnation=token)


@pytest.mark.usefixtures("falling_tokens")
async def test_a_rival_seen_while_its_first_renewal_is_in_flight_keeps_it_aside() -> None:
    """Back after a lapse, its renewal is answered in time, but meanwhile the watch
    showed another process renewing the Lease with a greater token: it stands aside
    and does not act on that renewal."""
    clock, client = FakeClock(), MemoryKube("management")
    shard, _ = membership(clock, client)
    await shard._renew()
    shard.on_lease(None, own(shard, "a1"))
    clock.advance(LEASE)  # its window lapsed
    real = shard._leases.apply

    async def rival_meanwhile(body: Obj) -> None:
        await real(body)
        shard.on_lease(None, rival("b1"))  # shown before our answer comes

    shard._leases.apply = rival_meanwhile  # type: ignore[method-assign]
    assert await shard._renew() == 0.0
    assert shard._aside_until > clock.now() and not shard._acting(clock.now())
    shard.refresh()
    assert shard.members == set()


@pytest.mark.usefixtures("falling_tokens")
def test_standing_aside_lasts_while_the_other_renews_whatever_its_token() -> None:
    """The other process starts a new incarnation, its token now smaller than ours:
    it still renews, so this replica stays aside (comparing again would hand the
    identity back and forth)."""
    clock = FakeClock()
    shard, _ = membership(clock)
    renew(shard, "a1")
    shard.on_lease(None, rival("b1"))
    assert shard._aside_until > clock.now()
    for n in range(9):  # three lease durations
        clock.advance(LEASE / 3)
        shard.on_lease(None, rival(f"b{n + 2}", "0" * 32))
        assert shard._aside_until > clock.now()
        assert not shard._acting(clock.now())


@pytest.mark.usefixtures("falling_tokens")
@pytest.mark.parametrize("outage", [24.0, 100.0])
async def test_its_own_renewal_committed_late_is_not_taken_for_another_process(
    outage: float,
) -> None:
    """Its window lapsed; a renewal's request goes unanswered (yet is committed),
    then every one is refused for ``outage`` seconds, each in a new incarnation (also
    for longer than the server's request timeout and a lease duration: 66 s). When
    the watch, back, lists the Lease with the one committed, its token is still known
    as its own (none drawn later was shown): no standing aside."""
    clock, client = FakeClock(), MemoryKube("management")
    shard, _ = membership(clock, client)
    await shard._renew()
    shard.on_lease(None, own(shard, "a1"))
    clock.advance(LEASE)  # its window lapsed
    real, held = shard._leases.apply, []

    async def unanswered(body: Obj) -> None:
        shard._leases.apply = real  # type: ignore[method-assign]  # this one alone
        held.append(LeaseRecord.parse(body))
        raise Unreachable("no answer")  # but the server commits it later

    shard._leases.apply = unanswered  # type: ignore[method-assign]
    await shard._renew()
    client.fail_with = APIError("unavailable", status=503)
    for _ in range(int(outage / 2.0)):  # each refused in a new incarnation
        clock.advance(2.0)
        await shard._renew()
    client.fail_with = None
    shard.on_lease(None, held[0])  # shown at last
    assert shard._aside_until < clock.now()
    await shard._renew()
    assert shard._acting(clock.now())


@pytest.mark.usefixtures("falling_tokens")
async def test_its_own_renewal_committed_after_a_later_ones_is_not_taken_for_another() -> None:
    """With the default 15 s lease, a renewal cut off at its deadline is committed by
    a slow server 55 s after it was sent (within the server's 60 s request timeout),
    after the renewals of the incarnation it started next were shown. The token is
    still known as its own: it neither stands aside nor stops acting."""
    clock, client = FakeClock(), MemoryKube("management")
    shard, _ = membership(clock, client, lease_seconds=15.0)
    await shard._renew()
    first = shard._incarnation
    shard.on_lease(None, own(shard, "m1"))
    clock.advance(5.0)
    real, held = shard._leases.apply, []

    async def committed_later(body: Obj) -> None:
        shard._leases.apply = real  # type: ignore[method-assign]  # this one alone
        held.append(LeaseRecord.parse(body))
        await clock.sleep_until(None, asyncio.Event())

    shard._leases.apply = committed_later  # type: ignore[method-assign]
    sent = clock.now()
    renewing = asyncio.ensure_future(shard._renew())  # m2, in the first incarnation
    await clock.until_asleep(2)  # the request, and its cut-off
    clock.advance(5.0)  # the window m1 opened ends: m2 cut off
    clock.advance(await renewing)  # the lapse
    for n in range(3, 9):  # m3 to m8 renewed and shown, in a new incarnation
        await shard._renew()
        shard.on_lease(None, own(shard, f"m{n}"))
        clock.advance(5.0)
    assert shard._incarnation != first == held[0].incarnation
    clock.advance(sent + 55.0 - clock.now())
    shard.on_lease(None, held[0])  # m2 committed at last
    assert not shard.standing_aside and shard._acting(clock.now())
    shard.refresh()
    assert mine(shard) == {name for _, name in KEYS}


async def test_its_own_tokens_are_kept_while_a_renewal_in_them_may_be_shown() -> None:
    """The tokens its renewals carried are kept however long none is shown, the
    latest TOKENS_KEPT at most. Once the watch shows a later one, each is kept until
    the server can no longer commit a renewal sent in it: its request timeout and a
    lease duration after that renewal's sending."""
    clock, client = FakeClock(), MemoryKube("management")
    shard, _ = membership(clock, client)
    client.fail_with = APIError("unavailable", status=503)
    drawn: dict[str, float] = {}
    for _ in range(TOKENS_KEPT + 10):  # each refused in a new incarnation
        sent = clock.now()
        await shard._renew()
        drawn[shard._incarnation] = sent
        clock.advance(2.0)
    assert list(shard._tokens) == list(drawn)[-TOKENS_KEPT:]
    shard.on_lease(None, own(shard, "a1"))
    landing = SERVER_REQUEST_TIMEOUT + LEASE
    recent = [token for token, sent in drawn.items() if clock.now() - sent <= landing]
    assert list(shard._tokens) == recent and 1 < len(recent) < TOKENS_KEPT
    clock.advance(landing)
    shard.on_lease(None, own(shard, "a2"))
    assert list(shard._tokens) == [shard._incarnation] and not shard.standing_aside


async def test_a_renewal_shown_before_its_answer_tells_how_far_the_watch_has_come() -> None:
    """The watch may show a renewal of ours before its request is answered: it still
    tells that everything written before it was sent has been shown, so a member
    silent for the lease duration is counted out."""
    clock, client = FakeClock(), SharedLease()  # shown while the request is in flight
    shard, _ = membership(clock, client)
    client.shards = [shard]
    shard.on_lease(None, lease("replica-b", "b1"))
    running = asyncio.ensure_future(shard._renew_loop())
    try:
        for _ in range(6):  # two lease durations
            await clock.until_idle()
            clock.advance(LEASE / 3)
        await clock.until_idle()
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    shard.refresh()
    assert shard.members == {"replica-a"}


def test_a_watch_that_shows_none_of_its_own_renewals_counts_nobody_out() -> None:
    clock = FakeClock()
    shard, changes = membership(clock)
    renew(shard, "a1")
    shard.on_lease(None, lease("replica-b", "t1"))
    shard.refresh()
    # The watch falls silent: neither replica-b's renewals nor ours come through.
    for n in range(2, 8):
        clock.advance(LEASE / 3)
        shard.renewed(f"a{n}")
        shard.refresh()
        assert shard.members == {"replica-a", "replica-b"}
    # Listed again: our renewal shows, replica-b's Lease unchanged since: it is out.
    shard.on_lease(own(shard, "a1"), own(shard, "a7"))
    shard.refresh()
    assert shard.members == {"replica-a"}
    assert changes == [
        (set(), {"replica-a", "replica-b"}),
        ({"replica-a", "replica-b"}, {"replica-a"}),
    ]


class SilentWatch(MemoryKube):
    """Lists the shard Leases, every other member's renewed since the last list, as
    live members' are; its watch never shows anything after the list."""

    def __init__(self, others: list[str]) -> None:
        super().__init__("management")
        self.others = others
        self.lists = 0

    async def list(
        self, api_version: str, kind: str, *args: Any, **kw: Any
    ) -> tuple[list[Obj], str]:
        self.lists += 1
        for other in self.others:
            await self.apply(member_body(other, f"t{self.lists}"), field_manager="other")
        return await super().list(api_version, kind, *args, **kw)

    async def watch(self, *args: Any, **kw: Any) -> Any:
        await asyncio.Event().wait()  # a connection dropped without a word
        yield ("ADDED", {})


def member_body(identity: str, renewed: str) -> Obj:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": f"crs-controller-shard-{identity}",
            "namespace": "crs-system",
            "labels": {"addons.crs.dev/shard-member": ""},
        },
        "spec": {"holderIdentity": identity, "renewTime": renewed, "leaseDurationSeconds": 6},
    }


async def test_a_silent_watch_is_listed_again_and_the_others_stay_in() -> None:
    clock, client = FakeClock(), SilentWatch(["replica-b"])
    shard, _ = membership(clock, client)
    running = asyncio.ensure_future(shard.run())
    await clock.until_idle(2)  # renewing, and waiting one period to join
    clock.advance(LEASE / 3)  # it joins one renewal period after its Lease is written
    await shard.ready.wait()
    await clock.until_idle(2)  # its renewal due then answered, not left in flight
    assert shard.members == {"replica-a", "replica-b"} and client.lists == 1
    for _ in range(int(LEASE * 2 / (LEASE / 3))):
        clock.advance(LEASE / 3)
        await clock.until_idle(2)  # renewing, and looking at the members again
        assert shard.members == {"replica-a", "replica-b"}
    assert client.lists >= 2  # listed and watched again
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running


class Partitioned(SharedLease):
    """Shows each Lease applied to the members at once, as their watches would (its
    own watch shows nothing more after its list). Deleting a Lease never gets an
    answer (``deleting`` notes each attempt); once ``cut_off`` is set, neither does an
    apply: this replica is cut off from the API server."""

    def __init__(self) -> None:
        super().__init__()
        self.deleting: list[str] = []
        self.cut_off = False

    async def apply(self, obj: Any, **kw: Any) -> Obj:
        if self.cut_off:
            await asyncio.Event().wait()
        return await super().apply(obj, **kw)

    async def delete(self, api_version: str, kind: str, name: str, *a: Any, **kw: Any) -> bool:
        self.deleting.append(name)
        await asyncio.Event().wait()
        return False

    async def watch(self, *args: Any, **kw: Any) -> Any:
        await asyncio.Event().wait()
        yield ("ADDED", {})


async def side_by_side(
    clock: FakeClock, shard: ShardMembership, other: ShardMembership, n: int
) -> list[tuple[str, str]]:
    """A sixth of the lease duration on, ``other`` renewing every other step, shown to
    both at once: the Clusters both own then."""
    clock.advance(LEASE / 6)
    if n % 2 == 0:
        renew(other, f"b{n}")
        shard.on_lease(
            None, replace(lease(other.identity, f"b{n}"), incarnation=other._incarnation)
        )
    for _ in range(10):  # the turns of shard's loops
        await asyncio.sleep(0)
    other.refresh()
    return [key for key in KEYS if shard.owns(*key) and other.owns(*key)]


async def test_a_stale_lease_delete_that_hangs_never_leaves_a_cluster_with_two_owners() -> None:
    """replica-d died long ago, its Lease left; replica-a deletes it just as the API
    server stops answering replica-a. Its renewals go unanswered; replica-b renews on
    and takes replica-a's Clusters once it has seen its Lease unchanged for the lease
    duration. replica-a has stopped acting on them before (at its renew deadline),
    and its members are told they changed then, whatever the delete still awaits."""
    clock, client = FakeClock(), Partitioned()
    await client.apply(member_body("replica-d", "d1"), field_manager="other")
    shard, changes = membership(clock, client)
    other, _ = membership(clock, identity="replica-b")
    client.shards = [shard, other]
    running = asyncio.ensure_future(shard.run())
    overlaps = []
    try:
        for n in range(100):  # until it deletes replica-d's Lease
            overlaps += await side_by_side(clock, shard, other, n)
            if client.deleting:
                break
        assert client.deleting == ["crs-controller-shard-replica-d"] and shard.members
        client.cut_off = True
        for n in range(12):  # two lease durations
            overlaps += await side_by_side(clock, shard, other, n)
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    assert "replica-a" not in other.members and mine(other) == {name for _, name in KEYS}
    assert overlaps == []
    assert changes[-1][1] == set()  # told: its passes in flight are stopped
