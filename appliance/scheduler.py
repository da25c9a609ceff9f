"""The APScheduler that runs periodic work inside the appliance's event loop.

Domains contribute jobs as (id, coroutine function, trigger kwargs); billing's
monthly close joins them later. Jobs are kept in memory: each start re-adds
them, and a job's own state lives in the database.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import NamedTuple
from zoneinfo import ZoneInfo

from apscheduler.schedulers.asyncio import AsyncIOScheduler

log = logging.getLogger(__name__)


class PeriodicJob(NamedTuple):
    id: str
    func: Callable[[], Awaitable[object]]
    trigger: str
    trigger_args: dict


def create_scheduler(jobs: list[PeriodicJob], timezone: str) -> AsyncIOScheduler:
    scheduler = AsyncIOScheduler(timezone=ZoneInfo(timezone))
    for job in jobs:
        # coalesce: after a pause run once, not once per missed tick.
        scheduler.add_job(
            job.func, job.trigger, id=job.id, name=job.id, coalesce=True, max_instances=1, **job.trigger_args
        )
    return scheduler
