"""A drift check reads each LIST page by page and keeps only the wanted entries, so a
kind with many large objects of other tools (every CRD on a cluster, their
managedFields the size of their schemas) does not add up to a refusal: the client's
bound on JSON values holds per page, and a LIST is bounded in pages and items."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from crs_controller.clients.answers import WORKLOAD_LIMITS
from crs_controller.core.api.models import ObjectRef
from crs_controller.core.errors import AnswerTooLarge
from crs_controller.engine.reconcile.workload.observing import Observer

from .builders import configmap_source, crs, outcome, reconcile, world_with
from .fake_clock import FakeClock
from .memory_kube import MemoryKube
from .test_kube_transport import Answer, client

CRD_API = "apiextensions.k8s.io/v1"
MANAGER = "crs-controller"
OTHERS = 230  # CRDs of other tools already on the cluster


def _crd(name: str) -> dict[str, Any]:
    spec = {
        "group": "example.com",
        "names": {"kind": "Thing", "plural": "things"},
        "versions": [{"name": "v1", "served": True, "storage": True}],
    }
    meta = {"name": name}
    return {
        "apiVersion": CRD_API,
        "kind": "CustomResourceDefinition",
        "metadata": meta,
        "spec": spec,
    }


def _schema_fields(width: int) -> dict[str, Any]:
    """The fieldsV1 of another tool's CRD: about ``4 * width`` JSON values."""
    return {"f:spec": {f"f:p{i}": {".": {}, "f:type": {}} for i in range(width)}}


def _other_crd(index: int, width: int) -> dict[str, Any]:
    crd = _crd(f"things{index}.other.example.com")
    crd["metadata"]["generation"] = 1
    managed = {"manager": "other-tool", "operation": "Apply", "fieldsV1": _schema_fields(width)}
    crd["metadata"]["managedFields"] = [managed]
    return crd


def _establish(workload: MemoryKube, name: str) -> None:
    """The CRD ``name`` Established before it is applied (an apply keeps its status)."""
    crd = _crd(name) | {"status": {"conditions": [{"type": "Established", "status": "True"}]}}
    workload.objects[(CRD_API, crd["kind"], "", name)] = crd
    workload.keeps_status = True


async def test_a_drift_check_among_hundreds_of_crds_is_not_refused() -> None:
    """230 other CRDs of about 1,200 values of managedFields each: over the client's
    250,000 values in total, which a LIST read whole refused (ClusterUnreachable)."""
    spec = {"driftDetection": "Generation", "driftCheckInterval": "1m"}
    source = configmap_source("src", _crd("backups.velero.io"))
    world = await world_with(crs("a", "src", **spec), mode_source=source)
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    _establish(workload, "backups.velero.io")
    await reconcile(world)
    assert outcome(world, "a")[0] == "Applied", outcome(world, "a")
    for index in range(OTHERS):
        crd = _other_crd(index, 300)
        workload.objects[(CRD_API, crd["kind"], "", crd["metadata"]["name"])] = crd
    workload.values = WORKLOAD_LIMITS.values
    clock = world.ctx.clock
    assert isinstance(clock, FakeClock)

    clock.advance(2 * 60)
    workload.requests.clear()
    result = await reconcile(world)
    assert ("list", "CustomResourceDefinition/*") in workload.requests  # it looked
    assert outcome(world, "a")[0] == "Applied", outcome(world, "a")
    assert not result.retry
    assert workload.writes() == []  # nothing drifted: nothing sent

    ours = workload.objects[(CRD_API, "CustomResourceDefinition", "", "backups.velero.io")]
    ours["metadata"]["generation"] += 1  # someone edited it
    clock.advance(2 * 60)
    workload.requests.clear()
    await reconcile(world)  # the drift check sees it and sends it again
    assert ("apply", "CustomResourceDefinition/backups.velero.io") in workload.writes()


def _paged(total: int, width: int) -> Any:
    """A server listing ``total`` CRDs of ``width`` owned fields by another tool, by
    the pages its clients ask for (``limit``, ``continue``); the last one is ours."""
    names = [f"things{i}.other.example.com" for i in range(total - 1)] + ["mine.example.com"]

    def answer(method: str, path: str) -> Answer:
        url = urlsplit(path)
        if url.path.endswith(f"/apis/{CRD_API}"):
            plural = {"kind": "CustomResourceDefinition", "name": "customresourcedefinitions"}
            return 200, {"kind": "APIResourceList", "resources": [plural | {"namespaced": False}]}
        query = parse_qs(url.query)
        start = int(query.get("continue", ["0"])[0])
        end = min(total, start + int(query["limit"][0]))
        items = [_other_crd(i, width) for i in range(start, end)]
        for item, name in zip(items, names[start:end], strict=True):
            item["metadata"]["name"] = name
        meta = {"resourceVersion": "7"} | ({"continue": str(end)} if end < total else {})
        return 200, {"kind": "List", "metadata": meta, "items": items}

    return answer


MINE = ObjectRef(
    api_version=CRD_API, kind="CustomResourceDefinition", namespace="", name="mine.example.com"
)


async def test_the_client_reads_a_drift_list_page_by_page() -> None:
    kube, transport = client(_paged(OTHERS + 1, 300))
    live = await Observer(kube, MANAGER, inventory=[MINE]).observe([MINE])
    assert live[0] is not None and live[0].generation == 1
    assert len(transport.requests) > 2  # discovery, then several pages


async def test_a_drift_list_past_the_clients_page_bound_is_still_refused() -> None:
    """A server that lists without end, a page at a time, is refused at the client's
    bound on pages."""

    def endless(method: str, path: str) -> Answer:
        url = urlsplit(path)
        if url.path.endswith(f"/apis/{CRD_API}"):
            return _paged(1, 1)(method, path)
        after = int(parse_qs(url.query).get("continue", ["0"])[0]) + 1
        item = _other_crd(after, 1)
        return 200, {"kind": "List", "metadata": {"continue": str(after)}, "items": [item]}

    kube, _ = client(endless)
    with pytest.raises(AnswerTooLarge) as refused:
        await Observer(kube, MANAGER, inventory=[MINE]).observe([MINE])
    assert f"more than {WORKLOAD_LIMITS.pages} pages" in str(refused.value)
