"""The queue's and the stragglers' rules, as an admin sets them while the appliance runs (Admin →
Settings): the queue timeout, fair share between accounts and the time after which a task without
progress is stalled. A stored value overrides the setting from peermr.toml or the environment; a
field left empty falls back to it. Whether a software WebGPU adapter (SwiftShader and the like)
counts as a GPU, for GPU runs' eligibility and so for GPU billing, is the admin's alone (default:
it does not). The coordinator holds the rules in force and is given the new ones when they are
saved, so they apply to the next scheduling round.
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.audit import service as audit
from appliance.clock import now
from appliance.config import Settings
from appliance.db import save_only_row
from appliance.errors import InvalidRequest
from appliance.jobs.tables import SchedulingRules


@dataclass(frozen=True)
class SchedulingPolicy:
    queue_timeout_hours: float  # 0: queued runs wait for ever
    fair_share: float  # of the connected workers, (0, 1]; 1: no limit
    stall_seconds: int
    software_gpus: bool = False  # software WebGPU adapters may run GPU runs


def configured(settings: Settings) -> SchedulingPolicy:
    return SchedulingPolicy(settings.job_queue_timeout_hours, settings.job_fair_share, settings.job_stall_seconds)


async def stored() -> dict:
    """The admin's values (None where a field is empty; software_gpus False until set)."""
    row = await SchedulingRules.select().first()
    fields = ("queue_timeout_hours", "fair_share", "stall_seconds")
    return {**{f: row[f] if row else None for f in fields}, "software_gpus": bool(row and row["software_gpus"])}


async def in_force(settings: Settings) -> SchedulingPolicy:
    base = configured(settings)
    admin = await stored()
    return SchedulingPolicy(
        base.queue_timeout_hours if admin["queue_timeout_hours"] is None else admin["queue_timeout_hours"],
        base.fair_share if admin["fair_share"] is None else admin["fair_share"],
        base.stall_seconds if admin["stall_seconds"] is None else admin["stall_seconds"],
        admin["software_gpus"],
    )


def _number(text: str, name: str, low: float, high: float | None, kind=float) -> float | int | None:
    text = text.strip()
    if not text:
        return None
    try:
        value = kind(text)
    except ValueError:
        raise InvalidRequest(f"{name} must be a {'whole ' if kind is int else ''}number, not {text!r}.") from None
    if value < low or (high is not None and value > high):
        bounds = f"from {low:g} to {high:g}" if high is not None else f"at least {low:g}"
        raise InvalidRequest(f"{name} must be {bounds}, not {text}.")
    return value


async def save(
    settings: Settings, queue_timeout_hours: str, fair_share_percent: str, stall_seconds: str
) -> SchedulingPolicy:
    """Store the admin's rules (text as typed; empty: the configured value) and return those in force;
    refused with every bad field named."""
    problems: list[str] = []

    def checked(*args) -> float | int | None:
        try:
            return _number(*args)
        except InvalidRequest as exc:
            problems.append(str(exc))
            return None

    timeout = checked(queue_timeout_hours, "The queue timeout", 0, None)
    share = checked(fair_share_percent, "The fair share", 1, 100)
    stall = checked(stall_seconds, "The stall time", 1, None, int)
    if problems:
        raise InvalidRequest(" ".join(problems))
    before = await stored()
    values = {
        SchedulingRules.queue_timeout_hours: timeout,
        SchedulingRules.fair_share: None if share is None else share / 100,
        SchedulingRules.stall_seconds: stall,
        SchedulingRules.updated_at: now(),
    }
    await save_only_row(SchedulingRules, values)
    await audit.note("settings.scheduling", "job queue and straggler rules", before, await stored())
    return await in_force(settings)


async def save_software_gpus(settings: Settings, allowed: bool) -> SchedulingPolicy:
    """Let software WebGPU adapters run GPU runs (and be billed as GPUs), or not; returns the rules in force."""
    before = await stored()
    await save_only_row(SchedulingRules, {SchedulingRules.software_gpus: allowed, SchedulingRules.updated_at: now()})
    await audit.note("settings.software_gpus", "software WebGPU adapters", before, await stored())
    return await in_force(settings)
