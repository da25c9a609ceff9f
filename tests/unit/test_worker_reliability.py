"""Worker scores: what a run gives each worker, the decay, persistence and the scores in memory.

The task histories come from a real ``RunExecution`` driven as the coordinator drives it, and the
runs' ends are the ``RunEnded`` events the coordinator publishes, so the rules here follow what the
engine records.
"""

from __future__ import annotations

import datetime as dt

import pytest

from appliance import db
from appliance.config import load_settings
from appliance.events import EndCause, EventHub, RunEnded, WorkerJoined, WorkerLeft
from appliance.fleet import reliability as scores
from appliance.fleet.protocol import Capabilities
from appliance.fleet.registry import Fleet, Worker
from appliance.fleet.reliability import ALIGN_EVERY, Reliability, WorkerRun
from appliance.jobs.execution import Output, RunExecution, TaskEvent
from appliance.jobs.spec import JobSpec, StageSpec

T0 = dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC)
WEEK = dt.timedelta(days=7)


def spec(workers: int = 2) -> JobSpec:
    return JobSpec(
        stages=[
            StageSpec(kind=k, source="async function f(x) {}", timeout=60, chunks="rank") for k in ("map", "reduce")
        ],
        worker_count=workers,
        group_count=1,
        input_source="async function input() { return []; }",
    )


def finish(run: RunExecution, task) -> None:
    outputs = [Output(p, f"{task.id}-{p}".ljust(64, "0"), 10, 1, {task.worker_id}) for p in range(run.worker_count)]
    run.done(task, outputs, emits=1, cpu_ms=5)


def step(run: RunExecution) -> list:
    ready = run.ready()
    for task, worker in ready:
        run.start(task, worker)
        run.running(task)
    return [task for task, _ in ready]


def by_worker(runs: list[WorkerRun]) -> dict[str, WorkerRun]:
    return {r.worker_id: r for r in runs}


def test_completed_tasks_raise_a_worker_and_a_disconnect_mid_task_lowers_it():
    run = RunExecution(1, spec())
    run.assign("A", 0, "steady")
    run.assign("A", 1, "flaky")
    (task,) = step(run)  # the input function, on rank 0
    finish(run, task)
    maps = step(run)
    finish(run, next(t for t in maps if t.worker_id == "steady"))
    # flaky's socket closes while it runs its map task; "spare" takes over its rank.
    run.lose_worker("flaky")
    run.assign("A", 1, "spare")
    for _ in range(3):
        for task in step(run):
            finish(run, task)
    assert run.finished()
    accounts = {"steady": 7, "flaky": 8, "spare": 9}
    got = by_worker(scores.tally(run.history, accounts, set(), excused=False))
    assert (got["steady"].tasks_done, got["steady"].disconnects) == (3, 0)
    assert (got["flaky"].tasks_done, got["flaky"].disconnects) == (0, 1)
    assert (got["spare"].tasks_done, got["spare"].disconnects) == (2, 0)
    assert got["steady"].points == 3 and got["spare"].points == 2
    assert got["flaky"].points == -scores.FAULT_PENALTY
    assert got["flaky"].account == 8


def test_a_consumer_whose_input_left_with_another_worker_is_not_blamed():
    run = RunExecution(1, spec())
    run.assign("A", 0, "a")
    run.assign("A", 1, "b")
    (task,) = step(run)
    finish(run, task)
    maps = step(run)
    for t in maps:
        finish(run, t)
    # b's reduce is staging the inputs a holds when a disconnects (a is idle: no task of its own running).
    reduces = step(run)
    assert {t.worker_id for t in reduces} == {"a", "b"}
    run.retry(next(t for t in reduces if t.worker_id == "a"), TaskEvent.CANCEL)  # a's own reduce not running
    for t in reduces:
        if t.worker_id == "b":
            t.state = "staging"
    run.lose_worker("a")
    lost = [a for a in run.history if a.state == "lost"]
    assert lost and all(a.worker_id == "b" for a in lost)
    got = by_worker(scores.tally(run.history, {"a": 1, "b": 2}, set(), excused=False))
    assert got["b"].disconnects == 0 and got["a"].disconnects == 0


def test_a_worker_timeout_counts_only_when_another_worker_then_completed_the_task():
    run = RunExecution(1, spec())
    run.assign("A", 0, "slow")
    run.assign("A", 1, "ok")
    (task,) = step(run)
    finish(run, task)
    maps = step(run)
    finish(run, next(t for t in maps if t.worker_id == "ok"))
    # The coordinator takes "slow" off the run (past its worker timeout) and "spare" completes the task.
    run.lose_worker("slow")
    run.assign("A", 0, "spare")
    for _ in range(3):
        for t in step(run):
            finish(run, t)
    assert run.finished()
    got = by_worker(scores.tally(run.history, {"slow": 1, "ok": 2, "spare": 3}, {"slow"}, excused=False))
    assert (got["slow"].timeouts, got["slow"].disconnects) == (1, 0)
    assert got["slow"].points == 1 - scores.FAULT_PENALTY  # its input task counts

    # A task that hangs wherever it runs: both workers taken off, nobody completed it, nobody blamed.
    run = RunExecution(2, spec(workers=1))
    run.assign("A", 0, "first")
    (task,) = step(run)
    run.lose_worker("first")
    run.assign("A", 0, "second")
    (task,) = step(run)
    run.lose_worker("second")
    both = {"first": 1, "second": 1}
    excused = EndCause.WORKER_LOST.jobs_doing
    got = by_worker(scores.tally(run.history, both, {"first", "second"}, excused=excused))
    assert got["first"].timeouts == got["second"].timeouts == 0


def test_runs_ended_by_the_job_excuse_everyone():
    excused = {cause for cause in EndCause if cause.jobs_doing}
    assert excused == {EndCause.CANCELLED, EndCause.JOB_ERROR, EndCause.STAGE_TIMEOUT, EndCause.VALIDATION_FAILED}
    run = RunExecution(1, spec())

    run.assign("A", 0, "a")
    run.assign("A", 1, "b")
    (task,) = step(run)
    finish(run, task)
    step(run)
    run.lose_worker("b")  # mid-task; then the job's code fails the run
    got = by_worker(scores.tally(run.history, {"a": 1, "b": 2}, set(), excused=EndCause.JOB_ERROR.jobs_doing))
    assert got["b"].disconnects == 1 and got["b"].excused and got["b"].points == 0
    assert got["a"].points == 1  # completed work still counts


def test_points_are_capped_per_run_and_decay_halves_a_week_later():
    assert scores.points(3, 0, 0) == 3
    assert scores.points(500, 0, 0) == scores.DONE_CAP
    assert scores.points(2, 1, 1) == 2 - 2 * scores.FAULT_PENALTY
    assert scores.points(2, 1, 1, excused=True) == 2
    assert scores.decayed(8.0, T0, T0 + WEEK) == pytest.approx(4.0)
    assert scores.decayed(8.0, T0, T0 + 2 * WEEK) == pytest.approx(2.0)
    assert scores.decayed(-8.0, T0, T0 + WEEK) == pytest.approx(-4.0)
    assert scores.decayed(8.0, T0, T0) == 8.0


@pytest.fixture
async def store(tmp_path):
    settings = load_settings({"data_dir": str(tmp_path / "data")}, environ={})
    db.configure(settings)
    await db.migrate()
    yield settings


async def test_scores_accumulate_with_decay_once_per_run(store):
    good = WorkerRun("w-good", 5, tasks_done=4, disconnects=0, timeouts=0, excused=False)
    bad = WorkerRun("w-bad", 6, tasks_done=1, disconnects=1, timeouts=0, excused=False)
    assert await scores.record_run(1, [good, bad], T0) == {"w-good": 4.0, "w-bad": -4.0}
    # The same run again (a retry of the hook) changes nothing.
    assert await scores.record_run(1, [good, bad], T0 + WEEK) == {}
    # A week later the first run weighs half: 4/2 + 4 = 6.
    assert await scores.record_run(2, [good], T0 + WEEK) == {"w-good": pytest.approx(6.0)}
    assert await scores.score_of("w-good", T0 + 2 * WEEK) == pytest.approx(3.0)
    assert await scores.score_of("w-bad", T0 + WEEK) == pytest.approx(-2.0)
    assert await scores.score_of("never-seen") == 0.0
    mine = await scores.scores(5, at=T0 + WEEK)
    assert [(s.worker_id, s.runs, s.tasks_done, s.disconnects) for s in mine] == [("w-good", 2, 8, 0)]
    everyone = await scores.scores(at=T0 + WEEK)
    assert [s.worker_id for s in everyone] == ["w-good", "w-bad"]
    # Faults in an excused run are not charged.
    excused = WorkerRun("w-bad", 6, tasks_done=0, disconnects=3, timeouts=0, excused=True)
    await scores.record_run(3, [excused], T0 + WEEK)
    (info,) = await scores.scores(6, at=T0 + WEEK)
    assert info.disconnects == 1 and info.runs == 2 and info.score == pytest.approx(-2.0)


def worker(worker_id: str, account: int = 1) -> Worker:
    async def nothing(*args) -> None:
        return None

    return Worker(worker_id, account, f"{account}@example.com", Capabilities(), "127.0.0.1", nothing, nothing)


async def test_connected_workers_get_their_scores_and_stay_comparable(store):
    await scores.record_run(1, [WorkerRun("old", 1, 10, 0, 0, False)], scores.now() - 2 * WEEK)
    events = EventHub()
    fleet = Fleet(events)
    reliability = Reliability(fleet)
    events.subscribe(WorkerJoined, reliability.worker_joined)
    events.subscribe(WorkerLeft, reliability.worker_left)
    old, new = worker("old"), worker("new")
    for w in (old, new):
        fleet.add(w)
        await events.publish(WorkerJoined(w, []))
    for task in list(reliability.background.tasks):
        await task
    assert old.score == pytest.approx(2.5, rel=1e-3)  # 10 two weeks ago
    assert new.score == 0.0
    history = [
        type(
            "A",
            (),
            {
                "group": "A",
                "stage": 0,
                "rank": 0,
                "chunk": 0,
                "worker_id": "new",
                "state": "done",
                "worker_lost": False,
            },
        )()
        for _ in range(3)
    ]
    ended = RunEnded(7, 1, "succeeded", EndCause.COMPLETED, history, {"new": 1, "old": 1}, frozenset(), False, False)
    runs = await reliability.run_ended(ended)
    assert {r.worker_id: r.points for r in runs} == {"new": 3.0, "old": 0.0}
    assert new.score == pytest.approx(3.0, rel=1e-3) and old.score == pytest.approx(2.5, rel=1e-3)
    # Both decayed to instants at most ALIGN_EVERY apart: comparable (a week's half-life moves nothing).
    assert abs(reliability.as_of["new"] - reliability.as_of["old"]) < ALIGN_EVERY
    fleet.remove(old)
    await events.publish(WorkerLeft(old))
    assert "old" not in reliability.as_of


async def test_workers_joining_together_have_their_scores_read_in_one_query(store, monkeypatch):
    await scores.record_run(1, [WorkerRun("known", 1, 10, 0, 0, False)], scores.now())
    reads = []

    async def counted(worker_ids, at=None):
        reads.append(list(worker_ids))
        return await read(worker_ids, at)

    read = scores.scores_of
    monkeypatch.setattr(scores, "scores_of", counted)
    events = EventHub()
    fleet = Fleet(events)
    reliability = Reliability(fleet)
    events.subscribe(WorkerJoined, reliability.worker_joined)
    joined = [worker(name) for name in ("known", "new", "gone")]
    for w in joined:
        fleet.add(w)
        await events.publish(WorkerJoined(w, []))
    fleet.remove(joined[2])  # left before its score was read: nothing is set on it
    joined[2].score = -1.0
    await reliability.joining.task
    assert reads == [["known", "new", "gone"]]
    assert joined[0].score == pytest.approx(10.0, rel=1e-3) and joined[1].score == 0.0 and joined[2].score == -1.0
    assert reliability.joining.task is None and "gone" not in reliability.as_of


async def test_scores_kept_by_billing_before_the_move_are_carried_over_to_the_fleet(store):
    # A data dir from before the move: billing's score tables with a row, its migration not yet applied.
    from piccolo.apps.migrations.tables import Migration

    from appliance.billing.piccolo_migrations import billing_2026_11_23t20_58_17_805806 as moved
    from appliance.fleet.tables import WorkerScore

    await WorkerScore.raw("CREATE TABLE billing_worker_score AS SELECT * FROM fleet_worker_score WHERE 0")
    await WorkerScore.raw("CREATE TABLE billing_worker_score_run AS SELECT * FROM fleet_worker_score_run WHERE 0")
    await WorkerScore.raw(
        "INSERT INTO billing_worker_score (id, worker_id, account, score, runs, tasks_done, disconnects, timeouts, "
        "updated_at) VALUES (1, 'w-old', 5, 7.5, 3, 9, 1, 0, '2026-03-01 12:00:00+00:00')"
    )
    await Migration.delete().where(Migration.name == moved.ID)
    assert moved.ID in await db.migrate()
    (info,) = await scores.scores(5, at=T0)
    assert (info.worker_id, info.score, info.runs, info.tasks_done, info.disconnects) == ("w-old", 7.5, 3, 9, 1)
    tables = await WorkerScore.raw("SELECT name FROM sqlite_master WHERE name LIKE 'billing_worker_score%'")
    assert tables == []


def test_a_rejected_output_costs_its_worker_whatever_ended_the_run():
    rejected = type("A", (), {"group": "A", "stage": 0, "rank": 0, "chunk": 0, "worker_lost": False})
    history = [rejected(), rejected(), rejected()]
    for attempt, (worker, state) in zip(history, [("liar", "rejected"), ("w1", "done"), ("w2", "done")], strict=True):
        attempt.worker_id, attempt.state = worker, state
    got = by_worker(scores.tally(history, {"liar": 1, "w1": 2, "w2": 3}, set(), excused=True))
    assert got["liar"].rejections == 1 and got["liar"].points == -scores.FAULT_PENALTY
    assert got["w1"].points == 1
