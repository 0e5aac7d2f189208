"""A member's contribution to one CRS: what the Clusters it holds say about the CRS's
status and rollout, as combinable counts and bounded samples; and the contributions
of a member set combined into what the whole fleet says.

A ``Contribution`` holds the tally of its clusters' outcomes (``tally``), their share
of the rollout (``shares``; None when the CRS plans no rollout), the first
``SKIPPED_KEPT`` protected objects kept on them (as ``skipped_status`` names them)
and, while the CRS is being deleted, how many of them still hold something of it
(``holding``; the sum over the members is what its finalizer waits on), and on how
many of those its deletion waits for a dependent being deleted too (``waiting``: the
first ``MAX_WAITING`` dependents by name, each with its count).
It also carries the revision whose rollout the member saw halt last (``halted``,
its memory; None: none, or it restarted since), so that every member plans from the
same one: the combination's ``halted`` is the first of those the members name.
It is stamped with what it was computed under: the member set (``members_stamp``:
its members and their incarnations), the CRS's uid and generation. ``combined``
adds up the contributions of the live members, each computed under this very
member set, CRS uid, generation and rollout; otherwise it says which members it
waits for (``Waiting``). Contributions of members that are not live (a replica
that left) are left out.

Its JSON (``Contribution.to_json``: compact, non-ASCII characters as they are) is at
most ``max_json_bytes(steps)`` bytes of UTF-8: ``ENVELOPE_BYTES`` for the stamps
(a member identity of at most 253 characters, a uid of at most 64), the halted
revision (at most ``MAX_REVISION`` characters) and the holding count (below
``MAX_COUNT``), the tally's
44,032, the share's 4,608 plus 200 for each group (each step and the implicit last
one; nothing without a share) and ``SKIPPED_BYTES`` for the kept objects (20, each
with a cluster of at most 253 characters, an apiVersion of at most 316, a kind of at
most 63 and a name of at most 253, as ``skipped_status`` cuts them, a character at
most 6 bytes), and ``WAITING_BYTES`` for the dependents waited for (10, each a name
of at most 253 characters and a count). ``from_json``/``from_api`` refuse anything
larger, or malformed, with ValueError; before parsing, text over ``MAX_TEXT_BYTES``
(256 KiB) is refused unread, which a contribution reaches only with a share of over
434 steps.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter

from crs_controller.core.api.models import SkippedDeletion
from crs_controller.core.membership.shard import members_stamp
from crs_controller.core.rollout import shares
from crs_controller.core.rollout.plan import Gate, portion, wanting
from crs_controller.core.rollout.shares import Share
from crs_controller.core.state import tally as tallies
from crs_controller.core.state.deletion_guard import SKIPPED_KEPT, skipped_together
from crs_controller.core.state.tally import Tally

__all__ = [
    "ENVELOPE_BYTES",
    "MAX_TEXT_BYTES",
    "MAX_WAITING",
    "SKIPPED_BYTES",
    "Combined",
    "Contribution",
    "Waiting",
    "combined",
    "max_json_bytes",
]

TALLY_BYTES = 44_032
SHARE_BYTES, GROUP_BYTES = 4_608, 200
ENVELOPE_BYTES = 2_048
SKIPPED_BYTES = SKIPPED_KEPT * (6 * (253 + 316 + 63 + 253) + 128)
MAX_TEXT_BYTES = 256 * 1024
MAX_COUNT = 10**9  # counts of Clusters stay below it (the bounds assume so)
MAX_REVISION = 64  # characters of a revision (an XXH3-64 digest, prefixed)
MAX_WAITING = 10  # dependents a deletion is said to wait for
WAITING_BYTES = MAX_WAITING * (6 * 253 + 32)


def max_json_bytes(steps: int | None) -> int:
    """The most bytes a contribution's JSON takes, with a share of ``steps`` steps
    (None: no share)."""
    share = 0 if steps is None else SHARE_BYTES + GROUP_BYTES * (steps + 1)
    return ENVELOPE_BYTES + TALLY_BYTES + share + SKIPPED_BYTES + WAITING_BYTES


@dataclass(frozen=True)
class Contribution:
    """What the clusters ``member`` holds say about the CRS ``crs_uid`` at
    ``generation``, computed under the member set whose ``members_stamp`` is
    ``members``."""

    member: str
    members: str
    crs_uid: str
    generation: int
    tally: Tally
    share: Share | None = None
    skipped: tuple[SkippedDeletion, ...] = field(default=())
    # The CRS being deleted: how many of the member's Clusters still hold something
    # of it (an entry in their binding, or objects applied and not recorded yet);
    # None while it is not being deleted (nothing counted).
    holding: int | None = None
    # The revision whose rollout the member saw halt last (None: none it remembers).
    halted: str | None = None
    # The CRS being deleted: the dependents being deleted its deletion waits for, each
    # with how many of the member's Clusters it holds there (by name, distinct).
    waiting: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if len(self.skipped) > SKIPPED_KEPT:
            raise ValueError(f"a contribution names over {SKIPPED_KEPT} kept objects")
        if self.holding is not None and not 0 <= self.holding < MAX_COUNT:
            raise ValueError(f"a contribution's holding count is not in [0, {MAX_COUNT})")
        if self.halted is not None and len(self.halted) > MAX_REVISION:
            raise ValueError(f"a contribution's halted revision is over {MAX_REVISION} characters")
        if len(self.waiting) > MAX_WAITING:
            raise ValueError(f"a contribution names over {MAX_WAITING} dependents waited for")
        if any(not 0 < n < MAX_COUNT or len(name) > 253 for name, n in self.waiting):
            raise ValueError("a contribution's dependent waited for is out of bounds")

    @property
    def target(self) -> str | None:
        """The revision its share is of (None: no share)."""
        return None if self.share is None else self.share.target

    def to_api(self) -> dict[str, Any]:
        """The contribution as JSON values; ``from_api`` reads it back."""
        data: dict[str, Any] = _JSON.dump_python(self, mode="json")
        return data

    def to_json(self) -> str:
        return _text(self.to_api())

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Contribution:
        """A contribution from its JSON values; ValueError when they are not one, or
        take more than its bound."""
        if not isinstance(data, Mapping):
            raise ValueError("a contribution is a JSON object")
        made = _JSON.validate_python(data)
        steps = None if made.share is None else made.share.steps
        if len(_text(data).encode()) > max_json_bytes(steps):
            raise ValueError("a contribution over its size bound")
        return made

    @classmethod
    def from_json(cls, text: str | bytes) -> Contribution:
        """A contribution from its JSON text; ValueError when it is not one."""
        size = len(text.encode() if isinstance(text, str) else text)
        if size > MAX_TEXT_BYTES:
            raise ValueError(f"a contribution over {MAX_TEXT_BYTES} bytes")
        return cls.from_api(json.loads(text))


_JSON = TypeAdapter(Contribution)


def _text(data: Mapping[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class Waiting:
    """Combining waits for these members: ``missing`` have no contribution yet,
    ``stale`` one computed under another member set, CRS uid, generation or rollout."""

    missing: tuple[str, ...] = ()
    stale: tuple[str, ...] = ()

    def __str__(self) -> str:
        said = [f"{', '.join(self.missing)} (none yet)"] if self.missing else []
        said += [f"{', '.join(self.stale)} (out of date)"] if self.stale else []
        return "waiting for the contributions of " + " and ".join(said)


@dataclass(frozen=True)
class Combined:
    """What the live members' clusters say together; ``parts`` are the members'
    contributions it adds up, by member."""

    tally: Tally
    share: Share | None
    skipped: tuple[SkippedDeletion, ...]
    parts: Mapping[str, Contribution]

    @property
    def holding(self) -> int | None:
        """The CRS being deleted: the Clusters that still hold something of it, of
        every member; None when a member counted none (it has not seen the deletion)."""
        counts = [c.holding for c in self.parts.values()]
        return None if any(n is None for n in counts) else sum(n or 0 for n in counts)

    @property
    def waiting(self) -> dict[str, int]:
        """The CRS being deleted: the dependents its deletion waits for, each with the
        Clusters of every member it waits on (the first ``MAX_WAITING`` by name)."""
        counts: dict[str, int] = {}
        for part in self.parts.values():
            for name, clusters in part.waiting:
                counts[name] = counts.get(name, 0) + clusters
        return {name: counts[name] for name in sorted(counts)[:MAX_WAITING]}

    @property
    def halted(self) -> str | None:
        """The revision some member saw the rollout halt on last (the first by name
        when they name several; None: none does), the same for every member combining
        the same contributions."""
        named = [c.halted for c in self.parts.values() if c.halted is not None]
        return min(named) if named else None

    def admissions(self, gate: Gate, me: str) -> int:
        """``me``'s part of the gate's budget (``portion``), by the clusters of each
        member's share the gate wants."""
        parts = self.parts.items()
        wanted = {m: 0 if c.share is None else wanting(c.share, gate) for m, c in parts}
        return portion(gate.budget, wanted, me)


def combined(
    contributions: Mapping[str, Contribution],
    members: frozenset[str],
    crs_uid: str,
    generation: int,
    target: str | None,
    *,
    stamp: str | None = None,
) -> Combined | Waiting:
    """The contributions of every one of ``members`` (by member) added up, when each
    was computed under ``members`` (their ``stamp``: by default that of their
    identities alone), for ``crs_uid`` at ``generation`` and a share of ``target``
    (None: no share), the shares alike in steps and halted revision (else those
    unlike the first member's are stale); else the members waited for."""
    stamp = members_stamp(members) if stamp is None else stamp
    missing = tuple(m for m in sorted(members) if m not in contributions)
    current = {
        m: c
        for m, c in sorted(contributions.items())
        if m in members
        and (c.member, c.members, c.crs_uid, c.generation, c.target)
        == (m, stamp, crs_uid, generation, target)
    }
    stale = [m for m in sorted(members) if m in contributions and m not in current]
    stale += _unlike(current.values())
    if missing or stale:
        return Waiting(missing, tuple(sorted(stale)))
    parts = tuple(current.values())
    held = [c.share for c in parts if c.share is not None]
    return Combined(
        tally=tallies.combine(c.tally for c in parts),
        share=shares.combine(held) if held else None,
        skipped=tuple(skipped_together(c.skipped for c in parts)),
        parts=current,
    )


def _unlike(parts: Iterable[Contribution]) -> list[str]:
    """The members whose share is of another step count or halted revision than the
    first member's (its memory of a halted rollout lags, or leads)."""
    held = [(c.member, c.share) for c in parts if c.share is not None]
    if not held:
        return []
    first = held[0][1]
    return [m for m, s in held if (s.steps, s.halted) != (first.steps, first.halted)]
