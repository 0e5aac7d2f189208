"""The hooks' answers read from the API (``engine.reconcile.hook``) and the parsed CRSs
they read through (``engine.io.parsed_crss``): a CRS is parsed — its CEL health rules
compiled — only when it can gate an upgrade or hold a deletion, once per version, in a
worker thread, or taken from the CRS informer when it holds that version; and
BeforeClusterDelete lets a deletion go once ``uninstall.timeout`` has passed even when
the Cluster's binding cannot be read. The namespace's sets are read page by page: its
large sets (a last-applied annotation of many commas) do not add up to a refusal."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from crs_controller.core.api.models import API_VERSION
from crs_controller.core.errors import InvalidObjectName
from crs_controller.core.health import cel_rules
from crs_controller.core.spec import objects
from crs_controller.core.versions.ranges import parse_version
from crs_controller.engine.io.parsed_crss import ParsedCRSs
from crs_controller.engine.reconcile.hook import (
    GETS_AT_MOST,
    HOOK_RETRY_SECONDS,
    NAME_SHOWN_CHARS,
    NAMES_SHOWN,
    NOTHING_TO_DO,
    hook_status,
    upgrade_status,
)

from .memory_kube import CLUSTER_API, MemoryKube

NS = "default"
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@dataclass
class Compiles:
    """Each ``compile_rules`` call with rules: the thread it ran in."""

    threads: list[int] = field(default_factory=list)


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> Iterator[Compiles]:
    seen = Compiles()

    def counting(rules: Any) -> Any:
        if rules:
            seen.threads.append(threading.get_ident())
        return cel_rules.compile_rules(rules)

    monkeypatch.setattr(objects, "compile_rules", counting)
    yield seen


def heavy_rule(n: int) -> dict[str, str]:
    """A rule of about 1,000 characters: four comprehensions and twelve comparisons."""
    parts = [
        f"self.status.conditions.exists(c, c.type == 'T{n}x{j}' && c.status == 'True')"
        for j in range(4)
    ]
    parts += [f"self.spec.replicas{j} == self.status.readyReplicas{j} + {j}" for j in range(12)]
    return {"apiVersion": "apps/v1", "kind": f"Kind{n}", "ready": " && ".join(parts)}


def crs_raw(name: str, **spec: Any) -> dict[str, Any]:
    body = {
        "clusterSelector": {"matchLabels": {"env": "prod"}},
        "resources": [{"kind": "ConfigMap", "name": "src", "kubernetesVersions": ">=1.33.0"}],
        "healthCheck": {"rules": [heavy_rule(n) for n in range(20)]},
    }
    meta = {"name": name, "namespace": NS, "generation": 1}
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterResourceSet",
        "metadata": meta,
        "spec": body | spec,
    }


def cluster_raw(deleted: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "c1", "namespace": NS, "labels": {"env": "prod"}}
    if deleted is not None:
        meta["deletionTimestamp"] = deleted
    return {
        "apiVersion": CLUSTER_API,
        "kind": "Cluster",
        "metadata": meta,
        "spec": {"topology": {"class": "quick-start", "version": "v1.33.0"}},
    }


def binding_raw(*crs_names: str, bindings: Any = None) -> dict[str, Any]:
    applied = {
        "kind": "ConfigMap",
        "name": "src",
        "applied": True,
        "objects": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "addon"}],
    }
    entries = [{"clusterResourceSetName": n, "resources": [applied]} for n in crs_names]
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterResourceSetBinding",
        "metadata": {"name": "c1", "namespace": NS},
        "spec": {"clusterName": "c1", "bindings": entries if bindings is None else bindings},
    }


async def api_with(*objs: dict[str, Any]) -> MemoryKube:
    mgmt = MemoryKube("mgmt")
    for obj in objs:
        await mgmt.create(obj)
    return mgmt


# -- the upgrade hooks ---------------------------------------------------------------


async def test_an_upgrade_hook_compiles_the_rules_of_gating_crss_only_and_once(
    compiles: Compiles,
) -> None:
    """Thirty CRSs with twenty long rules each and no gateUpgrades cost the hook no
    compile at all; the one that gates is compiled once, in a worker thread, and a
    second call (Cluster API asks every few seconds) compiles nothing again."""
    others = [crs_raw(f"plain-{n}") for n in range(30)]
    mgmt: Any = await api_with(cluster_raw(), *others, crs_raw("gating", gateUpgrades=True))
    parsed = ParsedCRSs()
    to = parse_version("v1.34.0")
    assert to is not None
    for _ in range(2):
        answer = await upgrade_status(
            mgmt, CLUSTER_API, cluster_raw(), to, parsed=parsed, before=True
        )
        assert answer[0] == 0, answer  # the gating CRS has a resource for every version
        assert len(compiles.threads) == 1
    assert compiles.threads[0] != threading.get_ident()  # not on the event loop's thread


async def test_a_crs_changed_since_is_parsed_again(compiles: Compiles) -> None:
    mgmt: Any = await api_with(cluster_raw(), crs_raw("gating", gateUpgrades=True))
    parsed = ParsedCRSs()
    to = parse_version("v1.34.0")
    assert to is not None
    await upgrade_status(mgmt, CLUSTER_API, cluster_raw(), to, parsed=parsed)
    live = await mgmt.get(API_VERSION, "ClusterResourceSet", "gating", NS)
    live["spec"]["resources"][0]["kubernetesVersions"] = "<1.34.0"
    await mgmt.replace(live)
    retry_after, message = await upgrade_status(
        mgmt, CLUSTER_API, cluster_raw(), to, parsed=parsed, before=True
    )
    assert len(compiles.threads) == 2
    assert retry_after == HOOK_RETRY_SECONDS and "gating" in message


async def test_the_informers_copy_of_the_same_version_is_not_parsed_again(
    compiles: Compiles,
) -> None:
    mgmt = await api_with(crs_raw("gating", gateUpgrades=True))
    live = await mgmt.get(API_VERSION, "ClusterResourceSet", "gating", NS)
    assert live is not None
    held = objects.parse_crs(live)
    parsed = ParsedCRSs(lambda namespace, name: held)
    assert await parsed.parse(live) is held
    assert len(compiles.threads) == 1  # the informer's own parse
    live["metadata"]["resourceVersion"] += "0"  # a newer version than the informer's
    assert await parsed.parse(live) is not held
    assert len(compiles.threads) == 2


# -- BeforeClusterDelete -------------------------------------------------------------


async def test_before_cluster_delete_parses_only_crss_that_ask_for_cleanup_and_once(
    compiles: Compiles,
) -> None:
    cleans_up = crs_raw("cleans-up", uninstall={"ensure": True, "timeout": "1h"})
    mgmt: Any = await api_with(
        cluster_raw(deleted="2026-01-01T11:59:00Z"),
        cleans_up,
        *(crs_raw(f"plain-{n}") for n in range(5)),
        binding_raw("cleans-up", *(f"plain-{n}" for n in range(5))),
    )
    parsed = ParsedCRSs()
    for _ in range(2):
        answer = await hook_status(mgmt, CLUSTER_API, cluster_raw(), NOW, parsed=parsed)
        assert answer == (HOOK_RETRY_SECONDS, "crs-controller: removing add-ons of cleans-up")
        assert len(compiles.threads) == 1


@pytest.mark.parametrize(
    ("deleted", "retry_after"),
    [("2026-01-01T10:00:00Z", 0), ("2026-01-01T11:59:30Z", HOOK_RETRY_SECONDS)],
)
async def test_an_unreadable_binding_holds_the_deletion_until_the_timeout_only(
    deleted: str, retry_after: int
) -> None:
    """Deleted two hours ago, the longest uninstall.timeout (1m) long passed: the
    deletion goes on; deleted 30 s ago: held."""
    uninstall = {"ensure": True, "timeout": "1m"}
    mgmt: Any = await api_with(
        cluster_raw(deleted=deleted),
        crs_raw("cleans-up", uninstall=uninstall, deletionPolicy="Delete"),
        crs_raw("plain"),
        binding_raw(bindings="not a list"),
    )
    answer = await hook_status(mgmt, CLUSTER_API, cluster_raw(), NOW, parsed=ParsedCRSs())
    assert answer[0] == retry_after, answer
    assert "the binding cannot be read" in answer[1]


async def test_the_namespaces_large_sets_do_not_stop_an_unreadable_binding_being_judged() -> None:
    """Each large set is under what one answer may decode to (MemoryKube.values), all
    of them together over it, as one list() holding every page would be."""
    large = [crs_raw(f"large-{n}") for n in range(3)]
    for crs in large:
        crs["metadata"]["annotations"] = {
            "kubectl.kubernetes.io/last-applied-configuration": "," * 600
        }
    mgmt: Any = await api_with(
        cluster_raw(deleted="2026-01-01T11:59:30Z"),
        crs_raw("cleans-up", uninstall={"ensure": True, "timeout": "1m"}),
        *large,
        binding_raw(bindings="not a list"),
    )
    mgmt.values = 1_000
    answer = await hook_status(mgmt, CLUSTER_API, cluster_raw(), NOW, parsed=ParsedCRSs())
    assert answer == (HOOK_RETRY_SECONDS, "crs-controller: the binding cannot be read")


async def test_before_cluster_delete_reads_each_recorded_crs_once() -> None:
    """A binding naming the same CRS 2,000 times (a tenant may write it): one GET of it
    per answer, and the message names it once."""
    mgmt: Any = await api_with(
        cluster_raw(deleted="2026-01-01T11:59:00Z"),
        crs_raw("x", uninstall={"ensure": True, "timeout": "1h"}),
        binding_raw(*(["x"] * 2_000)),
    )
    mgmt.requests.clear()
    answer = await hook_status(mgmt, CLUSTER_API, cluster_raw(), NOW, parsed=ParsedCRSs())
    assert answer == (HOOK_RETRY_SECONDS, "crs-controller: removing add-ons of x")
    gets = [r for r in mgmt.requests if r[0] == "get"]
    assert sorted(gets) == [
        ("get", "Cluster/c1"),
        ("get", "ClusterResourceSet/x"),
        ("get", "ClusterResourceSetBinding/c1"),
    ]


async def test_a_crs_recorded_twice_counts_by_its_last_entry() -> None:
    """As the cluster's reconcile reads the binding: the last entry, with nothing
    applied, is the CRS's, and it has nothing to remove."""
    mgmt: Any = await api_with(
        cluster_raw(deleted="2026-01-01T11:59:00Z"),
        crs_raw("x", uninstall={"ensure": True, "timeout": "1h"}),
    )
    entries = binding_raw("x")["spec"]["bindings"] + [{"clusterResourceSetName": "x"}]
    await mgmt.create(binding_raw(bindings=entries))
    answer = await hook_status(mgmt, CLUSTER_API, cluster_raw(), NOW, parsed=ParsedCRSs())
    assert answer == (0, NOTHING_TO_DO)


async def test_many_recorded_crss_are_read_page_by_page_and_a_few_named() -> None:
    """2,000 CRSs recorded, 30 of them holding the deletion: the namespace's CRSs are
    listed instead of 2,000 GETs, and the message names five (each cut) and counts the
    others."""
    long = "n" * 200
    names = [f"{long}-{n:02}" for n in range(30)]
    uninstall = {"ensure": True, "timeout": "1h"}
    holding = [crs_raw(name, uninstall=uninstall, healthCheck={}) for name in names]
    mgmt: Any = await api_with(
        cluster_raw(deleted="2026-01-01T11:59:00Z"),
        *holding,
        binding_raw(*names, *(f"gone-{n}" for n in range(1_970))),
    )
    mgmt.requests.clear()
    retry_after, message = await hook_status(
        mgmt, CLUSTER_API, cluster_raw(), NOW, parsed=ParsedCRSs()
    )
    assert retry_after == HOOK_RETRY_SECONDS
    assert mgmt.requests == [
        ("get", "Cluster/c1"),
        ("get", "ClusterResourceSetBinding/c1"),
        ("list", f"ClusterResourceSet/{NS}"),
    ]
    shown = ", ".join(f"{long[: NAME_SHOWN_CHARS - 1]}…" for _ in range(NAMES_SHOWN))
    assert message == f"crs-controller: removing add-ons of {shown} and 25 more"


async def test_up_to_the_limit_each_recorded_crs_is_read_with_a_get() -> None:
    names = [f"crs-{n:02}" for n in range(GETS_AT_MOST)]
    mgmt: Any = await api_with(
        cluster_raw(deleted="2026-01-01T11:59:00Z"),
        crs_raw("crs-03", uninstall={"ensure": True, "timeout": "1h"}),
        binding_raw(*names),
    )
    mgmt.requests.clear()
    answer = await hook_status(mgmt, CLUSTER_API, cluster_raw(), NOW, parsed=ParsedCRSs())
    assert answer == (HOOK_RETRY_SECONDS, "crs-controller: removing add-ons of crs-03")
    assert [r for r in mgmt.requests if r[0] == "list"] == []
    assert len(mgmt.requests) == 2 + GETS_AT_MOST


async def test_a_recorded_name_no_crs_can_have_holds_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A binding (tenants can write one) naming a CRS ``a/b``: the API client refuses
    to build a path from it, no CRS has that name, so it holds nothing and the others
    are still read."""
    mgmt: Any = await api_with(
        cluster_raw(deleted="2026-01-01T11:59:00Z"),
        crs_raw("x", uninstall={"ensure": True, "timeout": "1h"}),
        binding_raw("a/b", "x"),
    )
    read = mgmt.get

    async def strict(api_version: str, kind: str, name: str, namespace: str | None = None) -> Any:
        if "/" in name:
            raise InvalidObjectName("a name must be one path segment")
        return await read(api_version, kind, name, namespace)

    monkeypatch.setattr(mgmt, "get", strict)
    answer = await hook_status(mgmt, CLUSTER_API, cluster_raw(), NOW, parsed=ParsedCRSs())
    assert answer == (HOOK_RETRY_SECONDS, "crs-controller: removing add-ons of x")
