"""Per-cluster values in a CRS's pass (``engine.reconcile.substitute``): read from the
Cluster once for all the pass's resources, without a copy per ``spec.variables``
entry; a topology variable too large or too deep to use fails each resource that uses
it on that cluster as UnresolvedVariable, naming the variable and never its value,
and leaves the resources that do not use it alone; a large resource is substituted in
a worker thread."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

import pytest

from crs_controller.core.api.models import SourceRef
from crs_controller.core.manifests.documents import parse_objects
from crs_controller.core.manifests.hashing import object_hash
from crs_controller.core.spec.objects import CRS, Cluster, parse_cluster, parse_crs
from crs_controller.core.values import substitution
from crs_controller.core.values.substitution import UnresolvedVariable
from crs_controller.engine.io.sources import Manifest, Source
from crs_controller.engine.reconcile import substitute
from crs_controller.engine.reconcile.substitute import (
    SUBSTITUTE_INLINE_COST,
    PassValues,
    prepare,
)

NS = "fleet"
ENTRIES = 50


def crs() -> CRS:
    variables = [
        {"name": f"V{n}", "valueFrom": {"topologyVariable": "config"}} for n in range(ENTRIES)
    ]
    resources = [{"kind": "ConfigMap", "name": "one"}]
    spec = {"clusterSelector": {}, "variables": variables, "resources": resources}
    return parse_crs({"metadata": {"name": "addons", "namespace": NS}, "spec": spec})


def cluster(config: Any) -> Cluster:
    topology = {"version": "v1.34.4", "variables": [{"name": "config", "value": config}]}
    return parse_cluster(
        {"metadata": {"name": "c1", "namespace": NS}, "spec": {"topology": topology}}
    )


def manifest(name: str, line: str) -> dict[str, Any]:
    text = f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  {line}\n"
    meta = {"name": name, "namespace": NS}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"m.yaml": text}}


class FakeSources:
    """The parsed objects of each source, by its hash, said to hold ``cost`` bytes."""

    def __init__(self, *raws: dict[str, Any], cost: int = 0) -> None:
        self.parsed = {r["metadata"]["name"]: tuple(parse_objects(r)) for r in raws}
        self.cost = cost

    async def manifest(self, source: Source) -> Manifest:
        objects = self.parsed[source.hash]
        return Manifest(objects, tuple(object_hash(o) for o in objects), self.cost)


@pytest.fixture(autouse=True)
def no_walk_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sources here are named by their hash: no test may see another's walk."""
    monkeypatch.setattr(substitute, "_USED", OrderedDict())


def source(name: str) -> Source:
    return Source(SourceRef(kind="ConfigMap", name=name, substitute=True), hash=name)


async def test_a_pass_reads_the_values_once_for_all_its_resources(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []
    read = substitute.cluster_values
    monkeypatch.setattr(substitute, "cluster_values", lambda *a: calls.append(1) or read(*a))
    sources = FakeSources(manifest("one", "v: ${V0}"), manifest("two", "v: ${V1}"))
    values = PassValues(crs(), cluster({"a": 1}))
    prepared = [await prepare(sources, values, source(n)) for n in ("one", "two")]  # type: ignore[arg-type]
    assert calls == [1]
    assert prepared[0].values is prepared[1].values


TOO_LARGE = {
    "a map of 85,000 strings": {f"k{n}": "x" for n in range(85_000)},
    "a list of 100,000 mappings": [{} for _ in range(100_000)],
    "600 levels": json.loads("[" * 600 + "]" * 600),
}


@pytest.mark.parametrize("config", TOO_LARGE.values(), ids=TOO_LARGE.keys())
async def test_a_value_too_large_or_deep_fails_only_what_uses_it(config: Any) -> None:
    sources = FakeSources(manifest("uses", "v: ${V7}"), manifest("other", "v: x"))
    values = PassValues(crs(), cluster(config))
    with pytest.raises(UnresolvedVariable) as refused:
        await prepare(sources, values, source("uses"))  # type: ignore[arg-type]
    assert refused.value.variable == "V7"
    message = str(refused.value)
    assert "variable V7 cannot be used: topology variable config" in message
    assert (
        "nested deeper than 256 levels"
        if isinstance(config, list) and len(config) == 1
        else f"holds more than {substitution.MAX_STRUCTURED_NODES} nodes"
    ) in message
    assert "k1" not in message and "{}" not in message and "[[" not in message
    await prepare(sources, values, source("other"))  # type: ignore[arg-type]


async def test_a_value_refused_after_the_resource_was_walked_is_still_refused() -> None:
    sources = FakeSources(manifest("uses", "v: ${V3}"))
    ok = await prepare(sources, PassValues(crs(), cluster([1])), source("uses"))  # type: ignore[arg-type]
    assert ok.values is not None
    with pytest.raises(UnresolvedVariable, match="variable V3 cannot be used"):
        await prepare(sources, PassValues(crs(), cluster([0] * 20_000)), source("uses"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cost", "in_a_thread"),
    [(SUBSTITUTE_INLINE_COST, False), (SUBSTITUTE_INLINE_COST + 1, True)],
)
async def test_a_large_resource_is_substituted_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch, cost: int, in_a_thread: bool
) -> None:
    threads: list[bool] = []
    walk = substitute.substitute_resource

    def watched(*args: Any) -> Any:
        threads.append(threading.current_thread() is not threading.main_thread())
        return walk(*args)

    monkeypatch.setattr(substitute, "substitute_resource", watched)
    sources = FakeSources(manifest("one", "v: ${V0}"), cost=cost)
    prepared = await prepare(sources, PassValues(crs(), cluster(5)), source("one"))  # type: ignore[arg-type]
    sent = await prepared.manifest(sources, source("one"))  # type: ignore[arg-type]
    assert sent.objects[0]["data"] == {"v": 5}
    assert threads == [in_a_thread, in_a_thread]  # the first walk, then the apply's
