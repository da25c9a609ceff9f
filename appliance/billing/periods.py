"""Billing periods: calendar months ("YYYY-MM") in the appliance's time zone."""

from __future__ import annotations

import datetime as dt
import re
from zoneinfo import ZoneInfo

from appliance.billing import context
from appliance.errors import InvalidRequest

PERIOD_RE = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")


class PeriodError(InvalidRequest):
    """Not a period like 2026-05 (400)."""


def parse(period: str) -> tuple[int, int]:
    match = PERIOD_RE.match(period or "")
    if not match:
        raise PeriodError(f"{period!r} is not a period like 2026-05")
    return int(match.group(1)), int(match.group(2))


def check(period: str) -> str:
    parse(period)
    return period


def _tz(tz: ZoneInfo | None) -> ZoneInfo:
    return tz or context.timezone()


def bounds(period: str, tz: ZoneInfo | None = None) -> tuple[dt.datetime, dt.datetime]:
    """[start, end) of the period in UTC: local midnight of the 1st to local midnight of the next 1st."""
    year, month = parse(period)
    zone = _tz(tz)
    start = dt.datetime(year, month, 1, tzinfo=zone)
    end = dt.datetime(year + month // 12, month % 12 + 1, 1, tzinfo=zone)
    return start.astimezone(dt.UTC), end.astimezone(dt.UTC)


def of(at: dt.datetime, tz: ZoneInfo | None = None) -> str:
    local = at.astimezone(_tz(tz))
    return f"{local.year:04d}-{local.month:02d}"


def following(period: str) -> str:
    year, month = parse(period)
    return f"{year + month // 12:04d}-{month % 12 + 1:02d}"


def preceding(period: str) -> str:
    year, month = parse(period)
    return f"{year - (month == 1):04d}-{(month - 2) % 12 + 1:02d}"


def between(first: str, last: str) -> list[str]:
    """Periods from ``first`` to ``last``, both included (empty when first is after last)."""
    out = []
    period = check(first)
    while period <= last:
        out.append(period)
        period = following(period)
    return out


def local_date(at: dt.datetime, tz: ZoneInfo | None = None) -> dt.date:
    return at.astimezone(_tz(tz)).date()


def day_start(day: dt.date, tz: ZoneInfo | None = None) -> dt.datetime:
    """Local midnight starting ``day``, in UTC."""
    return dt.datetime(day.year, day.month, day.day, tzinfo=_tz(tz)).astimezone(dt.UTC)
