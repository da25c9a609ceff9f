"""The fleet sampled every ``metrics_sample_seconds`` into FleetSample rows (kept RETENTION), for the
Overview's plots.

Counts that are events (tasks reported done, bytes moved browser to browser) are summed as the events
arrive (wired in app.subscribe) and written with the next sample; states (workers connected, runs
running and queued) are read at the moment of the sample; relayed bytes come from TURN's metering rows,
which are cumulative, so the plot draws their growth between samples.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass

from appliance.clock import now
from appliance.events import TaskMessage, TransferFinished
from appliance.fleet import protocol as p
from appliance.fleet.registry import Fleet
from appliance.metrics.tables import FleetSample
from appliance.scheduler import PeriodicJob
from appliance.turn import metering

log = logging.getLogger(__name__)

RETENTION = dt.timedelta(hours=24)


@dataclass
class Sampler:
    fleet: Fleet
    # Runs running and queued now (the coordinator's counts; set by app.create_app).
    run_counts: Callable[[], tuple[int, int]]
    interval: int
    tasks_done: int = 0
    peer_bytes: int = 0
    last_at: dt.datetime | None = None

    def task_message(self, event: TaskMessage) -> None:
        if isinstance(event.message, p.TaskDone):
            self.tasks_done += 1

    def transfer_finished(self, event: TransferFinished) -> None:
        self.peer_bytes += event.transfer.counted_bytes

    async def sample(self) -> None:
        at = now()
        workers = list(self.fleet.workers.values())
        running, queued = self.run_counts()
        tasks, moved = self.tasks_done, self.peer_bytes
        seconds = int((at - self.last_at).total_seconds()) if self.last_at else self.interval
        await FleetSample.insert(
            FleetSample(
                at=at,
                workers=len(workers),
                busy=sum(1 for w in workers if w.busy),
                runs_running=running,
                runs_queued=queued,
                tasks_done=tasks,
                peer_bytes=moved,
                relayed_total=await metering.relayed_total(),
                seconds=max(seconds, 1),
            )
        )
        # Only once written: a failed write keeps the counts for the next sample.
        self.tasks_done -= tasks
        self.peer_bytes -= moved
        self.last_at = at
        await FleetSample.delete().where(FleetSample.at < at - RETENTION)

    def jobs(self) -> list[PeriodicJob]:
        return [PeriodicJob("metrics.sample", self.sample, "interval", {"seconds": self.interval})]


async def samples_since(since: dt.datetime) -> list[dict]:
    return await FleetSample.select().where(FleetSample.at >= since).order_by(FleetSample.at)
