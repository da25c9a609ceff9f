"""How fast each browser works, from its finished tasks: placement hands waiting chunks to the
fastest free workers first (RunExecution.ready), the input is cut in proportion to the speeds of the
browsers that take its pieces (RunExecution.input_shares), and a task is backed up on a free browser
that would finish it sooner than its own (Speculation).

A task's speed is relative to its stage: the records it read per second over the median of its
stage's finished tasks (so a browser twice as fast as the others scores 2, whatever share of the
input it was given). A browser's estimate starts at its first such task and then moves as a moving
average, kept across runs while the appliance runs: a machine's speed is its own, whatever the job.
"""

from __future__ import annotations

import statistics
import time

from appliance.jobs.execution import INPUT_STAGE, RunExecution, Task

# The weight of a task's speed in its browser's estimate: recent tasks count most (a laptop can be
# unplugged, a tab hidden), and one odd task does not swing it. A task of fewer records than its
# stage's typical one weighs that much less: its time is mostly what every task costs whatever its
# input (its sandbox, its output), and the fast browsers are the ones that take the small pieces of
# split ranges, so counted whole they would drag the fast estimates toward the slow ones
# (bench/uneven_fleet.py: a 0.25-core browser was cut 29 % of the input beside 36 % for a 0.5-core one).
WEIGHT = 0.4
# Below this many finished tasks in a stage its median is not a yardstick yet.
YARDSTICK_TASKS = 2
# An estimate no task renewed for this long is halfway back to a typical browser's: a browser found
# slow gets no share of an input (RunExecution.input_shares), so nothing else would renew it, and a
# laptop plugged in again would stay left out.
HALF_LIFE_SECONDS = 600.0


class Speeds:
    def __init__(self) -> None:
        self.estimates: dict[str, tuple[float, float]] = {}  # worker id -> (estimate, when it was made)

    def of(self, worker_id: str) -> float:
        """The browser's speed estimate: 1.0 is a typical browser's, or no estimate yet."""
        if (found := self.estimates.get(worker_id)) is None:
            return 1.0
        speed, at = found
        return 1.0 + (speed - 1.0) * 0.5 ** ((time.monotonic() - at) / HALF_LIFE_SECONDS)

    def _set(self, worker_id: str, speed: float) -> None:
        self.estimates[worker_id] = (speed, time.monotonic())

    def finished(self, execution: RunExecution, task: Task) -> None:
        """``task`` is done: its worker's estimate moves toward the task's speed."""
        if task.stage == INPUT_STAGE or not task.worker_id or not task.work or (own := _seconds(task)) is None:
            return  # a task that read no records says nothing of its browser's pace (and skips the walk)
        finished = _finished(execution, task)
        if len(finished) < YARDSTICK_TASKS:
            return
        speed = task.work / max(own, 1e-3) / statistics.median(work / s for work, s in finished)
        weight = WEIGHT * min(1.0, task.work / statistics.median(work for work, _ in finished))
        before = self.of(task.worker_id) if task.worker_id in self.estimates else None
        self._set(task.worker_id, speed if before is None else before + weight * (speed - before))

    def outran(self, execution: RunExecution, task: Task, worker_id: str, seconds: float) -> None:
        """Another browser's attempt finished ``task`` (done, speeds.finished first) while the attempt of
        ``worker_id``, which still answered, had worked ``seconds`` on it: its speed was at most the
        task's records over that time. A browser outrun by backups every time would otherwise never
        finish a task to be measured by, and keep its old estimate."""
        if not task.work or not (finished := _finished(execution, task)):
            return
        ceiling = task.work / max(seconds, 1e-3) / statistics.median(work / s for work, s in finished)
        if ceiling < self.of(worker_id):
            self._set(worker_id, ceiling)

    def seconds_per_record(self, execution: RunExecution, task: Task) -> float | None:
        """What a record of the task's stage takes a browser of speed 1.0, from the stage's finished
        tasks (each scaled by its browser's estimate); None before any finished."""
        times = [
            s * self.of(t.worker_id or "") / t.work
            for t in execution.groups[task.group].by_stage[task.stage]
            if (s := _seconds(t)) and t.work
        ]
        return statistics.median(times) if times else None


def task_seconds(speeds: Speeds, execution: RunExecution, task: Task) -> float | None:
    """Seconds the whole task takes a browser of speed 1.0, by its stage's pace; None before any task
    of its stage finished."""
    per_record = speeds.seconds_per_record(execution, task)
    return None if per_record is None else task.work * per_record


# A page passes on its sandbox's progress up to this long after the sandbox said it (both send at most
# twice a second): what a report says may be that old.
REPORT_SLACK_SECONDS = 0.5


def own_pace(task: Task) -> float | None:
    """Seconds a record takes the running task on its own browser: when its page last said that its job
    had reached ``read`` input records, it had finished all but the one it was at (counted as half
    done), in the time since its launch less the report's delay; None while its page has said none (a
    reduce, a job that reads its input as an array)."""
    if not task.read or not task.launched:
        return None
    return max(task.read_at - task.launched - REPORT_SLACK_SECONDS, 0.0) / (task.read - 0.5)


def time_left(speeds: Speeds, task: Task, clock: float, whole: float | None) -> float | None:
    """Seconds the running task has left on its browser: by the speed estimates (``whole``, its
    task_seconds, which its caller has at hand), or by its own pace once its page says how far it has
    read, whichever says more (a browser may be slower today than its estimate); None before either is
    known."""
    known = []
    if (pace := own_pace(task)) is not None:
        known.append(pace * (task.work - task.read + 0.5) - (clock - task.read_at))
    if whole is not None:
        known.append(whole / speeds.of(task.worker_id or "") - (clock - task.launched))
    return max(known, default=None)


def _finished(execution: RunExecution, task: Task) -> list[tuple[int, float]]:
    """Records and seconds of each finished task of ``task``'s stage that read any."""
    return [(t.work, s) for t in execution.groups[task.group].by_stage[task.stage] if (s := _seconds(t)) and t.work]


def _seconds(task: Task) -> float | None:
    """How long a done task worked once its inputs were in place; None if it did not run (an empty
    chunk) or streamed (a reduce that decoded most of its input while the maps ran, before its whole
    input was in: its time after that is not its records' work)."""
    if task.state != "done" or task.streaming or not task.launched or task.finished <= task.launched:
        return None
    return task.finished - task.launched
