"""What a job's last successful run says about its stages, for a running run's estimate before any task
of a stage has finished (stages.py; once one has, the stage's own finished tasks take over).

Progress reports say what a task has emitted and written, not how much of its input it has read, so
nothing in a first run says how far a task is until one finishes. A later run of the same job can
be compared with the last one, as CI servers estimate a build from the builds before it: each stage's
median task (seconds and records) then, and the stage's input then (what the stage before it emitted,
per group), so a run on more input expects longer tasks.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from appliance.jobs.stages import Typical
from appliance.jobs.tables import Run, RunTask


@dataclass(frozen=True)
class Prior:
    run_id: int
    seconds: float  # the median done task's duration
    records: float  # the median done task's records
    input_records: float  # the stage's input per group then (0: unknown, or the input function)

    def typical(self, input_records: int) -> Typical:
        """The task to expect now, scaled by the stage's input now against then."""
        scale = input_records / self.input_records if input_records and self.input_records else 1.0
        return Typical(self.seconds * scale, self.records * scale, self.run_id)


async def of_job(job_id: int | None, run_id: int) -> dict[int, Prior]:
    """Stage -> Prior from the job's last succeeded run before ``run_id``; empty when it has none."""
    if job_id is None:
        return {}
    last = (
        await Run.select(Run.id)
        .where((Run.job == job_id) & (Run.state == "succeeded") & (Run.id < run_id))
        .order_by(Run.id, ascending=False)
        .first()
    )
    if last is None:
        return {}
    rows = await RunTask.select(
        RunTask.group, RunTask.stage, RunTask.started_at, RunTask.finished_at, RunTask.emits
    ).where((RunTask.run == last["id"]) & (RunTask.state == "done"))
    by_stage: dict[int, list[dict]] = {}
    for row in rows:
        if row["finished_at"] is not None:
            by_stage.setdefault(row["stage"], []).append(row)
    groups = len({row["group"] for row in rows}) or 1
    emitted = {stage: sum(r["emits"] for r in done) / groups for stage, done in by_stage.items()}
    return {
        stage: Prior(
            run_id=last["id"],
            seconds=statistics.median((r["finished_at"] - r["started_at"]).total_seconds() for r in done),
            records=statistics.median(r["emits"] for r in done),
            input_records=emitted.get(stage - 1, 0.0),
        )
        for stage, done in by_stage.items()
    }
