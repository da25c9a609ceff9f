"""Background tasks a component owns: kept referenced, errors logged, cancelled when it stops.

Not an ``asyncio.TaskGroup``: these tasks are started from synchronous callbacks (a message
handler, an event subscriber), outlive the call that started them, and one failing must not
cancel its siblings. Periodic work (a flush every second, a sweep) is declared with ``every``
instead of a loop of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine

log = logging.getLogger(__name__)


class BackgroundTasks:
    def __init__(self, owner: str):
        self.owner = owner  # named in the log when a task fails
        self.tasks: set[asyncio.Task] = set()
        self.periodic: set[asyncio.Task] = set()  # what every() started: only cancel() ends them

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

    def every(self, seconds: float, work: Callable[[], Awaitable[object]]) -> None:
        """Run ``work()`` every ``seconds``, the first time after one period, until cancel(); a round
        that fails is logged and the next one comes all the same."""
        self.paced(lambda: asyncio.sleep(seconds), work)

    def paced(self, pause: Callable[[], Awaitable[object]], work: Callable[[], Awaitable[object]]) -> None:
        """As every(), with the wait before each round ``await pause()`` (which may end early)."""

        async def repeat() -> None:
            while True:
                await pause()
                try:
                    await work()
                except Exception:
                    log.exception("%s: periodic work failed; it runs again", self.owner)

        task = asyncio.get_running_loop().create_task(repeat())
        self.periodic.add(task)
        task.add_done_callback(self.periodic.discard)

    async def drain(self, timeout: float) -> None:
        """Let the running tasks finish, each within ``timeout`` seconds (what stop() then cancels);
        periodic work goes on."""
        for task in list(self.tasks):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(task), timeout)

    async def cancel(self) -> None:
        """Cancel every task and wait until each has ended."""
        tasks = [*self.tasks, *self.periodic]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
