"""The request's actor for the audit log: set after authentication, read by audit/context.py's
``current()``. Apart from context.py so that commands, which never serve requests, do not load the
web framework to act as themselves."""

from __future__ import annotations

from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from appliance.audit.context import acting


class AuditContextMiddleware(ASGIMiddleware):
    """After authentication: the caller's email (or "anonymous") and client address for this request."""

    scopes = (ScopeType.HTTP, ScopeType.WEBSOCKET)

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        principal = scope.get("user")
        client = scope.get("client")
        with acting(principal.email if principal else "anonymous", client[0] if client else ""):
            await next_app(scope, receive, send)
