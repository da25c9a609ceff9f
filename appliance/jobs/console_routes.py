"""The jobs side of the operations pages: capacity feedback before a run starts (run dialog and API),
the runs a worker served, and a run's stage page."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

from litestar import Request, get, post
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter
from litestar.response import Template

from appliance.accounts.actor import Actor
from appliance.accounts.auth import COORDINATOR, access
from appliance.errors import InvalidRequest, NotFound
from appliance.jobs import capacity, overview, priors, service, stages
from appliance.jobs.access import coordinator_of
from appliance.jobs.execution import INPUT_STAGE
from appliance.jobs.ui_routes import RunForm, run_overrides
from appliance.web.rendering import is_htmx, page


@get("/ui/jobs/{job_id:int}/capacity", opt=access(COORDINATOR), include_in_schema=False)
async def run_capacity(
    request: Request,
    job_id: FromPath[int],
    worker_count: FromQuery[str] = "",
    group_count: FromQuery[str] = "",
    private_mode: FromQuery[str] = "",
    gpu: FromQuery[str] = "",
) -> Template:
    """The run dialog's capacity line for the settings it shows now (it asks again as they change);
    without settings, those of the job's script."""
    actor = Actor.of(request.user)
    await service.get_job(actor, job_id)  # NotFound for others' jobs, whatever the settings say
    form = RunForm(worker_count=worker_count, group_count=group_count, private_mode=private_mode, gpu=gpu)
    try:
        overrides = run_overrides(form) if worker_count or group_count else {}
        found = await capacity.for_job(actor, job_id, overrides, coordinator_of(request))
    except InvalidRequest as exc:
        return page(request, "jobs/_capacity.html", job_id=job_id, summary=str(exc), ok=False)
    ok = found.eligible >= found.asks
    use = found.eligible_per_group  # the dialog's "use the N connected" (per group)
    return page(request, "jobs/_capacity.html", job_id=job_id, summary=found.summary, ok=ok, use=use)


@post(
    "/api/v1/jobs/{job_id:int}/capacity",
    opt=access(COORDINATOR),
    status_code=200,
    tags=["Jobs"],
    summary="What a run of the job would find: workers connected and eligible",
    description="The body takes the same run settings as POST /api/v1/jobs/{id}/runs; nothing is started. "
    "Eligible workers are those the scheduler would let run it (private mode, GPU requirements).",
)
async def api_capacity(
    request: Request, job_id: FromPath[int], data: JSONBody[dict[str, Any] | None] = None
) -> capacity.Capacity:
    return await capacity.for_job(Actor.of(request.user), job_id, data or {}, coordinator_of(request))


@get("/ui/workers/{worker_id:str}/runs", opt=access(COORDINATOR), include_in_schema=False)
async def worker_runs(request: Request, worker_id: FromPath[str]) -> Template:
    """The runs a browser served, of those the viewer may see (an admin: all); past browsers too."""
    runs = await overview.runs_served_by(Actor.of(request.user), coordinator_of(request), worker_id)
    return page(request, "jobs/worker_runs.html", worker_id=worker_id, runs=runs)


# The stage page's latest task transitions, while the run runs (the engine keeps more).
TRANSITIONS_SHOWN = 50


@get("/ui/runs/{run_id:int}/stages/{group:str}/{stage:int}", opt=access(COORDINATOR), include_in_schema=False)
async def stage_page(
    request: Request,
    run_id: FromPath[int],
    group: FromPath[str],
    stage: FromPath[int],
    sort: FromQuery[str] = "rank",
    order: FromQuery[str] = "asc",
    page_number: Annotated[int, QueryParameter(name="page")] = 1,
) -> Template:
    """Every task of one stage of one group; while the run runs, htmx polls this page for its live part."""
    actor = Actor.of(request.user)
    coordinator = coordinator_of(request)
    run = await service.get_run(actor, run_id, coordinator)  # NotFound for others' runs
    groups = [chr(ord("A") + i) for i in range(run.spec.group_count)]
    if group not in groups or not INPUT_STAGE <= stage < len(run.spec.stages):
        raise NotFound(f"Run {run_id} has no stage {stage + 1} in group {group}.")
    kind = stages.kind_of(run.spec, stage)
    live = coordinator.read.view(run_id)
    expected, moves = None, []
    if live is not None:
        moves = live.transitions(group, stage)[-TRANSITIONS_SHOWN:][::-1]
        attempts, now = live.stage_attempts(group, stage), stages.monotonic_now()
        places = live.stage_places(group, stage)
        prior = (await priors.of_job(run.job_id, run_id)).get(stage)
        expected = prior.typical(live.input_records(group, stage)) if prior else None
    else:
        attempts, now = stages.finished_attempts(await service.run_tasks(actor, run_id), group, stage)
        places = stages.finished_places(attempts, 1 if stage == INPUT_STAGE else run.spec.worker_count)
    detail = stages.build(group, stage, kind, places, attempts, now, expected)
    if live is not None:
        detail.browsers = [replace(b, speed=live.speed_of(b.worker_id)) for b in detail.browsers]
    descending = order == "desc"
    sort = sort if sort in stages.SORTS else "rank"
    lines, page_number, pages = stages.page_of(detail.lines, sort, descending, page_number)
    context = {
        "run": run,
        "detail": detail,
        "lines": lines,
        "sort": sort,
        "descending": descending,
        "page_number": page_number,
        "pages": pages,
        "active": live is not None,
        "moves": moves,
        "now": now,
        "stage_list": [(g, s) for g in groups for s in range(INPUT_STAGE, len(run.spec.stages))],
        "kind_of": lambda s: stages.kind_of(run.spec, s),
    }
    template = "jobs/_stage_live.html" if is_htmx(request) else "jobs/stage.html"
    return page(request, template, **context)


ROUTES = [run_capacity, api_capacity, worker_runs, stage_page]
