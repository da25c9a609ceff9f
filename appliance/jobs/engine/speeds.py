"""How fast each browser works, from its finished tasks: placement hands waiting chunks to the
fastest free workers first (RunExecution.ready).

A task's speed is relative to its stage: the median time of the stage's finished tasks over its
own time (a stage's chunks are cut alike, so a browser twice as fast as the others scores 2). A
browser's estimate is the moving average of its tasks' speeds, kept across runs while the appliance
runs: a machine's speed is its own, whatever the job.
"""

from __future__ import annotations

import statistics

from appliance.jobs.execution import INPUT_STAGE, RunExecution, Task

# The weight of a task's speed in its browser's estimate: recent tasks count most (a laptop can be
# unplugged, a tab hidden), and one odd task does not swing it.
WEIGHT = 0.4
# Below this many finished tasks in a stage its median is not a yardstick yet.
YARDSTICK_TASKS = 2


class Speeds:
    def __init__(self) -> None:
        self.estimates: dict[str, float] = {}

    def of(self, worker_id: str) -> float:
        """The browser's speed estimate: 1.0 is a typical browser's, or no estimate yet."""
        return self.estimates.get(worker_id, 1.0)

    def finished(self, execution: RunExecution, task: Task) -> None:
        """``task`` is done: its worker's estimate moves toward the task's speed."""
        if task.stage == INPUT_STAGE or not task.worker_id or (own := _seconds(task)) is None:
            return
        times = [s for t in execution.groups[task.group].by_stage[task.stage] if (s := _seconds(t))]
        if len(times) < YARDSTICK_TASKS:
            return
        speed = statistics.median(times) / max(own, 1e-3)
        before = self.estimates.get(task.worker_id, 1.0)
        self.estimates[task.worker_id] = before + WEIGHT * (speed - before)


def _seconds(task: Task) -> float | None:
    """How long a done task worked once its inputs were in place; None if it did not run (an empty chunk)."""
    if task.state != "done" or not task.launched or task.finished <= task.launched:
        return None
    return task.finished - task.launched
