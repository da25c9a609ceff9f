"""Who is acting, for the services that record audit entries: the signed-in account and its address
during a request (set by audit/middleware.py), ``peermr`` and the local user for a command, the
appliance itself for its own scheduled work."""

from __future__ import annotations

import contextlib
import getpass
from contextvars import ContextVar
from typing import NamedTuple


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
