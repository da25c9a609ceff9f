"""Speculation and validation: stalled and slow tasks get a backup attempt on a spare worker (the
first of the two to finish wins), and a validated run's tasks get the replicas that must agree."""

from __future__ import annotations

import time

from appliance.events import EndCause
from appliance.fleet import protocol as p
from appliance.fleet.registry import Worker
from appliance.jobs.engine.ending import Ending
from appliance.jobs.engine.live import LiveRun
from appliance.jobs.engine.placement import Placement, Unbind
from appliance.jobs.engine.shared import Shared
from appliance.jobs.engine.speeds import own_pace, task_seconds, time_left
from appliance.jobs.engine.staging import Staging
from appliance.jobs.execution import SPLIT_ASKED, Attempt, Task, TaskEvent
from appliance.jobs.logs import COORDINATOR, FLEET

# Stragglers are a matter of seconds: a run is looked over for them at most this often, not at
# every scheduling round (thousands a second while short tasks finish).
STRAGGLER_SCAN_SECONDS = 0.5
# A free browser backs up a running task on speed estimates alone (_outpaced) when it is at least
# this many times as fast, and would finish the whole task that many times sooner than the task's
# own browser finishes what it has left, plus the time its inputs may take to copy.
OUTPACED_SPEEDUP = 1.5
OUTPACED_COPY_SECONDS = 0.5


class Speculation:
    def __init__(self, shared: Shared, placement: Placement, staging: Staging, ending: Ending):
        self.shared = shared
        self.placement = placement
        self.staging = staging
        self.ending = ending

    async def look(self, run: LiveRun, clock: float) -> None:
        """Once per scheduling round of a run: stragglers (at most every STRAGGLER_SCAN_SECONDS) and replicas."""
        if clock - run.scanned_at >= STRAGGLER_SCAN_SECONDS:
            run.scanned_at = clock
            self._silent(run, clock)
            self._mark_stalled(run, clock)
            self._back_up(run, clock)
        if run.execution.validation:
            await self._replicate(run, clock)

    def _silent(self, run: LiveRun, clock: float) -> None:
        """A rank's task whose inputs are still being sent to its worker (a streaming reduce waiting for
        the maps' pieces, a task copying its input) when that browser stops answering pings (frozen,
        cut off) has started none of its work: it goes with the rank to an idle worker now, instead
        of waiting seconds more for the browser to be taken for gone. The silent browser keeps what
        it holds (asked for it last), and stays with the run as a helper with nothing to do (its pings
        stay frequent, and it takes no other work): until it is found gone (what only it held is
        computed again then) or answers again (it is free). A running task's stand-in starts once its
        browser is gone (coordinator)."""
        execution = run.execution
        for worker_id in list(run.seats.helpers):
            if (helper := self.shared.fleet.get(worker_id)) is not None and helper.answers(clock):
                self.placement.unbind(run, worker_id, Unbind.EXTRA_ENDED)  # unless it runs an attempt
        for task in [t for t in execution.active if t.state == "staging" and not t.is_backup]:
            worker = self.shared.fleet.get(task.worker_id or "")
            if worker is None or worker.answers(clock) or task.stage in execution.talking:
                continue
            if execution.places_of(worker.worker_id) != [(task.group, task.rank)]:
                continue  # a chunk taken from another rank, or a worker holding two: they wait for it
            if (idle := self.placement.idle_worker(run)) is None:
                return
            why = f"worker {worker.worker_id} has not answered for {clock - worker.last_seen:.1f} s"
            execution.retry(task, TaskEvent.FAIL, f"{why} while its input was sent to it")
            self.placement.hand_over(run, task, worker.worker_id, idle, f"as {why} while its input was sent to it")
            self.placement.bind_extra(run, worker)

    def _mark_stalled(self, run: LiveRun, clock: float) -> None:
        for task in run.execution.newly_stalled(self.shared.policy.stall_seconds, clock):
            worker = self.shared.fleet.get(task.worker_id or "")
            if worker is None or not worker.answers(clock):
                continue  # a browser that does not answer either: its connection's silence limit deals with it
            task.stalled = True
            self.shared.logs.add(
                run.run_id,
                f"{run.where(task)} is stalled: no progress for {clock - task.progressed_at:.0f} s "
                f"while worker {task.worker_id} still answers",
                level="warn",
            )

    def _back_up(self, run: LiveRun, clock: float) -> None:
        """Backup attempts of stalled and slow tasks (speculative execution), and of tasks a free browser
        would finish sooner than their own, while spare workers last."""
        execution = run.execution
        spare: Worker | None = None  # the free worker the speed rule weighs, looked for once a scan
        for task in [t for t in list(execution.active) if execution.may_back_up(t)]:
            if why := execution.speculable(task, clock):
                helper = self.placement.extra_worker(run, task)
            elif not execution.groups[task.group].stage_done[task.stage]:
                continue  # nothing of its stage finished: no pace to weigh it by
            elif (helper := spare or self.placement.extra_worker(run, task)) is not None:
                spare = helper
                if (why := self._outpaced(run, task, helper, clock)) is None:
                    continue
            if helper is None:
                return
            if execution.splittable(task) and not task.stalled:
                if task.split == SPLIT_ASKED:
                    continue  # its page answers at once when its job iterates: what is left is judged then
                spare = None  # taken
                self._abandon(run, task, helper, why, clock)
                continue
            spare = None  # taken
            self._start_extra(
                run,
                execution.backup(task, helper.worker_id, clock),
                helper,
                f"{run.where(task)} on worker {task.worker_id} is {why}: "
                f"a backup attempt starts on worker {helper.worker_id}",
                level="warn",
            )

    def _outpaced(self, run: LiveRun, task: Task, helper: Worker, clock: float) -> str | None:
        """Why ``helper`` should run a backup of ``task``, or None: by the speed estimates, it would do
        the whole task (its inputs copied first) well before the task's own browser does what it has
        left. This needs no evidence of slowness from the running task itself (a reduce emits only at
        its end): once a task of its stage finished, the stage's pace per record is known. A task whose
        page says how far it has read is judged by its own pace (a browser slowed today)."""
        execution, speeds = run.execution, self.shared.speeds
        if execution.waiting_for_input(task):
            return None
        if (whole := task_seconds(speeds, execution, task)) is None:
            return None
        mine, theirs = speeds.of(task.worker_id or ""), speeds.of(helper.worker_id)
        if (pace := own_pace(task)) and task.work:
            mine = whole / (pace * task.work)  # its speed on this task so far
        if theirs < OUTPACED_SPEEDUP * mine:
            return None
        left, there = time_left(speeds, task, clock, whole) or 0.0, whole / theirs
        if left < OUTPACED_SPEEDUP * there + OUTPACED_COPY_SECONDS:
            return None
        return (
            f"slower than worker {helper.worker_id} (speed estimates {mine:.2f} and {theirs:.2f}): "
            f"about {left:.1f} s left, {there:.1f} s there"
        )

    def _abandon(self, run: LiveRun, task: Task, helper: Worker, why: str, clock: float) -> None:
        """A range ``helper`` would run whole well before its slow browser ends what it has left: rather
        than a backup, whose output would overlap the chunks free workers split off it, the range starts
        again on ``helper`` (which takes the rank when the slow browser held it), and free workers split
        it there."""
        execution, slow = run.execution, task.worker_id or ""
        self.shared.speeds.outran(execution, task, slow, clock - task.launched)
        self.shared.send(slow, p.TaskCancel(task_id=task.id))
        note = f"{run.where(task)} on worker {slow} is {why}: it starts again on worker {helper.worker_id}"
        execution.retry(task, TaskEvent.CANCEL, note)
        self.shared.logs.add(run.run_id, note, level="warn")
        if execution.places_of(slow) == [(task.group, task.rank)]:
            self.placement.hand_over(run, task, slow, helper, f"as {slow} was {why.split(':')[0]}", Unbind.OUTPACED)
        self.shared.wake.set()

    def stand_in(self, run: LiveRun, task: Task) -> bool:
        """The task's worker disconnected: a backup attempt starts at once on a spare worker, rather than
        after the reconnect grace; False when the task may not be backed up or no worker is spare."""
        if not run.execution.may_back_up(task):
            return False
        helper = self.placement.extra_worker(run, task) or self._preempt(run, task)
        if helper is None:
            return False
        note = (
            f"worker {task.worker_id} disconnected while running {run.where(task)}: "
            f"a backup attempt starts on worker {helper.worker_id} at once (if the browser comes back "
            f"within {self.shared.settings.job_reconnect_grace_seconds} s, the first to finish wins)"
        )
        self._start_extra(run, run.execution.backup(task, helper.worker_id), helper, note, level="warn", source=FLEET)
        return True

    def _preempt(self, run: LiveRun, task: Task) -> Worker | None:
        """No worker is spare for a stand-in: one running a backup for slowness gives it up, since a task
        whose browser left has no attempt running at all, and a slow one still has its own (whose
        browser answers, and is not stalled). None when there is no such backup."""
        now = time.monotonic()
        for primary, backup in list(run.execution.backups.items()):
            worker = self.shared.fleet.get(primary.worker_id or "")
            if worker is None or not worker.answers(now) or primary.stalled or primary.worker_id in run.seats.away:
                continue
            self.placement.drop_extra(run, backup, TaskEvent.CANCEL, f"its worker stands in for {task.worker_id}")
            if (helper := self.placement.extra_worker(run, task)) is not None:
                return helper
        return None

    async def _replicate(self, run: LiveRun, clock: float) -> None:
        """Validation: start the replica attempts validated tasks need; end the run when a task's
        attempts can never agree."""
        execution = run.execution
        for task in [t for t in execution.all_tasks() if t.state in ("staging", "running", "verifying")]:
            for _ in range(execution.replicas_wanted(task)):
                if not self._add_replica(run, task, clock):
                    break
            if (why := execution.disagreement(task)) is not None:
                await self.ending.end(run, "failed", EndCause.VALIDATION_FAILED, f"{run.where(task)}: {why}")
                return

    def _add_replica(self, run: LiveRun, task: Task, clock: float) -> bool:
        """One more attempt of a validated task, on a worker (of another account, when there is one)
        that has not run it; False when there is no such worker."""
        execution = run.execution
        used = {task.worker_id} | {t.worker_id for t in execution.replicas.get(task, [])}
        used |= {r.worker_id for r in execution.results.get(task, [])}
        accounts = set() if run.spec.private_mode else {run.seats.accounts.get(w) for w in used}
        worker = self.placement.extra_worker(run, task, avoid=used, other_accounts=accounts)
        if worker is None:
            return False
        replica = execution.replica(task, worker.worker_id, clock)
        note = f"{run.where(task)}: attempt {replica.attempt} on worker {worker.worker_id} (validation)"
        self._start_extra(run, replica, worker, note)
        return True

    def _start_extra(
        self, run: LiveRun, attempt: Attempt, worker: Worker, note: str, level: str = "info", source: str = COORDINATOR
    ) -> None:
        """A worker takes an extra attempt (backup or replica) of the run, and it starts."""
        self.placement.bind_extra(run, worker)
        self.shared.logs.add(run.run_id, note, level=level, source=source)
        self.shared.spawn(self.staging.launch(run, attempt))
