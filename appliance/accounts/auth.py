"""Who is calling, and may they.

The middleware resolves the caller once per request: API paths accept only a
Bearer token (so a browser's cookies can never drive the API across sites),
every other path only the session cookie. Worker pages also accept the
separate cookie an enrolment link sets.

Every route declares its access level in ``opt["access"]``; the guard refuses
a route that declares none, so a forgotten declaration fails closed.
"""

from __future__ import annotations

import datetime as dt
import logging

from litestar.connection import ASGIConnection
from litestar.enums import ScopeType
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.handlers.base import BaseRouteHandler
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from appliance.accounts import api_tokens, sessions
from appliance.accounts.sessions import Principal

log = logging.getLogger(__name__)

SESSION_COOKIE = "peermr_session"
WORKER_COOKIE = "peermr_worker"
API_PREFIX = "/api/"
# The worker page, its ICE servers, its WebSocket and its warm task sandbox (jobs/sandbox_routes.py).
WORKER_PATHS = ("/worker", "/worker/ice-servers", "/ws/worker", "/worker/sandbox.js")
# Blob transfers of worker browsers (each also needs a grant, see pmrfs/grants.py), and the job
# sandbox scripts of the runs they work on (jobs/sandbox_routes.py checks the run).
WORKER_PREFIXES = ("/pmrfs/blobs/", "/worker/runs/")

PUBLIC = "public"
WORKER_BROWSER = "worker-browser"  # an enrolled worker browser or any signed-in user
USER = "user"
COORDINATOR = "coordinator"
ADMIN = "admin"
LEVELS = (PUBLIC, WORKER_BROWSER, USER, COORDINATOR, ADMIN)
ROLES_FOR = {COORDINATOR: {"coordinator", "admin"}, ADMIN: {"admin"}}


def access(level: str, *, during_password_change: bool = False) -> dict:
    """The ``opt`` of a route: who may call it."""
    assert level in LEVELS, level
    return {"access": level, "during_password_change": during_password_change}


def client_address(connection: ASGIConnection) -> str:
    return connection.client.host if connection.client else "unknown"


def _cross_site(conn: ASGIConnection) -> bool:
    """A request that another site, or an opaque origin (the job sandbox in some browsers), made the browser
    send: it never acts with our cookies, whatever their SameSite lets through. Only a top-level
    navigation that reads (a link in a mail, the identity provider's redirect back) is the person's own.
    Fetch Metadata tells; browsers without it still send Origin on the requests that change things."""
    if conn.headers.get("origin") == "null":
        return True
    if conn.headers.get("sec-fetch-site") != "cross-site":
        return False
    navigation = conn.headers.get("sec-fetch-mode") == "navigate" and conn.scope.get("method") in ("GET", "HEAD")
    return not navigation


class PasswordChangeRequired(Exception):
    """A signed-in user with a generated password tried to do anything else first."""


class AuthenticationMiddleware(ASGIMiddleware):
    scopes = (ScopeType.HTTP, ScopeType.WEBSOCKET)
    # Public paths that never look at the caller: no session lookup for every stylesheet and probe.
    exclude_path_pattern = ("^/static/", "^/healthz$", "^/metrics$")

    def __init__(self, idle: dt.timedelta) -> None:
        self.idle = idle

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        scope["user"] = await self._principal(ASGIConnection(scope))
        scope["auth"] = scope["user"].via if scope["user"] else None
        await next_app(scope, receive, send)

    async def _principal(self, conn: ASGIConnection) -> Principal | None:
        path = conn.scope["path"]
        if path.startswith(API_PREFIX):
            scheme, _, token = conn.headers.get("authorization", "").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return await api_tokens.resolve(token.strip())
            return None
        if _cross_site(conn):
            return None
        key = conn.cookies.get(SESSION_COOKIE)
        principal = await sessions.resolve(key, sessions.DASHBOARD, self.idle) if key else None
        worker_path = path in WORKER_PATHS or path.startswith(WORKER_PREFIXES)
        if principal is None and worker_path and (key := conn.cookies.get(WORKER_COOKIE)):
            principal = await sessions.resolve(key, sessions.WORKER, sessions.MAX_AGE)
        return principal


def access_guard(connection: ASGIConnection, handler: BaseRouteHandler) -> None:
    level = handler.opt.get("access")
    principal: Principal | None = connection.scope.get("user")
    if level not in LEVELS:
        log.error("route %s declares no access level; refusing", connection.scope["path"])
        raise PermissionDeniedException("This route is not available.")
    if level == PUBLIC:
        return
    if principal is None:
        raise NotAuthorizedException("Sign in to continue.")
    if principal.must_change_password and not handler.opt.get("during_password_change"):
        raise PasswordChangeRequired()
    if level == WORKER_BROWSER:
        return
    if principal.via == sessions.WORKER:
        raise NotAuthorizedException("Sign in to continue.")
    if level == USER or principal.role in ROLES_FOR[level]:
        return
    raise PermissionDeniedException("Your account does not have access to this page.")
