"""The fleet sampled every ``metrics_sample_seconds`` into FleetSample rows (kept RETENTION), for the
Overview's plots; and with each sample, an AccountSample row per account with a browser connected or a
task done since the sample before (kept ACCOUNT_RETENTION, what a worker account's plots show: one row
per working account per sample adds up in a large organisation).

Tasks reported done are summed as the events arrive (wired in app.subscribe) and written with the next
sample; bytes moved browser to browser are the growth of /metrics' own counter (peermr_peer_bytes_total,
fleet/transfers.py) since the sample before, so the Overview and a scrape count the same bytes; states
(workers connected, runs running and queued) are read at the moment of the sample; relayed bytes come
from TURN's metering rows, which are cumulative, so the plot draws their growth between samples.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from appliance.clock import now
from appliance.events import TaskMessage
from appliance.fleet import protocol as p
from appliance.fleet.registry import Fleet
from appliance.fleet.transfers import PEER_BYTES
from appliance.metrics.tables import AccountSample, FleetSample
from appliance.scheduler import PeriodicJob
from appliance.turn import metering

log = logging.getLogger(__name__)

RETENTION = dt.timedelta(hours=24)
ACCOUNT_RETENTION = dt.timedelta(hours=6)


@dataclass
class Sampler:
    fleet: Fleet
    # Runs running and queued now (the coordinator's counts; set by app.create_app).
    run_counts: Callable[[], tuple[int, int]]
    interval: int
    tasks_done: int = 0
    peer_bytes_sampled: int = 0  # peermr_peer_bytes_total at the last sample written
    last_at: dt.datetime | None = None
    tasks_by_account: Counter[int] = field(default_factory=Counter)

    def task_message(self, event: TaskMessage) -> None:
        if isinstance(event.message, p.TaskDone):
            self.tasks_done += 1
            self.tasks_by_account[event.worker.account_id] += 1

    async def sample(self) -> None:
        at = now()
        workers = list(self.fleet.workers.values())
        running, queued = self.run_counts()
        total = peer_bytes_total()
        tasks, moved, by_account = self.tasks_done, total - self.peer_bytes_sampled, Counter(self.tasks_by_account)
        seconds = max(int((at - self.last_at).total_seconds()) if self.last_at else self.interval, 1)
        accounts: dict[int, list[int]] = {account: [0, 0] for account in by_account}
        for w in workers:
            counts = accounts.setdefault(w.account_id, [0, 0])
            counts[0] += 1
            counts[1] += w.busy
        relayed = await metering.relayed_total()
        async with FleetSample._meta.db.transaction():
            await FleetSample.insert(
                FleetSample(
                    at=at,
                    workers=len(workers),
                    busy=sum(1 for w in workers if w.busy),
                    runs_running=running,
                    runs_queued=queued,
                    tasks_done=tasks,
                    peer_bytes=moved,
                    relayed_total=relayed,
                    seconds=seconds,
                )
            )
            if accounts:
                await AccountSample.insert(
                    *(
                        AccountSample(
                            at=at,
                            account=account,
                            workers=connected,
                            busy=busy,
                            tasks_done=by_account[account],
                            seconds=seconds,
                        )
                        for account, (connected, busy) in accounts.items()
                    )
                )
        # Only once written: a failed write keeps the counts for the next sample.
        self.tasks_done -= tasks
        self.peer_bytes_sampled = total
        self.tasks_by_account -= by_account
        self.last_at = at
        await FleetSample.delete().where(FleetSample.at < at - RETENTION)
        await AccountSample.delete().where(AccountSample.at < at - ACCOUNT_RETENTION)

    def jobs(self) -> list[PeriodicJob]:
        return [PeriodicJob("metrics.sample", self.sample, "interval", {"seconds": self.interval})]


def peer_bytes_total() -> int:
    """Bytes moved between browsers since the appliance started, every kind, as /metrics counts them."""
    return int(sum(s.value for metric in PEER_BYTES.collect() for s in metric.samples if s.name.endswith("_total")))


async def samples_since(since: dt.datetime) -> list[dict]:
    return await FleetSample.select().where(FleetSample.at >= since).order_by(FleetSample.at)


async def account_samples_since(account: int, since: dt.datetime) -> list[dict]:
    """The account's rows since ``since``, oldest first (kept ACCOUNT_RETENTION)."""
    rows = AccountSample.select().where((AccountSample.account == account) & (AccountSample.at >= since))
    return await rows.order_by(AccountSample.at)
