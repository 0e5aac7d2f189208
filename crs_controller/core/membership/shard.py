"""Sharding Clusters across controller replicas: who owns which key, and who is live.

Each replica ("shard member") holds a coordination.k8s.io Lease and watches the
others'. A Cluster, keyed ``namespace/name``, falls in one of ``BUCKETS`` buckets
(XXH3 of the key, modulo), and a bucket belongs to the live member with the highest
rendezvous (highest-random-weight) hash for it. Rendezvous hashing is used rather
than ``bucket % len(members)`` because a member joining or leaving moves only the
buckets it gains or had: every other bucket keeps its owner, so a rollout of the
Deployment does not reshuffle (and re-reconcile) every Cluster at once. Buckets,
rather than the keys themselves, are what the members share so that a member's
share can be named in a label selector (its bindings carry their bucket as a label).

Liveness is judged from local observation, as client-go's leader election does: a
Lease's expiry clock restarts when *we* see its renew marker change, measured on our
own monotonic clock. The remote ``renewTime`` is only compared for equality, never
against our wall clock, so clock skew between nodes cannot make a healthy member
look dead or a dead one look alive. The price is that a newly started replica waits
up to one lease duration before it considers a silent member gone.

Everything here is pure: time is passed in as ``now`` (monotonic seconds).
"""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

import xxhash

__all__ = [
    "BUCKETS",
    "LEASE_PREFIX",
    "Members",
    "bucket_of",
    "buckets_of",
    "incarnation_of",
    "lease_name",
    "members_stamp",
    "moved",
    "new_incarnation",
    "owner",
    "weight",
]

# Enough that a member's share of them is even (a quarter of 1,024 each for four
# members is 256 +- 14), few enough that a share named in a label selector
# (``in (...)``, at most 5 characters a bucket) stays a few KiB.
BUCKETS = 1024

LEASE_PREFIX = "crs-controller-shard-"
_MAX_NAME = 253  # a DNS-1123 subdomain
_DIGEST_LEN = 8
_UNSAFE = re.compile(r"[^a-z0-9.-]")
# A dot next to a dot or a dash would leave an empty label or one that begins or
# ends with "-", which a DNS-1123 subdomain does not allow.
_BAD_DOT = re.compile(r"[.-]*\.[.-]*")
_EDGE = "-."
# A member's incarnation: drawn at random each time it starts acting, written in its
# Lease, read back only when it is exactly this (a Lease carries at most 32 hex digits).
_INCARNATION = re.compile(r"[0-9a-f]{32}")
# Members whose Leases are gone, whose last incarnation is still never revived.
GONE_KEPT = 64


def weight(member: str, key: str) -> int:
    """The rendezvous weight of ``member`` for ``key``.

    The NUL separator keeps ("ab", "c") and ("a", "bc") apart; XXH3 is fast and
    stable across processes and versions, unlike Python's salted ``hash``.
    """
    return int(xxhash.xxh3_64_intdigest(f"{member}\x00{key}".encode()))


def bucket_of(namespace: str, name: str) -> int:
    """The bucket of the Cluster ``namespace/name``: XXH3-64 of the key modulo
    ``BUCKETS``, the same in every process and version."""
    return _bucket(f"{namespace}/{name}")


def _bucket(key: str) -> int:
    return int(xxhash.xxh3_64_intdigest(key.encode())) % BUCKETS


def owner(members: Iterable[str], key: str) -> str | None:
    """The owner of the Cluster ``key`` (``namespace/name``): the owner of its bucket,
    the member with the highest weight for the bucket; ties go to the larger name so
    that every replica picks the same one; None when there are no members."""
    owners = _owners(frozenset(members))
    return owners[_bucket(key)] if owners else None


def buckets_of(members: Iterable[str], me: str) -> list[int]:
    """The buckets ``me`` owns among ``members``, ascending (none unless a member)."""
    return [bucket for bucket, chosen in enumerate(_owners(frozenset(members))) if chosen == me]


@lru_cache(maxsize=16)
def _owners(members: frozenset[str]) -> tuple[str, ...]:
    """The owner of every bucket, worked out once per member set (a set changes only
    when a member joins or leaves); empty when there are no members."""
    if not members:
        return ()
    return tuple(
        max(members, key=lambda member: (weight(member, str(bucket)), member))
        for bucket in range(BUCKETS)
    )


def new_incarnation() -> str:
    """A fresh incarnation token: 32 random lowercase hex digits."""
    return secrets.token_hex(16)


def incarnation_of(value: object) -> str:
    """The incarnation token a Lease carries, when it is one (exactly 32 lowercase hex
    digits); "" for none or anything else (a Lease of an earlier release, or written
    by hand)."""
    return value if isinstance(value, str) and _INCARNATION.fullmatch(value) else ""


def members_stamp(members: Iterable[str], incarnations: Mapping[str, str] | None = None) -> str:
    """A digest of a member set: what a member's contribution was computed under, so
    that one computed for another set is told apart (``core.state.contribution``).

    XXH3-64 hex of the sorted members, one a line: each as ``identity NUL token`` when
    every member has an incarnation token (``incarnations``, by identity), so that a
    member that left and came back under the same identity (a new token) makes a new
    set, not the old one again; else (a member of an earlier release, which writes no
    token) each as its identity alone, as that release stamps it, so members of both
    releases agree while a rolling upgrade runs. Buckets never depend on the tokens
    (``owner``): only identities share the Clusters out."""
    names = sorted(set(members))
    tokens = incarnations or {}
    if names and all(tokens.get(name) for name in names):
        names = [f"{name}\x00{tokens[name]}" for name in names]
    return str(xxhash.xxh3_64_hexdigest("\n".join(names).encode()))


def moved(
    before: Iterable[str], after: Iterable[str], keys: Iterable[str], me: str
) -> tuple[list[str], list[str]]:
    """``(gained, lost)``: the keys ``me`` owns after but not before, and before but not
    after, each sorted: what to start reconciling and what to let go of."""
    old, new = frozenset(before), frozenset(after)
    gained: list[str] = []
    lost: list[str] = []
    for key in sorted(set(keys)):
        mine_before, mine_after = owner(old, key) == me, owner(new, key) == me
        if mine_after and not mine_before:
            gained.append(key)
        elif mine_before and not mine_after:
            lost.append(key)
    return gained, lost


@dataclass(slots=True)
class _Seen:
    """The last renew marker seen for one Lease, and when (our clock) it changed."""

    marker: str
    duration: float
    since: float
    incarnation: str = ""  # the member's token with that marker ("": none)

    def expires(self) -> float:
        return self.since + self.duration

    def live(self, now: float) -> bool:
        # now - since < duration, written so that next_expiry() returns the very
        # instant at which live() turns False, whatever the float rounding.
        return now < self.expires()


class Members:
    """The live shard members as this replica sees them.

    Expired members are remembered (not dropped) so that seeing their old marker
    again does not revive them; only a new marker does. A member counted out (found
    expired by ``live``, or its Lease gone) is never revived in the incarnation it
    was counted out in: a renewal of it that lands later (a request in flight past
    the member's deadline, which it does not act on) would bring its old
    contribution back as current. A member truly back has a new token. Every token
    an identity was counted out in is kept for ``kept_for`` seconds (long enough for
    any request carrying it to land and be seen), its latest for good; of the
    identities no longer watched, the latest ``GONE_KEPT``.
    """

    def __init__(self, kept_for: float = math.inf) -> None:
        self._seen: dict[str, _Seen] = {}
        # identity -> each incarnation it was counted out in, and when (latest last)
        self._out: dict[str, dict[str, float]] = {}
        self._kept_for = kept_for

    def observe(
        self, identity: str, marker: str, duration: float, now: float, incarnation: str = ""
    ) -> bool:
        """Record that the Lease of ``identity`` was seen with renew marker ``marker``
        (e.g. its renewTime), lease duration ``duration`` seconds and incarnation token
        ``incarnation`` at monotonic time ``now``.

        A new identity, or a marker different from the last one seen, restarts its
        expiry at ``now``; the same marker seen again does not (a resync is not a
        renewal), though its duration is updated; a renewal in an incarnation this
        member was counted out in is ignored. Returns True when the live set at
        ``now`` changed because of this observation, i.e. when to rebalance.
        """
        self._forget_out(now)
        if incarnation and incarnation in self._out.get(identity, {}):
            return False
        seen = self._seen.get(identity)
        was_live = seen is not None and seen.live(now)
        if seen is None or seen.marker != marker:
            seen = self._seen[identity] = _Seen(marker, duration, now, incarnation)
        else:
            seen.duration = duration
        return seen.live(now) != was_live

    def incarnation(self, identity: str) -> str:
        """The incarnation token of ``identity`` as last observed ("": none)."""
        seen = self._seen.get(identity)
        return seen.incarnation if seen is not None else ""

    def forget(self, identity: str) -> bool:
        """The Lease is gone (deleted, e.g. on a clean shutdown): the member is counted
        out at once. True if it was known."""
        seen = self._seen.pop(identity, None)
        if seen is not None and seen.incarnation:
            tokens = self._out.pop(identity, {})  # the latest gone last
            self._out[identity] = tokens
            tokens.setdefault(seen.incarnation, seen.expires())
        gone = [name for name in self._out if name not in self._seen]
        for name in gone[: max(0, len(gone) - GONE_KEPT)]:
            del self._out[name]
        return seen is not None

    def live(self, now: float) -> frozenset[str]:
        """The identities whose last marker change was observed less than their lease
        duration before ``now`` (strictly: ``now - since < duration``); the others
        are counted out in their incarnation."""
        for name, seen in self._seen.items():
            if seen.incarnation and not seen.live(now):
                self._out.setdefault(name, {}).setdefault(seen.incarnation, now)
        self._forget_out(now)
        return frozenset(name for name, seen in self._seen.items() if seen.live(now))

    def _forget_out(self, now: float) -> None:
        """Forget the tokens counted out over ``kept_for`` ago, but each identity's latest."""
        for tokens in self._out.values():
            for token in list(tokens)[:-1]:
                if now - tokens[token] > self._kept_for:
                    del tokens[token]

    def stale(self, now: float, grace: float) -> list[str]:
        """Members expired for at least ``grace`` seconds more, sorted: their Leases
        are left over by replicas that died (a new pod has a new name) and may go."""
        return sorted(n for n, s in self._seen.items() if now >= s.expires() + grace)

    def next_expiry(self, now: float) -> float | None:
        """The earliest time (> ``now``) at which a currently live member expires, or
        None: when to look at the live set again if no Lease event comes first."""
        return min((s.expires() for s in self._seen.values() if s.live(now)), default=None)


def lease_name(identity: str) -> str:
    """The name of the Lease of ``identity``: ``crs-controller-shard-`` followed by a
    DNS-1123 subdomain safe form of it.

    The identity is lowercased, every character outside ``[a-z0-9.-]`` becomes
    ``-``, dots are kept clear of empty labels and dashes, and the ends are stripped
    to alphanumerics. A name that would exceed 253 characters is truncated and given
    ``-`` plus 8 hex digits of the XXH3 of the original identity, so two long
    identities with a common prefix still get distinct Leases. Identities that only
    differ in characters cleaning removes (case, ``_`` vs ``-``) share a name; pod
    names, the usual identity, are already valid and are kept as they are.
    Raises ValueError when nothing is left after cleaning.
    """
    part = _BAD_DOT.sub(".", _UNSAFE.sub("-", identity.lower())).strip(_EDGE)
    if not part:
        raise ValueError(f"shard identity {identity!r} has no DNS-1123 safe characters")
    room = _MAX_NAME - len(LEASE_PREFIX)
    if len(part) > room:
        digest = xxhash.xxh3_64_hexdigest(identity.encode())[:_DIGEST_LEN]
        part = part[: room - _DIGEST_LEN - 1].rstrip(_EDGE) + "-" + digest
    return LEASE_PREFIX + part
