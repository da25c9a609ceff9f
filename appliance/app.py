"""create_app(): the one Litestar application and its lifespan."""

from __future__ import annotations

import datetime as dt
import functools
import logging
from typing import TYPE_CHECKING

from litestar import Litestar, Router
from litestar.config.csrf import CSRFConfig
from litestar.datastructures import State
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.static_files import create_static_files_router
from litestar.template import TemplateConfig

from appliance import __version__, db
from appliance.accounts import (
    admin_routes,
    api_routes,
    bootstrap,
    enrol_routes,
    housekeeping,
    login_routes,
    sessions,
    sso,
    token_routes,
)
from appliance.accounts.auth import (
    API_PREFIX,
    PUBLIC,
    AuthenticationMiddleware,
    access,
    access_guard,
)
from appliance.accounts.rate_limits import RateLimitMiddleware
from appliance.audit import housekeeping as audit_housekeeping
from appliance.audit import routes as audit_routes
from appliance.audit.middleware import AuditContextMiddleware
from appliance.background import BackgroundTasks
from appliance.billing import housekeeping as billing_housekeeping
from appliance.billing import meters as billing_meters
from appliance.billing import routes as billing_routes
from appliance.billing import ui_routes as billing_ui_routes
from appliance.billing.context import BillingContext
from appliance.billing.meters import TransferMeter
from appliance.cloud import routes as cloud_routes
from appliance.cloud.service import CloudKeys
from appliance.config import Settings
from appliance.events import (
    BlobsDropped,
    CandidatesAnnounced,
    EventHub,
    RunEnded,
    SessionsEnded,
    TaskMessage,
    TransferFinished,
    WorkerJoined,
    WorkerLeft,
)
from appliance.fleet import connection as fleet_connection
from appliance.fleet import routes as fleet_routes
from appliance.fleet.registry import Fleet
from appliance.fleet.reliability import Reliability
from appliance.jobs import api_routes as jobs_api_routes
from appliance.jobs import console_routes as jobs_console_routes
from appliance.jobs import sandbox_routes as jobs_sandbox_routes
from appliance.jobs import ui_routes as jobs_ui_routes
from appliance.jobs.engine.coordinator import Coordinator
from appliance.jobs.logs import RunLogs
from appliance.metrics import routes as metrics_routes
from appliance.metrics.sampler import Sampler
from appliance.pmrfs import api_routes as pmrfs_api_routes
from appliance.pmrfs import datanode_routes
from appliance.pmrfs import housekeeping as pmrfs_housekeeping
from appliance.pmrfs import ui_routes as pmrfs_ui_routes
from appliance.pmrfs.blobstore import store_for
from appliance.pmrfs.datanodes import DataNodes
from appliance.pmrfs.grants import Grants
from appliance.pmrfs.namenode import LiveHolders
from appliance.resources import static_dir, templates_dir
from appliance.scheduler import create_scheduler
from appliance.secret_keys import load_or_create_secrets
from appliance.turn import routes as turn_routes
from appliance.turn.service import TurnService
from appliance.web import moved_static, ops, pages, settings_routes
from appliance.web.errors import EXCEPTION_HANDLERS
from appliance.web.formatting import register_filters
from appliance.web.json_bodies import BoundedJSONRequest
from appliance.web.security_headers import SecurityHeadersMiddleware
from appliance.web.static_cache import StaticCacheMiddleware

if TYPE_CHECKING:
    from appliance.cluster.remote_sockets import EdgeLink

log = logging.getLogger(__name__)

ROUTE_HANDLERS = [
    *ops.ROUTES,
    *metrics_routes.ROUTES,
    *api_routes.ROUTES,
    *pages.ROUTES,
    *settings_routes.ROUTES,
    *login_routes.ROUTES,
    *token_routes.ROUTES,
    *admin_routes.ROUTES,
    *enrol_routes.ROUTES,
    *fleet_routes.ROUTES,
    *fleet_connection.ROUTES,
    *turn_routes.ROUTES,
    *pmrfs_api_routes.ROUTES,
    *pmrfs_ui_routes.ROUTES,
    *datanode_routes.ROUTES,
    *cloud_routes.ROUTES,
    *jobs_api_routes.ROUTES,
    *jobs_sandbox_routes.ROUTES,
    *jobs_ui_routes.ROUTES,
    *jobs_console_routes.ROUTES,
    *billing_routes.ROUTES,
    *billing_ui_routes.ROUTES,
    *audit_routes.ROUTES,
    *moved_static.ROUTES,
]


def announce_admin(created: tuple[str, str | None] | None, settings: Settings) -> None:
    if created is None:
        return
    email, password = created
    lines = [f"Admin account: {email}"]
    if password:
        lines.append(f"One-time password: {password}")
        lines.append("It is shown only now; you choose a new one at first sign-in.")
    else:
        lines.append("Password: the one in PEERMR_ADMIN_PASSWORD.")
    lines.append(f"Sign in at {settings.local_url}/login")  # the address the start's "serving" line names first
    if settings.log_format == "json":  # a log shipper reads every line as a JSON object
        log.warning("; ".join(lines))
        return
    width = max(len(line) for line in lines) + 4
    print("\n" + "=" * width + "\n" + "\n".join(f"  {line}" for line in lines) + "\n" + "=" * width + "\n", flush=True)


def subscribe(
    events: EventHub,
    coordinator: Coordinator,
    datanodes: DataNodes,
    meter: TransferMeter,
    reliability: Reliability,
    sampler: Sampler,
    turn: TurnService | EdgeLink,
    fleet: Fleet,
) -> None:
    """Who hears what (docs/architecture.md, "Events"); each event's subscribers run in this order.
    ``turn`` is the relay the workers' addresses feed: this process's own, or the edges' (a scheduler)."""
    events.subscribe(WorkerJoined, reliability.worker_joined)  # its score, which selection ranks by
    events.subscribe(WorkerJoined, datanodes.worker_joined)
    events.subscribe(WorkerJoined, coordinator.worker_joined)
    events.subscribe(WorkerJoined, turn.worker_joined)  # keeps the addresses of a tab that came back
    events.subscribe(WorkerLeft, reliability.worker_left)
    events.subscribe(WorkerLeft, datanodes.worker_left)
    events.subscribe(WorkerLeft, coordinator.worker_left)
    events.subscribe(WorkerLeft, turn.worker_left)  # forgets its addresses after a grace
    events.subscribe(CandidatesAnnounced, turn.candidates_announced)  # the peers the relay may reach
    events.subscribe(BlobsDropped, datanodes.blobs_dropped)
    events.subscribe(TransferFinished, meter.transfer_finished)
    events.subscribe(TransferFinished, datanodes.transfer_finished)
    events.subscribe(TaskMessage, coordinator.task_message)
    events.subscribe(TaskMessage, sampler.task_message)
    events.subscribe(RunEnded, functools.partial(billing_meters.run_ended, tz=meter.tz))  # the appliance's zone
    events.subscribe(RunEnded, reliability.run_ended)
    events.subscribe(SessionsEnded, fleet.sessions_ended)  # closes the connections opened with them


def scheduler_role(settings: Settings, fleet: Fleet, start_engine, coordinator: Coordinator):
    """The scheduler role (cluster/scheduler_role.py), or None for the one-process appliance, which
    does not load Redis and the cluster modules at all."""
    if settings.role != "scheduler":
        return None
    from appliance.cluster.scheduler_role import SchedulerRole

    return SchedulerRole(settings, fleet, start_engine, coordinator)


def create_app(settings: Settings) -> Litestar:
    secrets = load_or_create_secrets(settings.data_path, settings.turn_secret)
    engine = db.configure(settings)
    cloud_keys = CloudKeys(secrets.cloud_data_key)
    billing = BillingContext.from_settings(settings)
    store = store_for(settings.data_path)
    live_holders = LiveHolders()
    turn = TurnService(settings, secrets.turn_secret)
    events = EventHub()
    fleet = Fleet(events)
    transfer_meter = TransferMeter(billing.tz)
    reliability = Reliability(fleet)
    datanodes = DataNodes(fleet, store, live_holders, Grants(secrets.session_key.encode()), settings.replication_factor)
    run_logs = RunLogs()
    coordinator = Coordinator(fleet, settings, store, live_holders, cloud_keys, run_logs)
    datanodes.run_blobs = coordinator.read.blobs_in_use
    coordinator.staging.from_appliance = datanodes.copy_from_appliance
    sampler = Sampler(fleet, coordinator.read.run_counts, settings.metrics_sample_seconds)
    # A scheduler behind edges starts its engine once it leads (late-bound: start_engine is below).
    role = scheduler_role(settings, fleet, lambda: start_engine(), coordinator)
    relay = role.link if role is not None else turn
    subscribe(events, coordinator, datanodes, transfer_meter, reliability, sampler, relay, fleet)
    scheduler = create_scheduler(
        [
            *housekeeping.JOBS,
            *pmrfs_housekeeping.jobs(store),
            *billing_housekeeping.jobs(fleet, billing),
            *sampler.jobs(),
            *audit_housekeeping.JOBS,
        ],
        settings.timezone,
    )
    background = BackgroundTasks("appliance")

    def template_engine_callback(jinja: JinjaTemplateEngine) -> None:
        jinja.engine.globals.update(
            version=__version__,
            # Static URLs carry the version so browsers refetch after an upgrade.
            asset=lambda path: f"/static/{path}?v={__version__}",
        )
        register_filters(jinja.engine, settings.timezone)

    async def start_engine() -> None:
        """Everything that works on the store: at once in one process, once it leads in a scheduler
        (which migrated the schema before it campaigned)."""
        announce_admin(await bootstrap.ensure_admin(settings), settings)
        if role is None:
            await turn.start()  # a scheduler's browsers use their edges' relays
        datanodes.start()
        run_logs.start()
        await coordinator.start()
        scheduler.start()
        sessions.announce_to(events)
        background.spawn(billing_housekeeping.catch_up(billing))

    async def start_services() -> None:
        await engine.start_connection_pool()
        if role is not None:
            role.start()
            return
        await db.migrate()
        await start_engine()

    async def stop_services() -> None:
        if role is not None:
            await role.stop()
        sessions.stop_announcing_to(events)
        if scheduler.running:
            scheduler.shutdown(wait=False)
        await coordinator.stop()
        await transfer_meter.stop()
        await reliability.stop()
        await billing.background.cancel()
        await background.cancel()
        await run_logs.stop()
        await datanodes.stop()
        await turn.stop()
        await engine.close_connection_pool()

    return Litestar(
        route_handlers=[
            *ROUTE_HANDLERS,
            create_static_files_router(
                path="/static",
                directories=[static_dir()],
                opt={**access(PUBLIC), "exclude_from_csrf": True},
                include_in_schema=False,
            ),
        ],
        guards=[access_guard],
        middleware=[
            *([role.gate()] if role is not None else []),
            ops.RequestMetricsMiddleware(),
            SecurityHeadersMiddleware(),
            StaticCacheMiddleware(),
            AuthenticationMiddleware(idle=dt.timedelta(hours=settings.session_hours)),
            # Inside authentication: the audit log's actor is the caller it found.
            AuditContextMiddleware(),
            RateLimitMiddleware(settings.api_requests_per_minute, settings.run_submissions_per_minute),
        ],
        csrf_config=CSRFConfig(
            secret=secrets.session_key,
            cookie_httponly=True,
            cookie_secure=settings.secure_cookies,
            # The API authenticates with Bearer tokens only, which a foreign site cannot send.
            exclude=[f"^{API_PREFIX}"],
        ),
        template_config=TemplateConfig(
            directory=templates_dir(), engine=JinjaTemplateEngine, engine_callback=template_engine_callback
        ),
        openapi_config=OpenAPIConfig(
            title="PeerMR Appliance API",
            version=__version__,
            path="/schema",
            # JSON only: the interactive renderers load their code from CDNs, which a private site may not reach.
            render_plugins=[JsonRenderPlugin(path=["/", "/openapi.json"])],
            openapi_router=Router(path="/schema", route_handlers=[], opt=access(PUBLIC)),
        ),
        exception_handlers=EXCEPTION_HANDLERS,
        request_class=BoundedJSONRequest,
        dependencies={"settings": Provide(lambda: settings, use_cache=True, sync_to_thread=False)},
        state=State(
            {
                "settings": settings,
                "secrets": secrets,
                "turn": turn,
                "fleet": fleet,
                "datanodes": datanodes,
                "store": store,
                "live_holders": live_holders,
                "cloud_keys": cloud_keys,
                "billing": billing,
                "coordinator": coordinator,
                # What SIGTERM drains, what the server tells once it listens, and whether this process leads.
                "drain": role.drain if role is not None else coordinator.drain,
                "serving": (lambda: None) if role is not None else coordinator.serving,
                "leads": (lambda: role.leading) if role is not None else (lambda: True),
                "readiness": role.readiness() if role is not None else (),
                "sso": sso.OidcClient(settings, secrets.session_key.encode()) if settings.sso_issuer else None,
            }
        ),
        on_startup=[start_services],
        on_shutdown=[stop_services],
    )
