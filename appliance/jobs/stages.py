"""A run's stage in detail (the stage page): every task attempt with its duration, records, bytes and
worker; min/median/max across the stage's tasks and the ones that stand out (skew); progress inside the
stage with throughput and an estimated time to finish.

While the run runs, attempts come from the coordinator's execution; running attempts' records and bytes
are those of their latest task-progress report (0 until one arrives). After it ended, from the task
rows it left. A running task counts as done in the share its records (or, without reports, its running
time) are of a typical task's: the median of the stage's finished tasks, or before any has finished,
that of the job's last successful run (priors.py), whose pace then gives the time left (a task's
start-up would make the first records look slow). With neither, only finished tasks count and the
time left is not known; records, bytes and their throughput still show the stage moving.
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from appliance.jobs.execution import INPUT_STAGE
from appliance.jobs.service import TaskInfo
from appliance.jobs.spec import JobSpec

if TYPE_CHECKING:
    from appliance.jobs.priors import Prior

PAGE_SIZE = 50
# A finished task that took more than SKEW_FACTOR times the stage's median (and at least SKEW_MIN_SECONDS
# more), or wrote more than SKEW_FACTOR times its median records, stands out.
SKEW_FACTOR = 2.0
SKEW_MIN_SECONDS = 1.0
# A running task is never counted as more than this share done (it has not finished).
RUNNING_SHARE_CAP = 0.95
SORTS = ("rank", "state", "worker", "duration", "records", "bytes", "attempts")


@dataclass
class TaskLine:
    rank: int
    chunk: int  # which of the rank's chunks (a map split into chunks); 0 otherwise
    attempt: int  # 1 for the first attempt of the task
    attempts: int  # attempts of this task so far
    worker_id: str
    state: str  # waiting | running | done | failed | lost | cancelled | superseded | rejected
    seconds: float | None  # None while waiting
    records: int
    bytes: int
    error: str = ""
    skew: str = ""  # "slow", "records" or "": why it stands out
    chunks: int = 1  # the chunks the attempt ran or runs: a range's from ``chunk`` on


@dataclass(frozen=True)
class Browser:
    """What one browser did in the stage: the chunks its finished tasks ran (a range runs several;
    one a task where the stage is not split) and the time they took."""

    worker_id: str
    done: int
    seconds: float
    speed: float | None = None  # its speed estimate while the appliance knows it (engine/speeds.py)


@dataclass(frozen=True)
class Typical:
    """A finished task of the stage as the estimate expects it."""

    seconds: float
    records: float
    run_id: int | None = None  # the earlier run it comes from; None: the stage's own finished tasks
    ticks: float = 0.0  # its context.progress() calls (0: the stage's tasks make none)


@dataclass(frozen=True)
class Spread:
    min: float
    median: float
    max: float

    @property
    def ratio(self) -> float | None:
        """max / median: 1 when the stage is even."""
        return self.max / self.median if self.median > 0 else None


@dataclass
class Stage:
    group: str
    stage: int
    kind: str
    total: int
    done: int
    running: int
    lines: list[TaskLine]
    elapsed: float  # since its first attempt started (to its last end once done)
    records: int
    bytes: int
    fraction: float  # estimated share done
    eta: float | None  # seconds, while running and estimable
    spreads: dict[str, Spread] = field(default_factory=dict)  # duration / records / bytes of done tasks
    basis_run: int | None = None  # the earlier run the estimate comes from (no task of the stage finished)
    chunked: bool = False  # the stage's ranks are split into chunks
    browsers: list[Browser] = field(default_factory=list)  # most tasks done first

    @property
    def name(self) -> str:
        return "input function" if self.stage == INPUT_STAGE else f"stage {self.stage + 1} ({self.kind})"

    @property
    def records_per_second(self) -> float:
        return self.records / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def bytes_per_second(self) -> float:
        return self.bytes / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def skewed(self) -> int:
        return sum(1 for line in self.lines if line.skew)


@dataclass(frozen=True)
class _Attempt:
    rank: int
    chunk: int
    attempt: int
    worker_id: str
    state: str
    start: float
    end: float | None  # None: running
    records: int
    bytes: int
    error: str = ""
    ticks: int = 0  # context.progress() calls (live runs only: task rows do not keep them)
    chunks: int = 1  # a range's chunks from ``chunk`` on


def kind_of(spec: JobSpec, stage: int) -> str:
    return "input" if stage == INPUT_STAGE else spec.stages[stage].kind


def live_attempts(execution, group: str, stage: int) -> list[_Attempt]:
    """The stage's attempts in a running run (monotonic seconds)."""
    attempts = [
        _Attempt(
            a.rank,
            a.chunk,
            a.attempt,
            a.worker_id,
            a.state,
            a.started,
            a.finished,
            a.emits,
            a.bytes,
            a.error,
            a.ticks,
            a.chunks,
        )
        for a in execution.history
        if a.group == group and a.stage == stage
    ]
    for task in execution.active:
        if task.group == group and task.stage == stage and task.worker_id:
            attempts.append(
                _Attempt(
                    task.rank,
                    task.chunk,
                    task.attempt,
                    task.worker_id,
                    "running",
                    task.started,
                    None,
                    task.emits,
                    task.bytes,
                    ticks=task.ticks,
                    chunks=max(task.covers - task.chunk, 1),
                )
            )
    return attempts


def live_places(execution, group: str, stage: int) -> list[tuple[int, int]]:
    """The stage's tasks as (rank, chunk), but for chunks that got no input (done without running)."""
    return [(t.rank, t.chunk) for t in execution.groups[group].by_stage[stage] if not t.empty]


def finished_places(attempts: list[_Attempt], ranks: int) -> list[tuple[int, int]]:
    """A finished stage's tasks as (rank, chunk): every rank's first, and the chunks that ran."""
    return sorted({(rank, 0) for rank in range(ranks)} | {(a.rank, a.chunk) for a in attempts})


def finished_attempts(tasks: list[TaskInfo], group: str, stage: int) -> tuple[list[_Attempt], float]:
    """The stage's attempts from a finished run's task rows, in seconds from the run's first attempt,
    and the moment the run ended on that scale."""
    origin = min((t.started_at for t in tasks), default=dt.datetime.now(dt.UTC))

    def at(value: dt.datetime) -> float:
        return (value - origin).total_seconds()

    chosen = [t for t in tasks if t.group == group and t.stage == stage]
    ends = [at(t.finished_at) for t in tasks if t.finished_at is not None]
    return [
        _Attempt(
            t.rank,
            t.chunk,
            t.attempt,
            t.worker_id,
            t.state,
            at(t.started_at),
            at(t.finished_at or t.started_at),
            t.emits,
            t.bytes_out,
            t.error,
            chunks=t.chunks,
        )
        for t in chosen
    ], max(ends, default=0.0)


def _spread(values: list[float]) -> Spread | None:
    return Spread(min(values), statistics.median(values), max(values)) if values else None


def build(
    group: str,
    stage: int,
    kind: str,
    places: list[tuple[int, int]],
    attempts: list[_Attempt],
    now: float,
    expected: Typical | None = None,
) -> Stage:
    """The stage of the tasks at ``places`` (rank, chunk) from their attempts; ``now`` on the attempts'
    time scale; ``expected`` the typical task until one of the stage's own has finished. A chunk that a
    range runs (or ran) is that range's task, not one of its own."""
    by_place: dict[tuple[int, int], list[_Attempt]] = {}
    for a in sorted(attempts, key=lambda a: (a.rank, a.chunk, a.attempt, a.start)):
        by_place.setdefault((a.rank, a.chunk), []).append(a)
    ranged = {
        (a.rank, c) for a in attempts if a.state in ("running", "done") for c in range(a.chunk + 1, a.chunk + a.chunks)
    }
    places = [place for place in places if place not in ranged or place in by_place]
    size = len(places)
    done = {
        place: next(a for a in tried if a.state == "done")
        for place, tried in by_place.items()
        if any(a.state == "done" for a in tried)
    }
    running = [a for place, tried in by_place.items() for a in tried if a.end is None and place not in done]
    durations = [a.end - a.start for a in done.values()]
    spreads = {
        name: spread
        for name, spread in (
            ("duration", _spread(durations)),
            ("records", _spread([float(a.records) for a in done.values()])),
            ("bytes", _spread([float(a.bytes) for a in done.values()])),
        )
        if spread is not None
    }

    def skew(a: _Attempt) -> str:
        if a.state != "done" or len(done) < 2:
            return ""
        seconds, median = a.end - a.start, spreads["duration"].median
        if seconds > SKEW_FACTOR * median and seconds - median >= SKEW_MIN_SECONDS:
            return "slow"
        if a.records > SKEW_FACTOR * spreads["records"].median and a.records > spreads["records"].median + 1:
            return "records"
        return ""

    lines = []
    for rank, chunk in places:
        tried = by_place.get((rank, chunk), [])
        for a in tried:
            lines.append(
                TaskLine(
                    rank=rank,
                    chunk=chunk,
                    attempt=a.attempt + 1,
                    attempts=len(tried),
                    worker_id=a.worker_id,
                    state=a.state,
                    seconds=(a.end if a.end is not None else now) - a.start,
                    records=a.records,
                    bytes=a.bytes,
                    error=a.error,
                    skew=skew(a),
                    chunks=a.chunks,
                )
            )
        if not tried:
            lines.append(TaskLine(rank, chunk, 0, 0, "", "waiting", None, 0, 0))
    starts = [a.start for a in attempts]
    ended = len(done) == size
    last = max((a.end for a in done.values()), default=now) if ended else now
    elapsed = max(0.0, last - min(starts)) if starts else 0.0
    ticks = statistics.median(a.ticks for a in done.values()) if done else 0.0
    typical = Typical(spreads["duration"].median, spreads["records"].median, ticks=ticks) if done else expected
    shares = _shares(running, typical, now) if typical is not None else {}
    fraction = (len(done) + sum(shares.values())) / size if size else 0.0
    eta = None
    if not ended and typical is not None and typical.run_id is not None:
        # At the earlier run's pace: the task furthest from done (one not started has all of it left).
        eta = typical.seconds * max(1 - shares.get(place, 0.0) for place in places if place not in done)
    elif not ended and fraction > 0 and elapsed > 0:
        eta = elapsed * (1 - fraction) / fraction
    return Stage(
        group=group,
        stage=stage,
        kind=kind,
        total=size,
        done=len(done),
        running=len(running),
        lines=lines,
        elapsed=elapsed,
        records=sum(a.records for a in done.values()) + sum(a.records for a in running),
        bytes=sum(a.bytes for a in done.values()) + sum(a.bytes for a in running),
        fraction=1.0 if ended else fraction,
        eta=eta,
        spreads=spreads,
        basis_run=typical.run_id if typical is not None and not ended else None,
        chunked=any(chunk for _, chunk in places) or any(a.chunks > 1 for a in attempts),
        browsers=_browsers(done.values()),
    )


def _browsers(done) -> list[Browser]:
    """Per browser, the chunks its finished tasks ran and their time: most first."""
    chunks: dict[str, int] = {}
    seconds: dict[str, float] = {}
    for a in done:
        chunks[a.worker_id] = chunks.get(a.worker_id, 0) + a.chunks
        seconds[a.worker_id] = seconds.get(a.worker_id, 0.0) + a.end - a.start
    return sorted(
        (Browser(worker, n, seconds[worker]) for worker, n in chunks.items()),
        key=lambda b: (-b.done, b.worker_id),
    )


def _shares(running: list[_Attempt], typical: Typical, now: float) -> dict[tuple[int, int], float]:
    """(rank, chunk) -> the share done of its running task against the typical task's: by its
    context.progress() calls when the stage's tasks make them (a task that calls it as it goes says
    how far it is, whatever it emits), else by its records, else by its running time."""
    shares: dict[tuple[int, int], float] = {}
    for a in running:
        place = (a.rank, a.chunk)
        if place in shares:  # a backup attempt of the same task counts once
            continue
        if typical.ticks > 0 and a.ticks:
            shares[place] = min(a.ticks / typical.ticks, RUNNING_SHARE_CAP)
        elif typical.records > 0 and a.records:
            shares[place] = min(a.records / typical.records, RUNNING_SHARE_CAP)
        elif typical.seconds > 0:
            shares[place] = min((now - a.start) / typical.seconds, RUNNING_SHARE_CAP)
        else:
            shares[place] = 0.0
    return shares


_KEYS = {
    "rank": lambda line: (line.rank, line.chunk, line.attempt),
    "state": lambda line: (line.state, line.rank, line.chunk),
    "worker": lambda line: (line.worker_id, line.rank, line.chunk),
    "duration": lambda line: (line.seconds is not None, line.seconds or 0.0),
    "records": lambda line: line.records,
    "bytes": lambda line: line.bytes,
    "attempts": lambda line: (line.attempts, line.rank, line.chunk),
}


def page_of(lines: list[TaskLine], sort: str, descending: bool, page: int) -> tuple[list[TaskLine], int, int]:
    """One page of the sorted lines, the page number (clamped) and the number of pages."""
    ordered = sorted(lines, key=_KEYS[sort if sort in _KEYS else "rank"], reverse=descending)
    pages = max(1, -(-len(ordered) // PAGE_SIZE))
    page = min(max(1, page), pages)
    return ordered[(page - 1) * PAGE_SIZE : page * PAGE_SIZE], page, pages


def monotonic_now() -> float:
    return time.monotonic()


def input_records(execution, group: str, stage: int) -> int:
    """Records the stage before emitted in the group so far: the stage's input (0 for the input function)."""
    tasks = execution.groups[group].by_stage.get(stage - 1, [])  # none before the input function
    return sum(t.emits for t in tasks if t.state == "done")


def estimates(
    execution, priors: Mapping[int, Prior] | None = None, now: float | None = None
) -> dict[tuple[str, int], Stage]:
    """Every started stage of a running run by (group, stage), from each task's current attempt only
    (the run page's progress table shows the share done, throughput and the time left; no history is
    read); ``priors`` are the job's last successful run's stages (priors.py)."""
    now = time.monotonic() if now is None else now
    priors = priors or {}
    out: dict[tuple[str, int], Stage] = {}
    for group in execution.groups.values():
        by_stage: dict[int, list[_Attempt]] = {}
        for (stage, rank, chunk), task in group.tasks.items():
            if (task.state == "done" and task.worker_id) or (task.state == "running" and task.worker_id):
                end = task.finished if task.state == "done" else None
                by_stage.setdefault(stage, []).append(
                    _Attempt(
                        rank,
                        chunk,
                        task.attempt,
                        task.worker_id or "",
                        task.state,
                        task.started,
                        end,
                        task.emits,
                        task.bytes,
                        ticks=task.ticks,
                    )
                )
        for stage, attempts in by_stage.items():
            prior = priors.get(stage)
            expected = prior.typical(input_records(execution, group.letter, stage)) if prior else None
            places = live_places(execution, group.letter, stage)
            out[(group.letter, stage)] = build(
                group.letter, stage, execution.kind(stage), places, attempts, now, expected
            )
    return out


def of_finished_run(tasks: list[TaskInfo], spec: JobSpec) -> dict[tuple[str, int], Stage]:
    """Every stage that ran of a finished run by (group, stage), from its task rows (the run page's
    throughput per stage)."""
    out: dict[tuple[str, int], Stage] = {}
    for group, stage in sorted({(t.group, t.stage) for t in tasks}):
        attempts, now = finished_attempts(tasks, group, stage)
        places = finished_places(attempts, 1 if stage == INPUT_STAGE else spec.worker_count)
        out[(group, stage)] = build(group, stage, kind_of(spec, stage), places, attempts, now)
    return out
