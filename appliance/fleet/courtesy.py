"""Courtesy on employees' machines: the share of a device's cores a worker page may use and the hours
it may work, as an admin sets them (Admin → Settings). The page applies them (static/worker/courtesy.js):
it runs at most floor(share × cores) tasks at once (at least one), reports that as its capacity, and
pauses on battery, under serious compute pressure and outside the hours.
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


class Courtesy(msgspec.Struct, frozen=True):
    core_share: float = DEFAULT_SHARE
    hours_from: str = ""
    hours_to: str = ""

    @property
    def hours(self) -> str:
        return f"{self.hours_from}–{self.hours_to}" if self.hours_from else ""


async def rules() -> Courtesy:
    row = await CourtesyRules.select().first()
    return Courtesy(row["core_share"], row["hours_from"], row["hours_to"]) if row else Courtesy()


def _share(text: str) -> float:
    text = text.strip().rstrip("%").strip()
    try:
        percent = float(text)
    except ValueError:
        raise InvalidRequest(f"The core share must be a percentage from 1 to 100, not {text!r}.") from None
    if not 1 <= percent <= 100:
        raise InvalidRequest(f"The core share must be from 1 to 100 %, not {text}.")
    return percent / 100


def _hours(hours_from: str, hours_to: str) -> tuple[str, str]:
    hours_from, hours_to = hours_from.strip(), hours_to.strip()
    if not hours_from and not hours_to:
        return "", ""
    for value in (hours_from, hours_to):
        if not HOURS.match(value):
            raise InvalidRequest(f"Working hours are two times like 18:00 and 08:00 (or both empty), not {value!r}.")
    if hours_from == hours_to:
        raise InvalidRequest("The working hours start and end at the same time; leave both empty for any time.")
    return hours_from, hours_to


async def save(core_share_percent: str, hours_from: str, hours_to: str) -> Courtesy:
    """Store the admin's rules (the share in percent; hours may wrap past midnight) and return them."""
    new = Courtesy(_share(core_share_percent), *_hours(hours_from, hours_to))
    before = await rules()
    values = {
        CourtesyRules.core_share: new.core_share,
        CourtesyRules.hours_from: new.hours_from,
        CourtesyRules.hours_to: new.hours_to,
        CourtesyRules.updated_at: now(),
    }
    await save_only_row(CourtesyRules, values)
    await audit.note("settings.courtesy", "worker page courtesy", msgspec.to_builtins(before), msgspec.to_builtins(new))
    return new
