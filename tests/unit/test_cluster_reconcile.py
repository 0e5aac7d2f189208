"""The cluster reconcile's decisions against in-memory clients (``memory_kube``): a
first pass applies and records; a second pass with nothing changed writes nothing;
a changed source is reapplied in Reconcile mode and ignored in ApplyOnce; an
unreachable cluster and an unexpected error become that cluster's outcome; a paused
Cluster is left alone; a CRS the model refuses is skipped while another converges.
The same behaviours are checked end to end on real servers in tests/integration."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from structlog.testing import capture_logs

from crs_controller.core.api.clusters import PAUSED_ANNOTATION
from crs_controller.core.api.models import API_VERSION
from crs_controller.core.errors import AnswerTooLarge, APIError, Unreachable
from crs_controller.core.rollout.plan import Plan
from crs_controller.engine.memory.budget import Budget
from crs_controller.engine.memory.notes import QUIET_SECONDS, Announcements
from crs_controller.engine.memory.outcomes import Outcomes
from crs_controller.engine.reconcile.result import Wake, crs_key
from crs_controller.engine.reconcile.rollout import revision_of, source_hashes

from .builders import (
    NS,
    Obj,
    configmap_source,
    crs,
    outcome,
    payload,
    reconcile,
    world_with,
)
from .fake_clock import FakeClock
from .memory_kube import CLUSTER_API, World


async def test_a_first_pass_applies_records_and_a_second_writes_nothing() -> None:
    world = await world_with(crs("a", "src"))
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    result = await reconcile(world)
    assert ("apply", "ConfigMap/addon") in workload.writes()
    assert outcome(world, "a")[0] == "Applied"
    assert world.bindings.get(NS, "c1") is not None
    assert not result.retry

    workload.requests.clear()
    world.mgmt.requests.clear()
    await reconcile(world)
    assert workload.writes() == []
    assert [w for w in world.mgmt.writes() if "Binding" in w[1]] == []


@pytest.mark.parametrize(("mode", "reapplied"), [("Reconcile", True), ("ApplyOnce", False)])
async def test_a_changed_source_is_reapplied_only_in_reconcile_mode(
    mode: str, reapplied: bool
) -> None:
    world = await world_with(crs("a", "src", mode=mode))
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    source = await world.mgmt.get("v1", "ConfigMap", "src", NS)
    assert source is not None
    source["data"] = configmap_source("src", payload("addon", "2"))["data"]
    await world.update(source)
    workload.requests.clear()

    await reconcile(world)
    assert (("apply", "ConfigMap/addon") in workload.writes()) is reapplied
    live = await workload.get("v1", "ConfigMap", "addon", "default")
    assert live is not None and live["data"] == {"v": "2" if reapplied else "1"}


async def test_an_edit_of_one_object_sends_that_object_only() -> None:
    """Per-object hashes: of three objects only the edited one goes out again; a
    fourth that joins is sent; one that leaves is not touched (Orphan policy)."""
    three = [payload("one"), payload("two"), payload("three")]
    world = await world_with(crs("a", "src"), mode_source=configmap_source("src", *three))
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    assert len(workload.writes()) == 3

    async def edit(*objects: Obj) -> list[tuple[str, str]]:
        source = await world.mgmt.get("v1", "ConfigMap", "src", NS)
        assert source is not None
        source["data"] = configmap_source("src", *objects)["data"]
        await world.update(source)
        workload.requests.clear()
        await reconcile(world)
        return workload.writes()

    assert await edit(payload("one"), payload("two", "2"), payload("three")) == [
        ("apply", "ConfigMap/two")
    ]
    assert await edit(payload("one"), payload("two", "2"), payload("three"), payload("four")) == [
        ("apply", "ConfigMap/four")
    ]
    assert await edit(payload("one"), payload("two", "2"), payload("four")) == []
    entry = world.bindings.get(NS, "c1")
    assert entry is not None
    inventory = entry.entries()["a"].resources[0].objects
    assert sorted(o.name for o in inventory) == ["four", "one", "two"]
    assert all(o.hash for o in inventory)


async def test_drift_is_read_with_one_list_per_kind_and_a_correction_sends_everything() -> None:
    three = [payload("one"), payload("two"), payload("three")]
    spec = {"driftDetection": "Generation", "driftCheckInterval": "1m"}
    world = await world_with(crs("a", "src", **spec), mode_source=configmap_source("src", *three))
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    clock = world.ctx.clock
    assert isinstance(clock, FakeClock)

    clock.advance(61)
    workload.requests.clear()
    await reconcile(world)  # a check, nothing changed: one LIST, no GET, no write
    assert workload.requests == [("list", "ConfigMap/default")]

    await workload.delete("v1", "ConfigMap", "two", "default")
    clock.advance(61)
    workload.requests.clear()
    await reconcile(world)  # one object gone: the resource is reapplied whole
    assert workload.requests[0] == ("list", "ConfigMap/default")
    assert sorted(workload.writes()) == [
        ("apply", "ConfigMap/one"),
        ("apply", "ConfigMap/three"),
        ("apply", "ConfigMap/two"),
    ]


async def test_a_shortened_drift_interval_takes_effect_at_once() -> None:
    """Edited from 1h to 1m, the next check comes a minute after the last one, not
    when the hour is over."""
    spec = {"driftDetection": "Generation", "driftCheckInterval": "1h"}
    world = await world_with(crs("a", "src", **spec))
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    edited = await world.mgmt.get(API_VERSION, "ClusterResourceSet", "a", NS)
    assert edited is not None
    edited["spec"]["driftCheckInterval"] = "1m"
    edited["metadata"]["generation"] = 2
    await world.update(edited)
    clock = world.ctx.clock
    assert isinstance(clock, FakeClock)
    result = await reconcile(world)
    assert result.requeue_after is not None and result.requeue_after <= 60

    clock.advance(61)
    workload.requests.clear()
    await reconcile(world)
    assert workload.requests == [("list", "ConfigMap/default")]


async def test_an_unreachable_cluster_is_its_outcome_and_is_retried() -> None:
    world = await world_with(crs("a", "src"))
    world.ctx.workloads.clients["c1"].down = True  # type: ignore[attr-defined]
    result = await reconcile(world)
    reason, message = outcome(world, "a")
    assert reason == "ClusterUnreachable"
    assert "ConnectError" in message
    assert result.retry


async def test_an_unexpected_error_in_a_pass_is_that_pairs_outcome() -> None:
    world = await world_with(crs("a", "src"))
    world.ctx.workloads.clients["c1"].fail_with = KeyError("metadata")  # type: ignore[attr-defined]
    result = await reconcile(world)
    assert outcome(world, "a") == ("ApplyFailed", "unexpected KeyError; see the controller log")
    assert result.retry


async def test_an_unexpected_error_building_a_client_is_the_clusters_outcome() -> None:
    world = await world_with(crs("a", "src"))

    async def broken(namespace: str, cluster: str, secret: Obj) -> Any:
        raise RuntimeError("can't start new thread")

    world.ctx.workloads.get = broken  # type: ignore[method-assign]
    with capture_logs() as logs:
        result = await reconcile(world)
    message = "unexpected RuntimeError; see the controller log"
    assert outcome(world, "a") == ("ClusterUnreachable", message)
    assert result.retry
    assert [e["event"] for e in logs if e.get("exc_info")] == ["workload client not built"]


async def test_a_paused_cluster_is_left_alone() -> None:
    world = await world_with(crs("a", "src"), paused=True)
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    assert workload.requests == []
    assert world.ctx.outcomes.get(NS, "a", "c1") is None
    assert world.bindings.get(NS, "c1") is None


@pytest.mark.parametrize(("env", "read"), [("prod", True), ("dev", False)])
async def test_a_cluster_no_crs_selects_has_its_kubeconfig_left_unread(
    env: str, read: bool
) -> None:
    world = await world_with(crs("a", "src", clusterSelector={"matchLabels": {"env": env}}))
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    assert (("get", "Secret/c1-kubeconfig") in world.mgmt.requests) is read
    assert (workload.requests != []) is read
    assert (world.bindings.get(NS, "c1") is not None) is read


async def test_a_crs_the_model_refuses_is_skipped_and_another_converges() -> None:
    world = await world_with(crs("bad", "src", mode="Sometimes"), crs("good", "src"))
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    assert outcome(world, "good")[0] == "Applied"
    assert world.ctx.outcomes.get(NS, "bad", "c1") is None
    assert ("apply", "ConfigMap/addon") in workload.writes()


@pytest.mark.parametrize(("mode", "held"), [("Reconcile", True), ("Sometimes", False)])
async def test_the_hook_holds_a_deletion_only_for_a_crs_that_will_clean_up(
    mode: str, held: bool
) -> None:
    """A CRS the model refuses is never cleaned up for, so it must not hold the
    Cluster's deletion either (it would until uninstall.timeout)."""
    from crs_controller.engine.io.parsed_crss import ParsedCRSs  # noqa: PLC0415
    from crs_controller.engine.reconcile.hook import hook_status  # noqa: PLC0415

    world = await world_with(crs("a", "src", mode=mode, uninstall={"ensure": True}))
    live = await world.mgmt.get(CLUSTER_API, "Cluster", "c1", NS)
    assert live is not None
    live["metadata"]["deletionTimestamp"] = "2099-01-01T00:00:00Z"
    await world.update(live)
    entry = {
        "clusterResourceSetName": "a",
        "resources": [
            {
                "kind": "ConfigMap",
                "name": "src",
                "applied": True,
                "objects": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "addon"}],
            }
        ],
    }
    binding = {
        "apiVersion": API_VERSION,
        "kind": "ClusterResourceSetBinding",
        "metadata": {"name": "c1", "namespace": NS},
        "spec": {"clusterName": "c1", "bindings": [entry]},
    }
    await world.mgmt.create(binding)
    mgmt: Any = world.mgmt
    now = world.ctx.clock.wall()
    retry_after, message = await hook_status(mgmt, CLUSTER_API, live, now, parsed=ParsedCRSs())
    assert (retry_after > 0) is held, message


def restarted(world: World) -> None:
    """What a restart (or a hand-over to another replica) loses: the memory."""
    clock = FakeClock()
    world.ctx = replace(world.ctx, outcomes=Outcomes(), announcements=Announcements(clock))


async def test_a_pass_that_applies_wakes_its_crs_once_the_notes_settle() -> None:
    world = await world_with(crs("a", "src"))
    result = await reconcile(world)
    assert result.wake == {Wake(crs_key(NS, "a"), QUIET_SECONDS)}
    result = await reconcile(world)  # nothing applied, nothing to tell
    assert result.wake == frozenset()


async def test_a_failure_the_binding_records_already_is_not_warned_again() -> None:
    world = await world_with(crs("a", "missing"))
    result = await reconcile(world)
    assert outcome(world, "a")[0] == "ResourceNotFound"
    assert result.wake == {Wake(crs_key(NS, "a"), QUIET_SECONDS)}
    restarted(world)
    result = await reconcile(world)
    assert outcome(world, "a")[0] == "ResourceNotFound"  # looked, and failed the same
    assert result.wake == frozenset()
    assert world.ctx.announcements.wait(NS, "a") is None


async def test_a_dependency_is_done_as_the_binding_records_it_not_as_memory_does() -> None:
    world = await world_with(crs("a", "src"), crs("b", "src", dependsOn=[{"name": "a"}]))
    await reconcile(world)
    assert outcome(world, "b")[0] == "Applied"
    paused = await world.mgmt.get(API_VERSION, "ClusterResourceSet", "a", NS)
    assert paused is not None
    paused["metadata"]["annotations"] = {PAUSED_ANNOTATION: "true"}
    await world.update(paused)
    restarted(world)  # nothing in memory says a is done; its binding entry does
    await reconcile(world)
    assert outcome(world, "b")[0] == "Applied"


def invalid(raw: dict[str, Any]) -> dict[str, Any]:
    """A CRS the API server accepts (any string of 1..200) but the controller refuses."""
    raw["spec"]["resources"][0]["kubernetesVersions"] = "not a range"
    return raw


@pytest.mark.parametrize(
    "dependency",
    [crs("cni", "src"), crs("cni", "src", dependsOn=[{"name": "apps"}])],
    ids=["invalid-dependency", "invalid-member-of-a-cycle"],
)
async def test_a_dependency_the_controller_refuses_holds_its_dependents(
    dependency: dict[str, Any],
) -> None:
    """Which clusters an invalid CRS would select is unknown, and it is never done:
    its dependents wait for it, naming it as invalid (on a cycle too: the invalid
    member frees no other)."""
    world = await world_with(invalid(dependency), crs("apps", "src", dependsOn=[{"name": "cni"}]))
    await reconcile(world)
    assert outcome(world, "apps") == (
        "DependencyNotReady",
        "waiting for ClusterResourceSet cni: its spec is invalid",
    )
    assert world.ctx.workloads.clients["c1"].writes() == []  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "spec",
    [
        {"driftDetection": "Generation", "driftCheckInterval": "1m"},
        {"mode": "Reconcile", "healthCheck": {"wait": True, "timeout": "5m"}},
    ],
    ids=["drift-read", "health-read"],
)
async def test_an_answer_too_large_mid_pass_is_the_clusters_outcome_not_a_crash(
    monkeypatch: pytest.MonkeyPatch, spec: dict[str, Any]
) -> None:
    """A LIST that a server answers with more than the client reads (a drift or a
    health read): the cluster is ClusterUnreachable, saying why, never "unexpected …;
    see the controller log"."""
    world = await world_with(
        crs("a", "src", **spec), mode_source=configmap_source("src", payload("one"))
    )
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]

    async def endless(*args: Any, **kwargs: Any) -> Any:
        raise AnswerTooLarge(
            "cluster c1: GET /api/v1/configmaps: more than 200 pages", limit="pages"
        )

    if "healthCheck" not in spec:
        await reconcile(world)
        assert outcome(world, "a")[0] == "Applied"
    monkeypatch.setattr(workload, "list", endless)
    monkeypatch.setattr(workload, "get", endless)
    clock = world.ctx.clock
    assert isinstance(clock, FakeClock)
    clock.advance(61)
    result = await reconcile(world)
    reason, message = outcome(world, "a")
    assert (reason, result.retry) == ("ClusterUnreachable", True), message
    assert "more than 200 pages" in message


WAIT = {"healthCheck": {"wait": True, "timeout": "5m"}}


@pytest.mark.parametrize(
    "refusal",
    [
        AnswerTooLarge(
            "cluster c1: GET /api/v1/namespaces/default/configmaps: too many values", limit="values"
        ),
        Unreachable(
            "cluster c1: GET /api/v1/namespaces/default/configmaps/one: 503 ServiceUnavailable"
        ),
    ],
    ids=["too-large", "unavailable"],
)
async def test_a_health_read_failing_after_an_apply_keeps_what_was_applied(
    monkeypatch: pytest.MonkeyPatch, refusal: Exception
) -> None:
    """The pass applied ``one``, then the cluster stopped answering the health read:
    the cluster is ClusterUnreachable, and ``one`` stays in the inventory, so when the
    source later holds only ``two``, deletionPolicy Delete removes ``one``."""
    world = await world_with(
        crs("a", "src", deletionPolicy="Delete", **WAIT),
        mode_source=configmap_source("src", payload("one")),
    )
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]

    async def refused(*args: Any, **kwargs: Any) -> Any:
        raise refusal

    with monkeypatch.context() as patched:
        patched.setattr(workload, "get", refused)
        patched.setattr(workload, "list", refused)
        result = await reconcile(world)
    assert ("apply", "ConfigMap/one") in workload.writes()
    reason, message = outcome(world, "a")
    assert (reason, result.retry) == ("ClusterUnreachable", True), message
    assert str(refusal) in message
    entry = world.bindings.get(NS, "c1").entries()["a"]  # type: ignore[union-attr]
    assert [o.name for r in entry.resources for o in r.objects] == ["one"]

    source = await world.mgmt.get("v1", "ConfigMap", "src", NS)
    assert source is not None
    source["data"] = configmap_source("src", payload("two"))["data"]
    await world.update(source)
    await reconcile(world)
    assert ("delete", "ConfigMap/one") in workload.writes()
    assert await workload.get("v1", "ConfigMap", "one", "default") is None
    assert outcome(world, "a")[0] == "Applied"


async def test_a_cluster_lost_midway_through_a_resource_keeps_what_went_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``one`` is applied, then the cluster stops answering at ``two``: ``one`` is in
    the inventory all the same, so deletionPolicy Delete removes it once the source
    holds only ``three``."""
    world = await world_with(
        crs("a", "src", deletionPolicy="Delete"),
        mode_source=configmap_source("src", payload("one"), payload("two")),
    )
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    apply = workload.apply

    async def lost_at_two(obj: Obj, **kwargs: Any) -> Obj:
        if obj["metadata"]["name"] == "two":
            raise Unreachable("cluster c1: PATCH .../configmaps/two: ConnectError")
        return await apply(obj, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(workload, "apply", lost_at_two)
        result = await reconcile(world)
    reason, message = outcome(world, "a")
    assert (reason, result.retry) == ("ClusterUnreachable", True), message
    entry = world.bindings.get(NS, "c1").entries()["a"]  # type: ignore[union-attr]
    assert [o.name for r in entry.resources for o in r.objects] == ["one"]
    assert not entry.resources[0].applied

    source = await world.mgmt.get("v1", "ConfigMap", "src", NS)
    assert source is not None
    source["data"] = configmap_source("src", payload("three"))["data"]
    await world.update(source)
    await reconcile(world)
    assert await workload.get("v1", "ConfigMap", "one", "default") is None
    assert outcome(world, "a")[0] == "Applied"


VALIDATED = {
    "deletionPolicy": "Delete",
    "rollout": {
        "steps": [
            {
                "clusterSelector": {"matchLabels": {"env": "prod"}},
                "validation": {"resources": [{"kind": "ConfigMap", "name": "smoke"}]},
            }
        ]
    },
}


async def plan_for(world: World, *, validate: bool) -> None:
    """The rollout's plan for the sources as they are now: c1 admitted, and asked to
    run the step's validation when ``validate``."""
    the_crs = world.index.crs(NS, "a")
    assert the_crs is not None
    hashes = await source_hashes(world.ctx, the_crs)
    assert hashes is not None
    asked = frozenset({"c1"} if validate else ())
    made = Plan(frozenset({"c1"}), "Progressing", 1, 0, "", None, validate=asked)
    world.ctx.rollouts.set(NS, "a", revision_of(hashes), made)


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (Unreachable("cluster c1: GET /api/v1/namespaces/default/configmaps/probe: 503"), None),
        (KeyError("metadata"), "ApplyFailed"),
    ],
    ids=["unavailable", "unexpected"],
)
async def test_a_validation_failing_after_an_apply_keeps_what_was_applied(
    monkeypatch: pytest.MonkeyPatch, failure: Exception, reason: str | None
) -> None:
    """The pass applied ``one``, then the step's validation could not look (the
    cluster stopped answering, or something unexpected): ``one`` stays in the
    inventory, so when the source later holds only ``two``, deletionPolicy Delete
    removes ``one``."""
    world = await world_with(
        crs("a", "src", **VALIDATED), mode_source=configmap_source("src", payload("one"))
    )
    await world.add(configmap_source("smoke", payload("probe")))
    await plan_for(world, validate=True)
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]

    async def failing(*args: Any, **kwargs: Any) -> Any:
        raise failure

    with monkeypatch.context() as patched:
        patched.setattr(workload, "get", failing)
        result = await reconcile(world)
    assert ("apply", "ConfigMap/one") in workload.writes()
    assert ("apply", "ConfigMap/probe") not in workload.writes()
    found, message = outcome(world, "a")
    assert (found, result.retry) == (reason or "ClusterUnreachable", True), message
    if reason is None:
        assert message == str(failure)
    entry = world.bindings.get(NS, "c1").entries()["a"]  # type: ignore[union-attr]
    assert [o.name for r in entry.resources for o in r.objects] == ["one"]
    assert entry.validation is None

    source = await world.mgmt.get("v1", "ConfigMap", "src", NS)
    assert source is not None
    source["data"] = configmap_source("src", payload("two"))["data"]
    await world.update(source)
    await plan_for(world, validate=False)
    await reconcile(world)
    assert ("delete", "ConfigMap/one") in workload.writes()
    assert await workload.get("v1", "ConfigMap", "one", "default") is None
    assert outcome(world, "a")[0] == "Applied"


async def test_a_health_read_refused_is_waited_for_then_unhealthy_never_a_crash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 403 on the health read (credentials scoped to other objects): that object is
    not Ready, named with the refusal, and past the timeout the cluster is Unhealthy;
    what was applied stays recorded."""
    world = await world_with(
        crs("a", "src", **WAIT), mode_source=configmap_source("src", payload("one"))
    )
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    where = "cluster c1: GET /api/v1/namespaces/default/configmaps/one: 403 Forbidden"

    async def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise APIError(where, status=403, body="the server's own words")

    monkeypatch.setattr(workload, "get", forbidden)
    monkeypatch.setattr(workload, "list", forbidden)
    result = await reconcile(world)
    found = world.ctx.outcomes.get(NS, "a", "c1")
    assert found is not None
    assert (found.reason, found.ready) == ("Applied", False), found.message
    assert found.message == f"waiting for ConfigMap default/one: not readable: {where}"
    assert result.requeue_after is not None and result.requeue_after <= 2.0
    entry = world.bindings.get(NS, "c1").entries()["a"]  # type: ignore[union-attr]
    assert [o.name for r in entry.resources for o in r.objects] == ["one"]

    clock = world.ctx.clock
    assert isinstance(clock, FakeClock)
    clock.advance(301)
    result = await reconcile(world)
    reason, message = outcome(world, "a")
    assert (reason, result.retry) == ("Unhealthy", True), message
    assert message.startswith(f"ConfigMap default/one: not readable: {where}")
    assert "own words" not in message  # the server's text stays out


async def test_the_health_wait_reads_the_applied_objects_and_nothing_else() -> None:
    """The namespace holds 40 other ConfigMaps: the health wait GETs ``one`` alone,
    never a LIST of the namespace (their content is none of its business)."""
    world = await world_with(
        crs("a", "src", **WAIT), mode_source=configmap_source("src", payload("one"))
    )
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    for n in range(40):
        await workload.apply(payload(f"dashboard-{n}"), field_manager="grafana")
    workload.requests.clear()
    await reconcile(world)
    assert outcome(world, "a")[0] == "Applied"
    assert [r for r in workload.requests if r[0] != "apply"] == [("get", "ConfigMap/one")]


async def test_a_drift_answer_of_the_wrong_shape_is_unreachable_and_quotes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server answering a drift LIST with a generation that is no number: the
    cluster is ClusterUnreachable naming the field, and neither the outcome nor the
    log carries what the server wrote there."""
    spec = {"driftDetection": "Generation", "driftCheckInterval": "1m"}
    world = await world_with(crs("a", "src", **spec))
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    bad = {"metadata": {"name": "addon", "namespace": "default", "generation": "token=s3cr3t"}}

    async def listed(*args: Any, **kwargs: Any) -> Any:
        return [bad], "1"

    monkeypatch.setattr(workload, "list", listed)
    clock = world.ctx.clock
    assert isinstance(clock, FakeClock)
    clock.advance(61)
    with capture_logs() as logs:
        result = await reconcile(world)
    reason, message = outcome(world, "a")
    assert (reason, result.retry) == ("ClusterUnreachable", True), message
    assert "metadata.generation is not an integer" in message
    assert "s3cr3t" not in message and "s3cr3t" not in repr(logs)
    assert not [e for e in logs if e["log_level"] == "error"]


class _FreedMeanwhile(Budget):
    """A budget of one held by another cluster, which frees it just after the first
    pair of ``c1`` was told to wait (as another cluster's pass would, concurrently)."""

    def __init__(self) -> None:
        super().__init__(1, FakeClock())
        super().ask((NS, "other"), "x", 1)
        self.freed = False

    def ask(self, cluster: tuple[str, str], crs: str, step: int) -> bool:
        granted = super().ask(cluster, crs, step)
        if not granted and not self.freed:
            self.freed = True
            self.release((NS, "other"), "x")
        return granted


async def test_a_pair_held_for_the_budget_goes_once_its_cluster_got_a_place() -> None:
    world = await world_with(crs("a", "src"), crs("b", "src"))
    await reconcile(world)  # first installs: never held
    source = await world.mgmt.get("v1", "ConfigMap", "src", NS)
    assert source is not None
    source["data"] = configmap_source("src", payload("addon", "2"))["data"]
    await world.update(source)
    budget = _FreedMeanwhile()
    settings = replace(world.ctx.settings, max_updating_clusters=1)
    world.ctx = replace(world.ctx, budget=budget, settings=settings)

    await reconcile(world)
    assert budget.freed  # "a" was told to wait, then "b" got the place
    assert outcome(world, "a")[0] == "Applied"
    assert outcome(world, "b")[0] == "Applied"
    binding = world.bindings.get(NS, "c1")
    assert binding is not None and binding.model is not None
    reasons = {
        e.cluster_resource_set_name: e.outcome.reason
        for e in binding.model.spec.bindings
        if e.outcome
    }
    assert reasons == {"a": "Applied", "b": "Applied"}


async def test_an_object_our_drift_check_recreates_gets_its_ignored_fields_again() -> None:
    # Fields left to others are sent when an object is created; recreated after it
    # went missing, it is created again: whole, not without them.
    two = [payload("kept"), payload("scaled")]
    spec = {
        "driftDetection": "Content",
        "driftCheckInterval": "1m",
        "ignore": [{"target": {"kind": "ConfigMap", "name": "scaled"}, "paths": ["/data/v"]}],
    }
    world = await world_with(crs("a", "src", **spec), mode_source=configmap_source("src", *two))
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    clock = world.ctx.clock
    assert isinstance(clock, FakeClock)
    live = await workload.get("v1", "ConfigMap", "scaled", "default")
    assert live is not None and live["data"] == {"v": "1"}  # created whole

    await workload.delete("v1", "ConfigMap", "scaled", "default")
    clock.advance(61)
    await reconcile(world)  # the drift check finds it missing: created again, whole
    live = await workload.get("v1", "ConfigMap", "scaled", "default")
    assert live is not None and live["data"] == {"v": "1"}
    kept = await workload.get("v1", "ConfigMap", "kept", "default")
    assert kept is not None and kept["data"] == {"v": "1"}
