"""Validation: a validated run's tasks run on several workers and are done once a majority gave
the same outputs (a mixin of RunExecution, kept apart from the task graph it extends)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import TYPE_CHECKING

from appliance.jobs.transitions import TaskEvent

if TYPE_CHECKING:
    from appliance.jobs.execution import Attempt, Output, Task, Try

# Validation: attempts of one task, beyond its replicas, before the run fails for want of agreement.
EXTRA_VALIDATION_ATTEMPTS = 2


def _signature(outputs: list[Output]) -> tuple[tuple[int, str], ...]:
    """What validation compares: each output blob's partition and SHA-256."""
    return tuple(sorted((o.partition, o.location) for o in outputs))


class Agreement:
    cancels: list[tuple[str, str]]
    validation: int
    unvalidated: frozenset[int] | set[int]
    replicas: dict[Task, list[Attempt]]
    results: dict[Task, list[Try]]

    def validated(self, task: Task) -> bool:
        return bool(self.validation) and task.stage not in self.unvalidated

    def _agree(self, attempt: Try, outputs: list[Output], emits: int, cpu_ms: int, now: float) -> list[tuple[str, str]]:
        """A validated task's attempt finished: keep its result; once a majority of the replicas gave
        the same outputs the task is done with them, the other results are rejected and the attempts
        still running are stopped."""
        task = attempt.primary or attempt
        self._move(attempt, TaskEvent.VERIFY if attempt is task else TaskEvent.FINISH)
        self.active.discard(attempt)
        if attempt is not task:
            self.replicas[task].remove(attempt)
        attempt.finished, attempt.outputs, attempt.emits, attempt.cpu_ms = now, outputs, emits, cpu_ms
        attempt.bytes = sum(o.size for o in outputs)
        results = self.results.setdefault(task, [])
        results.append(attempt if attempt is not task else dataclasses.replace(task))  # the task object goes on
        agreed, count = Counter(_signature(r.outputs) for r in results).most_common(1)[0]
        if count < self.validation // 2 + 1:
            return []
        winner = next(r for r in results if _signature(r.outputs) == agreed)
        voters = ", ".join(r.worker_id or "" for r in results if _signature(r.outputs) == agreed)
        for result in self.results.pop(task):
            if _signature(result.outputs) == agreed:
                self._record(result, TaskEvent.FINISH)
            else:
                self._record(result, TaskEvent.REJECTED, f"its output differs from the one workers {voters} agreed on")
        stop = []
        for replica in self.replicas.pop(task, []):
            self.drop_backup(replica, TaskEvent.CANCEL, "the other attempts agreed")
            stop.append((replica.id, replica.worker_id or ""))
        if task.state in ("staging", "running"):  # replicas agreed while the task's own attempt runs
            stop.append((task.id, task.worker_id or ""))
            task.finished = now
            task.cpu_ms = int((now - task.started) * 1000)
            self._move(task, TaskEvent.SUPERSEDED)
            self.active.discard(task)
            self._record(task, TaskEvent.SUPERSEDED, "other attempts agreed first")
        else:
            self._move(task, TaskEvent.AGREED)
        self._take_result(task, winner)
        self.groups[task.group].count_done(task, +1)
        self.cancels += stop
        return stop

    def replicas_wanted(self, task: Task) -> int:
        """How many more attempts a validated task needs running now: its replicas at first, then as
        many as could still make a majority agree."""
        if not self.validated(task) or task.state not in ("staging", "running", "verifying"):
            return 0
        results = self.results.get(task, [])
        running = len(self.replicas.get(task, [])) + (task.state in ("staging", "running"))
        if len(results) + running < self.validation:
            return self.validation - len(results) - running
        best = max(Counter(_signature(r.outputs) for r in results).values(), default=0)
        room = self.validation + EXTRA_VALIDATION_ATTEMPTS - len(results) - running
        return max(0, min(self.validation // 2 + 1 - best - running, room))

    def disagreement(self, task: Task) -> str | None:
        """Why a validated task can never be agreed on (every attempt it may make gave its own output)."""
        results = self.results.get(task, [])
        running = len(self.replicas.get(task, [])) + (task.state in ("staging", "running"))
        if running or self.replicas_wanted(task) or len(results) < self.validation:
            return None
        outputs = {_signature(r.outputs) for r in results}
        return f"{len(results)} workers gave {len(outputs)} different outputs; no {self.validation // 2 + 1} agreed"

    def replica(self, task: Task, worker_id: str, now: float | None = None) -> Attempt:
        """One more attempt of a validated task, on another worker."""
        clone = self._clone(task, worker_id, now)
        self.replicas.setdefault(task, []).append(clone)
        return clone
