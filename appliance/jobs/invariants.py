"""What must hold of a run's execution between any two steps of the engine. With the
``engine_checks`` setting (the test suite turns it on) the engine checks them after every step, so a
step that breaks one fails where it happened instead of as a hung or wrong run later."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from appliance.jobs.execution import RunExecution


class InvariantBroken(AssertionError):
    """A step of the engine left a run's execution in a state it can never be in."""


def check(execution: RunExecution) -> None:
    if problems := list(_problems(execution)):
        raise InvariantBroken(f"run {execution.run_id}: " + "; ".join(problems))


def _problems(execution: RunExecution) -> Iterator[str]:
    extra = execution.all_extra_attempts()
    under_way = {t for t in execution.all_tasks() if t.state in ("staging", "running")}
    if execution.active != under_way | set(extra):
        yield "the active set is not the attempts staging or running"
    for attempt in execution.active:
        if not attempt.worker_id:
            yield f"attempt {attempt.id} is {attempt.state} on no worker"
    for task in execution.all_tasks():
        if task.state == "waiting" and (task.worker_id is not None or task.outputs):
            yield f"task {task.id} waits but keeps a worker or outputs"
        if (by := task.covered_by) is not None and (
            task.state != "waiting" or by.state not in ("staging", "running") or task not in execution.covered(by)
        ):
            yield f"task {task.id} ({task.state}) is covered by {by.id} ({by.state}), whose range is not running it"
    for primary, backup in execution.backups.items():
        if backup.primary is not primary or primary.state not in ("staging", "running"):
            yield f"backup {backup.id} races a task that is {primary.state}"
    # A streaming reduce is given to its page while it waits for input, and may then run beside a task
    # its worker took meanwhile (the map of another rank it holds): the page runs both.
    busy = Counter(t.worker_id for t in execution.active if not t.streaming)
    if doubled := sorted(w for w, n in busy.items() if n > 1):
        yield f"workers {', '.join(doubled)} run two attempts at once"
    holders = Counter(w for group in execution.groups.values() for w in group.ranks if w is not None)
    if execution.talking and (twice := sorted(w for w, n in holders.items() if n > 1)):
        yield f"workers {', '.join(twice)} hold two ranks of a run whose ranks talk"
    yield from _counts(execution)


def _counts(execution: RunExecution) -> Iterator[str]:
    for group in execution.groups.values():
        done = Counter(stage for (stage, _, _), t in group.tasks.items() if t.state == "done")
        for stage, count in group.stage_done.items():
            if done[stage] != count:
                yield f"group {group.letter} counts {count} done tasks in stage {stage}, not {done[stage]}"
        if not group.open_stages <= set(group.stage_started):
            yield f"group {group.letter} has an open stage that never started"
