"""Where every sign-in ends: with a password or through the identity provider, admitted or refused.

``signed_in`` starts the dashboard session and ``refused`` records a failed attempt, so whatever
must follow each sign-in (the log line, the last sign-in time, the audit entry) is written once, for
every way of signing in. A worker tab that joins with a token (``POST /worker/session``) signs in too.
"""

from __future__ import annotations

import datetime as dt
import logging

from litestar import Request
from litestar.datastructures import Cookie
from litestar.response import Redirect

from appliance.accounts import sessions, users
from appliance.accounts.auth import SESSION_COOKIE, client_address
from appliance.accounts.forms import safe_next
from appliance.accounts.throttle import Lockout
from appliance.accounts.users import Account
from appliance.audit import service as audit
from appliance.config import Settings

log = logging.getLogger(__name__)

PASSWORD = "password"
SSO = "sso"
WORKER_TOKEN = "worker token"  # a worker tab exchanging a token for its cookie (POST /worker/session)

# Audit actions.
SIGN_IN = "sign-in"
FAILED = "sign-in.failed"
LOCKED = "sign-in.locked"


def session_cookie(
    key: str, settings: Settings, name: str = SESSION_COOKIE, lifetime: dt.timedelta = sessions.MAX_AGE
) -> Cookie:
    """The cookie of a session; it lasts as long as the session may (``lifetime``)."""
    return Cookie(
        key=name,
        value=key,
        path="/",
        httponly=True,
        samesite="lax",
        secure=settings.secure_cookies,
        max_age=int(lifetime.total_seconds()),
    )


async def signed_in(request: Request, account: Account, method: str, settings: Settings, next_path: str) -> Redirect:
    """Start ``account``'s dashboard session and send the browser on to ``next_path``."""
    client = client_address(request)
    key = await sessions.start(
        account.id,
        sessions.DASHBOARD,
        dt.timedelta(hours=settings.session_hours),
        user_agent=request.headers.get("user-agent", ""),
        client=client,
    )
    await users.set_last_login(account.id)
    await admitted(request, account.email, method)
    target = "/ui/account/password" if account.must_change_password else safe_next(next_path)
    response = Redirect(path=target, status_code=303)
    response.cookies.append(session_cookie(key, settings))
    return response


async def admitted(request: Request, email: str, method: str, **detail: object) -> None:
    """What every sign-in leaves: the log line and the audit entry (``detail`` adds to its after)."""
    log.info("sign-in: %s (%s) from %s", email, method, client_address(request))
    await audit.record(email, SIGN_IN, email, None, {"method": method, **detail})


async def refused(request: Request, email: str, method: str, reason: str, **detail: object) -> None:
    """A failed sign-in: ``email`` as typed or as the provider sent it (empty when unknown: the entry's
    actor is then whoever is calling), ``reason`` as the person was told, ``detail`` what only the
    audit log is told (a disabled account, how many failures)."""
    log.info("refused sign-in: %s (%s) from %s: %s", email or "-", method, client_address(request), reason)
    await audit.record(
        email or None, FAILED, email or "(unknown)", None, {"method": method, "reason": reason, **detail}
    )


def held(request: Request, email: str, lockout: Lockout) -> None:
    """An attempt refused during a lockout, its password unchecked: a log line only (the lockout had
    its audit entry when it began, so an attacker's hammering does not flood the audit log)."""
    log.info("refused sign-in: %s (%s) from %s: %s", email, PASSWORD, client_address(request), lockout.advice)


async def locked(email: str, lockout: Lockout) -> None:
    """A failed sign-in started a lockout: one entry for it, none for the attempts it then refuses."""
    seconds = lockout.seconds_left
    log.warning("sign-in lockout: %s for %d s after %d failures", lockout.target, seconds, lockout.failures)
    await audit.record(
        email or None,
        LOCKED,
        lockout.target,
        None,
        {"failures": lockout.failures, "wait_seconds": seconds, "until": lockout.until.isoformat()},
    )
