"""The worker page employees leave open, and the live fleet view."""

from __future__ import annotations

from typing import Annotated

from litestar import Request, get, post
from litestar.params import FromPath, FromQuery, QueryParameter
from litestar.response import Response, Template

from appliance.accounts.auth import ADMIN, USER, WORKER_BROWSER, access
from appliance.audit import service as audit
from appliance.billing import service as billing
from appliance.fleet import courtesy, views
from appliance.fleet import protocol as p
from appliance.fleet.connection import CLOSE_GONE
from appliance.fleet.presence import paused_note
from appliance.fleet.registry import Fleet
from appliance.web.rendering import is_htmx, page, redirect


def _fleet(request: Request) -> Fleet:
    return request.app.state.fleet


@get("/worker", opt=access(WORKER_BROWSER), include_in_schema=False)
async def worker_page(request: Request) -> Template:
    user = request.user
    tz = request.app.state.billing.tz
    provided = await billing.usage(tz, user.user_id, side=billing.PROVIDER)
    # Worker accounts are paid for what their browsers provide; others see their contribution only.
    earnings = await billing.estimate(tz, user.user_id, kind=billing.PROVIDER) if user.role == "worker" else None
    rules = await courtesy.rules()
    response = page(
        request,
        "fleet/worker.html",
        account_email=user.email,
        enrolled=user.via == "worker",
        courtesy=rules,
        provided=provided,
        earnings=billing.format_money(earnings.total, earnings.currency) if earnings else None,
    )
    if not rules.pause_when_busy:
        response.headers.update(courtesy.NO_PRESSURE_POLICY)
    return response


def _context(request: Request, query: views.Query) -> dict:
    user = request.user
    coordinator = request.app.state.coordinator  # the jobs coordinator: who holds which rank

    def may_see_run(run_id: int) -> bool:
        return user.is_admin or (user.role == "coordinator" and coordinator.read.run_owner(run_id) == user.user_id)

    # A coordinator's runs may use any account's browsers (private mode: only its own); paused ones
    # are connected too, and say why they do not work (fleet/presence.py).
    shown = [
        w
        for w in _fleet(request).workers.values()
        if user.is_admin or w.account_id == user.user_id or user.role == "coordinator"
    ]
    placements = coordinator.read.placements()
    rows = [
        views.row(
            w,
            placements.get(w.worker_id),
            own=user.is_admin or w.account_id == user.user_id,
            may_see_run=may_see_run,
        )
        for w in shown
    ]
    selected = views.select(rows, query)
    return {
        "workers": selected,
        "total": len(rows),
        "others": sum(1 for r in rows if not r.id),
        "paused": paused_note(shown),
        "query": query,
        "states": views.STATES,
        "can_disconnect": user.is_admin,
        "runs_link": user.role in ("admin", "coordinator"),
    }


@get(["/ui/workers", "/ui/workers/live"], opt=access(USER), include_in_schema=False)
async def workers_page(
    request: Request,
    sort: FromQuery[str] = "label",
    order: FromQuery[str] = "asc",
    state_shown: Annotated[str, QueryParameter(name="state")] = "",
    q: FromQuery[str] = "",
) -> Template:
    """The page, or (…/live) the table the page polls, with the same sort and filter."""
    template = "fleet/_workers_table.html" if request.url.path.endswith("/live") else "fleet/workers.html"
    return page(request, template, **_context(request, views.Query.of(sort, order, state_shown, q)))


@post("/ui/workers/{worker_id:str}/disconnect", opt=access(ADMIN), include_in_schema=False)
async def disconnect_worker(request: Request, worker_id: FromPath[str]) -> Response:
    worker = _fleet(request).get(worker_id)
    if worker is None:
        return redirect("/ui/workers", "That worker has already left.", "info")
    await worker.send(p.Disconnect(reason="disconnected by an administrator", reconnect=False))
    await worker.close(CLOSE_GONE, "disconnected by an administrator")
    _fleet(request).remove(worker)
    await audit.note(
        "worker.disconnected", f"worker {worker_id} of {worker.account_email}", {"state": worker.state}, None
    )
    if is_htmx(request):
        return page(request, "fleet/_workers_table.html", **_context(request, views.Query()))
    return redirect("/ui/workers", f"Worker {worker_id} of {worker.account_email} is disconnected.")


ROUTES = [worker_page, workers_page, disconnect_worker]
