"""Worker scores: how reliably each browser (worker id) has worked, recent runs counting most.

Every run that ends gives each worker that held one of its ranks points (``points``):

    points = min(tasks done, 10) - 5 × (disconnects + timeouts + rejections)

- *tasks done*: the worker's task attempts that completed (capped per run, so one large run does
  not outweigh how the worker behaved in others);
- *disconnects*: tasks the worker was running when its socket closed (a browser closed or lost
  its tab mid-task); a worker that leaves between tasks costs its run nothing it has to redo now;
- *timeouts*: tasks the worker was taken off for (past its worker timeout without an emit, or a
  bad task report), counted only when another worker then completed the same task, which shows
  the task could finish: a task that hangs wherever it runs is the job's doing;
- *rejections*: with validation, outputs of the worker that differed from the one the other
  workers agreed on (counted whatever ended the run: a wrong answer is the worker's).

A run that ended for a reason that is nobody's fault but the job's (``excused``: its
``events.EndCause`` says so) costs no one anything: a cancelled run, a run failed by its job code
(a task threw), a stage past its stage timeout. Its completed tasks still count.

Scores accumulate with an exponential decay in time, so recent behaviour counts most:

    score(t) = Σ over the worker's runs of points(run) × 2^(-(t - end of run) / 7 days)

stored as the value at the last update (``WorkerScore.score`` at ``updated_at``) and decayed on
read (``decayed``): a run's points weigh half after a week, a quarter after two. A new worker
starts at 0, above one that keeps disconnecting and below one that keeps completing tasks.

In memory, ``Worker.score`` of every connected worker (what ``jobs.selection.ranked`` sorts by,
highest first) holds its score decayed to one common instant: whenever one worker's score
changes (it joins, a run ends) all of them are decayed to now first, so comparing them is
comparing their scores now (decay scales every score by the same factor between updates).
``Reliability`` keeps that up to date from the fleet's events and the coordinator's ``RunEnded``.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Protocol

import msgspec

from appliance.background import BackgroundTasks
from appliance.clock import now
from appliance.events import RunEnded, WorkerJoined, WorkerLeft
from appliance.fleet.batches import Batches
from appliance.fleet.registry import Fleet, Worker
from appliance.fleet.tables import WorkerScore, WorkerScoreRun

log = logging.getLogger(__name__)

HALF_LIFE = dt.timedelta(days=7)
# How often the connected workers' in-memory scores are decayed to one instant (Reliability._set).
ALIGN_EVERY = dt.timedelta(minutes=10)
# Joining workers whose scores one query reads at most, and workers a run's end scores in one go
# (well under SQLite's limit on parameters).
LOAD_BATCH = 500
RECORD_BATCH = 500
# A score's running counts (WorkerScore's columns).
COUNTS = ("runs", "tasks_done", "disconnects", "timeouts", "rejections")
DONE_CAP = 10
FAULT_PENALTY = 5.0


class AttemptLike(Protocol):
    """A finished task attempt (jobs.execution.AttemptRecord): who ran which task and how it ended."""

    group: str
    stage: int
    rank: int
    chunk: int
    worker_id: str
    state: str  # done | failed | lost | cancelled | superseded | rejected
    # Lost because its own worker went (other lost attempts, e.g. a consumer whose input went with
    # that worker, are not that worker's doing).
    worker_lost: bool


class WorkerRun(msgspec.Struct, frozen=True):
    """What one run gave one worker."""

    worker_id: str
    account: int | None
    tasks_done: int
    disconnects: int
    timeouts: int
    excused: bool
    rejections: int = 0

    @property
    def points(self) -> float:
        return points(
            self.tasks_done, self.disconnects, self.timeouts, excused=self.excused, rejections=self.rejections
        )


class ScoreInfo(msgspec.Struct, frozen=True):
    worker_id: str
    account: int
    score: float  # decayed to the time it was read
    runs: int
    tasks_done: int
    disconnects: int
    timeouts: int
    updated_at: dt.datetime
    rejections: int = 0


def points(tasks_done: int, disconnects: int, timeouts: int, *, excused: bool = False, rejections: int = 0) -> float:
    faults = (0 if excused else disconnects + timeouts) + rejections
    return float(min(tasks_done, DONE_CAP)) - FAULT_PENALTY * faults


def decay_factor(elapsed: dt.timedelta) -> float:
    seconds = max(elapsed.total_seconds(), 0.0)
    return 2.0 ** (-seconds / HALF_LIFE.total_seconds())


def _aware(at: dt.datetime) -> dt.datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)


def decayed(score: float, since: dt.datetime, at: dt.datetime) -> float:
    """A score stored at ``since``, as it stands at ``at``."""
    return score * decay_factor(_aware(at) - _aware(since))


def tally(
    history: Iterable[AttemptLike], accounts: Mapping[str, int], taken_off: Iterable[str], *, excused: bool
) -> list[WorkerRun]:
    """Each participating worker's tasks done, disconnects and timeouts in a run that ended.

    ``accounts``: worker id -> account of every worker that held a rank; ``taken_off``: the workers
    the coordinator sent away from the run (worker timeout or a bad report); ``excused``: the run
    ended by the job's own doing."""
    attempts = list(history)
    taken_off = set(taken_off)
    done: Counter[str] = Counter()
    finished_by: dict[tuple[str, int, int, int], set[str]] = defaultdict(set)
    for a in attempts:
        if a.state == "done" and a.worker_id:
            done[a.worker_id] += 1
            finished_by[(a.group, a.stage, a.rank, a.chunk)].add(a.worker_id)
    disconnects: Counter[str] = Counter()
    timeouts: Counter[str] = Counter()
    rejections = Counter(a.worker_id for a in attempts if a.state == "rejected" and a.worker_id)
    for a in attempts:
        if not a.worker_lost or not a.worker_id:
            continue
        if a.worker_id not in taken_off:
            disconnects[a.worker_id] += 1
        elif finished_by[(a.group, a.stage, a.rank, a.chunk)] - {a.worker_id}:
            timeouts[a.worker_id] += 1
    workers = dict.fromkeys([*accounts, *(a.worker_id for a in attempts if a.worker_id)])
    return [
        WorkerRun(w, accounts.get(w), done[w], disconnects[w], timeouts[w], excused, rejections[w])
        for w in sorted(workers)
    ]


# ------------------------------------------------------------------ persistence


async def record_run(run_id: int, runs: list[WorkerRun], at: dt.datetime | None = None) -> dict[str, float]:
    """Add a run's points to its workers' scores, once per (run, worker). Returns the new scores at ``at``.
    Three queries per RECORD_BATCH workers (it was three per worker: thousands at the end of a large run)."""
    at = at or now()
    # A worker without an account had an attempt but was never bound to a rank: nothing to credit.
    credited = [r for r in runs if r.account is not None]
    updated: dict[str, float] = {}
    async with WorkerScore._meta.db.transaction():
        for start in range(0, len(credited), RECORD_BATCH):
            updated |= await _record(run_id, credited[start : start + RECORD_BATCH], at)
    return updated


async def _record(run_id: int, runs: list[WorkerRun], at: dt.datetime) -> dict[str, float]:
    rows = [
        WorkerScoreRun(
            slot=f"{run_id}:{r.worker_id}",
            run=run_id,
            worker_id=r.worker_id,
            account=r.account,
            tasks_done=r.tasks_done,
            disconnects=r.disconnects,
            timeouts=r.timeouts,
            rejections=r.rejections,
            excused=r.excused,
            points=r.points,
            at=at,
        )
        for r in runs
    ]
    inserted = (
        await WorkerScoreRun.insert(*rows)
        .on_conflict(target=WorkerScoreRun.slot, action="DO NOTHING")
        .returning(WorkerScoreRun.worker_id)
    )
    first_time = {row["worker_id"] for row in inserted}  # the others had this run scored already
    runs = [r for r in runs if r.worker_id in first_time]
    if not runs:
        return {}
    query = WorkerScore.select().where(WorkerScore.worker_id.is_in([r.worker_id for r in runs]))
    before = {row["worker_id"]: row for row in await query}
    totals = []
    for r in runs:
        row = before.get(r.worker_id) or {**dict.fromkeys(COUNTS, 0), "score": 0.0, "updated_at": at}
        totals.append(
            WorkerScore(
                worker_id=r.worker_id,
                account=r.account,
                score=decayed(row["score"], row["updated_at"], at) + r.points,
                runs=row["runs"] + 1,
                tasks_done=row["tasks_done"] + r.tasks_done,
                disconnects=row["disconnects"] + (0 if r.excused else r.disconnects),
                timeouts=row["timeouts"] + (0 if r.excused else r.timeouts),
                rejections=row["rejections"] + r.rejections,
                updated_at=at,
            )
        )
    columns = [WorkerScore.account, WorkerScore.score, WorkerScore.updated_at]
    columns += [getattr(WorkerScore, name) for name in COUNTS]
    await WorkerScore.insert(*totals).on_conflict(target=WorkerScore.worker_id, action="DO UPDATE", values=columns)
    return {total.worker_id: total.score for total in totals}


def _info(row: dict, at: dt.datetime) -> ScoreInfo:
    return ScoreInfo(
        row["worker_id"],
        row["account"],
        decayed(row["score"], row["updated_at"], at),
        row["runs"],
        row["tasks_done"],
        row["disconnects"],
        row["timeouts"],
        _aware(row["updated_at"]),
        row["rejections"],
    )


async def score_of(worker_id: str, at: dt.datetime | None = None) -> float:
    """A worker's score now (0 for a worker that never took part in a run)."""
    return (await scores_of([worker_id], at)).get(worker_id, 0.0)


async def scores_of(worker_ids: list[str], at: dt.datetime | None = None) -> dict[str, float]:
    """These workers' scores now, of those that took part in a run (one query)."""
    at = at or now()
    rows = await WorkerScore.select(WorkerScore.worker_id, WorkerScore.score, WorkerScore.updated_at).where(
        WorkerScore.worker_id.is_in(worker_ids)
    )
    return {row["worker_id"]: decayed(row["score"], row["updated_at"], at) for row in rows}


async def scores(account: int | None = None, at: dt.datetime | None = None) -> list[ScoreInfo]:
    """Known workers' scores now (of one account, or everyone's), highest first."""
    query = WorkerScore.select()
    if account is not None:
        query = query.where(WorkerScore.account == account)
    at = at or now()
    return sorted((_info(r, at) for r in await query), key=lambda s: (-s.score, s.worker_id))


# ------------------------------------------------------------------ the connected workers' scores in memory


class Reliability:
    """Keeps ``Worker.score`` of the connected workers: loaded when one joins, updated when a run ends."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        # Worker id -> the instant its in-memory Worker.score is decayed to.
        self.as_of: dict[str, dt.datetime] = {}
        self.aligned_at: dt.datetime | None = None
        self.background = BackgroundTasks("worker reliability")
        # Joined workers whose scores are still to be read: with those that join meanwhile.
        self.joining = Batches(self.background, self._load, LOAD_BATCH)

    def worker_joined(self, event: WorkerJoined) -> None:
        self.joining.add(event.worker)

    def worker_left(self, event: WorkerLeft) -> None:
        if self.fleet.get(event.worker.worker_id) is None:
            self.as_of.pop(event.worker.worker_id, None)

    async def run_ended(self, event: RunEnded) -> list[WorkerRun]:
        """Score the run's workers from what they completed and whether they stayed; never raises."""
        try:
            runs = tally(event.attempts, event.accounts, event.taken_off, excused=event.cause.jobs_doing)
            at = now()
            updated = await record_run(event.run_id, runs, at)
            for worker_id, score in updated.items():
                worker = self.fleet.get(worker_id)
                if worker is not None:
                    self._set(worker, score, at)
            return runs
        except Exception:
            log.exception("run %s: could not update its workers' scores", event.run_id)
            return []

    async def stop(self) -> None:
        await self.background.cancel()

    async def _load(self, workers: list[Worker]) -> None:
        at = now()
        found = await scores_of([worker.worker_id for worker in workers], at)
        for worker in workers:
            if self.fleet.get(worker.worker_id) is worker:  # not gone (or back as another) meanwhile
                self._set(worker, found.get(worker.worker_id, 0.0), at)

    def _align(self, at: dt.datetime) -> None:
        """Decay every connected worker's in-memory score to ``at`` (one instant for all: comparable)."""
        for worker in self.fleet.workers.values():
            since = self.as_of.get(worker.worker_id)
            if since is not None and since < at:
                worker.score = decayed(worker.score, since, at)
                self.as_of[worker.worker_id] = at

    def _set(self, worker: Worker, score: float, at: dt.datetime) -> None:
        """A worker's score as of ``at``, into memory beside the others (decayed to now). The others are
        decayed to the same instant at most every ALIGN_EVERY: aligning them at every join made a fleet
        of n joining workers cost n² decays (8,000 joining stalled the scheduler), while a week's
        half-life moves scores by under 0.1 % in ALIGN_EVERY, too little to reorder them in practice."""
        instant = max(now(), at)
        if self.aligned_at is None or instant - self.aligned_at >= ALIGN_EVERY:
            self._align(instant)
            self.aligned_at = instant
        worker.score = decayed(score, at, instant)
        self.as_of[worker.worker_id] = instant
