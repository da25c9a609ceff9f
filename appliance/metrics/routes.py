"""GET /metrics (who may scrape it is set in Admin → Settings, web/settings_routes.py)."""

from __future__ import annotations

from litestar import Request, Response, get
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from appliance.accounts.auth import PUBLIC, access, client_address
from appliance.metrics import access as metrics_access
from appliance.metrics import collect


# Public as a route: the token or the caller's address decides (metrics/access.py).
@get("/metrics", opt={**access(PUBLIC), "exclude_from_csrf": True}, include_in_schema=False)
async def metrics(request: Request) -> Response:
    refusal = await metrics_access.check(request.headers.get("authorization", ""), client_address(request))
    if refusal is not None:
        return Response(refusal.message + "\n", status_code=refusal.status, media_type="text/plain; charset=utf-8")
    await collect.refresh(request.app.state.fleet, request.app.state.coordinator)
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


ROUTES = [metrics]
