"""Rollout change windows (``core.rollout.windows``): whether a new revision may start at an
instant and when that next changes, for no windows, Allow windows across midnight, a
Deny inside an Allow, Deny only, time zones in summer and winter, Europe/Berlin's
spring-forward and fall-back days, gaps at midnight (America/Santiago, America/Havana,
Asia/Beirut) and of half an hour (Australia/Lord_Howe), weekday schedules; the inputs
refused, each naming its field; zones read from the tzdata package whatever the
system's database holds, its extras (right/, posix/, localtime) refused; bounded work
for a Deny that never closes; and properties on random windows checked against fire
times listed from each day's wall times."""

from __future__ import annotations

import sys
import zoneinfo
from collections.abc import Iterator
from datetime import UTC, datetime, time, timedelta
from importlib.resources import files
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crs_controller.core.rollout import windows as windows_module
from crs_controller.core.rollout.windows import HORIZON, MAX_STEPS, Verdict, Window, verdict

H = 3600.0


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def allow(schedule: str, duration: float, zone: str = "UTC") -> Window:
    return Window("Allow", schedule, duration, zone)


def deny(schedule: str, duration: float, zone: str = "UTC") -> Window:
    return Window("Deny", schedule, duration, zone)


NIGHTLY = allow("0 22 * * *", 4 * H)
OFFICE = allow("0 8 * * *", 10 * H)
LUNCH = deny("0 12 * * *", 1 * H)
WEEKDAYS = allow("0 9 * * 1-5", 8 * H)  # 2026-06-03 is a Wednesday, 06-05 a Friday
BERLIN_NIGHTLY = allow("0 22 * * *", 4 * H, "Europe/Berlin")
BERLIN_0230 = allow("30 2 * * *", 1 * H, "Europe/Berlin")
BERLIN_HALF_PAST = allow("30 * * * *", 1800, "Europe/Berlin")
BERLIN_0100 = allow("0 1 * * *", 4 * H, "Europe/Berlin")
# Clocks jump from 00:00 to 01:00 on Sunday 2026-09-06 in Santiago (04:00 UTC), Sunday
# 2026-03-08 in Havana (05:00 UTC) and Sunday 2026-03-29 in Beirut (22:00 UTC the day
# before); from 02:00 to 02:30 on Sunday 2026-10-04 on Lord Howe (15:30 UTC the day
# before).
SANTIAGO_SUNDAY = allow("*/20 1-5 * * 0", 600, "America/Santiago")
SANTIAGO_SIX_HOURLY = allow("0 */6 * * 0", 1 * H, "America/Santiago")
SANTIAGO_0030 = allow("30 0 * * *", 1 * H, "America/Santiago")
HAVANA_SUNDAY = allow("*/20 1-5 * * 0", 600, "America/Havana")
BEIRUT_SUNDAY = allow("*/20 1-5 * * 0", 600, "Asia/Beirut")
LORD_HOWE_SUNDAY = allow("*/20 2-5 * * 0", 600, "Australia/Lord_Howe")
LORD_HOWE_0215 = allow("15 2 * * *", 1800, "Australia/Lord_Howe")


@pytest.mark.parametrize(
    ("windows", "now", "expected"),
    [
        pytest.param([], "2026-06-01T12:00", (True, None), id="no windows: always open"),
        # A daily Allow 22:00-02:00 across midnight.
        pytest.param([NIGHTLY], "2026-06-01T23:30", (True, "2026-06-02T02:00"), id="nightly 23:30"),
        pytest.param([NIGHTLY], "2026-06-02T01:00", (True, "2026-06-02T02:00"), id="nightly 01:00"),
        pytest.param(
            [NIGHTLY], "2026-06-02T02:30", (False, "2026-06-02T22:00"), id="nightly 02:30"
        ),
        pytest.param([NIGHTLY], "2026-06-02T02:00", (False, "2026-06-02T22:00"), id="end excluded"),
        pytest.param(
            [NIGHTLY], "2026-06-02T22:00", (True, "2026-06-03T02:00"), id="start included"
        ),
        # A Deny 12:00-13:00 inside an Allow 08:00-18:00.
        pytest.param(
            [OFFICE, LUNCH], "2026-06-01T10:00", (True, "2026-06-01T12:00"), id="before deny"
        ),
        pytest.param(
            [OFFICE, LUNCH], "2026-06-01T12:30", (False, "2026-06-01T13:00"), id="in deny"
        ),
        pytest.param(
            [OFFICE, LUNCH], "2026-06-01T14:00", (True, "2026-06-01T18:00"), id="after deny"
        ),
        pytest.param(
            [OFFICE, LUNCH], "2026-06-01T19:00", (False, "2026-06-02T08:00"), id="evening"
        ),
        # Deny only: open outside it.
        pytest.param(
            [LUNCH], "2026-06-01T12:30", (False, "2026-06-01T13:00"), id="deny only, inside"
        ),
        pytest.param(
            [LUNCH], "2026-06-01T14:00", (True, "2026-06-02T12:00"), id="deny only, outside"
        ),
        # Weekdays 09:00-17:00.
        pytest.param(
            [WEEKDAYS], "2026-06-03T12:00", (True, "2026-06-03T17:00"), id="wednesday noon"
        ),
        pytest.param(
            [WEEKDAYS], "2026-06-05T17:30", (False, "2026-06-08T09:00"), id="friday evening"
        ),
        pytest.param([WEEKDAYS], "2026-06-06T10:00", (False, "2026-06-08T09:00"), id="saturday"),
        # 22:00 in Berlin is 20:00 UTC in summer (CEST) and 21:00 UTC in winter (CET).
        pytest.param(
            [BERLIN_NIGHTLY], "2026-07-01T19:30", (False, "2026-07-01T20:00"), id="berlin summer"
        ),
        pytest.param(
            [BERLIN_NIGHTLY],
            "2026-07-01T20:30",
            (True, "2026-07-02T00:00"),
            id="berlin summer open",
        ),
        pytest.param(
            [BERLIN_NIGHTLY], "2026-01-15T20:30", (False, "2026-01-15T21:00"), id="berlin winter"
        ),
        pytest.param(
            [BERLIN_NIGHTLY],
            "2026-01-15T21:30",
            (True, "2026-01-16T01:00"),
            id="berlin winter open",
        ),
        # Spring forward, 2026-03-29: 02:30 does not exist and fires at 03:00 CEST
        # (01:00 UTC); the next day 02:30 CEST is 00:30 UTC.
        pytest.param(
            [BERLIN_0230], "2026-03-29T00:30", (False, "2026-03-29T01:00"), id="spring, before"
        ),
        pytest.param(
            [BERLIN_0230], "2026-03-29T01:30", (True, "2026-03-29T02:00"), id="spring, inside"
        ),
        pytest.param(
            [BERLIN_0230], "2026-03-29T02:30", (False, "2026-03-30T00:30"), id="spring, after"
        ),
        # A 4h window from 01:00 CET (00:00 UTC) lasts 4 real hours: until 06:00 CEST.
        pytest.param(
            [BERLIN_0100], "2026-03-29T01:00", (True, "2026-03-29T04:00"), id="spring, elapsed"
        ),
        # Fall back, 2026-10-25: 02:30 fires once, at 02:30 CEST (00:30 UTC); at
        # 02:45 CET (01:45 UTC) it is over, and the next day 02:30 CET is 01:30 UTC.
        pytest.param(
            [BERLIN_0230], "2026-10-25T00:45", (True, "2026-10-25T01:30"), id="fall, first"
        ),
        pytest.param(
            [BERLIN_0230], "2026-10-25T01:45", (False, "2026-10-26T01:30"), id="fall, second run"
        ),
        # An hourly schedule follows elapsed time and fires in both runs of 02:30.
        pytest.param(
            [BERLIN_HALF_PAST], "2026-10-25T01:40", (True, "2026-10-25T02:00"), id="fall, hourly"
        ),
        pytest.param(
            [BERLIN_HALF_PAST], "2026-03-29T01:10", (False, "2026-03-29T01:30"), id="spring, hourly"
        ),
        # A gap at midnight: the first hour after it (01:00 to 01:59) exists and fires,
        # also when the day before has no fire time; the missing 00:00 fires only on the
        # wall clock (00:30 at 01:00, the first moment that exists).
        pytest.param(
            [SANTIAGO_SUNDAY],
            "2026-09-06T03:30",
            (False, "2026-09-06T04:00"),
            id="santiago, before",
        ),
        pytest.param(
            [SANTIAGO_SUNDAY], "2026-09-06T04:25", (True, "2026-09-06T04:30"), id="santiago, 01:25"
        ),
        pytest.param(
            [SANTIAGO_SIX_HOURLY],
            "2026-09-06T04:30",
            (False, "2026-09-06T09:00"),
            id="santiago, 00:00 skipped",
        ),
        pytest.param(
            [SANTIAGO_0030], "2026-09-06T03:30", (False, "2026-09-06T04:00"), id="santiago, 00:30"
        ),
        pytest.param(
            [SANTIAGO_0030], "2026-09-06T04:30", (True, "2026-09-06T05:00"), id="santiago, 01:30"
        ),
        pytest.param(
            [HAVANA_SUNDAY], "2026-03-08T04:30", (False, "2026-03-08T05:00"), id="havana, before"
        ),
        pytest.param(
            [HAVANA_SUNDAY], "2026-03-08T05:05", (True, "2026-03-08T05:10"), id="havana, 01:05"
        ),
        pytest.param(
            [BEIRUT_SUNDAY], "2026-03-28T21:30", (False, "2026-03-28T22:00"), id="beirut, before"
        ),
        pytest.param(
            [BEIRUT_SUNDAY], "2026-03-28T22:45", (True, "2026-03-28T22:50"), id="beirut, 01:45"
        ),
        # Half an hour: 02:00 and 02:20 do not exist, 02:40 does; 02:15 fires at 02:30.
        pytest.param(
            [LORD_HOWE_SUNDAY],
            "2026-10-03T12:00",
            (False, "2026-10-03T15:40"),
            id="lord howe, before",
        ),
        pytest.param(
            [LORD_HOWE_0215], "2026-10-03T15:35", (True, "2026-10-03T16:00"), id="lord howe, 02:15"
        ),
    ],
)
def test_verdict(windows: list[Window], now: str, expected: tuple[bool, str | None]) -> None:
    is_open, changes_at = expected
    assert verdict(windows, utc(now)) == Verdict(
        open=is_open, changes_at=None if changes_at is None else utc(changes_at)
    )


def test_naive_now_is_utc_and_answers_are_utc() -> None:
    berlin = datetime(2026, 6, 2, 1, 0, tzinfo=ZoneInfo("Europe/Berlin"))  # 23:00 UTC
    aware = verdict([NIGHTLY], berlin)
    naive = verdict([NIGHTLY], datetime(2026, 6, 1, 23, 0))
    assert aware == naive == Verdict(open=True, changes_at=utc("2026-06-02T02:00"))
    assert aware.changes_at is not None and aware.changes_at.tzinfo is UTC


def test_overlapping_firings_stay_open() -> None:
    # Every hour for 90 minutes: never a gap, so the window never closes.
    assert verdict([allow("0 * * * *", 1.5 * H)], utc("2026-06-01T12:00")) == Verdict(
        open=True, changes_at=None
    )


def test_a_window_that_opens_only_in_a_leap_year_is_beyond_the_horizon() -> None:
    leap_day = allow("0 0 29 2 *", 1 * H)
    assert verdict([leap_day], utc("2026-03-01T00:00")) == Verdict(open=False, changes_at=None)
    assert verdict([leap_day], utc("2027-03-01T00:00")).changes_at == utc("2028-02-29T00:00")


def test_a_deny_that_never_closes_is_answered_with_bounded_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The work is counted in fire times computed (every schedule's, forwards and
    # backwards), not timed: MAX_STEPS for the search and a few to place the present,
    # where a walk to the horizon would take a year of minutes (527,040).
    looked = 0

    class Counting(CronSim):
        def __next__(self) -> datetime:
            nonlocal looked
            looked += 1
            return super().__next__()

    monkeypatch.setattr(sys.modules[verdict.__module__], "CronSim", Counting)
    for schedule in ("* * * * *", "0-59 0-23 * * *"):
        for zone in ("UTC", "Europe/Berlin"):
            windows = [allow("0 22 * * *", H), deny(schedule, 60, zone)]
            looked = 0
            assert verdict(windows, utc("2026-06-01T22:30")) == Verdict(open=False, changes_at=None)
            assert 0 < looked <= MAX_STEPS + 5 * len(windows), (schedule, zone, looked)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "Maybe"}, "kind: "),
        ({"schedule": "0 22 * *"}, "schedule: expected 5 fields"),
        ({"schedule": "0 0 22 * * *"}, "schedule: expected 5 fields"),
        ({"schedule": ""}, "schedule: expected 5 fields"),
        ({"schedule": "61 22 * * *"}, "schedule: Bad minute"),
        ({"schedule": "0 24 * * *"}, "schedule: Bad hour"),
        ({"schedule": "0 0 32 * *"}, "schedule: Bad day-of-month"),
        ({"schedule": "0 0 * 13 *"}, "schedule: Bad month"),
        ({"schedule": "0 0 * * MONDAY"}, "schedule: Bad day-of-week"),
        ({"schedule": "0 0 30 2 *"}, "schedule: Bad day-of-month"),
        ({"schedule": "*/0 * * * *"}, "schedule: Bad minute"),
        ({"schedule": "0 22 * * *" + " " * 100}, "schedule: longer than 100"),
        ({"schedule": "0 22 * * 1,2" + ",3" * 1000}, "schedule: longer than 100"),
        ({"schedule": "0 22 * * \x1b[2J"}, "schedule: must be printable ASCII"),
        ({"schedule": 22}, "schedule: must be a string"),
        ({"duration": 0}, "duration: must be positive"),
        ({"duration": -60}, "duration: must be positive"),
        ({"duration": float("nan")}, "duration: must be positive"),
        ({"duration": float("inf")}, "duration: at most 366 days"),
        ({"duration": 1e300}, "duration: at most 366 days"),
        ({"duration": True}, "duration: must be a number"),
        ({"duration": "4h"}, "duration: must be a number"),
        ({"time_zone": "Mars/Olympus_Mons"}, "timeZone: unknown time zone 'Mars/Olympus_Mons'"),
        ({"time_zone": "Europe"}, "timeZone: unknown time zone"),
        ({"time_zone": "../etc/passwd"}, "timeZone: not a time zone name"),
        ({"time_zone": "Europe/../../../etc/passwd"}, "timeZone: not a time zone name"),
        ({"time_zone": "/etc/localtime"}, "timeZone: not a time zone name"),
        ({"time_zone": "Europe\\Berlin"}, "timeZone: not a time zone name"),
        ({"time_zone": "Europe/Berlin\x00"}, "timeZone: not a time zone name"),
        ({"time_zone": ""}, "timeZone: not a time zone name"),
        ({"time_zone": "A" * 65}, "timeZone: not a time zone name"),
        ({"time_zone": None}, "timeZone: must be a string"),
    ],
)
def test_invalid_windows_are_refused_naming_the_field(
    kwargs: dict[str, object], message: str
) -> None:
    fields: dict[str, object] = {"kind": "Allow", "schedule": "0 22 * * *", "duration": H}
    fields.update(kwargs)
    with pytest.raises(ValueError, match="^" + message.replace("*", r"\*")) as caught:
        Window(**fields)  # type: ignore[arg-type]
    assert len(str(caught.value)) < 100  # never the whole value back


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=120), st.text(max_size=80))
def test_any_text_is_a_window_or_a_value_error(schedule: str, zone: str) -> None:
    for field, build in (
        ("schedule", lambda: deny(schedule, H)),
        ("timeZone", lambda: deny("0 22 * * *", H, zone)),
    ):
        try:
            build()
        except ValueError as err:
            assert str(err).startswith(field + ": ")


# Random windows: hourly or daily-ish schedules, short and long durations, zones with
# DST (Santiago's and Havana's changes at midnight, Lord Howe's by half an hour) or a
# half-hour offset, and instants biased towards DST changes.
ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "America/Santiago",
    "America/Havana",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
]
SCHEDULES = st.builds(
    "{} {} * * {}".format,
    st.sampled_from(["0", "30", "45", "0,30", "*/20"]),
    st.sampled_from(["*", "2", "22", "1-5", "*/6", "9", "0-3"]),
    st.sampled_from(["*", "*", "1-5", "0", "6"]),
)
WINDOWS = st.builds(
    Window,
    kind=st.sampled_from(["Allow", "Deny"]),
    schedule=SCHEDULES,
    duration=st.sampled_from([60.0, 1800.0, H, 4 * H, 8 * H, 26 * H])
    | st.integers(60, 50 * 3600).map(float),
    time_zone=st.sampled_from(ZONES),
)
DST_CHANGES = [
    utc("2026-03-29T01:00"),  # Europe/Berlin
    utc("2026-10-25T01:00"),
    utc("2026-03-08T07:00"),  # America/New_York
    utc("2026-11-01T06:00"),
    utc("2026-04-05T03:00"),  # America/Santiago, at midnight
    utc("2026-09-06T04:00"),
    utc("2026-03-08T05:00"),  # America/Havana, at midnight and at 01:00
    utc("2026-11-01T05:00"),
    utc("2026-04-04T15:00"),  # Australia/Lord_Howe, by half an hour
    utc("2026-10-03T15:30"),
]
INSTANTS = st.datetimes(
    min_value=datetime(2026, 1, 1), max_value=datetime(2027, 12, 31), timezones=st.just(UTC)
) | st.builds(
    lambda change, seconds: change + timedelta(seconds=seconds),
    st.sampled_from(DST_CHANGES),
    st.integers(-3 * 86400, 3 * 86400),
)


def values(field: str, low: int, high: int) -> set[int]:
    """The values of one cron field written as SCHEDULES writes them."""
    found: set[int] = set()
    for part in field.split(","):
        span, _, step = part.partition("/")
        first, _, last = span.partition("-")
        start, stop = (low, high) if span == "*" else (int(first), int(last or first))
        found.update(range(start, stop + 1, int(step or 1)))
    return found


def happens(wall: datetime, zone: ZoneInfo, wall_clock: bool) -> list[datetime]:
    """When a fire at local ``wall`` happens by the module docstring's rule, found by
    trying both readings of ``wall`` and, for a skipped one, the minutes after."""
    readings = {wall.replace(tzinfo=zone, fold=fold).astimezone(UTC) for fold in (0, 1)}
    real = sorted(at for at in readings if at.astimezone(zone).replace(tzinfo=None) == wall)
    if real:
        return real[:1] if wall_clock else real
    if not wall_clock:
        return []
    at = min(readings).replace(second=0)
    while at.astimezone(zone).replace(tzinfo=None) < wall:
        at += timedelta(minutes=1)
    return [at]


def package_zone(name: str) -> ZoneInfo:
    """``name`` as the tzdata package has it, the database windows read: the system's
    may hold older rules (Cuba's, for one, changed in 2026)."""
    with files("tzdata.zoneinfo").joinpath(*name.split("/")).open("rb") as data:
        return ZoneInfo.from_file(data, key=name)


def fire_times(window: Window, after: datetime, upto: datetime) -> list[datetime]:
    """The fire times of ``window`` in ``(after, upto]``, listed from the wall times of
    each local day around, independently of how ``verdict`` walks the schedule."""
    minute, hour, day_of_month, month, weekday = window.schedule.split()
    assert day_of_month == month == "*"
    zone = package_zone(window.time_zone)
    wall_clock = not minute.startswith("*") and not hour.startswith("*")
    found: set[datetime] = set()
    day = (after - timedelta(days=1)).date()
    while day <= (upto + timedelta(days=1)).date():
        if day.isoweekday() % 7 in values(weekday, 0, 6):
            for h in values(hour, 0, 23):
                for m in values(minute, 0, 59):
                    found.update(happens(datetime.combine(day, time(h, m)), zone, wall_clock))
        day += timedelta(days=1)
    return sorted(at for at in found if after < at <= upto)


def walked_open(windows: list[Window], t: datetime) -> bool:
    """The rule applied to the fire times listed by ``fire_times``."""

    def inside(window: Window) -> bool:
        return bool(fire_times(window, t - timedelta(seconds=window.duration), t))

    allows = [w for w in windows if w.kind == "Allow"]
    denies = [w for w in windows if w.kind == "Deny"]
    return (not allows or any(map(inside, allows))) and not any(map(inside, denies))


@settings(max_examples=100, deadline=None)
@given(st.lists(WINDOWS, min_size=1, max_size=3), INSTANTS)
# The first hour after a gap at midnight, on a day whose day before has no fire time.
@example([SANTIAGO_SUNDAY], utc("2026-09-06T03:30"))
@example([HAVANA_SUNDAY], utc("2026-03-08T04:30"))
@example([allow("0 */6 * * 0", 26 * H, "America/Santiago")], utc("2026-09-06T04:30"))
# Cuba's rules since 2026 (the tzdata package has them; an older system database not).
@example([allow("0 2 * * *", H, "America/Havana")], utc("2026-11-15T06:30"))
def test_the_verdict_holds_until_changes_at_and_flips_there(
    windows: list[Window], now: datetime
) -> None:
    answer = verdict(windows, now)
    assert answer.open == walked_open(windows, now)
    if answer.changes_at is None:
        return
    assert now < answer.changes_at <= now + HORIZON
    assert answer.changes_at.tzinfo is UTC
    assert verdict(windows, answer.changes_at).open is not answer.open
    span = answer.changes_at - now
    samples = [now + span * fraction for fraction in (0.1, 0.37, 0.5, 0.81)]
    samples.append(max(now, answer.changes_at - timedelta(seconds=1)))
    for sample in samples:
        assert verdict(windows, sample).open is answer.open, sample
        assert walked_open(windows, sample) is answer.open, sample


@settings(max_examples=25, deadline=None)
@given(st.lists(WINDOWS, max_size=3), INSTANTS)
def test_a_deny_covering_all_times_is_never_open(windows: list[Window], now: datetime) -> None:
    always = deny("* * * * *", 120)
    assert verdict([*windows, always], now) == Verdict(open=False, changes_at=None)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(WINDOWS, max_size=4).flatmap(lambda ws: st.tuples(st.just(ws), st.permutations(ws))),
    INSTANTS,
)
def test_the_verdict_does_not_depend_on_the_order_of_the_windows(
    lists: tuple[list[Window], list[Window]], now: datetime
) -> None:
    windows, shuffled = lists
    assert verdict(windows, now) == verdict(shuffled, now)


@pytest.fixture
def system_zones(tmp_path: Path) -> Iterator[Path]:
    """An empty directory as the system's time zone database, restored afterwards;
    the zones already looked up are forgotten on the way in and out."""
    saved = zoneinfo.TZPATH
    zoneinfo.reset_tzpath(to=[str(tmp_path)])
    zoneinfo.ZoneInfo.clear_cache()
    windows_module._zone.cache_clear()
    try:
        yield tmp_path
    finally:
        zoneinfo.reset_tzpath(to=saved)
        zoneinfo.ZoneInfo.clear_cache()
        windows_module._zone.cache_clear()


def copy_zone(system: Path, name: str, zone: str) -> None:
    """Write ``zone``'s data as ``name`` in the directory ``system``."""
    target = system.joinpath(*name.split("/"))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(files("tzdata.zoneinfo").joinpath(*zone.split("/")).read_bytes())


def test_zones_are_read_without_a_system_database(system_zones: Path) -> None:
    # A legacy link name, which newer Debian images keep in a separate package.
    window = allow("0 9 * * *", H, "US/Eastern")
    assert verdict([window], utc("2026-07-01T13:30:00")).open  # 09:30 EDT
    assert not verdict([window], utc("2026-07-01T09:30:00")).open


def test_zones_are_read_the_same_whatever_the_system_database_says(
    system_zones: Path,
) -> None:
    copy_zone(system_zones, "US/Eastern", "Asia/Tokyo")  # a system file that differs
    window = allow("0 9 * * *", H, "US/Eastern")
    assert verdict([window], utc("2026-01-05T14:30:00")).open  # 09:30 EST
    assert not verdict([window], utc("2026-01-05T00:30:00")).open  # 09:30 in Tokyo


@pytest.mark.parametrize(
    ("name", "first"),
    [
        ("right/Europe/Berlin", "right"),
        ("posix/Europe/Berlin", "posix"),
        ("localtime", "localtime"),
        ("posixrules", "posixrules"),
    ],
)
def test_system_database_extras_are_refused_naming_the_field(
    system_zones: Path, name: str, first: str
) -> None:
    copy_zone(system_zones, name, "Europe/Berlin")
    with pytest.raises(ValueError, match=f"^timeZone: '{first}' is not an IANA time zone name$"):
        allow("0 9 * * *", H, name)
