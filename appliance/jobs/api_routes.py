"""Jobs and runs in the REST API (contract: docs/protocol.md, "REST API" and "Jobs and runs")."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, delete, get, post, put
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody
from litestar.response import Response, Stream
from litestar.status_codes import HTTP_201_CREATED, HTTP_204_NO_CONTENT

from appliance.accounts.actor import Actor
from appliance.accounts.auth import COORDINATOR, access
from appliance.accounts.rate_limits import RUN_SUBMISSION
from appliance.config import Settings
from appliance.jobs import parameters, service
from appliance.jobs.access import coordinator_of
from appliance.jobs.outputs import cloud_reader, json_lines
from appliance.jobs.service import JobInfo, RunInfo

TAGS = ["jobs"]


class JobIn(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    script: str


class JobUpdate(msgspec.Struct, forbid_unknown_fields=True):
    name: str | None = None
    script: str | None = None


def appliance_origin(request: Request) -> str:
    return f"{request.url.scheme}://{request.url.netloc}"


@post(
    "/api/v1/jobs",
    opt=access(COORDINATOR),
    status_code=HTTP_201_CREATED,
    tags=TAGS,
    summary="Save a job",
    description="The script is evaluated against a recording SDK to extract its spec; a script that does not "
    "evaluate (a syntax error, no start(jobRunner)) is refused with 400 and its line and column.",
)
async def create_job(request: Request, data: JSONBody[JobIn]) -> JobInfo:
    return await service.create_job(Actor.of(request.user), data.name, data.script)


@get("/api/v1/jobs", opt=access(COORDINATOR), tags=TAGS, summary="Your jobs (an admin sees all)")
async def list_jobs(request: Request) -> list[JobInfo]:
    return await service.list_jobs(Actor.of(request.user))


@get("/api/v1/jobs/{job_id:int}", opt=access(COORDINATOR), tags=TAGS, summary="A job with its script and spec")
async def get_job(request: Request, job_id: FromPath[int]) -> JobInfo:
    return await service.get_job(Actor.of(request.user), job_id)


@put("/api/v1/jobs/{job_id:int}", opt=access(COORDINATOR), tags=TAGS, summary="Rename a job or replace its script")
async def update_job(request: Request, job_id: FromPath[int], data: JSONBody[JobUpdate]) -> JobInfo:
    return await service.update_job(Actor.of(request.user), job_id, data.name, data.script)


@delete(
    "/api/v1/jobs/{job_id:int}",
    opt=access(COORDINATOR),
    status_code=HTTP_204_NO_CONTENT,
    tags=TAGS,
    summary="Delete a job (its runs stay)",
)
async def delete_job(request: Request, job_id: FromPath[int]) -> None:
    await service.delete_job(Actor.of(request.user), job_id)


@post(
    "/api/v1/jobs/{job_id:int}/runs",
    opt={**access(COORDINATOR), **RUN_SUBMISSION},
    status_code=HTTP_201_CREATED,
    tags=TAGS,
    summary="Run a job",
    description="The body may override the script's run metadata: workerCount, groupCount, privateMode, gpu, "
    "gpuRequirements, saveIntermediateOutput, seed, staleness. The run is queued; poll GET /api/v1/runs/{id}.",
)
async def start_run(
    request: Request,
    job_id: FromPath[int],
    settings: NamedDependency[Settings],
    data: JSONBody[dict[str, Any] | None] = None,
) -> RunInfo:
    return await service.start_run(
        Actor.of(request.user), job_id, data or {}, coordinator_of(request), settings, appliance_origin(request)
    )


@get("/api/v1/runs", opt=access(COORDINATOR), tags=TAGS, summary="Recent runs (an admin sees all)")
async def list_runs(request: Request, job: FromQuery[int | None] = None) -> list[RunInfo]:
    return await service.list_runs(Actor.of(request.user), coordinator_of(request), job_id=job)


@get(
    "/api/v1/runs/{run_id:int}",
    opt=access(COORDINATOR),
    tags=TAGS,
    summary="A run: state, reason, queue position and progress per group and stage",
    description=(
        "wait=<seconds> (at most 60): a queued or running run is answered once it ended or when the wait is "
        "over, whichever comes first, so a client sees the end at once without polling."
    ),
)
async def get_run(request: Request, run_id: FromPath[int], wait: FromQuery[float] = 0) -> RunInfo:
    return await service.get_run(Actor.of(request.user), run_id, coordinator_of(request), wait)


@post("/api/v1/runs/{run_id:int}/cancel", opt=access(COORDINATOR), tags=TAGS, summary="Cancel a queued or running run")
async def cancel_run(request: Request, run_id: FromPath[int]) -> RunInfo:
    return await service.cancel_run(Actor.of(request.user), run_id, coordinator_of(request))


@get(
    "/api/v1/runs/{run_id:int}/output",
    opt=access(COORDINATOR),
    tags=TAGS,
    summary="A succeeded run's output",
    description="JSON lines of [key, value], one group at a time (group=A by default).",
)
async def run_output(request: Request, run_id: FromPath[int], group: FromQuery[str] = "A") -> Stream:
    actor = Actor.of(request.user)
    state = request.app.state
    read_cloud = await cloud_reader(actor, run_id, state.cloud_keys)
    blobs = service.run_output_blobs(actor, run_id, group, state.store, read_cloud)
    first = await anext(blobs, None)  # errors (not succeeded, no such group) before the 200
    return Stream(json_lines(first, blobs), media_type="application/x-ndjson")


@get(
    "/api/v1/runs/{run_id:int}/logs",
    opt=access(COORDINATOR),
    tags=TAGS,
    summary="A run's log lines as JSON lines",
    description=(
        "Optionally one source: worker=<worker id> or worker=coordinator. Each line carries its id; "
        "after=<id> returns only the lines after it (how `peermr job logs --follow` polls)."
    ),
)
async def run_logs(
    request: Request, run_id: FromPath[int], worker: FromQuery[str | None] = None, after: FromQuery[int] = 0
) -> Response:
    lines = await service.run_logs(Actor.of(request.user), run_id, source=worker, after=after, limit=1_000_000)
    body = b"".join(msgspec.json.encode({"id": log_id, **msgspec.to_builtins(line)}) + b"\n" for log_id, line in lines)
    return Response(body, media_type="application/x-ndjson")


@get(
    "/api/v1/runs/{run_id:int}/parameters",
    opt=access(COORDINATOR),
    tags=TAGS,
    summary="A run's parameter-server values",
    description="Group, key, dtype, length and version of each value the run left (kept when it ends).",
)
async def run_parameters(request: Request, run_id: FromPath[int]) -> list[parameters.ParameterInfo]:
    return await parameters.list_parameters(Actor.of(request.user), run_id)


@get(
    "/api/v1/runs/{run_id:int}/parameters/{group:str}/{key:path}",
    opt=access(COORDINATOR),
    tags=TAGS,
    summary="One parameter-server value",
    description="The little-endian values (dtype in X-PeerMR-Dtype), or format=json for a JSON array.",
)
async def run_parameter(
    request: Request, run_id: FromPath[int], group: FromPath[str], key: FromPath[str], format: FromQuery[str] = "raw"
) -> Response:
    dtype, data = await parameters.parameter_value(Actor.of(request.user), run_id, group, key.lstrip("/"))
    return parameter_download(dtype, parameters.value_file(run_id, group, key, dtype, data, format))


def parameter_download(dtype: str, file: parameters.ValueFile) -> Response:
    """A parameter-server value as an attachment, its dtype in X-PeerMR-Dtype (docs/protocol.md)."""
    headers = {"X-PeerMR-Dtype": dtype, "Content-Disposition": f'attachment; filename="{file.filename}"'}
    return Response(file.body, media_type=file.media_type, headers=headers)


ROUTES = [
    create_job,
    list_jobs,
    get_job,
    update_job,
    delete_job,
    start_run,
    list_runs,
    get_run,
    cancel_run,
    run_output,
    run_logs,
    run_parameters,
    run_parameter,
]
