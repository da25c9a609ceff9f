"""A task's states and the events that move it, as a table; and the log of the moves a run made,
each with the stimulus that caused it (a worker's report, its leaving, a scheduling round), which
the stage page and the tests read."""

from __future__ import annotations

import enum
import itertools
import time
from collections import deque
from typing import TYPE_CHECKING, Literal, NamedTuple

if TYPE_CHECKING:
    from appliance.jobs.execution import Task

TaskState = Literal["waiting", "staging", "running", "verifying", "done"]


class TaskEvent(enum.StrEnum):
    """What can happen to a task's current attempt."""

    START = "start"  # its rank's worker takes it: inputs are copied to that worker
    LAUNCH = "launch"  # its inputs are in place: the task is sent to the worker
    FINISH = "finish"  # the worker reported it done, with its outputs
    FAIL = "fail"  # it failed (the job threw, an input could not be moved or was missing)
    WORKER_LOST = "worker-lost"  # its worker disconnected or was taken off the run
    INPUT_LOST = "input-lost"  # an input went with another worker before it could be copied
    CANCEL = "cancel"  # the run ended
    SUPERSEDED = "superseded"  # another attempt of the same task finished first: the task is done
    VERIFY = "verify"  # validation: the attempt finished; its output waits for other workers' to agree
    AGREED = "agreed"  # validation: enough attempts gave the same output: the task is done
    REJECTED = "rejected"  # validation: an attempt's output differs from the one the others agreed on
    OUTPUT_LOST = "output-lost"  # done, but no live worker holds its output, which is still needed
    EMPTY = "empty"  # a rank's chunk after its first got no input: done without running
    COVERED = "covered"  # an earlier chunk's task of its rank ran it too, as part of its range
    UNCOVERED = "uncovered"  # the task whose range held it runs again: so does it


# (state, event) -> the next state; any pair not listed is refused (IllegalTransition).
# An attempt that ends another way than FINISH goes back to waiting as a new attempt.
TRANSITIONS: dict[tuple[TaskState, TaskEvent], TaskState] = {
    ("waiting", TaskEvent.START): "staging",
    ("staging", TaskEvent.LAUNCH): "running",
    ("running", TaskEvent.FINISH): "done",
    **{
        (state, event): "waiting"
        for state in ("staging", "running")
        for event in (TaskEvent.FAIL, TaskEvent.WORKER_LOST, TaskEvent.INPUT_LOST, TaskEvent.CANCEL)
    },
    ("staging", TaskEvent.SUPERSEDED): "done",
    ("running", TaskEvent.SUPERSEDED): "done",
    ("done", TaskEvent.OUTPUT_LOST): "waiting",
    ("waiting", TaskEvent.EMPTY): "done",
    ("waiting", TaskEvent.COVERED): "done",
    ("done", TaskEvent.UNCOVERED): "waiting",
    ("running", TaskEvent.VERIFY): "verifying",
    ("verifying", TaskEvent.AGREED): "done",
    ("verifying", TaskEvent.CANCEL): "waiting",
}
# How the task history names an attempt that ended by each event (OUTPUT_LOST ends no attempt: it had finished).
OUTCOMES: dict[TaskEvent, str] = {
    TaskEvent.FINISH: "done",
    TaskEvent.FAIL: "failed",
    TaskEvent.WORKER_LOST: "lost",
    TaskEvent.INPUT_LOST: "lost",
    TaskEvent.CANCEL: "cancelled",
    TaskEvent.SUPERSEDED: "superseded",
    TaskEvent.REJECTED: "rejected",
}


class IllegalTransition(Exception):
    """An event that cannot happen to a task in its state (a stale or forged report)."""


# Moves kept per run (the latest): enough for the stage page to explain what happened to a task.
LOG_LENGTH = 5000
_stimuli = itertools.count(1)


class Transition(NamedTuple):
    """A named tuple, not a dataclass: one is made at every move of every task (a frozen dataclass's
    __init__ cost the engine ~2 µs each, several a task)."""

    at: float  # monotonic seconds
    task_id: str
    group: str
    stage: int
    rank: int
    before: TaskState
    event: TaskEvent
    after: TaskState
    stimulus: str


class TransitionLog:
    """The latest moves of a run's tasks; ``stimulus`` names what the engine is handling now."""

    def __init__(self) -> None:
        self.entries: deque[Transition] = deque(maxlen=LOG_LENGTH)
        self.stimulus = "start"

    def because(self, what: str) -> None:
        """What follows is caused by ``what`` (a worker's message, its arrival or leaving, a scheduling
        round, a copy that ended): the moves until the next cause carry its unique stimulus id."""
        self.stimulus = f"{what}#{next(_stimuli)}"

    def add(self, task: Task, before: TaskState, event: TaskEvent, after: TaskState) -> None:
        at = time.monotonic()
        self.entries.append(
            Transition(at, task.id, task.group, task.stage, task.rank, before, event, after, self.stimulus)
        )

    def __iter__(self):
        return iter(self.entries)
