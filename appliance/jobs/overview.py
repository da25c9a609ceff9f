"""Runs at a glance for the Overview and the Workers view: what runs, what waits, what failed lately,
and which runs a worker served. Each account sees its own runs; admins see every run. A worker
account sees the runs its own browsers served, by number and state only (the jobs are others')."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

import msgspec
from piccolo.query.functions.aggregate import Count

from appliance.accounts import users
from appliance.accounts.actor import Actor
from appliance.jobs import priors, views
from appliance.jobs.tables import Run, RunTask

if TYPE_CHECKING:
    from appliance.jobs.engine.coordinator import Coordinator

FAILURES_SHOWN = 5
RUNS_SHOWN = 8


class RunLine(msgspec.Struct, frozen=True):
    id: int
    job_name: str
    owner: str
    state: str
    reason: str
    at: dt.datetime | None  # started (running), queued (queued), finished (ended)
    # While running, the stage under way as the run page shows it: "stage 1 (map): about 40 %".
    doing: str | None = None
    position: int | None = None  # in the queue


class Glance(msgspec.Struct, frozen=True):
    running: list[RunLine]
    queued: list[RunLine]
    failures: list[RunLine]
    failed_count: int  # since the window start (more than the lines shown, perhaps)
    succeeded_count: int


def _mine(query, actor: Actor):
    return query if actor.is_admin else query.where(Run.owner == actor.user_id)


async def _doing(coordinator: Coordinator, run_id: int, job_id: int | None) -> str | None:
    """The first stage not done (of the first group with one) and its estimated share done, as the run
    page's progress table has it: a share of all the run's tasks said "33 %" while its only map, the
    work, was at about 0 %."""
    live = coordinator.read.view(run_id)
    if live is None:
        return None
    rows = sorted(live.progress(), key=lambda r: (r["group"], r["stage"]))
    current = next((r for r in rows if r["done"] < r["total"]), None)
    if current is None:
        return "finishing"
    estimate = live.estimates(await priors.of_job(job_id, run_id)).get((current["group"], current["stage"]))
    fraction = estimate.fraction if estimate is not None else current["done"] / current["total"]
    return f"{views.stage_name(current['stage'], current['kind'])}: about {int(fraction * 100)} %"


async def at_a_glance(actor: Actor, coordinator: Coordinator, since: dt.datetime) -> Glance:
    """Running and queued runs (oldest first), and the runs that failed since ``since`` (newest first)."""
    active = await _mine(Run.select().where(Run.state.is_in(["running", "queued"])), actor).order_by(Run.id)
    failed = await _mine(Run.select().where((Run.state == "failed") & (Run.finished_at >= since)), actor).order_by(
        Run.finished_at, ascending=False
    )
    succeeded = await _mine(Run.count().where((Run.state == "succeeded") & (Run.finished_at >= since)), actor)
    emails = await users.emails({r["owner"] for r in [*active, *failed]})

    def line(row: dict, at: dt.datetime | None) -> RunLine:
        return RunLine(
            id=row["id"],
            job_name=row["job_name"],
            owner=emails.get(row["owner"], "?"),
            state=row["state"],
            reason=coordinator.read.reason(row["id"]) or row["reason"],
            at=at,
            position=coordinator.read.position(row["id"]),
        )

    running = [
        msgspec.structs.replace(line(r, r["started_at"]), doing=await _doing(coordinator, r["id"], r["job"]))
        for r in active
        if r["state"] == "running"
    ]
    queued = [line(r, r["queued_at"]) for r in active if r["state"] == "queued"]
    return Glance(
        running=running[:RUNS_SHOWN],
        queued=queued[:RUNS_SHOWN],
        failures=[line(r, r["finished_at"]) for r in failed[:FAILURES_SHOWN]],
        failed_count=len(failed),
        succeeded_count=succeeded,
    )


class ServedRun(msgspec.Struct, frozen=True):
    id: int
    job_name: str
    owner: str
    state: str
    tasks: int  # attempts this worker ran (so far, while the run runs)
    queued_at: dt.datetime


async def runs_served_by(actor: Actor, coordinator: Coordinator, worker_id: str) -> list[ServedRun]:
    """The runs ``worker_id`` held a rank in or ran attempts for, newest first (those the actor may see)."""
    counts = {
        r["run"]: r["n"]
        for r in await RunTask.select(RunTask.run, Count(RunTask.id).as_alias("n"))
        .where(RunTask.worker_id == worker_id)
        .group_by(RunTask.run)
    }
    for run_id, tasks in coordinator.read.attempts_by_worker(worker_id).items():
        counts[run_id] = counts.get(run_id, 0) + tasks
    if not counts:
        return []
    rows = await _mine(Run.select().where(Run.id.is_in(list(counts))), actor).order_by(Run.id, ascending=False)
    emails = await users.emails({r["owner"] for r in rows})
    return [
        ServedRun(r["id"], r["job_name"], emails.get(r["owner"], "?"), r["state"], counts[r["id"]], r["queued_at"])
        for r in rows
    ]


class AccountRun(msgspec.Struct, frozen=True):
    id: int
    state: str
    tasks: int  # attempts the account's browsers ran (so far, while the run runs)
    at: dt.datetime  # started (queued, if it never started)


async def runs_served_by_account(account: int, coordinator: Coordinator, worker_ids: list[str]) -> list[AccountRun]:
    """The latest runs the account's browsers ran tasks for (ended ones from the task rows; running ones
    from the coordinator for ``worker_ids``, its connected browsers), newest first."""
    ended = (
        await RunTask.select(RunTask.run, Count(RunTask.id).as_alias("n"))
        .where(RunTask.worker_account == account)
        .group_by(RunTask.run)
        .order_by(RunTask.run, ascending=False)
        .limit(RUNS_SHOWN)
    )
    counts = {r["run"]: r["n"] for r in ended}
    for worker_id in worker_ids:
        for run_id, tasks in coordinator.read.attempts_by_worker(worker_id).items():
            counts[run_id] = counts.get(run_id, 0) + tasks
    latest = sorted(counts, reverse=True)[:RUNS_SHOWN]
    if not latest:
        return []
    rows = await Run.select(Run.id, Run.state, Run.queued_at, Run.started_at).where(Run.id.is_in(latest))
    return sorted(
        (AccountRun(r["id"], r["state"], counts[r["id"]], r["started_at"] or r["queued_at"]) for r in rows),
        key=lambda run: run.id,
        reverse=True,
    )
