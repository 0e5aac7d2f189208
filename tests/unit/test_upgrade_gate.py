"""The upgrade gate (``spec.gateUpgrades``): the pure decision (``core.state.upgrade_gate``)
as a table — which CRSs gate a cluster, which resources a version needs, when an entry
counts as applied (and Ready, with healthCheck.wait) — and the hooks' answer read
from the API (``engine.reconcile.hook.upgrade_status``) on an in-memory API, driven
through the extension's ``answer`` with Cluster API's request JSON, including a read
that fails (a retry, never 0) and a request without a version (Failure); the
namespace's large sets, read page by page, do not add up to a refused LIST."""

from __future__ import annotations

from typing import Any

import pytest

from crs_controller.app.extension import (
    AFTER_CONTROL_PLANE_UPGRADE,
    BEFORE_CLUSTER_UPGRADE,
    BEFORE_WORKERS_UPGRADE,
    HOOKS_API,
    RETRY_ON_ERROR_SECONDS,
    Hook,
    answer,
    asks,
)
from crs_controller.core.api.clusters import PAUSED_ANNOTATION
from crs_controller.core.api.models import API_VERSION, CRSBinding
from crs_controller.core.spec.objects import parse_cluster, parse_crs
from crs_controller.core.state.upgrade_gate import Go, Hold, describe, gate, required
from crs_controller.core.versions.ranges import parse_version
from crs_controller.engine.io.parsed_crss import ParsedCRSs
from crs_controller.engine.reconcile.hook import upgrade_status

from .memory_kube import CLUSTER_API, MemoryKube

NS = "default"
V133 = ">=1.33.0, <1.34.0"
V134 = ">=1.34.0, <1.35.0"


def version(text: str) -> Any:
    parsed = parse_version(text)
    assert parsed is not None
    return parsed


def crs_raw(
    name: str = "cpi",
    *,
    resources: tuple[tuple[str, str | None], ...] = (("cpi-1-33", V133), ("cpi-1-34", V134)),
    gate_upgrades: bool = True,
    wait: bool = False,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    generation: int = 2,
) -> dict[str, Any]:
    refs = []
    for source, versions in resources:
        ref: dict[str, Any] = {"kind": "ConfigMap", "name": source}
        if versions is not None:
            ref["kubernetesVersions"] = versions
        refs.append(ref)
    spec: dict[str, Any] = {
        "clusterSelector": {"matchLabels": labels or {"cpi": "on"}},
        "resources": refs,
        "mode": "Reconcile",
        "gateUpgrades": gate_upgrades,
    }
    if wait:
        spec["healthCheck"] = {"wait": True}
    meta: dict[str, Any] = {"name": name, "namespace": NS, "generation": generation}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": API_VERSION, "kind": "ClusterResourceSet", "metadata": meta, "spec": spec}


def cluster_raw(labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": CLUSTER_API,
        "kind": "Cluster",
        "metadata": {"name": "work-1", "namespace": NS, "labels": labels or {"cpi": "on"}},
        "spec": {"topology": {"class": "quick-start", "version": "v1.34.0"}},
        "status": {"controlPlaneReady": True},
    }


def entry_raw(
    crs: str = "cpi",
    applied: dict[str, bool] | None = None,
    outcome: dict[str, Any] | None = None,
) -> dict[str, Any]:
    resources = [
        {"kind": "ConfigMap", "name": source, "hash": "h", "applied": ok}
        for source, ok in (applied or {}).items()
    ]
    raw: dict[str, Any] = {"clusterResourceSetName": crs, "resources": resources}
    if outcome is not None:
        raw["outcome"] = outcome
    return raw


READY = {"reason": "Applied", "ready": True, "observedGeneration": 2}


def decide(
    crss: list[dict[str, Any]], entries: list[dict[str, Any]], at: str = "v1.34.0"
) -> Go | Hold:
    parsed = {e["clusterResourceSetName"]: CRSBinding.model_validate(e) for e in entries}
    cluster = parse_cluster(cluster_raw())
    return gate(cluster, [parse_crs(c) for c in crss], parsed, version(at))


@pytest.mark.parametrize(
    ("crss", "entries", "expected"),
    [
        ([], [], Go()),
        ([crs_raw(gate_upgrades=False)], [], Go()),
        ([crs_raw(labels={"cpi": "off"})], [], Go()),
        ([crs_raw(annotations={PAUSED_ANNOTATION: "true"})], [], Go()),
        ([crs_raw()], [], Hold(("cpi",))),
        ([crs_raw()], [entry_raw(applied={"cpi-1-33": True})], Hold(("cpi",))),
        ([crs_raw()], [entry_raw(applied={"cpi-1-34": False})], Hold(("cpi",))),
        ([crs_raw()], [entry_raw(applied={"cpi-1-34": True})], Go()),
        # Outside its range, a resource is not required (nor its absence a hold).
        ([crs_raw(resources=(("cpi-1-33", V133),))], [], Go()),
        ([crs_raw(resources=(("cpi-1-33", V133),), wait=True)], [], Go()),
        # Without a range, a resource is required at every version.
        ([crs_raw(resources=(("common", None), ("cpi-1-34", V134)))],
         [entry_raw(applied={"cpi-1-34": True})], Hold(("cpi",))),
        ([crs_raw(resources=(("common", None), ("cpi-1-34", V134)))],
         [entry_raw(applied={"common": True, "cpi-1-34": True})], Go()),
        # healthCheck.wait: applied is not enough, the outcome must be Ready for this
        # generation.
        ([crs_raw(wait=True)], [entry_raw(applied={"cpi-1-34": True})], Hold(("cpi",))),
        ([crs_raw(wait=True)],
         [entry_raw(applied={"cpi-1-34": True}, outcome={**READY, "ready": False})],
         Hold(("cpi",))),
        ([crs_raw(wait=True)],
         [entry_raw(applied={"cpi-1-34": True}, outcome={**READY, "observedGeneration": 1})],
         Hold(("cpi",))),
        ([crs_raw(wait=True)],
         [entry_raw(applied={"cpi-1-34": True}, outcome={"reason": "ApplyFailed"})],
         Hold(("cpi",))),
        ([crs_raw(wait=True)], [entry_raw(applied={"cpi-1-34": True}, outcome=READY)], Go()),
        # Every gating CRS is named, in order; one done does not hide another.
        ([crs_raw("b-cni"), crs_raw("a-csi"), crs_raw("c-done")],
         [entry_raw("c-done", applied={"cpi-1-34": True})], Hold(("a-csi", "b-cni"))),
    ],
    ids=[
        "no-crs",
        "not-gating",
        "not-selecting",
        "paused",
        "no-entry",
        "only-the-old-version-applied",
        "matching-resource-failed",
        "matching-resource-applied",
        "outside-range-not-required",
        "outside-range-with-wait",
        "rangeless-missing",
        "rangeless-applied",
        "wait-no-outcome",
        "wait-not-ready",
        "wait-older-generation",
        "wait-failed",
        "wait-ready",
        "several",
    ],
)  # fmt: skip
def test_the_gate(
    crss: list[dict[str, Any]], entries: list[dict[str, Any]], expected: Go | Hold
) -> None:
    assert decide(crss, entries) == expected


def test_the_version_decides_which_resources_are_required() -> None:
    crs = parse_crs(crs_raw(resources=(("common", None), ("cpi-1-33", V133), ("cpi-1-34", V134))))
    assert required(crs, version("v1.33.2")) == {("ConfigMap", "common"), ("ConfigMap", "cpi-1-33")}
    assert required(crs, version("v1.34.0")) == {("ConfigMap", "common"), ("ConfigMap", "cpi-1-34")}
    assert required(crs, version("v1.36.0")) == {("ConfigMap", "common")}
    # The same entry lets one version through and holds the next.
    entries = [entry_raw(applied={"cpi-1-33": True})]
    assert decide([crs_raw()], entries, "v1.33.2") == Go()
    assert decide([crs_raw()], entries, "v1.34.0") == Hold(("cpi",))


def test_the_message_names_crss_and_the_version_only() -> None:
    held = describe(Hold(("a-csi", "b-cni")), version("v1.34.0"))
    assert "a-csi, b-cni" in held
    assert "v1.34.0" in held
    assert "v1.34.0" in describe(Go(), version("v1.34.0"))


# -- the answer, read from the API ---------------------------------------------------


def hook_request(hook: Hook, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "apiVersion": HOOKS_API,
        "kind": f"{hook.name}Request",
        "cluster": cluster_raw(),
    }
    if hook is AFTER_CONTROL_PLANE_UPGRADE:
        base["kubernetesVersion"] = "v1.34.0"
    else:
        base |= {"fromKubernetesVersion": "v1.33.2", "toKubernetesVersion": "v1.34.0"}
    return base | fields


async def noop_status(cluster: dict[str, Any]) -> tuple[int, str]:
    raise AssertionError("BeforeClusterDelete was not asked")


async def ask(mgmt: MemoryKube, hook: Hook, **fields: Any) -> dict[str, Any]:
    api: Any = mgmt

    async def gate_from_api(cluster: dict[str, Any], at: Any, before: bool) -> tuple[int, str]:
        return await upgrade_status(
            api, CLUSTER_API, cluster, at, parsed=ParsedCRSs(), before=before
        )

    served = asks(noop_status, gate_from_api)
    return await answer(hook_request(hook, **fields), hook, served[hook])


async def api_with(*objs: dict[str, Any]) -> MemoryKube:
    mgmt = MemoryKube("mgmt")
    for obj in objs:
        await mgmt.create(obj)
    return mgmt


def binding(*entries: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterResourceSetBinding",
        "metadata": {"name": "work-1", "namespace": NS},
        "spec": {"clusterName": "work-1", "bindings": list(entries)},
    }


@pytest.mark.parametrize("hook", [AFTER_CONTROL_PLANE_UPGRADE, BEFORE_WORKERS_UPGRADE])
async def test_the_hooks_hold_until_the_binding_shows_the_version_applied(hook: Hook) -> None:
    mgmt = await api_with(cluster_raw(), crs_raw(wait=True))
    held = await ask(mgmt, hook)
    assert held["status"] == "Success"
    assert held["retryAfterSeconds"] > 0
    assert "cpi" in held["message"]
    await mgmt.create(binding(entry_raw(applied={"cpi-1-34": True}, outcome=READY)))
    assert (await ask(mgmt, hook))["retryAfterSeconds"] == 0


async def test_workers_are_gated_on_the_first_step_they_take() -> None:
    mgmt = await api_with(cluster_raw(), crs_raw(), binding(entry_raw(applied={"cpi-1-34": True})))
    steps = [{"version": "v1.34.0"}, {"version": "v1.35.0"}]
    response = await ask(
        mgmt, BEFORE_WORKERS_UPGRADE, toKubernetesVersion="v1.35.0", workersUpgrades=steps
    )
    assert response["retryAfterSeconds"] == 0
    response = await ask(mgmt, BEFORE_WORKERS_UPGRADE, toKubernetesVersion="v1.35.0")
    assert response["retryAfterSeconds"] == 0  # no resource applies at 1.35
    response = await ask(mgmt, BEFORE_WORKERS_UPGRADE, toKubernetesVersion="v1.33.9")
    assert response["retryAfterSeconds"] > 0  # cpi-1-33 is not applied


async def test_no_gating_crs_answers_zero_without_reading_the_binding() -> None:
    mgmt = await api_with(cluster_raw(), crs_raw(gate_upgrades=False))
    response = await ask(mgmt, AFTER_CONTROL_PLANE_UPGRADE)
    assert response["retryAfterSeconds"] == 0
    assert ("get", "ClusterResourceSetBinding/work-1") not in mgmt.requests


async def test_a_binding_the_model_refuses_holds_a_gating_crs() -> None:
    broken = binding(entry_raw(applied={"cpi-1-34": True}))
    broken["spec"]["bindings"][0]["resources"][0]["kind"] = "Deployment"
    mgmt = await api_with(cluster_raw(), crs_raw(), broken)
    assert (await ask(mgmt, AFTER_CONTROL_PLANE_UPGRADE))["retryAfterSeconds"] > 0


async def test_a_cluster_that_is_gone_is_not_held() -> None:
    mgmt = await api_with(crs_raw())
    assert (await ask(mgmt, AFTER_CONTROL_PLANE_UPGRADE))["retryAfterSeconds"] == 0


@pytest.mark.parametrize("hook", [AFTER_CONTROL_PLANE_UPGRADE, BEFORE_WORKERS_UPGRADE])
async def test_a_failed_read_asks_for_a_retry_never_zero(hook: Hook) -> None:
    mgmt = await api_with(cluster_raw(), crs_raw())
    mgmt.down = True
    response = await ask(mgmt, hook)
    assert response["status"] == "Success"
    assert response["retryAfterSeconds"] == RETRY_ON_ERROR_SECONDS > 0


@pytest.mark.parametrize(
    ("hook", "fields"),
    [
        (AFTER_CONTROL_PLANE_UPGRADE, {"kubernetesVersion": "next"}),
        (AFTER_CONTROL_PLANE_UPGRADE, {"kubernetesVersion": None}),
        (BEFORE_WORKERS_UPGRADE, {"toKubernetesVersion": "1.34"}),
        (BEFORE_WORKERS_UPGRADE, {"workersUpgrades": [{"version": ""}]}),
    ],
)
async def test_a_request_without_a_version_fails(hook: Hook, fields: dict[str, Any]) -> None:
    mgmt = await api_with(cluster_raw(), crs_raw())
    response = await ask(mgmt, hook, **fields)
    assert response["status"] == "Failure"
    assert "retryAfterSeconds" not in response
    assert mgmt.requests == [("create", "Cluster/work-1"), ("create", "ClusterResourceSet/cpi")]


@pytest.mark.parametrize(
    ("target", "held"),
    [("v1.35.0", True), ("v1.34.2", False), ("v1.33.9", False), ("v1.36.0-rc.1", True)],
)
async def test_an_upgrade_to_a_version_without_a_resource_is_held_before_it_starts(
    target: str, held: bool
) -> None:
    # No binding at all: BeforeClusterUpgrade asks whether a build exists, not whether
    # it is applied (the later hooks do).
    mgmt = await api_with(cluster_raw(), crs_raw())
    response = await ask(mgmt, BEFORE_CLUSTER_UPGRADE, toKubernetesVersion=target)
    assert response["status"] == "Success"
    assert (response["retryAfterSeconds"] > 0) is held
    if held:
        assert "cpi" in response["message"]
        assert "kubernetesVersions" in response["message"]
    assert ("get", "ClusterResourceSetBinding/work-1") not in mgmt.requests


async def test_a_crs_that_does_not_gate_never_holds_an_upgrade_to_start() -> None:
    mgmt = await api_with(cluster_raw(), crs_raw(gate_upgrades=False))
    response = await ask(mgmt, BEFORE_CLUSTER_UPGRADE, toKubernetesVersion="v1.35.0")
    assert response["retryAfterSeconds"] == 0


async def test_the_namespaces_large_sets_do_not_stop_the_gate() -> None:
    """Each large set is under what one answer may decode to (MemoryKube.values), the
    three together over it, as one list() holding every page would be."""
    note = {"kubectl.kubernetes.io/last-applied-configuration": "," * 600}
    large = [crs_raw(f"large-{n}", gate_upgrades=False, annotations=note) for n in range(3)]
    applied = binding(entry_raw(applied={"cpi-1-34": True}, outcome=READY))
    mgmt = await api_with(cluster_raw(), crs_raw(wait=True), applied, *large)
    mgmt.values = 1_000
    assert (await ask(mgmt, AFTER_CONTROL_PLANE_UPGRADE))["retryAfterSeconds"] == 0
