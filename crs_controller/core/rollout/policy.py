"""A CRS's rollout policy as the planner reads it (``spec.rollout``): its steps, how
many clusters may update at once, how many may fail, pause and change windows; and
which step a cluster belongs to (``step_of``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crs_controller.core.api.models import Rollout as RolloutSpec
from crs_controller.core.api.models import to_api
from crs_controller.core.api.selectors import matches_validated, validate_selector
from crs_controller.core.durations import parse_duration
from crs_controller.core.errors import InvalidSpec
from crs_controller.core.rollout.windows import Window

__all__ = ["Policy", "Step", "compile_windows", "count", "policy_of", "step_of"]

_PERCENT = re.compile(r"(\d+)%", re.ASCII)  # as Kubernetes reads maxUnavailable


@dataclass(frozen=True)
class Step:
    """One wave: the clusters its selector matches first, then a soak once they are done."""

    selector: Mapping[str, Any] | None
    pause_after: float = 0.0
    manual: bool = False  # approval: Manual
    validation: bool = False  # its clusters are validated before it is done

    def __post_init__(self) -> None:
        # Refused here rather than at plan time, so a bad spec is reported even
        # while no cluster matches.
        validate_selector(self.selector)
        if not math.isfinite(self.pause_after) or self.pause_after < 0:
            raise ValueError(f"pause_after must be a non-negative number, not {self.pause_after}")


@dataclass(frozen=True)
class Policy:
    """``spec.rollout``; the default lets every cluster take a new revision at once."""

    max_concurrent: int | str = "100%"
    steps: tuple[Step, ...] = ()
    max_failures: int | str = 0
    paused: bool = False
    windows: tuple[Window, ...] = ()

    def __post_init__(self) -> None:
        count(self.max_concurrent, 0, round_up=True)
        count(self.max_failures, 0, round_up=False)


def count(value: int | str, total: int, *, round_up: bool) -> int:
    """An int, or "N%" of ``total``: rounded up (at least 1 of a non-empty fleet) for
    ``maxConcurrent`` so a small fleet still moves, down for ``maxFailures`` so a
    percentage never tolerates more than it says."""
    if isinstance(value, bool) or not isinstance(value, int | str) or total < 0:
        raise ValueError(f"invalid count {value!r} of {total}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"invalid count {value}: must not be negative")
        return value
    match = _PERCENT.fullmatch(value)
    if match is None or int(match.group(1)) > 100:
        raise ValueError(f"invalid count {value!r}: expected an integer or a percentage 0%-100%")
    share = total * int(match.group(1))
    if round_up:
        return max(-(-share // 100), 1 if total else 0)
    return share // 100


def step_of(steps: Sequence[Step], labels: Mapping[str, str]) -> int:
    """The step (1-based) of a cluster with ``labels``: the first whose selector
    matches them, else the implicit last step, ``len(steps) + 1``. Each step's
    selector was validated when the step was made, so it is not validated again for
    every cluster of the fleet."""
    return next(
        (i + 1 for i, step in enumerate(steps) if matches_validated(step.selector, labels)),
        len(steps) + 1,
    )


def compile_windows(spec: RolloutSpec) -> tuple[Window, ...]:
    """``spec.rollout.windows``, checked once; InvalidSpec names the field."""
    windows = []
    for index, window in enumerate(spec.windows or ()):
        where = f"spec.rollout.windows[{index}]"
        try:
            duration = parse_duration(window.duration)
            windows.append(Window(window.kind, window.schedule, duration, window.time_zone))
        except (ValueError, InvalidSpec) as exc:
            raise InvalidSpec(f"{where}: {exc}") from None
    return tuple(windows)


def policy_of(spec: RolloutSpec, pauses: Sequence[float], windows: Sequence[Window] = ()) -> Policy:
    """The planner's policy for ``spec.rollout``: ``pauses`` are its steps'
    pauseAfter in seconds and ``windows`` its change windows (both parsed once with
    the CRS), selectors in API form."""
    steps = tuple(
        Step(
            to_api(s.cluster_selector),
            pause,
            manual=s.approval == "Manual",
            validation=s.validation is not None,
        )
        for s, pause in zip(spec.steps, pauses, strict=True)
    )
    return Policy(spec.max_concurrent, steps, spec.max_failures, spec.paused, tuple(windows))
