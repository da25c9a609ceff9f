"""Run logs: job code's ``context.log`` lines and the coordinator's own events, kept after the run.

Lines arrive at the pace of the tasks that write them, so they are buffered and written in one
transaction per second rather than one row per line. A run keeps at most MAX_LINES lines; past
that the coordinator notes once that the log was cut.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections import Counter

from appliance.background import BackgroundTasks
from appliance.clock import now
from appliance.jobs.tables import RunLog

log = logging.getLogger(__name__)

FLUSH_SECONDS = 1.0
MAX_LINES = 100_000
COORDINATOR = "coordinator"
# The coordinator's lines about the run's browsers leaving, doubling up and coming back: the run
# page's "Browsers" panel lists them (a warning when the run lost a browser, info when it gained one).
FLEET = "fleet"


class RunLogs:
    def __init__(self) -> None:
        self.pending: list[RunLog] = []
        self.counts: Counter[int] = Counter()
        self.background = BackgroundTasks("run logs")
        # Held while lines are written: a run's end holds it from before its transaction opens until
        # it commits (Ending.store_end), so a flush under way ends first and no line taken before the
        # end is stored after it (or lost to a database busy with the end's transaction).
        self.flushing = asyncio.Lock()

    def start(self) -> None:
        self.background.every(FLUSH_SECONDS, self.flush)

    async def stop(self) -> None:
        await self.background.cancel()
        await self.flush()

    def add(
        self,
        run_id: int,
        text: str,
        *,
        source: str = COORDINATOR,
        level: str = "info",
        group: str = "",
        rank: int | None = None,
        at: dt.datetime | None = None,
    ) -> None:
        self.counts[run_id] += 1
        if self.counts[run_id] > MAX_LINES:
            if self.counts[run_id] == MAX_LINES + 1:
                text, source, level = (
                    f"the log reached {MAX_LINES} lines; later lines are not kept",
                    COORDINATOR,
                    "warn",
                )
            else:
                return
        self.pending.append(
            RunLog(run=run_id, at=at or now(), source=source, group=group, rank=rank, level=level, text=text)
        )

    def forget(self, run_id: int) -> None:
        self.counts.pop(run_id, None)

    async def flush(self) -> None:
        async with self.flushing:
            await self.write()

    async def write(self) -> None:
        """Store the pending lines; the caller holds ``flushing`` (inside a transaction of its own, they
        commit with it)."""
        rows, self.pending = self.pending, []
        if not rows:
            return
        try:
            async with RunLog._meta.db.transaction():
                for start in range(0, len(rows), 500):
                    await RunLog.insert(*rows[start : start + 500])
        except Exception:
            log.exception("could not write %d run log lines", len(rows))
