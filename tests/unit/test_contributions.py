"""The shard set's contribution store (engine/io/contributions) on the in-memory API:
a member writes its contribution only when it changed (an unchanged one, or the same
one after a restart, costs no request), writes over a version it did not hold once;
contributions that are mislabelled, too large, not JSON or refused by ``parse`` are left
out and logged by name, never by content; the leader's sweep deletes a member's only
after it was counted out for four lease durations, a deleted CRS's after one, and
nothing while the leader is not acting itself; a clean release deletes only its own.
Time is handed in: nothing sleeps."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from structlog.testing import capture_logs

from crs_controller.clients.api import Obj
from crs_controller.engine.io.contributions import (
    CONTRIBUTION_LABEL,
    CRS_ANNOTATION,
    DATA_KEY,
    MAX_BYTES,
    MEMBER_ANNOTATION,
    ContributionStore,
    contribution_body,
    member_hex,
    object_name,
)

from .fake_clock import FakeClock
from .memory_kube import MemoryKube

NS = "crs-system"
UID = "0b7c3f52-3c55-4c43-9b8e-1d2a5f6e7a10"
GONE_UID = "7d1e2f30-aaaa-4bbb-8ccc-0123456789ab"
LEASE = 6.0
SECRET = "hunter2"
ME, OTHER, THIRD = "replica-a", "replica-b", "replica-c"


def parse(data: Mapping[str, Any]) -> dict[str, Any]:
    """Refuses a value with "bad" in it, quoting it as a careless parser might."""
    if "bad" in data:
        raise ValueError(f"bad value {data['bad']!r}")
    return dict(data)


def store(
    kube: MemoryKube, identity: str = ME, changes: list[tuple[str, str]] | None = None
) -> ContributionStore[dict[str, Any]]:
    told = changes if changes is not None else []
    return ContributionStore(
        kube,
        NS,
        identity,
        parse=parse,
        dump=dict,
        on_change=lambda namespace, name: told.append((namespace, name)),
        clock=FakeClock(),
        lease_seconds=LEASE,
        stale_after=4,
    )


async def listed(contributions: ContributionStore[Any]) -> None:
    """Run the store's Informer until its first list is cached."""
    running = asyncio.ensure_future(contributions.informer.run())
    await contributions.informer.synced.wait()
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running


async def written_by(kube: MemoryKube, identity: str, value: Any, uid: str = UID) -> None:
    """``identity``'s contribution, as its own process wrote it."""
    await kube.create(contribution_body(NS, identity, "fleet", "crs-1", uid, json.dumps(value)))


def stored(kube: MemoryKube) -> dict[str, str]:
    """Each contribution's ConfigMap: its contribution.json."""
    return {
        name: obj["data"][DATA_KEY]
        for (_, kind, namespace, name), obj in kube.objects.items()
        if kind == "ConfigMap" and namespace == NS
    }


async def test_a_publish_writes_only_what_changed_and_a_restart_writes_nothing() -> None:
    kube = MemoryKube("management cluster")
    mine = store(kube)
    await listed(mine)
    await mine.publish("fleet", "crs-1", UID, {"n": 1, "tally": {"ready": 2}})
    name = object_name(ME, UID)
    assert name == f"crs-share-{member_hex(ME)}-{UID}" and len(member_hex(ME)) == 12
    obj = kube.objects[("v1", "ConfigMap", NS, name)]
    assert obj["metadata"]["labels"] == {CONTRIBUTION_LABEL: member_hex(ME)}
    assert obj["metadata"]["annotations"] == {MEMBER_ANNOTATION: ME, CRS_ANNOTATION: "fleet/crs-1"}
    assert obj["data"] == {DATA_KEY: '{"n":1,"tally":{"ready":2}}'}
    assert kube.writes() == [("create", f"ConfigMap/{name}")]
    before = len(kube.requests)
    await mine.publish("fleet", "crs-1", UID, {"tally": {"ready": 2}, "n": 1})  # the same
    assert len(kube.requests) == before
    await mine.publish("fleet", "crs-1", UID, {"n": 2, "tally": {"ready": 2}})
    assert kube.writes()[1:] == [("replace", f"ConfigMap/{name}")]
    assert mine.published(UID) == {ME: {"n": 2, "tally": {"ready": 2}}}
    # The same member restarted: what it wrote comes back through the list.
    again = store(kube)
    await listed(again)
    before = len(kube.requests)
    await again.publish("fleet", "crs-1", UID, {"n": 2, "tally": {"ready": 2}})
    assert len(kube.requests) == before


async def test_a_version_the_cache_does_not_hold_is_read_and_written_over_once() -> None:
    kube = MemoryKube("management cluster")
    await written_by(kube, ME, {"n": 1})  # by this member's earlier process, not listed
    mine = store(kube)
    await mine.publish("fleet", "crs-1", UID, {"n": 3})
    name = object_name(ME, UID)
    creates = [("create", f"ConfigMap/{name}")] * 2
    assert kube.writes() == [*creates, ("replace", f"ConfigMap/{name}")]
    assert stored(kube) == {name: '{"n":3}'}
    assert mine.published(UID) == {ME: {"n": 3}}


async def test_a_uid_no_server_gives_never_makes_a_name_or_a_request() -> None:
    kube = MemoryKube("management cluster")
    mine = store(kube)
    for uid in ("../secrets", UID.upper(), f"{UID}-x", ""):
        try:
            await mine.publish("fleet", "crs-1", uid, {"n": 1})
        except ValueError as exc:
            assert "uid" in str(exc) and (not uid or uid not in str(exc))
        else:
            raise AssertionError(f"published under {uid!r}")
    assert kube.requests == []


async def refused_objects(kube: MemoryKube) -> list[str]:
    """A contribution of each way a ConfigMap can be unfit; their names."""
    bodies = []
    for identity, text in [
        ("too-large", json.dumps({"pad": SECRET * (MAX_BYTES // len(SECRET))})),
        ("not-json", '{"n": ' + SECRET),
        ("refused", json.dumps({"bad": SECRET})),
        ("a-list", json.dumps([SECRET])),
    ]:
        bodies.append(contribution_body(NS, identity, "fleet", "crs-1", UID, text))
    mislabelled = contribution_body(NS, "mislabelled", "fleet", "crs-1", UID, "{}")
    mislabelled["metadata"]["labels"][CONTRIBUTION_LABEL] = member_hex(OTHER)
    bodies.append(mislabelled)
    for body in bodies:
        await kube.create(body)
    return [body["metadata"]["name"] for body in bodies]


async def test_unfit_contributions_are_left_out_and_logged_by_name_only() -> None:
    kube = MemoryKube("management cluster")
    await written_by(kube, OTHER, {"n": 1})
    names = await refused_objects(kube)
    changes: list[tuple[str, str]] = []
    mine = store(kube, changes=changes)
    with capture_logs() as logs:
        await listed(mine)
    assert mine.published(UID) == {OTHER: {"n": 1}}
    assert changes == [("fleet", "crs-1")]  # the other member's, its pass to wake
    refusals = [entry for entry in logs if entry["event"].startswith("object refused")]
    assert sorted(entry["name"] for entry in refusals) == sorted(names)
    assert all(entry["namespace"] == NS for entry in refusals)
    assert SECRET not in repr(logs)


class Echoing(MemoryKube):
    """Each watch shows every stored object again (a resync, or the echo of a write),
    then sets ``idle`` and waits."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.idle = asyncio.Event()

    async def watch(self, *args: Any, **kwargs: Any) -> AsyncIterator[tuple[str, Obj]]:
        for obj in [copy.deepcopy(o) for o in self.objects.values()]:
            yield "MODIFIED", obj
        self.idle.set()
        await asyncio.Event().wait()


async def test_only_a_change_of_another_members_contribution_wakes_its_crs() -> None:
    kube = Echoing("management cluster")
    await written_by(kube, OTHER, {"n": 1})
    changes: list[tuple[str, str]] = []
    mine = store(kube, changes=changes)
    await mine.publish("fleet", "crs-2", GONE_UID, {"n": 5})  # its own write: no wake
    running = asyncio.ensure_future(mine.informer.run())
    await kube.idle.wait()  # listed, then shown both again
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running
    assert changes == [("fleet", "crs-1")]  # the other member's, listed once


async def test_a_clean_release_deletes_only_its_own() -> None:
    kube = MemoryKube("management cluster")
    await written_by(kube, OTHER, {"n": 1})
    mine = store(kube)
    await listed(mine)
    await mine.publish("fleet", "crs-1", UID, {"n": 1})
    await mine.publish("fleet", "crs-2", GONE_UID, {"n": 1})
    await mine.drop_own()
    assert list(stored(kube)) == [object_name(OTHER, UID)]
    assert mine.published(UID) == {OTHER: {"n": 1}}
    assert mine.published(GONE_UID) == {}


async def test_the_sweep_deletes_a_member_counted_out_for_four_lease_durations() -> None:
    kube = MemoryKube("management cluster")
    for identity in (ME, OTHER, THIRD):
        await written_by(kube, identity, {"n": 1})
    leader = store(kube)
    await listed(leader)
    every = {object_name(m, UID) for m in (ME, OTHER, THIRD)}
    live, known, t0 = frozenset({ME, THIRD}), frozenset({UID}), 1000.0
    await leader.sweep(live, known, t0)
    await leader.sweep(live, known, t0 + 4 * LEASE - 0.1)
    assert set(stored(kube)) == every
    # Not acting itself, the leader knows nothing of the others: nothing goes.
    await leader.sweep(frozenset({THIRD}), known, t0 + 4 * LEASE)
    assert set(stored(kube)) == every
    await leader.sweep(live, known, t0 + 4 * LEASE)
    assert set(stored(kube)) == every - {object_name(OTHER, UID)}
    assert set(leader.published(UID)) == {ME, THIRD}


async def test_a_member_back_in_time_is_counted_out_from_scratch() -> None:
    kube = MemoryKube("management cluster")
    for identity in (ME, OTHER):
        await written_by(kube, identity, {"n": 1})
    leader = store(kube)
    await listed(leader)
    alone, both, known = frozenset({ME}), frozenset({ME, OTHER}), frozenset({UID})
    await leader.sweep(alone, known, 1000.0)
    await leader.sweep(both, known, 1000.0 + 3 * LEASE)  # renewed again
    await leader.sweep(alone, known, 1000.0 + 4 * LEASE)
    await leader.sweep(alone, known, 1000.0 + 8 * LEASE - 0.1)
    assert len(stored(kube)) == 2
    await leader.sweep(alone, known, 1000.0 + 8 * LEASE)
    assert list(stored(kube)) == [object_name(ME, UID)]


async def test_the_sweep_deletes_a_deleted_crs_contributions_after_a_lease_duration() -> None:
    kube = MemoryKube("management cluster")
    for identity in (ME, OTHER):
        await written_by(kube, identity, {"n": 1})
        await written_by(kube, identity, {"n": 1}, uid=GONE_UID)
    leader = store(kube)
    await listed(leader)
    live, known = frozenset({ME, OTHER}), frozenset({UID})
    await leader.sweep(live, known, 1000.0)
    await leader.sweep(live, known, 1000.0 + LEASE - 0.1)
    assert len(stored(kube)) == 4
    await leader.sweep(live, known, 1000.0 + LEASE)
    assert set(stored(kube)) == {object_name(ME, UID), object_name(OTHER, UID)}
    assert leader.published(GONE_UID) == {}


async def test_a_release_the_server_refuses_stops_at_the_first_failure() -> None:
    kube = MemoryKube("management cluster")
    mine = store(kube)
    await mine.publish("fleet", "crs-1", UID, {"n": 1})
    await mine.publish("fleet", "crs-2", GONE_UID, {"n": 1})
    kube.down = True
    before = len(kube.requests)
    with capture_logs() as logs:
        await mine.drop_own()
    assert len(kube.requests) == before + 1  # one refused: the sweep takes the rest
    assert [entry["event"] for entry in logs] == ["contribution not removed"]


async def test_the_sweep_logs_the_object_it_deleted_never_the_annotations_it_carried() -> None:
    kube = MemoryKube("management cluster")
    forged = "crs\x1b[2J" + "x" * 5000  # whoever writes the ConfigMap chose it
    await kube.create(contribution_body(NS, OTHER, "fleet", forged, UID, json.dumps({"n": 1})))
    leader = store(kube)
    await listed(leader)
    with capture_logs() as logs:
        await leader.sweep(frozenset({ME}), frozenset({UID}), 1000.0)
        await leader.sweep(frozenset({ME}), frozenset({UID}), 1000.0 + 4 * LEASE)
    assert not stored(kube)
    removed = [entry for entry in logs if entry["event"] == "removed a stale contribution"]
    assert removed == [
        {
            "event": "removed a stale contribution",
            "configmap": object_name(OTHER, UID),
            "log_level": "info",
        }
    ]
    assert not any("\x1b" in str(value) for entry in logs for value in entry.values())
