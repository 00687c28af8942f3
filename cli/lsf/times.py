"""LSF's time words (bsub -b, -t): `[[[year:]month:]day:]hour:minute`, in the local time zone.

What is left out is now's: a time whose day is not given is today's, or
tomorrow's if today's has passed; one whose month is not given is this
month's, or next month's; one whose year is not given, this year's or the
next (LSF's rule: the next such time). Pure: `now` is given.
"""

from __future__ import annotations

import datetime


class TimeError(ValueError):
    pass


def parse(text: str, now: datetime.datetime) -> datetime.datetime:
    """The time `text` names, after `now` (a naive local datetime, as `now` is)."""
    parts = text.strip().split(":")
    if not 2 <= len(parts) <= 5 or not all(p.isdigit() for p in parts):
        raise TimeError(f"{text[:40]!r}: a time is [[[year:]month:]day:]hour:minute")
    numbers = [int(p) for p in parts]
    hour, minute = numbers[-2:]
    day = numbers[-3] if len(numbers) >= 3 else None
    month = numbers[-4] if len(numbers) >= 4 else None
    year = numbers[-5] if len(numbers) == 5 else None
    if year is not None and year < 100:
        year += 2000
    try:
        when = now.replace(year=year or now.year, month=month or now.month, day=day or now.day, hour=hour,
                           minute=minute, second=0, microsecond=0)
    except ValueError as exc:
        raise TimeError(f"{text[:40]!r}: {exc}") from None
    if when > now or year is not None:
        return when
    if day is None:
        return when + datetime.timedelta(days=1)
    try:
        if month is None:
            return when.replace(year=when.year + (when.month == 12), month=when.month % 12 + 1)
        return when.replace(year=when.year + 1)
    except ValueError as exc:  # the 31st of a month without one
        raise TimeError(f"{text[:40]!r}: {exc}") from None


def epoch_ms(when: datetime.datetime) -> int:
    return int(when.timestamp() * 1000)
