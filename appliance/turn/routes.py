"""TURN pages: live allocations and monthly totals, and ICE servers for worker browsers.

The peer rules are edited on Admin → Settings (web/settings_routes.py)."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import msgspec
from litestar import Request, get
from litestar.di import NamedDependency
from litestar.response import Template

from appliance.accounts import users
from appliance.accounts.auth import ADMIN, WORKER_BROWSER, access
from appliance.config import Settings
from appliance.turn.metering import live_rows, totals_since
from appliance.turn.service import TurnService
from appliance.web.rendering import page


def _turn(request: Request) -> TurnService:
    return request.app.state.turn


async def _emails(account_ids) -> dict[str, str]:
    """Emails by the account ids TURN usernames carry (strings)."""
    account_ids = set(account_ids)
    found = await users.emails(int(a) for a in account_ids if a.isdigit())
    by_text = {str(account_id): email for account_id, email in found.items()}
    return {a: by_text.get(a, f"account {a}") for a in account_ids}


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


class IceServersOut(msgspec.Struct):
    iceServers: list[dict]  # noqa: N815 - the RTCConfiguration field name
    ttl: int


@get("/worker/ice-servers", opt=access(WORKER_BROWSER), include_in_schema=False)
async def worker_ice_servers(request: Request, settings: NamedDependency[Settings]) -> IceServersOut:
    return IceServersOut(
        iceServers=_turn(request).ice_servers(request.user.user_id),
        ttl=settings.turn_credential_ttl_seconds,
    )


ROUTES = [turn_page, turn_live, worker_ice_servers]
