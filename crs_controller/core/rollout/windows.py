"""Rollout change windows (``spec.rollout.windows``): may a new revision start now,
and when does that answer change?

The semantics are Argo CD's syncWindows. A window opens each time its five-field
cron ``schedule`` fires, read in its ``timeZone`` (default UTC), and stays open for
``duration`` seconds of elapsed time. Zones come from the IANA database of the
``tzdata`` package, never the system's, so a ``timeZone`` means the same in every
image; the system directory's extras (``right/``, ``posix/``, ``localtime``,
``posixrules``) are not zone names. A window is open at ``t`` when some fire time
``f`` has ``f <= t < f + duration``; a duration longer than the schedule's period
makes the firings overlap and the window stays open throughout. Then:

- with no windows at all, a revision may always start;
- with any Allow window, a revision may start only inside an Allow window;
- inside any Deny window nothing new starts, whatever the Allow windows say.

``verdict`` answers for one instant and names when the answer next flips: for a
closed verdict the earliest later instant at which a revision may start, for an open
one the earliest at which it may not. The search walks the windows' openings and
closings in time order and stops after a year (``HORIZON``) or after ``MAX_STEPS``
fire times in all, whichever comes first; then ``changes_at`` is None, which for a
closed verdict reads "no window opens within a year". The cap keeps the work bounded
whatever the schedules: a Deny on ``* * * * *`` for two minutes never closes, and
finding that out costs ``MAX_STEPS`` fire times (milliseconds), not a year of minutes.
The price is that a change more than ``MAX_STEPS`` fire times away is not found either
(a minutely Allow behind a two-day Deny), so a closed verdict without ``changes_at``
must be looked at again later, not read as closed for good. Whether a revision may
start *now* is always answered exactly; it needs at most the fire times of the last
hour of each window. Typical windows (a few, hourly or daily) take a fraction of a
millisecond.

Daylight saving time follows Debian's cron. A schedule with a fixed minute and hour
(neither field starts with ``*``) is read on the wall clock: a time that does not
exist on the spring-forward day (02:30 in Europe/Berlin on 2026-03-29) fires at the
first moment that does (03:00 CEST), once for all the missing times of one change, and
a time that happens twice on the fall-back day (02:30 on 2026-10-25) fires once, at its
first occurrence (02:30 CEST). Any other schedule follows elapsed time: it fires at
each moment whose wall time it names, so it skips the times that do not exist and
fires in both runs of the repeated ones. Where clocks jump from 00:00 to 01:00
(America/Santiago on 2026-09-06), ``*/20 1-5 * * *`` fires from 01:00 and ``0 */6 * * *``
not before 06:00, while ``30 0 * * *`` fires at 01:00. The rule is the same for any
change (at midnight, by half an hour on Australia/Lord_Howe, by two hours on
Antarctica/Troll) and whatever instant the search starts from: cronsim only lists the
wall times a schedule names, given naive times (no zone, so none of its own DST
handling, which skips the first hour after a gap at midnight), and this module places
them in time. Durations are always elapsed time, so a 4h window opening at 01:00 on
the spring-forward day closes at 06:00 on the wall clock.

Everything here is pure: ``now`` is passed in, nothing is read from the clock, the
result does not depend on the order of the windows, and every returned time is an
aware UTC datetime (a naive ``now`` is taken as UTC).
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from functools import lru_cache
from importlib.resources import files
from itertools import groupby
from operator import itemgetter
from typing import Literal
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

__all__ = ["HORIZON", "MAX_STEPS", "Verdict", "Window", "verdict"]

HORIZON = timedelta(days=366)
MAX_STEPS = 2_000  # fire times looked at while searching for the next change

_DAY = timedelta(days=1)

_MAX_SCHEDULE_CHARS = 100
_MAX_ZONE_CHARS = 64  # the longest IANA name is about 30 characters
_MAX_DURATION = HORIZON.total_seconds()
_PRINTABLE_ASCII = re.compile(r"[ -~]*")
# What IANA zone names are made of; anything else (a backslash, a dot, a NUL) is
# refused before the name reaches zoneinfo, which would look it up as a file path.
_ZONE_NAME = re.compile(r"[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*")
# What a system's zoneinfo directory holds besides the zones: copies read with leap
# seconds (right/) or without (posix/), the host's own zone and the POSIX TZ default.
_NOT_ZONES = frozenset({"right", "posix", "localtime", "posixrules"})


@dataclass(frozen=True)
class Window:
    """One entry of ``spec.rollout.windows``, validated on construction."""

    kind: Literal["Allow", "Deny"]
    schedule: str  # five-field cron
    duration: float  # seconds of elapsed time, > 0
    time_zone: str = "UTC"

    def __post_init__(self) -> None:
        if self.kind not in ("Allow", "Deny"):
            raise ValueError("kind: must be Allow or Deny")
        _check_schedule(self.schedule)
        _check_duration(self.duration)
        if not isinstance(self.time_zone, str):
            raise ValueError("timeZone: must be a string")
        _zone(self.time_zone)


@dataclass(frozen=True)
class Verdict:
    """Whether a new revision may start now, and when that next changes."""

    open: bool
    # UTC. Closed: the next opening; open: the next closing. None when no such
    # instant is found within HORIZON and MAX_STEPS fire times, and always for no
    # windows.
    changes_at: datetime | None


def verdict(windows: Sequence[Window], now: datetime) -> Verdict:
    """The verdict of ``windows`` at ``now`` (see the module docstring)."""
    if not windows:
        return Verdict(open=True, changes_at=None)
    now = now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)
    until = now + HORIZON
    steps = _Steps()
    gated = any(window.kind == "Allow" for window in windows)
    inside = {"Allow": 0, "Deny": 0}
    edges: list[Iterator[tuple[datetime, str, bool]]] = []
    for window in windows:
        inside_now, times = _timeline(window, now, until, steps)
        inside[window.kind] += inside_now
        edges.append(_tagged(window.kind, times))
    is_open = _open(gated, inside)
    steps.left = MAX_STEPS  # the present is known exactly; only the search is capped
    try:
        for at, group in groupby(heapq.merge(*edges, key=itemgetter(0)), key=itemgetter(0)):
            for _, kind, opens in group:
                inside[kind] += 1 if opens else -1
            if _open(gated, inside) != is_open:
                return Verdict(open=is_open, changes_at=at)
    except _OutOfSteps:
        pass
    return Verdict(open=is_open, changes_at=None)


def _tagged(
    kind: str, times: Iterator[tuple[datetime, bool]]
) -> Iterator[tuple[datetime, str, bool]]:
    for at, opens in times:
        yield at, kind, opens


def _open(gated: bool, inside: dict[str, int]) -> bool:
    return (not gated or inside["Allow"] > 0) and inside["Deny"] == 0


class _OutOfSteps(Exception):
    pass


class _Steps:
    """How many more fire times the search may look at."""

    def __init__(self) -> None:
        self.left: float = math.inf

    def take(self) -> None:
        if self.left <= 0:
            raise _OutOfSteps
        self.left -= 1


def _timeline(
    window: Window, now: datetime, until: datetime, steps: _Steps
) -> tuple[bool, Iterator[tuple[datetime, bool]]]:
    """Whether ``window`` is open at ``now``, and the times after ``now`` (up to
    ``until``) at which it opens (True) or closes (False), in time order."""
    duration = timedelta(seconds=window.duration)
    last = _last_fire(window, now)
    fires = _fires_after(window, now, steps)
    end = None if last is None or last + duration <= now else last + duration
    return end is not None, _edges(next(fires, None), fires, end, duration, until)


def _edges(
    fire: datetime | None,
    fires: Iterator[datetime],
    end: datetime | None,
    duration: timedelta,
    until: datetime,
) -> Iterator[tuple[datetime, bool]]:
    # ``end`` closes the current run of overlapping firings; a fire at or before it
    # extends the run instead of opening a new one.
    while fire is not None and fire <= until:
        if end is None or fire > end:
            if end is not None:
                yield end, False
            yield fire, True
        end = fire + duration
        fire = next(fires, None)
    if end is not None and end <= until:
        yield end, False


# cronsim walks the wall clock (naive times) and ``_placed`` puts each wall time in
# time. That is monotonic except for the second run of a fall-back day's repeated
# times, whose fires wait in a heap until no later wall time can place one before them.


def _fires_after(window: Window, start: datetime, steps: _Steps) -> Iterator[datetime]:
    """The fire times of ``window`` strictly after ``start``, in UTC, increasing."""
    zone = _zone(window.time_zone)
    # The earliest wall time that can fire after ``start``: when the clocks go back
    # within a day, the repeated wall times are read with the later, smaller offset.
    offset = min(_offset(zone, start), _offset(zone, start + _DAY))
    sim = CronSim(window.schedule, (start + offset).replace(tzinfo=None))
    pending: list[datetime] = []
    last = start
    for floor, fires in _placings(sim, steps, zone, _wall_clock(window.schedule)):
        for fire in fires:
            heapq.heappush(pending, fire)
        while pending and pending[0] <= floor:
            fire = heapq.heappop(pending)
            if fire > last:  # the missing wall times of one gap all fire at its end
                last = fire
                yield fire


def _placings(
    sim: CronSim, steps: _Steps, zone: tzinfo, wall_clock: bool
) -> Iterator[tuple[datetime, tuple[datetime, ...]]]:
    """For each wall time of ``sim``, a floor under the fires of all later ones (its
    earlier reading) and its own fires; a last floor after everything at the end."""
    while True:
        steps.take()
        wall = next(sim, None)  # None: no fire within cronsim's 50 years
        if wall is None:
            yield datetime.max.replace(tzinfo=UTC), ()
            return
        first, second = _read(wall, zone)
        yield min(first, second), _placed(first, second, zone, wall_clock)


def _last_fire(window: Window, t: datetime) -> datetime | None:
    """The last fire time of ``window`` at or before ``t``, in UTC."""
    zone = _zone(window.time_zone)
    wall_clock = _wall_clock(window.schedule)
    # The latest wall time that can fire by ``t``: when the clocks went back within a
    # day, the repeated wall times are read with the earlier, larger offset. Fire times
    # fall on whole seconds, and reverse iteration starts one second before a start
    # without microseconds.
    offset = max(_offset(zone, t), _offset(zone, t - _DAY))
    top = (t + offset).replace(tzinfo=None, microsecond=0) + timedelta(seconds=1)
    best: datetime | None = None
    for wall in CronSim(window.schedule, top, reverse=True):
        readings = _read(wall, zone)
        for fire in _placed(*readings, zone, wall_clock):
            if fire <= t and (best is None or fire > best):
                best = fire
        # No earlier wall time places a fire after the later reading of this one.
        if best is not None and best >= max(readings):
            return best
    return best


def _read(wall: datetime, zone: tzinfo) -> tuple[datetime, datetime]:
    """The naive local ``wall`` read in ``zone`` with each fold, in UTC: equal for a
    time that happens once, earlier first for one repeated on a fall-back day, later
    first (read with the offset before the change) for one skipped by a spring-forward."""
    return (
        wall.replace(tzinfo=zone).astimezone(UTC),
        wall.replace(tzinfo=zone, fold=1).astimezone(UTC),
    )


def _placed(
    first: datetime, second: datetime, zone: tzinfo, wall_clock: bool
) -> tuple[datetime, ...]:
    """When a fire at the wall time read as ``first`` and ``second`` happens."""
    if first == second:
        return (first,)
    if first < second:  # repeated: once on the wall clock, in both runs in elapsed time
        return (first,) if wall_clock else (first, second)
    # Skipped: on the wall clock at the first moment that exists, else not at all.
    return (_change(second, first, zone),) if wall_clock else ()


def _change(before: datetime, after: datetime, zone: tzinfo) -> datetime:
    """The instant in ``(before, after]`` at which ``zone``'s offset changes (there is
    one change in between); offsets change on whole seconds."""
    low, high = math.floor(before.timestamp()), math.ceil(after.timestamp())
    offset = _offset(zone, after)
    while high - low > 1:
        middle = (low + high) // 2
        if _offset(zone, datetime.fromtimestamp(middle, UTC)) == offset:
            high = middle
        else:
            low = middle
    return datetime.fromtimestamp(high, UTC)


def _offset(zone: tzinfo, t: datetime) -> timedelta:
    return t.astimezone(zone).utcoffset() or timedelta(0)


def _wall_clock(schedule: str) -> bool:
    """Whether DST reads ``schedule`` on the wall clock: Debian cron's rule, a fixed
    minute and hour (neither field starts with ``*``)."""
    minute, hour = schedule.split()[:2]
    return not minute.startswith("*") and not hour.startswith("*")


def _check_schedule(schedule: str) -> None:
    if not isinstance(schedule, str):
        raise ValueError("schedule: must be a string")
    if len(schedule) > _MAX_SCHEDULE_CHARS:
        raise ValueError(f"schedule: longer than {_MAX_SCHEDULE_CHARS} characters")
    if _PRINTABLE_ASCII.fullmatch(schedule) is None:
        raise ValueError("schedule: must be printable ASCII")
    fields = len(schedule.split())
    if fields != 5:
        raise ValueError(
            "schedule: expected 5 fields (minute hour day-of-month month day-of-week), "
            f"got {fields}"
        )
    _parse(schedule)


@lru_cache(maxsize=1024)
def _parse(schedule: str) -> None:
    try:
        CronSim(schedule, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as err:  # its messages are short and name a field: "Bad minute"
        raise ValueError(f"schedule: {err}") from None


def _check_duration(duration: float) -> None:
    if isinstance(duration, bool) or not isinstance(duration, int | float):
        raise ValueError("duration: must be a number of seconds")
    if not duration > 0:  # also refuses NaN
        raise ValueError("duration: must be positive")
    if duration > _MAX_DURATION:
        raise ValueError(f"duration: at most {HORIZON.days} days")


@lru_cache(maxsize=256)
def _zone(name: str) -> tzinfo:
    """The time zone called ``name`` in the IANA database of the ``tzdata`` package;
    raise ValueError if it holds no such zone. The system's database is never read,
    so a name is accepted, and read, the same way whatever the image has installed."""
    if name == "UTC":
        return UTC
    if len(name) > _MAX_ZONE_CHARS or _ZONE_NAME.fullmatch(name) is None:
        raise ValueError("timeZone: not a time zone name such as Europe/Berlin")
    first = name.split("/", maxsplit=1)[0]
    if first in _NOT_ZONES:
        raise ValueError(f"timeZone: {first!r} is not an IANA time zone name")
    try:
        with files("tzdata.zoneinfo").joinpath(*name.split("/")).open("rb") as data:
            return ZoneInfo.from_file(data, key=name)
    except (ValueError, OSError):
        raise ValueError(f"timeZone: unknown time zone {name!r}") from None
