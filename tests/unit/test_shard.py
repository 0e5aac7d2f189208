"""Shard membership (crs_controller.core.membership.shard): buckets of Clusters, rendezvous
ownership of the buckets (deterministic, order-independent, each Cluster in exactly one
member's share, minimal movement on join/leave, even spread), moved() gains and
losses, observation-based Lease expiry in Members, and Lease names."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.core.membership import shard
from crs_controller.core.membership.shard import (
    BUCKETS,
    Members,
    bucket_of,
    buckets_of,
    lease_name,
    moved,
    owner,
    weight,
)

names = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789-"), min_size=1, max_size=12)
member_sets = st.frozensets(names, min_size=1, max_size=8)
key_lists = st.lists(names.map(lambda name: f"ns/{name}"), min_size=1, max_size=30)

PODS = ("crs-controller-0", "crs-controller-1", "crs-controller-2")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


# --- owner ---------------------------------------------------------------------------


def test_weight_is_xxh3_of_member_nul_key() -> None:
    assert weight("m", "ns/c") == xxhash.xxh3_64_intdigest(b"m\x00ns/c")
    assert weight("ab", "c") != weight("a", "bc")


def test_owner_of_no_members_is_none() -> None:
    assert owner([], "ns/cluster-0") is None
    assert owner(iter(()), "ns/cluster-0") is None


def test_owner_ties_go_to_the_larger_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shard, "weight", lambda member, key: 7)
    shard._owners.cache_clear()  # the owners of every bucket are kept per member set
    try:
        assert owner(["b", "c", "a"], "ns/x") == "c"
    finally:
        shard._owners.cache_clear()


def test_bucket_is_xxh3_of_namespace_slash_name_modulo_buckets() -> None:
    assert BUCKETS == 1024
    assert bucket_of("ns", "c") == xxhash.xxh3_64_intdigest(b"ns/c") % 1024
    # Fixed values: the bucket is stable across processes and releases (labels say it).
    assert [bucket_of("default", f"cluster-{i}") for i in range(3)] == [245, 741, 688]


@given(member_sets, names, names)
def test_a_cluster_belongs_to_the_owner_of_its_bucket(
    members: frozenset[str], namespace: str, name: str
) -> None:
    chosen = owner(members, f"{namespace}/{name}")
    assert chosen is not None
    assert bucket_of(namespace, name) in buckets_of(members, chosen)


@given(member_sets, st.lists(st.tuples(names, names), min_size=1, max_size=30))
def test_every_cluster_is_in_exactly_one_live_members_share(
    members: frozenset[str], clusters: list[tuple[str, str]]
) -> None:
    shares = {member: set(buckets_of(members, member)) for member in members}
    assert sorted(b for share in shares.values() for b in share) == list(range(BUCKETS))
    for namespace, name in clusters:
        holders = [m for m, share in shares.items() if bucket_of(namespace, name) in share]
        assert holders == [owner(members, f"{namespace}/{name}")]


@given(member_sets, names)
def test_a_joiner_takes_only_buckets_that_move_to_it(members: frozenset[str], new: str) -> None:
    grown = members | {new}
    for member in members - {new}:
        # Each of the others keeps what it had but what the newcomer takes.
        after = set(buckets_of(grown, member))
        assert after <= set(buckets_of(members, member))
        assert set(buckets_of(members, member)) - after <= set(buckets_of(grown, new))


def test_no_member_no_share() -> None:
    assert buckets_of([], "a") == []
    assert buckets_of(["a", "b"], "c") == []


@settings(derandomize=True, max_examples=25)
@given(st.frozensets(names, min_size=4, max_size=4), st.data())
def test_a_fourth_member_takes_about_a_quarter_of_ten_thousand_clusters(
    four: frozenset[str], data: st.DataObject
) -> None:
    # Derandomized: the member names drawn are the same at every run, so a spread
    # within bounds is not a matter of luck (256 +- 14 buckets for a quarter).
    new = data.draw(st.sampled_from(sorted(four)))
    three = four - {new}
    keys = [f"fleet/cluster-{i}" for i in range(10_000)]
    taken = [key for key in keys if owner(four, key) == new]
    assert all(owner(three, key) != new for key in taken)
    assert 0.20 <= len(taken) / len(keys) <= 0.30, len(taken)


@given(member_sets, names, st.randoms(use_true_random=False))
def test_owner_is_a_member_deterministic_and_order_independent(
    members: frozenset[str], key: str, rng: random.Random
) -> None:
    ordered = sorted(members)
    shuffled = list(members)
    rng.shuffle(shuffled)
    chosen = owner(ordered, key)
    assert chosen in members
    assert owner(ordered, key) == chosen
    assert owner(shuffled, key) == chosen
    assert owner(reversed(ordered), key) == chosen


@given(member_sets, key_lists, st.data())
def test_removing_a_member_moves_only_its_keys(
    members: frozenset[str], keys: list[str], data: st.DataObject
) -> None:
    gone = data.draw(st.sampled_from(sorted(members)))
    rest = members - {gone}
    for key in keys:
        before, after = owner(members, key), owner(rest, key)
        if before != gone:
            assert after == before
        else:
            assert after != gone


@given(member_sets, key_lists, names)
def test_adding_a_member_moves_keys_only_to_it(
    members: frozenset[str], keys: list[str], new: str
) -> None:
    grown = members | {new}
    for key in keys:
        before, after = owner(members, key), owner(grown, key)
        assert after in (before, new)


def test_sixty_clusters_spread_over_three_members() -> None:  # 20/21/19
    counts = Counter(owner(PODS, f"ns/cluster-{i}") for i in range(60))
    assert set(counts) == set(PODS)
    assert all(10 <= n <= 30 for n in counts.values()), counts


def test_three_thousand_clusters_spread_evenly_over_three_members() -> None:
    total = 3000
    counts = Counter(owner(PODS, f"ns/cluster-{i}") for i in range(total))
    assert set(counts) == set(PODS)
    assert all(0.25 <= n / total <= 0.42 for n in counts.values()), counts


# --- moved -----------------------------------------------------------------------------

KEYS = [f"ns/cluster-{i}" for i in range(60)]


def owned(members: tuple[str, ...], me: str) -> list[str]:
    return sorted(key for key in KEYS if owner(members, key) == me)


@pytest.mark.parametrize(
    ("before", "after", "me", "expect_gained", "expect_lost"),
    [
        pytest.param(PODS, PODS, PODS[0], [], [], id="no change"),
        pytest.param((), (), PODS[0], [], [], id="no members"),
        pytest.param((), (PODS[0],), PODS[0], owned((PODS[0],), PODS[0]), [], id="first member"),
        pytest.param(
            PODS[:2], PODS, PODS[2], owned(PODS, PODS[2]), [], id="I join: I gain my share"
        ),
        pytest.param(
            PODS[:2],
            PODS,
            PODS[0],
            [],
            sorted(set(owned(PODS[:2], PODS[0])) - set(owned(PODS, PODS[0]))),
            id="another joins: I lose some",
        ),
        pytest.param(
            PODS,
            PODS[:2],
            PODS[0],
            sorted(set(owned(PODS[:2], PODS[0])) - set(owned(PODS, PODS[0]))),
            [],
            id="another leaves: I gain some",
        ),
        pytest.param(PODS, PODS[1:], PODS[0], [], owned(PODS, PODS[0]), id="I leave: I lose all"),
    ],
)
def test_moved(
    before: tuple[str, ...],
    after: tuple[str, ...],
    me: str,
    expect_gained: list[str],
    expect_lost: list[str],
) -> None:
    gained, lost = moved(before, after, reversed(KEYS), me)
    assert (gained, lost) == (expect_gained, expect_lost)
    assert gained == sorted(gained) and lost == sorted(lost)


def test_moved_accepts_one_shot_iterables_and_duplicate_keys() -> None:
    gained, lost = moved(iter(()), iter(PODS), iter(KEYS + KEYS), PODS[1])
    assert (gained, lost) == (owned(PODS, PODS[1]), [])


def test_a_joiner_gains_something_and_others_only_lose() -> None:
    gained_by_new, _ = moved(PODS[:2], PODS, KEYS, PODS[2])
    assert gained_by_new
    for me in PODS[:2]:
        gained, _lost = moved(PODS[:2], PODS, KEYS, me)
        assert gained == []


# --- Members -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("events", "now", "expect"),
    [
        pytest.param([], 0.0, set(), id="nobody"),
        pytest.param([("a", "r1", 10.0, 0.0)], 0.0, {"a"}, id="just seen"),
        pytest.param([("a", "r1", 10.0, 0.0)], 9.999, {"a"}, id="just before expiry"),
        pytest.param([("a", "r1", 10.0, 0.0)], 10.0, set(), id="expired exactly at duration"),
        pytest.param([("a", "r1", 10.0, 0.0)], 50.0, set(), id="long expired"),
        pytest.param(
            [("a", "r1", 10.0, 0.0), ("a", "r1", 10.0, 8.0)], 12.0, set(), id="same marker"
        ),
        pytest.param(
            [("a", "r1", 10.0, 0.0), ("a", "r2", 10.0, 8.0)], 12.0, {"a"}, id="new marker"
        ),
        pytest.param(
            [("a", "r1", 10.0, 0.0), ("a", "r2", 10.0, 8.0)], 18.0, set(), id="renewal expires"
        ),
        pytest.param(
            [("a", "r1", 10.0, 0.0), ("a", "r2", 10.0, 30.0)], 35.0, {"a"}, id="comes back"
        ),
        pytest.param(
            [("a", "r1", 10.0, 0.0), ("b", "r1", 20.0, 0.0)], 15.0, {"b"}, id="own durations"
        ),
        pytest.param([("a", "r1", 0.0, 0.0)], 0.0, set(), id="zero duration is never live"),
    ],
)
def test_live(events: list[tuple[str, str, float, float]], now: float, expect: set[str]) -> None:
    members = Members()
    for identity, marker, duration, at in events:
        members.observe(identity, marker, duration, at)
    assert members.live(now) == frozenset(expect)


def test_same_marker_seen_again_does_not_extend() -> None:
    members = Members()
    members.observe("a", "r1", 10.0, 0.0)
    for at in (3.0, 6.0, 9.0):
        assert members.observe("a", "r1", 10.0, at) is False
    assert members.live(9.5) == {"a"}
    assert members.live(10.0) == frozenset()
    assert members.observe("a", "r1", 10.0, 11.0) is False
    assert members.live(11.0) == frozenset()


def test_new_marker_extends_from_when_it_was_seen() -> None:
    members = Members()
    members.observe("a", "r1", 10.0, 0.0)
    members.observe("a", "r2", 10.0, 5.0)
    assert members.live(14.9) == {"a"}
    assert members.live(15.0) == frozenset()


def test_a_marker_seen_before_still_counts_as_a_change() -> None:
    members = Members()
    members.observe("a", "r1", 10.0, 0.0)
    members.observe("a", "r2", 10.0, 1.0)
    members.observe("a", "r1", 10.0, 2.0)  # only equality with the last one matters
    assert members.live(11.5) == {"a"}


def test_same_marker_takes_the_new_duration_without_restarting() -> None:
    members = Members()
    members.observe("a", "r1", 10.0, 0.0)
    members.observe("a", "r1", 20.0, 5.0)
    assert members.live(19.0) == {"a"}
    assert members.live(20.0) == frozenset()


@pytest.mark.parametrize(
    ("events", "expect"),
    [
        pytest.param([("a", "r1", 0.0)], [True], id="new member appears"),
        pytest.param([("a", "r1", 0.0), ("a", "r2", 5.0)], [True, False], id="plain renewal"),
        pytest.param([("a", "r1", 0.0), ("a", "r1", 5.0)], [True, False], id="resync"),
        pytest.param(
            [("a", "r1", 0.0), ("a", "r2", 30.0)], [True, True], id="expired one comes back"
        ),
        pytest.param(
            [("a", "r1", 0.0), ("a", "r1", 30.0)], [True, False], id="expired, same marker"
        ),
        pytest.param(
            [("a", "r1", 0.0), ("b", "r1", 1.0), ("a", "r2", 2.0)],
            [True, True, False],
            id="second member appears",
        ),
    ],
)
def test_observe_reports_live_set_changes(
    events: list[tuple[str, str, float]], expect: list[bool]
) -> None:
    members = Members()
    assert [members.observe(i, m, 10.0, at) for i, m, at in events] == expect


def test_observe_new_member_with_zero_duration_changes_nothing() -> None:
    assert Members().observe("a", "r1", 0.0, 0.0) is False


def test_forget_removes() -> None:
    members = Members()
    members.observe("a", "r1", 10.0, 0.0)
    members.observe("b", "r1", 10.0, 0.0)
    assert members.forget("a") is True
    assert members.live(1.0) == {"b"}
    assert members.forget("a") is False
    assert members.forget("never-seen") is False
    # After a forget the old marker counts as new again.
    assert members.observe("a", "r1", 10.0, 20.0) is True
    assert members.live(21.0) == {"a"}


T0, T1 = "0" * 32, "1" * 32


def test_a_member_counted_out_is_never_revived_in_that_incarnation() -> None:
    """Its renewal that lands after it was counted out (in flight past its deadline)
    leaves it out; a renewal in a new incarnation brings it back."""
    members = Members()
    members.observe("b", "r1", 10.0, 0.0, T0)
    assert members.live(10.0) == set()  # counted out
    assert members.observe("b", "r2", 10.0, 11.0, T0) is False
    assert members.live(11.0) == set() and members.incarnation("b") == T0
    assert members.observe("b", "r3", 10.0, 12.0, T1) is True
    assert members.live(12.0) == {"b"} and members.incarnation("b") == T1


def test_a_member_not_counted_out_yet_takes_a_late_renewal() -> None:
    """Expired only by a time nobody has looked at: not counted out, so its renewal
    seen late (a watch that was slow) keeps it in."""
    members = Members()
    members.observe("b", "r1", 10.0, 0.0, T0)
    members.observe("b", "r2", 10.0, 12.0, T0)
    assert members.live(12.0) == {"b"}


def test_a_member_without_incarnations_is_revived_by_any_new_marker() -> None:
    members = Members()
    members.observe("b", "r1", 10.0, 0.0)
    assert members.live(10.0) == set()
    members.observe("b", "r2", 10.0, 11.0)
    assert members.live(11.0) == {"b"}


def test_a_member_whose_lease_is_gone_is_never_revived_in_that_incarnation() -> None:
    members = Members()
    members.observe("b", "r1", 10.0, 0.0, T0)
    members.forget("b")
    members.observe("b", "r2", 10.0, 1.0, T0)  # the Lease re-created by a late renewal
    assert members.live(1.0) == set()
    # Only the last of so many gone are kept.
    for n in range(shard.GONE_KEPT):
        members.observe(f"m{n}", "r1", 10.0, 2.0, T1)
        members.forget(f"m{n}")
    members.observe("b", "r3", 10.0, 3.0, T0)
    members.observe("m0", "r2", 10.0, 3.0, T1)
    assert members.live(3.0) == {"b"}


def test_a_member_is_never_revived_in_any_incarnation_it_was_counted_out_in() -> None:
    """b is counted out in T0, back in T1, counted out again in T1; then a renewal it
    sent in T0 that hung lands: b stays out. Tokens older than the latest are kept
    ``kept_for`` seconds after they were counted out, then forgotten."""
    members = Members(kept_for=45.0)
    members.observe("b", "r1", 10.0, 0.0, T0)
    assert members.live(10.0) == set()  # counted out in T0
    members.observe("b", "r2", 10.0, 11.0, T1)
    assert members.live(11.0) == {"b"}
    assert members.live(21.0) == set()  # counted out in T1
    members.observe("b", "r3", 10.0, 22.0, T0)  # a renewal in T0 that hung lands
    assert members.live(22.0) == set()
    members.observe("b", "r4", 10.0, 56.0, T0)  # T0 counted out 46 s ago: forgotten
    assert members.live(56.0) == {"b"}


def test_stale_members_are_those_expired_for_longer_than_the_grace() -> None:
    members = Members()
    members.observe("a", "t1", 10.0, now=0.0)
    members.observe("b", "t1", 10.0, now=5.0)
    assert members.stale(now=9.0, grace=20.0) == []
    assert members.stale(now=30.0, grace=20.0) == ["a"]  # expired at 10, stale from 30
    assert members.stale(now=35.0, grace=20.0) == ["a", "b"]
    members.observe("a", "t2", 10.0, now=35.0)  # renewed after all: not stale
    assert members.stale(now=35.0, grace=20.0) == ["b"]


def test_next_expiry() -> None:
    members = Members()
    assert members.next_expiry(0.0) is None
    members.observe("a", "r1", 10.0, 0.0)
    members.observe("b", "r1", 15.0, 2.0)
    assert members.next_expiry(0.0) == 10.0
    assert members.next_expiry(9.0) == 10.0
    assert members.next_expiry(10.0) == 17.0
    assert members.next_expiry(17.0) is None
    members.observe("a", "r2", 10.0, 12.0)
    assert members.next_expiry(12.0) == 17.0
    assert members.next_expiry(17.0) == 22.0


@given(
    st.lists(
        st.tuples(
            st.sampled_from("abc"),
            st.sampled_from(["r1", "r2"]),
            st.floats(0.0, 30.0),
            st.floats(0.0, 10.0),
        ),
        max_size=12,
    ),
    st.floats(0.0, 40.0),
)
def test_next_expiry_is_when_the_live_set_shrinks(
    steps: list[tuple[str, str, float, float]], extra: float
) -> None:
    members, now = Members(), 0.0
    for identity, marker, duration, advance in steps:
        now += advance
        before = members.live(now)
        changed = members.observe(identity, marker, duration, now)
        assert changed == (members.live(now) != before)
    now += extra
    live = members.live(now)
    at = members.next_expiry(now)
    if not live:
        assert at is None
        return
    assert at is not None and at > now
    assert members.live(at) < live
    assert members.live(now + (at - now) / 2) == live


# --- lease_name ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("identity", "expect"),
    [
        ("crs-controller-7d9f8-x2kqz", "crs-controller-shard-crs-controller-7d9f8-x2kqz"),
        ("Node-A.Example.COM", "crs-controller-shard-node-a.example.com"),
        ("host_1:pod_2", "crs-controller-shard-host-1-pod-2"),
        ("__leading-and-trailing__", "crs-controller-shard-leading-and-trailing"),
        ("a..b-.c.-d", "crs-controller-shard-a.b.c.d"),
        ("héllo wörld", "crs-controller-shard-h-llo-w-rld"),
    ],
)
def test_lease_name(identity: str, expect: str) -> None:
    assert lease_name(identity) == expect


@pytest.mark.parametrize("identity", ["", "_", "---", "...", "!@#", "ÄÖÜ"])
def test_lease_name_of_nothing_usable_is_an_error(identity: str) -> None:
    with pytest.raises(ValueError, match="shard identity"):
        lease_name(identity)


def test_long_identities_are_truncated_and_kept_apart() -> None:
    first, second = "x" * 300 + "-1", "x" * 300 + "-2"
    names = lease_name(first), lease_name(second)
    assert names[0] != names[1]
    for name in names:
        assert len(name) <= 253
        assert DNS1123_SUBDOMAIN.fullmatch(name)


def test_identity_that_just_fits_is_not_truncated() -> None:
    room = 253 - len("crs-controller-shard-")
    assert lease_name("a" * room) == "crs-controller-shard-" + "a" * room
    assert lease_name("a" * (room + 1)) != "crs-controller-shard-" + "a" * (room + 1)


@given(st.text(min_size=1, max_size=400))
def test_lease_name_is_always_a_valid_subdomain(identity: str) -> None:
    try:
        name = lease_name(identity)
    except ValueError:
        return
    assert len(name) <= 253
    assert DNS1123_SUBDOMAIN.fullmatch(name)
    assert name.startswith("crs-controller-shard-")
