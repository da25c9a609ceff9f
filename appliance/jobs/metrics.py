"""What the coordinator counts for operators (GET /metrics): tasks done, task failures by cause,
and how long runs waited in the queue before they started."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from appliance.fleet import protocol as p

TASKS_DONE = Counter("peermr_tasks_done_total", "Task attempts that finished with a result the coordinator took")
TASK_FAILURES = Counter(
    "peermr_task_failures_total",
    "Task attempts that failed, by cause (job_error: the job's code threw; peer_lost: another rank left; "
    "input_missing: an input blob was gone; backup: a backup attempt failed; bad_result: the report was refused; "
    "worker_lost: the worker left while holding a rank)",
    ["cause"],
)
QUEUE_WAIT = Histogram(
    "peermr_run_queue_wait_seconds",
    "How long runs waited in the queue before they started",
    buckets=(1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600),
)


def failure_cause(message: p.TaskFailed, is_backup: bool) -> str:
    if is_backup:
        return "backup"
    if message.peer_lost:
        return "peer_lost"
    if message.input_missing is not None:
        return "input_missing"
    return "job_error"
