"""What ``approve`` decides from a CRS's status (the step that waits, of the revision
being rolled out, and nothing else; the same approval again is approved already,
whatever the phase), its ``--step`` checks, and how ``status`` shows a rollout:
phase, step, what it waits for (a window's opening time in UTC) and the held
clusters, '-' for what an older controller did not write."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from crs_controller.app.cli import main
from crs_controller.app.commands.approve import Approve, Approved, Refuse, decide
from crs_controller.app.commands.status import rollout_cells, waiting
from crs_controller.core.api.models import ClusterResourceSetStatus

REVISION = "xxh3:0123456789abcdef"


def status(rollout: dict[str, Any] | None, revision: str | None = REVISION) -> Any:
    raw: dict[str, Any] = {"rollout": rollout} if rollout is not None else {}
    if revision is not None:
        raw["revision"] = revision
    return ClusterResourceSetStatus.model_validate(raw)


AWAITING = {"phase": "AwaitingApproval", "step": 2}


@pytest.mark.parametrize(
    ("rollout", "revision", "step", "expected"),
    [
        (AWAITING, REVISION, None, Approve(REVISION, 2)),
        (AWAITING, REVISION, 2, Approve(REVISION, 2)),
        (AWAITING, REVISION, 3, Refuse("step 2 waits for approval, not step 3")),
        (AWAITING, None, None,
         Refuse("no revision in its status: the controller has not written one yet")),
        ({"phase": "Progressing", "step": 2}, REVISION, None,
         Refuse("the rollout is Progressing, not AwaitingApproval")),
        ({"phase": "Complete", "step": 3}, REVISION, 3,
         Refuse("the rollout is Complete, not AwaitingApproval")),
        (None, REVISION, None, Refuse("no rollout in its status: nothing waits for an approval")),
    ],
)  # fmt: skip
def test_approve_decides_from_the_status(
    rollout: dict[str, Any] | None, revision: str | None, step: int | None, expected: object
) -> None:
    assert decide(status(rollout, revision), step) == expected


PROGRESSING = {"phase": "Progressing", "step": 2}
GIVEN = f"{REVISION}/2"  # the annotation an approval of step 2 wrote


@pytest.mark.parametrize(
    ("rollout", "revision", "step", "approval", "expected"),
    [
        # The same approval again: nothing to write, whatever the phase.
        (AWAITING, REVISION, None, GIVEN, Approved(REVISION, 2)),
        (AWAITING, REVISION, 2, GIVEN, Approved(REVISION, 2)),
        (PROGRESSING, REVISION, None, GIVEN, Approved(REVISION, 2)),
        (PROGRESSING, REVISION, 2, GIVEN, Approved(REVISION, 2)),
        ({"phase": "Progressing", "step": 3}, REVISION, 2, GIVEN, Approved(REVISION, 2)),
        ({"phase": "Complete", "step": 3}, REVISION, 2, GIVEN, Approved(REVISION, 2)),
        (None, REVISION, 2, GIVEN, Approved(REVISION, 2)),
        # Another approval: decided as without one.
        (PROGRESSING, REVISION, None, "xxh3:fedcba9876543210/2",
         Refuse("the rollout is Progressing, not AwaitingApproval")),
        ({"phase": "Progressing", "step": 3}, REVISION, None, GIVEN,
         Refuse("the rollout is Progressing, not AwaitingApproval")),
        (AWAITING, REVISION, 3, GIVEN, Refuse("step 2 waits for approval, not step 3")),
        (AWAITING, REVISION, None, f"{REVISION}/1", Approve(REVISION, 2)),
        (AWAITING, None, None, GIVEN,
         Refuse("no revision in its status: the controller has not written one yet")),
        (None, REVISION, None, GIVEN,
         Refuse("no rollout in its status: nothing waits for an approval")),
    ],
)  # fmt: skip
def test_the_same_approval_again_is_approved_already(
    rollout: dict[str, Any] | None,
    revision: str | None,
    step: int | None,
    approval: str,
    expected: object,
) -> None:
    assert decide(status(rollout, revision), step, approval) == expected


def test_the_annotation_names_the_revision_and_the_step() -> None:
    assert Approve(REVISION, 2).annotation == f"{REVISION}/2"


@pytest.mark.parametrize("step", ["0", "-1", "two"])
def test_a_step_is_a_number_from_one(capsys: pytest.CaptureFixture[str], step: str) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["approve", "cni", "--step", step])
    assert exited.value.code == 2
    assert "argument --step" in capsys.readouterr().err


NOW = datetime(2026, 11, 22, 18, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("waiting_for", "next_window", "shown"),
    [
        (None, None, "-"),
        ("Approval", None, "approval"),
        ("Validation", None, "validation"),
        ("Budget", None, "budget"),
        ("Window", "2026-11-22T22:00:00Z", "window until 22:00Z"),
        ("Window", "2026-11-23T02:15:00Z", "window until 02:15Z"),  # within a day
        ("Window", "2026-11-24T22:00:00Z", "window until 2026-11-24T22:00Z"),
        ("Window", "2026-11-22T10:00:00Z", "window until 2026-11-22T10:00Z"),  # past
        ("Window", "2026-11-22T23:00:00+01:00", "window until 22:00Z"),  # in UTC
        ("Window", None, "window"),
        ("Window", "soon", "window"),
        ("Window", "0001-01-01T00:00:00+01:00", "window"),  # before year 1 in UTC
    ],
)
def test_what_the_rollout_waits_for(
    waiting_for: str | None, next_window: str | None, shown: str
) -> None:
    assert waiting(waiting_for, next_window, NOW) == shown


def test_the_rollout_columns() -> None:
    rollout = {
        "phase": "AwaitingApproval",
        "step": 2,
        "waitingFor": "Approval",
        "nextWindow": None,
        "heldClusters": 1,
    }
    assert rollout_cells(rollout, NOW) == ["AwaitingApproval", "2", "approval", "1"]
    assert rollout_cells({"phase": "Complete", "step": 1}, NOW) == ["Complete", "1", "-", "-"]
    assert rollout_cells(None, NOW) == ["-", "-", "-", "-"]
