"""Jobs tables: saved jobs, their runs, and what each run left behind (tasks, logs, outputs)."""

from piccolo.columns import BigInt, Boolean, Bytea, ForeignKey, Integer, OnDelete, Real, Text, Timestamptz, Varchar
from piccolo.table import Table

from appliance.accounts.tables import User


class Job(Table, tablename="jobs_job"):
    owner = ForeignKey(User, on_delete=OnDelete.cascade, null=False, index=True)
    name = Varchar(length=200)
    script = Text()
    # The spec extracted when the script was saved (JSON, see spec.py).
    spec = Text()
    created_at = Timestamptz()
    updated_at = Timestamptz()


class Run(Table, tablename="jobs_run"):
    # A run outlives its job (its history, logs and output stay when the job is deleted).
    job = ForeignKey(Job, on_delete=OnDelete.set_null, null=True, default=None, index=True)
    owner = ForeignKey(User, on_delete=OnDelete.cascade, null=False, index=True)
    job_name = Varchar(length=200)
    # The job's spec with the run's metadata overrides applied (JSON).
    spec = Text()
    # queued | running | succeeded | failed | cancelled
    state = Varchar(length=16, index=True)
    # Why a queued run waits, or why a run failed.
    reason = Text(default="")
    # Why a run ended, as events.EndCause names it ("" while it has not).
    cause = Varchar(length=32, default="")
    queued_at = Timestamptz()
    started_at = Timestamptz(null=True, default=None)
    finished_at = Timestamptz(null=True, default=None)
    # Per group and stage: tasks done, emits, bytes (JSON, written when the run ends).
    progress = Text(default="")
    seed = BigInt(default=0)


class RunTask(Table, tablename="jobs_task"):
    """One attempt of one task (stage -1 is the input function), written when the run ends."""

    run = ForeignKey(Run, on_delete=OnDelete.cascade, null=False, index=True)
    group = Varchar(length=1)
    stage = Integer()
    rank = Integer()
    # Which of the rank's chunks (a map stage split into chunks: execution.py); 0 otherwise.
    chunk = Integer(default=0)
    # How many chunks the attempt ran: a range's from ``chunk`` on (execution.py), 1 otherwise.
    chunks = Integer(default=1)
    attempt = Integer(default=0)
    worker_id = Varchar(length=64, index=True)  # the runs a worker served (Workers view)
    worker_account = Integer(null=True, default=None, index=True)
    # done | failed | lost | cancelled
    state = Varchar(length=16)
    started_at = Timestamptz()
    finished_at = Timestamptz(null=True, default=None)
    emits = BigInt(default=0)
    bytes_out = BigInt(default=0)
    cpu_ms = BigInt(default=0)
    error = Text(default="")
    # The WebGPU adapter of the worker, e.g. "google swiftshader (software)" ("" without WebGPU).
    gpu_adapter = Varchar(length=300, default="")


class RunLog(Table, tablename="jobs_log"):
    run = ForeignKey(Run, on_delete=OnDelete.cascade, null=False, index=True)
    at = Timestamptz()
    # "coordinator", or the worker id a line came from.
    source = Varchar(length=64, index=True)
    group = Varchar(length=1, default="")
    rank = Integer(null=True, default=None)
    level = Varchar(length=8, default="info")
    text = Text()


class RunOutput(Table, tablename="jobs_output"):
    """One blob of a run's final output: a PMRFS blob (sha256) or an object key in the run's cloud bucket."""

    run = ForeignKey(Run, on_delete=OnDelete.cascade, null=False, index=True)
    group = Varchar(length=1)
    rank = Integer()
    seq = Integer()
    location = Varchar(length=1024)
    size = BigInt()
    records = BigInt()
    content_type = Varchar(length=40)


class RunParameter(Table, tablename="jobs_parameter"):
    """A parameter-server value as the run left it (written when the run ends, downloadable after)."""

    run = ForeignKey(Run, on_delete=OnDelete.cascade, null=False, index=True)
    group = Varchar(length=1)
    key = Varchar(length=200)
    dtype = Varchar(length=8)
    length = BigInt()
    version = BigInt()
    # Little-endian values, as the workers sent them.
    value = Bytea()


class SandboxPolicy(Table, tablename="jobs_sandbox_policy"):
    """The admin's fetch origins for job code (one row), added to those of the environment."""

    fetch_origins = Text(default="")
    updated_at = Timestamptz()


class SchedulingRules(Table, tablename="jobs_scheduling_rules"):
    """The admin's queue and straggler rules (one row); an empty column falls back to the setting
    from peermr.toml or the environment (jobs/scheduling_policy.py)."""

    queue_timeout_hours = Real(null=True, default=None)
    fair_share = Real(null=True, default=None)
    stall_seconds = Integer(null=True, default=None)
    # Whether software WebGPU adapters (SwiftShader and the like) count as GPUs for GPU runs.
    software_gpus = Boolean(default=False)
    updated_at = Timestamptz()


class RunCheckpoint(Table, tablename="jobs_run_checkpoint"):
    """A running run's progress, so it continues after the appliance restarts (jobs/checkpoints.py);
    deleted when the run ends."""

    run = ForeignKey(Run, on_delete=OnDelete.cascade, null=False, unique=True)
    data = Bytea()
    saved_at = Timestamptz()
