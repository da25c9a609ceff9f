"""Durable run progress: what a running run needs to continue after the appliance restarts.

A checkpoint holds, per run, the ranks' workers, every task that finished (its attempt and where
its outputs are: PMRFS blob or object key, size, records), the attempt numbers handed out, the
attempts history (the task table written when the run ends), the groups' epochs, the workers
taken off or outrun, and the parameter server's clocks (its values are kept in jobs_parameter).
Which browsers hold each PMRFS output is not kept: after a restart the workers' ``hello`` says
which blobs they hold (the engine's coordinator matches them).

A task that was running is kept as running on its worker: pages keep running their tasks while
their connection is away and report them when they are back, and the worker's ``hello`` lists
the tasks its page still has; the others run again. Rank-to-rank and parameter-server stages that
were not finished in a group start again from their stage's start (as after a lost rank), so peer
messages in flight need no keeping.

The coordinator writes the checkpoint of each run whose execution changed (``RunExecution.changes``)
at most once a second, off the scheduling hot path, and once more when it stops. Times are kept as
wall-clock seconds (monotonic clocks do not survive a restart).
"""

from __future__ import annotations

import time

import msgspec

from appliance.clock import now
from appliance.jobs.execution import INPUT_STAGE, AttemptRecord, Output, RunExecution, Task, TaskEvent
from appliance.jobs.tables import RunCheckpoint

# 2: tasks and attempts name their chunk (a checkpoint of format 1 makes its run start over).
FORMAT = 2
# What ends an attempt that was under way when the appliance stopped (not the worker's fault).
RESTART_ERROR = "the appliance restarted"
RESTART_AGAIN = f"{RESTART_ERROR}: its stage talks to other ranks and starts again"


class SavedOutput(msgspec.Struct, array_like=True):
    partition: int
    location: str
    size: int
    records: int


class SavedTask(msgspec.Struct, array_like=True):
    group: str
    stage: int
    rank: int
    state: str  # done, waiting, or under way (staging, running, verifying)
    attempt: int
    attempts: int
    worker_id: str | None
    started: float
    finished: float
    emits: int
    bytes: int
    cpu_ms: int
    outputs: list[SavedOutput]
    chunk: int
    covers: int = 0  # a range's end (the chunks after its own it ran or runs: execution.py)


class SavedAttempt(msgspec.Struct, array_like=True):
    group: str
    stage: int
    rank: int
    attempt: int
    worker_id: str
    ended_by: str
    started: float
    finished: float
    emits: int
    bytes: int
    cpu_ms: int
    error: str
    chunk: int


class Checkpoint(msgspec.Struct):
    format: int
    ranks: dict[str, list[str | None]]
    tasks: list[SavedTask]
    history: list[SavedAttempt]
    epochs: dict[str, int] = {}
    excluded: list[str] = []
    outrun: list[str] = []
    unspeculated: list[int] = []
    accounts: dict[str, int] = {}
    # Parameter server: per group, each rank's clock when its task began (its values are kept in
    # jobs_parameter, written by the coordinator beside the checkpoint).
    clocks: dict[str, list[int]] = {}
    # Per group, how its input was cut (RunExecution.input_shares; [] for equal pieces): an input
    # computed again after the restart is cut as the maps that already read it saw it.
    shares: dict[str, list[int]] = {}


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Checkpoint)


def _wall_offset() -> float:
    """Add to a monotonic time to get epoch seconds (subtract to go back)."""
    return time.time() - time.monotonic()


def capture(
    execution: RunExecution,
    epochs: dict[str, int],
    excluded: set[str],
    accounts: dict[str, int],
    clocks: dict[str, list[int]],
) -> Checkpoint:
    wall = _wall_offset()
    tasks = []
    for task in execution.all_tasks():
        if task.state == "waiting" and task.attempts == 1:
            continue  # never tried: nothing to keep
        done = task.state == "done"
        kept = task.state != "waiting"  # an attempt under way is recorded as ended by the restart
        tasks.append(
            SavedTask(
                task.group,
                task.stage,
                task.rank,
                task.state,
                task.attempt,
                task.attempts,
                task.worker_id if kept else None,
                task.started + wall if kept else 0.0,
                time.time() if not done else task.finished + wall,
                task.emits if kept else 0,
                task.bytes if kept else 0,
                task.cpu_ms if kept else 0,
                [SavedOutput(o.partition, o.location, o.size, o.records) for o in task.outputs] if done else [],
                task.chunk,
                task.covers if kept else 0,
            )
        )
    history = [
        SavedAttempt(
            a.group,
            a.stage,
            a.rank,
            a.attempt,
            a.worker_id,
            a.ended_by.value,
            a.started + wall,
            a.finished + wall,
            a.emits,
            a.bytes,
            a.cpu_ms,
            a.error,
            a.chunk,
        )
        for a in execution.history
    ]
    return Checkpoint(
        FORMAT,
        {letter: list(group.ranks) for letter, group in execution.groups.items()},
        tasks,
        history,
        dict(epochs),
        sorted(excluded),
        sorted(execution.outrun),
        sorted(execution.unspeculated),
        dict(accounts),
        clocks,
        {letter: group.shares for letter, group in execution.groups.items() if group.shares is not None},
    )


def restore(execution: RunExecution, checkpoint: Checkpoint) -> list[Task]:
    """Put a fresh execution of the run back where the checkpoint left it. Attempts under way then
    are recorded as cancelled by the restart and run again; so are the finished tasks of a stage
    that talks to other ranks and was not finished in its group. Returns the done tasks (whose
    PMRFS outputs have no known holder yet)."""
    wall = _wall_offset()
    execution.history.extend(_attempt(a, wall, TaskEvent(a.ended_by), a.error) for a in checkpoint.history)
    execution.outrun.update(checkpoint.outrun)
    execution.unspeculated.update(checkpoint.unspeculated)
    for letter, ranks in checkpoint.ranks.items():
        execution.groups[letter].ranks = list(ranks)
    saved = {(t.group, t.stage, t.rank, t.chunk): t for t in checkpoint.tasks}
    for letter, group in execution.groups.items():
        if letter in checkpoint.shares:
            group.shares = list(checkpoint.shares[letter])
        elif (letter, INPUT_STAGE, 0, 0) in saved:
            group.shares = []  # its input started before checkpoints kept shares: it was cut equally

    def finished(letter: str, stage: int, rank: int) -> bool:
        entry = saved.get((letter, stage, rank, 0))  # a stage that talks runs one task per rank
        return entry is not None and entry.state == "done"

    # Per group, the first stage that talks to other ranks and was not finished: it starts again
    # from its start, and with it whatever its ranks did after it.
    restart_from = {
        letter: min(
            (s for s in execution.talking if not all(finished(letter, s, r) for r in range(execution.worker_count))),
            default=None,
        )
        for letter in execution.groups
    }
    done: list[Task] = []
    for task in execution.all_tasks():
        entry = saved.get((task.group, task.stage, task.rank, task.chunk))
        if entry is None:
            continue
        task.attempt, task.attempts = entry.attempt, entry.attempts
        first = restart_from[task.group]
        if entry.state == "waiting":
            continue
        talks_again = first is not None and task.stage >= first
        if entry.state == "running" and not talks_again:
            # Its page may still run it (pages keep their tasks across a lost connection): the
            # worker's hello says whether it does.
            execution.restore_running(task, entry.worker_id or "", entry.started - wall, entry.covers)
            continue
        if entry.state != "done" or talks_again:
            why = RESTART_ERROR if entry.state != "done" else RESTART_AGAIN
            execution.history.append(_attempt(entry, wall, TaskEvent.CANCEL, why))
            task.attempt, task.attempts = task.attempts, task.attempts + 1
            continue
        outputs = [Output(o.partition, o.location, o.size, o.records) for o in entry.outputs]
        execution.restore_done(task, entry.worker_id or "", outputs, entry.emits, entry.cpu_ms)
        task.covers = entry.covers
        task.started, task.finished = entry.started - wall, entry.finished - wall
        done.append(task)
    return done


def _attempt(saved: SavedAttempt | SavedTask, wall: float, ended_by: TaskEvent, error: str) -> AttemptRecord:
    return AttemptRecord(
        saved.group,
        saved.stage,
        saved.rank,
        saved.attempt,
        saved.worker_id or "",
        ended_by,
        saved.started - wall,
        saved.finished - wall,
        saved.emits,
        saved.bytes,
        saved.cpu_ms,
        error,
        saved.chunk,
    )


def encode(checkpoint: Checkpoint) -> bytes:
    return _encoder.encode(checkpoint)


def decode(data: bytes) -> Checkpoint | None:
    """None for a checkpoint this version cannot read (the run then starts over)."""
    try:
        checkpoint = _decoder.decode(data)
    except msgspec.DecodeError:
        return None
    return checkpoint if checkpoint.format == FORMAT else None


async def save(run_id: int, data: bytes, exists: bool) -> None:
    if exists:
        await RunCheckpoint.update({RunCheckpoint.data: data, RunCheckpoint.saved_at: now()}).where(
            RunCheckpoint.run == run_id
        )
    else:
        await RunCheckpoint.insert(RunCheckpoint(run=run_id, data=data, saved_at=now()))


async def load(run_id: int) -> Checkpoint | None:
    row = await RunCheckpoint.select(RunCheckpoint.data).where(RunCheckpoint.run == run_id).first()
    return decode(row["data"]) if row else None
