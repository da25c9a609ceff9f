"""The worker page employees leave open."""

from __future__ import annotations

from litestar import Request, get
from litestar.response import Template

from appliance.accounts.auth import WORKER_BROWSER, access
from appliance.web.rendering import page


@get("/worker", opt=access(WORKER_BROWSER), include_in_schema=False)
async def worker_page(request: Request) -> Template:
    return page(request, "fleet/worker.html", account_email=request.user.email, enrolled=request.user.via == "worker")


ROUTES = [worker_page]
