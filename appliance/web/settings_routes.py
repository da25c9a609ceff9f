"""Admin → Settings: the settings an admin changes while the appliance runs, on one page.

Each section is read and saved through its domain's service functions: the TURN relay's peer rules
(turn/service.py) and the origins job code may fetch from (jobs/sandbox_policy.py). A refused
section is shown again with its message and what was typed; the other shows what is stored.
"""

from __future__ import annotations

import msgspec
from litestar import Request, get, post
from litestar.di import NamedDependency
from litestar.response import Response, Template

from appliance.accounts.auth import ADMIN, access
from appliance.accounts.forms import Form
from appliance.config import Settings, parse_origins
from appliance.errors import ServiceError
from appliance.jobs import sandbox_policy
from appliance.turn.service import TurnService
from appliance.web.rendering import page, redirect

SETTINGS = "/ui/admin/settings"


class PeerRulesForm(msgspec.Struct):
    allowed: str = ""
    denied: str = ""


class OriginsForm(msgspec.Struct):
    origins: str = ""


def _turn(request: Request) -> TurnService:
    return request.app.state.turn


async def _settings_page(
    request: Request,
    settings: Settings,
    *,
    status_code: int = 200,
    rules: PeerRulesForm | None = None,
    rules_error: str | None = None,
    origins: OriginsForm | None = None,
    origins_error: str | None = None,
) -> Template:
    allowed, denied = await _turn(request).rules()
    try:
        fixed = parse_origins(settings.fetch_origins)
    except ValueError:
        fixed = [settings.fetch_origins]
    stored_origins = "\n".join(parse_origins(await sandbox_policy.admin_origins()))
    return page(
        request,
        "web/settings.html",
        status_code=status_code,
        error=rules_error,
        allowed=rules.allowed if rules else allowed,
        denied=rules.denied if rules else denied,
        env_allowed=settings.turn_allowed_peers,
        env_denied=settings.turn_denied_peers,
        sandbox={
            "fixed": fixed,
            "origins": origins.origins if origins else stored_origins,
            "error": origins_error,
        },
    )


@get(SETTINGS, opt=access(ADMIN), include_in_schema=False)
async def settings_page(request: Request, settings: NamedDependency[Settings]) -> Template:
    return await _settings_page(request, settings)


@post(SETTINGS, opt=access(ADMIN), include_in_schema=False)
async def save_settings(request: Request, data: Form[PeerRulesForm], settings: NamedDependency[Settings]) -> Response:
    try:
        await _turn(request).save_rules(data.allowed, data.denied)
    except ServiceError as exc:
        return await _settings_page(request, settings, status_code=exc.status, rules=data, rules_error=str(exc))
    return redirect(SETTINGS, "Relay peer rules saved; they apply to new permissions at once.")


@post(f"{SETTINGS}/fetch-origins", opt=access(ADMIN), include_in_schema=False)
async def save_fetch_origins(
    request: Request, data: Form[OriginsForm], settings: NamedDependency[Settings]
) -> Response:
    try:
        await sandbox_policy.save_admin_origins(data.origins)
    except ServiceError as exc:
        return await _settings_page(request, settings, status_code=exc.status, origins=data, origins_error=str(exc))
    return redirect(SETTINGS, "Allowed fetch origins saved; they apply to runs started from now on.")


ROUTES = [settings_page, save_settings, save_fetch_origins]
