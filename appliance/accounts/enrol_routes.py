"""The public side of enrolment links: a browser joins as a worker of the link's account."""

from __future__ import annotations

from litestar import Request, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath
from litestar.response import Redirect, Response, Template

from appliance.accounts import enrolment, sessions
from appliance.accounts.auth import PUBLIC, WORKER_COOKIE, access, client_address
from appliance.accounts.login_routes import session_cookie
from appliance.config import Settings
from appliance.web.rendering import page


# GET only shows what the link does: link scanners and previews must not use it up.
@get("/enrol/{token:str}", opt=access(PUBLIC), include_in_schema=False)
async def enrol_page(request: Request, token: FromPath[str]) -> Template:
    try:
        link = await enrolment.peek(token)
    except enrolment.EnrolmentRefused as exc:
        return page(request, "accounts/enrol.html", status_code=410, error=str(exc), link=None, token=None)
    return page(request, "accounts/enrol.html", error=None, link=link, token=token)


@post("/enrol/{token:str}", opt=access(PUBLIC), include_in_schema=False)
async def enrol(request: Request, token: FromPath[str], settings: NamedDependency[Settings]) -> Response:
    try:
        link = await enrolment.redeem(token)
    except enrolment.EnrolmentRefused as exc:
        return page(request, "accounts/enrol.html", status_code=410, error=str(exc), link=None, token=None)
    key = await sessions.start(
        link.account_id,
        sessions.WORKER,
        sessions.MAX_AGE,
        user_agent=request.headers.get("user-agent", ""),
        client=client_address(request),
    )
    response = Redirect(path="/worker", status_code=303)
    response.cookies.append(session_cookie(key, settings, WORKER_COOKIE))
    return response


ROUTES = [enrol_page, enrol]
