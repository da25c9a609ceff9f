"""Work on what arrives one at a time (a worker's join), done for everything that arrived meanwhile
at once: a fleet saying hello again to a new leader arrives together, and costs a query per batch
instead of one per hello."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from appliance.background import BackgroundTasks

log = logging.getLogger(__name__)

T = TypeVar("T")


class Batches(Generic[T]):
    def __init__(self, background: BackgroundTasks, work: Callable[[list[T]], Awaitable[None]], size: int):
        self.background = background
        self.work = work  # a batch that fails is logged; the next ones go on
        self.size = size  # at most this many in one batch
        self.pending: list[T] = []
        self.task: asyncio.Task | None = None  # the one working through them, while any are pending

    def add(self, item: T) -> None:
        self.pending.append(item)
        if self.task is None:
            self.task = self.background.spawn(self._drain())

    async def _drain(self) -> None:
        try:
            while self.pending:
                batch, self.pending = self.pending[: self.size], self.pending[self.size :]
                try:
                    await self.work(batch)
                except Exception:
                    log.exception("%s: a batch of %d failed", self.background.owner, len(batch))
        finally:
            self.task = None
