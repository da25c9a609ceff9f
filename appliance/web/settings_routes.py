"""Admin → Settings: the settings an admin changes while the appliance runs, on one page.

Each section is read and saved through its domain's service functions: the TURN relay's peer rules
(turn/service.py), the origins job code may fetch from (jobs/sandbox_policy.py), the queue's and
stragglers' rules and whether software WebGPU adapters count as GPUs (jobs/scheduling_policy.py),
the worker pages' courtesy (fleet/courtesy.py) and who may scrape GET /metrics (metrics/access.py).
Single sign-on and the rate limits are shown as ``peermr.toml`` and the environment set them
(accounts/sso.py), read-only. A refused
section is shown again with its message and what was typed; the other shows what is stored.
"""

from __future__ import annotations

import msgspec
from litestar import Request, get, post
from litestar.di import NamedDependency
from litestar.response import Response, Template

from appliance.accounts import sso
from appliance.accounts.auth import ADMIN, access
from appliance.accounts.forms import Form
from appliance.config import Settings, parse_origins
from appliance.errors import ServiceError
from appliance.fleet import courtesy
from appliance.jobs import sandbox_policy, scheduling_policy
from appliance.jobs.access import coordinator_of
from appliance.metrics import access as metrics_access
from appliance.turn.service import TurnService
from appliance.web.rendering import page, redirect

SETTINGS = "/ui/admin/settings"


class PeerRulesForm(msgspec.Struct):
    allowed: str = ""
    denied: str = ""


class OriginsForm(msgspec.Struct):
    origins: str = ""


class SchedulingForm(msgspec.Struct):
    queue_timeout_hours: str = ""
    fair_share_percent: str = ""
    stall_seconds: str = ""


class SoftwareGpusForm(msgspec.Struct):
    allowed: str = ""  # "true" when the box is ticked (an unticked box is not sent)


class CourtesyForm(msgspec.Struct):
    core_share_percent: str = ""
    hours_from: str = ""
    hours_to: str = ""
    pause_when_busy: str = ""  # "true" when the box is ticked (an unticked box is not sent)


class MetricsSourcesForm(msgspec.Struct):
    sources: str = ""


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
    scheduling: SchedulingForm | None = None,
    scheduling_error: str | None = None,
    courtesy_form: CourtesyForm | None = None,
    courtesy_error: str | None = None,
    metrics_sources: str | None = None,
    metrics_error: str | None = None,
    metrics_token: str | None = None,
) -> Template:
    allowed, denied = await _turn(request).rules()
    try:
        fixed = parse_origins(settings.fetch_origins)
    except ValueError:
        fixed = [settings.fetch_origins]
    stored_origins = "\n".join(parse_origins(await sandbox_policy.admin_origins()))
    if scheduling is None:
        admin = await scheduling_policy.stored()
        scheduling = SchedulingForm(
            _typed(admin["queue_timeout_hours"]),
            _typed(None if admin["fair_share"] is None else admin["fair_share"] * 100),
            _typed(admin["stall_seconds"]),
        )
    if courtesy_form is None:
        stored = await courtesy.rules()
        busy_check = "true" if stored.pause_when_busy else ""
        courtesy_form = CourtesyForm(_typed(stored.core_share * 100), stored.hours_from, stored.hours_to, busy_check)
    scrape = await metrics_access.policy()
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
        scheduling={
            "form": scheduling,
            "configured": scheduling_policy.configured(settings),
            "in_force": coordinator_of(request).policy,
            "error": scheduling_error,
        },
        sso=sso.summary(settings),
        rate_limits={"api": settings.api_requests_per_minute, "runs": settings.run_submissions_per_minute},
        courtesy={"form": courtesy_form, "error": courtesy_error},
        metrics={
            "sources": scrape.sources if metrics_sources is None else metrics_sources,
            "is_default": scrape.is_default,
            "token_prefix": scrape.token_prefix,
            "new_token": metrics_token,
            "error": metrics_error,
        },
    )


def _typed(value: float | None) -> str:
    """A stored number as the admin would type it (empty when not set)."""
    return "" if value is None else f"{value:g}"


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


@post(f"{SETTINGS}/scheduling", opt=access(ADMIN), include_in_schema=False)
async def save_scheduling(
    request: Request, data: Form[SchedulingForm], settings: NamedDependency[Settings]
) -> Response:
    try:
        policy = await scheduling_policy.save(
            settings, data.queue_timeout_hours, data.fair_share_percent, data.stall_seconds
        )
    except ServiceError as exc:
        return await _settings_page(
            request, settings, status_code=exc.status, scheduling=data, scheduling_error=str(exc)
        )
    coordinator_of(request).policy = policy
    return redirect(SETTINGS, "Queue and straggler rules saved; they apply from the next scheduling round.")


@post(f"{SETTINGS}/software-gpus", opt=access(ADMIN), include_in_schema=False)
async def save_software_gpus(
    request: Request, data: Form[SoftwareGpusForm], settings: NamedDependency[Settings]
) -> Response:
    allowed = data.allowed == "true"
    coordinator_of(request).policy = await scheduling_policy.save_software_gpus(settings, allowed)
    return redirect(
        SETTINGS,
        "Software WebGPU adapters now run GPU runs." if allowed else "Software WebGPU adapters no longer run GPU runs.",
    )


@post(f"{SETTINGS}/courtesy", opt=access(ADMIN), include_in_schema=False)
async def save_courtesy(request: Request, data: Form[CourtesyForm], settings: NamedDependency[Settings]) -> Response:
    try:
        await courtesy.save(data.core_share_percent, data.hours_from, data.hours_to, data.pause_when_busy == "true")
    except ServiceError as exc:
        return await _settings_page(
            request, settings, status_code=exc.status, courtesy_form=data, courtesy_error=str(exc)
        )
    return redirect(SETTINGS, "Worker courtesy saved; worker pages apply it when they next load.")


@post(f"{SETTINGS}/metrics", opt=access(ADMIN), include_in_schema=False)
async def save_metrics_sources(
    request: Request, data: Form[MetricsSourcesForm], settings: NamedDependency[Settings]
) -> Response:
    try:
        await metrics_access.save_sources(data.sources)
    except ServiceError as exc:
        return await _settings_page(
            request, settings, status_code=exc.status, metrics_sources=data.sources, metrics_error=str(exc)
        )
    return redirect(SETTINGS, "The metrics allow-list is saved; it applies from the next scrape.")


@post(f"{SETTINGS}/metrics/token", opt=access(ADMIN), include_in_schema=False)
async def new_metrics_token(request: Request, settings: NamedDependency[Settings]) -> Template:
    return await _settings_page(request, settings, metrics_token=await metrics_access.new_token())


ROUTES = [
    settings_page,
    save_settings,
    save_fetch_origins,
    save_scheduling,
    save_software_gpus,
    save_courtesy,
    save_metrics_sources,
    new_metrics_token,
]
