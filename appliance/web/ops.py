"""Operational endpoints: health and the request metrics middleware (GET /metrics: metrics/routes.py)."""

from __future__ import annotations

import time

from litestar import Response, get
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from prometheus_client import Counter, Histogram

from appliance import __version__
from appliance.accounts import users
from appliance.accounts.auth import PUBLIC, access

REQUESTS = Counter("peermr_http_requests_total", "HTTP requests served", ["method", "status"])
LATENCY = Histogram("peermr_http_request_seconds", "HTTP request latency", ["method"])


@get("/healthz", opt={**access(PUBLIC), "exclude_from_csrf": True}, include_in_schema=False)
async def healthz() -> Response:
    try:
        await users.count_admins()
    except Exception as exc:  # the database is unreachable: not healthy
        return Response({"status": "unavailable", "detail": str(exc)}, status_code=503)
    return Response({"status": "ok", "version": __version__})


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


ROUTES = [healthz]
