"""Capacity feedback before a run is started: the workers connected now, and how many of them the
scheduler would let run it (jobs/selection.py decides: private mode, GPU requirements)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from appliance.accounts.actor import Actor
from appliance.fleet.presence import paused_note
from appliance.jobs import selection, service

if TYPE_CHECKING:
    from appliance.jobs.engine.coordinator import Coordinator


class Capacity(msgspec.Struct, frozen=True, rename="camel"):
    asks: int  # workers per group x groups
    connected: int  # paused ones too (fleet/presence.py)
    paused: str  # which of them are paused and why: "both paused: this computer is busy ..."; "" when none
    idle: int
    eligible: int  # of the connected, those the run may use (busy or idle)
    eligible_idle: int
    eligible_per_group: int  # what "use the N connected" runs on: the eligible ones over the run's groups
    private_mode: bool
    gpu: bool
    summary: str


def _summary(asks: int, connected: int, paused: str, eligible: int, eligible_idle: int, spec) -> str:
    if not connected:
        return f"No worker is connected right now: the run asks {asks} and waits in the queue until enough are."
    which = selection.describe_need(spec, 0).removeprefix("0 idle workers").strip()  # "with WebGPU ..."
    text = (
        f"{connected} worker{'s' if connected != 1 else ''} connected{', ' + paused if paused else ''}; "
        f"{eligible} eligible for this run"
        f"{' (' + which + ')' if which else ''}, {eligible_idle} of them idle. "
        f"The run asks {asks}"
    )
    if eligible < asks:
        more = "resume or connect" if paused else "connect"
        return text + f": it waits until {asks - eligible} more eligible worker(s) {more}."
    if eligible_idle < asks:
        return text + ": it starts as busy ones free up."
    return text + ": it can start now."


async def for_job(actor: Actor, job_id: int, overrides: dict, coordinator: Coordinator) -> Capacity:
    """What a run of the job with these settings would find; bad settings get InvalidRequest."""
    job = await service.get_job(actor, job_id)
    spec = service.apply_overrides(job.spec, overrides)
    connected = list(coordinator.fleet.workers.values())
    present = [w for w in connected if not w.paused]
    eligible = [w for w in present if coordinator.read.eligible(w, spec, actor.user_id)]
    asks = selection.needed(spec)
    eligible_idle = sum(1 for w in eligible if selection.available(w))
    paused = paused_note(connected)
    return Capacity(
        asks=asks,
        connected=len(connected),
        paused=paused,
        idle=sum(1 for w in present if selection.available(w)),
        eligible=len(eligible),
        eligible_idle=eligible_idle,
        eligible_per_group=len(eligible) // spec.group_count,
        private_mode=spec.private_mode,
        gpu=spec.gpu,
        summary=_summary(asks, len(connected), paused, len(eligible), eligible_idle, spec),
    )
