"""Joining as a worker browser without a dashboard sign-in.

An enrolment link (`/enrol/<token>`) is for people: it shows whom the tab will
work for and joins on a click. Programs that drive browsers (`peermr worker`)
open `/worker/start#token=<token>`: the token stays in the URL fragment, which
is never sent to a server or logged, and the page's script exchanges it for the
worker cookie at `POST /worker/session`. Either kind of token works there: an
enrolment token or an API token (the workers then belong to its account). That
exchange is a sign-in (accounts/signin.py): an enrolment token's use is recorded as
such, an API token's as a sign-in of its account, a refused token as a failed one.
"""

from __future__ import annotations

import msgspec
from litestar import Request, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody
from litestar.response import Redirect, Response, Template

from appliance.accounts import api_tokens, credentials, enrolment, sessions, signin
from appliance.accounts.auth import PUBLIC, WORKER_COOKIE, access, client_address
from appliance.accounts.signin import session_cookie
from appliance.config import Settings
from appliance.web.rendering import page


async def _start_worker_session(
    request: Request,
    account_id: int,
    settings: Settings,
    response: Response,
    *,
    api_token: int | None = None,
    link: enrolment.LinkInfo | None = None,
) -> Response:
    """The worker cookie, for a session that names the token or link it was made from (revoking that
    ends it) and lasts no longer than the link."""
    until = link.expires_at if link else None
    key = await sessions.start(
        account_id,
        sessions.WORKER,
        sessions.MAX_AGE,
        user_agent=request.headers.get("user-agent", ""),
        client=client_address(request),
        api_token=api_token,
        enrolment_link=link.id if link else None,
        until=until,
    )
    response.cookies.append(session_cookie(key, settings, WORKER_COOKIE, sessions.lifetime(until)))
    return response


# GET only shows what the link does: link scanners and previews must not use it up.
@get("/enrol/{token:str}", opt=access(PUBLIC), include_in_schema=False)
async def enrol_page(request: Request, token: FromPath[str]) -> Template:
    try:
        link = await enrolment.peek(token)
    except enrolment.EnrolmentRefused as exc:
        return page(request, "accounts/enrol.html", status_code=exc.status, error=str(exc), link=None, token=None)
    return page(request, "accounts/enrol.html", error=None, link=link, token=token)


@post("/enrol/{token:str}", opt=access(PUBLIC), include_in_schema=False)
async def enrol(request: Request, token: FromPath[str], settings: NamedDependency[Settings]) -> Response:
    try:
        link = await enrolment.redeem(token)
    except enrolment.EnrolmentRefused as exc:
        return page(request, "accounts/enrol.html", status_code=exc.status, error=str(exc), link=None, token=None)
    return await _start_worker_session(
        request, link.account_id, settings, Redirect(path="/worker", status_code=303), link=link
    )


@get("/worker/start", opt=access(PUBLIC), include_in_schema=False)
async def worker_start_page(request: Request) -> Template:
    return page(request, "accounts/worker_start.html")


class WorkerSessionRequest(msgspec.Struct):
    token: str


@post("/worker/session", opt=access(PUBLIC), include_in_schema=False)
async def worker_session(
    request: Request, data: JSONBody[WorkerSessionRequest], settings: NamedDependency[Settings]
) -> Response:
    token = data.token.strip()
    # The prefix the token pages show, and only of our tokens: something else pasted here may be a secret.
    ours = token.startswith((credentials.API_TOKEN_PREFIX, credentials.ENROLMENT_TOKEN_PREFIX))
    shown = credentials.shown_prefix(token) if ours else "(not a PeerMR token)"
    account_id = api_token = link = None
    if token.startswith(credentials.API_TOKEN_PREFIX):
        principal = await api_tokens.resolve(token)
        if principal is not None:
            account_id, api_token = principal.user_id, await api_tokens.id_of(token)
            await signin.admitted(request, principal.email, signin.WORKER_TOKEN, token=shown)
    elif token.startswith(credentials.ENROLMENT_TOKEN_PREFIX):
        try:
            link = await enrolment.redeem(token)
            account_id = link.account_id
        except enrolment.EnrolmentRefused:
            account_id = None
    if account_id is None:
        message = "This token is not valid (revoked, expired or used up)."
        await signin.refused(request, "", signin.WORKER_TOKEN, message, token=shown)
        return Response({"detail": message}, status_code=401)
    response = Response(content=None, status_code=204)
    return await _start_worker_session(request, account_id, settings, response, api_token=api_token, link=link)


ROUTES = [enrol_page, enrol, worker_start_page, worker_session]
