"""The dashboard's Jobs and Runs pages: the job editor, the run dialog, and the live run page.

Every form works without JavaScript (post, then redirect with a flash message); with htmx the run
dialog, the run page's live parts, the log tail and the output pages update in place. The run page
polls a fragment about once a second while the run is queued or running and stops once it ended.
"""

from __future__ import annotations

import datetime as dt
import urllib.parse
from functools import cache
from typing import Annotated

import msgspec
from litestar import Request, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, QueryParameter
from litestar.response import Response, Stream, Template

from appliance.accounts.actor import Actor
from appliance.accounts.auth import COORDINATOR, access
from appliance.accounts.forms import Form
from appliance.accounts.rate_limits import RUN_SUBMISSION
from appliance.config import Settings
from appliance.errors import InvalidRequest, NotFound, ServiceError
from appliance.jobs import listing, parameters, priors, service, stages, views
from appliance.jobs.access import coordinator_of
from appliance.jobs.api_routes import appliance_origin, parameter_download
from appliance.jobs.logs import FLEET
from appliance.jobs.outputs import cloud_reader, csv_rows, json_lines
from appliance.jobs.service import JobInfo, RunInfo
from appliance.jobs.spec import ScriptError
from appliance.jobs.tables import Job, Run
from appliance.resources import templates_dir
from appliance.web.rendering import is_htmx, page, redirect

JOBS = "/ui/jobs"
RUNS = "/ui/runs"
FLEET_LINES = 200  # the run page's Browsers panel: the first changes (a run that churns more has its log)
# Log lines per fragment: the first render and each poll of the tail read at most this many.
LOG_BATCH = 2000
# After a run ended, the tail keeps polling this long for the last lines the log writer flushes.
LOG_GRACE_SECONDS = 3


@cache
def new_job_script() -> str:
    """The script a new job starts from: a word count in the PeerMR SDK."""
    return (templates_dir() / "jobs" / "wordcount.js").read_text(encoding="utf-8")


def _actor(request: Request) -> Actor:
    return Actor.of(request.user)


def _hx_redirect(request: Request, path: str, message: str | None = None, level: str = "success") -> Response:
    """Post/redirect/get; an htmx request is told to load the page (with the message) itself."""
    response = redirect(path, message, level)
    if is_htmx(request):
        return Response(content="", status_code=200, headers={"HX-Redirect": path}, cookies=response.cookies)
    return response


# -- jobs -------------------------------------------------------------------------------------


class JobForm(msgspec.Struct):
    name: str = ""
    script: str = ""


class RunForm(msgspec.Struct):
    worker_count: str = ""
    group_count: str = ""
    private_mode: str = ""
    gpu: str = ""
    save_intermediate_output: str = ""
    seed: str = ""


def _run_form_of(spec) -> RunForm:
    """The run dialog prefilled from the saved script's spec."""
    return RunForm(
        worker_count=str(spec.worker_count),
        group_count=str(spec.group_count),
        private_mode="true" if spec.private_mode else "",
        gpu="true" if spec.gpu else "",
        save_intermediate_output="true" if spec.save_intermediate_output else "",
        seed="" if spec.seed is None else str(spec.seed),
    )


def run_overrides(form: RunForm) -> dict:
    """The run metadata the dialog sets, as the API's names; a field that is not a number is refused."""

    def whole(value: str, label: str) -> int:
        try:
            return int(value.strip())
        except ValueError:
            raise InvalidRequest(f"{label} must be a whole number.") from None

    overrides = {
        "workerCount": whole(form.worker_count, "Workers per group"),
        "groupCount": whole(form.group_count, "Groups"),
        "privateMode": form.private_mode == "true",
        "gpu": form.gpu == "true",
        "saveIntermediateOutput": form.save_intermediate_output == "true",
    }
    if form.seed.strip():
        overrides["seed"] = whole(form.seed, "Seed")
    return overrides


@get(JOBS, opt=access(COORDINATOR), include_in_schema=False)
async def jobs_page(request: Request) -> Template:
    """The jobs the account may see, a page at a time, with the last run of each (reason, cancel)."""
    actor = _actor(request)
    filters = listing.Filters.read(actor, request.query_params, listing.JOB_STATES)
    jobs, found = await service.find_jobs(actor, filters)
    last_runs: dict[int, RunInfo] = {}
    for job in jobs:
        runs = await service.list_runs(actor, coordinator_of(request), job_id=job.id, limit=1)
        if runs:
            last_runs[job.id] = runs[0]
    return page(
        request,
        "jobs/jobs.html",
        jobs=jobs,
        found=found,
        filters=filters,
        states=listing.JOB_STATES,
        owners=await listing.owners(actor, Job),
        back=_list_url(JOBS, filters),
        page_url=lambda number: _list_url(JOBS, filters, page=number),
        last_runs=last_runs,
        show_owner=actor.is_admin,
        summary=views.stages_summary,
    )


def _error_location(script: str, exc: ScriptError) -> dict:
    lines = script.splitlines()
    line = exc.line if exc.line and 1 <= exc.line <= max(len(lines), 1) else None
    return {
        "error_line": line,
        "error_column": exc.column if line else None,
        "error_source": lines[line - 1] if line and line <= len(lines) else "",
    }


async def _editor(
    request: Request,
    job: JobInfo | None,
    *,
    name: str,
    script: str,
    refused: ServiceError | None = None,
) -> Template:
    """The editor; ``refused`` is why the script was not saved (a ScriptError marks its line)."""
    context: dict = {"error_line": None, "error_column": None, "error_source": ""}
    if isinstance(refused, ScriptError):
        context = _error_location(script, refused)
    runs: list[RunInfo] = []
    if job is not None:
        runs = await service.list_runs(_actor(request), coordinator_of(request), job_id=job.id, limit=10)
    return page(
        request,
        "jobs/editor.html",
        status_code=refused.status if refused else 200,
        job=job,
        name=name,
        script=script,
        error=str(refused) if refused else None,
        runs=runs,
        run_form=_run_form_of(job.spec) if job else None,
        run_error=None,
        fleet=coordinator_of(request).read.fleet_counts(request.user.user_id),
        summary=views.stages_summary,
        **context,
    )


@get(f"{JOBS}/new", opt=access(COORDINATOR), include_in_schema=False)
async def new_job(request: Request) -> Template:
    return await _editor(request, None, name="Word count", script=new_job_script())


@post(JOBS, opt=access(COORDINATOR), include_in_schema=False)
async def create_job(request: Request, data: Form[JobForm]) -> Response:
    try:
        job = await service.create_job(_actor(request), data.name, data.script)
    except ServiceError as exc:
        return await _editor(request, None, name=data.name, script=data.script, refused=exc)
    return redirect(f"{JOBS}/{job.id}", f"Job {job.name} saved.")


async def _job(request: Request, job_id: int) -> JobInfo:
    return await service.get_job(_actor(request), job_id)


@get(f"{JOBS}/{{job_id:int}}", opt=access(COORDINATOR), include_in_schema=False)
async def job_page(request: Request, job_id: FromPath[int]) -> Template:
    job = await _job(request, job_id)
    return await _editor(request, job, name=job.name, script=job.script or "")


@post(f"{JOBS}/{{job_id:int}}", opt=access(COORDINATOR), include_in_schema=False)
async def save_job(request: Request, job_id: FromPath[int], data: Form[JobForm]) -> Response:
    job = await _job(request, job_id)
    try:
        saved = await service.update_job(_actor(request), job_id, data.name, data.script)
    except ServiceError as exc:
        return await _editor(request, job, name=data.name, script=data.script, refused=exc)
    return redirect(f"{JOBS}/{job_id}", f"Job {saved.name} saved.")


@post(f"{JOBS}/{{job_id:int}}/delete", opt=access(COORDINATOR), include_in_schema=False)
async def delete_job(request: Request, job_id: FromPath[int]) -> Response:
    job = await _job(request, job_id)
    await service.delete_job(_actor(request), job_id)
    return _hx_redirect(request, JOBS, f"Job {job.name} deleted; its runs stay under Runs.")


# -- the run dialog ---------------------------------------------------------------------------


@get(f"{JOBS}/{{job_id:int}}/run", opt=access(COORDINATOR), include_in_schema=False)
async def run_form_page(request: Request, job_id: FromPath[int]) -> Template:
    """The run dialog as a page of its own (the editor opens it as a <dialog> when scripts run); with
    settings in the query (its "use the N connected" button), those instead of the script's."""
    job = await _job(request, job_id)
    fleet = coordinator_of(request).read.fleet_counts(request.user.user_id)
    query = request.query_params
    typed = RunForm(**{name: query.get(name, "") for name in RunForm.__struct_fields__})
    run_form = typed if typed.worker_count else _run_form_of(job.spec)
    return page(request, "jobs/run.html", job=job, run_form=run_form, run_error=None, fleet=fleet)


@post(f"{JOBS}/{{job_id:int}}/runs", opt={**access(COORDINATOR), **RUN_SUBMISSION}, include_in_schema=False)
async def start_run(
    request: Request, job_id: FromPath[int], data: Form[RunForm], settings: NamedDependency[Settings]
) -> Response:
    job = await _job(request, job_id)
    try:
        run = await service.start_run(
            _actor(request), job_id, run_overrides(data), coordinator_of(request), settings, appliance_origin(request)
        )
    except ServiceError as exc:
        fleet = coordinator_of(request).read.fleet_counts(request.user.user_id)
        context = {"job": job, "run_form": data, "run_error": str(exc), "fleet": fleet}
        if is_htmx(request):
            # Answered with 200 so htmx swaps the form (with its message) into the dialog.
            return page(request, "jobs/_run_form.html", **context)
        return page(request, "jobs/run.html", status_code=exc.status, **context)
    if run.warning:
        message = f"Run {run.id} of {job.name} queued, but it {run.warning}: it waits until enough are connected."
        return _hx_redirect(request, f"{RUNS}/{run.id}", message, "warning")
    return _hx_redirect(request, f"{RUNS}/{run.id}", f"Run {run.id} of {job.name} queued.")


# -- runs -------------------------------------------------------------------------------------


def _list_url(path: str, filters: listing.Filters, **changes) -> str:
    query = filters.query(**changes)
    return f"{path}?{query}" if query else path


async def _runs_context(request: Request) -> dict:
    actor = _actor(request)
    filters = listing.Filters.read(actor, request.query_params)
    runs, found = await service.find_runs(actor, coordinator_of(request), filters)
    return {
        "runs": runs,
        "found": found,
        "filters": filters,
        "states": listing.RUN_STATES,
        "owners": await listing.owners(actor, Run),
        "jobs": await listing.job_choices(actor),
        "back": _list_url(RUNS, filters),
        "page_url": lambda number: _list_url(RUNS, filters, page=number),
        "show_owner": actor.is_admin,
        "any_active": any(views.is_active(r) for r in runs),
        "seconds": views.run_seconds,
    }


@get(RUNS, opt=access(COORDINATOR), include_in_schema=False)
async def runs_page(request: Request) -> Template:
    return page(request, "jobs/runs.html", **await _runs_context(request))


@get(f"{RUNS}/table", opt=access(COORDINATOR), include_in_schema=False)
async def runs_table(request: Request) -> Template:
    return page(request, "jobs/_runs_table.html", **await _runs_context(request))


async def _run(request: Request, run_id: int) -> RunInfo:
    return await service.get_run(_actor(request), run_id, coordinator_of(request))


def _group(run: RunInfo, group: str) -> str:
    groups = [chr(ord("A") + i) for i in range(run.spec.group_count)]
    return group if group in groups else groups[0]


async def _output_context(
    request: Request, run: RunInfo, group: str, page_number: int, sort: str = "", search: str = ""
) -> dict:
    group = _group(run, group)
    groups = [chr(ord("A") + i) for i in range(run.spec.group_count)]
    context = {"groups": groups, "output": None, "output_error": None, "group": group}
    context |= {"sorts": views.OUTPUT_SORTS, "scan_limit": views.OUTPUT_SCAN_LIMIT}
    if run.state != "succeeded":
        return context
    actor = _actor(request)
    state = request.app.state
    try:
        records = service.run_output(
            actor, run.id, group, state.store, await cloud_reader(actor, run.id, state.cloud_keys)
        )
        total = await service.output_records(actor, run.id, group)
        context["output"] = await views.output_page(
            records, group, max(1, page_number), sort=sort, search=search.strip()[:200], total=total
        )
    except ServiceError as exc:
        context["output_error"] = str(exc)
    return context


async def _live_context(request: Request, run: RunInfo, output: dict | None = None):
    """The run page's live part; ``output`` is the output view's URL query (group, page, sort, search)."""
    actor = _actor(request)
    active = coordinator_of(request).read.view(run.id)
    figures = {}
    if active is not None:
        timeline = active.timeline()
        figures = active.estimates(await priors.of_job(run.job_id, run.id))
    elif run.state in ("queued",):
        timeline = views.Timeline(rows=[], seconds=0.0)
    else:
        tasks = await service.run_tasks(actor, run.id)
        timeline = views.finished_timeline(tasks, run.spec)
        figures = stages.of_finished_run(tasks, run.spec)
    return {
        "run": run,
        "active": views.is_active(run),
        "groups_progress": views.progress_by_group(run.progress),
        "fraction": views.progress_fraction(run.progress),
        "timeline": timeline,
        # (group, stage) -> share done, throughput and time left (while it runs) of each stage that started
        "figures": figures,
        "seconds": views.run_seconds(run),
        # When the run lost a browser, doubled one up or gained one, and why (the coordinator's lines).
        "fleet_changes": [line for _, line in await service.run_logs(actor, run.id, source=FLEET, limit=FLEET_LINES)],
        # Kept when the run ends.
        "parameters": [] if views.is_active(run) else await parameters.list_parameters(actor, run.id),
        **await _output_context(request, run, **(output or {"group": "A", "page_number": 1})),
    }


class LogView(msgspec.Struct, frozen=True):
    """The log viewer's filters, as the run page's URL carries them."""

    source: str = ""
    level: str = ""
    search: str = ""

    @classmethod
    def of(cls, source: str, level: str, search: str) -> LogView:
        return cls(source, level if level in service.LOG_LEVELS else "", search.strip()[:200])

    def query(self, **extra) -> str:
        values = {"source": self.source, "level": self.level, "log_search": self.search, **extra}
        return urllib.parse.urlencode({k: v for k, v in values.items() if v not in ("", None)})

    @property
    def narrowed(self) -> bool:
        return bool(self.source or self.level or self.search)


def _log_tail_url(run_id: int, view: LogView, after: int, sources: int) -> str:
    return f"{RUNS}/{run_id}/logs?{view.query(after=after, sources=sources)}"


def _finished_a_while_ago(run: RunInfo) -> bool:
    if views.is_active(run) or run.finished_at is None:
        return False
    return dt.datetime.now(dt.UTC) - run.finished_at > dt.timedelta(seconds=LOG_GRACE_SECONDS)


async def _logs_context(
    request: Request,
    settings: Settings,
    run: RunInfo,
    view: LogView,
    after: int,
    known_sources: int | None,
    line: int | None = None,
) -> dict:
    actor = _actor(request)
    sources = await service.log_sources(actor, run.id)
    chosen = service.log_lines_of(run.id, source=view.source or None, level=view.level, search=view.search)
    # The first view of a long log opens on its last lines (or around the line a link names); the
    # tail then follows new ones.
    start = 0
    if known_sources is None:
        if line:
            start = await views.log_start_before(chosen, line, LOG_BATCH // 2)
        else:
            start = await views.log_tail_start(chosen, LOG_BATCH)
    after = max(after, start)
    lines = await service.run_logs(
        actor, run.id, source=view.source or None, level=view.level, search=view.search, after=after, limit=LOG_BATCH
    )
    last = lines[-1][0] if lines else after
    more = len(lines) == LOG_BATCH
    # Keep following while the run is live, for a moment after it ended, or while a backlog remains.
    follow = more or not _finished_a_while_ago(run) or bool(lines)
    return {
        "run": run,
        "lines": lines,
        "view": view,
        "levels": {"": "all levels", "warn": "warnings and errors", "error": "errors"},
        "source": view.source,
        "sources": sources,
        "skipped": start > 0,
        "sources_changed": known_sources is not None and known_sources != len(sources),
        "tail_url": _log_tail_url(run.id, view, last, len(sources)) if follow else None,
        "tail_delay": "100ms" if more else "1s",
        "clock": views.clock(settings.timezone),
    }


@get(f"{RUNS}/{{run_id:int}}", opt=access(COORDINATOR), include_in_schema=False)
async def run_page(
    request: Request,
    run_id: FromPath[int],
    settings: NamedDependency[Settings],
    source: FromQuery[str] = "",
    group: FromQuery[str] = "A",
    page_number: Annotated[int, QueryParameter(name="page")] = 1,
    sort: FromQuery[str] = "",
    search: FromQuery[str] = "",
    level: FromQuery[str] = "",
    log_search: FromQuery[str] = "",
    line: FromQuery[int | None] = None,
) -> Template:
    """The run page; its URL carries the output view (group, page, sort, search) and the log view
    (source, level, log_search, and line: open the log around that line)."""
    run = await _run(request, run_id)
    output = {"group": group, "page_number": page_number, "sort": sort, "search": search}
    return page(
        request,
        "jobs/run_page.html",
        **await _live_context(request, run, output),
        logs=await _logs_context(request, settings, run, LogView.of(source, level, log_search), 0, None, line),
    )


@get(f"{RUNS}/{{run_id:int}}/live", opt=access(COORDINATOR), include_in_schema=False)
async def run_live(request: Request, run_id: FromPath[int]) -> Template:
    """The run page's live part, polled while the run is queued or running. The answer that first
    sees it ended also clears the page's messages ("Run 5 queued." is over by then)."""
    run = await _run(request, run_id)
    context = await _live_context(request, run)
    return page(request, "jobs/_run_live.html", **context, clear_flashes=not context["active"])


@get(f"{RUNS}/{{run_id:int}}/logs", opt=access(COORDINATOR), include_in_schema=False)
async def run_logs(
    request: Request,
    run_id: FromPath[int],
    settings: NamedDependency[Settings],
    source: FromQuery[str] = "",
    level: FromQuery[str] = "",
    log_search: FromQuery[str] = "",
    after: FromQuery[int] = 0,
    sources: FromQuery[int | None] = None,
) -> Template:
    """New log lines after ``after`` and the next tail; ``after=0`` without a tail is the whole panel."""
    run = await _run(request, run_id)
    view = LogView.of(source, level, log_search)
    logs = await _logs_context(request, settings, run, view, max(0, after), sources)
    template = "jobs/_log_lines.html" if sources is not None else "jobs/_logs.html"
    return page(request, template, run=run, logs=logs)


def _attachment(name: str) -> str:
    return f'attachment; filename="{name}"'


@get(f"{RUNS}/{{run_id:int}}/logs/download", opt=access(COORDINATOR), include_in_schema=False)
async def download_logs(request: Request, run_id: FromPath[int], source: FromQuery[str] = "") -> Response:
    """Every log line of the run (or of one source) as text: time, source, group/rank, level, text."""
    run = await _run(request, run_id)
    lines = await service.run_logs(_actor(request), run.id, source=source or None, limit=1_000_000)
    out = []
    for _, line in lines:
        place = f" {line.group}/{line.rank}" if line.group and line.rank is not None else ""
        text = line.text.replace("\n", "\n    ")
        out.append(f"{line.at.isoformat(timespec='milliseconds')} {line.source}{place} {line.level}: {text}\n")
    suffix = f"-{source}" if source else ""
    return Response(
        "".join(out).encode(),
        media_type="text/plain; charset=utf-8",
        headers={"content-disposition": _attachment(f"run-{run.id}{suffix}.log")},
    )


@get(f"{RUNS}/{{run_id:int}}/output", opt=access(COORDINATOR), include_in_schema=False)
async def run_output(
    request: Request,
    run_id: FromPath[int],
    group: FromQuery[str] = "A",
    page_number: Annotated[int, QueryParameter(name="page")] = 1,
    sort: FromQuery[str] = "",
    search: FromQuery[str] = "",
) -> Template:
    run = await _run(request, run_id)
    context = await _output_context(request, run, group, page_number, sort, search)
    return page(request, "jobs/_output.html", run=run, **context)


async def _download_output(request: Request, run_id: int, group: str, settings: Settings, encode, suffix: str, media):
    actor = _actor(request)
    run = await _run(request, run_id)
    state = request.app.state
    try:
        blobs = service.run_output_blobs(
            actor, run_id, group, state.store, await cloud_reader(actor, run_id, state.cloud_keys)
        )
        first = await anext(blobs, None)  # errors (not succeeded, no such group) before the 200
    except NotFound:
        raise  # the 404 page
    except ServiceError as exc:
        return redirect(f"{RUNS}/{run.id}", str(exc), "error")
    return Stream(
        encode(first, blobs),
        media_type=media,
        headers={"content-disposition": _attachment(f"run-{run.id}-{group}.{suffix}")},
    )


@get(f"{RUNS}/{{run_id:int}}/output.jsonl", opt=access(COORDINATOR), include_in_schema=False)
async def download_jsonl(
    request: Request, run_id: FromPath[int], settings: NamedDependency[Settings], group: FromQuery[str] = "A"
) -> Response:
    return await _download_output(request, run_id, group, settings, json_lines, "jsonl", "application/x-ndjson")


@get(f"{RUNS}/{{run_id:int}}/output.csv", opt=access(COORDINATOR), include_in_schema=False)
async def download_csv(
    request: Request, run_id: FromPath[int], settings: NamedDependency[Settings], group: FromQuery[str] = "A"
) -> Response:
    return await _download_output(request, run_id, group, settings, csv_rows, "csv", "text/csv; charset=utf-8")


@get(f"{RUNS}/{{run_id:int}}/parameters/{{group:str}}/{{key:path}}", opt=access(COORDINATOR), include_in_schema=False)
async def download_parameter(
    request: Request, run_id: FromPath[int], group: FromPath[str], key: FromPath[str], format: FromQuery[str] = "raw"
) -> Response:
    dtype, data = await parameters.parameter_value(_actor(request), run_id, group, key.lstrip("/"))
    return parameter_download(dtype, parameters.value_file(run_id, group, key, dtype, data, format))


class CancelForm(msgspec.Struct):
    # The list the button was pressed in (its filters and page), to return to it.
    back: str = ""


def _back_to_list(back: str) -> str | None:
    """A Runs or Jobs list URL of this appliance, or None (never a redirect elsewhere)."""
    path = urllib.parse.urlsplit(back)
    if path.scheme or path.netloc or path.path not in (RUNS, JOBS):
        return None
    return back


@post(f"{RUNS}/{{run_id:int}}/cancel", opt=access(COORDINATOR), include_in_schema=False)
async def cancel_run(request: Request, run_id: FromPath[int], data: Form[CancelForm]) -> Response:
    """Cancel a queued or running run, from its page (which updates in place) or from a list row."""
    try:
        run = await service.cancel_run(_actor(request), run_id, coordinator_of(request))
        message, level = f"Run {run_id} cancelled.", "success"
    except NotFound:
        raise  # the 404 page
    except ServiceError as exc:
        run = await _run(request, run_id)
        message, level = str(exc), "error"
    if back := _back_to_list(data.back):
        return _hx_redirect(request, back, message, level)
    if is_htmx(request):
        context = await _live_context(request, run)
        return page(request, "jobs/_run_live.html", **context, oob_flashes=[(level, message)])
    return redirect(f"{RUNS}/{run_id}", message, level)


ROUTES = [
    jobs_page,
    new_job,
    create_job,
    job_page,
    save_job,
    delete_job,
    run_form_page,
    start_run,
    runs_page,
    runs_table,
    run_page,
    run_live,
    run_logs,
    download_logs,
    run_output,
    download_jsonl,
    download_csv,
    download_parameter,
    cancel_run,
]
