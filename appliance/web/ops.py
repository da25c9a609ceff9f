"""Operational endpoints: the health probes and the request metrics middleware (GET /metrics: metrics/routes.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from litestar import Request, Response, get
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from prometheus_client import Counter, Histogram

from appliance import __version__
from appliance.accounts import users
from appliance.accounts.auth import PUBLIC, access

REQUESTS = Counter("peermr_http_requests_total", "HTTP requests served", ["method", "status"])
LATENCY = Histogram("peermr_http_request_seconds", "HTTP request latency", ["method"])

PROBE = {**access(PUBLIC), "exclude_from_csrf": True}
# A probe that hangs is as bad as one that fails: the caller's own timeout would say less.
CHECK_SECONDS = 5


async def database_answers() -> str | None:
    """None when the metadata store answers a query, else why not."""
    try:
        await asyncio.wait_for(users.count_admins(), CHECK_SECONDS)
    except TimeoutError:
        return f"the database did not answer within {CHECK_SECONDS} s"
    except Exception as exc:  # whatever the driver raises, the store cannot serve requests
        return f"the database failed a query: {exc}"
    return None


# What /health/ready checks, in order; each returns None when ready, else why not.
READINESS_CHECKS: tuple[Callable[[], Awaitable[str | None]], ...] = (database_answers,)


async def _readiness(request: Request, **ready) -> Response:
    for check in (*READINESS_CHECKS, *request.app.state.get("readiness", ())):
        if (why := await check()) is not None:
            return Response({"status": "unavailable", "detail": why}, status_code=503)
    return Response({"status": "ok", **ready})


@get("/healthz", opt=PROBE, include_in_schema=False)
async def healthz(request: Request) -> Response:
    """/health/ready with the version, for the checks written before the probes below."""
    return await _readiness(request, version=__version__)


@get("/health/live", opt=PROBE, include_in_schema=False)
async def live() -> Response:
    """The process serves requests: a supervisor restarts it when this stops answering."""
    return Response({"status": "ok"})


@get("/health/ready", opt=PROBE, include_in_schema=False)
async def ready(request: Request) -> Response:
    """It can do its work: a load balancer sends requests only while this answers 200."""
    return await _readiness(request)


@get("/health/leader", opt=PROBE, include_in_schema=False)
async def leader(request: Request) -> Response:
    """200 on the scheduler that leads (the one-process appliance always does), 429 on a standby:
    a load balancer's check of this finds where the dashboard and API are served."""
    if request.app.state.leads():
        return Response({"status": "leader"})
    return Response({"status": "not the leader"}, status_code=429)


class RequestMetricsMiddleware(ASGIMiddleware):
    scopes = (ScopeType.HTTP,)

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        started = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await next_app(scope, receive, send_wrapper)
        finally:
            REQUESTS.labels(scope["method"], str(status)).inc()
            LATENCY.labels(scope["method"]).observe(time.perf_counter() - started)


ROUTES = [healthz, live, ready, leader]
