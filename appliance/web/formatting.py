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
    env.filters["bytes"] = human_bytes
    env.filters["duration"] = human_duration


def human_bytes(value: int) -> str:
    """1023 B, 1.5 KiB, 12.0 MiB, ..."""
    if value < 1024:
        return f"{value} B"
    size = float(value)
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024:
            return f"{size:.1f} {unit}"
    return f"{size / 1024:.1f} TiB"


def human_duration(seconds: float) -> str:
    """0.4 s and 1.2 s (under 10 s, to a tenth, so that a short run never reads as 0 s), 45 s, 12 min,
    3 h 05 min."""
    if seconds < 10 and seconds != int(seconds):
        return f"{max(seconds, 0.1):.1f} s"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
