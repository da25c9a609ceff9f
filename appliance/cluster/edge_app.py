"""`peermr serve --role edge`: browsers' WebSockets, a TURN listener, and the way to the scheduler.

An edge answers its probes, serves the static files, authenticates worker sockets and hands them to
the active scheduler (edge_sockets.py), serves `/worker/ice-servers` for its own TURN listener, and
passes every other request to the active scheduler (leader_proxy.py).
"""

from __future__ import annotations

import datetime as dt
import logging
import re

from litestar import Litestar, WebSocket, websocket
from litestar.datastructures import State
from litestar.di import Provide
from litestar.static_files import create_static_files_router
from litestar.types import Receive, Scope, Send

from appliance import db
from appliance.accounts.auth import PUBLIC, WORKER_BROWSER, AuthenticationMiddleware, access, access_guard
from appliance.cluster import redis_link
from appliance.cluster.edge_sockets import RAW_ASGI, EdgeSockets
from appliance.cluster.leader_proxy import LeaderProxy
from appliance.config import Settings
from appliance.fleet.connection import accept
from appliance.resources import static_dir
from appliance.secret_keys import load_or_create_secrets
from appliance.turn import routes as turn_routes
from appliance.turn.service import TurnService
from appliance.web import ops

log = logging.getLogger(__name__)

# What the edge answers itself; the rest goes to the active scheduler.
LOCAL_PATHS = re.compile(r"^/(healthz$|health/|static/|worker/ice-servers$|ws/)")


@websocket("/ws/worker", opt=access(WORKER_BROWSER))
async def edge_worker_socket(socket: WebSocket) -> None:
    if await accept(socket):
        await socket.app.state.edge.serve(socket)


class EdgeApp:
    """Local routes to the edge's own Litestar app, everything else (HTTP) to the active scheduler."""

    def __init__(self, local: Litestar, proxy: LeaderProxy):
        self.local = local
        self.proxy = proxy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not LOCAL_PATHS.match(scope["path"]):
            await self.proxy(scope, receive, send)
        else:
            if scope["type"] == "websocket":
                # The server's own receive and send, for a worker socket's frames (edge_sockets.py):
                # the app's wrappers of them only track a state the edge does not read.
                scope[RAW_ASGI] = (receive, send)
            await self.local(scope, receive, send)


def create_edge_app(settings: Settings) -> EdgeApp:
    secrets = load_or_create_secrets(settings.data_path, settings.turn_secret)
    engine = db.configure(settings)
    turn = TurnService(settings, secrets.turn_secret)
    edge = EdgeSockets(settings.redis_url, turn)
    proxy = LeaderProxy(lambda: edge.leader.url if edge.leader else None)

    async def start() -> None:
        await engine.start_connection_pool()
        await turn.start()
        await edge.start()

    async def stop() -> None:
        await edge.stop()
        await proxy.aclose()
        await turn.stop()
        await engine.close_connection_pool()

    local = Litestar(
        route_handlers=[
            *ops.ROUTES,
            edge_worker_socket,
            turn_routes.worker_ice_servers,
            create_static_files_router(
                path="/static", directories=[static_dir()], opt={**access(PUBLIC)}, include_in_schema=False
            ),
        ],
        guards=[access_guard],
        middleware=[AuthenticationMiddleware(idle=dt.timedelta(hours=settings.session_hours))],
        dependencies={"settings": Provide(lambda: settings, use_cache=True, sync_to_thread=False)},
        state=State(
            {
                "settings": settings,
                "turn": turn,
                "edge": edge,
                "leads": lambda: False,  # /health/leader: 429, so a check of the leader skips edges
                "readiness": (redis_link.answers(edge.client),),
            }
        ),
        on_startup=[start],
        on_shutdown=[stop],
    )
    return EdgeApp(local, proxy)
