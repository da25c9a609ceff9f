"""`peermr serve`'s HTTP server: uvicorn's, with a graceful stop for the runs in progress.

On SIGTERM (or a first Ctrl-C) the coordinator drains first: no run or task starts, running tasks
may finish for up to ``shutdown_grace_seconds``, every run's progress is written (jobs/checkpoints.py);
then the server shuts down as uvicorn does and the process exits 0. The next start, of this version
or a newer one, continues the runs. A second signal stops at once.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from types import FrameType

import uvicorn

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
