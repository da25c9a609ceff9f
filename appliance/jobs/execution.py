"""One run's task graph, in memory: which task may start where, and what a lost worker costs.

Pure state, no I/O: the coordinator feeds it events (a rank got a worker, a task finished, a
worker vanished) and asks it what can start next. Every group (A..Z) runs the job on its own
``workerCount`` ranks; each rank is bound to one worker (its home), which runs that rank's tasks
one at a time, stage after stage. Stage -1 is the input function, run on rank 0.

A map stage (``stage.chunks = 'auto'``, the default) that does not talk to other ranks splits
each rank's input into CHUNKS_PER_RANK contiguous chunks, one task each: the rank's worker takes
them in order, and a worker of the run with nothing of its own to do takes another rank's waiting
chunk (it pulls work as it frees up, so a fast browser does more than a slow one). A rank's output
is its chunks' outputs in chunk order, which is what one task per rank would have written.

Where such a map feeds a reduce, a chunk's task covers a range: the rank's waiting chunks after it
as well (``covers``), run as one task with one output (a chunk's output costs as much as the keys
it holds, nearly a whole vocabulary for a word count). A worker with nothing to take asks the
busiest range to split (``splits``, task-split): its page stops before a later chunk and says
which (``split_at``), and the chunks after that wait for free workers. Work is stolen in halves,
and a range nobody asks of costs one task per rank.

How a stage's output is partitioned depends on what reads it (docs/architecture.md, "Jobs"):
``chunks`` for the input (contiguous pieces: the rank's piece r, equal or by speed (input_shares), then that in
contiguous chunks, piece r * chunks + c for chunk c of rank r), ``hash`` when a reduce stage follows
(every reduce rank needs its keys from every producer), ``rank`` otherwise (the next map task r
reads only task r's output, so it can start as soon as that one task is done).
"""

from __future__ import annotations

import math
import string
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from appliance.jobs.agreement import Agreement
from appliance.jobs.spec import JobSpec, StageSpec
from appliance.jobs.stage_talks import reads_rank_state
from appliance.jobs.stragglers import Stragglers
from appliance.jobs.transitions import (
    OUTCOMES,
    TRANSITIONS,
    IllegalTransition,
    TaskEvent,
    TaskState,
    TransitionLog,
)

INPUT_STAGE = -1
# The content type task-assign names for the shuffle format.
SHUFFLE_TYPE = "application/x-peermr-shuffle"
# The input function's timeout (a job's stages carry their own).
INPUT_TIMEOUT_SECONDS = 3600
GROUP_LETTERS = string.ascii_uppercase
# A splittable map stage's chunks per rank: enough that a fast browser can take a slow one's share
# and a departed one's work spreads over the rest, few enough that a task's fixed costs (a copy, a
# task-assign, a report: tens of milliseconds) stay small beside its work. Fixed, not a setting: a
# run re-adopted after a restart must split its stages as it did before.
CHUNKS_PER_RANK = 4
SPLIT_ASKED, SPLIT_DECLINED = 1, 2
# The input is cut in proportion to the speeds of the browsers that take its pieces (input_shares)
# only when the fastest is at least this many times the slowest: an estimate moves by a few tens of
# percent from run to run on equal machines, and cutting by that noise would make one of them late.
SHARE_SPREAD = 1.5
# Shares are whole numbers (the page cuts with integers, so both sides agree on every bound): the
# fastest browser's is SHARE_SCALE.
SHARE_SCALE = 64
# A browser below this fraction of the fastest's speed gets no share: what a map costs whatever its
# input (its sandbox, its output of nearly every key) would make it the last to finish however
# little it were given (bench/uneven_fleet.py: a 0.125-core browser took 1.3-1.6 s on 6 % of the
# input while the others took 0.7-0.9 s on theirs). Its rank's map then runs on no records.
SHARE_CUTOFF = 1 / 3


def _cut_anywhere(stage: StageSpec) -> bool:
    """A map whose input may be cut at any record without changing what it computes: it neither talks
    to other ranks nor keeps state per rank (context.rng, context.shard, getWorkerCount)."""
    return stage.kind == "map" and not stage.talks_to_ranks and not reads_rank_state(stage.source)


def stage_label(stage: int) -> str:
    """How object keys name a stage: "input", then "stage-1" for the job's first stage."""
    return "input" if stage == INPUT_STAGE else f"stage-{stage + 1}"


@dataclass
class Output:
    """One blob a task produced for one partition."""

    partition: int
    location: str  # PMRFS sha256, or the object key in the run's cloud bucket
    size: int
    records: int
    # Workers holding a copy (PMRFS); empty for cloud storage, which never loses it.
    holders: set[str] = field(default_factory=set)


@dataclass(eq=False, kw_only=True)  # compared (and kept in sets) by identity
class Try:
    """What one try of a task on one worker has: its number, worker, state, progress and outputs.
    A Task carries its own current try inline; an Attempt is an extra one beside it."""

    state: TaskState = "waiting"
    attempt: int = 0  # its number within the task: ids never repeat
    worker_id: str | None = None
    outputs: list[Output] = field(default_factory=list)
    started: float = 0.0
    finished: float = 0.0
    last_activity: float = 0.0
    worker_timeout: float = 3600.0
    emits: int = 0
    bytes: int = 0
    cpu_ms: int = 0
    ticks: int = 0  # context.progress() calls
    beats: int = 0  # the sandbox's heartbeats (its event loop turns)
    read: int = 0  # the input records its job has reached, as its page last said (at most ``work``)
    read_at: float = 0.0  # when its page last said so
    # When its progress (emits, bytes written, ticks) last moved, and whether it is stalled now.
    progressed_at: float = 0.0
    stalled: bool = False
    launched: float = 0.0  # when its inputs were in place and it was sent to its worker
    # A reduce that started before all its producers were done (a streaming input): its task-assign
    # went out with the pieces in place then, and it stays staging until the producers in
    # ``awaiting`` (ranks whose pieces are still to be sent) are done and their pieces sent.
    streaming: bool = False
    awaiting: set[int] = field(default_factory=set)
    work: int = 0  # the records it reads, once they are in place (its pace and speed are per record)
    # The chunk after the last it runs, once started: past its own for a range, else its own + 1 (0 before).
    covers: int = 0

    # The id made for the attempt number it was made for (the engine asks for ids many times a task).
    _id: tuple[int, str] | None = field(default=None, repr=False)

    @property
    def id(self) -> str:
        """run.group.stage.rank.attempt; a chunk after a rank's first is named rank"c"chunk."""
        if (made := self._id) is not None and made[0] == self.attempt:
            return made[1]
        place = f"{self.rank}c{self.chunk}" if self.chunk else str(self.rank)
        made = self._id = (self.attempt, f"{self.run_id}.{self.group}.{self.stage}.{place}.{self.attempt}")
        return made[1]


@dataclass(eq=False)
class Task(Try):
    """One (group, stage, rank, chunk) of a run, and its current try."""

    run_id: int
    group: str
    stage: int
    rank: int
    chunk: int = 0
    # Attempt numbers handed out so far (an extra attempt takes the next one, so ids never repeat).
    attempts: int = 1
    # A waiting chunk that an earlier chunk's running task of its rank covers (``covers``).
    covered_by: Task | None = None
    # A split asked of its current attempt: SPLIT_ASKED until its page answers; SPLIT_DECLINED when
    # its page could not (its job read its input as an array, or was in its range's last chunk).
    split: int = 0
    # The most chunks its range may cover when it starts (0: all it finds), as ready() shared them out.
    span: int = 0

    primary = None  # a task races no one: Attempt.primary names the task an extra attempt races
    is_backup = False

    @property
    def empty(self) -> bool:
        """A chunk after its rank's first that got no input, or that an earlier chunk's range ran: done
        without an attempt of its own (progress leaves it out)."""
        return bool(self.chunk) and self.state == "done" and not self.worker_id


@dataclass(eq=False)
class Attempt(Try):
    """An extra try of a task on another worker, beside the task's own: a backup of a slow or stalled
    task (the first of the two to finish wins) or a validation replica (their outputs must agree).
    The task's state lives in the Task; an Attempt that wins gives it its outputs."""

    task: Task

    is_backup = True

    @property
    def primary(self) -> Task:
        return self.task

    @property
    def run_id(self) -> int:
        return self.task.run_id

    @property
    def group(self) -> str:
        return self.task.group

    @property
    def stage(self) -> int:
        return self.task.stage

    @property
    def rank(self) -> int:
        return self.task.rank

    @property
    def chunk(self) -> int:
        return self.task.chunk


@dataclass
class AttemptRecord:
    """A finished or abandoned attempt, kept for the run's task history."""

    group: str
    stage: int
    rank: int
    attempt: int
    worker_id: str
    ended_by: TaskEvent
    started: float
    finished: float
    emits: int
    bytes: int
    cpu_ms: int
    error: str = ""
    chunk: int = 0
    ticks: int = 0  # its context.progress() calls
    chunks: int = 1  # the chunks it ran: a range's from ``chunk`` on

    @property
    def state(self) -> str:
        """done | failed | lost | cancelled"""
        return OUTCOMES[self.ended_by]

    @property
    def worker_lost(self) -> bool:
        """Abandoned because its own worker disconnected or was taken off the run."""
        return self.ended_by is TaskEvent.WORKER_LOST


class Group:
    def __init__(self, run: RunExecution, letter: str):
        self.letter = letter
        self.ranks: list[str | None] = [None] * run.worker_count
        # When each stage's first task started (the stage timeout counts from there).
        self.stage_started: dict[int, float] = {}
        self.tasks: dict[tuple[int, int, int], Task] = {(INPUT_STAGE, 0, 0): Task(run.run_id, letter, INPUT_STAGE, 0)}
        for stage in range(len(run.spec.stages)):
            for rank in range(run.worker_count):
                for chunk in range(run.chunks[stage]):
                    self.tasks[(stage, rank, chunk)] = Task(run.run_id, letter, stage, rank, chunk)
        # Each rank's tasks in stage and chunk order. A rank's tasks of a stage can only become ready
        # once its tasks of the stage before are done (every producer set includes the same rank, or
        # the input on rank 0), so the first task not done says which stage the rank is at:
        # cursor[rank] points at it.
        # Each stage's tasks in rank and chunk order (what the stragglers, speeds and the stage page
        # compare a task with), so that no step walks every task of the run. Both in one pass: the
        # tasks were made in (stage, rank, chunk) order (a sort, or a walk of the run per rank, cost a
        # 64-rank run's start ~10 µs a task).
        self.by_rank: list[list[Task]] = [[] for _ in range(run.worker_count)]
        self.by_stage: dict[int, list[Task]] = {}
        for (stage, rank, _), task in self.tasks.items():
            self.by_rank[rank].append(task)
            self.by_stage.setdefault(stage, []).append(task)
        self.stage_size = {stage: len(tasks) for stage, tasks in self.by_stage.items()}
        self.cursor: list[int] = [0] * run.worker_count
        self.stage_done: dict[int, int] = dict.fromkeys(self.stage_size, 0)
        # Started stages with tasks not done yet (the ones a stage timeout can still hit).
        self.open_stages: set[int] = set()
        # How the input is cut among the ranks (RunExecution.input_shares): None until its first start.
        self.shares: list[int] | None = None

    def first_not_done(self, rank: int) -> Task | None:
        tasks, index = self.by_rank[rank], self.cursor[rank]
        while index < len(tasks) and tasks[index].state == "done":
            index += 1
        self.cursor[rank] = index
        return tasks[index] if index < len(tasks) else None

    def waiting_now(self, rank: int) -> list[Task]:
        """The rank's waiting tasks of the stage it is at (its chunks no worker has taken yet)."""
        first = self.first_not_done(rank)
        if first is None:
            return []
        # Only that stage's tasks, which come first from the cursor: not the rest of the rank's chain.
        tasks, waiting = self.by_rank[rank], []
        for index in range(self.cursor[rank], len(tasks)):
            if tasks[index].stage != first.stage:
                break
            if tasks[index].state == "waiting" and tasks[index].covered_by is None:
                waiting.append(tasks[index])
        return waiting

    def count_done(self, task: Task, delta: int) -> None:
        self.stage_done[task.stage] += delta
        if delta < 0:
            self.cursor[task.rank] = min(self.cursor[task.rank], self.by_rank[task.rank].index(task))
        if self.stage_done[task.stage] == self.stage_size[task.stage]:
            self.open_stages.discard(task.stage)
        elif task.stage in self.stage_started:
            self.open_stages.add(task.stage)


class RunExecution(Stragglers, Agreement):
    def __init__(self, run_id: int, spec: JobSpec, *, cloud: bool = False):
        self.run_id = run_id
        self.spec = spec
        self.worker_count = spec.worker_count
        self.last_stage = len(spec.stages) - 1
        # Cloud storage keeps outputs whatever happens to the workers that wrote them.
        self.cloud = cloud
        self.chunks = self._chunks(spec)
        self.groups = {letter: Group(self, letter) for letter in GROUP_LETTERS[: spec.group_count]}
        # Whether the first stage's chunk tasks run ranges (a split map that feeds a reduce, whose
        # pieces are the input's; not when attempts must agree, which would need the same range).
        validated = bool(spec.validation and spec.validation.replicas)
        self.ranged = self.chunks[0] > 1 and self.partitioning(0) == "hash" and not validated
        # Splits the execution decided to ask for: (task id, worker id, before which chunk), sent by
        # the engine (take_splits).
        self.splits: list[tuple[str, str, int]] = []
        self.history: list[AttemptRecord] = []
        # Indexes kept by the state changes below, so a scheduling round costs O(ranks), not O(tasks).
        self.active: set[Try] = set()  # staging or running: tasks' own tries and extra attempts
        # Task -> its backup attempt on another worker (speculative execution), while both run.
        self.backups: dict[Task, Attempt] = {}
        # Stages that message other ranks or use the parameter server (as the spec extraction found):
        # never speculated nor validated, since two attempts of one rank would both take part (a
        # backup that tries anyway is refused at run time as well).
        talking = {stage for stage, s in enumerate(spec.stages) if s.talks_to_ranks}
        self.talking = frozenset(talking)
        # Counts state changes, so a checkpoint is written only when something changed (checkpoints.py).
        self.changes = 0
        # Validation (execution.validation = {replicas}): every task of the other stages runs on that
        # many workers and is done once a majority gave the same outputs. A validated run is not speculated.
        self.validation = spec.validation.replicas if spec.validation else 0
        self.unvalidated = talking
        self.replicas: dict[Task, list[Task]] = {}  # task -> its extra attempts running now
        self.results: dict[Task, list[Task]] = {}  # task -> its finished attempts waiting for agreement
        self.unspeculated: set[int] = (
            set(range(len(spec.stages))) if not spec.speculation or self.validation else talking
        )
        # Workers a backup attempt outran in this run (a throttled or overloaded browser): their next
        # tasks get a backup at once instead of after the evidence of slowness, until one of them wins.
        self.outrun: set[str] = set()
        # A reduce may start on its rank's worker once that rank's map is done, and take the other
        # maps' pieces as they come (the shuffle overlaps the decoding). Not when attempts must agree
        # (replicas need the whole input at once) nor with cloud storage (presigned URLs, no copies).
        self.streams = not cloud and not self.validation
        # What the execution decided pages must be told: the (task id, worker id) of attempts no longer
        # wanted (a backup that lost its race, replicas once the others agreed, a streaming reduce sent
        # back while its page waits for input). The engine sends them (take_cancels).
        self.cancels: list[tuple[str, str]] = []
        self.transitions = TransitionLog()

    # ------------------------------------------------------------ shape

    @staticmethod
    def _chunks(spec: JobSpec) -> dict[int, int]:
        """Each stage's tasks per rank. A map (unless ``stage.chunks = 'rank'``) splits into
        CHUNKS_PER_RANK unless it talks to other ranks or keeps state per rank (context.rng,
        context.shard, getWorkerCount); it reads the stage before's chunks one to one when that stage
        is a map split alike, and otherwise can only be split if it is the first (the input's
        chunks are cut for it). Reduce partitions stay one per rank."""
        chunks = {INPUT_STAGE: 1}
        for stage, s in enumerate(spec.stages):
            whole = not _cut_anywhere(s) or s.chunks == "rank"
            before = chunks[stage - 1] if stage > 0 and spec.stages[stage - 1].kind == "map" else 1
            chunks[stage] = 1 if whole or (stage > 0 and before == 1) else (CHUNKS_PER_RANK if stage == 0 else before)
        return chunks

    def partitioning(self, stage: int) -> str:
        if stage == INPUT_STAGE:
            return "chunks"
        if stage < self.last_stage and self.spec.stages[stage + 1].kind == "reduce":
            return "hash"
        return "rank"

    def kind(self, stage: int) -> str:
        return "input" if stage == INPUT_STAGE else self.spec.stages[stage].kind

    def stage_timeout(self, stage: int) -> float:
        return INPUT_TIMEOUT_SECONDS if stage == INPUT_STAGE else self.spec.stages[stage].timeout

    def content_type(self, stage: int) -> str:
        return self.spec.input_content_type if stage == INPUT_STAGE else self.spec.stages[stage].content_type

    def wire_type(self, stage: int) -> str:
        """What the stage's output blobs are written in. Between stages, JSON travels in the shuffle
        format (static/worker/codecs.js), which means the same and is smaller and faster; saved copies
        read back as JSON lines (pmrfs/transcoding.py). Cloud buckets, which users read directly, and
        CSV and BSON stages keep the declared type."""
        declared = self.content_type(stage)
        between = stage != self.last_stage and not (self.cloud and self.spec.save_intermediate_output)
        return SHUFFLE_TYPE if between and declared == "application/json" else declared

    def all_tasks(self):
        for group in self.groups.values():
            yield from group.tasks.values()

    def task(self, group: str, stage: int, rank: int, chunk: int = 0) -> Task:
        return self.groups[group].tasks[(stage, rank, chunk)]

    def find(self, task_id: str) -> Try | None:
        try:
            run, group, stage, place, attempt = task_id.split(".")
            rank, _, chunk = place.partition("c")
            if chunk == "0":
                return None  # a rank's first chunk is named by the rank alone
            task = self.groups[group].tasks[(int(stage), int(rank), int(chunk or 0))]
        except (ValueError, KeyError):
            return None
        if int(run) != self.run_id:
            return None
        if int(attempt) == task.attempt:
            return task
        others = [self.backups[task]] if task in self.backups else self.replicas.get(task, [])
        return next((t for t in others if t.attempt == int(attempt)), None)

    # ------------------------------------------------------------ workers

    def workers(self) -> set[str]:
        return {w for group in self.groups.values() for w in group.ranks if w is not None}

    def vacant_ranks(self) -> list[tuple[str, int]]:
        return [(g.letter, r) for g in self.groups.values() for r, w in enumerate(g.ranks) if w is None]

    def assign(self, group: str, rank: int, worker_id: str | None) -> None:
        """Give the rank to a worker (None: the rank is vacant)."""
        self.groups[group].ranks[rank] = worker_id
        self.changes += 1

    def restore_running(self, task: Task, worker_id: str, started: float, covers: int = 0) -> None:
        """A task a checkpoint says was running: running again, on the same worker, until the worker
        comes back and says whether its page still has it (checkpoints.py); a range covers its
        chunks again."""
        now = time.monotonic()
        task.state, task.worker_id, task.started, task.covers = "running", worker_id, started, covers
        for covered in self.covered(task):
            covered.covered_by = task
        task.launched = task.progressed_at = task.last_activity = now
        self.active.add(task)
        group = self.groups[task.group]
        group.stage_started.setdefault(task.stage, now)
        group.open_stages.add(task.stage)

    def restore_done(self, task: Task, worker_id: str, outputs: list[Output], emits: int, cpu_ms: int) -> None:
        """A task a checkpoint says was done (checkpoints.py): done again, no holder known for its outputs."""
        task.state, task.worker_id, task.outputs = "done", worker_id, outputs
        task.emits, task.bytes, task.cpu_ms = emits, sum(o.size for o in outputs), cpu_ms
        self.groups[task.group].count_done(task, +1)

    def rank_of(self, worker_id: str) -> tuple[str, int] | None:
        """The worker's first rank, or None."""
        return next(iter(self.places_of(worker_id)), None)

    def places_of(self, worker_id: str) -> list[tuple[str, int]]:
        """Every rank the worker holds: one, or more in a run whose stages do not talk, when its
        fleet shrank below its ranks (Placement.fill_vacancies)."""
        return [(g.letter, r) for g in self.groups.values() for r, holder in enumerate(g.ranks) if holder == worker_id]

    # ------------------------------------------------------------ what can run

    def producers(self, task: Task) -> list[Task]:
        """The upstream tasks whose output this task reads, in rank and chunk order."""
        group = self.groups[task.group]
        if task.stage == INPUT_STAGE:
            return []
        if task.stage == 0:
            return [group.tasks[(INPUT_STAGE, 0, 0)]]
        upstream = task.stage - 1
        chunks = range(self.chunks[upstream])
        if self.partitioning(upstream) == "hash":
            return [group.tasks[(upstream, r, c)] for r in range(self.worker_count) for c in chunks]
        if self.chunks[task.stage] == self.chunks[upstream]:
            return [group.tasks[(upstream, task.rank, task.chunk)]]
        return [group.tasks[(upstream, task.rank, c)] for c in chunks]

    def producer_index(self, producer: Task) -> int:
        """How a streaming reduce's page numbers a producer: its place in producers() order."""
        return producer.rank * self.chunks[producer.stage] + producer.chunk

    def inputs(self, task: Task) -> list[Output]:
        """This task's input blobs, in producer order (the order a reduce sees values in)."""
        if task.covers - task.chunk <= 1:  # one partition (pieces'), in one walk: a reduce has ranks producers
            partition = self.partition_read(task)
            return [o for p in self.producers(task) for o in p.outputs if o.partition == partition]
        return [o for p in self.producers(task) for o in self.pieces(task, p)]

    def pieces(self, task: Task, producer: Task) -> list[Output]:
        """The blobs of one producer that ``task`` reads (those of its partition, or of each chunk of
        its range in chunk order), in order."""
        first = self.partition_read(task)
        end = first + max(task.covers - task.chunk, 1)
        return [o for partition in range(first, end) for o in producer.outputs if o.partition == partition]

    def chunk_of(self, task: Task, output: Output) -> int | None:
        """The chunk of the input an output of the input function holds, for a range's page (where it
        may stop); None for any other task's input."""
        return output.partition % self.chunks[0] if self.ranged and task.stage == 0 else None

    def partition_read(self, task: Task) -> int:
        """The partition a task reads: its chunk of the input for the first stage, its rank's after."""
        return task.rank * self.chunks[0] + task.chunk if task.stage == 0 else task.rank

    def input_shares(self, letter: str, speed: Callable[[str], float]) -> list[int]:
        """Rank r's share of the group's input (the page cuts it into contiguous pieces in proportion,
        static/worker/sandbox.js), or [] for equal pieces. Unequal only where where the cuts fall
        changes no result: the first stage is a map that feeds a reduce (which sees every value, in
        input order, however the input was cut) and neither talks to other ranks nor keeps state per
        rank. Decided at the input task's first start from the speeds of the ranks' browsers, then
        kept (a checkpoint keeps it too): the input computed again is cut as the maps before read it."""
        group = self.groups[letter]
        if group.shares is None:
            weighed = _cut_anywhere(self.spec.stages[0]) and self.partitioning(0) == "hash"
            speeds = [speed(w) if w else 1.0 for w in group.ranks]
            group.shares = []
            if weighed and max(speeds) >= SHARE_SPREAD * min(speeds):
                fastest = max(speeds)
                group.shares = [
                    max(1, round(SHARE_SCALE * s / fastest)) if s >= SHARE_CUTOFF * fastest else 0 for s in speeds
                ]
            self.changes += 1
        return group.shares

    def partitions(self, stage: int) -> int:
        """How many partitions the stage's output has."""
        return self.worker_count * self.chunks[0] if stage == INPUT_STAGE else self.worker_count

    def ready(
        self,
        faster: Callable[[str], float] = lambda worker_id: 0.0,
        away: Collection[str] = (),
        splits: Callable[[Task], tuple[float, float] | None] = lambda task: (math.inf, 0.5),
    ) -> list[tuple[Task, str]]:
        """The tasks that start now, each with its worker: a free worker of the run takes its own rank's
        next waiting task whose inputs are complete; one with none takes another rank's (the last
        waiting chunk of the rank with the most left, or the next task of a rank whose worker is busy),
        the fastest workers first (``faster``: a worker's speed, higher is faster), none under a third
        of the run's fastest. A streaming reduce waiting for its input does not keep its worker: a
        worker holding two ranks runs the map whose output its own reduce waits for. A range claims
        the chunks it will cover; free workers left with nothing ask ranges to split (not those of
        workers ``away``; ``splits`` says how much a range has left and what share of its chunks it
        keeps, or None: too little left). A worker ``away`` takes nothing."""
        found: list[tuple[Task, str]] = []
        occupied = {t.worker_id for t in self.active if not self.waiting_for_input(t)}
        taken: set[Task] = set()
        free: dict[str, Group] = {}  # a free worker with nothing of its own -> its group
        own: list[tuple[Task, str]] = []
        for group in self.groups.values():
            for rank, worker in enumerate(group.ranks):
                if worker is None or worker in occupied or worker in away:
                    continue  # a browser away gets nothing until it is back: its rank's chunks wait for others
                task = next((t for t in group.waiting_now(rank) if self._startable(group, t)), None)
                if task is None:
                    free.setdefault(worker, group)
                    continue
                own.append((task, worker))
                occupied.add(worker)  # a worker holding two ranks runs their tasks one after the other
        # A browser under SHARE_CUTOFF of the run's fastest takes nothing of another rank's: it would end last.
        fastest = max((faster(w) for group in self.groups.values() for w in group.ranks if w), default=0.0)
        free = {w: group for w, group in free.items() if w not in occupied and faster(w) >= SHARE_CUTOFF * fastest}
        # Free workers with nothing of their own, per group, that a range taken now leaves chunks to.
        sharing = Counter(group.letter for group in free.values()) if self.ranged and not self.talking else Counter()
        for task, worker in own:
            found.append((task, worker))
            taken.update(self._claim(task, sharing[task.group]))
        if self.talking:
            return found  # each rank's tasks run on its own worker, which its peers message
        idle: dict[str, int] = {}  # group -> its free workers left with nothing to take
        for worker in sorted(free, key=faster, reverse=True):
            letter = free[worker].letter
            task = self._to_take(free[worker], taken)
            if task is None:
                idle[letter] = idle.get(letter, 0) + 1
                continue
            sharing[letter] -= 1
            found.append((task, worker))
            taken.update(self._claim(task, sharing[letter]))
            occupied.add(worker)
        if self.ranged:
            for letter, count in idle.items():
                self._ask_splits(letter, count, away, splits)
        return found

    def _ask_splits(
        self,
        letter: str,
        idle: int,
        away: Collection[str],
        splits: Callable[[Task], tuple[float, float] | None],
    ) -> None:
        """``idle`` free workers of the group have nothing to take: as many of its running ranges (those
        with the most time left, none racing a backup) are asked to stop after their share of their
        chunks (half, unless slower than a typical browser), counting those asked already and not
        answered yet."""
        asked = 0
        ranges = []
        for t in self.active:
            if isinstance(t, Task) and t.group == letter and t.state == "running" and t.worker_id not in away:
                asked += t.split == SPLIT_ASKED
                if t.covers - t.chunk >= 2 and not t.split and t not in self.backups and (how := splits(t)):
                    ranges.append((how, t))
        ranges.sort(key=lambda r: (r[0][0], r[1].covers - r[1].chunk), reverse=True)
        for (_, keep), task in ranges[: max(idle - asked, 0)]:
            task.split = SPLIT_ASKED
            chunks = task.covers - task.chunk
            before = task.chunk + min(chunks - 1, max(1, round(chunks * keep)))
            self.splits.append((task.id, task.worker_id or "", before))

    def take_splits(self) -> list[tuple[str, str, int]]:
        splits, self.splits = self.splits, []
        return splits

    def splittable(self, task: Try) -> bool:
        """A running range with chunks after the one it started at, whose page has not declined to
        split: a slow one is split for free workers rather than raced whole by a backup."""
        return self.ranged and task.covers - task.chunk >= 2 and getattr(task, "split", 0) != SPLIT_DECLINED

    def split_at(self, task: Task, chunk: int) -> bool:
        """The page of a range asked to split stops before ``chunk``: the chunks from there on wait for
        free workers (True), or it could not split (any other chunk, the end of its range: False). A
        backup racing it runs the whole range: the engine drops it (its output would overlap)."""
        if task.state != "running":
            return False
        if not task.chunk < chunk < task.covers:
            if task.split == SPLIT_ASKED:
                task.split = SPLIT_DECLINED  # not asked again: its job reads its input as an array
            return False
        for c in range(chunk, task.covers):
            self.groups[task.group].tasks[(task.stage, task.rank, c)].covered_by = None
        task.covers, task.split = chunk, 0
        # Its records are those of the chunks it keeps: its pace, and its browser's speed, count those.
        task.work = sum(o.records for o in self.inputs(task))
        self.changes += 1
        return True

    def covered(self, task: Task) -> list[Task]:
        """The chunks after ``task``'s own that its range runs."""
        tasks = self.groups[task.group].tasks
        return [tasks[(task.stage, task.rank, c)] for c in range(task.chunk + 1, task.covers)]

    def _claim(self, task: Task, others: int) -> list[Task]:
        """The chunks a task taken now will cover (_range_of): while ``others`` free workers of its group
        have nothing to take, only its share of the waiting chunks (``span``), so they take the rest
        in the same round instead of asking it to split."""
        claimed = self._range_of(task)
        if others > 0 and len(claimed) > 1:
            task.span = -(-len(claimed) // (others + 1))
            claimed = claimed[: task.span]
        return claimed

    def _range_of(self, task: Task) -> list[Task]:
        """The task and the chunks it would cover if it started now: its rank's waiting chunks after
        its own, up to one that is not, or its share (``span``) when free workers take the rest; just
        the task when it is no range."""
        if not self.ranged or task.stage != 0 or task.is_backup:
            return [task]
        tasks, found = self.groups[task.group].tasks, [task]
        end = task.chunk + task.span if task.span else self.chunks[0]
        for chunk in range(task.chunk + 1, min(end, self.chunks[0])):
            if (t := tasks[(0, task.rank, chunk)]).state != "waiting" or t.covered_by is not None:
                break
            found.append(t)
        return found

    def _cover(self, task: Task) -> None:
        """A task starts: it covers what _range_of finds (a task that is no range, itself alone)."""
        covered = self._range_of(task)[1:]
        for t in covered:
            t.covered_by = task
        task.covers, task.span = task.chunk + 1 + len(covered), 0

    def _uncover(self, task: Task) -> None:
        """A range runs again: the chunks it covered wait again (those it ran are done no longer)."""
        group = self.groups[task.group]
        for t in self.covered(task):
            if t.state == "done":
                self._move(t, TaskEvent.UNCOVERED)
                group.count_done(t, -1)
            t.covered_by = None
        task.covers, task.split = 0, 0

    def _to_take(self, group: Group, taken: set[Task]) -> Task | None:
        """What a free worker with nothing of its own takes in its group (every free rank worker took
        its own next task already): the last waiting chunk of the rank with the most chunks waiting
        (its worker goes on from the front), or the next task of a rank whose worker is busy. Only
        tasks whose inputs are all done: a streaming reduce starts on its own rank's worker, where
        the shuffle sends its input."""
        best: tuple[int, Task] | None = None
        for rank in range(self.worker_count):
            waiting = [t for t in group.waiting_now(rank) if t not in taken and self._inputs_complete(group, t)]
            if waiting and (best is None or len(waiting) > best[0]):
                # A range takes the rank's first waiting chunk (and covers the rest); a chunk alone the last.
                best = (len(waiting), waiting[0] if self.ranged and waiting[0].stage == 0 else waiting[-1])
        return best[1] if best else None

    def _startable(self, group: Group, task: Task) -> bool:
        return self._inputs_complete(group, task) or self._may_stream(task)

    def _may_stream(self, task: Task) -> bool:
        """A reduce that may start before its producers are all done (it never talks to other ranks:
        a collective would wait for ranks still mapping)."""
        return (
            self.streams
            and task.stage > 0
            and task.stage not in self.talking
            and self.partitioning(task.stage - 1) == "hash"
        )

    def waiting_for_input(self, task: Task) -> bool:
        """A streaming reduce whose page has its task but not all its input yet."""
        return task.streaming and task.state == "staging"

    def fed(self, task: Task, producer: int) -> bool:
        """The pieces of ``producer`` (its producer_index) were sent to the streaming task; True when
        it has them all (then it runs)."""
        task.awaiting.discard(producer)
        return not task.awaiting

    def take_cancels(self) -> list[tuple[str, str]]:
        cancels, self.cancels = self.cancels, []
        return cancels

    def _inputs_complete(self, group: Group, task: Task) -> bool:
        """Every producer done (as ``producers()`` would say, without building the list)."""
        if task.stage == INPUT_STAGE:
            return True
        if task.stage == 0:
            return group.tasks[(INPUT_STAGE, 0, 0)].state == "done"
        if self.partitioning(task.stage - 1) == "hash":
            return group.stage_done[task.stage - 1] == group.stage_size[task.stage - 1]
        return all(p.state == "done" for p in self.producers(task))

    def _move(self, task: Task, event: TaskEvent) -> None:
        """Apply ``event`` to the task's state, as TRANSITIONS allows."""
        after = TRANSITIONS.get((task.state, event))
        if after is None:
            raise IllegalTransition(f"task {task.id} cannot {event} while {task.state}")
        self.transitions.add(task, task.state, event, after)
        task.state = after
        self.changes += 1

    def start(self, task: Task, worker_id: str, now: float | None = None) -> None:
        self._move(task, TaskEvent.START)
        now = time.monotonic() if now is None else now
        task.worker_id = worker_id
        task.started = task.last_activity = task.progressed_at = now
        task.emits = task.bytes = task.cpu_ms = task.ticks = task.beats = task.read = 0
        task.read_at = 0.0
        task.outputs = []
        self.active.add(task)
        self._cover(task)
        group = self.groups[task.group]
        if not self._inputs_complete(group, task):
            task.streaming, task.awaiting = True, {self.producer_index(p) for p in self.producers(task)}
        else:
            self._stage_started(group, task.stage, now)

    @staticmethod
    def _stage_started(group: Group, stage: int, now: float) -> None:
        """The stage's timeout counts from its first task with its whole input (a streaming reduce
        waiting for maps has not started its work)."""
        if stage not in group.stage_started:
            group.stage_started[stage] = now
            group.open_stages.add(stage)

    def running(self, task: Task, now: float | None = None) -> None:
        """Its inputs are in place (and its task-assign sent): a streaming task's wait for its input
        counts as neither slowness nor inactivity."""
        self._move(task, TaskEvent.LAUNCH)
        now = time.monotonic() if now is None else now
        task.launched = task.progressed_at = now
        task.work = sum(o.records for o in self.inputs(task))
        if task.streaming:
            task.last_activity = now
            self._stage_started(self.groups[task.group], task.stage, now)

    def done(
        self, task: Task, outputs: list[Output], emits: int, cpu_ms: int, now: float | None = None
    ) -> list[tuple[str, str]]:
        """The attempt finished; returns the (task id, worker id) of the attempts of the same task that
        are no longer wanted (a backup it raced, replicas once the others agreed): their workers stop them."""
        now = time.monotonic() if now is None else now
        if self.validated(task.primary or task):
            return self._agree(task, outputs, emits, cpu_ms, now)
        self._move(task, TaskEvent.FINISH)
        self.active.discard(task)
        task.finished = now
        task.outputs = outputs
        task.emits = emits
        task.bytes = sum(o.size for o in outputs)
        task.cpu_ms = cpu_ms
        self._record(task, TaskEvent.FINISH)
        primary = task.primary or task
        loser = self.backups.get(primary) if task.primary is None else primary
        superseded = [] if loser is None else [(loser.id, loser.worker_id or "")]
        if loser is not None:
            self._supersede(loser, task, now)
        self.cancels += superseded
        group = self.groups[primary.group]
        group.count_done(primary, +1)
        for covered in self.covered(primary):
            covered.covered_by = None
            self._move(covered, TaskEvent.COVERED)
            group.count_done(covered, +1)
        if primary.stage == INPUT_STAGE:
            self._skip_empty_chunks(group, outputs)
        return superseded

    def _skip_empty_chunks(self, group: Group, outputs: list[Output]) -> None:
        """The input is cut: a rank's chunks after its first that got nothing are done, and so are the
        chunks that would read only them (a rank's first chunk runs even when empty, as a rank with
        no input does)."""
        filled = {o.partition for o in outputs}
        empty = [(t.rank, t.chunk) for t in group.by_stage[0] if t.chunk and self.partition_read(t) not in filled]
        for stage in range(self.last_stage + 1):
            if self.chunks[stage] == 1:
                return
            for place in empty:
                task = group.tasks[(stage, *place)]
                if task.state == "waiting":
                    self._move(task, TaskEvent.EMPTY)
                    group.count_done(task, +1)

    def _supersede(self, loser: Try, winner: Try, now: float) -> None:
        """``winner`` finished first: ``loser``'s attempt ends (metered by its wall time) and the task
        is done with the winner's outputs."""
        self._move(loser, TaskEvent.SUPERSEDED)
        self.active.discard(loser)
        self.backups.pop(loser.primary or loser, None)
        loser.finished = now
        loser.cpu_ms = int((now - loser.started) * 1000)
        self._record(
            loser, TaskEvent.SUPERSEDED, f"attempt {winner.attempt} on worker {winner.worker_id} finished first"
        )
        if winner.primary is not None:  # the backup won: the task takes its result
            self.outrun.add(loser.worker_id or "")
            self._take_result(winner.primary, winner)
        else:
            self.outrun.discard(winner.worker_id or "")  # it beat its backup: not slow (any more)

    @staticmethod
    def _take_result(task: Task, winner: Try) -> None:
        task.worker_id, task.attempt, task.started, task.launched, task.finished = (
            winner.worker_id,
            winner.attempt,
            winner.started,
            winner.launched,
            winner.finished,
        )
        task.outputs, task.emits, task.bytes, task.cpu_ms = winner.outputs, winner.emits, winner.bytes, winner.cpu_ms

    def backup(self, task: Task, worker_id: str, now: float | None = None) -> Attempt:
        """A second attempt of a running task on another worker; the first of the two to finish wins."""
        if task.state not in ("staging", "running") or task.is_backup or task in self.backups:
            raise IllegalTransition(f"task {task.id} cannot get a backup attempt while {task.state}")
        clone = self._clone(task, worker_id, now)
        self.backups[task] = clone
        return clone

    def _clone(self, task: Task, worker_id: str, now: float | None) -> Attempt:
        """A new attempt of ``task`` on another worker, beside the task's own."""
        now = time.monotonic() if now is None else now
        clone = Attempt(
            task,
            state="staging",
            attempt=task.attempts,
            worker_id=worker_id,
            started=now,
            last_activity=now,
            progressed_at=now,
            worker_timeout=task.worker_timeout,
            covers=task.covers,
        )
        task.attempts += 1
        self.active.add(clone)
        return clone

    def drop_backup(self, backup: Attempt, event: TaskEvent, error: str = "", now: float | None = None) -> None:
        """A backup or replica attempt ends without result (failed, its worker lost, no longer wanted):
        the task goes on."""
        self._move(backup, event)
        self.active.discard(backup)
        if self.backups.get(backup.primary) is backup:
            del self.backups[backup.primary]
        elif backup in self.replicas.get(backup.primary, []):
            self.replicas[backup.primary].remove(backup)
        backup.finished = time.monotonic() if now is None else now
        self._record(backup, event, error)

    def retry(self, task: Task, event: TaskEvent, error: str = "", now: float | None = None) -> None:
        """End the task's current attempt by ``event`` (or forget its output, OUTPUT_LOST): it runs again."""
        if event in (
            TaskEvent.START,
            TaskEvent.LAUNCH,
            TaskEvent.FINISH,
            TaskEvent.SUPERSEDED,
            TaskEvent.EMPTY,
            TaskEvent.COVERED,
            TaskEvent.UNCOVERED,
        ):
            raise ValueError(f"{event} does not make a task run again")
        was = task.state
        if self.waiting_for_input(task):
            self.cancels.append((task.id, task.worker_id or ""))
        self._move(task, event)
        if (backup := self.backups.get(task)) is not None:
            self.drop_backup(backup, TaskEvent.CANCEL, "the attempt it backed up ended")
        if event is TaskEvent.CANCEL:  # the run ended: a validated task's other attempts end with it
            for replica in list(self.replicas.get(task, [])):
                self.drop_backup(replica, TaskEvent.CANCEL, error)
            for result in self.results.pop(task, []):
                self._record(result, TaskEvent.CANCEL, error)
        if was == "verifying":
            pass  # its attempt finished already (its result is recorded when the task is agreed on or cancelled)
        elif was == "done":
            self.groups[task.group].count_done(task, -1)
        else:
            task.finished = time.monotonic() if now is None else now
            self._record(task, event, error)
        self.active.discard(task)
        self._uncover(task)
        task.attempt = task.attempts
        task.attempts += 1
        task.worker_id = None
        task.outputs = []
        task.stalled = False
        task.streaming, task.awaiting = False, set()

    def _record(self, task: Try, event: TaskEvent, error: str = "") -> None:
        self.history.append(
            AttemptRecord(
                task.group,
                task.stage,
                task.rank,
                task.attempt,
                task.worker_id or "",
                event,
                task.started,
                task.finished,
                task.emits,
                task.bytes,
                task.cpu_ms,
                error,
                task.chunk,
                task.ticks,
                max(task.covers - task.chunk, 1),
            )
        )

    # ------------------------------------------------------------ failures

    def needed(self, task: Task) -> bool:
        """Whether a done task's output is still needed: a consumer has not finished, or it is final output."""
        if task.stage == self.last_stage:
            return True
        group = self.groups[task.group]
        consumers = [t for t in group.tasks.values() if t.stage == task.stage + 1 and task in self.producers(t)]
        return any(c.state != "done" for c in consumers)

    def lose_worker(self, worker_id: str) -> list[Task]:
        """The worker is gone: free its rank, rerun its task, recompute outputs only it held.

        Returns the tasks that will run again.
        """
        for place in self.places_of(worker_id):
            self.assign(*place, None)
        rerun = []
        for backup in [b for b in self.all_extra_attempts() if b.worker_id == worker_id]:
            self.drop_backup(backup, TaskEvent.WORKER_LOST, "the worker disconnected")
        for results in self.results.values():  # finished attempts whose output went with the worker
            for result in [r for r in results if r.worker_id == worker_id]:
                results.remove(result)
                self._record(result, TaskEvent.WORKER_LOST, "its output went with the worker before the others agreed")
        for task in self.all_tasks():
            if task.worker_id == worker_id and task.state in ("staging", "running"):
                if (backup := self.backups.get(task)) is not None:
                    self._adopt(task, backup, TaskEvent.WORKER_LOST, "the worker disconnected")
                    continue
                self.retry(task, TaskEvent.WORKER_LOST, "the worker disconnected")
                rerun.append(task)
        if self.cloud:
            return rerun
        for task in self.all_tasks():
            for output in task.outputs:
                output.holders.discard(worker_id)
        return rerun + self.recompute_lost()

    def all_extra_attempts(self) -> list[Attempt]:
        """Backup and replica attempts running now."""
        return [*self.backups.values(), *(r for replicas in self.replicas.values() for r in replicas)]

    def abandon(self, task: Task, event: TaskEvent, error: str) -> None:
        """The task's worker no longer runs its attempt: its backup, if it has one, goes on as the task's
        attempt; otherwise the task runs again."""
        if (backup := self.backups.get(task)) is not None:
            self._adopt(task, backup, event, error)
        else:
            self.retry(task, event, error)

    def _adopt(self, task: Task, backup: Attempt, event: TaskEvent, error: str) -> None:
        """The task's own attempt ended (``event``) while its backup runs: the backup becomes the task's attempt."""
        task.finished = time.monotonic()
        self._record(task, event, error)
        self.active.discard(backup)
        del self.backups[task]
        self.active.add(task)
        task.state, task.attempt, task.worker_id = backup.state, backup.attempt, backup.worker_id
        task.started, task.last_activity, task.progressed_at = (
            backup.started,
            backup.last_activity,
            backup.progressed_at,
        )
        task.emits, task.bytes, task.ticks, task.beats = backup.emits, backup.bytes, backup.ticks, backup.beats
        task.launched, task.work, task.stalled = backup.launched, backup.work, backup.stalled
        task.read, task.read_at = backup.read, backup.read_at

    def recompute_lost(self) -> list[Task]:
        """Run again every done task whose output no live worker holds while something still needs it.

        Repeated until nothing changes: rerunning a task makes its own inputs needed again.
        """
        rerun: list[Task] = []
        changed = True
        while changed:
            changed = False
            for task in self.all_tasks():
                if task.state == "done" and any(not o.holders for o in task.outputs) and self.needed(task):
                    self.retry(task, TaskEvent.OUTPUT_LOST)
                    rerun.append(task)
                    changed = True
        if rerun:
            # Attempts still copying their inputs (their task-assign not sent) start again once their
            # producers are done again: launched now, they would run with part of their input. A
            # streaming reduce only when a producer whose pieces it was sent runs again (the others
            # it waits for anyway).
            for attempt in [t for t in (*self.all_tasks(), *self.all_extra_attempts()) if t.state == "staging"]:
                producers = self.producers(attempt)
                if attempt.streaming:
                    producers = [p for p in producers if self.producer_index(p) not in attempt.awaiting]
                if any(p.state != "done" for p in producers):
                    if attempt.is_backup:
                        self.drop_backup(attempt, TaskEvent.INPUT_LOST, "an input is computed again")
                    else:
                        self.retry(attempt, TaskEvent.INPUT_LOST, "an input is computed again")
                        rerun.append(attempt)
        return rerun

    def input_lost(self, task: Task, sha256: str) -> list[Task]:
        """A task found an input missing from its worker's store: forget that copy and recompute if needed."""
        for producer in self.producers(task):
            for output in producer.outputs:
                if output.location == sha256:
                    output.holders.discard(task.worker_id or "")
        self.retry(task, TaskEvent.FAIL, f"input {sha256} was missing on its worker")
        return [task, *self.recompute_lost()]

    def overdue_stage(self, now: float | None = None) -> tuple[str, int] | None:
        """A (group, stage) whose tasks have not all finished within the stage's timeout."""
        now = time.monotonic() if now is None else now
        for group in self.groups.values():
            for stage in group.open_stages:
                if now - group.stage_started[stage] > self.stage_timeout(stage):
                    return group.letter, stage
        return None

    def idle_too_long(self, now: float | None = None) -> list[Task]:
        """Running tasks past their worker timeout (no emit and no progress for that long)."""
        now = time.monotonic() if now is None else now
        return [t for t in self.active if t.state == "running" and now - t.last_activity > t.worker_timeout]

    # ------------------------------------------------------------ progress

    def finished(self) -> bool:
        """Every group's last stage is done (asked every scheduling round: counts, not a walk of the tasks)."""
        return all(g.stage_done[self.last_stage] == g.stage_size[self.last_stage] for g in self.groups.values())

    def final_outputs(self) -> dict[str, list[tuple[int, list[Output]]]]:
        """Per group, each rank's output: its chunks' outputs in chunk order."""
        return {
            g.letter: [(r, self.rank_outputs(g.letter, self.last_stage, r)) for r in range(self.worker_count)]
            for g in self.groups.values()
        }

    def rank_outputs(self, group: str, stage: int, rank: int) -> list[Output]:
        tasks = self.groups[group].tasks
        return [o for c in range(self.chunks[stage]) for o in tasks[(stage, rank, c)].outputs]

    def progress(self) -> list[dict]:
        """Per group and stage: tasks done/running/total, emits and bytes (the run page's bars)."""
        rows = []
        for group in self.groups.values():
            per_stage = {
                stage: {
                    "group": group.letter,
                    "stage": stage,
                    "kind": self.kind(stage),
                    "total": 0,
                    "done": 0,
                    "running": 0,
                    "emits": 0,
                    "bytes": 0,
                    "stalled": 0,
                    "backups": 0,
                }
                for stage in range(INPUT_STAGE, self.last_stage + 1)
            }
            for (stage, _, _), task in group.tasks.items():
                if task.empty:
                    continue
                row = per_stage[stage]
                row["total"] += 1
                row["done"] += task.state == "done"
                row["running"] += task.state in ("staging", "running", "verifying")
                row["emits"] += task.emits
                row["bytes"] += task.bytes
                row["stalled"] += task.stalled and task.state == "running"
                row["backups"] += task in self.backups
            rows.extend(per_stage.values())
        return rows
