"""Leader election (engine/runtime/membership.LeaderElector) on a fake clock and an
in-memory API: acquire, renew, stand by, take over a dead holder's Lease, lose it,
release it. Time moves only when the test says so; nothing sleeps. The Lease's pure
decisions (core/membership/lease) are tables."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from crs_controller.clients.kube import KubeClient
from crs_controller.core.errors import APIError, Conflict, Unreachable
from crs_controller.core.membership.lease import (
    LEASE_API,
    LeaseRecord,
    format_micro_time,
    free_for,
    leader_lease,
    parse_micro_time,
)
from crs_controller.core.membership.shard import Members
from crs_controller.engine.runtime.membership import LeaderElector, Leases

from .fake_clock import FakeClock
from .memory_kube import MemoryKube

LEASE = 15.0
RETRY = 2.0
NAMESPACE = "crs-system"


def elector(kube: MemoryKube, clock: FakeClock, identity: str) -> LeaderElector:
    leases = Leases(cast(KubeClient, kube), NAMESPACE)
    return LeaderElector(
        leases, clock=clock, identity=identity, lease_seconds=LEASE, retry_seconds=RETRY
    )


async def run_out(
    clock: FakeClock, task: asyncio.Task[None], step: float, *, steps: int = 10_000
) -> None:
    """Advance ``clock`` by ``step`` each time the electors are idle, until ``task`` ends
    (or ``steps`` times)."""
    for _ in range(steps):
        if task.done():
            return
        idling = asyncio.ensure_future(clock.until_idle())
        await asyncio.wait({task, idling}, return_when=asyncio.FIRST_COMPLETED)
        idling.cancel()
        if not task.done():
            clock.advance(step)


async def lease(kube: MemoryKube) -> dict[str, Any]:
    found = await kube.get(LEASE_API, "Lease", "crs-controller", NAMESPACE)
    assert found is not None
    return found


async def held_by(kube: MemoryKube, holder: str, clock: FakeClock, *, ago: float = 0) -> None:
    """The leader Lease as another process left it, renewed ``ago`` seconds before now."""
    renewed = format_micro_time(clock.wall() - timedelta(seconds=ago))
    spec = {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renewed}
    meta = {"name": "crs-controller", "namespace": NAMESPACE}
    await kube.create({"apiVersion": LEASE_API, "kind": "Lease", "metadata": meta, "spec": spec})


async def test_the_first_candidate_takes_a_lease_nobody_holds() -> None:
    kube, clock = MemoryKube("management"), FakeClock()
    await elector(kube, clock, "me").acquire()
    spec = (await lease(kube))["spec"]
    assert spec["holderIdentity"] == "me"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["renewTime"] == spec["acquireTime"] == format_micro_time(clock.wall())
    assert spec["leaseTransitions"] == 0


async def test_the_holder_renews_every_retry_period_and_keeps_the_acquire_time() -> None:
    kube, clock = MemoryKube("management"), FakeClock()
    me = elector(kube, clock, "me")
    await me.acquire()
    acquired = (await lease(kube))["spec"]["acquireTime"]
    keeping = asyncio.create_task(me.keep())
    for _ in range(3):
        await clock.until_idle()
        clock.advance(RETRY)
    await clock.until_idle()
    spec = (await lease(kube))["spec"]
    assert spec["renewTime"] == format_micro_time(clock.wall())
    assert (spec["acquireTime"], spec["holderIdentity"]) == (acquired, "me")
    assert not keeping.done()
    keeping.cancel()


async def test_a_standby_waits_while_the_holder_renews() -> None:
    kube, clock = MemoryKube("management"), FakeClock()
    await held_by(kube, "other", clock)
    standby = asyncio.create_task(elector(kube, clock, "me").acquire())
    for _ in range(3):
        await clock.until_idle()
        clock.advance(LEASE - 1)
        renewed = await lease(kube)
        renewed["spec"]["renewTime"] = format_micro_time(clock.wall())
        await kube.replace(renewed)
    await clock.until_idle()
    assert not standby.done()
    assert (await lease(kube))["spec"]["holderIdentity"] == "other"
    standby.cancel()


async def test_a_standby_takes_a_silent_holders_lease_once_seen_unchanged_for_its_duration() -> (
    None
):
    # However long ago its renewTime says: the standby times it from its own sighting.
    kube, clock = MemoryKube("management"), FakeClock()
    await held_by(kube, "dead", clock, ago=LEASE * 10)
    standby = asyncio.create_task(elector(kube, clock, "me").acquire())
    start = clock.now()
    while clock.now() < start + LEASE - RETRY:
        await clock.until_idle()
        clock.advance(RETRY)
    await clock.until_idle()
    assert not standby.done()
    clock.advance(RETRY)
    await asyncio.wait_for(standby, 1)
    spec = (await lease(kube))["spec"]
    assert spec["holderIdentity"] == "me"
    assert spec["acquireTime"] == format_micro_time(clock.wall())
    assert spec["leaseTransitions"] == 1


async def test_a_standby_whose_clock_runs_ahead_does_not_take_a_renewed_lease() -> None:
    kube, clock = MemoryKube("management"), FakeClock()
    ahead = FakeClock(wall=clock.wall() + timedelta(seconds=LEASE + 1))
    await elector(kube, clock, "holder").acquire()  # renewTime: the holder's now
    standby = elector(kube, ahead, "standby")
    assert not await standby._try()  # renewed "16 s ago" by its clock: held all the same
    assert await elector(kube, clock, "holder")._try()
    assert not await standby._try()  # renewed again: seen anew
    ahead.advance(LEASE - 0.001)
    assert not await standby._try()
    ahead.advance(0.001)  # seen unchanged for the lease duration on its own clock
    assert await standby._try()
    assert (await lease(kube))["spec"]["holderIdentity"] == "standby"


async def test_a_holder_that_cannot_renew_stops_before_the_lease_expires() -> None:
    kube, clock = MemoryKube("management"), FakeClock()
    me = elector(kube, clock, "me")
    await me.acquire()
    keeping = asyncio.create_task(me.keep())
    kube.down = True
    start = clock.now()
    await run_out(clock, keeping, RETRY)
    waited = clock.now() - start
    with pytest.raises(RuntimeError, match="leader lease lost"):
        keeping.result()
    # Stopped once two thirds had gone by: before any standby may take over.
    assert waited == LEASE * 2 / 3


async def test_a_holder_whose_renewal_hangs_stops_by_its_renew_deadline() -> None:
    kube, clock = MemoryKube("management"), FakeClock()
    me = elector(kube, clock, "me")
    await me.acquire()
    keeping = asyncio.create_task(me.keep())
    await clock.until_idle()
    renewed = clock.now()

    async def hang(*args: object, **kwargs: object) -> None:
        await clock.sleep_until(None, asyncio.Event())  # a request with no answer

    kube.get = hang  # type: ignore[method-assign]
    await run_out(clock, keeping, 1)
    with pytest.raises(RuntimeError, match="leader lease lost"):
        keeping.result()
    # Raised by two thirds of the duration, though the request never returned.
    assert clock.now() <= renewed + LEASE * 2 / 3


async def test_a_candidate_whose_request_hangs_tries_again_after_the_renew_deadline() -> None:
    """An attempt to take the lease is cut off at the renew deadline after its sending
    (a lease taken later could not be kept), not at the client's request timeout,
    and made again a retry period later."""
    kube, clock = MemoryKube("management"), FakeClock()
    real = kube.get

    async def hang_once(*args: Any, **kwargs: Any) -> Any:
        kube.get = real  # type: ignore[method-assign]  # this one alone
        await clock.sleep_until(None, asyncio.Event())  # a request with no answer

    kube.get = hang_once  # type: ignore[method-assign]
    start = clock.now()
    acquiring = asyncio.create_task(elector(kube, clock, "me").acquire())
    await run_out(clock, acquiring, 1, steps=30)  # else, never answered, it waits on
    assert acquiring.done() and (await lease(kube))["spec"]["holderIdentity"] == "me"
    assert clock.now() - start == LEASE * 2 / 3 + RETRY


async def test_a_holder_whose_lease_was_taken_stops() -> None:
    kube, clock = MemoryKube("management"), FakeClock()
    me = elector(kube, clock, "me")
    await me.acquire()
    keeping = asyncio.create_task(me.keep())
    taken = await lease(kube)
    taken["spec"].update(holderIdentity="thief", renewTime=format_micro_time(clock.wall()))
    await kube.replace(taken)
    await run_out(clock, keeping, RETRY)
    with pytest.raises(RuntimeError):
        keeping.result()
    assert (await lease(kube))["spec"]["holderIdentity"] == "thief"


async def test_release_on_shutdown_lets_a_standby_take_over_at_once() -> None:
    kube, clock = MemoryKube("management"), FakeClock()
    me = elector(kube, clock, "me")
    await me.acquire()
    await elector(kube, clock, "not-me").release()  # not the holder: nothing changes
    assert (await lease(kube))["spec"]["holderIdentity"] == "me"
    await me.release()
    spec = (await lease(kube))["spec"]
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("", 1)
    await asyncio.wait_for(elector(kube, clock, "next").acquire(), 1)
    assert (await lease(kube))["spec"]["holderIdentity"] == "next"


async def test_release_never_raises_when_the_server_is_unreachable() -> None:
    kube, clock = MemoryKube("management"), FakeClock()
    me = elector(kube, clock, "me")
    await me.acquire()
    kube.down = True
    await me.release()


@pytest.mark.parametrize(
    ("error", "level"),
    [
        (APIError("get Lease/crs-controller: 403 Forbidden", status=403), "error"),
        (APIError("get Lease/crs-controller: 401 Unauthorized", status=401), "error"),
        (Unreachable("get Lease/crs-controller: ConnectError"), "warning"),
        (APIError("get Lease/crs-controller: 500 Internal Server Error", status=500), "warning"),
        (Conflict("update Lease/crs-controller: 409 Conflict", status=409), "info"),
    ],
    ids=["403", "401", "unreachable", "500", "conflict"],
)
async def test_a_refused_lease_is_an_error_naming_the_lease(error: APIError, level: str) -> None:
    # Missing rights never heal by retrying: an alert on warnings and errors must see
    # them. Another replica's write (a Conflict) is routine.
    kube, clock = MemoryKube("management"), FakeClock()

    async def refuse(*args: object, **kwargs: object) -> None:
        raise error

    kube.get = refuse  # type: ignore[method-assign]
    with capture_logs() as records:
        acquiring = asyncio.create_task(elector(kube, clock, "me").acquire())
        await clock.until_idle()
        acquiring.cancel()
    (record,) = [r for r in records if r["event"] == "lease not acquired"]
    assert record["log_level"] == level
    assert record["lease"] == f"{NAMESPACE}/crs-controller"
    assert record["status"] == error.status
    assert record["error"] == str(error)


def test_each_process_is_a_candidate_of_its_own() -> None:
    kube, clock = MemoryKube("management"), FakeClock()
    leases = Leases(cast(KubeClient, kube), NAMESPACE)
    first, second = LeaderElector(leases, clock=clock), LeaderElector(leases, clock=clock)
    assert first.identity != second.identity
    host, _, suffix = first.identity.rpartition("-")
    assert host and len(suffix) == 8


# -- the pure decisions (core/membership/lease) ------------------------------------------------

NOW = datetime(2026, 11, 23, 10, tzinfo=UTC)


def record(holder: str, marker: str = "m", duration: float = 15) -> LeaseRecord:
    return LeaseRecord("crs-controller", holder, duration, marker, NOW, 0)


@pytest.mark.parametrize(
    ("first", "current", "after", "free"),
    [
        (None, None, 0, True),  # no Lease yet
        (None, record(""), 0, True),  # released
        (None, record("me"), 0, True),  # ours: renew
        (None, record("other"), 0, False),  # first seen: held
        (record("other"), record("other"), 14.999, False),  # unchanged, not yet a duration
        (record("other"), record("other"), 15, True),  # unchanged for the duration
        (record("other", "a"), record("other", "b"), 15, False),  # renewed: seen anew
        (record("other", duration=0), record("other", duration=0), 15, True),  # ours counts
        (record("other", duration=30), record("other", duration=30), 20, False),  # its own
    ],
)
def test_a_lease_is_free_for_us_when(
    first: LeaseRecord | None, current: LeaseRecord | None, after: float, free: bool
) -> None:
    seen = Members()
    if first is not None:
        assert not free_for(first, "me", seen, 0, 15)
    assert free_for(current, "me", seen, after, 15) is free


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("2026-11-23T10:00:00.000000Z", NOW),
        ("2026-11-23T10:00:00Z", NOW),  # RFC 3339 without the fraction
        ("2026-11-23T11:00:00.000000+01:00", NOW),
        ("", None),
        (None, None),
        (42, None),
        ("yesterday", None),
    ],
)
def test_micro_time_is_read_leniently(text: object, parsed: datetime | None) -> None:
    assert parse_micro_time(text) == parsed


def test_micro_time_round_trips() -> None:
    moment = NOW + timedelta(microseconds=123456)
    assert format_micro_time(moment) == "2026-11-23T10:00:00.123456Z"
    assert parse_micro_time(format_micro_time(moment)) == moment


def test_taking_a_lease_keeps_its_metadata_and_counts_the_transition() -> None:
    current = {
        "metadata": {"name": "crs-controller", "namespace": NAMESPACE, "resourceVersion": "5"},
        "spec": {"holderIdentity": "other", "leaseTransitions": 3, "acquireTime": "old"},
    }
    args: dict[str, Any] = {
        "name": "crs-controller",
        "namespace": NAMESPACE,
        "duration": 15.4,
        "now": NOW,
    }
    taken = leader_lease(current, identity="me", **args)
    assert taken["metadata"]["resourceVersion"] == "5"
    assert taken["spec"]["leaseTransitions"] == 4
    assert taken["spec"]["acquireTime"] == format_micro_time(NOW)
    assert taken["spec"]["leaseDurationSeconds"] == 15
    renewed = leader_lease(taken, identity="me", **{**args, "now": NOW + timedelta(seconds=2)})
    assert renewed["spec"]["leaseTransitions"] == 4
    assert renewed["spec"]["acquireTime"] == format_micro_time(NOW)
    fresh = leader_lease(None, identity="me", **args)
    assert fresh["metadata"] == {"name": "crs-controller", "namespace": NAMESPACE}
    assert fresh["spec"]["leaseTransitions"] == 0


@given(st.datetimes(min_value=datetime(1970, 1, 1), timezones=st.just(UTC)))
def test_any_renew_time_written_reads_back_the_same(moment: datetime) -> None:
    assert parse_micro_time(format_micro_time(moment)) == moment


@given(
    seen_at=st.floats(min_value=0, max_value=60, allow_nan=False),
    later=st.floats(min_value=0, max_value=120, allow_nan=False),
    duration=st.sampled_from([0.0, 1.0, 15.0, 40.0]),
)
def test_a_held_lease_once_free_stays_free_until_renewed(
    seen_at: float, later: float, duration: float
) -> None:
    seen, held = Members(), record("other", duration=duration)
    free_for(held, "me", seen, 0, 15)
    if free_for(held, "me", seen, seen_at, 15):
        assert free_for(held, "me", seen, seen_at + later, 15)
    assert not free_for(record("other", "renewed", duration), "me", seen, seen_at + later, 15)
