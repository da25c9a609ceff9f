"""Template filters: times in the appliance's time zone."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

from jinja2 import Environment


def register_filters(env: Environment, timezone: str) -> None:
    zone = ZoneInfo(timezone)

    def when(value: dt.datetime | None, empty: str = "never") -> str:
        """`2026-11-21 14:05 CET`, or `empty` for no time at all."""
        if value is None:
            return empty
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value.astimezone(zone).strftime("%Y-%m-%d %H:%M %Z")

    env.filters["when"] = when
