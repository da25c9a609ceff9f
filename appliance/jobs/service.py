"""Jobs and runs: saving scripts, starting runs, and reading what they did.

Routes (REST and dashboard) call these; the coordinator does the running. A job belongs to the
coordinator who saved it; runs belong to whoever started them. Admins see everyone's.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import random
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import msgspec
from piccolo.query.functions.aggregate import Count

from appliance.accounts import users
from appliance.accounts.actor import Actor
from appliance.audit import service as audit
from appliance.clock import now
from appliance.cloud import service as cloud
from appliance.errors import Conflict, Forbidden, InvalidRequest, NotFound, Unavailable
from appliance.jobs import codecs, listing, selection
from appliance.jobs.access import run_row
from appliance.jobs.sandbox_policy import allowed_origins, disallowed_urls
from appliance.jobs.spec import JobSpec, ScriptError, extract_spec_async, validate_spec
from appliance.jobs.tables import Job, Run, RunLog, RunOutput, RunTask
from appliance.pmrfs.blobstore import BlobStore

if TYPE_CHECKING:
    from appliance.jobs.engine.coordinator import Coordinator

MAX_NAME = 200
MAX_RUN_WAIT = 60  # seconds a GET of a run may hold its answer (under the usual proxy idle timeouts)
# Run metadata a run may override (the run dialog, or the API's POST /jobs/{id}/runs body).
OVERRIDABLE = {
    "workerCount",
    "groupCount",
    "privateMode",
    "gpu",
    "gpuRequirements",
    "saveIntermediateOutput",
    "seed",
    "staleness",
    "queueTimeout",
    "speculation",
    "validation",
}


class JobInfo(msgspec.Struct, frozen=True):
    id: int
    name: str
    owner: str
    created_at: dt.datetime
    updated_at: dt.datetime
    spec: JobSpec
    script: str | None = None


class StageProgress(msgspec.Struct, frozen=True):
    group: str
    stage: int
    kind: str
    total: int
    done: int
    running: int
    emits: int
    bytes: int
    # Running tasks that made no progress for job_stall_seconds, and backup attempts racing them.
    stalled: int = 0
    backups: int = 0


class RunInfo(msgspec.Struct, frozen=True):
    id: int
    job_id: int | None
    job_name: str
    owner: str
    state: str
    reason: str
    queued_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    spec: JobSpec
    # 1 for the head of the queue, while queued.
    queue_position: int | None = None
    progress: list[StageProgress] = []
    # When the run was started: what it asks against what is connected, when there are too few
    # eligible workers ("asks 8, 3 connected, 2 eligible with WebGPU").
    warning: str = ""


def _check_name(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise InvalidRequest("A job needs a name.")
    if len(name) > MAX_NAME:
        raise InvalidRequest(f"A job name may be at most {MAX_NAME} characters.")
    return name


def _may_run_jobs(actor: Actor) -> None:
    if not actor.is_coordinator:
        raise Forbidden("Only coordinators and admins run jobs.")


# -- jobs ------------------------------------------------------------------------------------


def _job_info(row: dict, emails: dict[int, str], with_script: bool) -> JobInfo:
    return JobInfo(
        id=row["id"],
        name=row["name"],
        owner=emails.get(row["owner"], "?"),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        spec=msgspec.json.decode(row["spec"], type=JobSpec),
        script=row["script"] if with_script else None,
    )


async def _job_row(actor: Actor, job_id: int) -> dict:
    row = await Job.select().where(Job.id == job_id).first()
    if row is None or (row["owner"] != actor.user_id and not actor.is_admin):
        raise NotFound(f"No job {job_id}.")
    return row


async def create_job(actor: Actor, name: str, script: str) -> JobInfo:
    _may_run_jobs(actor)
    name = _check_name(name)
    spec = await extract_spec_async(script)
    t = now()
    inserted = await Job.insert(
        Job(
            owner=actor.user_id,
            name=name,
            script=script,
            spec=msgspec.json.encode(spec).decode(),
            created_at=t,
            updated_at=t,
        )
    ).returning(Job.id)
    return await get_job(actor, inserted[0]["id"])


async def update_job(actor: Actor, job_id: int, name: str | None, script: str | None) -> JobInfo:
    row = await _job_row(actor, job_id)
    values = {Job.updated_at: now()}
    if name is not None:
        values[Job.name] = _check_name(name)
    if script is not None:
        values[Job.script] = script
        values[Job.spec] = msgspec.json.encode(await extract_spec_async(script)).decode()
    await Job.update(values).where(Job.id == row["id"])
    return await get_job(actor, job_id)


async def get_job(actor: Actor, job_id: int) -> JobInfo:
    row = await _job_row(actor, job_id)
    return _job_info(row, await users.emails([row["owner"]]), with_script=True)


async def list_jobs(actor: Actor) -> list[JobInfo]:
    query = Job.select().order_by(Job.updated_at, ascending=False)
    if not actor.is_admin:
        query = query.where(Job.owner == actor.user_id)
    rows = await query
    emails = await users.emails(r["owner"] for r in rows)
    return [_job_info(r, emails, with_script=False) for r in rows]


async def find_jobs(actor: Actor, filters: listing.Filters) -> tuple[list[JobInfo], listing.Page]:
    """A page of the jobs the actor may see, as the Jobs list's filters narrow them."""
    found = await listing.jobs(actor, filters)
    emails = await users.emails(r["owner"] for r in found.rows)
    return [_job_info(r, emails, with_script=False) for r in found.rows], found


async def delete_job(actor: Actor, job_id: int) -> None:
    """Delete a saved job; its runs (history, logs, output) stay."""
    row = await _job_row(actor, job_id)
    await Job.delete().where(Job.id == row["id"])


# -- runs ------------------------------------------------------------------------------------


def apply_overrides(spec: JobSpec, overrides: dict) -> JobSpec:
    unknown = sorted(set(overrides) - OVERRIDABLE)
    if unknown:
        raise InvalidRequest(
            f"Unknown run setting(s): {', '.join(unknown)}. A run may set: {', '.join(sorted(OVERRIDABLE))}."
        )
    merged = {**msgspec.to_builtins(spec), **overrides}
    try:
        changed = msgspec.convert(merged, JobSpec)
        validate_spec(changed)
    except (msgspec.ValidationError, ScriptError) as exc:
        raise InvalidRequest(f"Invalid run setting: {exc}") from None
    return changed


async def start_run(
    actor: Actor, job_id: int, overrides: dict, coordinator: Coordinator, settings, appliance_origin: str
) -> RunInfo:
    _may_run_jobs(actor)
    row = await _job_row(actor, job_id)
    spec = apply_overrides(msgspec.json.decode(row["spec"], type=JobSpec), overrides or {})
    origins = await allowed_origins(settings)
    refused = disallowed_urls([*spec.scripts, *(w.url for w in spec.wasm_binaries)], appliance_origin, origins)
    if refused:
        raise InvalidRequest(
            f"Job scripts and WebAssembly load only from the appliance and the allowed origins "
            f"({', '.join(origins) or 'none configured'}); not allowed: {', '.join(refused)}"
        )
    if spec.storage_type != "pmrfs":
        await _check_cloud_storage(actor, spec, appliance_origin, coordinator.cloud_keys)
    # The run's seed (context.rng) is fixed here, so the spec the workers get names it.
    seed = spec.seed if spec.seed is not None else random.randrange(1 << 31)
    spec = msgspec.structs.replace(spec, seed=seed)
    inserted = await Run.insert(
        Run(
            job=row["id"],
            owner=actor.user_id,
            job_name=row["name"],
            spec=msgspec.json.encode(spec).decode(),
            state="queued",
            reason="",
            queued_at=now(),
            seed=seed,
        )
    ).returning(Run.id)
    run_id = inserted[0]["id"]
    coordinator.enqueue(run_id, actor.user_id, spec)
    await audit.note("run.started", f"run #{run_id} of job #{row['id']} ({row['name']})", None, {"state": "queued"})
    warning = selection.capacity_note(spec, *coordinator.read.capacity(spec, actor.user_id))
    return msgspec.structs.replace(await get_run(actor, run_id, coordinator), warning=warning)


async def _check_cloud_storage(actor: Actor, spec: JobSpec, appliance_origin: str, keys: cloud.CloudKeys) -> None:
    """An s3/gcs run needs the account's bucket, and the bucket must let worker pages reach it (CORS)."""
    storage = await cloud.storage_for(keys, actor.user_id)  # SecretUnreadable: 400
    if storage is None:
        raise InvalidRequest(
            f"Storage type {spec.storage_type} needs your bucket's settings: save them on the Cloud Data page first."
        )
    problem = await cloud.check_worker_cors(storage, appliance_origin)
    if problem:
        raise InvalidRequest(f'{problem} Use "Set CORS for workers" on the Cloud Data page.')


async def run_owner(run_id: int) -> int | None:
    """The account a run belongs to (billing charges a run's TURN relay bytes to it); None if unknown."""
    row = await Run.select(Run.owner).where(Run.id == run_id).first()
    return row["owner"] if row else None


def _run_info(row: dict, emails: dict[int, str], coordinator: Coordinator) -> RunInfo:
    live = coordinator.read.view(row["id"])
    if live is not None:
        progress = live.progress()
    else:
        progress = msgspec.json.decode(row["progress"]) if row["progress"] else []
    return RunInfo(
        id=row["id"],
        job_id=row["job"],
        job_name=row["job_name"],
        owner=emails.get(row["owner"], "?"),
        state=row["state"],
        reason=coordinator.read.reason(row["id"]) or row["reason"],
        queued_at=row["queued_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        spec=msgspec.json.decode(row["spec"], type=JobSpec),
        queue_position=coordinator.read.position(row["id"]),
        progress=[StageProgress(**p) for p in progress],
    )


async def get_run(actor: Actor, run_id: int, coordinator: Coordinator, wait: float = 0) -> RunInfo:
    """The run; with `wait` (seconds, at most MAX_RUN_WAIT) a queued or running run is returned once it
    ended or when the wait is over, whichever comes first (a long poll)."""
    if not 0 <= wait <= MAX_RUN_WAIT:
        raise InvalidRequest(f"wait must be between 0 and {MAX_RUN_WAIT} seconds")
    row = await run_row(actor, run_id)
    if wait and row["state"] in ("queued", "running"):
        ended = coordinator.end_of(run_id)
        row = await run_row(actor, run_id)  # it may have ended before the event was taken
        if row["state"] in ("queued", "running"):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ended.wait(), wait)
            row = await run_row(actor, run_id)
    return _run_info(row, await users.emails([row["owner"]]), coordinator)


async def list_runs(
    actor: Actor, coordinator: Coordinator, *, job_id: int | None = None, limit: int = 100
) -> list[RunInfo]:
    query = Run.select().order_by(Run.id, ascending=False).limit(limit)
    if not actor.is_admin:
        query = query.where(Run.owner == actor.user_id)
    if job_id is not None:
        query = query.where(Run.job == job_id)
    rows = await query
    emails = await users.emails(r["owner"] for r in rows)
    return [_run_info(r, emails, coordinator) for r in rows]


async def find_runs(
    actor: Actor, coordinator: Coordinator, filters: listing.Filters
) -> tuple[list[RunInfo], listing.Page]:
    """A page of the runs the actor may see, as the Runs list's filters narrow them."""
    found = await listing.runs(actor, filters)
    emails = await users.emails(r["owner"] for r in found.rows)
    return [_run_info(r, emails, coordinator) for r in found.rows], found


async def cancel_run(actor: Actor, run_id: int, coordinator: Coordinator) -> RunInfo:
    row = await run_row(actor, run_id)
    if row["state"] not in ("queued", "running") or not await coordinator.cancel(run_id):
        raise Conflict(f"Run {run_id} is {row['state']}; only queued and running runs can be cancelled.")
    await audit.note(
        "run.cancelled", f"run #{run_id} ({row['job_name']})", {"state": row["state"]}, {"state": "cancelled"}
    )
    return await get_run(actor, run_id, coordinator)


class LogLine(msgspec.Struct, frozen=True):
    at: dt.datetime
    source: str
    group: str
    rank: int | None
    level: str
    text: str


# The log viewer's level filter: what each choice shows.
LOG_LEVELS = {"warn": ["warn", "error"], "error": ["error"]}


def log_lines_of(run_id: int, *, source: str | None = None, level: str = "", search: str = ""):
    """The condition picking a run's log lines: one source ("coordinator" or a worker id), a
    level and up ("warn" or "error"), text containing ``search`` (case-insensitive)."""
    where = RunLog.run == run_id
    if source:
        where &= RunLog.source == source
    if level in LOG_LEVELS:
        where &= RunLog.level.is_in(LOG_LEVELS[level])
    if search:
        where &= listing.contains(RunLog.text, search)
    return where


async def run_logs(
    actor: Actor,
    run_id: int,
    *,
    source: str | None = None,
    after: int = 0,
    limit: int = 10_000,
    level: str = "",
    search: str = "",
) -> list[tuple[int, LogLine]]:
    """Log lines of a run (optionally one worker's, or "coordinator"), oldest first, with their ids."""
    await run_row(actor, run_id)
    where = log_lines_of(run_id, source=source, level=level, search=search) & (RunLog.id > after)
    query = RunLog.select().where(where).order_by(RunLog.id).limit(limit)
    return [(r["id"], LogLine(r["at"], r["source"], r["group"], r["rank"], r["level"], r["text"])) for r in await query]


async def log_sources(actor: Actor, run_id: int) -> list[str]:
    await run_row(actor, run_id)
    rows = await RunLog.select(RunLog.source).where(RunLog.run == run_id).distinct()
    return sorted({r["source"] for r in rows}, key=lambda s: (s != "coordinator", s))


class TaskInfo(msgspec.Struct, frozen=True):
    group: str
    stage: int
    rank: int
    attempt: int
    worker_id: str
    state: str
    started_at: dt.datetime
    finished_at: dt.datetime | None
    emits: int
    bytes_out: int
    cpu_ms: int
    error: str
    gpu_adapter: str = ""
    chunk: int = 0
    chunks: int = 1  # a range's chunks from ``chunk`` on


async def run_tasks(actor: Actor, run_id: int) -> list[TaskInfo]:
    """Every task attempt of a finished run (the timeline per worker)."""
    await run_row(actor, run_id)
    rows = await RunTask.select().where(RunTask.run == run_id).order_by(RunTask.started_at)
    return [
        TaskInfo(
            r["group"],
            r["stage"],
            r["rank"],
            r["attempt"],
            r["worker_id"],
            r["state"],
            r["started_at"],
            r["finished_at"],
            r["emits"],
            r["bytes_out"],
            r["cpu_ms"],
            r["error"],
            r["gpu_adapter"],
            r["chunk"],
            r["chunks"],
        )
        for r in rows
    ]


async def output_groups(actor: Actor, run_id: int) -> list[str]:
    row = await run_row(actor, run_id)
    spec = msgspec.json.decode(row["spec"], type=JobSpec)
    return [chr(ord("A") + i) for i in range(spec.group_count)]


async def output_records(actor: Actor, run_id: int, group: str) -> int:
    """How many records a group of the run's output holds (as the workers counted them)."""
    await run_row(actor, run_id)
    rows = await RunOutput.select(RunOutput.records).where((RunOutput.run == run_id) & (RunOutput.group == group))
    return sum(r["records"] for r in rows)


async def run_output_blobs(
    actor: Actor, run_id: int, group: str, store: BlobStore, read_cloud
) -> AsyncIterator[tuple[str, bytes]]:
    """The run's final output blobs of one group, rank by rank, as ``(content type, bytes)``.

    ``read_cloud(key) -> bytes`` reads an object of the run owner's cloud bucket (s3 runs).
    """
    row = await run_row(actor, run_id)
    if row["state"] != "succeeded":
        raise Conflict(f"Run {run_id} is {row['state']}; only a succeeded run has output.")
    if group not in await output_groups(actor, run_id):
        raise NotFound(f"Run {run_id} has no group {group}.")
    rows = (
        await RunOutput.select()
        .where((RunOutput.run == run_id) & (RunOutput.group == group))
        .order_by(RunOutput.rank)
        .order_by(RunOutput.seq)
    )
    cloud = msgspec.json.decode(row["spec"], type=JobSpec).storage_type != "pmrfs"
    for r in rows:
        data = await read_cloud(r["location"]) if cloud else await store.get(r["location"])
        if data is None:
            raise Unavailable(f"Output blob {r['location']} is missing on the appliance.")
        yield r["content_type"], data


async def run_output(
    actor: Actor, run_id: int, group: str, store: BlobStore, read_cloud
) -> AsyncIterator[tuple[object, object]]:
    """The run's final ``[key, value]`` records of one group, rank by rank (see ``run_output_blobs``)."""
    async for content_type, data in run_output_blobs(actor, run_id, group, store, read_cloud):
        for record in codecs.decode(content_type, data):
            yield record


async def runs_by_state() -> dict[str, int]:
    """How many runs are in each state (queued, running, succeeded, failed, cancelled)."""
    rows = await Run.select(Run.state, Count(Run.id).as_alias("n")).group_by(Run.state)
    return {r["state"]: r["n"] for r in rows}
