"""The revisions a CRS keeps (``status.history``) and what rolling back decides.

Pure functions of the history, the sources' revision, the rollback request the CLI
writes (annotation ``addons.crs.dev/rollback``), the rollback the status records and
the rollout's phase, so every replica decides the same and a restart changes nothing.

Where the SPEC is silent, decided here (as ``kubectl rollout undo`` does):

- The history is in the order the revisions were last rolled out, oldest first. A
  revision rolled out again (a revert, a rollback to it) moves to the end and keeps
  its ``firstSeen``, as a Deployment gives an old ReplicaSet the newest revision
  number.
- At most ``revisionHistoryLimit`` revisions are kept, the oldest dropped first; the
  revision rolled out now is never dropped. Their snapshots together hold at most
  ``MAX_HISTORY_BYTES`` (``within_bytes``): beyond, the oldest go first too, as a
  Deployment user sees history trimmed from the old end, never the revision rolled
  out.
- A rollback without ``--to-revision`` goes to the newest revision, other than the
  one rolled out now, whose rollout completed.
- A request names the sources' revision it is about (``<from>/<to>``): it holds only
  while the sources are on that revision, so an edit of the sources (a new revision)
  ends the rollback by itself. ``<from>/resume`` rolls ``<from>`` out again; a failure
  of it then halts, without a second rollback by itself, until the sources change.
- A request to a revision that is not in the history (a typo, a prefix, a stale
  manifest) is refused, as one whose snapshot is gone: it changes nothing (the
  rollback the status records, else the sources) and never enters the history.
- The rollback is also kept in the status (``status.revision`` is the revision
  rolled out, ``status.rollout.rolledBackFrom`` the sources'): a request annotation
  removed (a GitOps tool re-applying the CRS) does not undo it.
- A rollback by itself keeps the failure it answers at the end of the rollout's
  message (``failure_note``), so that a restart (which forgets it) reads it back
  there (``failure_in``) and the RolloutRolledBack Event still names it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from crs_controller.core.api.models import RevisionOutcome, RevisionRecord
from crs_controller.core.rollout.snapshots import no_snapshot

__all__ = [
    "RESUME",
    "ROLLBACK_ANNOTATION",
    "Request",
    "Undo",
    "advance",
    "decide",
    "failure_in",
    "failure_note",
    "last_complete",
    "outcome_of_phase",
    "parse_request",
    "request_for",
    "rollback_on_failure",
    "within_bytes",
]

# On a CRS, written by ``crs-controller rollback``: "<from>/<to>" or "<from>/resume".
ROLLBACK_ANNOTATION = "addons.crs.dev/rollback"
RESUME = "resume"
_REQUEST_LIMIT = 200


@dataclass(frozen=True)
class Request:
    """A rollback asked for while the sources are on ``source``: to ``to``, or (None)
    resume ``source`` itself."""

    source: str
    to: str | None


@dataclass(frozen=True)
class Undo:
    """What is rolled out now: ``target``; ``rolled_back_from`` the sources' revision
    it replaces (None: no rollback); ``resumed``, the operator asked for the sources'
    revision again; ``refused``, why the rollback request was refused (None: none
    was)."""

    target: str
    rolled_back_from: str | None = None
    resumed: bool = False
    refused: str | None = None


def parse_request(value: str | None) -> Request | None:
    """The annotation's request, or None when absent or malformed (ignored)."""
    if not value or len(value) > _REQUEST_LIMIT or value.count("/") != 1:
        return None
    source, to = value.split("/")
    if not source or not to:
        return None
    return Request(source, None if to == RESUME else to)


def decide(
    sources: str,
    request: Request | None,
    rolled_back_from: str | None,
    rolled_out: str | None,
    kept: Collection[str],
) -> Undo:
    """What is rolled out while the sources are on ``sources``: a request about them
    first, else the rollback the status records (``rolled_back_from`` and the revision
    ``rolled_out`` then), else the sources. A request to a revision not ``kept`` (the
    history's) is refused, saying why, and changes nothing."""
    refused = None
    if request is not None and request.source == sources:
        if request.to is None:
            return Undo(sources, resumed=True)
        if request.to != sources and request.to in kept:
            return Undo(request.to, sources)
        if request.to != sources:
            refused = no_snapshot(request.to)
    if rolled_back_from == sources and rolled_out not in (None, sources):
        assert rolled_out is not None
        return Undo(rolled_out, sources, refused=refused)
    return Undo(sources, refused=refused)


def rollback_on_failure(
    undo: Undo, phase: str, on_failure: str, history: Sequence[RevisionRecord]
) -> str | None:
    """The revision to go back to by itself: the sources' rollout halted under
    ``onFailure: Rollback``, no rollback or resume is in force, and a revision
    completed before. None: halt."""
    if on_failure != "Rollback" or phase != "Halted" or undo.rolled_back_from or undo.resumed:
        return None
    return last_complete(history, excluding=(undo.target,))


def failure_note(back: str, because: str | None) -> str:
    """What a rollback by itself from ``back`` adds to the rollout's message: the
    failure it answers (``because``: the halted rollout's message). Empty without."""
    return f"{_failure_marker(back)}{because}" if because else ""


def failure_in(message: str | None, back: str) -> str | None:
    """The failure a rollback by itself from ``back`` answers, as ``failure_note``
    wrote it at the end of ``message``; None when it holds none."""
    marker = _failure_marker(back)
    if not message or marker not in message:
        return None
    return message.split(marker, 1)[1] or None


def _failure_marker(back: str) -> str:
    return f"; the rollout of {back} "


def last_complete(history: Sequence[RevisionRecord], excluding: Collection[str]) -> str | None:
    """The newest revision whose rollout completed, other than ``excluding``."""
    for record in reversed(history):
        if record.outcome == "Complete" and record.revision not in excluding:
            return record.revision
    return None


def outcome_of_phase(phase: str | None) -> RevisionOutcome:
    """How a rollout in ``phase`` stands in the history."""
    if phase in ("Complete", "RolledBack"):
        return "Complete"
    if phase == "Halted":
        return "Halted"
    return "Progressing"


def advance(
    history: Sequence[RevisionRecord],
    undo: Undo,
    outcome: RevisionOutcome,
    now: datetime,
    limit: int,
) -> tuple[list[RevisionRecord], list[str]]:
    """The history once ``undo.target`` is rolled out with ``outcome`` (and the
    revision rolled back from, if any, marked RolledBack), and the revisions dropped
    beyond ``limit`` (their snapshots go)."""
    kept = {r.revision: r for r in history}
    order = [r.revision for r in history]
    back = undo.rolled_back_from
    if back is not None:
        seen = kept[back].first_seen if back in kept else now
        kept[back] = RevisionRecord(revision=back, first_seen=seen, outcome="RolledBack")
        order = [r for r in order if r != back] + [back] if back not in order else order
    target = undo.target
    seen = kept[target].first_seen if target in kept else now
    kept[target] = RevisionRecord(revision=target, first_seen=seen, outcome=outcome)
    if not order or order[-1] != target:
        order = [r for r in order if r != target] + [target]
    dropped = order[: max(0, len(order) - max(1, limit))]
    return [kept[r] for r in order if r not in dropped], dropped


def within_bytes(
    history: Sequence[RevisionRecord], sizes: Mapping[str, int], bound: int
) -> tuple[list[RevisionRecord], list[str]]:
    """The history with its oldest revisions dropped while the snapshots kept hold
    more than ``bound`` bytes together (``sizes``: each revision's, none: 0), and the
    revisions dropped. The last, rolled out now, is never dropped."""
    total = sum(sizes.get(r.revision, 0) for r in history)
    dropped: list[str] = []
    for record in history[:-1]:
        if total <= bound:
            break
        total -= sizes.get(record.revision, 0)
        dropped.append(record.revision)
    return list(history[len(dropped) :]), dropped


def request_for(
    rolled_out: str | None,
    rolled_back_from: str | None,
    history: Sequence[RevisionRecord],
    to: str | None,
    *,
    resume: bool = False,
    unusable: Collection[str] = (),
) -> str | None:
    """The annotation ``crs-controller rollback`` writes for a CRS whose status rolls
    out ``rolled_out`` (``rolled_back_from``: the sources' revision, in a rollback):
    back to ``to`` (a revision of the history, or a prefix of one naming it alone;
    None: the last one that completed, other than the ``unusable`` ones, whose
    snapshots are refused), or ``resume``. None: nothing to do (resume without a
    rollback). Raises ValueError saying why it cannot."""
    sources = rolled_back_from or rolled_out
    if sources is None:
        raise ValueError("no revision in its status yet: nothing was rolled out")
    if resume:
        return None if rolled_back_from is None else f"{sources}/{RESUME}"
    target = _named(history, to) if to is not None else None
    if to is None:
        target = last_complete(history, excluding=(sources, rolled_out or sources, *unusable))
        if target is None:
            usable = " with a usable snapshot" if unusable else ""
            raise ValueError(
                f"no earlier revision{usable} completed its rollout: name one with --to-revision"
            )
    assert target is not None
    if target == sources:
        return None if rolled_back_from is None else f"{sources}/{RESUME}"
    return f"{sources}/{target}"


def _named(history: Sequence[RevisionRecord], to: str) -> str:
    """The revision of the history ``to`` names (whole, or a prefix naming one alone)."""
    found = [r.revision for r in history if r.revision == to]
    found = found or [r.revision for r in history if to and r.revision.startswith(to)]
    if len(found) != 1:
        known = "not" if not found else "ambiguous"
        raise ValueError(f"revision {to} is {known} in status.history ({len(history)} kept)")
    return found[0]
