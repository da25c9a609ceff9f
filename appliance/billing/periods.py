"""Billing periods: calendar months ("YYYY-MM") in the appliance's time zone.

The functions that need that zone take it (``BillingContext.tz``) from their caller."""

from __future__ import annotations

import datetime as dt
import re
from zoneinfo import ZoneInfo

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


def bounds(period: str, tz: ZoneInfo) -> tuple[dt.datetime, dt.datetime]:
    """[start, end) of the period in UTC: local midnight of the 1st to local midnight of the next 1st."""
    year, month = parse(period)
    start = dt.datetime(year, month, 1, tzinfo=tz)
    end = dt.datetime(year + month // 12, month % 12 + 1, 1, tzinfo=tz)
    return start.astimezone(dt.UTC), end.astimezone(dt.UTC)


def days(period: str) -> tuple[dt.date, dt.date]:
    """The first and the last day of the period (its local days, in any time zone)."""
    year, month = parse(period)
    first = dt.date(year, month, 1)
    return first, dt.date(year + month // 12, month % 12 + 1, 1) - dt.timedelta(days=1)


def of(at: dt.datetime, tz: ZoneInfo) -> str:
    local = at.astimezone(tz)
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


def local_date(at: dt.datetime, tz: ZoneInfo) -> dt.date:
    return at.astimezone(tz).date()


def day_start(day: dt.date, tz: ZoneInfo) -> dt.datetime:
    """Local midnight starting ``day``, in UTC."""
    return dt.datetime(day.year, day.month, day.day, tzinfo=tz).astimezone(dt.UTC)
