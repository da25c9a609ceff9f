"""Background tasks a component owns: kept referenced, errors logged, cancelled when it stops.

Not an ``asyncio.TaskGroup``: these tasks are started from synchronous callbacks (a message
handler, an event subscriber), outlive the call that started them, and one failing must not
cancel its siblings.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine

log = logging.getLogger(__name__)


class BackgroundTasks:
    def __init__(self, owner: str):
        self.owner = owner  # named in the log when a task fails
        self.tasks: set[asyncio.Task] = set()

    def spawn(self, coro: Coroutine, group: set[asyncio.Task] | None = None) -> asyncio.Task:
        """Run ``coro`` in the background; ``group`` holds it too, for whoever cancels that group sooner
        (a run's waiting requests when the run ends)."""
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        if group is not None:
            group.add(task)

        def reap(task: asyncio.Task) -> None:
            self.tasks.discard(task)
            if group is not None:
                group.discard(task)
            if not task.cancelled() and task.exception() is not None:
                log.error("%s: background task failed", self.owner, exc_info=task.exception())

        task.add_done_callback(reap)
        return task

    async def drain(self, timeout: float) -> None:
        """Let the running tasks finish, each within ``timeout`` seconds (what stop() then cancels)."""
        for task in list(self.tasks):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(task), timeout)

    async def cancel(self) -> None:
        """Cancel every task and wait until each has ended."""
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
