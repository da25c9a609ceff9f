"""Each browser's speed estimate from its finished tasks (jobs/engine/speeds.py), and the input cut
in proportion to the speeds of the ranks' browsers (RunExecution.input_shares)."""

from __future__ import annotations

import time

import pytest

from appliance.jobs import checkpoints
from appliance.jobs.engine.speeds import HALF_LIFE_SECONDS, Speeds, own_pace, task_seconds, time_left
from appliance.jobs.execution import INPUT_STAGE, SHARE_SCALE, Output, RunExecution
from appliance.jobs.spec import JobSpec, StageSpec


def near(value: float):
    """An estimate read a moment after it was made (estimates age: HALF_LIFE_SECONDS)."""
    return pytest.approx(value, rel=1e-3)


MAP = "async function map(x) { for await (const kv of x) context.emit(kv[1], 1); }"
REDUCE = "async function reduce(kv) {}"


def run_of(workers: list[str], *stages: tuple[str, str]) -> RunExecution:
    spec = JobSpec(
        stages=[
            StageSpec(kind=kind, source=source, chunks="rank")
            for kind, source in stages or [("map", MAP), ("reduce", REDUCE)]
        ],
        worker_count=len(workers),
        input_source="async function input() { return []; }",
    )
    run = RunExecution(1, spec)
    for rank, worker in enumerate(workers):
        run.assign("A", rank, worker)
    return run


def work(run: RunExecution, task, worker: str, seconds: float, at: float, outputs: list[Output] = ()) -> None:
    run.start(task, worker, now=at)
    run.running(task, now=at)
    run.done(task, list(outputs) or [Output(0, task.id.ljust(64, "0"), 1, 1, {worker})], 1, 1, now=at + seconds)


def cut_input(run: RunExecution, records: list[int]) -> list:
    """The input task done, rank r's piece holding records[r] records; the map tasks, in rank order."""
    source = run.task("A", INPUT_STAGE, 0)
    pieces = [Output(r, f"in-{r}".ljust(64, "0"), 10, n, {"fast"}) for r, n in enumerate(records)]
    work(run, source, run.groups["A"].ranks[0], 0.1, 0.0, pieces)
    return [run.task("A", 0, rank) for rank in range(run.worker_count)]


def test_speed_is_records_per_second_against_the_stage_so_a_bigger_share_in_the_same_time_is_faster():
    run, speeds = run_of(["fast", "mid", "slow"]), Speeds()
    maps = cut_input(run, [30, 10, 10])
    assert speeds.of("fast") == 1.0  # the input function gives no estimate
    for task, (worker, seconds) in zip(maps, [("fast", 1.0), ("mid", 1.0), ("slow", 4.0)], strict=True):
        work(run, task, worker, seconds, 1.0)
        speeds.finished(run, task)
    assert speeds.of("fast") == 1.0  # the stage's first task: no median yet
    # Rates 30, 10 and 2.5 records/s: the median of the finished ones is the yardstick, and a
    # browser's first estimate is its first task's speed.
    assert speeds.of("mid") == near(10 / 20)
    assert speeds.of("slow") == near(2.5 / 10)
    assert speeds.of("unknown") == 1.0
    # Per record at speed 1.0, each finished task scaled by its browser's estimate.
    assert speeds.seconds_per_record(run, maps[0]) == near(0.05)


def test_an_estimate_then_moves_as_a_moving_average():
    speeds = Speeds()
    for at, b_seconds in [(0.0, 1.0), (10.0, 2.0)]:
        run = run_of(["c", "a", "b"])
        maps = cut_input(run, [10, 10, 10])
        for task, worker, seconds in [(maps[0], "c", 1.0), (maps[1], "a", 1.0), (maps[2], "b", b_seconds)]:
            work(run, task, worker, seconds, at + 1)
            speeds.finished(run, task)  # in the order they finished, as the engine does
    # The first run made a and b's first estimates (1.0); in the second b took twice the median.
    assert speeds.of("a") == near(1.0)
    assert speeds.of("b") == near(1.0 + 0.4 * (0.5 - 1.0))
    assert "c" not in speeds.estimates  # always its stage's first: no yardstick yet


def test_a_task_of_few_records_moves_an_estimate_in_proportion_to_its_records():
    """A small piece of a split range is mostly what every task costs: read slowly, it moves its
    browser's estimate a fifth as much as a task of its stage's typical size would."""
    speeds = Speeds()
    speeds._set("a", 1.0)
    run = run_of(["c", "b", "a"])
    maps = cut_input(run, [10, 10, 2])
    for task, worker, seconds in [(maps[0], "c", 1.0), (maps[1], "b", 1.0), (maps[2], "a", 1.0)]:
        work(run, task, worker, seconds, 1.0)
        speeds.finished(run, task)
    # 2 records/s against the median of 10, 10 and 2: speed 0.2, weighed 0.4 * 2 / 10.
    assert speeds.of("a") == near(1.0 + 0.4 * 0.2 * (0.2 - 1.0))


def test_an_estimate_nothing_renews_goes_back_toward_a_typical_browsers(monkeypatch):
    speeds = Speeds()
    speeds._set("slow", 0.2)
    later = time.monotonic() + HALF_LIFE_SECONDS
    monkeypatch.setattr(time, "monotonic", lambda: later)
    assert speeds.of("slow") == near(0.6)


def test_the_input_is_cut_by_speed_only_for_a_map_feeding_a_reduce_and_only_when_speeds_differ():
    speed = {"fast": 2.0, "mid": 1.0, "slow": 0.75}.get
    run = run_of(["fast", "mid", "slow"])
    assert run.input_shares("A", speed) == [SHARE_SCALE, SHARE_SCALE // 2, SHARE_SCALE * 3 // 8]
    # Decided once: the input computed again later is cut as the maps before read it.
    assert run.input_shares("A", lambda worker: 1.0) == [SHARE_SCALE, SHARE_SCALE // 2, SHARE_SCALE * 3 // 8]
    # Speeds within the noise of an estimate: equal pieces.
    assert run_of(["fast", "mid"]).input_shares("A", {"fast": 1.3, "mid": 1.0}.get) == []
    # A vacant rank counts as a typical browser; one under a third of the fastest's speed gets none.
    vacant = run_of(["fast", "mid", "slow"])
    vacant.assign("A", 1, None)
    assert vacant.input_shares("A", {"fast": 3.0, "slow": 0.5}.get) == [SHARE_SCALE, SHARE_SCALE // 3, 0]
    # Where the cuts fall would change a result: a map's own output per rank (no reduce after it),
    # a map that keeps state per rank, a map that talks to other ranks.
    for stages in [
        [("map", MAP)],
        [("map", "async function map(x) { context.shard([]); }"), ("reduce", REDUCE)],
        [("map", "async function map(x) { await context.sendToRank(1, 't', 1); }"), ("reduce", REDUCE)],
    ]:
        assert run_of(["fast", "mid", "slow"], *stages).input_shares("A", speed) == []


def test_a_checkpoint_keeps_how_the_input_was_cut():
    run = run_of(["fast", "slow"])
    shares = run.input_shares("A", {"fast": 3.0, "slow": 1.0}.get)
    cut_input(run, [30, 10])
    saved = checkpoints.decode(checkpoints.encode(checkpoints.capture(run, {}, set(), {}, {})))
    again = run_of(["fast", "slow"])
    checkpoints.restore(again, saved)
    assert again.input_shares("A", lambda worker: 1.0) == shares
    # A checkpoint written before shares were kept: its input was cut in equal pieces.
    saved.shares = {}
    older = run_of(["fast", "slow"])
    checkpoints.restore(older, saved)
    assert older.input_shares("A", {"fast": 3.0, "slow": 1.0}.get) == []


def test_a_browser_a_backup_outran_is_at_most_as_fast_as_its_task_over_the_time_it_had():
    run, speeds = run_of(["fast", "slow", "mid"]), Speeds()
    maps = cut_input(run, [10, 10, 10])
    speeds._set("slow", 1.2)  # from an earlier run, when it was fast
    work(run, maps[0], "fast", 1.0, 1.0)
    speeds.finished(run, maps[0])
    # The backup of slow's task took 1 s; slow's own attempt had worked 4 s without finishing.
    work(run, maps[1], "fast", 1.0, 4.0)
    speeds.finished(run, maps[1])
    speeds.outran(run, maps[1], "slow", 4.0)
    assert speeds.of("slow") == near(0.25)
    # Evidence only lowers an estimate: a browser outrun after a long wait is not made faster.
    speeds.outran(run, maps[1], "slow", 2.0)
    assert speeds.of("slow") == near(0.25)


def test_a_running_task_that_says_how_far_it_has_read_is_judged_by_its_own_pace():
    """The estimates said 'slow' is typical (its task due by now), but its page said at 7.5 s, 6.5 s
    after its launch, that it had reached 3 of its 10 records: it takes about 2.4 s a record (the one
    it was at counted as half done, half a second taken off for the report's delay), and 7.5 records
    were left then. Early on, the estimates say more."""
    run, speeds = run_of(["fast", "slow", "mid"]), Speeds()
    maps = cut_input(run, [10, 10, 10])
    work(run, maps[0], "fast", 1.0, 1.0)
    speeds.finished(run, maps[0])
    run.start(maps[1], "slow", now=1.0)
    run.running(maps[1], now=1.0)
    whole = task_seconds(speeds, run, maps[1])  # 1 s at the stage's pace
    assert time_left(speeds, maps[1], 7.5, whole) == pytest.approx(-5.5)  # by the estimates: 1 s, overdue
    maps[1].read, maps[1].read_at = 3, 7.5
    assert own_pace(maps[1]) == pytest.approx(2.4)
    assert time_left(speeds, maps[1], 7.5, whole) == pytest.approx(18.0)
    assert time_left(speeds, maps[1], 9.5, whole) == pytest.approx(16.0)  # two seconds on since it said so
    maps[1].read, maps[1].read_at = 1, 1.1
    assert time_left(speeds, maps[1], 1.1, whole) == pytest.approx(0.9)  # by the estimates: 1 s in all
    # A task whose page says nothing of its reading (a reduce, an input read as an array): estimates.
    maps[1].read = 0
    assert own_pace(maps[1]) is None
