"""The job sandbox of worker browsers (docs/sdk.md and docs/architecture.md, "The sandbox"): the
frame each sandbox Web Worker runs in, and the script it starts from.

Job code must never act as the employee whose browser runs it, so it runs on no origin of ours: the
worker page puts a hidden frame with an opaque origin (``sandbox.html``) on itself, and that frame
starts the Web Workers from the text of the sandbox script (``sandbox.js``), which the page fetched.
A Web Worker started so has the frame's origin and Content-Security-Policy: the run's own, below.

The script loads our task runtime, then the job's declared scripts, seals the worker (no
importScripts, XMLHttpRequest, WebSocket or EventSource; fetch GET-only to allowed origins), and only
then defines the job's functions from their source text, so nothing of the job runs unsealed. The
policy allows scripts from the appliance and the allowed origins only, and connections to the
appliance (over HTTP, not its WebSocket), the allowed origins and, for s3 runs, the run's bucket.
"""

from __future__ import annotations

from litestar import Request, get
from litestar.exceptions import NotFoundException
from litestar.params import FromPath, FromQuery
from litestar.response import Response

from appliance import __version__
from appliance.accounts.auth import WORKER_BROWSER, access
from appliance.jobs.access import coordinator_of
from appliance.jobs.api_routes import appliance_origin
from appliance.jobs.coordinator import Active
from appliance.jobs.sandbox_policy import allowed_origins, frame_policy, origin_of, origins_digest
from appliance.jobs.sandbox_script import build, import_runtime

# The frame's whole document: its script (static/worker/sandbox-frame.js) starts the Web Workers.
FRAME = (
    '<!doctype html>\n<meta charset="utf-8">\n'
    f'<script src="/static/worker/sandbox-frame.js?v={__version__}"></script>\n'
)
# A run's script and frame never change, so the browser keeps them for the run's next tasks (private:
# not in shared caches). The warm sandbox's follow the allow-list, so they are never kept.
RUN_CACHE = "private, max-age=86400"
WARM_CACHE = "no-store"


def _run(request: Request, run_id: int) -> Active:
    """The run, while it runs, for browsers of an account holding one of its ranks only."""
    coordinator = coordinator_of(request)
    if not coordinator.allows_sandbox(run_id, request.user.user_id):
        raise NotFoundException("No such run for this worker.")
    return coordinator.live(run_id)


def _frame(policy: str, cache: str) -> Response:
    return Response(
        FRAME,
        media_type="text/html",
        headers={"content-security-policy": policy, "x-frame-options": "SAMEORIGIN", "cache-control": cache},
    )


async def _warm_origins(request: Request, origins: str) -> list[str]:
    """The allow-list a warm sandbox named, if it is still the current one."""
    current = await allowed_origins(coordinator_of(request).settings)
    if origins != origins_digest(current):
        raise NotFoundException("The fetch origins changed: start the run's own sandbox.")
    return current


@get("/worker/runs/{run_id:int}/sandbox.js", opt=access(WORKER_BROWSER), include_in_schema=False)
async def run_sandbox(request: Request, run_id: FromPath[int]) -> Response:
    run = _run(request, run_id)
    text, _ = build(run.spec, appliance_origin(request))
    return Response(text, media_type="text/javascript", headers={"cache-control": RUN_CACHE})


@get("/worker/runs/{run_id:int}/sandbox.html", opt=access(WORKER_BROWSER), include_in_schema=False)
async def run_frame(request: Request, run_id: FromPath[int]) -> Response:
    run = _run(request, run_id)
    origin = appliance_origin(request)
    connect = list(run.origins)
    if run.storage is not None:
        connect.append(run.storage.origin)
    scripts = [origin_of(url, origin) for url in run.spec.scripts]
    return _frame(frame_policy(origin, scripts, connect), RUN_CACHE)


@get("/worker/sandbox.js", opt=access(WORKER_BROWSER), include_in_schema=False)
async def warm_sandbox(request: Request, origins: FromQuery[str]) -> Response:
    """A sandbox with the runtime loaded and no run yet, which a tab starts while it is idle. A run
    whose policy is this one (coordinator's ``warm_url``: scripts from the appliance only, pmrfs, the
    same fetch origins) has it load its script instead of starting a Web Worker, which takes longer
    than a short task. Served under the current allow-list only: a sandbox's policy is the one it
    started with."""
    await _warm_origins(request, origins)
    return Response(
        import_runtime(appliance_origin(request)) + "\n",
        media_type="text/javascript",
        headers={"cache-control": WARM_CACHE},
    )


@get("/worker/sandbox.html", opt=access(WORKER_BROWSER), include_in_schema=False)
async def warm_frame(request: Request, origins: FromQuery[str]) -> Response:
    current = await _warm_origins(request, origins)
    return _frame(frame_policy(appliance_origin(request), [], current), WARM_CACHE)


ROUTES = [run_sandbox, run_frame, warm_sandbox, warm_frame]
