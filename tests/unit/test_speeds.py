"""Each browser's speed estimate from its finished tasks (jobs/engine/speeds.py)."""

from __future__ import annotations

import pytest

from appliance.jobs.engine.speeds import Speeds
from appliance.jobs.execution import Output, RunExecution
from appliance.jobs.spec import JobSpec, StageSpec


def run_of(workers: list[str]) -> RunExecution:
    spec = JobSpec(
        stages=[StageSpec(kind="map", source="async function f(x) {}")],
        worker_count=len(workers),
        input_source="async function input() { return []; }",
    )
    run = RunExecution(1, spec)
    for rank, worker in enumerate(workers):
        run.assign("A", rank, worker)
    return run


def work(run: RunExecution, task, worker: str, seconds: float, at: float) -> None:
    run.start(task, worker, now=at)
    run.running(task, now=at)
    run.done(task, [Output(0, task.id.ljust(64, "0"), 1, 1, {worker})], emits=1, cpu_ms=1, now=at + seconds)


def test_a_browser_twice_as_fast_as_the_stage_scores_above_one_and_a_slow_one_below():
    run, speeds = run_of(["fast", "mid", "slow"]), Speeds()
    [source] = [t for t, _ in run.ready()]
    work(run, source, "fast", 0.1, 0.0)  # the input function: no yardstick, no estimate
    assert speeds.of("fast") == 1.0
    chunks = sorted((t for t in run.all_tasks() if t.stage == 0 and t.state == "waiting"), key=lambda t: t.id)
    for task, (worker, seconds) in zip(chunks, [("fast", 1.0), ("mid", 2.0), ("slow", 8.0)], strict=False):
        work(run, task, worker, seconds, 1.0)
        speeds.finished(run, task)
    assert speeds.of("fast") == 1.0  # its task was the first of the stage: no median yet
    assert speeds.of("mid") == pytest.approx(1.0 + 0.4 * (1.5 / 2.0 - 1.0))  # median of 1 and 2 s
    assert speeds.of("unknown") == 1.0  # a browser with no finished task counts as typical
    assert speeds.of("slow") == pytest.approx(1.0 + 0.4 * (2.0 / 8.0 - 1.0))
