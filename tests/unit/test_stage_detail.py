"""A stage page's figures from a stage's attempts (jobs/stages.py): the spread, the task that stands out,
and the estimate of the share done with and without progress reports, and before any task finished
(from the job's last successful run, jobs/priors.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from appliance.jobs.priors import Prior
from appliance.jobs.stages import Typical, _Attempt, build, page_of


def attempt(
    rank: int, start: float, end: float | None, records: int = 0, state: str = "done", attempt: int = 0, chunk: int = 0
):
    return _Attempt(
        rank, chunk, attempt, f"w{rank}", state if end is not None else "running", start, end, records, 10 * records
    )


def ranks(count: int) -> list[tuple[int, int]]:
    """A stage of one task per rank, as (rank, chunk) places."""
    return [(rank, 0) for rank in range(count)]


def test_a_stage_without_progress_reports_is_estimated_by_running_time():
    # Two tasks took 2 s each; the third has run 1 s and reported nothing: about half of it is done.
    stage = build("A", 0, "map", ranks(3), [attempt(0, 0, 2), attempt(1, 0, 2), attempt(2, 0, None)], now=1.0)
    assert (stage.done, stage.running) == (2, 1)
    assert stage.fraction == pytest.approx((2 + 0.5) / 3)
    assert stage.eta == pytest.approx(1.0 * (1 - stage.fraction) / stage.fraction)


def test_progress_reports_count_a_running_task_by_its_records_and_never_as_done():
    attempts = [attempt(0, 0, 2, records=100), attempt(1, 0, 2, records=100), attempt(2, 0, None, records=40)]
    assert build("A", 0, "map", ranks(3), attempts, now=3.0).fraction == pytest.approx((2 + 0.4) / 3)
    attempts[2] = attempt(2, 0, None, records=500)  # more than the median: still running, so at most 95 %
    assert build("A", 0, "map", ranks(3), attempts, now=3.0).fraction == pytest.approx((2 + 0.95) / 3)


def test_before_any_task_finished_a_first_run_shows_its_throughput_but_no_time_left():
    stage = build("A", 0, "map", ranks(2), [attempt(0, 0, None, records=50), attempt(1, 0, None)], now=5.0)
    assert stage.fraction == 0 and stage.eta is None and stage.basis_run is None
    assert (stage.records, stage.records_per_second, stage.bytes_per_second) == (50, 10.0, 100.0)


def test_before_any_task_finished_the_jobs_last_success_gives_the_share_done_and_the_time_left():
    # Run 4's map tasks took 10 s and wrote 100 records each. Now, 5 s in: one task reported 50
    # records (half of 100), the other nothing yet (half of 10 s by its running time).
    typical = Prior(run_id=4, seconds=10, records=100, input_records=1000).typical(1000)
    stage = build(
        "A", 0, "map", ranks(2), [attempt(0, 0, None, records=50), attempt(1, 0, None)], now=5.0, expected=typical
    )
    assert stage.fraction == pytest.approx(0.5) and stage.eta == pytest.approx(5.0) and stage.basis_run == 4
    # The time left goes at that run's pace, not at this one's so far (its first record came after the
    # task's start-up): 1 record of 40 a second in is 97.5 % of a 20 s task left.
    paced = Prior(run_id=4, seconds=20, records=40, input_records=0).typical(0)
    stage = build("A", 0, "map", ranks(1), [attempt(0, 0, None, records=1)], now=1.0, expected=paced)
    assert stage.eta == pytest.approx(19.5)
    # Twice the input now: tasks are expected to take twice as long and write twice the records.
    assert Prior(4, 10, 100, 1000).typical(2000) == Typical(20, 200, 4)
    assert Prior(4, 10, 100, 0).typical(2000) == Typical(10, 100, 4)  # the input function: as it was
    # Once a task of the stage has finished, the stage's own median takes over.
    attempts = [attempt(0, 0, 2, records=40), attempt(1, 0, None, records=20)]
    stage = build("A", 0, "map", ranks(2), attempts, now=3.0, expected=typical)
    assert stage.fraction == pytest.approx((1 + 0.5) / 2) and stage.basis_run is None


def test_the_spread_and_the_task_that_stands_out():
    attempts = [attempt(0, 0, 1, records=10), attempt(1, 0, 1.2, records=10), attempt(2, 0, 4, records=10)]
    stage = build("A", 0, "map", ranks(3), attempts, now=4.0)
    duration = stage.spreads["duration"]
    assert (duration.min, duration.median, duration.max) == (1, 1.2, 4)
    assert [line.skew for line in stage.lines] == ["", "", "slow"]
    assert stage.fraction == 1.0 and stage.eta is None
    # Ten times the median records stands out too, however fast.
    attempts[0] = attempt(0, 0, 1, records=100)
    assert (
        build("A", 0, "map", ranks(3), attempts[:2] + [attempt(2, 0, 1.1, records=10)], now=4).lines[0].skew
        == "records"
    )


def test_retried_tasks_show_every_attempt_and_waiting_ranks_show_too():
    attempts = [attempt(0, 0, 1, state="lost"), attempt(0, 1, 3, attempt=1)]
    stage = build("A", 0, "map", ranks(2), attempts, now=3.0)
    assert [(line.rank, line.attempt, line.attempts, line.state) for line in stage.lines] == [
        (0, 1, 2, "lost"),
        (0, 2, 2, "done"),
        (1, 0, 0, "waiting"),
    ]
    lines, page, pages = page_of(stage.lines, "duration", True, 9)
    assert (page, pages) == (1, 1) and lines[0].state == "done"  # page clamped; the longest first


def test_a_task_that_calls_progress_is_counted_by_its_calls_against_a_finished_tasks():
    # The finished tasks called context.progress() 10 times each; the running one 5 times so far and
    # emitted nothing yet (it emits at its end): it is half done, whatever its records say.
    done = [replace(attempt(r, 0, 4, records=100), ticks=10) for r in (0, 1)]
    running = replace(attempt(2, 0, None), ticks=5)
    stage = build("A", 0, "map", ranks(3), [*done, running], now=1.0)
    assert stage.fraction == pytest.approx((2 + 0.5) / 3)
    silent = build("A", 0, "map", ranks(3), [*done, attempt(2, 0, None)], now=1.0)
    assert silent.fraction == pytest.approx((2 + 0.25) / 3)  # by its running time: 1 s of a typical 4 s


def test_a_range_is_one_task_and_its_browser_is_credited_with_every_chunk_it_ran():
    """Rank 0's range ran its chunks 1-3 (then split: chunk 4 ran alone on w1); rank 1's range runs its
    chunks 1-4. The waiting chunks a range covers are not tasks of their own; the browsers table
    counts chunks."""
    places = [(rank, chunk) for rank in range(2) for chunk in range(4)]
    attempts = [
        replace(attempt(0, 0, 3), chunks=3),
        replace(attempt(0, 3, 4, chunk=3), worker_id="w1"),
        replace(attempt(1, 0, None), chunks=4),
    ]
    stage = build("A", 0, "map", places, attempts, now=4.0)
    assert stage.chunked
    assert [(line.rank, line.chunk, line.chunks, line.state) for line in stage.lines] == [
        (0, 0, 3, "done"),
        (0, 3, 1, "done"),
        (1, 0, 4, "running"),
    ]
    assert (stage.done, stage.total, stage.running) == (2, 3, 1)
    assert [(b.worker_id, b.done) for b in stage.browsers] == [("w0", 3), ("w1", 1)]
