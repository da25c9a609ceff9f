"""Dashboard pages that belong to no single domain: the Overview, which answers "is anything wrong,
what is running, what is waiting" for each role, live (its numbers poll a fragment). A worker account's
Overview is about its own browsers: connected now and over the last hours, the runs they served, and
what they earned this month (on the page load only: the month's statement is priced from the ledger)."""

from __future__ import annotations

import datetime as dt

from litestar import Request, get
from litestar.response import Redirect, Template

from appliance import __version__
from appliance.accounts import enrolment, users
from appliance.accounts.actor import Actor
from appliance.accounts.auth import PUBLIC, USER, access
from appliance.billing import service as billing
from appliance.billing.ledger import PROVIDER
from appliance.billing.views import month_label
from appliance.fleet.presence import paused_note
from appliance.jobs import overview as runs_overview
from appliance.metrics import plots
from appliance.metrics.sampler import account_samples_since, samples_since
from appliance.pmrfs import service as pmrfs
from appliance.web.rendering import page

# The plots cover the last PLOT_HOURS; the totals beside them the last day.
PLOT_HOURS = 6
DAY = dt.timedelta(hours=24)


@get("/", opt=access(PUBLIC), include_in_schema=False)
async def root() -> Redirect:
    return Redirect(path="/ui", status_code=303)


def _fleet_figures(workers: list) -> dict:
    return {
        "connected": len(workers),
        "idle": sum(1 for w in workers if w.state == "idle"),
        "busy": sum(1 for w in workers if w.state == "busy"),
        "paused": sum(1 for w in workers if w.state == "paused"),
        "paused_note": paused_note(workers),
        "relayed": sum(1 for w in workers if w.connectivity == "relay"),
        "unreachable": sum(1 for w in workers if w.connectivity == "unreachable"),
        "tasks": sum(w.tasks_done for w in workers),
        "stored_bytes": sum(w.stored_bytes if w.stored_blobs is not None else w.bytes_held for w in workers),
    }


def _problems(glance, fleet: dict, is_admin: bool) -> list[tuple[str, str | None]]:
    """What deserves a look, most serious first: (text, link)."""
    problems: list[tuple[str, str | None]] = []
    if glance.failed_count:
        latest = glance.failures[0]
        problems.append(
            (
                f"{glance.failed_count} run{'s' if glance.failed_count != 1 else ''} failed in the last 24 hours; "
                f"the latest, run {latest.id} ({latest.job_name}): {latest.reason or 'no reason given'}",
                f"/ui/runs/{latest.id}",
            )
        )
    for run in glance.queued:
        if run.reason:
            problems.append((f"Run {run.id} ({run.job_name}) waits: {run.reason}", f"/ui/runs/{run.id}"))
    if not fleet["connected"]:
        problems.append(("No worker is connected: runs wait in the queue until browsers open the worker page.", None))
    elif fleet["paused"] == fleet["connected"]:
        count = fleet["connected"]
        problems.append(
            (
                f"{count} worker{'s' if count != 1 else ''} connected, {fleet['paused_note']}: "
                "runs wait in the queue until they resume (Admin → Settings can turn the busy check off)",
                "/ui/workers",
            )
        )
    if is_admin and fleet["unreachable"]:
        problems.append(
            (f"{fleet['unreachable']} worker(s) cannot be reached peer to peer, not even through the relay.", None)
        )
    return problems


async def _context(request: Request) -> dict:
    user = request.user
    state = request.app.state
    actor = Actor.of(user)
    workers = list(state.fleet.workers.values())
    own = [w for w in workers if w.account_id == user.user_id]
    context: dict = {"own": _fleet_figures(own)}
    if user.role == "worker":
        since = dt.datetime.now(dt.UTC) - dt.timedelta(hours=PLOT_HOURS)
        context.update(
            plots=plots.account_plots(await samples_since(since), await account_samples_since(user.user_id, since)),
            served=await runs_overview.runs_served_by_account(
                user.user_id, state.coordinator, [w.worker_id for w in own]
            ),
        )
        return context
    since = dt.datetime.now(dt.UTC) - DAY
    glance = await runs_overview.at_a_glance(actor, state.coordinator, since)
    buckets = await pmrfs.list_buckets(actor)
    samples = await samples_since(since)
    recent = [s for s in samples if s["at"] >= dt.datetime.now(dt.UTC) - dt.timedelta(hours=PLOT_HOURS)]
    fleet = _fleet_figures(workers)  # paused ones are connected too (fleet/presence.py)
    context.update(
        fleet=fleet,
        glance=glance,
        problems=_problems(glance, fleet, user.is_admin),
        storage={
            "buckets": len(buckets),
            "objects": sum(b.objects for b in buckets),
            "bytes": sum(b.bytes for b in buckets),
        },
        traffic=plots.totals(samples),
        plots=plots.fleet_plots(recent),
    )
    return context


async def _admin_stats() -> dict:
    links = await enrolment.list_all()
    return {
        "accounts": await users.count_by_role(),
        "active_links": sum(1 for link in links if link.status == "active"),
    }


async def _earned(request: Request) -> dict:
    """What the account's browsers earned this month so far, as Payments shows it."""
    found = await billing.estimate(request.app.state.billing.tz, request.user.user_id, kind=PROVIDER)
    return {"amount": billing.format_money(found.total, found.currency), "month": month_label(found.period)}


@get("/ui", opt=access(USER), include_in_schema=False)
async def overview(request: Request) -> Template:
    stats = await _admin_stats() if request.user.is_admin else None
    earned = await _earned(request) if request.user.role == "worker" else None
    return page(
        request, "web/overview.html", stats=stats, earned=earned, version=__version__, **await _context(request)
    )


@get("/ui/overview/live", opt=access(USER), include_in_schema=False)
async def overview_live(request: Request) -> Template:
    return page(request, "web/_overview_live.html", **await _context(request))


ROUTES = [root, overview, overview_live]
