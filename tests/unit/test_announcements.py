"""Events told once per CRS (``engine.announcements``): notes from many clusters
become one Event per type and reason once they settle; the wait follows an injected
clock; messages name clusters and counts, a later note for a cluster replaces an
earlier one."""

from __future__ import annotations

from crs_controller.engine.announcements import Announcement, Announcements, Note, summarize

from .fake_clock import FakeClock

NS, CRS = "n", "cni"


def applied(cluster: str, *resources: str) -> Note:
    return Note("Normal", "Applied", cluster, resources=resources or ("ConfigMap/cni",))


def failed(cluster: str, message: str = "boom") -> Note:
    return Note("Warning", "ApplyFailed", cluster, message=message)


def test_two_hundred_clusters_are_one_event() -> None:
    told = summarize([applied(f"c{i:03d}") for i in range(200)])
    assert told == [
        Announcement(
            "Normal",
            "Applied",
            "applied ConfigMap/cni to 200 clusters (c000, c001, c002, c003, c004 and 195 more)",
        )
    ]


def test_failures_are_counted_in_the_normal_event_and_told_in_one_warning() -> None:
    notes = [applied("a"), applied("b"), failed("c", "x"), failed("d", "y"), failed("c", "z")]
    normal, warning = summarize(notes)
    assert normal.message == "applied ConfigMap/cni to 2 clusters (a, b); 2 clusters failed"
    assert (warning.type, warning.reason) == ("Warning", "ApplyFailed")
    assert warning.message == "ApplyFailed on 2 clusters: c: z; d: y"


def test_one_cluster_reads_naturally_and_resources_are_merged() -> None:
    (told,) = summarize([applied("a", "Secret/b"), applied("a", "ConfigMap/a", "Secret/b")])
    assert told.message == "applied ConfigMap/a, Secret/b to cluster a"
    (drift,) = summarize([Note("Normal", "DriftCorrected", "a", resources=("ConfigMap/a",))])
    assert drift.message == "reapplied after drift ConfigMap/a to cluster a"


def test_many_warnings_show_the_first_few_messages() -> None:
    (told,) = summarize([failed(f"c{i}", f"m{i}") for i in range(5)])
    assert told.message == "ApplyFailed on 5 clusters: c0: m0; c1: m1; c2: m2; and 2 more"


def test_notes_are_due_once_quiet_or_after_the_longest_wait() -> None:
    clock = FakeClock()
    told: list[tuple[str, str]] = []
    notes = Announcements(
        clock, on_note=lambda ns, crs: told.append((ns, crs)), quiet=2, longest=10
    )
    assert notes.wait(NS, CRS) is None
    notes.note(NS, CRS, applied("a"))
    assert told == [(NS, CRS)]
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
