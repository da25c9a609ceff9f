"""TURN pages: live allocations and monthly totals, the peer rules, and ICE servers for worker browsers."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import msgspec
from litestar import Request, get, post
from litestar.di import NamedDependency
from litestar.response import Response, Template

from appliance.accounts import users
from appliance.accounts.auth import ADMIN, WORKER_BROWSER, access
from appliance.accounts.forms import Form
from appliance.config import Settings
from appliance.jobs.views import sandbox_settings
from appliance.turn.metering import live_rows, totals_since
from appliance.errors import ServiceError
from appliance.turn.service import TurnService
from appliance.web.rendering import page, redirect


def _turn(request: Request) -> TurnService:
    return request.app.state.turn


async def _emails(account_ids) -> dict[str, str]:
    emails = {}
    for account_id in set(account_ids):
        account = await users.get(int(account_id)) if account_id.isdigit() else None
        emails[account_id] = account.email if account else f"account {account_id}"
    return emails


def month_start(timezone: str) -> dt.datetime:
    now = dt.datetime.now(ZoneInfo(timezone))
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


async def _live_context(request: Request) -> dict:
    rows = live_rows(_turn(request).server.allocations.values())
    emails = await _emails(r["account"] for r in rows)
    return {"allocations": [{**r, "email": emails[r["account"]]} for r in rows]}


@get("/ui/admin/turn", opt=access(ADMIN), include_in_schema=False)
async def turn_page(request: Request, settings: NamedDependency[Settings]) -> Template:
    since = month_start(settings.timezone)
    totals = await totals_since(since)
    emails = await _emails(totals)
    return page(
        request,
        "turn/admin.html",
        **await _live_context(request),
        totals=sorted(
            ({"email": emails[a], "to_peer": t, "from_peer": f} for a, (t, f) in totals.items()),
            key=lambda row: -(row["to_peer"] + row["from_peer"]),
        ),
        since=since,
        port=settings.turn_port,
    )


@get("/ui/admin/turn/live", opt=access(ADMIN), include_in_schema=False)
async def turn_live(request: Request) -> Template:
    return page(request, "turn/_live.html", **await _live_context(request))


class PeerRulesForm(msgspec.Struct):
    allowed: str = ""
    denied: str = ""


async def _settings_page(request: Request, settings: Settings, *, status_code=200, error=None, form=None, sandbox=None):
    """The admin Settings page; ``sandbox`` is the jobs section's state (jobs/ui_routes.py saves it)."""
    allowed, denied = await _turn(request).rules()
    return page(
        request,
        "turn/settings.html",
        status_code=status_code,
        error=error,
        allowed=form.allowed if form else allowed,
        denied=form.denied if form else denied,
        env_allowed=settings.turn_allowed_peers,
        env_denied=settings.turn_denied_peers,
        sandbox=sandbox or await sandbox_settings(settings),
    )


@get("/ui/admin/settings", opt=access(ADMIN), include_in_schema=False)
async def settings_page(request: Request, settings: NamedDependency[Settings]) -> Template:
    return await _settings_page(request, settings)


@post("/ui/admin/settings", opt=access(ADMIN), include_in_schema=False)
async def save_settings(request: Request, data: Form[PeerRulesForm], settings: NamedDependency[Settings]) -> Response:
    try:
        await _turn(request).save_rules(data.allowed, data.denied)
    except ServiceError as exc:
        return await _settings_page(request, settings, status_code=exc.status, error=str(exc), form=data)
    return redirect("/ui/admin/settings", "Relay peer rules saved; they apply to new permissions at once.")


class IceServersOut(msgspec.Struct):
    iceServers: list[dict]  # noqa: N815 - the RTCConfiguration field name
    ttl: int


@get("/worker/ice-servers", opt=access(WORKER_BROWSER), include_in_schema=False)
async def worker_ice_servers(request: Request, settings: NamedDependency[Settings]) -> IceServersOut:
    return IceServersOut(
        iceServers=_turn(request).ice_servers(request.user.user_id),
        ttl=settings.turn_credential_ttl_seconds,
    )


ROUTES = [turn_page, turn_live, settings_page, save_settings, worker_ice_servers]
