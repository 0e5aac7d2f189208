"""What a workload server's answers leave in memory is bounded by what the controller
needs, whatever the server sends (a tenant may point its kubeconfig at a server it
runs): discovery keeps a bounded number of kinds per client and refuses a
group-version listing more than any real API does; pruning asks a bounded number of
a group's versions; a drift check keeps of each LIST only the inventory's objects,
their owned fields within a budget per pass."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Awaitable, Callable, Mapping
from urllib.parse import urlsplit

import pytest

from crs_controller.clients.discovery import MAX_KEPT_RESOURCES, MAX_RESOURCES
from crs_controller.core.api.models import ObjectRef
from crs_controller.core.errors import AnswerTooLarge, NotFound
from crs_controller.engine.reconcile.workload.observing import MAX_KEPT_VALUES, Observer
from crs_controller.engine.reconcile.workload.pruning import MAX_OTHER_VERSIONS, _serving

from .test_kube_transport import Answer, client

MANAGER = "crs-controller"
LONG = "x" * 200  # kinds and plurals as long as the client takes them, near enough


def _discovery(tag: str, count: int) -> Answer:
    resources = [
        {"kind": f"K{tag}{i}{LONG}", "name": f"r{tag}{i}{LONG}", "namespaced": True}
        for i in range(count)
    ]
    return 200, {"kind": "APIResourceList", "resources": resources}


async def _kept_bytes(work: Callable[[], Awaitable[object]]) -> int:
    """Bytes still allocated once ``work`` is done (and its result dropped)."""
    gc.collect()
    tracemalloc.start()
    try:
        await work()
        gc.collect()
        return tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()


async def test_discovery_keeps_a_bounded_number_of_kinds_per_client() -> None:
    # 25 group-versions of MAX_RESOURCES kinds each: all of it was kept before
    # (15 MiB here, 258 MiB for answers of 49,000 entries).
    kube, transport = client(lambda method, path: _discovery("", MAX_RESOURCES))

    async def discover() -> None:
        for i in range(25):
            with pytest.raises(NotFound):
                await kube.resource_info(f"g{i}.example/v1", "Missing")

    kept = await _kept_bytes(discover)
    assert len(transport.requests) == 25
    # MAX_KEPT_RESOURCES kinds of about 650 bytes each, and nothing else of the answers.
    assert MAX_KEPT_RESOURCES * 650 < 2 * 2**20
    assert kept < 2 * 2**20


async def test_clients_that_found_the_same_kinds_hold_them_once() -> None:
    """A fleet's clusters serve the same kinds: one copy for all the clients that
    found them, not one each; a server serving others keeps its own."""
    clients = [client(lambda method, path: _discovery("", 100))[0] for _ in range(10)]

    async def discover() -> None:
        for kube in clients:
            await kube.resource_info("g.example/v1", f"K0{LONG}")

    kept = await _kept_bytes(discover)
    assert kept < 3 * 100 * 650  # 100 kinds of about 650 bytes; ten copies before
    found = [await kube.resource_info("g.example/v1", f"K1{LONG}") for kube in clients]
    assert all(info is found[0] for info in found)
    other, _ = client(lambda method, path: _discovery("o", 100))
    info = await other.resource_info("g.example/v1", f"Ko1{LONG}")
    assert (info.kind, info.plural) == (f"Ko1{LONG}", f"ro1{LONG}")


async def test_a_group_version_listing_more_kinds_than_any_api_is_refused() -> None:
    kube, _ = client(lambda method, path: _discovery("g", MAX_RESOURCES + 1))
    with pytest.raises(AnswerTooLarge) as refused:
        await kube.resource_info("g.example/v1", "Kg0")
    assert f"more than {MAX_RESOURCES} resources" in str(refused.value)
    assert "/apis/g.example/v1" in str(refused.value)
    assert LONG not in str(refused.value)  # the limit, never the content


async def test_a_client_still_finds_kinds_of_the_group_versions_it_dropped() -> None:
    kube, transport = client(lambda method, path: _discovery("", MAX_RESOURCES))
    for i in range(3):  # the first is dropped for the third (2,000 kinds at most)
        await kube.resource_info(f"g{i}.example/v1", f"K0{LONG}")
    await kube.resource_info("g2.example/v1", f"K1{LONG}")
    assert len(transport.requests) == 3  # the one kept answers from memory
    info = await kube.resource_info("g0.example/v1", f"K1{LONG}")
    assert (info.api_version, info.plural) == ("g0.example/v1", f"r1{LONG}")
    assert len(transport.requests) == 4  # discovered again


async def test_pruning_asks_a_bounded_number_of_a_groups_versions() -> None:
    versions = [{"groupVersion": f"g.example/v{i}", "version": f"v{i}"} for i in range(1000)]

    def answer(method: str, path: str) -> Answer:
        if urlsplit(path).path.endswith("/apis/g.example"):
            group = {"kind": "APIGroup", "name": "g.example", "versions": versions}
            return 200, {**group, "preferredVersion": versions[0]}
        return _discovery("", 3)

    kube, transport = client(answer)
    assert await _serving(kube, "g.example/v1", "Widget") is None
    # its own version, the group, then at most MAX_OTHER_VERSIONS others (the preferred first)
    assert len(transport.requests) == 2 + MAX_OTHER_VERSIONS
    asked = [urlsplit(r.url.target.decode()).path for r in transport.requests]
    assert asked[2].endswith("/apis/g.example/v0")


def _lists(items: int, owned: Mapping[str, object] | None = None) -> Callable[[str, str], Answer]:
    """A server of 20 kinds W0..W19 in g.example/v1, each listing ``items`` objects
    a0.. in ``ns``; ``owned``: the fields our manager owns on each."""
    entries = [{"kind": f"W{k}", "name": f"w{k}", "namespaced": True} for k in range(20)]
    managed = [{"manager": MANAGER, "operation": "Apply", "fieldsV1": owned}] if owned else []

    def answer(method: str, path: str) -> Answer:
        if urlsplit(path).path.endswith("/apis/g.example/v1"):
            return 200, {"kind": "APIResourceList", "resources": entries}
        objects = [
            {"metadata": {"name": f"a{i}", "namespace": "ns", "generation": 1}}
            for i in range(items)
        ]
        for listed in objects:
            listed["metadata"]["managedFields"] = managed
        return 200, {"kind": "List", "metadata": {"resourceVersion": "1"}, "items": objects}

    return answer


def _ref(kind: int, name: str = "a1") -> ObjectRef:
    return ObjectRef(api_version="g.example/v1", kind=f"W{kind}", namespace="ns", name=name)


async def test_a_drift_check_keeps_only_the_inventorys_objects_of_each_list() -> None:
    # 20 kinds of 2,000 objects each, one of each in the inventory: every listed
    # object was kept for the pass before (236 MiB at 49,000 objects a LIST).
    kube, transport = client(_lists(2000))
    inventory = [_ref(k) for k in range(20)]
    observer = Observer(kube, MANAGER, inventory=inventory)

    async def check() -> None:
        for ref in inventory:
            live = await observer.observe([ref])
            assert live[0] is not None and live[0].generation == 1

    kept = await _kept_bytes(check)
    assert kept < 2**20
    assert len(transport.requests) == 21  # discovery, then one LIST per kind
    assert observer.seen_present(inventory) == set(inventory)
    assert observer.seen_missing([_ref(0, "a9999")]) == set()  # not kept: not known


async def test_an_object_asked_about_outside_the_inventory_is_listed_again() -> None:
    kube, transport = client(_lists(10))
    observer = Observer(kube, MANAGER, inventory=[_ref(0)])
    await observer.observe([_ref(0)])
    assert observer.seen_missing([_ref(0, "a2"), _ref(0, "gone")]) == set()
    live = await observer.observe([_ref(0, "a2"), _ref(0, "gone")])
    assert live[0] is not None and live[1] is None
    assert observer.seen_missing([_ref(0, "gone")]) == {_ref(0, "gone")}
    assert len(transport.requests) == 3  # discovery, two LISTs
    await observer.observe([_ref(0), _ref(0, "gone")])  # all covered now
    assert len(transport.requests) == 3


async def test_owned_fields_past_the_pass_budget_end_the_pass_as_too_large() -> None:
    # Each kind's object owns a quarter of MAX_KEPT_VALUES, less one: the fifth is past it.
    owned: dict[str, object] = {f"f:k{i}": {} for i in range(MAX_KEPT_VALUES // 8 - 1)}
    kube, _ = client(_lists(2, owned))
    observer = Observer(kube, MANAGER, inventory=[_ref(k) for k in range(20)])
    for k in range(4):
        await observer.observe([_ref(k)])
    with pytest.raises(AnswerTooLarge) as refused:
        await observer.observe([_ref(4)])
    assert "LIST W4" in str(refused.value)
    assert f"more than {MAX_KEPT_VALUES} JSON values" in str(refused.value)
    assert "f:k1" not in str(refused.value)
