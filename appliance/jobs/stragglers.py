"""Stragglers: which running attempts are stalled, and which deserve a backup attempt (a mixin of
RunExecution, kept apart because it is a policy of its own, tuned apart from the task graph)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from appliance.jobs.execution import Group, Task

# Speculative execution (spark.speculation's defaults): once this share of a stage's tasks is done,
# a task running longer than MULTIPLIER x their median duration (and at least MIN seconds) is slow.
SPECULATION_QUANTILE = 0.75
SPECULATION_MULTIPLIER = 1.5
SPECULATION_MIN_SECONDS = 1.0
# Earlier, as LATE does (Zaharia et al., OSDI 2008): a task progressing (context.progress() calls, or
# emits in a stage that makes none) at under this share of its stage's median rate, after
# LAGGING_MIN_SECONDS, is lagging (a slow tab shows long before the stage is mostly done, and a
# spare worker can redo its work meanwhile).
LAGGING_RATE = 1 / 3
LAGGING_MIN_SECONDS = 1.0


def _ticks(task: Task) -> int:
    return task.ticks


def _emits(task: Task) -> int:
    return task.emits


def _began(task: Task) -> float:
    """When a task's own work began: its start (copying its inputs included), or for a streaming
    reduce the moment its whole input was in (its wait for the maps is not its slowness)."""
    return task.launched if task.streaming else task.started


class Stragglers:
    groups: dict[str, Group]
    active: set[Task]
    backups: dict[Task, Task]
    unspeculated: set[int]
    outrun: set[str]
    splittable: Callable[[Task], bool]

    def newly_stalled(self, stall_seconds: float, now: float | None = None) -> list[Task]:
        """Running attempts whose progress has not moved for ``stall_seconds``, not marked stalled yet."""
        now = time.monotonic() if now is None else now
        return [
            t for t in self.active if t.state == "running" and not t.stalled and now - t.progressed_at > stall_seconds
        ]

    def may_back_up(self, task: Task) -> bool:
        """Whether the task may get a backup attempt now (whatever its pace)."""
        return (
            not task.is_backup
            and task.state == "running"
            and task not in self.backups
            and (task.stage not in self.unspeculated)
        )

    def speculable(self, task: Task, now: float | None = None) -> str | None:
        """Why a running task deserves a backup attempt, or None: it is stalled, it emits far more slowly
        than the rest of its stage, or its stage is mostly done and it runs much longer than the median
        finished task."""
        if not self.may_back_up(task):
            return None
        now = time.monotonic() if now is None else now
        if task.stalled:
            return "stalled"
        if self.splittable(task):
            return None  # slow or not, free workers take the chunks it has not reached (task-split)
        if task.worker_id in self.outrun:
            return "known to be slow (a backup attempt outran it earlier in this run)"
        if lagging := self._lagging(task, now):
            return lagging
        # The stage's tasks but chunks run in another's range or left empty.
        tasks = [t for t in self.groups[task.group].by_stage[task.stage] if t.covered_by is None and not t.empty]
        durations = [t.finished - _began(t) for t in tasks if t.state == "done"]
        if len(tasks) < 2 or len(durations) < SPECULATION_QUANTILE * len(tasks):
            return None
        median = statistics.median(durations)
        if now - _began(task) <= max(SPECULATION_MULTIPLIER * median, SPECULATION_MIN_SECONDS):
            return None
        return f"slow: {now - _began(task):.1f} s, the stage's finished tasks took {median:.1f} s (median)"

    def _lagging(self, task: Task, now: float) -> str | None:
        """Rates count from each attempt's launch: time spent copying inputs is not the task's slowness.
        A stage whose tasks call context.progress() is judged by those calls alone: its emits may come
        in a burst at the end (a map that counts in a Map first), which would make every task still
        running look slow beside the finished ones. Rates are per record read when every task read
        some: a browser given a small share of the input (by its speed) progresses the more slowly."""
        elapsed = now - task.launched
        if elapsed < LAGGING_MIN_SECONDS:
            return None
        others = [
            t
            for t in self.groups[task.group].by_stage[task.stage]
            if t is not task and t.state in ("running", "done") and not t.empty
        ]
        ticking = task.ticks > 0 or any(t.ticks for t in others)
        measure, unit = (_ticks, "progress() calls") if ticking else (_emits, "emits")
        per_record = task.work > 0 and all(t.work for t in others)
        unit += "/s per record read" if per_record else "/s"

        def rate(t: Task, seconds: float) -> float:
            return measure(t) / (t.work if per_record else 1) / max(seconds, 1e-3)

        rates = [rate(t, (t.finished if t.state == "done" else now) - t.launched) for t in others]
        if len(rates) < 2 or statistics.median(rates) <= 0:
            return None  # nothing to compare with (or a stage that reports progress only at its end)
        own, median = rate(task, elapsed), statistics.median(rates)
        if own >= LAGGING_RATE * median:
            return None
        return f"lagging: {own:.3g} {unit}, the stage's median {median:.3g}"
