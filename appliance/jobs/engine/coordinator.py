"""The coordinator: it wires the engine's rooms together and drives them, one scheduling round at
a time (woken by the fleet's events, at least every TICK_SECONDS), and routes the fleet's events to
the room that owns them. The hot path (a task finishing, the next one starting) touches no database,
so it keeps up with thousands of short tasks a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable

from appliance.cloud import service as cloud
from appliance.config import Settings
from appliance.events import EndCause, TaskMessage, WorkerJoined, WorkerLeft
from appliance.fleet import protocol as p
from appliance.fleet.registry import Fleet, Worker
from appliance.jobs import scheduling_policy
from appliance.jobs.engine.admission import Admission
from appliance.jobs.engine.ending import Ending
from appliance.jobs.engine.live import LiveRun, places, stage_name
from appliance.jobs.engine.placement import Placement, Unbind
from appliance.jobs.engine.read_model import ReadModel
from appliance.jobs.engine.recovery import CHECKPOINT_SECONDS, Recovery
from appliance.jobs.engine.reports import Reports
from appliance.jobs.engine.shared import Shared
from appliance.jobs.engine.speculation import Speculation
from appliance.jobs.engine.speeds import time_left
from appliance.jobs.engine.staging import Staging
from appliance.jobs.execution import Task, TaskEvent
from appliance.jobs.logs import FLEET, RunLogs
from appliance.jobs.peers import Peers
from appliance.jobs.scheduling_policy import SchedulingPolicy
from appliance.jobs.spec import JobSpec
from appliance.pmrfs.blobstore import BlobStore
from appliance.pmrfs.namenode import LiveHolders

log = logging.getLogger(__name__)

TICK_SECONDS = 1.0
# A range is split only with more than this left (its input copied, a sandbox, an output of its own
# cost a new task a few tenths of a second, and the rest of what is left goes).
SPLIT_MIN_SECONDS = 0.5


class Coordinator:
    def __init__(
        self,
        fleet: Fleet,
        settings: Settings,
        store: BlobStore,
        live: LiveHolders,
        cloud_keys: cloud.CloudKeys,
        logs: RunLogs,
    ):
        self.fleet = fleet
        self.settings = settings
        self.cloud_keys = cloud_keys
        self.shared = shared = Shared(fleet, settings, logs, scheduling_policy.configured(settings))
        self.peers = Peers(fleet, shared.spawn, settings.job_replacement_grace_seconds)
        self.placement = Placement(shared, self.peers)
        self.ending = Ending(shared, self.placement, self.peers, store, live)
        self.staging = Staging(shared, self.placement, self.ending)
        self.speculation = Speculation(shared, self.placement, self.staging, self.ending)
        self.reports = Reports(shared, self.placement, self.staging, self.ending, self.peers)
        self.admission = Admission(shared, self.placement, self.ending, cloud_keys)
        self.recovery = Recovery(shared, self.placement, self.admission, self.ending)
        self.read = ReadModel(shared, self.admission)
        self.task: asyncio.Task | None = None

    @property
    def policy(self) -> SchedulingPolicy:
        """The queue's and the stragglers' rules in force (Admin → Settings changes them while we run)."""
        return self.shared.policy

    @policy.setter
    def policy(self, policy: SchedulingPolicy) -> None:
        self.shared.policy = policy

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self.shared.policy = await scheduling_policy.in_force(self.settings)
        await self.recovery.recover()
        self.task = asyncio.create_task(self._loop())
        self.shared.background.every(CHECKPOINT_SECONDS, self.recovery.checkpoint)

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.shared.background.cancel()

    async def drain(self, timeout: float) -> None:
        await self.recovery.drain(timeout)

    def serving(self) -> None:
        """The appliance accepts connections: runs re-adopted at its start wait for their workers from now."""
        self.recovery.serving()

    # ------------------------------------------------------------ what the routes ask

    def enqueue(self, run_id: int, owner_id: int, spec: JobSpec) -> None:
        self.admission.enqueue(run_id, owner_id, spec)

    def end_of(self, run_id: int) -> asyncio.Event:
        return self.ending.end_of(run_id)

    async def cancel(self, run_id: int) -> bool:
        """Cancel a queued or running run; False when it is neither."""
        if await self.admission.cancel(run_id):
            return True
        run = self.shared.active.get(run_id)
        if run is None or run.ending:
            return False
        await self.ending.end(run, "cancelled", EndCause.CANCELLED, "cancelled by its coordinator")
        return True

    # ------------------------------------------------------------ fleet events

    def worker_joined(self, event: WorkerJoined) -> None:
        worker = event.worker
        wanted: set[str] = set()
        for run in self.shared.active.values():
            if run.ending:
                continue
            run.execution.transitions.because(f"worker-joined:{worker.worker_id}")
            # After a restart: a returning worker's blobs hold finished tasks' outputs.
            for sha in event.blobs:
                for output in run.durability.restored.get(sha, ()):
                    output.holders.add(worker.worker_id)
            # Not execution.workers(): a set of every rank's worker built again at each hello of a fleet
            # that says hello to a new leader adopting a large run.
            recovering = run.durability.recovering_until and any(
                worker.worker_id in group.ranks for group in run.execution.groups.values()
            )
            if worker.worker_id in run.seats.away or recovering:
                self.placement.rebind(run, worker)
                wanted |= self._resume(run, worker.worker_id, set(event.tasks))
            self.shared.deliver(run)
        for task_id in set(event.tasks) - wanted:
            # Its page still runs (or has the result of) an attempt nobody wants now: it drops it.
            self.shared.send(worker, p.TaskCancel(task_id=task_id))
        self.shared.wake.set()

    def _resume(self, run: LiveRun, worker_id: str, held: set[str]) -> set[str]:
        """A worker of the run is back: its attempts its page still has go on (their reports follow;
        one racing a stand-in, the first to finish wins); the others end, and their backups go on
        in their place. Returns the ids that go on."""
        going = set()
        for attempt in [t for t in run.execution.active if t.worker_id == worker_id]:
            if attempt.id in held and attempt.state == "running":
                going.add(attempt.id)
                self.shared.logs.add(run.run_id, f"worker {worker_id} is back: {run.where(attempt)} goes on there")
            elif attempt.is_backup:
                self.placement.drop_extra(run, attempt, TaskEvent.CANCEL, "its page no longer had it")
            else:
                # Its page started again: what it ran is gone, and so is what it sent the other ranks.
                self.shared.logs.add(run.run_id, f"worker {worker_id} is back without {run.where(attempt)}")
                run.execution.abandon(attempt, TaskEvent.CANCEL, "its page no longer had it")
                if attempt.stage in run.execution.talking:
                    self.placement.tell_loss(run, attempt.group, attempt.rank, "its page started again")
        return going

    def worker_left(self, event: WorkerLeft) -> None:
        worker = event.worker
        run = self.shared.active.get(worker.run_id) if worker.run_id is not None else None
        if self.shared.draining:
            return  # the appliance stops and closes every connection: the runs continue at the next start
        if run is not None and not run.ending:
            run.execution.transitions.because(f"worker-left:{worker.worker_id}")
            self._left(run, worker)
            self.shared.deliver(run)
        self.shared.wake.set()

    def _left(self, run: LiveRun, worker: Worker) -> None:
        """A worker of the run disconnected. A rank's task that was running starts again at once on an
        idle worker, as a backup (if the browser comes back with its page still running it, the first
        to finish wins), unless it is a range the run's workers can share (_spread_range); a stage
        whose ranks talk to each other starts again with a replacement. With no idle worker, the rank
        waits up to the reconnect grace for its browser."""
        holds_rank = run.execution.rank_of(worker.worker_id) is not None
        running = [t for t in run.execution.active if t.worker_id == worker.worker_id and t.state == "running"]
        if not (holds_rank and running):
            again = self.placement.unbind(run, worker.worker_id, Unbind.DISCONNECTED, "disconnected")
            if again and not holds_rank:  # a rank's loss is logged with its rank (Placement._vacate)
                self.shared.logs.add(
                    run.run_id,
                    f"worker {worker.worker_id} disconnected holding what no other worker had: "
                    f"{places(run.execution, again)} run again",
                    level="warn",
                    source=FLEET,
                )
            return
        task = running[0]
        grace = self.settings.job_reconnect_grace_seconds
        if (backup := run.execution.backups.get(task)) is not None:
            run.seats.away[worker.worker_id] = time.monotonic()
            self.shared.logs.add(
                run.run_id,
                f"worker {worker.worker_id} disconnected while running {run.where(task)}: its backup attempt on "
                f"worker {backup.worker_id} stands in for it (if the browser comes back within {grace} s, the "
                "first to finish wins)",
                level="warn",
                source=FLEET,
            )
            return
        if self._spread_range(run, worker, task):
            return
        if self.speculation.stand_in(run, task):
            run.seats.away[worker.worker_id] = time.monotonic()
            return
        if task.stage in run.execution.talking and self.placement.idle_worker(run) is not None:
            self.placement.unbind(run, worker.worker_id, Unbind.DISCONNECTED, "disconnected (a replacement was idle)")
            return
        # Its page runs on and reports when it reconnects; the rank waits for it a while.
        run.seats.away[worker.worker_id] = time.monotonic()
        self.shared.logs.add(
            run.run_id,
            f"worker {worker.worker_id} disconnected while running {run.where(task)}; "
            f"its rank waits up to {grace} s for it",
            level="warn",
            source=FLEET,
        )

    def _spread_range(self, run: LiveRun, worker: Worker, task: Task) -> bool:
        """A range whose browser left, with no spare outside the run to stand in for it: its chunks wait
        again, and the run's workers share them as they free up (RunExecution._claim), instead of one
        running the whole range as a backup or all waiting out the reconnect grace. A browser back
        within the grace takes its rank's next waiting task; its old attempt's report is not wanted."""
        execution = run.execution
        if not execution.splittable(task):
            return False
        if (spare := self.placement.extra_worker(run, task)) is not None and spare.run_id is None:
            return False  # a spare in no run stands in for it (stand_in): the first to finish wins
        where = run.where(task)
        run.seats.away[worker.worker_id] = time.monotonic()
        execution.retry(task, TaskEvent.WORKER_LOST, "its browser left")
        self.shared.logs.add(
            run.run_id,
            f"worker {worker.worker_id} disconnected while running {where}: its chunks wait for the run's "
            f"free workers (if the browser comes back within {self.settings.job_reconnect_grace_seconds} s, "
            "it takes its rank's next task)",
            level="warn",
            source=FLEET,
        )
        return True

    def task_message(self, event: TaskMessage) -> None:
        self.reports.task_message(event)

    # ------------------------------------------------------------ the loop

    async def _loop(self) -> None:
        shared = self.shared
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TICK_SECONDS):  # no task a round, as wait_for makes
                    await shared.wake.wait()
            shared.wake.clear()
            try:
                if not shared.draining:
                    await self.admission.start_queued()
                for run in list(shared.active.values()):
                    await self._drive(run)
            except Exception:
                log.exception("scheduling round failed; retrying")

    async def _drive(self, run: LiveRun) -> None:
        """One round of a run: workers back or gone, vacancies, timeouts, the end, and the next tasks."""
        if run.ending:
            return
        if run.broken:
            await self.ending.end(run, "failed", EndCause.ENGINE_ERROR, f"the engine broke an invariant: {run.broken}")
            return
        clock = time.monotonic()
        run.execution.transitions.because("round")
        if run.durability.recovering_until and not self.recovery.recovered(run, clock):
            return
        self._give_up_on_away(run, clock)
        self.placement.fill_vacancies(run)
        self.placement.spread(run)
        if await self._out_of_time(run, clock):
            return
        self._time_out_idle(run, clock)
        self.shared.deliver(run)
        if run.execution.finished():
            run.ending = True
            self.shared.spawn(self.ending.succeed(run))
            return
        if self.shared.draining:
            return  # stopping: the running tasks finish, nothing starts
        for task, worker_id in run.execution.ready(self.shared.speeds.of, run.seats.away, self._splits(run, clock)):
            run.execution.start(task, worker_id)
            if not self.staging.launch_at_once(run, task):
                self.shared.spawn(self.staging.launch(run, task))
        await self.speculation.look(run, clock)
        self.shared.deliver(run)

    def _splits(self, run: LiveRun, clock: float) -> Callable[[Task], tuple[float, float] | None]:
        """How a range splits: (the seconds it has left, the share of its chunks it keeps), or None when
        too little is left for a task of the rest (its input copied, a sandbox, an output of its own)
        to pay. It keeps a share in proportion to its pace against a typical browser's: half when they
        are alike (work stealing by halves), its current chunk alone when it is ten times slower.
        Not known yet (no task of its stage finished, nothing read): half."""
        speeds, execution = self.shared.speeds, run.execution

        def split(task: Task) -> tuple[float, float] | None:
            per_record = speeds.seconds_per_record(execution, task)
            whole = None if per_record is None else per_record * task.work
            if (left := time_left(speeds, task, clock, whole)) is None:
                return math.inf, 0.5
            if left <= SPLIT_MIN_SECONDS:
                return None
            rest = task.work - task.read
            typical = per_record * rest if per_record and rest > 0 else None
            return left, 0.5 if typical is None else min(0.5, typical / (typical + left))

        return split

    def _give_up_on_away(self, run: LiveRun, clock: float) -> None:
        grace = self.settings.job_reconnect_grace_seconds
        for worker_id, since in list(run.seats.away.items()):
            if clock - since > grace:
                del run.seats.away[worker_id]
                self.placement.unbind(run, worker_id, Unbind.DISCONNECTED, "disconnected and did not come back")

    async def _out_of_time(self, run: LiveRun, clock: float) -> bool:
        """End the run when a rank stayed vacant past the replacement grace or a stage past its timeout."""
        grace = self.settings.job_replacement_grace_seconds
        for place, since in list(run.seats.vacant_since.items()):
            if clock - since > grace:
                cause, reason = self._vacancy_reason(run, *place)
                await self.ending.end(run, "failed", cause, reason)
                return True
        overdue = run.execution.overdue_stage(clock)
        if overdue is not None:
            group, stage = overdue
            reason = (
                f"{stage_name(run.execution, stage)} of group {group} exceeded its timeout of "
                f"{run.execution.stage_timeout(stage)} s"
            )
            await self.ending.end(run, "failed", EndCause.STAGE_TIMEOUT, reason)
            return True
        return False

    def _vacancy_reason(self, run: LiveRun, group: str, rank: int) -> tuple[EndCause, str]:
        grace = self.settings.job_replacement_grace_seconds
        durability = run.durability
        if (group, rank) not in durability.not_back:
            cause, reason = EndCause.WORKER_LOST, f"rank {rank} of group {group} lost its worker"
        else:
            cause = EndCause.APPLIANCE_RESTART
            reason = f"the worker of rank {rank} of group {group} did not come back after the appliance restarted"
        reason += f" and no eligible worker became free within {grace} s"
        if run.execution.talking:
            reason += " (its stages talk to other ranks: each rank needs a worker of its own)"
        if (group, rank) in durability.not_back and durability.lost_in_restart:
            reason += f"; lost with the workers that did not come back: {durability.lost_in_restart}"
        return cause, reason

    def _time_out_idle(self, run: LiveRun, clock: float) -> None:
        """Attempts past their worker timeout without an emit: a backup ends, a rank's worker is sent away."""
        for task in run.execution.idle_too_long(clock):
            if task.is_backup:
                self.placement.drop_extra(run, task, TaskEvent.CANCEL, "past its worker timeout without an emit")
                continue
            self.shared.logs.add(
                run.run_id,
                f"worker {task.worker_id} ran {stage_name(run.execution, task.stage)} on rank {task.rank} of group "
                f"{task.group} for {task.worker_timeout:.0f} s without an emit (its worker timeout); "
                "another worker takes over its rank",
                level="warn",
            )
            self.placement.unbind(run, task.worker_id or "", Unbind.TIMED_OUT, running=task)
