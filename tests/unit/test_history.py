"""The revision history and the rollback decisions (core/rollout/history.py) and the
snapshots a rollback applies (core/rollout/snapshots.py): the history stays within
its limit and its total bytes and keeps what is rolled out; a request holds only for
the sources' revision it names; a failed step halts and a halted rollout goes back by
itself only under onFailure: Rollback, to the last completed revision; a snapshot
round-trips, says its bytes, keeps Secret content out of the ConfigMap, and is
refused when edited, forged or too large."""

from __future__ import annotations

import base64
import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.core.api.models import CRSBinding, RevisionRecord
from crs_controller.core.manifests.hashing import resource_hash
from crs_controller.core.rollout.history import (
    Request,
    Undo,
    advance,
    decide,
    failure_in,
    last_complete,
    outcome_of_phase,
    parse_request,
    request_for,
    rollback_on_failure,
    within_bytes,
)
from crs_controller.core.rollout.plan import ClusterState, Phase, Plan, Policy, plan, revision
from crs_controller.core.rollout.snapshots import (
    MAX_SNAPSHOT_BYTES,
    SIZE_ANNOTATION,
    SNAPSHOT_KEY,
    SnapshotRefused,
    SnapshotTooLarge,
    build,
    no_snapshot,
    read,
    size_of,
)
from crs_controller.core.spec.objects import parse_source_meta
from crs_controller.core.state.status import outcome_of
from crs_controller.engine.reconcile.rollout import rolling_back

T0 = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)


def rec(rev: str, outcome: str = "Complete", minutes: int = 0) -> RevisionRecord:
    return RevisionRecord.model_validate(
        {"revision": rev, "firstSeen": T0 + timedelta(minutes=minutes), "outcome": outcome}
    )


# --- the history ----------------------------------------------------------------------


def test_a_new_revision_is_added_last_and_the_oldest_go_beyond_the_limit() -> None:
    history = [rec("a"), rec("b", minutes=1)]
    kept, dropped = advance(history, Undo("c"), "Progressing", T0 + timedelta(hours=1), 2)
    assert [r.revision for r in kept] == ["b", "c"]
    assert dropped == ["a"]
    assert kept[-1].first_seen == T0 + timedelta(hours=1)
    assert kept[-1].outcome == "Progressing"


def test_a_revision_rolled_out_again_moves_last_and_keeps_its_first_seen() -> None:
    history = [rec("a"), rec("b", minutes=1)]
    kept, dropped = advance(history, Undo("a"), "Progressing", T0 + timedelta(hours=1), 10)
    assert [r.revision for r in kept] == ["b", "a"]
    assert kept[-1].first_seen == T0
    assert dropped == []


def test_a_rollback_marks_the_revision_rolled_back_from() -> None:
    history = [rec("a"), rec("b", "Halted", minutes=1)]
    kept, _ = advance(history, Undo("a", "b"), "Progressing", T0 + timedelta(hours=1), 10)
    assert [(r.revision, r.outcome) for r in kept] == [("b", "RolledBack"), ("a", "Progressing")]


@given(
    st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=40),
    st.integers(min_value=1, max_value=5),
)
def test_the_history_never_exceeds_its_limit_and_ends_with_the_target(
    targets: list[str], limit: int
) -> None:
    history: list[RevisionRecord] = []
    for step, target in enumerate(targets):
        before = {r.revision for r in history}
        history, dropped = advance(
            history, Undo(target), "Progressing", T0 + timedelta(minutes=step), limit
        )
        revisions = [r.revision for r in history]
        assert len(history) <= limit
        assert revisions[-1] == target
        assert len(set(revisions)) == len(revisions)
        assert target not in dropped
        assert set(dropped) | set(revisions) == before | {target}


@pytest.mark.parametrize(
    ("phase", "outcome"),
    [
        ("Complete", "Complete"),
        ("RolledBack", "Complete"),
        ("Halted", "Halted"),
        ("Paused", "Progressing"),
        ("AwaitingApproval", "Progressing"),
        (None, "Progressing"),
    ],
)
def test_a_phase_stands_in_the_history_as(phase: str | None, outcome: str) -> None:
    assert outcome_of_phase(phase) == outcome


def test_the_last_complete_revision_is_the_newest_completed_one_not_excluded() -> None:
    history = [rec("a"), rec("b"), rec("c", "Halted")]
    assert last_complete(history, excluding=("c",)) == "b"
    assert last_complete(history, excluding=("b", "c")) == "a"
    assert last_complete([rec("c", "Halted")], excluding=()) is None


@pytest.mark.parametrize(
    ("sizes", "bound", "kept"),
    [
        pytest.param({"a": 5, "b": 5, "c": 5}, 15, "abc", id="within"),
        pytest.param({"a": 5, "b": 5, "c": 5}, 14, "bc", id="the-oldest-first"),
        pytest.param({"a": 1, "b": 9, "c": 5}, 10, "c", id="until-within"),
        pytest.param({"a": 50, "b": 50, "c": 50}, 10, "c", id="never-the-last"),
        pytest.param({"c": 10}, 10, "abc", id="no-snapshot-counts-nothing"),
        pytest.param({"b": 9, "c": 5}, 10, "c", id="the-oldest-first-snapshot-or-not"),
    ],
)
def test_the_oldest_revisions_go_beyond_the_total_bytes(
    sizes: dict[str, int], bound: int, kept: str
) -> None:
    history = [rec("a"), rec("b"), rec("c")]
    left, dropped = within_bytes(history, sizes, bound)
    assert "".join(r.revision for r in left) == kept
    assert dropped == [r.revision for r in history if r.revision not in kept]


@given(
    st.lists(st.integers(min_value=0, max_value=100), min_size=1, max_size=12),
    st.integers(min_value=0, max_value=400),
)
def test_the_kept_snapshots_fit_their_bound_unless_only_the_last_is_left(
    sizes: list[int], bound: int
) -> None:
    history = [rec(f"r{i}") for i in range(len(sizes))]
    by_revision = {f"r{i}": size for i, size in enumerate(sizes)}
    left, dropped = within_bytes(history, by_revision, bound)
    assert left[-1] == history[-1]
    assert [r.revision for r in history] == dropped + [r.revision for r in left]
    assert sum(by_revision[r.revision] for r in left) <= bound or len(left) == 1


# --- the decisions --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "request_"),
    [
        ("s/p", Request("s", "p")),
        ("s/resume", Request("s", None)),
        (None, None),
        ("", None),
        ("s", None),
        ("s/p/q", None),
        ("/p", None),
        ("s/", None),
        ("s/" + "x" * 300, None),
    ],
)
def test_the_request_annotation_is_read(value: str | None, request_: Request | None) -> None:
    assert parse_request(value) == request_


@pytest.mark.parametrize(
    ("sources", "request_", "back", "out", "undo"),
    [
        # Nothing asked or recorded: the sources.
        ("s", None, None, "s", Undo("s")),
        # A request about the sources' revision rolls back.
        ("s", Request("s", "p"), None, "s", Undo("p", "s")),
        # ... not once the sources moved on to another revision.
        ("n", Request("s", "p"), "s", "p", Undo("n")),
        # The status keeps a rollback when the annotation is gone (GitOps re-applied).
        ("s", None, "s", "p", Undo("p", "s")),
        # Resume: the sources again, whatever the status recorded.
        ("s", Request("s", None), "s", "p", Undo("s", resumed=True)),
        # A request for the sources' own revision is no rollback.
        ("s", Request("s", "s"), None, "s", Undo("s")),
        # A request to a revision not in the history is refused: it changes nothing.
        ("s", Request("s", "x"), None, "s", Undo("s", refused="revision x has no snapshot")),
        ("s", Request("s", "x"), "s", "p", Undo("p", "s", refused="revision x has no snapshot")),
    ],
)
def test_what_is_rolled_out(
    sources: str, request_: Request | None, back: str | None, out: str, undo: Undo
) -> None:
    assert decide(sources, request_, back, out, kept=("p", "s", "n")) == undo


@pytest.mark.parametrize(
    ("undo", "phase", "on_failure", "to"),
    [
        (Undo("s"), "Halted", "Rollback", "b"),
        (Undo("s"), "Halted", "Halt", None),
        (Undo("s"), "Progressing", "Rollback", None),
        (Undo("s"), "Complete", "Rollback", None),
        (Undo("p", "s"), "Halted", "Rollback", None),  # rolling back already
        (Undo("s", resumed=True), "Halted", "Rollback", None),  # the operator resumed it
    ],
)
def test_a_halted_rollout_goes_back_by_itself_only_under_rollback(
    undo: Undo, phase: str, on_failure: str, to: str | None
) -> None:
    history = [rec("a"), rec("b"), rec("s", "Halted")]
    assert rollback_on_failure(undo, phase, on_failure, history) == to


def test_no_rollback_by_itself_without_a_completed_revision() -> None:
    assert rollback_on_failure(Undo("s"), "Halted", "Rollback", [rec("s", "Halted")]) is None


def on_target(name: str, reason: str) -> ClusterState:
    """A cluster on the target "s" whose binding records ``reason`` as its outcome there
    (failed as the CRS reconcile reads it: the outcome's state)."""
    entry = CRSBinding.model_validate(
        {"clusterResourceSetName": "cni", "outcome": {"reason": reason, "ready": True}}
    )
    outcome = outcome_of(entry)
    assert outcome is not None
    failed = outcome.state == "Failed"
    return ClusterState(name, {}, "s", not failed, failed, T0)


@pytest.mark.parametrize(
    ("reasons", "max_failures", "phase", "to"),
    [
        pytest.param(["ValidationFailed", "Applied"], 0, "Halted", "b", id="validation-failed"),
        pytest.param(["Unhealthy", "Applied"], 0, "Halted", "b", id="health-timeout"),
        pytest.param(["ApplyFailed", "Unhealthy", "Applied"], 1, "Halted", "b",
                     id="beyond-max-failures"),
        pytest.param(["ValidationFailed", "Applied", "Applied"], 1, "Progressing", None,
                     id="within-max-failures"),
    ],
)  # fmt: skip
def test_a_failed_step_halts_and_goes_back_to_the_last_completed_revision(
    reasons: list[str], max_failures: int, phase: str, to: str | None
) -> None:
    clusters = [on_target(f"c{i}", reason) for i, reason in enumerate(reasons)]
    made = plan("s", clusters, Policy(max_failures=max_failures), T0)
    assert made.phase == phase
    history = [rec("a"), rec("b"), rec("c", "Halted"), rec("s", "Progressing")]
    assert rollback_on_failure(Undo("s"), made.phase, "Rollback", history) == to
    assert rollback_on_failure(Undo("s"), made.phase, "Halt", history) is None


HALT = "halted: 1 cluster failed (maximum 0): canary-1"


@pytest.mark.parametrize("phase", ["Progressing", "Complete"])
def test_a_rollback_by_itself_names_its_failure_where_a_restart_reads_it_back(
    phase: Phase,
) -> None:
    made = Plan(frozenset(), phase, 1, 0, "step 1: 0 of 1 cluster updated", None)
    said = rolling_back(made, "xxh3:bbbb", "xxh3:aaaa", HALT).message
    assert said.startswith(("rolling back from xxh3:bbbb", "rolled back from xxh3:bbbb"))
    assert said.endswith(f"the rollout of xxh3:bbbb {HALT}")
    assert failure_in(said, "xxh3:bbbb") == HALT
    assert failure_in(said, "xxh3:cccc") is None  # about another revision
    # By hand: no failure to name, none read back.
    by_hand = rolling_back(made, "xxh3:bbbb", "xxh3:aaaa").message
    assert "the rollout of" not in by_hand and failure_in(by_hand, "xxh3:bbbb") is None
    assert failure_in(None, "xxh3:bbbb") is None


HISTORY = [rec("xxh3:aaaa"), rec("xxh3:abcd"), rec("xxh3:bbbb", "Halted"), rec("xxh3:cccc")]


@pytest.mark.parametrize(
    ("out", "back", "to", "resume", "written"),
    [
        ("xxh3:cccc", None, None, False, "xxh3:cccc/xxh3:abcd"),
        ("xxh3:cccc", None, "xxh3:aaaa", False, "xxh3:cccc/xxh3:aaaa"),
        ("xxh3:cccc", None, "xxh3:bb", False, "xxh3:cccc/xxh3:bbbb"),  # a prefix
        ("xxh3:abcd", "xxh3:cccc", "xxh3:aaaa", False, "xxh3:cccc/xxh3:aaaa"),
        ("xxh3:abcd", "xxh3:cccc", None, True, "xxh3:cccc/resume"),
        ("xxh3:abcd", "xxh3:cccc", "xxh3:cccc", False, "xxh3:cccc/resume"),
        ("xxh3:cccc", None, None, True, None),  # nothing to resume
        ("xxh3:cccc", None, "xxh3:cccc", False, None),  # on it already
    ],
)
def test_the_rollback_command_asks(
    out: str, back: str | None, to: str | None, resume: bool, written: str | None
) -> None:
    assert request_for(out, back, HISTORY, to, resume=resume) == written


@pytest.mark.parametrize(
    ("out", "history", "to", "says"),
    [
        (None, HISTORY, None, "no revision in its status"),
        ("xxh3:cccc", HISTORY, "xxh3:ffff", "is not in status.history"),
        ("xxh3:cccc", HISTORY, "xxh3:a", "is ambiguous"),
        ("xxh3:cccc", [rec("xxh3:cccc")], None, "no earlier revision completed"),
    ],
)
def test_the_rollback_command_refuses(
    out: str | None, history: list[RevisionRecord], to: str | None, says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        request_for(out, None, history, to)


# --- snapshots ------------------------------------------------------------------------

UID = "0d6f4a3e-0000-4000-8000-000000000001"
RESOURCES = [("ConfigMap", "cni"), ("Secret", "token")]


def sources(cm: dict[str, str], secret: dict[str, str]) -> dict[tuple[str, str], Any]:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in secret.items()}
    return {
        ("ConfigMap", "cni"): {
            "kind": "ConfigMap",
            "metadata": {"name": "cni", "namespace": "fleet"},
            "data": cm,
        },
        ("Secret", "token"): {
            "kind": "Secret",
            "metadata": {"name": "token", "namespace": "fleet"},
            "type": "addons.cluster.x-k8s.io/resource-set",
            "data": encoded,
        },
    }


def rev_of(raws: dict[tuple[str, str], Any]) -> str:
    return revision([(k, n, resource_hash(raws[(k, n)])) for k, n in RESOURCES])


def snapshot(
    cm: dict[str, str], secret: dict[str, str]
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    raws = sources(cm, secret)
    rev = rev_of(raws)
    configmap, secret_obj = build("fleet", ("cni", UID), rev, RESOURCES, raws)
    return rev, configmap, secret_obj


keys = st.from_regex(r"[a-z][a-z0-9.]{0,8}", fullmatch=True)
values = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)


@given(st.dictionaries(keys, values, max_size=4), st.dictionaries(keys, values, max_size=4))
def test_a_snapshot_gives_back_the_content_it_was_hashed_from(
    cm: dict[str, str], secret: dict[str, str]
) -> None:
    rev, configmap, secret_obj = snapshot(cm, secret)
    found = read(configmap, secret_obj, UID, rev, RESOURCES)
    assert rev_of(found) == rev


def test_secret_content_is_kept_only_in_the_secret() -> None:
    _, configmap, secret_obj = snapshot({"a": "kind: ConfigMap"}, {"t": "s3cr3t-value"})
    assert "s3cr3t" not in json.dumps(configmap)
    assert base64.b64encode(b"s3cr3t-value").decode() not in json.dumps(configmap)
    assert secret_obj["kind"] == "Secret" and secret_obj["type"] == "Opaque"
    for obj in (configmap, secret_obj):
        assert obj["immutable"] is True
        assert obj["metadata"]["ownerReferences"][0]["uid"] == UID


def test_each_snapshot_object_says_the_bytes_it_holds_and_the_cache_reads_them() -> None:
    _, configmap, secret_obj = snapshot({"a": "kind: ConfigMap"}, {"t": "x"})
    for obj in (configmap, secret_obj):
        held = parse_source_meta(obj)
        assert held.snapshot_of == UID
        assert held.snapshot_bytes == len(obj["data"][SNAPSHOT_KEY]) > 0
    plain = {"metadata": {"name": "p", "annotations": {SIZE_ANNOTATION: "12"}}}
    assert parse_source_meta(plain).snapshot_bytes is None  # not a snapshot: not read
    assert size_of({SIZE_ANNOTATION: "-1"}) is None and size_of({}) is None


def edited(obj: dict[str, Any]) -> dict[str, Any]:
    forged = copy.deepcopy(obj)
    document = json.loads(forged["data"][SNAPSHOT_KEY])
    document["sources"][0]["data"]["a"] = "kind: Namespace"
    forged["data"][SNAPSHOT_KEY] = json.dumps(document)
    return forged


def relabelled(obj: dict[str, Any]) -> dict[str, Any]:
    forged = copy.deepcopy(obj)
    forged["metadata"]["labels"] = {"addons.crs.dev/snapshot-of": "someone-else"}
    return forged


def mutable(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "immutable": False}


@pytest.mark.parametrize(
    ("forge", "says"),
    [
        (edited, "does not hash to it"),
        (relabelled, "is not this ClusterResourceSet's"),
        (mutable, "is not immutable"),
    ],
)
def test_an_edited_or_forged_snapshot_is_refused(forge: Any, says: str) -> None:
    rev, configmap, secret_obj = snapshot({"a": "kind: ConfigMap"}, {"t": "x"})
    with pytest.raises(SnapshotRefused, match=says):
        read(forge(configmap), secret_obj, UID, rev, RESOURCES)


def test_a_snapshot_naming_other_resources_or_missing_is_refused() -> None:
    rev, configmap, secret_obj = snapshot({"a": "x"}, {"t": "y"})
    with pytest.raises(SnapshotRefused, match="other resources"):
        read(configmap, secret_obj, UID, rev, [("ConfigMap", "cni")])
    with pytest.raises(SnapshotRefused, match="no snapshot"):
        read(None, None, UID, rev, RESOURCES)
    with pytest.raises(SnapshotRefused, match=r"Secret of revision .* is missing"):
        read(configmap, None, UID, rev, RESOURCES)


def test_sources_larger_than_a_snapshot_holds_are_refused_naming_the_bound() -> None:
    raws = sources({"a": "x" * MAX_SNAPSHOT_BYTES}, {})
    with pytest.raises(SnapshotTooLarge, match="900 KiB"):
        build("fleet", ("cni", UID), rev_of(raws), RESOURCES, raws)


def test_a_refused_request_names_its_revision_without_control_characters() -> None:
    said = no_snapshot("xxh3:0123\x1b[2J\nforged line")
    assert "\x1b" not in said and "\n" not in said
    assert said.startswith("revision xxh3:0123")
