"""CRS status from per-cluster outcomes (``summarize``): counts, the Ready and
ResourcesApplied conditions (status, reason, message naming the failing cluster),
precedence of resource problems, pending clusters, when observedGeneration moves,
when lastTransitionTime is renewed, and the message length cap."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.core.api.models import (
    BindingOutcome,
    ClusterResourceSetStatus,
    Condition,
    CRSBinding,
    KeptObject,
    RolloutStatus,
    to_api,
)
from crs_controller.core.rollout.plan import ClusterState, Policy, plan
from crs_controller.core.state.deletion_guard import skipped_status
from crs_controller.core.state.status import (
    PAUSED,
    READY,
    RESOURCES_APPLIED,
    Outcome,
    Problem,
    invalid_spec,
    new_problem,
    not_paused,
    outcome_of,
    paused,
    rank,
    summarize,
)

GEN = 4
NOW = datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC)
NOW_TEXT = "2026-11-22T10:00:00Z"
BEFORE_TEXT = "2026-11-20T08:00:00Z"


def applied(generation: int = GEN) -> Outcome:
    return Outcome("Applied", "Applied", "applied 2 resources", generation)


def failed(reason: str = "ApplyFailed", message: str = "DaemonSet x: boom") -> Outcome:
    return Outcome("Failed", reason, message, GEN)


def pending() -> Outcome:
    return Outcome("Pending", "WaitingForControlPlane", "control plane not initialized", GEN)


def status(
    outcomes: list[tuple[str, Outcome | None]],
    problems: list[Problem] | None = None,
    previous: ClusterResourceSetStatus | None = None,
    generation: int = GEN,
) -> ClusterResourceSetStatus:
    return summarize(
        generation=generation,
        outcomes=outcomes,
        resource_problems=problems or [],
        previous=previous or ClusterResourceSetStatus(),
        now=NOW,
    )


def condition(result: ClusterResourceSetStatus, kind: str = READY) -> Condition:
    found = [c for c in result.conditions if c.type == kind]
    assert len(found) == 1
    return found[0]


NOT_FOUND = Problem("ResourceNotFound", "ConfigMap default/calico-addon not found")
WRONG_TYPE = Problem("WrongSecretType", "Secret default/creds has type 'Opaque'")


@pytest.mark.parametrize(
    ("outcomes", "problems", "counts", "ready", "reason"),
    [
        pytest.param([], [], (0, 0, 0), "True", "NoMatchingClusters", id="no clusters"),
        pytest.param(
            [("c1", applied()), ("c2", applied())], [], (2, 2, 0), "True", "Applied", id="all"
        ),
        pytest.param(
            [("c1", applied()), ("c2", failed())],
            [],
            (2, 1, 1),
            "False",
            "ApplyFailed",
            id="one failed",
        ),
        pytest.param(
            [("c1", failed("ClusterUnreachable", "connect timeout"))],
            [],
            (1, 0, 1),
            "False",
            "ClusterUnreachable",
            id="unreachable",
        ),
        pytest.param(
            [("c1", applied()), ("c2", None)],
            [],
            (2, 1, 0),
            "False",
            "WaitingForClusters",
            id="not reconciled yet",
        ),
        pytest.param(
            [("c1", pending()), ("c2", applied())],
            [],
            (2, 1, 0),
            "False",
            "WaitingForClusters",
            id="pending",
        ),
        pytest.param(
            [("c1", pending()), ("c2", failed())],
            [],
            (2, 0, 1),
            "False",
            "ApplyFailed",
            id="a failure outranks pending",
        ),
        pytest.param(
            [("c1", failed("ResourceNotFound", "x")), ("c2", failed("ResourceNotFound", "x"))],
            [NOT_FOUND, WRONG_TYPE],
            (2, 0, 2),
            "False",
            "ResourceNotFound",
            id="resource problem",
        ),
        pytest.param(
            [("c1", applied()), ("c2", failed("ClusterUnreachable", "x")), ("c3", None)],
            [WRONG_TYPE],
            (3, 1, 1),
            "False",
            "WrongSecretType",
            id="resource problems take precedence",
        ),
    ],
)
def test_summary(
    outcomes: list[tuple[str, Outcome | None]],
    problems: list[Problem],
    counts: tuple[int, int, int],
    ready: str,
    reason: str,
) -> None:
    result = status(outcomes, problems)
    assert (result.matching_clusters, result.applied_clusters, result.failed_clusters) == counts
    for kind in (READY, RESOURCES_APPLIED):
        got = condition(result, kind)
        assert (got.status, got.reason) == (ready, reason)
        assert got.observed_generation == GEN
        assert got.message


def test_failure_message_names_the_cluster() -> None:
    result = status([("c1", applied()), ("workload-7", failed(message="DaemonSet x: boom"))])
    message = condition(result).message
    assert "workload-7" in message
    assert "DaemonSet x: boom" in message
    assert "c1" not in message


def test_several_failures_name_the_first_with_the_reason_told_and_count_the_rest() -> None:
    result = status(
        [
            ("c1", failed("ClusterUnreachable", "dial tcp: refused")),
            ("c2", failed()),
            ("c3", failed()),
        ]
    )
    ready = condition(result)
    assert ready.reason == "ApplyFailed"
    assert ready.message == "cluster c2: DaemonSet x: boom (and 2 more clusters)"


def test_every_resource_problem_is_in_the_message() -> None:
    result = status([("c1", failed("ResourceNotFound", "x"))], [NOT_FOUND, WRONG_TYPE])
    message = condition(result).message
    assert NOT_FOUND.message in message
    assert WRONG_TYPE.message in message


def test_pending_message_counts_the_waiting_clusters() -> None:
    result = status([("c1", pending()), ("c2", None), ("c3", applied())])
    assert "2" in condition(result).message


@pytest.mark.parametrize(
    ("outcomes", "observed"),
    [
        pytest.param([], GEN, id="no clusters"),
        pytest.param([("c1", applied()), ("c2", applied())], GEN, id="all current"),
        pytest.param([("c1", applied()), ("c2", failed())], GEN, id="failure, but current"),
        pytest.param([("c1", pending())], GEN, id="pending, but current"),
        pytest.param([("c1", applied()), ("c2", applied(GEN - 1))], 2, id="one stale"),
        pytest.param([("c1", applied()), ("c2", None)], 2, id="one not reconciled"),
    ],
)
def test_observed_generation_moves_only_when_every_outcome_is_current(
    outcomes: list[tuple[str, Outcome | None]], observed: int
) -> None:
    previous = ClusterResourceSetStatus(observed_generation=2)
    assert status(outcomes, previous=previous).observed_generation == observed


def test_observed_generation_stays_unset_until_first_complete_pass() -> None:
    assert status([("c1", None)]).observed_generation is None


def previous_status(ready: str, reason: str) -> ClusterResourceSetStatus:
    return ClusterResourceSetStatus(
        observed_generation=GEN,
        conditions=[
            Condition(
                type=kind,
                status=ready,  # type: ignore[arg-type]
                reason=reason,
                message="before",
                last_transition_time=BEFORE_TEXT,
                observed_generation=GEN,
            )
            for kind in (RESOURCES_APPLIED, READY)
        ],
    )


@pytest.mark.parametrize(
    ("previous", "outcomes", "transition"),
    [
        pytest.param(None, [("c1", applied())], NOW_TEXT, id="first status"),
        pytest.param(
            previous_status("True", "Applied"), [("c1", applied())], BEFORE_TEXT, id="unchanged"
        ),
        pytest.param(
            previous_status("True", "NoMatchingClusters"),
            [("c1", applied())],
            BEFORE_TEXT,
            id="reason changes, status does not",
        ),
        pytest.param(
            previous_status("False", "ApplyFailed"),
            [("c1", failed("ClusterUnreachable", "x"))],
            BEFORE_TEXT,
            id="still failing for another reason",
        ),
        pytest.param(
            previous_status("True", "Applied"), [("c1", failed())], NOW_TEXT, id="now failing"
        ),
        pytest.param(
            previous_status("False", "ApplyFailed"), [("c1", applied())], NOW_TEXT, id="recovered"
        ),
    ],
)
def test_last_transition_time_changes_only_with_the_status(
    previous: ClusterResourceSetStatus | None,
    outcomes: list[tuple[str, Outcome | None]],
    transition: str,
) -> None:
    result = status(outcomes, previous=previous)
    for kind in (READY, RESOURCES_APPLIED):
        assert condition(result, kind).last_transition_time == transition


def test_message_is_capped() -> None:
    long = "x" * 5000
    result = status([("c1", failed(message=long))])
    for kind in (READY, RESOURCES_APPLIED):
        message = condition(result, kind).message
        assert len(message) <= 1000
        assert message.startswith("cluster c1: ")
    problems = [Problem("InvalidManifest", "y" * 600) for _ in range(5)]
    assert len(condition(status([("c1", None)], problems)).message) <= 1000


states = st.sampled_from(["Applied", "Failed", "Pending", None])


@given(
    st.lists(st.tuples(states, st.integers(GEN - 2, GEN)), max_size=12),
    st.booleans(),
)
def test_counts_and_ready_agree(raw: list[tuple[str | None, int]], with_problem: bool) -> None:
    outcomes: list[tuple[str, Outcome | None]] = [
        (f"c{i}", None if state is None else Outcome(state, state, "m", gen))  # type: ignore[arg-type]
        for i, (state, gen) in enumerate(raw)
    ]
    result = status(outcomes, [NOT_FOUND] if with_problem else [])
    states_seen = [state for state, _ in raw]
    assert result.matching_clusters == len(raw)
    assert result.applied_clusters == states_seen.count("Applied")
    assert result.failed_clusters == states_seen.count("Failed")
    ready = condition(result)
    everything_applied = result.applied_clusters == result.matching_clusters
    assert (ready.status == "True") == (everything_applied and not with_problem)
    assert condition(result, RESOURCES_APPLIED).status == ready.status
    assert len(ready.message) <= 1000


def test_status_serializes_with_api_field_names() -> None:
    api = to_api(status([("c1", applied()), ("c2", failed())]))
    assert api["matchingClusters"] == 2
    assert api["appliedClusters"] == 1
    assert api["failedClusters"] == 1
    assert api["observedGeneration"] == GEN
    assert {c["type"] for c in api["conditions"]} == {"Ready", "ResourcesApplied"}
    assert all(c["lastTransitionTime"] == NOW_TEXT for c in api["conditions"])


def test_an_invalid_spec_sets_both_conditions_and_keeps_the_counts() -> None:
    previous = ClusterResourceSetStatus(matching_clusters=3, applied_clusters=2)
    status = invalid_spec(previous, 4, "invalid spec: spec.mode: bad", NOW)
    assert [(c.type, c.status, c.reason) for c in status.conditions] == [
        ("ResourcesApplied", "False", "InvalidSpec"),
        ("Ready", "False", "InvalidSpec"),
    ]
    assert (status.matching_clusters, status.applied_clusters) == (3, 2)
    assert status.observed_generation == 4


BAD_HOUR = "spec.rollout.windows[0]: schedule: Bad hour"
BAD_MINUTE = "spec.rollout.windows[0]: schedule: Bad minute"


def _invalid(
    message: str, previous: ClusterResourceSetStatus | None = None
) -> ClusterResourceSetStatus:
    return invalid_spec(previous or ClusterResourceSetStatus(), GEN, message, NOW)


@pytest.mark.parametrize(
    ("before", "after", "told"),
    [
        (ClusterResourceSetStatus(), _invalid(BAD_HOUR), BAD_HOUR),
        (status([("c1", applied())]), _invalid(BAD_HOUR), BAD_HOUR),
        (_invalid(BAD_HOUR), _invalid(BAD_HOUR), None),
        (_invalid(BAD_HOUR), _invalid(BAD_MINUTE), BAD_MINUTE),
        (_invalid(BAD_HOUR), status([("c1", applied())]), None),
        (ClusterResourceSetStatus(), status([("c1", failed())]), None),
    ],
    ids=["first", "after-applied", "same", "another", "fixed", "not-a-spec-problem"],
)
def test_a_spec_problem_is_new_only_when_the_status_did_not_hold_it(
    before: ClusterResourceSetStatus, after: ClusterResourceSetStatus, told: str | None
) -> None:
    assert new_problem(before, after) == told


LATER = datetime(2026, 11, 22, 11, 0, 0, tzinfo=UTC)


def test_a_paused_crs_is_ready_unknown_and_keeps_the_rest() -> None:
    before = not_paused(status([("c1", applied())]), ClusterResourceSetStatus(), GEN, NOW)
    before.revision = "xxh3:1"
    held = paused(before, GEN + 1, LATER)
    shown = [(c.type, c.status, c.reason) for c in held.conditions]
    assert shown == [
        (RESOURCES_APPLIED, "True", "Applied"),
        (READY, "Unknown", "Paused"),
        (PAUSED, "True", "Paused"),
    ]
    ready = next(c for c in held.conditions if c.type == READY)
    assert "cluster.x-k8s.io/paused" in ready.message
    assert (ready.last_transition_time, ready.observed_generation) == ("2026-11-22T11:00:00Z", 5)
    # Nothing was done meanwhile: what it had reached stays as it was.
    assert (held.observed_generation, held.revision, held.applied_clusters) == (GEN, "xxh3:1", 1)
    assert paused(held, GEN + 1, LATER + (LATER - NOW)) == held  # looked again: unchanged


def test_unpaused_the_paused_condition_turns_false() -> None:
    held = paused(ClusterResourceSetStatus(), GEN, NOW)
    folded = not_paused(status([("c1", applied())]), held, GEN, LATER)
    shown = [(c.type, c.status, c.reason) for c in folded.conditions]
    assert shown == [
        (RESOURCES_APPLIED, "True", "Applied"),
        (READY, "True", "Applied"),
        (PAUSED, "False", "NotPaused"),
    ]
    assert folded.conditions[-1].last_transition_time == "2026-11-22T11:00:00Z"
    again = not_paused(folded, folded, GEN, LATER + (LATER - NOW))
    assert again.conditions[-1] == folded.conditions[-1]  # its time moves with it only


# --- health checks and rollouts ---------------------------------------------------------


def waiting_ready() -> Outcome:
    return Outcome(
        "Applied", "Applied", "waiting for Deployment a/b: 0/1 available", GEN, ready=False
    )


def held() -> Outcome:
    return Outcome("Progressing", "Progressing", "waiting for its rollout step", GEN)


@pytest.mark.parametrize(
    ("outcomes", "rollout", "applied_reason", "ready_reason"),
    [
        # Applied everywhere, objects not Ready yet: ResourcesApplied, not Ready.
        ([("a", applied()), ("b", waiting_ready())], None, "Applied", "Progressing"),
        # Held back by the rollout's steps.
        (
            [("a", applied()), ("b", held())],
            ("Progressing", "step 1/2"),
            "Progressing",
            "Progressing",
        ),
        ([("a", applied()), ("b", held())], ("Paused", "paused"), "RolloutPaused", "RolloutPaused"),
        (
            [("a", failed("Unhealthy")), ("b", held())],
            ("Halted", "halted"),
            "Unhealthy",
            "Unhealthy",
        ),
        ([("a", applied()), ("b", held())], ("Halted", "halted"), "RolloutHalted", "RolloutHalted"),
        # Everything applied and Ready, but a soak still runs: not Ready yet.
        (
            [("a", applied()), ("b", applied())],
            ("Progressing", "soaking"),
            "Applied",
            "Progressing",
        ),
        ([("a", applied()), ("b", applied())], ("Complete", "complete"), "Applied", "Applied"),
        # A source problem comes first, whatever the rollout says.
        ([("a", held())], ("Paused", "paused"), "RolloutPaused", "RolloutPaused"),
    ],
    ids=[
        "not-ready",
        "held",
        "paused",
        "failure-first",
        "halted",
        "soaking",
        "complete",
        "only-held",
    ],
)
def test_health_and_rollout_reasons(
    outcomes: list[tuple[str, Outcome | None]],
    rollout: tuple[str, str] | None,
    applied_reason: str,
    ready_reason: str,
) -> None:
    result = summarize(
        generation=GEN,
        outcomes=outcomes,
        resource_problems=[],
        previous=ClusterResourceSetStatus(),
        now=NOW,
        rollout=rollout,
    )
    assert condition(result, RESOURCES_APPLIED).reason == applied_reason
    assert condition(result, READY).reason == ready_reason
    # A cluster held back keeps what it had: it counts as applied.
    assert result.applied_clusters == sum(1 for _, o in outcomes if o and o.state != "Failed")


def test_messages_reach_the_conditions_without_control_characters() -> None:
    hostile = "ConfigMap default/x\x1b[31m\r\nforged\u202e: 422 Invalid"
    shown = "ConfigMap default/x\\x1b[31m\\r\\nforged\\u202e: 422 Invalid"
    result = status([("c1", failed(message=hostile))])
    for kind in (READY, RESOURCES_APPLIED):
        assert condition(result, kind).message == f"cluster c1: {shown}"
    problems = [Problem("InvalidManifest", "key \x1b]0;title\x07 bad")]
    message = condition(status([("c1", None)], problems)).message
    assert message == "key \\x1b]0;title\\x07 bad"
    spec = invalid_spec(ClusterResourceSetStatus(), GEN, "spec.x: \x9b2J", NOW)
    assert condition(spec).message == "spec.x: \\x9b2J"


@pytest.mark.parametrize(
    ("reason", "ready", "state", "is_ready"),
    [
        ("Applied", None, "Applied", True),
        ("Applied", False, "Applied", False),  # applied, objects not Ready yet
        ("Progressing", False, "Applied", False),  # the same, as earlier releases wrote it
        ("Progressing", None, "Progressing", True),  # held by the rollout
    ],
)
def test_a_recorded_outcome_reads_back_whatever_release_wrote_it(
    reason: str, ready: bool | None, state: str, is_ready: bool
) -> None:
    recorded = CRSBinding(
        cluster_resource_set_name="cni",
        outcome=BindingOutcome(reason=reason, message="m", observed_generation=GEN, ready=ready),
    )
    outcome = outcome_of(recorded)
    assert outcome is not None and (outcome.state, outcome.ready) == (state, is_ready)


@pytest.mark.parametrize(
    ("outcome", "reason", "words"),
    [
        (
            Outcome("Waiting", "WaitingForVersion", "ConfigMap/cpi follow the version", GEN),
            "WaitingForVersion",
            "cluster b: ConfigMap/cpi follow the version",
        ),
        (
            Outcome("Waiting", "DependencyNotReady", "waits for cni", GEN),
            "DependencyNotReady",
            "cluster b: waits for cni",
        ),
        (
            Outcome("Progressing", "UpgradeInProgress", "upgrading", GEN),
            "UpgradeInProgress",
            "1 clusters wait for Cluster API's upgrade to end (b)",
        ),
    ],
    ids=["version", "dependency", "upgrade"],
)
def test_a_waiting_or_held_cluster_gives_its_own_reason(
    outcome: Outcome, reason: str, words: str
) -> None:
    result = status([("a", applied()), ("b", outcome)])
    for kind in (READY, RESOURCES_APPLIED):
        assert condition(result, kind).reason == reason
        assert condition(result, kind).message == words


@pytest.mark.parametrize(
    ("reason", "state"),
    [("WaitingForVersion", "Waiting"), ("UpgradeInProgress", "Progressing")],
)
def test_version_and_upgrade_outcomes_read_back_from_the_binding(reason: str, state: str) -> None:
    entry = CRSBinding(
        cluster_resource_set_name="cpi",
        outcome=BindingOutcome(reason=reason, message="m", observed_generation=GEN),
    )
    read = outcome_of(entry)
    assert read is not None
    assert (read.state, read.reason) == (state, reason)


# --- a fleet failing everywhere: the status stays small -------------------------------

STATUS_LIMIT = 64 * 1024  # far under etcd's object limit, whatever the fleet
FLEET = 10_000
REASONS = ["ApplyFailed", "ClusterUnreachable", "InvalidManifest", "HealthCheckFailed"]


@settings(max_examples=5, deadline=None)
@given(
    st.text(min_size=1, max_size=3000),
    st.integers(1, 63),
    st.lists(st.text(max_size=2000), max_size=30),
)
def test_every_cluster_failing_keeps_the_status_under_64_kib(
    message: str, name_length: int, problems: list[str]
) -> None:
    """Counts, and a bounded sample of clusters with reasons (the first failing one by
    name, the first held ones); every other cluster's reason stays in its binding."""
    names = [f"{i:05d}".rjust(name_length, "c") for i in range(FLEET)]
    outcomes: list[tuple[str, Outcome | None]] = [
        (name, failed(REASONS[i % len(REASONS)], f"{message} {name}"))
        for i, name in enumerate(names)
    ]
    states = [ClusterState(n, {}, "xxh3:0", False, True, NOW) for n in names]
    made = plan("xxh3:0", states, Policy(max_failures=0), NOW)
    result = summarize(
        generation=GEN,
        outcomes=outcomes,
        resource_problems=[Problem("InvalidManifest", p) for p in problems],
        previous=ClusterResourceSetStatus(),
        now=NOW,
        rollout=(made.phase, made.message),
    )
    result.rollout = RolloutStatus(phase=made.phase, step=made.step, message=made.message)
    # Every cluster also keeps as many protected objects as an entry records, with
    # names as long as the API allows: the status names a bounded few.
    kept = [KeptObject(api_version="v" * 316, kind="Namespace", name="n" * 253)] * 20
    entry = CRSBinding(cluster_resource_set_name="a", deletions_skipped=kept)
    result.deletions_skipped = skipped_status((name, entry) for name in names)
    assert (result.matching_clusters, result.failed_clusters) == (FLEET, FLEET)
    assert made.phase == "Halted" and f"and {FLEET - 5} more" in made.message
    assert len(json.dumps(to_api(result))) <= STATUS_LIMIT


# --- which reason is told: SPEC's order, whatever the clusters are called ------------


def waiting(reason: str = "DependencyNotReady", message: str = "waits for cni") -> Outcome:
    return Outcome("Waiting", reason, message, GEN)


def held_for(reason: str) -> Outcome:
    return Outcome("Progressing", reason, f"held: {reason}", GEN)


RANKED_PAIRS = [
    pytest.param(failed("DependencyCycle", "cycle a -> b -> a"), failed(), None, "ApplyFailed"),
    pytest.param(
        failed("UnresolvedVariable", "REGION unset"),
        failed("ClusterUnreachable", "dial tcp: refused"),
        None,
        "ClusterUnreachable",
    ),
    pytest.param(held(), waiting(), ("Progressing", "step 1/2"), "DependencyNotReady"),
    pytest.param(held(), waiting(), ("Paused", "paused"), "RolloutPaused"),
    pytest.param(held(), waiting(), ("Halted", "halted"), "RolloutHalted"),
    pytest.param(failed("DependencyNotFound", "no CRS cni"), waiting(), None, "DependencyNotFound"),
    pytest.param(
        failed("DependencyCycle", "cycle"),
        failed("DependencyNotFound", "x"),
        None,
        "DependencyNotFound",
    ),
    pytest.param(
        failed("UnresolvedVariable", "v"),
        failed("DependencyNotFound", "x"),
        None,
        "UnresolvedVariable",
    ),
    pytest.param(failed("ValidationFailed", "v"), failed("Unhealthy", "u"), None, "Unhealthy"),
    pytest.param(
        failed("ValidationFailed", "v"),
        failed("UnresolvedVariable", "u"),
        None,
        "ValidationFailed",
    ),
    pytest.param(failed("InvalidManifest", "${"), failed(), None, "InvalidManifest"),
    pytest.param(pending(), held(), ("Progressing", "step 1/2"), "Progressing"),
    pytest.param(pending(), waiting("WaitingForVersion"), None, "WaitingForVersion"),
    pytest.param(held_for("UpdateHeld"), held(), ("Progressing", "s"), "Progressing"),
]


@pytest.mark.parametrize(("a", "b", "rollout", "reason"), RANKED_PAIRS)
@pytest.mark.parametrize("swapped", [False, True], ids=["a-first", "b-first"])
def test_the_reason_that_ranks_first_is_told_naming_its_cluster(
    a: Outcome, b: Outcome, rollout: tuple[str, str] | None, reason: str, swapped: bool
) -> None:
    """Two clusters, ``a`` and ``b``: the reason is SPEC's first that applies, whichever
    cluster has it and in whichever order they come; the message names that cluster."""
    outcomes: list[tuple[str, Outcome | None]] = [("a", a), ("b", b)]
    result = summarize(
        generation=GEN,
        outcomes=outcomes[::-1] if swapped else outcomes,
        resource_problems=[],
        previous=ClusterResourceSetStatus(),
        now=NOW,
        rollout=rollout,
    )
    winner = "a" if a.reason == reason else "b"
    for kind in (READY, RESOURCES_APPLIED):
        told = condition(result, kind)
        assert told.reason == reason
        if reason not in ("RolloutPaused", "RolloutHalted"):
            assert f"({winner})" in told.message or f"cluster {winner}:" in told.message
            assert f"cluster {'ab'.replace(winner, '')}:" not in told.message


def test_the_source_problem_that_ranks_first_is_told() -> None:
    invalid = Problem("InvalidManifest", "key x: not YAML")
    result = status([("c1", None)], [invalid, WRONG_TYPE, NOT_FOUND])
    assert condition(result).reason == "ResourceNotFound"
    assert (
        condition(result).message == f"{invalid.message}; {WRONG_TYPE.message}; {NOT_FOUND.message}"
    )


FAILURES = ["ApplyFailed", "ClusterUnreachable", "UnsupportedKubeconfig", "Unhealthy"]
OUTCOMES = st.one_of(
    st.sampled_from(
        [*FAILURES, "UnresolvedVariable", "DependencyNotFound", "DependencyCycle", "Odd"]
    ).map(lambda r: failed(r, f"because {r}")),
    st.sampled_from(["DependencyNotReady", "WaitingForVersion", "NoResourceForVersion"]).map(
        waiting
    ),
    st.sampled_from(["Progressing", "OutsideWindow", "UpdateHeld", "BudgetExhausted"]).map(
        held_for
    ),
    st.just(applied()),
    st.just(pending()),
    st.none(),
)
PHASES = st.sampled_from([None, ("Progressing", "p"), ("Paused", "p"), ("Halted", "h")])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(OUTCOMES, min_size=1, max_size=8),
    PHASES,
    st.randoms(use_true_random=False),
)
def test_the_reason_does_not_depend_on_cluster_names_or_order(
    drawn: list[Outcome | None], rollout: tuple[str, str] | None, rng: Any
) -> None:
    names = [f"c{i}" for i in range(len(drawn))]
    renamed = rng.sample([f"w{i:02d}" for i in range(50)], len(drawn))
    order = rng.sample(range(len(drawn)), len(drawn))

    def told(clusters: list[str], shuffle: list[int]) -> tuple[str, str, str]:
        outcomes = [(clusters[i], drawn[i]) for i in shuffle]
        result = summarize(
            generation=GEN,
            outcomes=outcomes,
            resource_problems=[],
            previous=ClusterResourceSetStatus(),
            now=NOW,
            rollout=rollout,
        )
        ready = condition(result)
        return condition(result, RESOURCES_APPLIED).reason, ready.reason, ready.message

    reason, ready, message = told(names, list(range(len(drawn))))
    assert told(renamed, order)[:2] == (reason, ready)
    reasons = [o.reason for o in drawn if o is not None and o.state in ("Failed", "Waiting")]
    if reasons and reason in reasons:
        assert rank(reason) == min(rank(r) for r in reasons)
    if message.startswith("cluster "):  # it names the cluster whose reason is told
        named = drawn[names.index(message.split(":")[0].removeprefix("cluster "))]
        assert named is not None and named.reason == ready
