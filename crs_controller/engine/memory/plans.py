"""The current rollout plan of each CRS that has ``spec.rollout``: which clusters may
take its revision now. The CRS reconcile computes it (``core.rollout.plan.plan``) from
the bindings and outcomes; cluster reconciles only read it. ``set`` hands the clusters
a new plan lets in to ``wake`` at once (the runtime injects one that queues their keys;
nothing here sees the queue): the plan is in force from that moment, and a later set
of the same plan finds nothing new, so they must hear of it even if the CRS pass that
planned it fails or times out afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from crs_controller.core.api.models import CRSKey
from crs_controller.core.rollout.plan import Plan


class Rollouts:
    def __init__(self, *, wake: Callable[[str, str], None] | None = None) -> None:
        self._wake = wake  # (namespace, name) of a cluster to look at now
        self._plans: dict[CRSKey, tuple[str, Plan]] = {}
        self._halted: dict[CRSKey, str] = {}
        self._because: dict[CRSKey, str] = {}
        self._refused: dict[CRSKey, str] = {}

    def halted(self, namespace: str, crs: str) -> str | None:
        """The last revision whose rollout halted (its clusters take the next first);
        forgotten once a rollout completes, and on restart."""
        return self._halted.get((namespace, crs))

    def because(self, namespace: str, crs: str) -> str | None:
        """Why this process rolled the CRS back by itself (the halted rollout's
        message), for the rollout's message and Event; forgotten on restart, when the
        status's message is read instead (``reconcile.rollout.failure_of``)."""
        return self._because.get((namespace, crs))

    def rolled_back(self, namespace: str, crs: str, because: str | None) -> None:
        """Remember why (None: no rollback of its own is in force)."""
        if because is None:
            self._because.pop((namespace, crs), None)
        else:
            self._because[(namespace, crs)] = because

    def refusal(self, namespace: str, crs: str, why: str | None) -> bool:
        """Note why this process holds the CRS's rollback (its snapshot cannot be
        read here; None: it does not); True when that is news, to be told once."""
        key = (namespace, crs)
        if why is None:
            self._refused.pop(key, None)
            return False
        news = self._refused.get(key) != why
        self._refused[key] = why
        return news

    def admitted(self, namespace: str, crs: str, cluster: str, revision: str) -> bool:
        """May ``cluster`` take ``revision`` of this CRS now? False until the CRS
        reconcile has planned that revision."""
        current = self._plans.get((namespace, crs))
        return current is not None and current[0] == revision and cluster in current[1].admit

    def validating(self, namespace: str, crs: str, cluster: str, revision: str) -> bool:
        """Is ``cluster`` to run its step's validation of ``revision`` now?"""
        current = self._plans.get((namespace, crs))
        return current is not None and current[0] == revision and cluster in current[1].validate

    def planned(self, namespace: str, crs: str, revision: str) -> bool:
        """Has the CRS reconcile planned ``revision`` yet?"""
        current = self._plans.get((namespace, crs))
        return current is not None and current[0] == revision

    def waiting_for(self, namespace: str, crs: str, revision: str) -> str | None:
        """What the rollout of ``revision`` waits for, as the plan says."""
        current = self._plans.get((namespace, crs))
        return current[1].waiting_for if current is not None and current[0] == revision else None

    def plan(self, namespace: str, crs: str) -> tuple[str, Plan] | None:
        return self._plans.get((namespace, crs))

    def set(
        self, namespace: str, crs: str, revision: str, plan: Plan, behind: Collection[str] = ()
    ) -> frozenset[str]:
        """Keep the plan; wakes (and returns) the clusters it newly admits or asks to
        validate, and, when what the rollout waits for changed (a window, an approval),
        the clusters it holds back (``behind``), so their outcomes say why."""
        before = self._plans.get((namespace, crs))
        was = before[1] if before is not None and before[0] == revision else None
        self._plans[(namespace, crs)] = (revision, plan)
        if plan.phase == "Halted":
            self._halted[(namespace, crs)] = revision
        elif plan.phase in ("Complete", "RolledBack"):
            self._halted.pop((namespace, crs), None)
        news = _news(was, plan, behind)
        if self._wake is not None:
            for cluster in sorted(news):
                self._wake(namespace, cluster)
        return news

    def drop(self, namespace: str, crs: str) -> None:
        self._plans.pop((namespace, crs), None)
        self._halted.pop((namespace, crs), None)
        self._because.pop((namespace, crs), None)
        self._refused.pop((namespace, crs), None)


def _news(was: Plan | None, plan: Plan, behind: Collection[str]) -> frozenset[str]:
    """The clusters ``plan`` has news for, after ``was`` (None: another revision's, or
    none)."""
    if was is None:
        return plan.admit | plan.validate | frozenset(behind)
    # Admitted earlier and asked to validate now is news: each set on its own.
    news = (plan.admit - was.admit) | (plan.validate - was.validate)
    return news | frozenset(behind) if was.waiting_for != plan.waiting_for else news
