"""`peermr serve --role scheduler`: a standby until it holds leadership, then the whole engine.

A scheduler starts answering its probes at once (`/health/leader` 429) and nothing else. Once it
holds the advisory lock (leadership.py) it starts what the one-process appliance starts (the
coordinator adopts running runs from their checkpoints, as after a restart; the monthly jobs),
takes the edges' sockets (remote_sockets.py) and answers `/health/leader` 200. A leader that loses
its lock exits at once, without writing anything more: the standby that takes the lock next must
be the only writer. Its supervisor (systemd) starts it again as a standby.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable

from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from appliance import db
from appliance.background import BackgroundTasks
from appliance.cluster import redis_link
from appliance.cluster.leader_proxy import unavailable
from appliance.cluster.leadership import Leadership, migrating
from appliance.cluster.remote_sockets import EdgeLink
from appliance.config import Settings
from appliance.fleet.registry import Fleet
from appliance.jobs.engine.coordinator import Coordinator

log = logging.getLogger(__name__)

# The exit status of a leader that lost its lock (EX_TEMPFAIL: start it again), and of a scheduler
# that failed on its way to lead (a migration, say).
LOST_LEADERSHIP = 75
COULD_NOT_LEAD = 1
# Paths a standby answers itself: the probes.
STANDBY_PATHS = ("/health/", "/healthz")


class SchedulerRole:
    def __init__(
        self, settings: Settings, fleet: Fleet, start_services: Callable[[], Awaitable[None]], coordinator: Coordinator
    ):
        url = settings.scheduler_url
        self.leadership = Leadership(settings.database_url, advertise=url)
        self.link = EdgeLink(settings.redis_url, fleet, url)
        self.start_services = start_services
        self.coordinator = coordinator
        self.leading = False  # leadership held and every service started
        self.background = BackgroundTasks("scheduler role")

    def start(self) -> None:
        self.background.spawn(self._lead())

    def gate(self) -> StandbyGate:
        return StandbyGate(self)

    def readiness(self) -> tuple:
        """/health/ready's checks beyond the database: Redis, once this scheduler uses it."""
        return (redis_link.answers(self.link.client),)

    async def stop(self) -> None:
        await self.background.cancel()
        if self.leading:
            await self.link.stop()
        await self.leadership.release()

    async def _lead(self) -> None:
        try:
            async with migrating(self.leadership.database_url):
                await db.migrate()
            await self.leadership.acquire()
            log.info("leading: starting the engine")
            await self.start_services()
            await self.link.start()
        except Exception:
            # Not a standby that can never lead, answering its probes for ever: its supervisor sees it fail.
            log.critical("could not become a scheduler that leads or stands by: exiting", exc_info=True)
            os._exit(COULD_NOT_LEAD)
        self.leading = True
        self.coordinator.serving()  # re-adopted runs wait for their workers from now, as after a restart
        await self.leadership.lost.wait()
        log.critical("lost leadership (its database connection broke): exiting for a standby to take over")
        os._exit(LOST_LEADERSHIP)

    async def drain(self, timeout: float) -> None:
        """SIGTERM: a leader drains as one process does (then releases the lock at shutdown)."""
        if self.leading:
            await self.coordinator.drain(timeout)


class StandbyGate(ASGIMiddleware):
    """Until its scheduler leads, a request other than a probe gets 503 naming why."""

    scopes = (ScopeType.HTTP, ScopeType.WEBSOCKET)

    def __init__(self, role: SchedulerRole):
        self.role = role

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        if self.role.leading or scope["path"].startswith(STANDBY_PATHS):
            await next_app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            # Accepted, then closed with 1013 ("try again later"): a page reconnects after it, where a
            # refused handshake would read as its sign-in no longer being valid.
            await receive()
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.close", "code": 1013, "reason": "a standby scheduler"})
            return
        await unavailable(send, "a standby scheduler: another one leads")
