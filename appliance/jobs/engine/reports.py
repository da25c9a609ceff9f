"""Reports: what a worker's task messages mean for its run (progress, logs, a task done or failed),
and the requests a task makes of the appliance (an upload URL, a peer or parameter-server request)."""

from __future__ import annotations

import datetime as dt
import re
import time

from appliance.events import EndCause, TaskMessage
from appliance.fleet import protocol as p
from appliance.fleet.registry import Worker
from appliance.jobs.engine.ending import Ending
from appliance.jobs.engine.live import LiveRun
from appliance.jobs.engine.placement import Placement, Unbind
from appliance.jobs.engine.shared import Shared
from appliance.jobs.engine.staging import Staging, partition_problem, stalled_on
from appliance.jobs.execution import SPLIT_ASKED, SPLIT_DECLINED, Attempt, Output, Task, TaskEvent, Try
from appliance.jobs.logs import FLEET
from appliance.jobs.metrics import TASK_FAILURES, TASKS_DONE, failure_cause
from appliance.jobs.peers import Peers
from appliance.jobs.sandbox_script import first_place, map_stack

# Times a group's stage may start again after a rank was lost mid-collective.
MAX_PEER_RESTARTS = 3


class Reports:
    def __init__(self, shared: Shared, placement: Placement, staging: Staging, ending: Ending, peers: Peers):
        self.shared = shared
        self.logs = shared.logs
        self.placement = placement
        self.staging = staging
        self.ending = ending
        self.peers = peers
        self._handlers = {
            p.TaskProgress: self._progressed,
            p.TaskLog: self._logged,
            p.TaskWorkerTimeout: self._timeout_set,
            p.TaskSplitAt: self._split_at,
            p.TaskPutUrl: self._put_url,
            p.TaskDone: self._reported_done,
            p.TaskFailed: self._reported_failed,
        }

    def task_message(self, event: TaskMessage) -> None:
        worker, message = event.worker, event.message
        run = self.shared.active.get(worker.run_id) if worker.run_id is not None else None
        header = message.header if isinstance(message, p.Frame) else message
        task = run.execution.find(header.task_id) if run is not None and not run.ending else None
        if task is None or task.worker_id != worker.worker_id:
            # An attempt that was replaced, or a message for someone else's task: a request gets its answer.
            if isinstance(header, p.TASK_REQUESTS):
                self.shared.send(worker, p.refusal(header, "this task is not running on this worker"))
            return
        run.execution.transitions.because(f"{type(header).__name__}:{worker.worker_id}")
        if isinstance(header, p.PEER_REQUESTS):
            self._peer_request(run, task, worker, message, header)
        elif (handler := self._handlers.get(type(message))) is not None:
            handler(run, task, worker, message)
        self.shared.deliver(run)

    def _peer_request(self, run: LiveRun, task: Try, worker: Worker, message: object, header: object) -> None:
        if not task.is_backup:
            self.peers.handle(run, task, worker, message)
            return
        # Two attempts of one rank cannot both talk to the others.
        self.shared.send(worker, p.refusal(header, "a backup attempt does not talk to other ranks"))
        run.execution.unspeculated.add(task.stage)
        self.placement.drop_extra(run, task, TaskEvent.CANCEL, "its stage talks to other ranks: no backups")

    # ------------------------------------------------------------ while a task runs

    def _progressed(self, run: LiveRun, task: Try, worker: Worker, message: p.TaskProgress) -> None:
        """Emits, bytes, progress() calls and input records reached are progress (they reset the worker
        timeout); a heartbeat only says the task is busy, not hung (it is not stalled)."""
        clock = time.monotonic()
        read = min(message.read, task.work)  # the page's word: never more than it was given
        task.read_at = clock  # it had reached no further by then
        moved = (message.emits, message.bytes, message.ticks, read) != (task.emits, task.bytes, task.ticks, task.read)
        if not moved and message.beats == task.beats:
            task.last_activity = clock
            return
        if moved:
            task.last_activity = clock
            task.emits, task.bytes, task.ticks, task.read = message.emits, message.bytes, message.ticks, read
        task.beats, task.progressed_at = message.beats, clock
        if task.stalled:
            task.stalled = False
            self.logs.add(run.run_id, f"{run.where(task)} makes progress again", level="info")

    def _logged(self, run: LiveRun, task: Try, worker: Worker, message: p.TaskLog) -> None:
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

    @staticmethod
    def _timeout_set(run: LiveRun, task: Try, worker: Worker, message: p.TaskWorkerTimeout) -> None:
        task.worker_timeout, task.last_activity = message.seconds, time.monotonic()

    def _split_at(self, run: LiveRun, task: Try, worker: Worker, message: p.TaskSplitAt) -> None:
        """A range's page answered its task-split: the chunks after where it stops go to free workers."""
        if task.is_backup:
            return
        asked = task.split == SPLIT_ASKED
        if not run.execution.split_at(task, message.chunk):
            if asked and task.split == SPLIT_DECLINED:
                self.logs.add(
                    run.run_id,
                    f"{run.where(task)} on worker {worker.worker_id} cannot stop its range early (its job read "
                    "its input other than with for await...of, or it is in its range's last chunk)",
                    source=FLEET,
                )
            return
        if (backup := run.execution.backups.get(task)) is not None:
            self.placement.drop_extra(run, backup, TaskEvent.CANCEL, "the range it backs up was split")
        self.logs.add(
            run.run_id,
            f"{run.where(task)} on worker {worker.worker_id} stops before chunk {message.chunk + 1}: "
            "free workers take the rest of its range",
            source=FLEET,
        )
        self.shared.wake.set()

    def _put_url(self, run: LiveRun, task: Try, worker: Worker, message: p.TaskPutUrl) -> None:
        self.shared.spawn(self.staging.put_url(run, task, worker, message))

    # ------------------------------------------------------------ a task's end

    def _reported_done(self, run: LiveRun, task: Try, worker: Worker, message: p.TaskDone) -> None:
        if run.execution.waiting_for_input(task):
            self._bad_report(run, worker, task, f"reported {run.where(task)} done before all its input was sent")
        elif self._repeated(run, task, worker):
            pass
        elif problem := self._check_outputs(run, task, message.outputs):
            self._bad_report(run, worker, None, f"reported a bad result ({problem})")
        else:
            self._done(run, task, worker, message)

    def _reported_failed(self, run: LiveRun, task: Try, worker: Worker, message: p.TaskFailed) -> None:
        if self._repeated(run, task, worker):
            return
        TASK_FAILURES.labels(failure_cause(message, task.is_backup)).inc()
        if task.is_backup:
            # The original attempt goes on; if the job's code is at fault it fails there too.
            self.placement.drop_extra(run, task, TaskEvent.FAIL, message.error)
        else:
            self._failed(run, task, message)

    def _repeated(self, run: LiveRun, task: Try, worker: Worker) -> bool:
        """A second report of an attempt that already ended (or one that never started): changes nothing."""
        if task.state == "running" or run.execution.waiting_for_input(task):
            return False
        self.logs.add(run.run_id, f"worker {worker.worker_id} reported task {task.id} again; ignored", level="warn")
        return True

    def _bad_report(self, run: LiveRun, worker: Worker, running: Try | None, what: str) -> None:
        self.logs.add(run.run_id, f"worker {worker.worker_id} {what}", level="warn")
        TASK_FAILURES.labels("bad_result").inc()
        self.placement.unbind(run, worker.worker_id, Unbind.BAD_REPORT, running=running)

    def _check_outputs(self, run: LiveRun, task: Try, outputs: list[p.TaskOutput]) -> str | None:
        """What is wrong with a task's reported outputs, or None."""
        for o in outputs:
            if problem := partition_problem(run, task, o.partition):
                return problem
            if run.storage is None and o.sha256 is None:
                return "an output without its SHA-256"
            # A key task-put-url issued for the partition: "../" in it would name another run's object.
            if run.storage is not None and not re.fullmatch(
                rf"{re.escape(run.task_prefix(task))}/part-{o.partition:05d}-\d{{5,}}", o.key or ""
            ):
                return "an output key outside the task's prefix"
        return None

    def _stood_in(self, run: LiveRun, backup: Attempt, winner: Worker) -> Task:
        """A stand-in finished while the rank's browser is still away (coordinator._left): it is the
        task's attempt now, and its worker takes the rank, so the rank's next task starts at once."""
        task, away = backup.primary, backup.primary.worker_id or ""
        run.execution.abandon(task, TaskEvent.WORKER_LOST, "the worker disconnected; its stand-in finished first")
        # Not a chunk the away browser took from another rank, nor when it holds another rank too: it
        # stays away (its ranks wait for it, then go) instead of leaving the run with them.
        holds_it = run.execution.places_of(away) == [(task.group, task.rank)]
        if holds_it and (winner.worker_id in run.seats.helpers or not run.execution.talking):
            self.placement.hand_over(run, task, away, winner, f"which stood in for {away} (disconnected)")
        return task

    def _done(self, run: LiveRun, task: Try, worker: Worker, message: p.TaskDone) -> None:
        if task.is_backup and task.primary.worker_id in run.seats.away:
            task = self._stood_in(run, task, worker)
        if message.stop and not task.is_backup and task.chunk < message.stop < task.covers:
            run.execution.split_at(task, message.stop)  # a split whose answer the appliance missed: the rest waits
        holders = set() if run.storage else {worker.worker_id}
        outputs = [
            Output(o.partition, o.sha256 or o.key or "", o.size, o.records, set(holders)) for o in message.outputs
        ]
        TASKS_DONE.inc()
        execution = run.execution
        recorded = len(execution.history)
        # Attempts of this task stalled now: if another attempt decides it, their browser is hung.
        primary = task.primary or task
        backup = execution.backups.get(primary)
        racing = [primary, *([backup] if backup else []), *execution.replicas.get(primary, [])]
        stalled = {a.id for a in racing if a is not task and a.stalled}
        # How long each other attempt was seen working (launch to its last progress): one this attempt
        # outran was at most so fast. Not to now: a browser frozen meanwhile (a laptop shut) was not slow.
        worked = {
            a.worker_id: a.progressed_at - a.launched for a in racing if a is not task and not a.stalled and a.launched
        }
        stopped = execution.done(task, outputs, message.emits, message.cpu_ms)
        if primary.state == "done":
            self.shared.speeds.finished(execution, primary)
            for _, loser in stopped:
                if loser in worked and loser not in run.seats.away:
                    self.shared.speeds.outran(execution, primary, loser, worked[loser])
            self.staging.prestage(run, primary)
            for done in (primary, *execution.covered(primary)):
                self.staging.feed_consumers(run, done)
        for rejected in [a for a in execution.history[recorded:] if a.state == "rejected"]:
            self.logs.add(
                run.run_id,
                f"{run.where(task)}: the output of attempt {rejected.attempt} on worker {rejected.worker_id} "
                f"is rejected: {rejected.error}",
                level="warn",
            )
        for loser_id, loser_worker in stopped:
            self._stopped(run, task, worker, loser_id, loser_worker, stalled)
        self.placement.unbind(run, worker.worker_id, Unbind.EXTRA_ENDED)
        if task.primary is None:
            run.params.task_ended(task.group, task.rank)

    def _stopped(
        self, run: LiveRun, task: Task, winner: Worker, loser_id: str, loser_worker: str, stalled: set[str]
    ) -> None:
        """Another attempt of the task is no longer wanted (its page drops it, execution.take_cancels):
        its output is never used, and its worker is free, or hung, or outran."""
        self.logs.add(
            run.run_id,
            f"{run.where(task)}: attempt {task.attempt} on worker {task.worker_id} "
            f"{'gave the output the others agreed on' if run.execution.validated(task) else 'finished first'}; "
            f"attempt {loser_id.rsplit('.', 1)[1]} on worker {loser_worker} is cancelled",
        )
        self.placement.unbind(run, loser_worker, Unbind.EXTRA_ENDED)
        if loser_id in stalled:
            self.placement.unbind(run, loser_worker, Unbind.HUNG, stalled_on(run, task))
        elif run.execution.places_of(loser_worker) == [(task.group, task.rank)] and (
            winner.worker_id in run.seats.helpers or not run.execution.talking
        ):
            # The rank's next tasks (its reduce) go with it rather than run on the slower browser: to a
            # worker of the run, as a second rank, unless its stages talk (each rank needs its own).
            self.placement.hand_over(run, task, loser_worker, winner)

    def _failed(self, run: LiveRun, task: Task, message: p.TaskFailed) -> None:
        where = run.where(task)
        source = task.worker_id or "coordinator"
        if message.peer_lost and self._restart_after_peer_loss(run, task):
            self.logs.add(
                run.run_id,
                f"{where} starts again: {message.error}",
                source=source,
                level="warn",
                group=task.group,
                rank=task.rank,
            )
            run.execution.retry(task, TaskEvent.FAIL, message.error)
            self.shared.wake.set()
            return
        if message.input_missing is not None:
            again = run.execution.input_lost(task, message.input_missing)
            self.logs.add(
                run.run_id, f"{where}: an input was missing on its worker; {len(again)} task(s) run again", level="warn"
            )
            self.shared.wake.set()
            return
        place = first_place(message.stack, run.run_id, run.spec)
        error = f"{message.error} (at {place})" if place else message.error
        stack = map_stack(message.stack, run.run_id, run.spec)
        self.logs.add(
            run.run_id,
            f"{where} failed: {error}" + (f"\n{stack}" if stack else ""),
            source=source,
            level="error",
            group=task.group,
            rank=task.rank,
        )
        run.execution.retry(task, TaskEvent.FAIL, error)  # the stage page shows it with its place in job.js
        self.shared.spawn(self.ending.end(run, "failed", EndCause.JOB_ERROR, f"{where} failed: {error}"))

    @staticmethod
    def _restart_after_peer_loss(run: LiveRun, task: Task) -> bool:
        """Whether a task that failed on a lost peer starts again (with the replacement) instead of failing
        the run: the loss came after this attempt started (the browser cannot invent one), no rank of the
        stage finished (it would not join the collectives again), and the stage has restarts left."""
        lost = run.talk.lost_at.get(task.group)
        if lost is None or lost < task.started:
            return False
        stage = [run.execution.task(task.group, task.stage, r) for r in range(run.execution.worker_count)]
        if any(t.state == "done" for t in stage):
            return False
        # One restart per loss (epoch), however many ranks report it.
        epochs = run.talk.restarts.setdefault((task.group, task.stage), set())
        epochs.add(run.talk.epochs[task.group])
        return len(epochs) <= MAX_PEER_RESTARTS
