"""Dashboard pages that belong to no single domain: the overview."""

from __future__ import annotations

from litestar import Request, get
from litestar.response import Redirect, Template

from appliance import __version__
from appliance.accounts import enrolment, users
from appliance.accounts.auth import PUBLIC, USER, access
from appliance.web.rendering import page


@get("/", opt=access(PUBLIC), include_in_schema=False)
async def root() -> Redirect:
    return Redirect(path="/ui", status_code=303)


@get("/ui", opt=access(USER), include_in_schema=False)
async def overview(request: Request) -> Template:
    stats = None
    if request.user.is_admin:
        links = await enrolment.list_all()
        stats = {
            "accounts": await users.count_by_role(),
            "active_links": sum(1 for link in links if link.status == "active"),
        }
    return page(request, "web/overview.html", stats=stats, version=__version__)


ROUTES = [root, overview]
