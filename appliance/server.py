"""`peermr serve`'s HTTP server: uvicorn's, with a graceful stop for the runs in progress.

On SIGTERM (or a first Ctrl-C) the coordinator drains first: no run or task starts, running tasks
may finish for up to ``shutdown_grace_seconds``, every run's progress is written (jobs/checkpoints.py);
then the server shuts down as uvicorn does and the process exits 0. The next start, of this version
or a newer one, continues the runs. A second signal stops at once.

It also sets up logging (one line per start step, or one JSON object per line for log shippers) and
serves HTTPS itself when given a certificate (``tls_cert``, ``tls_key``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn

from appliance.config import Settings

if TYPE_CHECKING:
    from litestar import Litestar

log = logging.getLogger(__name__)


class GracefulServer(uvicorn.Server):
    def __init__(
        self, config: uvicorn.Config, drain: Callable[[], Awaitable[None]], serving: Callable[[], None] = lambda: None
    ):
        super().__init__(config)
        self.drain = drain
        self.serving = serving  # told once the sockets listen (the app's startup has run by then)
        self.draining: asyncio.Task | None = None

    async def startup(self, sockets: list | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self.serving()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not recorded in uvicorn's captured signals: it would raise them again once stopped, and a
        # stop asked for is a clean exit (status 0).
        if self.draining is not None or not self.started:
            self.should_exit = True
            self.force_exit = self.draining is not None and sig == signal.SIGINT
            return
        # A signal handler may interrupt the loop anywhere: the drain starts from the loop itself.
        asyncio.get_event_loop().call_soon_threadsafe(self._start_draining)

    def _start_draining(self) -> None:
        if self.draining is None:
            self.draining = asyncio.get_running_loop().create_task(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        try:
            await self.drain()
        except Exception:
            log.exception("draining the coordinator failed; stopping anyway")
        self.should_exit = True


# Chatty at INFO about their own workings (a line per scheduled job and per minute, uvicorn's start
# and stop steps): warnings and errors only, unless log_level is debug.
QUIET_LOGGERS = ("apscheduler", "piccolo", "uvicorn.error", "aiortc", "aioice")
# Libraries that install handlers of their own: their records go to the root's one handler instead.
OWN_HANDLERS = ("litestar", "uvicorn", "uvicorn.error", "uvicorn.access")


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message (and exception)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(settings: Settings) -> None:
    """Every record through one handler on stderr, in the configured format. Called again after the
    app is built, since Litestar installs a handler of its own on the root logger then."""
    handler = logging.StreamHandler(sys.stderr)
    if settings.log_format == "json":
        handler.setFormatter(JSONFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    level = logging.getLevelName(settings.log_level.upper())
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level)
    for name in OWN_HANDLERS:
        logging.getLogger(name).handlers = []
        logging.getLogger(name).propagate = True
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if level <= logging.DEBUG else logging.WARNING)


def uvicorn_config(app: Litestar, settings: Settings, ws_max_size: int) -> uvicorn.Config:
    """uvicorn's settings: logging left to configure_logging, HTTPS when a certificate is set."""
    tls = {}
    if settings.tls_cert:
        tls = {"ssl_certfile": settings.tls_cert, "ssl_keyfile": settings.tls_key}
    # A scheduler behind edges takes the browser's address from the edge's X-Forwarded-For; only edges
    # may reach its port (docs/operations.md, "Scale out"). Any other role ignores the header.
    forwarded = {"proxy_headers": True, "forwarded_allow_ips": "*"} if settings.role == "scheduler" else {}
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        log_level=None,
        access_log=False,
        ws_max_size=ws_max_size,
        # The worker sockets carry small JSON messages: compressing them kept a zlib stream each way
        # for every socket (43 KiB of an edge's 75 KiB a worker) and cost CPU at every frame. Nor does
        # uvicorn ping them: the fleet does (fleet/connection.Session, through Redis behind edges), and
        # drops and closes a socket that stops answering.
        ws_per_message_deflate=False,
        ws_ping_interval=None,
        **tls,
        **forwarded,
    )
