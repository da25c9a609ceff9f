"""Who is acting, for the services that record audit entries: the signed-in account and its address
during a request (set by AuditContextMiddleware), ``peermr`` and the local user for a command, the
appliance itself for its own scheduled work."""

from __future__ import annotations

import contextlib
import getpass
from contextvars import ContextVar
from typing import NamedTuple

from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send


class Acting(NamedTuple):
    actor: str
    address: str


APPLIANCE = Acting("appliance", "")
_acting: ContextVar[Acting] = ContextVar("audit_acting", default=APPLIANCE)


def current() -> Acting:
    return _acting.get()


@contextlib.contextmanager
def acting(actor: str, address: str = ""):
    token = _acting.set(Acting(actor, address))
    try:
        yield
    finally:
        _acting.reset(token)


def command_line() -> contextlib.AbstractContextManager:
    """A `peermr` command acts as the local user who ran it."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return acting(f"peermr command ({user})", "local")


class AuditContextMiddleware(ASGIMiddleware):
    """After authentication: the caller's email (or "anonymous") and client address for this request."""

    scopes = (ScopeType.HTTP, ScopeType.WEBSOCKET)

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        principal = scope.get("user")
        client = scope.get("client")
        with acting(principal.email if principal else "anonymous", client[0] if client else ""):
            await next_app(scope, receive, send)
