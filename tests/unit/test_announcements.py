"""Events told once per CRS (``engine.announcements``): notes from many clusters
become one Event per type and reason once they settle; the wait follows an injected
clock; messages name clusters and counts, a later note for a cluster replaces an
earlier one; the Events they become carry no control characters."""

from __future__ import annotations

import re
from typing import Any, cast

import pytest

from crs_controller.clients.kube import KubeClient
from crs_controller.core.spec.objects import parse_crs
from crs_controller.engine.io.events import EventRecorder
from crs_controller.engine.memory.notes import Announcement, Announcements, Note, gather

from .fake_clock import FakeClock
from .memory_kube import MemoryKube

NS, CRS = "n", "cni"


def applied(cluster: str, *resources: str) -> Note:
    return Note("Normal", "Applied", cluster, resources=resources or ("ConfigMap/cni",))


def failed(cluster: str, message: str = "boom") -> Note:
    return Note("Warning", "ApplyFailed", cluster, message=message)


def test_two_hundred_clusters_are_one_event() -> None:
    told = gather([applied(f"c{i:03d}") for i in range(200)])
    assert told == [
        Announcement(
            "Normal",
            "Applied",
            "applied ConfigMap/cni to 200 clusters (c000, c001, c002, c003, c004 and 195 more)",
            tuple(f"c{i:03d}" for i in range(200)),
        )
    ]


def test_failures_are_counted_in_the_normal_event_and_told_in_one_warning() -> None:
    notes = [applied("a"), applied("b"), failed("c", "x"), failed("d", "y"), failed("c", "z")]
    normal, warning = gather(notes)
    assert normal.message == "applied ConfigMap/cni to 2 clusters (a, b); 2 clusters failed"
    assert (warning.type, warning.reason) == ("Warning", "ApplyFailed")
    assert warning.message == "ApplyFailed on 2 clusters: c: z; d: y"
    # Each names the clusters it is about, for the notification it may make.
    assert (normal.clusters, warning.clusters) == (("a", "b"), ("c", "d"))


def test_one_cluster_reads_naturally_and_resources_are_merged() -> None:
    (told,) = gather([applied("a", "Secret/b"), applied("a", "ConfigMap/a", "Secret/b")])
    assert told.message == "applied ConfigMap/a, Secret/b to cluster a"
    (drift,) = gather([Note("Normal", "DriftCorrected", "a", resources=("ConfigMap/a",))])
    assert drift.message == "reapplied after drift ConfigMap/a to cluster a"


def test_many_warnings_show_the_first_few_messages() -> None:
    (told,) = gather([failed(f"c{i}", f"m{i}") for i in range(5)])
    assert told.message == "ApplyFailed on 5 clusters: c0: m0; c1: m1; c2: m2; and 2 more"


def test_notes_are_due_once_quiet_or_after_the_longest_wait() -> None:
    clock = FakeClock()
    notes = Announcements(clock, quiet=2, longest=10)
    assert notes.wait(NS, CRS) is None
    assert notes.note(NS, CRS, applied("a")) == 2  # when the CRS should look
    assert notes.wait(NS, CRS) == 2
    clock.advance(1.5)
    notes.note(NS, CRS, applied("b"))  # still coming in: the quiet period restarts
    assert notes.wait(NS, CRS) == 2
    for _ in range(6):  # a steady trickle is told at the latest 10 s after the first
        clock.advance(1.5)
        notes.note(NS, CRS, applied("c"))
    assert notes.wait(NS, CRS) == 0
    (event,) = notes.take(NS, CRS)
    assert event.message == "applied ConfigMap/cni to 3 clusters (a, b, c)"
    assert notes.wait(NS, CRS) is None and notes.take(NS, CRS) == []


def test_dropped_notes_are_never_told() -> None:
    notes = Announcements(FakeClock())
    notes.note(NS, CRS, applied("a"))
    notes.drop(NS, CRS)
    assert notes.wait(NS, CRS) is None


def test_each_warning_message_is_safe_and_leaves_room_for_the_others() -> None:
    notes = [failed("a", "x\x1b[2J\r\n" + "y" * 2000), failed("b", "m1"), failed("c", "m2")]
    (told,) = gather(notes)
    assert "\x1b" not in told.message and "\r" not in told.message
    assert told.message.startswith("ApplyFailed on 3 clusters: a: x\\x1b[2J\\r\\nyyy")
    assert told.message.endswith("…; b: m1; c: m2")
    assert len(told.message) <= 1000


async def test_events_go_out_without_control_characters() -> None:
    mgmt = MemoryKube("management")
    crs = parse_crs(
        {
            "apiVersion": "addons.crs.dev/v1alpha1",
            "kind": "ClusterResourceSet",
            "metadata": {"name": CRS, "namespace": NS, "uid": "u1"},
            "spec": {"clusterSelector": {}, "resources": [{"kind": "ConfigMap", "name": "a"}]},
        }
    )
    events = EventRecorder(cast(KubeClient, mgmt))
    await events.emit(crs, "Warning", "ApplyFailed", "ConfigMap n/x\x1b[31m\r\nforged" + "z" * 2000)
    await events.emit(crs, "Normal", "Applied", "applied ConfigMap/cni to cluster a")
    sent: list[dict[str, Any]] = [o for k, o in mgmt.objects.items() if k[1] == "Event"]
    by_reason = {e["reason"]: e["message"] for e in sent}
    assert by_reason["Applied"] == "applied ConfigMap/cni to cluster a"  # as it was
    warning = by_reason["ApplyFailed"]
    assert warning.startswith("ConfigMap n/x\\x1b[31m\\r\\nforgedzzz")
    assert len(warning) == 1000 and warning.endswith("…")


def missing(cluster: str) -> Note:
    return Note("Warning", "ResourceNotFound", cluster, message="ConfigMap n/cni not found")


def test_a_missing_source_waits_out_its_grace_and_is_not_told_once_it_arrived() -> None:
    clock = FakeClock()
    notes = Announcements(clock, quiet=2, longest=10, grace=5)
    notes.note(NS, CRS, missing("a"))
    assert notes.wait(NS, CRS) == 5  # not the quiet period: the source may be late
    clock.advance(0.5)  # the ConfigMap of the same `kubectl apply` arrives, a pass applies
    notes.note(NS, CRS, applied("a"))
    clock.advance(4.5)
    assert notes.wait(NS, CRS) == 0
    outcomes = {"a": "Applied"}
    (event,) = notes.take(NS, CRS, outcomes.get)
    assert (event.type, event.message) == ("Normal", "applied ConfigMap/cni to cluster a")


def test_a_source_still_missing_after_the_grace_is_told() -> None:
    clock = FakeClock()
    notes = Announcements(clock, quiet=2, longest=10, grace=5)
    notes.note(NS, CRS, missing("a"))
    notes.note(NS, CRS, missing("b"))
    clock.advance(5)
    # a's source came and failed otherwise: that failure has a note of its own.
    notes.note(NS, CRS, failed("a", "bad"))
    clock.advance(2)
    outcomes = {"a": "ApplyFailed", "b": "ResourceNotFound"}
    told = notes.take(NS, CRS, outcomes.get)
    assert [(e.reason, e.message) for e in told] == [
        ("ResourceNotFound", "ResourceNotFound on 1 cluster: b: ConfigMap n/cni not found"),
        ("ApplyFailed", "ApplyFailed on 1 cluster: a: bad"),
    ]


def test_graced_notes_cannot_hold_the_others_back_for_ever() -> None:
    clock = FakeClock()
    notes = Announcements(clock, quiet=2, longest=10, grace=5)
    start = clock.now()
    while notes.wait(NS, CRS) != 0:  # a missing source noted again every 4 s
        notes.note(NS, CRS, missing("a"))
        clock.advance(4)
    assert clock.now() - start == 16  # due at first + longest + grace (15 s)


DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@pytest.mark.parametrize(
    "name",
    [
        "c" * 253,
        "c" * 236 + "-" + "d" * 16,  # cut right after a '-'
        "c" * 235 + ".-" + "d" * 16,  # ... after '.' and '-'
        "c" * 236 + "." + "d" * 16,  # ... after a '.'
        "c." * 126 + "c",
        "c" * 237,  # the shortest name whose Events the server refused
        CRS,
    ],
)
async def test_an_event_is_named_after_its_crs_within_the_limits_of_a_name(name: str) -> None:
    """Every Event of a CRS has a name the API server accepts (a DNS subdomain, 253
    characters at most), however long the CRS's own name; a short one is kept whole."""
    mgmt = MemoryKube("management")
    raw = {
        "apiVersion": "addons.crs.dev/v1alpha1",
        "kind": "ClusterResourceSet",
        "metadata": {"name": name, "namespace": NS, "uid": "u1"},
        "spec": {"clusterSelector": {}, "resources": [{"kind": "ConfigMap", "name": "a"}]},
    }
    events = EventRecorder(cast(KubeClient, mgmt))
    await events.emit(parse_crs(raw), "Normal", "Applied", "applied")
    await events.emit(parse_crs(raw), "Normal", "Applied", "applied")
    names = [k[3] for k in mgmt.objects if k[1] == "Event"]
    assert len(names) == 2
    for got in names:
        assert len(got) <= 253 and DNS_SUBDOMAIN.fullmatch(got), got
        prefix = got.rsplit(".", 1)[0]
        assert name.startswith(prefix) and len(prefix) >= len(name) - 20
        assert len(name) > 236 or prefix == name
