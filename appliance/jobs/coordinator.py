"""The scheduler loop of jobs/: one FIFO queue, the runs in progress, and the workers' task messages.

State that must survive a restart lives in the database: the queue is the ``queued`` runs, a
running run's progress is checkpointed every second (checkpoints.py) and re-adopted at the next
start, a run's outcome, tasks and logs are written when it ends. Everything else is in memory and
rebuilt from the fleet. The hot path (a task finishing, the next one starting) touches no database,
so the coordinator keeps up with thousands of short tasks a second.

Queue rules (in this order, each round):
- a run queued longer than its queue timeout fails;
- fair share: while another account's run waits (one that the connected workers could run), an
  account's runs may not start beyond ``job_fair_share`` of the connected workers;
- runs start in the order they were queued. A run that the connected workers could run once their
  current runs end keeps its eligible idle workers: a run further back may start only with workers
  that no run ahead of it could use (so a GPU run waiting for WebGPU browsers does not hold up CPU
  runs, and a large run is not starved by small ones). A run asking more eligible workers than
  are connected keeps none (back-fill): it cannot start anyway, and it gets them first as soon as
  enough are connected.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import itertools
import logging
import re
import time
from collections import Counter
from dataclasses import dataclass, field

import msgspec

from appliance.background import BackgroundTasks
from appliance.clock import now
from appliance.cloud import service as cloud
from appliance.config import Settings
from appliance.events import EndCause, RunEnded, TaskMessage, WorkerJoined, WorkerLeft
from appliance.fleet import protocol as p
from appliance.fleet.registry import Fleet, Worker, copy_timeout
from appliance.fleet.transfers import TransferTag
from appliance.jobs import checkpoints, parameters, scheduling_policy, selection
from appliance.jobs.copy_failures import CopyFailures
from appliance.jobs.execution import INPUT_STAGE, SHUFFLE_TYPE, Output, RunExecution, Task, TaskEvent, stage_label
from appliance.jobs.logs import RunLogs
from appliance.jobs.metrics import QUEUE_WAIT, TASK_FAILURES, TASKS_DONE, failure_cause
from appliance.jobs.paramserver import ParameterServer
from appliance.jobs.peers import Mailbox, Peers
from appliance.jobs.sandbox_policy import allowed_origins, warm_sandbox_url
from appliance.jobs.sandbox_script import first_place, map_stack
from appliance.jobs.spec import JobSpec
from appliance.jobs.tables import Run, RunCheckpoint, RunOutput, RunTask
from appliance.pmrfs import namenode
from appliance.pmrfs import service as pmrfs
from appliance.pmrfs.blobstore import BlobStore
from appliance.pmrfs.namenode import LiveHolders

log = logging.getLogger(__name__)

TICK_SECONDS = 1.0
# Stragglers are a matter of seconds: a run is looked over for them at most this often, not at
# every scheduling round (thousands a second while short tasks finish).
STRAGGLER_SCAN_SECONDS = 0.5
# How often running runs' progress is written (at most; only runs that changed). Parameter-server
# values, which may be large, are written as often, but never spending more than a tenth of the time.
CHECKPOINT_SECONDS = 1.0
PS_CHECKPOINT_SHARE = 0.1
MAX_PARALLEL_COPIES = 8
# Times a group's stage may start again after a rank was lost mid-collective.
MAX_PEER_RESTARTS = 3
# A run's task history (one row per attempt), written when it ends; 15 values a row keep an INSERT
# under SQLite's and asyncpg's limits of 32,766 parameters.
TASK_COLUMNS = (
    "run",
    "group",
    "stage",
    "rank",
    "attempt",
    "worker_id",
    "worker_account",
    "state",
    "started_at",
    "finished_at",
    "emits",
    "bytes_out",
    "cpu_ms",
    "error",
    "gpu_adapter",
)
TASK_ROWS_PER_INSERT = 1000
_QUOTED_TASK_COLUMNS = ", ".join(f'"{c}"' for c in TASK_COLUMNS)  # "group" is an SQL keyword
_TASK_INSERT = f"INSERT INTO {RunTask._meta.tablename} ({_QUOTED_TASK_COLUMNS}) VALUES "
_TASK_ROW = "(" + ", ".join(["{}"] * len(TASK_COLUMNS)) + ")"


@dataclass
class Queued:
    run_id: int
    owner_id: int
    spec: JobSpec
    queued_at: dt.datetime
    reason: str = ""


@dataclass
class Active:
    run_id: int
    owner_id: int
    spec: JobSpec
    execution: RunExecution
    origins: list[str]
    storage: cloud.CloudStorage | None = None
    vacant_since: dict[tuple[str, int], float] = field(default_factory=dict)
    # Workers sent away from this run (they timed out or misbehaved): not taken back.
    excluded: set[str] = field(default_factory=set)
    copy_failures: CopyFailures = field(init=False)
    put_keys: dict[str, int] = field(default_factory=dict)
    ending: bool = False
    # Worker id -> account of every worker that held a rank or ran a backup attempt (task rows and
    # billing need it after it left).
    accounts: dict[str, int] = field(default_factory=dict)
    # Worker id -> its WebGPU adapter ("" without one), for the task rows (the run page's "which adapter").
    adapters: dict[str, str] = field(default_factory=dict)
    # Workers holding no rank that run a backup attempt of this run (busy for it meanwhile).
    helpers: set[str] = field(default_factory=set)
    scanned_at: float = 0.0  # when _watch_stragglers last looked
    # Ranks talking to ranks (jobs/peers.py): indirect messages, and the parameter server.
    mail: Mailbox = field(default_factory=Mailbox)
    params: ParameterServer | None = None
    # Per group: the epoch (a count of ranks lost), when a rank was last lost, and the stage restarts.
    epochs: dict[str, int] = field(default_factory=dict)
    lost_at: dict[str, float] = field(default_factory=dict)
    peer_restarts: dict[tuple[str, int], set[int]] = field(default_factory=dict)
    # Durable progress (checkpoints.py): the execution's change count when last written (-1: no
    # row yet), and after a restart, until when the run waits for its workers to come back.
    checkpointed: int = -1
    checkpoint_row: bool = False
    params_saved: int = 0  # the parameter server's change count when its values were last written
    params_due: float = 0.0  # when they may be written again
    recovering_until: float = 0.0
    # Rank holders that disconnected while running a task, and since when: their pages run on.
    away: dict[str, float] = field(default_factory=dict)
    # After a restart: the finished tasks' PMRFS outputs by blob, for the workers' hello to claim.
    restored: dict[str, list[Output]] = field(default_factory=dict)
    # The ranks whose workers did not come back after a restart, and the finished work that was lost
    # with them (for the run's failure reason).
    not_back: set[tuple[str, int]] = field(default_factory=set)
    lost_in_restart: str = ""
    # Copies of finished maps' partitions under way to the workers of the ranks that read them
    # (_prestage), by (blob, target worker): the reduce's own staging waits for them.
    prestaging: dict[tuple[str, str], asyncio.Task] = field(default_factory=dict)
    # Streaming reduces (_stream): the attempts whose task-assign went out, and the (attempt,
    # producer rank) whose pieces are on their way to them (_feed).
    streams: set[str] = field(default_factory=set)
    feeding: set[tuple[str, int]] = field(default_factory=set)
    # The write of its start (state running), which its first tasks do not wait for; its end does.
    start_stored: asyncio.Task | None = None

    def __post_init__(self) -> None:
        self.copy_failures = CopyFailures(self.execution.worker_count)

    def joined(self, worker: Worker) -> None:
        """A worker takes a rank or an attempt of this run: remember its account and adapter."""
        self.accounts[worker.worker_id] = worker.account_id
        gpu = worker.capabilities.gpu
        self.adapters[worker.worker_id] = gpu.label if gpu else ""

    @property
    def script_url(self) -> str:
        return f"/worker/runs/{self.run_id}/sandbox.js"

    @functools.cached_property
    def warm_url(self) -> str:
        """The warm sandbox that may load this run's script, or "" (sandbox_routes.warm_sandbox); its
        inputs are fixed when the run starts, so it is worked out once, not at every task-assign."""
        return warm_sandbox_url(self.spec.scripts, self.origins, cloud=self.storage is not None)

    def key_prefix(self) -> str:
        return f"peermr/runs/{self.run_id}"


def _duration(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 60:g} min" if seconds % 60 == 0 else f"{seconds:g} s"


def _places(execution: RunExecution, tasks: list[Task]) -> str:
    """Tasks named by stage and ranks: "stage 1 (map) on ranks 0, 2 of group A; the input function of group A"."""
    ranks: dict[tuple[str, int], list[int]] = {}
    for task in tasks:
        ranks.setdefault((task.group, task.stage), []).append(task.rank)
    return "; ".join(
        _stage_name(execution, stage)
        + ("" if stage == INPUT_STAGE else f" on rank{'s' if len(r) > 1 else ''} {', '.join(map(str, sorted(r)))}")
        + f" of group {group}"
        for (group, stage), r in sorted(ranks.items())
    )


def _stage_name(execution: RunExecution, stage: int) -> str:
    return "the input function" if stage == INPUT_STAGE else f"stage {stage + 1} ({execution.kind(stage)})"


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
        # The queue's and the stragglers' rules in force (Admin → Settings changes them while we run).
        self.policy = scheduling_policy.configured(settings)
        self.store = store
        self.live_holders = live
        self.cloud_keys = cloud_keys
        self.logs = logs
        self.queue: list[Queued] = []
        self.active: dict[int, Active] = {}
        self.wake = asyncio.Event()
        self._ends: dict[int, asyncio.Event] = {}  # run id -> set once its end is stored (end_of)
        self.task: asyncio.Task | None = None
        self.background = BackgroundTasks("coordinator")
        self._spawn = self.background.spawn
        self.peers = Peers(fleet, self._spawn, settings.job_replacement_grace_seconds)
        self._checkpointing = asyncio.Lock()  # a run's end deletes its checkpoint: never mid-write
        self.draining = False  # stopping: no run or task starts (drain)
        self.drained = False  # stopping, and the runs' last checkpoints are written

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self.policy = await scheduling_policy.in_force(self.settings)
        await self._recover()
        self.task = asyncio.create_task(self._loop())
        self._spawn(self._checkpoint_loop())

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.background.cancel()

    async def _recover(self) -> None:
        """After a restart: queued runs stay queued, in order; runs that were running continue from
        their checkpoint (checkpoints.py) once their workers have come back, or the recovery grace
        is over."""
        grace = self.settings.job_recovery_grace_seconds
        running = Run.select(Run.id, Run.owner, Run.spec).where(Run.state == "running").order_by(Run.id)
        for row in await running:
            run = await self._activate(row["id"], row["owner"], msgspec.json.decode(row["spec"], type=JobSpec))
            if run is None:
                continue
            saved = await checkpoints.load(run.run_id)
            kept = 0
            if saved is not None:
                done = checkpoints.restore(run.execution, saved)
                kept = len(done)
                run.checkpoint_row = True
                run.excluded.update(saved.excluded)
                run.accounts.update(saved.accounts)
                # Attempts from before the restart may still be talking: their messages carry an old epoch.
                run.epochs = {g: saved.epochs.get(g, 0) + 1 for g in run.execution.groups}
                for output in (o for t in done for o in t.outputs if run.storage is None):
                    run.restored.setdefault(output.location, []).append(output)
                run.recovering_until = time.monotonic() + grace
                run.params.resume(saved.clocks)
                await parameters.restore(run.run_id, run.params)
                run.params_saved = run.params.changes
            self.active[run.run_id] = run
            self.logs.add(
                run.run_id,
                f"the appliance restarted: the run continues with {kept} finished task(s) kept"
                + (
                    f" once its workers are back (waiting up to {grace} s)" if saved is not None else ", from the start"
                ),
                level="warn",
            )
        queued = Run.select(Run.id, Run.owner, Run.spec, Run.queued_at).where(Run.state == "queued").order_by(Run.id)
        for row in await queued:
            spec = msgspec.json.decode(row["spec"], type=JobSpec)
            self.queue.append(Queued(row["id"], row["owner"], spec, row["queued_at"]))

    def _recovered(self, run: Active, clock: float) -> bool:
        """Whether a run re-adopted after a restart may go on: its workers are back, or the grace is
        over, and then the ranks of those that are not back are vacant and what only they held is
        computed again."""
        execution = run.execution
        missing = sorted(w for w in execution.workers() if self.fleet.get(w) is None)
        if missing and clock < run.recovering_until:
            return False
        run.recovering_until = 0.0
        run.not_back = {place for w in missing if (place := execution.rank_of(w)) is not None}
        again = [task for worker_id in missing for task in execution.lose_worker(worker_id)]
        if not execution.cloud:
            again += execution.recompute_lost()
        for group, rank in execution.vacant_ranks():
            run.vacant_since.setdefault((group, rank), clock)
        run.lost_in_restart = _places(execution, again)
        self.logs.add(
            run.run_id,
            f"recovered after the restart: {len(execution.workers())} worker(s) back"
            + (f"; not back: {', '.join(missing)}" if missing else "")
            + (f"; the output of {run.lost_in_restart} was lost and is computed again" if again else ""),
            level="warn" if missing or again else "info",
        )
        return True

    async def checkpoint(self, final: bool = False) -> None:
        """Write the progress of every run that changed since its last checkpoint (checkpoints.py),
        and its parameter-server values when they are due (PS_CHECKPOINT_SHARE), or all now (``final``)."""
        if self.drained:
            return  # the last one is written: what follows is the stop itself (connections closing)
        clock = time.monotonic()
        async with self._checkpointing:
            for run in list(self.active.values()):
                if run.ending or run.recovering_until:
                    continue
                try:
                    changes = run.execution.changes
                    if changes != run.checkpointed:
                        clocks = run.params.starting_clocks()
                        saved = checkpoints.capture(run.execution, run.epochs, run.excluded, run.accounts, clocks)
                        await checkpoints.save(run.run_id, checkpoints.encode(saved), run.checkpoint_row)
                        run.checkpointed, run.checkpoint_row = changes, True
                    values = run.params.changes
                    if values != run.params_saved and (final or clock >= run.params_due):
                        began = time.monotonic()
                        await parameters.keep(run.run_id, run.params)
                        pause = max(CHECKPOINT_SECONDS, (time.monotonic() - began) / PS_CHECKPOINT_SHARE)
                        run.params_saved, run.params_due = values, began + pause
                except Exception:
                    log.exception("could not write the checkpoint of run %s", run.run_id)

    async def drain(self, timeout: float) -> None:
        """Before a stop: start nothing more, give running tasks up to ``timeout`` seconds to finish,
        and write every run's progress, so the next start continues the runs."""
        self.draining = True
        # Clients waiting on a run are answered now (it is still running), or they would hold up
        # the server's stop, which waits for open requests, for as long as their wait.
        for ended in self._ends.values():
            ended.set()
        self._ends.clear()
        deadline = time.monotonic() + timeout
        log.info("stopping: no new tasks; waiting up to %s s for the running ones", timeout)

        # A run whose last task finished is storing its end: that finishes too. A streaming reduce
        # still waiting for maps is not waited for (a map that has not started never will now): it
        # starts again at the next start.
        def busy(run: Active) -> bool:
            return run.ending or any(not run.execution.waiting_for_input(t) for t in run.execution.active)

        while time.monotonic() < deadline and any(busy(r) for r in self.active.values()):
            await asyncio.sleep(0.2)
        left = sum(len(run.execution.active) for run in self.active.values())
        for run in self.active.values():
            self.logs.add(
                run.run_id,
                "the appliance is stopping: the run continues when it starts again"
                + (f" ({left} task(s) cut short run again)" if left else ""),
                level="warn",
            )
        await self.logs.flush()
        await self.checkpoint(final=True)
        self.drained = True

    async def _checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(CHECKPOINT_SECONDS)
            await self.checkpoint()

    # ------------------------------------------------------------ what the routes call

    def end_of(self, run_id: int) -> asyncio.Event:
        """Set once the run's end is in the database (or at once while the appliance stops): a client
        waits on it instead of polling (take it before reading the run's state, so an end between the
        two is not missed)."""
        if self.draining:
            stopping = asyncio.Event()
            stopping.set()
            return stopping
        return self._ends.setdefault(run_id, asyncio.Event())

    def enqueue(self, run_id: int, owner_id: int, spec: JobSpec, queued_at: dt.datetime | None = None) -> None:
        self.queue.append(Queued(run_id, owner_id, spec, queued_at or now()))
        self.logs.add(run_id, f"queued: needs {selection.needed(spec)} worker(s)")
        self.wake.set()

    async def cancel(self, run_id: int) -> bool:
        """Cancel a queued or running run; False when it is neither."""
        for queued in self.queue:
            if queued.run_id == run_id:
                self.queue.remove(queued)
                self.logs.add(run_id, "cancelled by its coordinator before it started")
                await self._store_end(run_id, "cancelled", EndCause.CANCELLED, "cancelled by its coordinator", [], [])
                return True
        run = self.active.get(run_id)
        if run is None or run.ending:
            return False
        await self._end(run, "cancelled", EndCause.CANCELLED, "cancelled by its coordinator")
        return True

    def position(self, run_id: int) -> int | None:
        """1 for the head of the queue; None when the run is not queued."""
        for index, queued in enumerate(self.queue):
            if queued.run_id == run_id:
                return index + 1
        return None

    def reason(self, run_id: int) -> str | None:
        return next((q.reason for q in self.queue if q.run_id == run_id), None)

    def live(self, run_id: int) -> Active | None:
        return self.active.get(run_id)

    def blobs_in_use(self) -> set[str]:
        """The PMRFS blobs of running runs (their stage outputs, and after a restart those waiting
        for their holders to come back): tabs that reconnect keep them."""
        blobs: set[str] = set()
        for run in self.active.values():
            if run.storage is None:
                blobs.update(run.restored)
                blobs.update(o.location for t in run.execution.all_tasks() for o in t.outputs)
        return blobs

    def allows_sandbox(self, run_id: int, account_id: int) -> bool:
        """Only browsers of an account that holds a rank in the run may load its sandbox script."""
        run = self.active.get(run_id)
        if run is None:
            return False
        return any(
            (w := self.fleet.get(worker_id)) is not None and w.account_id == account_id
            for worker_id in run.execution.workers() | run.helpers
        )

    # ------------------------------------------------------------ fleet events

    def worker_joined(self, event: WorkerJoined) -> None:
        worker = event.worker
        wanted: set[str] = set()
        for run in self.active.values():
            if run.ending:
                continue
            # After a restart: a returning worker's blobs hold finished tasks' outputs.
            for sha in event.blobs:
                for output in run.restored.get(sha, ()):
                    output.holders.add(worker.worker_id)
            back = run.away.pop(worker.worker_id, None) is not None
            if back or (run.recovering_until and worker.worker_id in run.execution.workers()):
                worker.run_id = run.run_id  # its rank waited for it
                run.joined(worker)
                wanted |= self._resume(run, worker.worker_id, set(event.tasks))
        for task_id in set(event.tasks) - wanted:
            # Its page still runs (or has the result of) an attempt nobody wants now: it drops it.
            self._spawn(worker.send(p.TaskCancel(task_id=task_id)))
        self.wake.set()

    def _resume(self, run: Active, worker_id: str, held: set[str]) -> set[str]:
        """A worker of the run is back: its attempts its page still has go on (their reports follow);
        the others run again. Returns the ids that go on."""
        going = set()
        for attempt in [t for t in run.execution.active if t.worker_id == worker_id]:
            if attempt.id in held and attempt.state == "running":
                going.add(attempt.id)
                self.logs.add(run.run_id, f"worker {worker_id} is back: {self._where(run, attempt)} goes on there")
            elif attempt.is_backup:
                self._drop_backup(run, attempt, TaskEvent.CANCEL, "its page no longer had it")
            else:
                run.execution.retry(attempt, TaskEvent.CANCEL, "its page no longer had it")
        return going

    def worker_left(self, event: WorkerLeft) -> None:
        worker = event.worker
        run = self.active.get(worker.run_id) if worker.run_id is not None else None
        if self.draining:
            return  # the appliance stops and closes every connection: the runs continue at the next start
        if run is not None and not run.ending:
            holds_rank = run.execution.rank_of(worker.worker_id) is not None
            running = [t for t in run.execution.active if t.worker_id == worker.worker_id and t.state == "running"]
            if holds_rank and running:
                # Its page runs on and reports when it reconnects; the rank waits for it a while.
                run.away[worker.worker_id] = time.monotonic()
                self.logs.add(
                    run.run_id,
                    f"worker {worker.worker_id} disconnected while running {self._where(run, running[0])}; "
                    f"its rank waits up to {self.settings.job_reconnect_grace_seconds} s for it",
                    level="warn",
                )
            else:
                self._lose(run, worker.worker_id, "disconnected")
        self.wake.set()

    def task_message(self, event: TaskMessage) -> None:
        worker, message = event.worker, event.message
        run = self.active.get(worker.run_id) if worker.run_id is not None else None
        header = message.header if isinstance(message, p.Frame) else message
        task = run.execution.find(header.task_id) if run is not None and not run.ending else None
        if task is None or task.worker_id != worker.worker_id:
            # An attempt that was replaced, or a message for someone else's task: a request gets its answer.
            if isinstance(header, p.TASK_REQUESTS):
                self._spawn(worker.send(p.refusal(header, "this task is not running on this worker")))
            return
        if isinstance(header, p.PEER_REQUESTS):
            if task.is_backup:  # two attempts of one rank cannot both talk to the others
                self._spawn(worker.send(p.refusal(header, "a backup attempt does not talk to other ranks")))
                run.execution.unspeculated.add(task.stage)
                self._drop_backup(run, task, TaskEvent.CANCEL, "its stage talks to other ranks: no backups")
                return
            self.peers.handle(run, task, worker, message)
            return
        if isinstance(message, p.TaskProgress):
            self._progressed(run, task, message)
        elif isinstance(message, p.TaskLog):
            for line in message.lines:
                self.logs.add(
                    run.run_id,
                    map_stack(line.text, run.run_id, run.spec),
                    source=worker.worker_id,
                    level=line.level,
                    group=task.group,
                    rank=task.rank,
                    at=dt.datetime.fromtimestamp(line.at / 1000, dt.UTC),
                )
        elif isinstance(message, p.TaskWorkerTimeout):
            task.worker_timeout, task.last_activity = message.seconds, time.monotonic()
        elif isinstance(message, p.TaskPutUrl):
            self._spawn(self._put_url(run, task, worker, message))
        elif isinstance(message, p.TaskDone) and run.execution.waiting_for_input(task):
            self.logs.add(
                run.run_id,
                f"worker {worker.worker_id} reported {self._where(run, task)} done before all its input was sent",
                level="warn",
            )
            TASK_FAILURES.labels("bad_result").inc()
            self._send_away(run, worker.worker_id, task)
        elif (
            isinstance(message, p.TaskDone | p.TaskFailed)
            and task.state != "running"
            and not run.execution.waiting_for_input(task)
        ):
            # A second report of an attempt that already ended (or one that never started): changes nothing.
            self.logs.add(run.run_id, f"worker {worker.worker_id} reported task {task.id} again; ignored", level="warn")
        elif isinstance(message, p.TaskDone):
            self._done(run, task, worker, message)
        elif isinstance(message, p.TaskFailed):
            TASK_FAILURES.labels(failure_cause(message, task.is_backup)).inc()
            if task.is_backup:
                # The original attempt goes on; if the job's code is at fault it fails there too.
                self._drop_backup(run, task, TaskEvent.FAIL, message.error)
            else:
                self._failed(run, task, message)

    def _progressed(self, run: Active, task: Task, message: p.TaskProgress) -> None:
        clock = time.monotonic()
        task.last_activity = clock
        if (message.emits, message.bytes, message.ticks) == (task.emits, task.bytes, task.ticks):
            return
        task.emits, task.bytes, task.ticks, task.progressed_at = message.emits, message.bytes, message.ticks, clock
        if task.stalled:
            task.stalled = False
            self.logs.add(run.run_id, f"{self._where(run, task)} makes progress again", level="info")

    # ------------------------------------------------------------ the loop

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), TICK_SECONDS)
            self.wake.clear()
            try:
                if not self.draining:
                    await self._start_queued()
                for run in list(self.active.values()):
                    await self._drive(run)
            except Exception:
                log.exception("scheduling round failed; retrying")

    def fleet_counts(self, account_id: int) -> selection.FleetCounts:
        present = [w for w in self.fleet.workers.values() if not w.paused]
        return selection.FleetCounts(
            connected=len(present),
            idle=sum(1 for w in present if not w.busy),
            own=sum(1 for w in present if w.account_id == account_id),
            gpu=sum(1 for w in present if selection.has_gpu(w, self.policy.software_gpus)),
        )

    def eligible(self, worker: Worker, spec: JobSpec, owner_id: int) -> bool:
        """May run this run's tasks, under the admin's rule on software GPUs."""
        return selection.eligible(worker, spec, owner_id, self.policy.software_gpus)

    def run_counts(self) -> tuple[int, int]:
        """Runs running and queued now."""
        return len(self.active), len(self.queue)

    def attempts_by_worker(self, worker_id: str) -> dict[int, int]:
        """Run id -> attempts ``worker_id`` ran or runs in the runs in progress (task rows wait for the end)."""
        counts: dict[int, int] = {}
        for run in self.active.values():
            ran = sum(1 for a in run.execution.history if a.worker_id == worker_id)
            ran += sum(1 for t in run.execution.active if t.worker_id == worker_id)
            if ran or worker_id in run.execution.workers():
                counts[run.run_id] = ran
        return counts

    def run_owner(self, run_id: int) -> int | None:
        """The account of a run in progress (None when it is not running)."""
        run = self.active.get(run_id)
        return run.owner_id if run is not None else None

    def placements(self) -> dict[str, tuple[int, str, int]]:
        """Worker id -> (run id, group, rank) of every rank held in the runs in progress."""
        return {
            worker_id: (run.run_id, group.letter, rank)
            for run in self.active.values()
            for group in run.execution.groups.values()
            for rank, worker_id in enumerate(group.ranks)
            if worker_id is not None
        }

    def capacity(self, spec: JobSpec, owner_id: int) -> tuple[int, int]:
        """Workers connected (not paused), and how many of them could run this run (busy or idle)."""
        present = [w for w in self.fleet.workers.values() if not w.paused]
        return len(present), sum(1 for w in present if self.eligible(w, spec, owner_id))

    async def _start_queued(self) -> None:
        await self._expire_queued()
        present = [w for w in self.fleet.workers.values() if not w.paused]
        idle = [w for w in present if not w.busy]
        eligible = {
            q.run_id: {w.worker_id for w in present if self.eligible(w, q.spec, q.owner_id)} for q in self.queue
        }
        # Accounts with a run waiting that the connected workers could run: fair share holds back the others.
        waiting = {q.owner_id for q in self.queue if len(eligible[q.run_id]) >= selection.needed(q.spec)}
        held = Counter(run.owner_id for w in present if (run := self.active.get(w.run_id)) is not None)
        share = self.policy.fair_share
        limit = int(share * len(present))
        claimed: set[str] = set()
        for queued in list(self.queue):
            need = selection.needed(queued.spec)
            usable = [w for w in idle if w.worker_id in eligible[queued.run_id]]
            free = [w for w in usable if w.worker_id not in claimed]
            if share < 1 and waiting - {queued.owner_id} and held[queued.owner_id] + need > limit:
                reason = selection.fair_share_reason(held[queued.owner_id], limit, share, need)
            elif len(free) >= need:
                chosen = selection.ranked(free)[:need]
                self.queue.remove(queued)
                idle = [w for w in idle if all(w is not c for c in chosen)]
                held[queued.owner_id] += need
                await self._begin(queued, chosen)
                continue
            elif len(eligible[queued.run_id]) >= need:
                busy = len(eligible[queued.run_id]) - len(usable)
                reason = selection.wait_reason(queued.spec, len(free), len(usable) - len(free), busy)
                claimed.update(w.worker_id for w in usable)
            else:
                reason = selection.short_reason(queued.spec, len(present), len(eligible[queued.run_id]))
                reason += selection.software_gpu_note(queued.spec, present, self.policy.software_gpus)
            if reason != queued.reason:
                queued.reason = reason
                await Run.update({Run.reason: reason}).where(Run.id == queued.run_id)

    async def _expire_queued(self) -> None:
        """Fail the runs that waited longer than their queue timeout."""
        default = self.policy.queue_timeout_hours * 3600
        at = now()
        for queued in list(self.queue):
            timeout = queued.spec.queue_timeout if queued.spec.queue_timeout is not None else default
            if not timeout or (at - queued.queued_at).total_seconds() <= timeout:
                continue
            self.queue.remove(queued)
            reason = f"not started within its queue timeout of {_duration(timeout)}" + (
                f" ({queued.reason})" if queued.reason else ""
            )
            self.logs.add(queued.run_id, reason, level="error")
            await self._store_end(queued.run_id, "failed", EndCause.QUEUE_TIMEOUT, reason, [], [])

    async def _begin(self, queued: Queued, workers: list[Worker]) -> None:
        run = await self._activate(queued.run_id, queued.owner_id, queued.spec)
        if run is None:
            return
        QUEUE_WAIT.observe((now() - queued.queued_at).total_seconds())
        execution = run.execution
        for index, worker in enumerate(workers):
            group = list(execution.groups)[index // run.spec.worker_count]
            execution.assign(group, index % run.spec.worker_count, worker.worker_id)
            worker.run_id = queued.run_id
        for worker in workers:
            run.joined(worker)
        self.active[run.run_id] = run
        update = Run.update({Run.state: "running", Run.started_at: now(), Run.reason: ""}).where(Run.id == run.run_id)
        run.start_stored = self._spawn(update.run())
        self.logs.add(run.run_id, f"started on {len(workers)} worker(s): " + ", ".join(w.worker_id for w in workers))
        for worker in workers:  # their first tasks find the run's sandbox started
            self._spawn(worker.send(p.TaskPrepare(run_id=run.run_id, script=run.script_url, warm=run.warm_url)))

    async def _activate(self, run_id: int, owner_id: int, spec: JobSpec) -> Active | None:
        """The in-memory state of a run that starts (or continues after a restart); None when it
        cannot run, and has been failed with the reason."""
        storage = None
        if spec.storage_type != "pmrfs":
            storage = await cloud.storage_for(self.cloud_keys, owner_id)
            if storage is None:
                reason = "storage type s3 needs the account's Cloud Data settings (bucket and keys); none are saved"
                await self._store_end(run_id, "failed", EndCause.NO_STORAGE, reason, [], [])
                return None
        execution = RunExecution(run_id, spec, cloud=storage is not None)
        run = Active(run_id, owner_id, spec, execution, await allowed_origins(self.settings), storage)
        run.params = ParameterServer(
            spec.staleness or 0, list(execution.groups), spec.worker_count, self.settings.ps_max_bytes_per_run
        )
        return run

    async def _drive(self, run: Active) -> None:
        if run.ending:
            return
        execution = run.execution
        clock = time.monotonic()
        if run.recovering_until and not self._recovered(run, clock):
            return
        for task_id, worker_id in execution.take_cancels():
            if (worker := self.fleet.get(worker_id)) is not None:
                self._spawn(worker.send(p.TaskCancel(task_id=task_id)))
        for worker_id, since in list(run.away.items()):
            if clock - since > self.settings.job_reconnect_grace_seconds:
                del run.away[worker_id]
                self._lose(run, worker_id, "disconnected and did not come back")
        self._fill_vacancies(run)
        for place, since in list(run.vacant_since.items()):
            if clock - since > self.settings.job_replacement_grace_seconds:
                group, rank = place
                grace = self.settings.job_replacement_grace_seconds
                reason, cause = f"rank {rank} of group {group} lost its worker", EndCause.WORKER_LOST
                if place in run.not_back:
                    reason = (
                        f"the worker of rank {rank} of group {group} did not come back after the appliance restarted"
                    )
                    cause = EndCause.APPLIANCE_RESTART
                reason += f" and no eligible worker became free within {grace} s"
                if place in run.not_back and run.lost_in_restart:
                    reason += f"; lost with the workers that did not come back: {run.lost_in_restart}"
                await self._end(run, "failed", cause, reason)
                return
        overdue = execution.overdue_stage(clock)
        if overdue is not None:
            group, stage = overdue
            await self._end(
                run,
                "failed",
                EndCause.STAGE_TIMEOUT,
                f"{_stage_name(execution, stage)} of group {group} exceeded its timeout of "
                f"{execution.stage_timeout(stage)} s",
            )
            return
        for task in execution.idle_too_long(clock):
            worker_id = task.worker_id or ""
            if task.is_backup:
                self._drop_backup(run, task, TaskEvent.CANCEL, "past its worker timeout without an emit")
                continue
            self.logs.add(
                run.run_id,
                f"worker {worker_id} ran {_stage_name(execution, task.stage)} on rank {task.rank} of group "
                f"{task.group} for {task.worker_timeout:.0f} s without an emit (its worker timeout); "
                "another worker takes over its rank",
                level="warn",
            )
            self._send_away(run, worker_id, task)
        if execution.finished():
            run.ending = True
            self._spawn(self._succeed(run))
            return
        if self.draining:
            return  # stopping: the running tasks finish, nothing starts
        for task in execution.ready():
            execution.start(task)
            self._spawn(self._launch(run, task))
        if clock - run.scanned_at >= STRAGGLER_SCAN_SECONDS:
            run.scanned_at = clock
            self._watch_stragglers(run, clock)
        if execution.validation:
            await self._replicate(run, clock)

    def _watch_stragglers(self, run: Active, clock: float) -> None:
        """Mark tasks stalled, and start backup attempts of stalled and slow ones (speculative execution)."""
        execution = run.execution
        stall = self.policy.stall_seconds
        for task in execution.newly_stalled(stall, clock):
            worker = self.fleet.get(task.worker_id or "")
            if worker is None or not worker.answers(clock):
                continue  # a browser that does not answer either: its connection's silence limit deals with it
            task.stalled = True
            self.logs.add(
                run.run_id,
                f"{self._where(run, task)} is stalled: no progress for {clock - task.progressed_at:.0f} s "
                f"while worker {task.worker_id} still answers",
                level="warn",
            )
        for task, why in [(t, why) for t in list(execution.active) if (why := execution.speculable(t, clock))]:
            helper = self._backup_worker(run, task)
            if helper is None:
                return
            self._start_extra(
                run,
                execution.backup(task, helper.worker_id, clock),
                helper,
                f"{self._where(run, task)} on worker {task.worker_id} is {why}: "
                f"a backup attempt starts on worker {helper.worker_id}",
                level="warn",
            )

    async def _replicate(self, run: Active, clock: float) -> bool:
        """Validation: start the replica attempts validated tasks need; True when the run ended because a
        task's attempts can never agree."""
        execution = run.execution
        for task in [t for t in execution.all_tasks() if t.state in ("staging", "running", "verifying")]:
            for _ in range(execution.replicas_wanted(task)):
                used = {task.worker_id} | {t.worker_id for t in execution.replicas.get(task, [])}
                used |= {r.worker_id for r in execution.results.get(task, [])}
                accounts = set() if run.spec.private_mode else {run.accounts.get(w) for w in used}
                worker = self._backup_worker(run, task, avoid=used, other_accounts=accounts)
                if worker is None:
                    break
                replica = execution.replica(task, worker.worker_id, clock)
                self._start_extra(
                    run,
                    replica,
                    worker,
                    f"{self._where(run, task)}: attempt {replica.attempt} on worker {worker.worker_id} (validation)",
                )
            if (why := execution.disagreement(task)) is not None:
                await self._end(run, "failed", EndCause.VALIDATION_FAILED, f"{self._where(run, task)}: {why}")
                return True
        return False

    def _start_extra(self, run: Active, attempt: Task, worker: Worker, note: str, level: str = "info") -> None:
        """A worker takes an extra attempt (backup or replica) of the run, and it starts."""
        if worker.run_id is None:
            worker.run_id = run.run_id
            run.helpers.add(worker.worker_id)
        run.joined(worker)
        self.logs.add(run.run_id, note, level=level)
        self._spawn(self._launch(run, attempt))

    def _backup_worker(
        self, run: Active, task: Task, avoid: set[str | None] = frozenset(), other_accounts: set = frozenset()
    ) -> Worker | None:
        """An eligible worker with nothing to do: one in no run first, then one of this run whose rank
        has no task ready (it takes its own rank's next task once the race is over), or whose reduce
        waits for its input (the page runs both); one of an account not in ``other_accounts`` first
        when there is such a worker."""
        occupied = {t.worker_id for t in run.execution.active if not run.execution.waiting_for_input(t)}
        candidates = [
            w
            for w in self.fleet.workers.values()
            if not w.paused
            and w.worker_id != task.worker_id
            and w.worker_id not in avoid
            and w.worker_id not in run.excluded
            and (w.run_id is None or (w.run_id == run.run_id and w.worker_id not in occupied))
            and self.eligible(w, run.spec, run.owner_id)
        ]
        return min(
            selection.ranked(candidates),
            key=lambda w: (w.account_id in other_accounts, w.run_id is not None),
            default=None,
        )

    def _drop_backup(self, run: Active, backup: Task, event: TaskEvent, why: str) -> None:
        worker_id = backup.worker_id or ""
        if (worker := self.fleet.get(worker_id)) is not None:
            self._spawn(worker.send(p.TaskCancel(task_id=backup.id)))
        run.execution.drop_backup(backup, event, why)
        self.logs.add(
            run.run_id, f"attempt {backup.attempt} of {self._where(run, backup)} on worker {worker_id} ended: {why}"
        )
        self._release(run, worker_id)

    def _take_off(self, run: Active, worker_id: str, why: str, running: Task | None = None) -> None:
        """A worker that is hung (no progress while it answers pings: a stopped browser process, say)
        or that the run's failed copies point at (jobs/copy_failures.py) leaves the run: its rank
        goes to another worker and what only it held is computed again. ``running``: its attempt
        still under way there, cancelled."""
        if self.fleet.get(worker_id) is None or worker_id in run.excluded:
            return
        self.logs.add(run.run_id, f"worker {worker_id} taken off the run: {why}", level="warn")
        self._send_away(run, worker_id, running)

    def _stalled_on(self, run: Active, task: Task) -> str:
        return f"it made no progress on {self._where(run, task)} while it answered pings"

    def _release(self, run: Active, worker_id: str) -> None:
        """A helper worker whose backup attempt ended is free again."""
        if worker_id in run.helpers and all(t.worker_id != worker_id for t in run.execution.active):
            run.helpers.discard(worker_id)
            worker = self.fleet.get(worker_id)
            if worker is not None and worker.run_id == run.run_id:
                worker.run_id = None
        self.wake.set()

    @staticmethod
    def _where(run: Active, task: Task) -> str:
        return f"{_stage_name(run.execution, task.stage)} on rank {task.rank} of group {task.group}"

    def _fill_vacancies(self, run: Active) -> None:
        for group, rank in run.execution.vacant_ranks():
            candidates = [
                w
                for w in self.fleet.workers.values()
                if selection.available(w)
                and w.worker_id not in run.excluded
                and self.eligible(w, run.spec, run.owner_id)
            ]
            if not candidates:
                run.vacant_since.setdefault((group, rank), time.monotonic())
                continue
            worker = selection.ranked(candidates)[0]
            run.execution.assign(group, rank, worker.worker_id)
            worker.run_id = run.run_id
            run.joined(worker)
            run.vacant_since.pop((group, rank), None)
            self.logs.add(run.run_id, f"worker {worker.worker_id} took over rank {rank} of group {group}")

    def _lose(self, run: Active, worker_id: str, why: str) -> None:
        place = run.execution.rank_of(worker_id)
        again = run.execution.lose_worker(worker_id)
        if place is not None:
            TASK_FAILURES.labels("worker_lost").inc()
            run.epochs[place[0]] = run.epochs.get(place[0], 0) + 1
            run.lost_at[place[0]] = time.monotonic()
            self.peers.rank_lost(run, place[0], place[1], f"its worker {why}")
            run.vacant_since.setdefault(place, time.monotonic())
            self.logs.add(
                run.run_id,
                f"worker {worker_id} (rank {place[1]} of group {place[0]}) {why}; "
                f"{len(again)} task(s) will run again on its replacement",
                level="warn",
            )

    def _send_away(self, run: Active, worker_id: str, task: Task | None) -> None:
        """Take a worker off the run (it timed out or misbehaved) and give its rank to another."""
        worker = self.fleet.get(worker_id)
        if worker is not None:
            if task is not None:
                self._spawn(worker.send(p.TaskCancel(task_id=task.id)))
            worker.run_id = None
        run.excluded.add(worker_id)
        self._lose(run, worker_id, "was taken off the run")
        self.wake.set()

    # ------------------------------------------------------------ running a task

    def _forget_gone_holders(self, inputs: list[Output]) -> bool:
        """Drop holders that are no longer connected; True when some input has none left."""
        for output in inputs:
            output.holders = {h for h in output.holders if self.fleet.get(h) is not None}
        return any(not o.holders for o in inputs)

    def _missing_inputs(self, run: Active, task: Task) -> bool:
        return any(task.worker_id not in o.holders for o in run.execution.inputs(task))

    async def _launch(self, run: Active, task: Task) -> None:
        if run.execution.waiting_for_input(task):
            await self._stream(run, task)
            return
        attempt = task.attempt
        worker = self.fleet.get(task.worker_id or "")
        if worker is None:
            return
        inputs = run.execution.inputs(task)
        if run.storage is None and self._forget_gone_holders(inputs):
            if task.is_backup:
                self._drop_backup(run, task, TaskEvent.INPUT_LOST, "an input was lost with its worker")
                return
            # An input's last holder left before it could be copied: recompute it, then start again.
            run.execution.retry(task, TaskEvent.INPUT_LOST, "an input was lost with its worker")
            again = run.execution.recompute_lost()
            self.logs.add(
                run.run_id, f"an input was lost with its worker; {len(again)} task(s) run again", level="warn"
            )
            self.wake.set()
            return
        if run.storage is None:
            error = await self._stage(run, worker, inputs) if self._missing_inputs(run, task) else None
            if error is not None and await self._copy_failed(run, worker, error):
                return
            if task.attempt != attempt or task.state != "staging":
                # Sent back meanwhile (its worker blamed or lost, an input computed again): it starts
                # again later; a backup's helper is free.
                if task.is_backup:
                    self._release(run, task.worker_id or "")
                return
            if error is not None and task.is_backup:
                self._drop_backup(run, task, TaskEvent.FAIL, f"could not move an input to its worker: {error}")
                if task.primary.stalled and task.primary.state == "running":
                    # What a stalled task's backup cannot copy is likely on the stalled browser itself:
                    # take it off the run, so what only it holds is computed again elsewhere.
                    stalled = task.primary
                    self._take_off(run, stalled.worker_id or "", self._stalled_on(run, stalled), running=stalled)
                return
            if error is not None:
                run.execution.retry(task, TaskEvent.FAIL, error)
                self.wake.set()
                return
            described = [{"sha256": o.location, "size": o.size} for o in inputs]
        else:
            described = [{"url": cloud.presign_get(run.storage, o.location)} for o in inputs]
        run.execution.running(task)
        if not task.is_backup:
            run.params.task_started(task.group, task.rank, replacement=task.attempt > 0)
        try:
            await worker.send(self._assignment(run, task, described))
        except Exception:
            return  # the socket closed; worker_left reschedules the task

    async def _copy_failed(self, run: Active, worker: Worker, error: str) -> bool:
        """An input could not be copied to ``worker``: note it, take off the workers the run's failed
        copies point at; True when there were too many and the run ended."""
        self.logs.add(run.run_id, f"could not move an input to worker {worker.worker_id}: {error}", level="warn")
        blamed = run.copy_failures.to_blame()
        if run.copy_failures.limit_reached():
            await self._end(
                run, "failed", EndCause.TRANSFER_FAILED, f"inputs could not be moved between workers: {error}"
            )
            return True
        for culprit, why in blamed.items():
            running = next((t for t in run.execution.active if t.worker_id == culprit), None)
            self._take_off(run, culprit, why, running)
        return False

    def _assignment(self, run: Active, task: Task, described: list[dict], awaiting: list[int] = ()) -> p.TaskAssign:
        stage = task.stage
        return p.TaskAssign(
            task_id=task.id,
            run_id=run.run_id,
            script=run.script_url,
            warm=run.warm_url,
            kind=run.execution.kind(stage),
            stage=stage,
            group=task.group,
            rank=task.rank,
            worker_count=run.execution.worker_count,
            partitioning=run.execution.partitioning(stage),
            input_content_type=run.execution.wire_type(stage - 1) if stage != INPUT_STAGE else "application/json",
            output_content_type=run.execution.wire_type(stage),
            combine=stage < run.execution.last_stage and run.spec.stages[stage + 1].combine,
            prepare_next=stage < run.execution.last_stage and not task.is_backup,
            inputs=described,
            wasm={w.name: w.url for w in run.spec.wasm_binaries},
            storage="pmrfs" if run.storage is None else "s3",
            worker_timeout=task.worker_timeout,
            fetch_origins=run.origins,
            seed=run.spec.seed or 0,
            staleness=run.spec.staleness or 0,
            epoch=run.epochs.get(task.group, 0),
            awaiting=list(awaiting),
        )

    # ------------------------------------------------------------ a streaming reduce

    async def _stream(self, run: Active, task: Task) -> None:
        """A reduce whose rank's map is done starts while other maps still run: its task-assign names
        the pieces its worker holds now, and _feed sends each other producer's pieces once that
        producer is done and they are copied, so the page decodes them while the shuffle goes on."""
        execution = run.execution
        worker = self.fleet.get(task.worker_id or "")
        if worker is None:
            return
        described = []
        for producer in execution.producers(task):
            pieces = execution.pieces(task, producer)
            if producer.state == "done" and all(worker.worker_id in o.holders for o in pieces):
                described += [{"sha256": o.location, "size": o.size, "producer": producer.rank} for o in pieces]
                execution.fed(task, producer.rank)
        if not task.awaiting:
            execution.running(task)  # every map finished in the meantime
        run.params.task_started(task.group, task.rank, replacement=task.attempt > 0)
        try:
            await worker.send(self._assignment(run, task, described, sorted(task.awaiting)))
        except Exception:
            return  # the socket closed; worker_left reschedules the task
        run.streams.add(task.id)
        for producer in execution.producers(task):
            if producer.state == "done":
                self._spawn(self._feed(run, task, producer))

    def _feed_consumers(self, run: Active, producer: Task) -> None:
        """A map is done: the streaming reduces waiting for it get its pieces."""
        execution = run.execution
        if execution.partitioning(producer.stage) != "hash":
            return
        for rank in range(execution.worker_count):
            consumer = execution.task(producer.group, producer.stage + 1, rank)
            if consumer.id in run.streams:
                self._spawn(self._feed(run, consumer, producer))

    async def _feed(self, run: Active, task: Task, producer: Task) -> None:
        """Copy a done producer's pieces to a streaming reduce's worker (unless there already or on
        their way, _prestage), then tell its page (task-input). A copy that fails sends the reduce
        back to wait, as a failed copy before a task-assign would."""
        key = (task.id, producer.rank)
        worker = self.fleet.get(task.worker_id or "")
        if key in run.feeding or worker is None or producer.rank not in task.awaiting:
            return
        execution, attempt, outputs = run.execution, task.attempt, producer.outputs
        run.feeding.add(key)
        try:
            pieces = execution.pieces(task, producer)
            if self._forget_gone_holders(pieces):
                again = execution.recompute_lost()  # the map runs again; its pieces come when it is done
                self.logs.add(
                    run.run_id, f"an input was lost with its worker; {len(again)} task(s) run again", level="warn"
                )
                self.wake.set()
                return
            error = await self._stage(run, worker, pieces)
            if task.attempt != attempt or not execution.waiting_for_input(task) or producer.outputs is not outputs:
                return  # sent back meanwhile, or the map ran again (its new pieces come when it is done)
            if error is not None:
                if not await self._copy_failed(run, worker, error) and task.attempt == attempt:
                    execution.retry(task, TaskEvent.FAIL, error)
                    self.wake.set()
                return
            if execution.fed(task, producer.rank):
                execution.running(task)
            described = [{"sha256": o.location, "size": o.size} for o in pieces]
            with contextlib.suppress(Exception):  # the socket closed; worker_left reschedules the task
                await worker.send(p.TaskInput(task_id=task.id, producer=producer.rank, inputs=described))
        finally:
            run.feeding.discard(key)

    def _prestage(self, run: Active, task: Task) -> None:
        """A task whose output feeds a reduce is done: copy each of its partitions now to the worker of
        the rank that reads it, while the stage's other tasks still run, so the shuffle overlaps the
        stage and the reduce starts with most of its input in place. Best effort: a copy that fails
        here is made (and blamed) by the reduce's own staging."""
        execution = run.execution
        if run.storage is not None or self.draining or execution.partitioning(task.stage) != "hash":
            return
        ranks = execution.groups[task.group].ranks
        for output in task.outputs:
            target = self.fleet.get(ranks[output.partition] or "")
            key = (output.location, target.worker_id if target is not None else "")
            if target is None or target.worker_id in output.holders or key in run.prestaging:
                continue
            run.prestaging[key] = self._spawn(self._prestage_copy(run, output, target, key))

    async def _prestage_copy(self, run: Active, output: Output, target: Worker, key: tuple[str, str]) -> None:
        try:
            for holder in sorted(output.holders):
                source = self.fleet.get(holder)
                if source is None:
                    continue
                tag = TransferTag(account=run.owner_id, run=run.run_id, private=run.spec.private_mode)
                timeout = copy_timeout(output.size)
                if await self.fleet.copy_blob(output.location, output.size, source, target, timeout, tag):
                    # Unless the target left the run meanwhile (lineage forgot it as a holder).
                    if self.fleet.get(target.worker_id) is target and target.worker_id not in run.excluded:
                        output.holders.add(target.worker_id)
                    return
        finally:
            run.prestaging.pop(key, None)

    async def _stage(self, run: Active, target: Worker, inputs: list[Output]) -> str | None:
        """Copy the inputs the target does not hold from a worker that does; None when all arrived,
        otherwise what went wrong."""
        limit = asyncio.Semaphore(MAX_PARALLEL_COPIES)
        tag = TransferTag(account=run.owner_id, run=run.run_id, private=run.spec.private_mode)  # billed to the run

        async def fetch(output: Output) -> str | None:
            if (early := run.prestaging.get((output.location, target.worker_id))) is not None:
                await asyncio.wait([early])  # already on its way (_prestage); it may fail, then we copy
                if target.worker_id in output.holders:
                    return None
            async with limit:
                holders = [h for h in sorted(output.holders) if self.fleet.get(h) is not None]
                for holder in holders:
                    source = self.fleet.get(holder)
                    if source is None:
                        continue
                    timeout = copy_timeout(output.size)
                    if await self.fleet.copy_blob(output.location, output.size, source, target, timeout, tag):
                        output.holders.add(target.worker_id)
                        return None
                    run.copy_failures.record(holder, target.worker_id)
                return f"blob {output.location} could not be copied from {', '.join(holders) or 'any worker'}"

        missing = [o for o in inputs if target.worker_id not in o.holders]
        errors = [e for e in await asyncio.gather(*(fetch(o) for o in missing)) if e is not None]
        return errors[0] if errors else None

    async def _put_url(self, run: Active, task: Task, worker: Worker, message: p.TaskPutUrl) -> None:
        if run.storage is None:
            error = "this run stores its data in PMRFS"
        else:
            error = self._partition_problem(run, task, message.partition)
        if error:
            await worker.send(p.TaskPutUrlReply(reply_to=message.id, error=error))
            return
        seq = run.put_keys.get(task.id, 0)
        run.put_keys[task.id] = seq + 1
        key = f"{self._task_prefix(run, task)}/part-{message.partition:05d}-{seq:05d}"
        url = cloud.presign_put(run.storage, key)
        await worker.send(p.TaskPutUrlReply(reply_to=message.id, url=url, key=key))

    def _task_root(self, run: Active, task: Task) -> str:
        return f"{run.key_prefix()}/{task.group}/{stage_label(task.stage)}/rank-{task.rank:05d}"

    def _task_prefix(self, run: Active, task: Task) -> str:
        return f"{self._task_root(run, task)}/attempt-{task.attempt}"

    def _done(self, run: Active, task: Task, worker: Worker, message: p.TaskDone) -> None:
        problem = self._check_outputs(run, task, message.outputs)
        if problem:
            self.logs.add(run.run_id, f"worker {worker.worker_id} reported a bad result ({problem})", level="warn")
            TASK_FAILURES.labels("bad_result").inc()
            self._send_away(run, worker.worker_id, None)
            return
        outputs = [
            Output(
                o.partition,
                o.sha256 or o.key or "",
                o.size,
                o.records,
                set() if run.storage else {worker.worker_id},
            )
            for o in message.outputs
        ]
        TASKS_DONE.inc()
        execution = run.execution
        recorded = len(execution.history)
        # Attempts of this task stalled now: if another attempt decides it, their browser is hung.
        primary = task.primary or task
        backup = execution.backups.get(primary)
        racing = [primary, *([backup] if backup else []), *execution.replicas.get(primary, [])]
        stalled = {a.id for a in racing if a is not task and a.stalled}
        stopped = execution.done(task, outputs, message.emits, message.cpu_ms)
        if primary.state == "done":
            self._prestage(run, primary)
            self._feed_consumers(run, primary)
        for rejected in [a for a in execution.history[recorded:] if a.state == "rejected"]:
            self.logs.add(
                run.run_id,
                f"{self._where(run, task)}: the output of attempt {rejected.attempt} on worker {rejected.worker_id} "
                f"is rejected: {rejected.error}",
                level="warn",
            )
        for loser_id, loser_worker in stopped:
            # Another attempt of the task is no longer wanted: stop it; its output is never used.
            if (loser := self.fleet.get(loser_worker)) is not None:
                self._spawn(loser.send(p.TaskCancel(task_id=loser_id)))
            self.logs.add(
                run.run_id,
                f"{self._where(run, task)}: attempt {task.attempt} on worker {task.worker_id} "
                f"{'gave the output the others agreed on' if run.execution.validated(task) else 'finished first'}; "
                f"attempt {loser_id.rsplit('.', 1)[1]} on worker {loser_worker} is cancelled",
            )
            self._release(run, loser_worker)
            if loser_id in stalled:
                self._take_off(run, loser_worker, self._stalled_on(run, task))
            elif worker.worker_id in run.helpers and run.execution.rank_of(loser_worker) == (task.group, task.rank):
                self._hand_over(run, task, loser_worker, worker)
        self._release(run, worker.worker_id)
        if task.primary is None:
            run.params.task_ended(task.group, task.rank)
        self.wake.set()

    def _hand_over(self, run: Active, task: Task, slow_id: str, winner: Worker) -> None:
        """A helper outran the rank's own worker: it keeps the rank, whose next task then finds its
        input where it is, and the slower browser is free for other runs."""
        run.execution.assign(task.group, task.rank, winner.worker_id)
        run.helpers.discard(winner.worker_id)
        slow = self.fleet.get(slow_id)
        if slow is not None and slow.run_id == run.run_id:
            slow.run_id = None
        self.logs.add(
            run.run_id,
            f"rank {task.rank} of group {task.group} moves to worker {winner.worker_id}, which outran {slow_id}",
        )

    def _check_outputs(self, run: Active, task: Task, outputs: list[p.TaskOutput]) -> str | None:
        """What is wrong with a task's reported outputs, or None."""
        for o in outputs:
            if problem := self._partition_problem(run, task, o.partition):
                return problem
            if run.storage is None and o.sha256 is None:
                return "an output without its SHA-256"
            # A key task-put-url issued for the partition: "../" in it would name another run's object.
            if run.storage is not None and not re.fullmatch(
                rf"{re.escape(self._task_prefix(run, task))}/part-{o.partition:05d}-\d{{5,}}", o.key or ""
            ):
                return "an output key outside the task's prefix"
        return None

    def _partition_problem(self, run: Active, task: Task, partition: int) -> str | None:
        if run.execution.partitioning(task.stage) == "rank" and partition != task.rank:
            return f"partition {partition} from rank {task.rank} of a stage partitioned by rank"
        if partition >= run.execution.worker_count:
            return f"partition {partition} of {run.execution.worker_count}"
        return None

    def _failed(self, run: Active, task: Task, message: p.TaskFailed) -> None:
        where = f"{_stage_name(run.execution, task.stage)} on rank {task.rank} of group {task.group}"
        if message.peer_lost and self._restart_after_peer_loss(run, task):
            self.logs.add(
                run.run_id,
                f"{where} starts again: {message.error}",
                source=task.worker_id or "coordinator",
                level="warn",
                group=task.group,
                rank=task.rank,
            )
            run.execution.retry(task, TaskEvent.FAIL, message.error)
            self.wake.set()
            return
        if message.input_missing is not None:
            again = run.execution.input_lost(task, message.input_missing)
            self.logs.add(
                run.run_id, f"{where}: an input was missing on its worker; {len(again)} task(s) run again", level="warn"
            )
            self.wake.set()
            return
        place = first_place(message.stack, run.run_id, run.spec)
        error = f"{message.error} (at {place})" if place else message.error
        stack = map_stack(message.stack, run.run_id, run.spec)
        self.logs.add(
            run.run_id,
            f"{where} failed: {error}" + (f"\n{stack}" if stack else ""),
            source=task.worker_id or "coordinator",
            level="error",
            group=task.group,
            rank=task.rank,
        )
        run.execution.retry(task, TaskEvent.FAIL, error)  # the stage page shows it with its place in job.js
        self._spawn(self._end(run, "failed", EndCause.JOB_ERROR, f"{where} failed: {error}"))

    def _restart_after_peer_loss(self, run: Active, task: Task) -> bool:
        """Whether a task that failed on a lost peer starts again (with the replacement) instead of failing
        the run: the loss came after this attempt started (the browser cannot invent one), no rank of the
        stage finished (it would not join the collectives again), and the stage has restarts left."""
        lost = run.lost_at.get(task.group)
        if lost is None or lost < task.started:
            return False
        stage = [run.execution.task(task.group, task.stage, r) for r in range(run.execution.worker_count)]
        if any(t.state == "done" for t in stage):
            return False
        # One restart per loss (epoch), however many ranks report it.
        epochs = run.peer_restarts.setdefault((task.group, task.stage), set())
        epochs.add(run.epochs[task.group])
        return len(epochs) <= MAX_PEER_RESTARTS

    # ------------------------------------------------------------ the end of a run

    async def _succeed(self, run: Active) -> None:
        try:
            outputs = await self._keep_outputs(run)
        except Exception as exc:
            log.exception("run %s: keeping the output failed", run.run_id)
            run.ending = False
            await self._end(run, "failed", EndCause.OUTPUT_LOST, f"the output could not be kept: {exc}")
            return
        await self._finish(run, "succeeded", EndCause.COMPLETED, "", outputs)

    async def _keep_outputs(self, run: Active) -> list[RunOutput]:
        """Final outputs become pinned PMRFS objects (copied to the appliance), or stay in the cloud bucket."""
        execution = run.execution
        rows: list[RunOutput] = []
        content_type = execution.content_type(execution.last_stage)
        for group, ranks in execution.final_outputs().items():
            for rank, outputs in ranks:
                for seq, o in enumerate(outputs):
                    rows.append(
                        RunOutput(
                            run=run.run_id,
                            group=group,
                            rank=rank,
                            seq=seq,
                            location=o.location,
                            size=o.size,
                            records=o.records,
                            content_type=content_type,
                        )
                    )
                if run.storage is None and outputs:
                    await self._record(
                        run, f"run-{run.run_id}/{group}/output/part-{rank:05d}", outputs, content_type, True
                    )
        if run.storage is None:
            shas = [r.location for r in rows]
            restored = set(await namenode.restore_appliance_copies(self.store, shas, self.live_holders))
            missing = [sha for sha in shas if sha not in restored and not self.store.exists(sha)]
            if missing:
                raise RuntimeError(f"{len(missing)} output blob(s) could not be copied from the workers")
        if run.spec.save_intermediate_output:
            for task, outputs in self._intermediates_by_task(run):
                if run.storage is None:
                    key = f"run-{run.run_id}/{task.group}/{stage_label(task.stage)}/part-{task.rank:05d}"
                    await self._record(
                        run, key, outputs, execution.content_type(task.stage), False, execution.wire_type(task.stage)
                    )
        else:
            await self._discard(run, intermediate_only=True)
        return rows

    def _intermediates_by_task(self, run: Active) -> list[tuple[Task, list[Output]]]:
        by_task: dict[str, tuple[Task, list[Output]]] = {}
        for task, output in run.execution.intermediate_outputs():
            by_task.setdefault(task.id, (task, []))[1].append(output)
        return list(by_task.values())

    async def _record(
        self, run: Active, key: str, outputs: list[Output], content_type: str, pinned: bool, wire_type: str = ""
    ) -> None:
        blobs = list(dict.fromkeys((o.location, o.size) for o in outputs))
        holders: dict[str, set[str]] = {}
        for o in outputs:
            holders.setdefault(o.location, set()).update(h for h in o.holders if self.fleet.get(h) is not None)
        await pmrfs.record_browser_object(
            run.owner_id,
            key,
            blobs,
            holders,
            content_type=content_type,
            pinned=pinned,
            encoding="shuffle" if wire_type == SHUFFLE_TYPE else "",
        )

    async def _discard(self, run: Active, *, intermediate_only: bool) -> None:
        """Delete what the run's tasks wrote (browsers drop the blobs; cloud objects are deleted)."""
        execution = run.execution
        tasks = [t for t in execution.all_tasks() if not intermediate_only or t.stage != execution.last_stage]
        if run.storage is not None:
            try:
                if intermediate_only:
                    for task in tasks:
                        await cloud.delete_prefix(run.storage, self._task_root(run, task) + "/")
                else:
                    await cloud.delete_prefix(run.storage, run.key_prefix() + "/")
            except Exception as exc:
                self.logs.add(run.run_id, f"could not delete the run's objects in the bucket: {exc}", level="warn")
            return
        keep = (
            set()
            if not intermediate_only
            else {o.location for _, outs in execution.final_outputs().items() for _, os_ in outs for o in os_}
        )
        for task in tasks:
            for o in task.outputs:
                if o.location in keep:
                    continue
                for holder in o.holders:
                    worker = self.fleet.get(holder)
                    if worker is not None:
                        self._spawn(worker.send(p.BlobDelete(sha256=o.location)))

    async def _end(self, run: Active, state: str, cause: EndCause, reason: str) -> None:
        """Fail or cancel a running run: stop its tasks, drop what they wrote, free its workers."""
        if run.ending:
            return
        run.ending = True
        for task in [*run.execution.all_extra_attempts(), *run.execution.all_tasks()]:
            if task.state == "verifying":
                run.execution.retry(task, TaskEvent.CANCEL, reason)
            elif task.state in ("staging", "running"):
                worker = self.fleet.get(task.worker_id or "")
                if worker is not None:
                    self._spawn(worker.send(p.TaskCancel(task_id=task.id)))
                if task.is_backup:
                    run.execution.drop_backup(task, TaskEvent.CANCEL, reason)
                else:
                    run.execution.retry(task, TaskEvent.CANCEL, reason)
        await self._discard(run, intermediate_only=False)
        await self._finish(run, state, cause, reason, [])

    async def _finish(self, run: Active, state: str, cause: EndCause, reason: str, outputs: list[RunOutput]) -> None:
        execution = run.execution
        self.logs.add(
            run.run_id, f"{state}" + (f": {reason}" if reason else ""), level="error" if state == "failed" else "info"
        )
        for worker_id in execution.workers() | run.helpers:
            worker = self.fleet.get(worker_id)
            if worker is not None and worker.run_id == run.run_id:
                worker.run_id = None
        self.active.pop(run.run_id, None)
        await self.peers.run_ended(run)
        try:
            if run.start_stored is not None:
                await asyncio.wait([run.start_stored])  # never overwrite the end with the start
            await parameters.keep(run.run_id, run.params)
            await self._store_end(run.run_id, state, cause, reason, self._task_rows(run), outputs, execution.progress())
            # Billing meters the attempts; worker reliability scores them.
            await self.fleet.events.publish(
                RunEnded(
                    run.run_id,
                    run.owner_id,
                    state,
                    cause,
                    list(execution.history),
                    dict(run.accounts),
                    frozenset(run.excluded),
                    private=run.spec.private_mode,
                    gpu=run.spec.gpu,
                )
            )
        finally:
            self.logs.forget(run.run_id)
            self.wake.set()

    def _task_rows(self, run: Active) -> list[tuple]:
        """The run's task attempts as rows of TASK_COLUMNS."""
        wall = time.time() - time.monotonic()  # monotonic -> epoch
        return [
            (
                run.run_id,
                a.group,
                a.stage,
                a.rank,
                a.attempt,
                a.worker_id,
                run.accounts.get(a.worker_id),
                a.state,
                dt.datetime.fromtimestamp(a.started + wall, dt.UTC),
                dt.datetime.fromtimestamp(a.finished + wall, dt.UTC),
                a.emits,
                a.bytes,
                a.cpu_ms,
                a.error,
                run.adapters.get(a.worker_id, ""),
            )
            for a in run.execution.history
        ]

    async def _store_end(
        self,
        run_id: int,
        state: str,
        cause: EndCause,
        reason: str,
        tasks: list[tuple],
        outputs: list[RunOutput],
        progress: list[dict] | None = None,
    ) -> None:
        async with self._checkpointing, Run._meta.db.transaction():
            await self.logs.flush()  # the whole log is there once the run shows as ended (one commit)
            await RunCheckpoint.delete().where(RunCheckpoint.run == run_id)
            await Run.update(
                {
                    Run.state: state,
                    Run.cause: cause,
                    Run.reason: reason,
                    Run.finished_at: now(),
                    Run.progress: msgspec.json.encode(progress or []).decode(),
                }
            ).where(Run.id == run_id)
            # Plain multi-row INSERTs: Piccolo objects would cost more than the run's tasks did.
            for start in range(0, len(tasks), TASK_ROWS_PER_INSERT):
                chunk = tasks[start : start + TASK_ROWS_PER_INSERT]
                await RunTask.raw(_TASK_INSERT + ", ".join([_TASK_ROW] * len(chunk)), *itertools.chain(*chunk))
            for start in range(0, len(outputs), 500):
                await RunOutput.insert(*outputs[start : start + 500])
        if (ended := self._ends.pop(run_id, None)) is not None:
            ended.set()
