"""Courtesy on employees' machines: the share of a device's cores a worker page may use and the hours
it may work, as an admin sets them (Admin → Settings). The page applies them (static/worker/courtesy.js):
it runs at most floor(share × cores) tasks at once (at least one), reports that as its capacity, and
pauses on battery, under serious compute pressure and outside the hours. The admin may turn the busy
check off for machines given over to the work: the worker page is then served without the Compute
Pressure API (``NO_PRESSURE_POLICY``), so the page never sees the pressure it would pause for.
"""

from __future__ import annotations

import re

import msgspec

from appliance.audit import service as audit
from appliance.clock import now
from appliance.db import save_only_row
from appliance.errors import InvalidRequest
from appliance.fleet.tables import CourtesyRules

DEFAULT_SHARE = 0.5
HOURS = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")
# The header of a worker page that must not pause while the computer is busy.
NO_PRESSURE_POLICY = {"Permissions-Policy": "compute-pressure=()"}


class Courtesy(msgspec.Struct, frozen=True):
    core_share: float = DEFAULT_SHARE
    hours_from: str = ""
    hours_to: str = ""
    pause_when_busy: bool = True

    @property
    def hours(self) -> str:
        return f"{self.hours_from}–{self.hours_to}" if self.hours_from else ""


async def rules() -> Courtesy:
    row = await CourtesyRules.select().first()
    if row is None:
        return Courtesy()
    return Courtesy(row["core_share"], row["hours_from"], row["hours_to"], row["pause_when_busy"])


def _share_problem(text: str) -> str:
    text = text.strip().rstrip("%").strip()
    try:
        percent = float(text)
    except ValueError:
        return f"The core share must be a percentage from 1 to 100, not {text!r}."
    return "" if 1 <= percent <= 100 else f"The core share must be from 1 to 100 %, not {text}."


def _hours_problem(hours_from: str, hours_to: str) -> str:
    if not hours_from and not hours_to:
        return ""
    if bad := [value for value in (hours_from, hours_to) if not HOURS.match(value)]:
        return f"Working hours are two times like 18:00 and 08:00 (or both empty), not {' or '.join(map(repr, bad))}."
    if hours_from == hours_to:
        return "The working hours start and end at the same time; leave both empty for any time."
    return ""


async def save(core_share_percent: str, hours_from: str, hours_to: str, pause_when_busy: bool = True) -> Courtesy:
    """Store the admin's rules (the share in percent; hours may wrap past midnight) and return them;
    refused with every bad field named."""
    hours_from, hours_to = hours_from.strip(), hours_to.strip()
    if problems := [p for p in (_share_problem(core_share_percent), _hours_problem(hours_from, hours_to)) if p]:
        raise InvalidRequest(" ".join(problems))
    share = float(core_share_percent.strip().rstrip("%").strip()) / 100
    new = Courtesy(share, hours_from, hours_to, pause_when_busy)
    before = await rules()
    values = {
        CourtesyRules.core_share: new.core_share,
        CourtesyRules.hours_from: new.hours_from,
        CourtesyRules.hours_to: new.hours_to,
        CourtesyRules.pause_when_busy: new.pause_when_busy,
        CourtesyRules.updated_at: now(),
    }
    await save_only_row(CourtesyRules, values)
    await audit.note("settings.courtesy", "worker page courtesy", msgspec.to_builtins(before), msgspec.to_builtins(new))
    return new
