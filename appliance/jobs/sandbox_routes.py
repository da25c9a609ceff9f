"""The job sandbox of worker browsers (docs/sdk.md and docs/architecture.md, "The sandbox"): the
script each sandbox Web Worker starts from, and the frame it runs in.

Job code must never act as the employee whose browser runs it, so it runs where no credential is: the
worker page puts a hidden frame on itself that is loaded without credentials (a ``credentialless``
iframe, or where a browser has none, one with an opaque origin), and that frame starts the Web Workers
from the text of the sandbox script (``sandbox.js``), which the page fetched with its cookie. A Web
Worker started so has the frame's credential-free context and its Content-Security-Policy, which the
frame's URL names (the script's ``x-peermr-frame`` header gives it).

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
from appliance.accounts.auth import PUBLIC, WORKER_BROWSER, access
from appliance.errors import InvalidRequest
from appliance.jobs.access import coordinator_of
from appliance.jobs.api_routes import appliance_origin
from appliance.jobs.sandbox_policy import (
    allowed_origins,
    frame_policy,
    frame_url,
    is_appliance_path,
    is_origin,
    origin_of,
    origins_digest,
)
from appliance.jobs.sandbox_script import RUNTIME, build, import_runtime

# The frame's whole document: its script (static/worker/sandbox-frame.js) starts the Web Workers.
FRAME = (
    '<!doctype html>\n<meta charset="utf-8">\n'
    f'<script src="/static/worker/sandbox-frame.js?v={__version__}"></script>\n'
)
FRAME_HEADER = "x-peermr-frame"  # which frame a sandbox script runs in
# The appliance's scripts the sandbox imports (the runtime, the job's scripts of the appliance): the
# page hands their text to the frame from its own HTTP cache, as a credentialless frame has none.
PRELOAD_HEADER = "x-peermr-preload"
# A run's script never changes, so the browser keeps it for the run's next tasks (private: not in
# shared caches). The warm sandbox's follows the allow-list, so it is never kept.
RUN_CACHE = "private, max-age=86400"


@get("/worker/runs/{run_id:int}/sandbox.js", opt=access(WORKER_BROWSER), include_in_schema=False)
async def run_sandbox(request: Request, run_id: FromPath[int]) -> Response:
    coordinator = coordinator_of(request)
    # Only while the run runs, and only to browsers of an account holding one of its ranks.
    if not coordinator.read.allows_sandbox(run_id, request.user.user_id):
        raise NotFoundException("No such run for this worker.")
    run = coordinator.read.view(run_id)
    origin = appliance_origin(request)
    connect = list(run.origins)
    if run.storage_origin is not None:
        connect.append(run.storage_origin)
    scripts = [origin_of(url, origin) for url in run.spec.scripts]
    text, _ = build(run.spec, origin)
    preload = [*RUNTIME, *(url for url in run.spec.scripts if is_appliance_path(url))]
    headers = {FRAME_HEADER: frame_url(scripts, connect), PRELOAD_HEADER: " ".join(preload), "cache-control": RUN_CACHE}
    return Response(text, media_type="text/javascript", headers=headers)


@get("/worker/sandbox.js", opt=access(WORKER_BROWSER), include_in_schema=False)
async def warm_sandbox(request: Request, origins: FromQuery[str]) -> Response:
    """A sandbox with the runtime loaded and no run yet, which a tab starts while it is idle. A run
    whose policy is this one (coordinator's ``warm_url``: scripts from the appliance only, pmrfs, the
    same fetch origins) has it load its script instead of starting a Web Worker, which takes longer
    than a short task. Served under the current allow-list only: a sandbox's policy is the one it
    started with."""
    current = await allowed_origins(coordinator_of(request).settings)
    if origins != origins_digest(current):
        raise NotFoundException("The fetch origins changed: start the run's own sandbox.")
    return Response(
        import_runtime(appliance_origin(request)) + "\n",
        media_type="text/javascript",
        headers={FRAME_HEADER: frame_url([], current), PRELOAD_HEADER: " ".join(RUNTIME), "cache-control": "no-store"},
    )


@get("/worker/sandbox.html", opt=access(PUBLIC), include_in_schema=False)
async def frame(
    request: Request, script: FromQuery[list[str] | None] = None, connect: FromQuery[list[str] | None] = None
) -> Response:
    """A sandbox frame under the policy its URL names (sandbox_policy.frame_url). It is loaded without
    credentials, and holds nothing but our frame script: anyone may have one, under any policy of
    well-formed origins, and only the appliance's own pages may frame it."""
    origins = [*(script or []), *(connect or [])]
    if bad := next((o for o in origins if not is_origin(o)), None):
        raise InvalidRequest(f"{bad!r} is not an origin like https://data.example.com")
    policy = frame_policy(appliance_origin(request), script or [], connect or [])
    return Response(
        FRAME,
        media_type="text/html",
        headers={"content-security-policy": policy, "x-frame-options": "SAMEORIGIN", "cache-control": "no-cache"},
    )


ROUTES = [run_sandbox, warm_sandbox, frame]
