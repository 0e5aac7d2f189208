"""What the controller keeps of tenants' sources is bounded by bytes, not by count:
the byte-budgeted LRU (tables and a model-based property), the parsed-manifest cache
that keeps refusals apart so large sources never push one out (a hostile source is
parsed once, however often it is retried) and names the resource asked for, never the
same content in another namespace, fetched contents evicted and fetched again with one
GET, every parse and hash over 1 KiB (keys included) in a worker thread, a hash
shared by the workers that want it at once, a GET answered after its object was
forgotten keeping nothing, and nothing fetched or parsed for a CRS that no Cluster
selects."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.core.api.models import API_VERSION, ResourceRef
from crs_controller.core.errors import InvalidManifest
from crs_controller.core.manifests.limits import NODE_BYTES, count_nodes
from crs_controller.engine.io import sources as sources_module
from crs_controller.engine.io.sources import (
    WORST_BYTES_FACTOR,
    ByteBudgetLRU,
    Sources,
    parsed_cost,
)
from crs_controller.engine.reconcile.crs import reconcile_crs

from .builders import NS, cluster, crs, kubeconfig_secret
from .memory_kube import World

Obj = dict[str, Any]

# --- the LRU -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("puts", "budget", "kept"),
    [
        pytest.param([("a", 4), ("b", 4)], 10, ["a", "b"], id="fits"),
        pytest.param([("a", 4), ("b", 4), ("c", 4)], 10, ["b", "c"], id="oldest-out"),
        pytest.param([("a", 4), ("b", 4), ("a", 4), ("c", 4)], 10, ["a", "c"], id="reput-is-use"),
        pytest.param([("a", 2), ("b", 2), ("c", 9)], 10, ["c"], id="one-large-evicts-many"),
        pytest.param([("a", 2), ("big", 11)], 10, ["a"], id="larger-than-budget-not-kept"),
        pytest.param([("a", 10)], 10, ["a"], id="exactly-the-budget"),
        pytest.param([("a", 5), ("a", 20)], 10, [], id="grown-past-budget-dropped"),
    ],
)
def test_the_lru_keeps_what_fits_most_recent_first(
    puts: list[tuple[str, int]], budget: int, kept: list[str]
) -> None:
    lru: ByteBudgetLRU[str, str] = ByteBudgetLRU(budget)
    for key, cost in puts:
        lru.put(key, key.upper(), cost)
    assert [k for k in ("a", "b", "c", "big") if k in lru] == sorted(kept)
    assert lru.total <= budget


def test_a_get_makes_an_entry_the_most_recent() -> None:
    lru: ByteBudgetLRU[str, int] = ByteBudgetLRU(10)
    lru.put("a", 1, 4)
    lru.put("b", 2, 4)
    assert lru.get("a") == 1
    lru.put("c", 3, 4)
    assert ("a" in lru, "b" in lru, "c" in lru) == (True, False, True)
    assert lru.get("b") is None
    assert lru.pop("a") == 1
    assert (lru.total, len(lru)) == (4, 1)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 7), st.integers(0, 40)),
        st.tuples(st.just("get"), st.integers(0, 7), st.just(0)),
        st.tuples(st.just("pop"), st.integers(0, 7), st.just(0)),
    ),
    max_size=60,
)


@given(ops=OPS, budget=st.integers(0, 64))
def test_the_lru_matches_a_reference_model(ops: list[tuple[str, int, int]], budget: int) -> None:
    """Against a plain list in use order: the same entries, never over budget, and a
    put that fits is always kept."""
    lru: ByteBudgetLRU[int, int] = ByteBudgetLRU(budget)
    model: list[tuple[int, int]] = []  # (key, cost), least recent first
    for op, key, cost in ops:
        held = next((c for k, c in model if k == key), None)
        if op == "get":
            assert (lru.get(key) is None) == (held is None)
            if held is not None:
                model = [e for e in model if e[0] != key] + [(key, held)]
        elif op == "pop":
            lru.pop(key)
            model = [e for e in model if e[0] != key]
        else:
            lru.put(key, cost, cost)
            model = [e for e in model if e[0] != key]
            if cost <= budget:
                model.append((key, cost))
                while sum(c for _, c in model) > budget:
                    model.pop(0)
                assert key in lru
        assert lru.total == sum(c for _, c in model) <= budget
        assert len(lru) == len(model)
        assert all(k in lru for k, _ in model)


@pytest.mark.parametrize(
    ("source_bytes", "nodes", "cost"),
    [
        (1000, 10, 1000 + 10 * NODE_BYTES),
        (1000, 10_000, 1000 * WORST_BYTES_FACTOR),  # aliases: shared, bounded by bytes
        (0, 0, 0),
    ],
)
def test_the_cost_of_parsed_objects(source_bytes: int, nodes: int, cost: int) -> None:
    assert parsed_cost(source_bytes, nodes) == cost


def test_nodes_are_counted_as_a_resource_value_counts_them() -> None:
    # The document, the mapping, its 2 keys and 2 values; the list: document, list, 3.
    assert count_nodes([{"a": 1, "b": [1, 2]}]) == 2 + 2 + 2 + 2
    assert count_nodes([[1, 2, 3]]) == 5
    assert count_nodes([]) == 0


# --- sources -----------------------------------------------------------------------


def configmap(name: str, text: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS},
        "data": {"a": text},
    }


def objects_text(count: int, pad: int = 0) -> str:
    docs = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"o{i}"}, "data": {}}
        for i in range(count)
    ]
    return yaml.safe_dump_all(docs) + ("#" + "x" * pad + "\n" if pad else "")


class Parses:
    """sources._parse, counting its calls and the threads they ran in."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.threads: list[str] = []
        real = sources_module._parse

        def counted(raw: Obj) -> Any:
            self.threads.append(threading.current_thread().name)
            return real(raw)

        monkeypatch.setattr(sources_module, "_parse", counted)


async def world_of(*objs: Obj) -> World:
    world = World({})
    for obj in objs:
        await world.add(obj)
    return world


async def manifest_of(sources: Sources, name: str) -> Any:
    return await sources.manifest(await sources.load(NS, ResourceRef(kind="ConfigMap", name=name)))


async def test_a_refused_source_is_parsed_once_however_much_else_passes_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The parsed cache holds room for two manifests; twenty go through it, and the
    refused source retried in between is never parsed again."""
    good = [configmap(f"good{i}", objects_text(20, pad=i)) for i in range(20)]
    cost = parsed_cost(len(good[0]["data"]["a"]), count_nodes(yaml.safe_load_all(objects_text(20))))
    monkeypatch.setattr(sources_module, "PARSED_BUDGET_BYTES", 2 * cost + cost // 2)
    parses = Parses(monkeypatch)
    world = await world_of(configmap("bad", "a: [unclosed\n"), *good)
    sources = world.ctx.sources
    messages = set()
    for source in good:
        with pytest.raises(InvalidManifest) as caught:
            await manifest_of(sources, "bad")
        messages.add(str(caught.value))
        await manifest_of(sources, source["metadata"]["name"])
    assert len(messages) == 1
    assert len(parses.threads) == 1 + len(good)
    # The oldest good ones were evicted (bounded by bytes): asked again, parsed again.
    await manifest_of(sources, "good0")
    assert len(parses.threads) == 2 + len(good)
    assert sources._parsed.total <= sources_module.PARSED_BUDGET_BYTES


async def test_a_refusal_names_the_namespace_of_the_source_asked_for() -> None:
    """The same broken content under the same name in two namespaces: each refusal
    names its own resource, never the other tenant's."""
    world = World({})
    for namespace in ("tenant-a", "tenant-b"):
        source = configmap("addons", "a: [unclosed\n")
        await world.add({**source, "metadata": {"name": "addons", "namespace": namespace}})
    sources = world.ctx.sources
    for namespace in ("tenant-a", "tenant-b", "tenant-a"):
        loaded = await sources.load(namespace, ResourceRef(kind="ConfigMap", name="addons"))
        with pytest.raises(InvalidManifest) as caught:
            await sources.manifest(loaded)
        assert str(caught.value).startswith(f"ConfigMap {namespace}/addons: key 'a'")
        problem = await sources.problem(loaded)
        assert str(problem).startswith(f"ConfigMap {namespace}/addons: key 'a'")


@pytest.mark.parametrize(
    ("data", "in_thread"),
    [
        ({"a": "a: [unclosed\n"}, False),
        ({"a": objects_text(1)}, False),
        ({"a": objects_text(40)}, True),
        # Nothing in the values, but each key is work (150,000 such keys: 41 ms to
        # parse, 87 ms to hash).
        ({f"key-{i:06d}": "" for i in range(10_000)}, True),
    ],
    ids=["tiny-refused", "tiny", "over-1-KiB", "many-empty-keys"],
)
async def test_only_a_value_under_1_kib_is_parsed_and_hashed_on_the_event_loop(
    monkeypatch: pytest.MonkeyPatch, data: dict[str, str], in_thread: bool
) -> None:
    values = sum(map(len, data.values()))
    assert (values > sources_module.PARSE_INLINE_BYTES) == in_thread or values == 0
    parses = Parses(monkeypatch)
    hashes: list[str] = []
    real_hash = sources_module.resource_hash

    def hash_counted(raw: Obj) -> str:
        hashes.append(threading.current_thread().name)
        return real_hash(raw)

    monkeypatch.setattr(sources_module, "resource_hash", hash_counted)
    world = await world_of({**configmap("s", ""), "data": data})
    with contextlib.suppress(InvalidManifest):
        await manifest_of(world.ctx.sources, "s")
    loop_thread = threading.current_thread().name
    assert [thread != loop_thread for thread in parses.threads + hashes] == [in_thread] * 2


async def test_workers_loading_one_large_source_together_hash_it_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = await world_of(configmap("s", objects_text(40)))
    sources = world.ctx.sources
    hashed: list[str] = []
    real_hash = sources_module.resource_hash

    def hash_counted(raw: Obj) -> str:
        hashed.append(threading.current_thread().name)
        return real_hash(raw)

    monkeypatch.setattr(sources_module, "resource_hash", hash_counted)
    ref = ResourceRef(kind="ConfigMap", name="s")
    workers = [asyncio.ensure_future(sources.load(NS, ref)) for _ in range(8)]
    await asyncio.sleep(0)  # every worker is waiting for the one hash
    workers[0].cancel()  # a worker's reconcile timed out: the others still get it
    loaded = await asyncio.gather(*workers[1:])
    assert len({source.hash for source in loaded}) == 1
    assert len(hashed) == 1 and hashed[0] != threading.current_thread().name
    assert (await sources.load(NS, ref)).hash == loaded[0].hash  # kept: no hash again
    assert len(hashed) == 1


async def test_fetched_contents_are_bounded_by_bytes_and_fetched_again_on_a_miss(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = objects_text(30)
    monkeypatch.setattr(sources_module, "CONTENT_BUDGET_BYTES", 3 * (len(text) + 2500))
    world = await world_of(*[configmap(f"s{i}", text) for i in range(6)])
    sources = world.ctx.sources
    for i in range(6):
        await sources.content(NS, "ConfigMap", f"s{i}")
    assert sources._contents.total <= sources_module.CONTENT_BUDGET_BYTES
    gets = [r for r in world.mgmt.requests if r[0] == "get"]
    await sources.content(NS, "ConfigMap", "s5")  # held: no GET
    assert [r for r in world.mgmt.requests if r[0] == "get"] == gets
    held = await sources.content(NS, "ConfigMap", "s0")  # evicted: one GET
    assert [r for r in world.mgmt.requests if r[0] == "get"] == [*gets, ("get", "ConfigMap/s0")]
    assert held is not None and held["data"]["a"] == text
    assert "managedFields" not in held["metadata"]


class HeldGets:
    """The management client's GET, held until ``release``: as a real server's answer
    takes a while, so that every worker missing the same source misses it at once."""

    def __init__(self, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
        self.gate = asyncio.Event()
        self.answered = asyncio.Event()  # a GET held was answered
        real = world.mgmt.get

        async def held(api_version: str, kind: str, name: str, namespace: str | None = None) -> Any:
            await self.gate.wait()
            found = await real(api_version, kind, name, namespace)
            self.answered.set()
            return found

        monkeypatch.setattr(world.mgmt, "get", held)

    def release(self) -> None:
        self.gate.set()


def gets_of(world: World) -> list[tuple[str, str]]:
    return [r for r in world.mgmt.requests if r[0] == "get"]


async def test_workers_missing_one_source_together_send_one_get(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = await world_of(configmap("s", objects_text(3)))
    sources, held = world.ctx.sources, HeldGets(world, monkeypatch)
    workers = [asyncio.ensure_future(sources.content(NS, "ConfigMap", "s")) for _ in range(8)]
    await asyncio.sleep(0)  # every worker is waiting for the one GET
    workers[0].cancel()  # a worker's reconcile timed out: the others still get it
    held.release()
    answers = await asyncio.gather(*workers[1:])
    assert gets_of(world) == [("get", "ConfigMap/s")]
    assert all(a is not None and a["data"]["a"] == objects_text(3) for a in answers)


async def test_a_get_answered_after_its_source_was_forgotten_keeps_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Cluster handed over while its kubeconfig's GET is in flight: the pass is
    cancelled and the Secret forgotten, then the answer comes. Not kept (this replica
    no longer owns the Cluster): the next read sends a GET of its own."""
    world = await world_of(configmap("s", objects_text(3)))
    sources, held = world.ctx.sources, HeldGets(world, monkeypatch)
    caller = asyncio.ensure_future(sources.content(NS, "ConfigMap", "s"))
    await asyncio.sleep(0)  # the GET is in flight
    caller.cancel()
    sources.forget(NS, "ConfigMap", "s")
    held.release()
    await held.answered.wait()  # and what followed it ran: it does not wait again
    assert caller.cancelled()
    again = await sources.content(NS, "ConfigMap", "s")
    assert gets_of(world) == [("get", "ConfigMap/s")] * 2
    assert again is not None and again["data"]["a"] == objects_text(3)


async def test_a_change_seen_while_a_get_is_in_flight_is_fetched_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = await world_of(configmap("s", objects_text(3)))
    sources, held = world.ctx.sources, HeldGets(world, monkeypatch)
    first = asyncio.ensure_future(sources.content(NS, "ConfigMap", "s"))
    await asyncio.sleep(0)
    live = world.mgmt.objects[("v1", "ConfigMap", NS, "s")]
    await world.update({**live, "data": {"a": objects_text(4)}})  # the watch shows it
    second = asyncio.ensure_future(sources.content(NS, "ConfigMap", "s"))
    await asyncio.sleep(0)  # it misses too, wanting the newer version
    held.release()
    await first
    newer = await second
    assert gets_of(world) == [("get", "ConfigMap/s")] * 2
    assert newer is not None and newer["data"]["a"] == objects_text(4)


# --- a CRS that selects no Cluster -------------------------------------------------


@pytest.mark.parametrize("source", ["big", "missing", "broken"])
async def test_nothing_is_fetched_or_parsed_for_a_crs_that_selects_no_cluster(
    monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    parses = Parses(monkeypatch)
    world = await world_of(
        configmap("big", objects_text(200)), configmap("broken", "a: [unclosed\n")
    )
    await world.add(crs("a", source))
    ctx = world.crs_context()
    await reconcile_crs(ctx, NS, "a")
    stored = world.mgmt.objects[(API_VERSION, "ClusterResourceSet", NS, "a")]
    ready = next(c for c in stored["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "NoMatchingClusters")
    assert "revision" not in stored["status"]
    assert [r for r in world.mgmt.requests if r[0] == "get" and "ConfigMap/" in r[1]] == []
    assert parses.threads == []
    # A Cluster that matches: now the sources are read, and a problem is reported.
    # (The in-memory server replaces the whole object on a status write: put the
    # spec back, as the real one keeps it.)
    restored = {**crs("a", source), "status": stored["status"]}
    restored["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
    world.mgmt.objects[(API_VERSION, "ClusterResourceSet", NS, "a")] = restored
    world.sync(restored)
    await world.add(cluster("c1"))
    await world.add(kubeconfig_secret("c1"))
    await reconcile_crs(ctx, NS, "a")
    stored = world.mgmt.objects[(API_VERSION, "ClusterResourceSet", NS, "a")]
    ready = next(c for c in stored["status"]["conditions"] if c["type"] == "Ready")
    expected = {"big": "WaitingForClusters", "missing": "ResourceNotFound"}
    assert ready["reason"] == expected.get(source, "InvalidManifest")
    # (A missing one is known missing from the watch, without a GET.)
    assert (("get", f"ConfigMap/{source}") in world.mgmt.requests) == (source != "missing")
    assert len(parses.threads) == (0 if source == "missing" else 1)


async def test_the_verdict_outlives_the_parsed_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no room for parsed objects at all, the CRS status (which needs only
    whether a source is usable) still parses each content once."""
    monkeypatch.setattr(sources_module, "PARSED_BUDGET_BYTES", 0)
    parses = Parses(monkeypatch)
    world = await world_of(configmap("good", objects_text(30)), configmap("bad", "a: [\n"))
    sources = world.ctx.sources
    loaded = {
        n: await sources.load(NS, ResourceRef(kind="ConfigMap", name=n)) for n in ("good", "bad")
    }
    for _ in range(3):
        assert await sources.problem(loaded["good"]) is None
        problem = await sources.problem(loaded["bad"])
        assert isinstance(problem, InvalidManifest)
    assert len(parses.threads) == 2
    # The objects themselves, to apply, are parsed again: they were not kept.
    assert len((await sources.manifest(loaded["good"])).objects) == 30
    assert len(parses.threads) == 3


@pytest.mark.parametrize(
    ("characters", "refused"),
    [
        (sources_module.MAX_SOURCE_CHARACTERS, False),
        (sources_module.MAX_SOURCE_CHARACTERS + 1, True),
    ],
    ids=["at-the-limit", "one-over"],
)
async def test_a_source_larger_than_the_api_server_allows_is_refused_unparsed(
    monkeypatch: pytest.MonkeyPatch, characters: int, refused: bool
) -> None:
    """What the API server would never hand out is refused on its size alone (the
    memory limits assume it); at the limit, it is parsed."""
    parses = Parses(monkeypatch)
    text = objects_text(1)
    text += "#" + "x" * (characters - len(text) - 2) + "\n"
    world = await world_of(configmap("big", text))
    source = await world.ctx.sources.load(NS, ResourceRef(kind="ConfigMap", name="big"))
    problem = await world.ctx.sources.problem(source)
    assert len(parses.threads) == (0 if refused else 1)
    if refused:
        assert str(problem) == (
            f"ConfigMap {NS}/big: data is larger than the API server allows (1 MiB)"
        )
    else:
        assert problem is None
