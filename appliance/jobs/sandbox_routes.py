"""The per-run sandbox script each task's Web Worker starts from (docs/sdk.md and
docs/architecture.md, "The sandbox").

It loads our task runtime, then the job's declared scripts, seals the worker (no importScripts,
XMLHttpRequest, WebSocket or EventSource; fetch GET-only to allowed origins), and only then defines
the job's functions from their source text, so nothing of the job runs unsealed. The response
carries the run's own Content-Security-Policy: scripts from the appliance and the allowed origins
only, connections to the appliance (over HTTP, not its WebSocket), the allowed origins and, for
s3 runs, the run's bucket.
"""

from __future__ import annotations

from litestar import Request, get
from litestar.exceptions import NotFoundException
from litestar.params import FromPath, FromQuery
from litestar.response import Response

from appliance.accounts.auth import WORKER_BROWSER, access
from appliance.jobs.access import coordinator_of
from appliance.jobs.api_routes import appliance_origin
from appliance.jobs.sandbox_policy import allowed_origins, content_security_policy, origin_of, origins_digest
from appliance.jobs.sandbox_script import IMPORT_RUNTIME, build


@get("/worker/runs/{run_id:int}/sandbox.js", opt=access(WORKER_BROWSER), include_in_schema=False)
async def run_sandbox(request: Request, run_id: FromPath[int]) -> Response:
    coordinator = coordinator_of(request)
    # Only while the run runs, and only to browsers of an account holding one of its ranks. A run's
    # script never changes, so that browser keeps it for the run's next tasks (private: not in shared caches).
    if not coordinator.allows_sandbox(run_id, request.user.user_id):
        raise NotFoundException("No such run for this worker.")
    run = coordinator.live(run_id)
    connect = list(run.origins)
    if run.storage is not None:
        connect.append(run.storage.origin)
    scripts = [origin_of(url, appliance_origin(request)) for url in run.spec.scripts]
    csp = content_security_policy(appliance_origin(request), scripts, connect)
    return Response(
        build(run.spec)[0],
        media_type="text/javascript",
        headers={"content-security-policy": csp, "cache-control": "private, max-age=86400"},
    )


@get("/worker/sandbox.js", opt=access(WORKER_BROWSER), include_in_schema=False)
async def warm_sandbox(request: Request, origins: FromQuery[str]) -> Response:
    """A sandbox with the runtime loaded and no run yet, which a tab starts while it is idle. A run
    whose policy is this one (coordinator's ``warm_url``: scripts from the appliance only, pmrfs, the
    same fetch origins) has it load its script instead of starting a Web Worker, which takes longer
    than a short task. Served under the current allow-list only, never kept by the browser: a
    sandbox's policy is the one it started with."""
    current = await allowed_origins(coordinator_of(request).settings)
    if origins != origins_digest(current):
        raise NotFoundException("The fetch origins changed: start the run's own sandbox.")
    return Response(
        IMPORT_RUNTIME + "\n",
        media_type="text/javascript",
        headers={
            "content-security-policy": content_security_policy(appliance_origin(request), [], current),
            "cache-control": "no-store",
        },
    )


ROUTES = [run_sandbox, warm_sandbox]
