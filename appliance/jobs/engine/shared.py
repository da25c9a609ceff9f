"""What every room of the engine shares: the fleet, the rules in force, the runs, and the outbox."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field

from appliance.background import BackgroundTasks
from appliance.config import Settings
from appliance.fleet import protocol as p
from appliance.fleet.registry import Fleet, Worker
from appliance.jobs import invariants, selection
from appliance.jobs.engine.live import LiveRun
from appliance.jobs.engine.speeds import Speeds
from appliance.jobs.logs import RunLogs
from appliance.jobs.scheduling_policy import SchedulingPolicy
from appliance.jobs.spec import JobSpec

log = logging.getLogger(__name__)


@dataclass
class Shared:
    fleet: Fleet
    settings: Settings
    logs: RunLogs
    # The queue's and the stragglers' rules in force (Admin → Settings changes them while we run).
    policy: SchedulingPolicy
    background: BackgroundTasks = field(default_factory=lambda: BackgroundTasks("coordinator"))
    active: dict[int, LiveRun] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    draining: bool = False  # stopping: no run or task starts
    speeds: Speeds = field(default_factory=Speeds)
    # A run's end deletes its checkpoint: never while one is being written.
    checkpointing: asyncio.Lock = field(default_factory=asyncio.Lock)

    def spawn(self, coro: Coroutine, group: set[asyncio.Task] | None = None) -> asyncio.Task:
        return self.background.spawn(coro, group)

    def send(self, to: Worker | str | None, message: object) -> None:
        """The outbox: rooms decide what a worker is told, and it goes out here, in the background
        (a worker that left meanwhile is skipped: its leaving is handled on its own)."""
        worker = self.fleet.get(to or "") if not isinstance(to, Worker) else to
        if worker is not None and (worker.send_now is None or not worker.send_now(message)):
            self.spawn(worker.send(message))

    def deliver(self, run: LiveRun) -> None:
        """After each step of the engine: send what the run's execution decided (take_cancels: pages
        drop attempts no longer wanted; take_splits: ranges asked to split), and with
        ``engine_checks`` check its invariants."""
        for task_id, worker_id in run.execution.take_cancels():
            self.send(worker_id, p.TaskCancel(task_id=task_id))
        for task_id, worker_id, before in run.execution.take_splits():
            self.send(worker_id, p.TaskSplit(task_id=task_id, before=before))
        if self.settings.engine_checks and not run.ending and not run.broken:
            try:
                invariants.check(run.execution)
            except invariants.InvariantBroken as exc:
                log.error("%s (after %s)", exc, run.execution.transitions.stimulus)
                run.broken = f"{exc} (after {run.execution.transitions.stimulus})"  # the next round ends the run
                self.wake.set()

    def eligible(self, worker: Worker, spec: JobSpec, owner_id: int) -> bool:
        """May run this run's tasks, under the admin's rule on software GPUs."""
        return selection.eligible(worker, spec, owner_id, self.policy.software_gpus)
