"""The rollout plans the CRS reconcile keeps for the cluster reconciles
(``engine.memory.plans``): a cluster is admitted only for the planned revision, each
newly admitted cluster is told once, and a halted revision is remembered until a
rollout completes; each such cluster is handed to the runtime's waker as the plan is
kept, and so are the clusters it holds back when what it waits for changes. And the
pairs' outcomes kept beside them (``memory.outcomes``)."""

from __future__ import annotations

from dataclasses import replace

from crs_controller.core.rollout.plan import Plan
from crs_controller.core.state.status import Outcome
from crs_controller.engine.memory.outcomes import Outcomes
from crs_controller.engine.memory.plans import Rollouts

from .memory_kube import Woken


def made(*admit: str, phase: str = "Progressing") -> Plan:
    return Plan(frozenset(admit), phase, 1, 0, "", None)  # type: ignore[arg-type]


def test_admission_is_for_the_planned_revision_and_news_is_told_once() -> None:
    rollouts = Rollouts()
    assert not rollouts.admitted("n", "cni", "a", "r1")  # nothing planned yet
    assert rollouts.set("n", "cni", "r1", made("a")) == {"a"}
    assert rollouts.set("n", "cni", "r1", made("a", "b")) == {"b"}
    assert rollouts.set("n", "cni", "r1", made("a", "b")) == frozenset()
    assert rollouts.admitted("n", "cni", "b", "r1")
    assert not rollouts.admitted("n", "cni", "b", "r2")
    assert rollouts.set("n", "cni", "r2", made("a")) == {"a"}  # a new revision: anew


def test_the_clusters_a_plan_has_news_for_are_woken_once_as_it_is_kept() -> None:
    woken = Woken()
    rollouts = Rollouts(wake=woken)
    rollouts.set("n", "cni", "r1", made("a"), behind={"b"})
    assert woken == [("n", "a"), ("n", "b")]  # a new revision: those held back look too
    rollouts.set("n", "cni", "r1", made("a"), behind={"b"})
    assert woken == [("n", "a"), ("n", "b")]  # the same plan again: nothing new
    validating = replace(made("a"), validate=frozenset({"a"}))
    rollouts.set("n", "cni", "r1", validating, behind={"b"})
    assert woken[2:] == [("n", "a")]  # asked to validate now
    windowed = replace(validating, waiting_for="Window")
    rollouts.set("n", "cni", "r1", windowed, behind={"b"})
    assert woken[3:] == [("n", "b")]  # what it waits for changed: why is told


def test_a_halted_revision_is_remembered_until_a_rollout_completes() -> None:
    rollouts = Rollouts()
    rollouts.set("n", "cni", "bad", made(phase="Halted"))
    rollouts.set("n", "cni", "fix", made("a"))
    assert rollouts.halted("n", "cni") == "bad"
    rollouts.set("n", "cni", "fix", made(phase="Complete"))
    assert rollouts.halted("n", "cni") is None
    rollouts.set("n", "cni", "bad", made(phase="Halted"))
    rollouts.drop("n", "cni")
    assert rollouts.halted("n", "cni") is None and rollouts.plan("n", "cni") is None


def test_outcomes_are_forgotten_by_cluster_crs_and_pair_within_their_namespace() -> None:
    outcomes = Outcomes()
    applied = Outcome("Applied", "Applied", "", 1)
    pairs = [("n", "cni", "a"), ("n", "cni", "b"), ("n", "csi", "a"), ("m", "cni", "a")]
    for pair in pairs:
        assert outcomes.record(*pair, applied)
    assert not outcomes.record("n", "cni", "a", applied)  # the same: no change
    outcomes.drop_cluster("n", "a")
    assert [outcomes.get(*p) for p in pairs] == [None, applied, None, applied]
    outcomes.drop_crs("n", "cni")
    outcomes.drop_pair("m", "cni", "a")
    assert [outcomes.get(*p) for p in pairs] == [None, None, None, None]


def test_a_cluster_admitted_earlier_and_asked_to_validate_now_is_news() -> None:
    rollouts = Rollouts()
    rollouts.set("n", "cni", "r1", made("a"))
    validating = replace(made(), validate=frozenset({"a"}))
    assert rollouts.set("n", "cni", "r1", validating) == {"a"}
    assert rollouts.validating("n", "cni", "a", "r1")
    assert not rollouts.validating("n", "cni", "a", "r2")
    assert rollouts.set("n", "cni", "r1", validating) == frozenset()  # told once
