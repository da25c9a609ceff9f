"""The in-memory state of queued and running runs, grouped by the room that owns each part."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
from dataclasses import dataclass, field

from appliance.cloud import service as cloud
from appliance.fleet.registry import Worker
from appliance.jobs.copy_failures import CopyFailures
from appliance.jobs.execution import INPUT_STAGE, Output, RunExecution, Task, Try, stage_label
from appliance.jobs.paramserver import ParameterServer
from appliance.jobs.peers import Mailbox
from appliance.jobs.sandbox_policy import warm_sandbox_url
from appliance.jobs.spec import JobSpec


@dataclass
class Queued:
    run_id: int
    owner_id: int
    spec: JobSpec
    queued_at: dt.datetime
    reason: str = ""


@dataclass
class Seats:
    """Placement's part (placement.py): who serves the run besides its ranks' workers, and who may not."""

    # Workers sent away from this run (they timed out or misbehaved): not taken back.
    excluded: set[str] = field(default_factory=set)
    # Workers holding no rank that run an extra attempt (backup or replica) of this run.
    helpers: set[str] = field(default_factory=set)
    # Rank holders that disconnected while running a task, and since when: their pages run on.
    away: dict[str, float] = field(default_factory=dict)
    # Ranks without a worker, and since when (the run fails after the replacement grace).
    vacant_since: dict[tuple[str, int], float] = field(default_factory=dict)
    # Worker id -> account of every worker that served the run (task rows and billing need it
    # after it left), and its WebGPU adapter ("" without one) for the task rows.
    accounts: dict[str, int] = field(default_factory=dict)
    adapters: dict[str, str] = field(default_factory=dict)


@dataclass
class Transfers:
    """Staging's part (staging.py): copies under way and streaming reduces being fed."""

    copy_failures: CopyFailures
    # Copies of finished maps' partitions under way to the workers of the ranks that read them, by
    # (blob, target worker): the reduce's own staging waits for them.
    prestaging: dict[tuple[str, str], asyncio.Task] = field(default_factory=dict)
    # Streaming reduces: the attempts whose task-assign went out, and the (attempt, producer rank)
    # whose pieces are on their way to them.
    streams: set[str] = field(default_factory=set)
    feeding: set[tuple[str, int]] = field(default_factory=set)
    # Task id -> the object keys task-put-url issued so far (s3 storage).
    put_keys: dict[str, int] = field(default_factory=dict)


@dataclass
class Durability:
    """Recovery's part (recovery.py): what was written, and the wait for workers after a restart."""

    # The execution's change count when last written (-1: not yet), and whether its row exists.
    checkpointed: int = -1
    row: bool = False
    params_saved: int = 0  # the parameter server's change count when its values were last written
    params_due: float = 0.0  # when they may be written again
    recovering_until: float = 0.0
    # After a restart: the finished tasks' PMRFS outputs by blob, for the workers' hello to claim.
    restored: dict[str, list[Output]] = field(default_factory=dict)
    # The ranks whose workers did not come back after a restart, and the finished work lost with them.
    not_back: set[tuple[str, int]] = field(default_factory=set)
    lost_in_restart: str = ""


@dataclass
class Talk:
    """Ranks talking to ranks (jobs/peers.py): per group the epoch (a count of ranks lost), when a
    rank was last lost, and the restarts of a stage after a loss mid-collective."""

    epochs: dict[str, int] = field(default_factory=dict)
    lost_at: dict[str, float] = field(default_factory=dict)
    restarts: dict[tuple[str, int], set[int]] = field(default_factory=dict)


@dataclass
class LiveRun:
    run_id: int
    owner_id: int
    spec: JobSpec
    execution: RunExecution
    origins: list[str]
    params: ParameterServer
    storage: cloud.CloudStorage | None = None
    ending: bool = False
    broken: str = ""  # an invariant a step broke (engine_checks): the run fails with it
    seats: Seats = field(default_factory=Seats)
    transfers: Transfers = field(init=False)
    durability: Durability = field(default_factory=Durability)
    talk: Talk = field(default_factory=Talk)
    mail: Mailbox = field(default_factory=Mailbox)
    scanned_at: float = 0.0  # when speculation last looked for stragglers
    # The write of its start (state running), which its first tasks do not wait for; its end does.
    start_stored: asyncio.Task | None = None

    def __post_init__(self) -> None:
        self.transfers = Transfers(CopyFailures(self.execution.worker_count))

    @property
    def script_url(self) -> str:
        return f"/worker/runs/{self.run_id}/sandbox.js"

    @functools.cached_property
    def warm_url(self) -> str:
        """The warm sandbox that may load this run's script, or "" (sandbox_routes.warm_sandbox); its
        inputs are fixed when the run starts, so it is worked out once, not at every task-assign."""
        return warm_sandbox_url(self.spec.scripts, self.origins, cloud=self.storage is not None)

    def key_prefix(self) -> str:
        return f"peermr/runs/{self.run_id}"

    def task_root(self, task: Try) -> str:
        """Where a task's attempts write their objects in the run's bucket (s3 storage)."""
        chunk = f"-chunk-{task.chunk:03d}" if task.chunk else ""
        return f"{self.key_prefix()}/{task.group}/{stage_label(task.stage)}/rank-{task.rank:05d}{chunk}"

    def task_prefix(self, task: Try) -> str:
        return f"{self.task_root(task)}/attempt-{task.attempt}"

    def where(self, task: Try) -> str:
        chunks = self.execution.chunks[task.stage]
        last = max(task.covers, task.chunk + 1)  # a range's: its chunks so far
        span = f"{task.chunk + 1}" if last == task.chunk + 1 else f"s {task.chunk + 1}-{last}"
        chunk = f" (chunk{span} of {chunks})" if chunks > 1 else ""
        return f"{stage_name(self.execution, task.stage)} on rank {task.rank}{chunk} of group {task.group}"

    def served_by(self, worker: Worker) -> None:
        """A worker takes a rank or an attempt of this run: remember its account and adapter."""
        self.seats.accounts[worker.worker_id] = worker.account_id
        gpu = worker.capabilities.gpu
        self.seats.adapters[worker.worker_id] = gpu.label if gpu else ""


def stage_name(execution: RunExecution, stage: int) -> str:
    return "the input function" if stage == INPUT_STAGE else f"stage {stage + 1} ({execution.kind(stage)})"


def places(execution: RunExecution, tasks: list[Task]) -> str:
    """Tasks named by stage and ranks: "stage 1 (map) on ranks 0, 2 of group A; the input function of group A"."""
    ranks: dict[tuple[str, int], set[int]] = {}
    for task in tasks:
        ranks.setdefault((task.group, task.stage), set()).add(task.rank)
    return "; ".join(
        stage_name(execution, stage)
        + ("" if stage == INPUT_STAGE else f" on rank{'s' if len(r) > 1 else ''} {', '.join(map(str, sorted(r)))}")
        + f" of group {group}"
        for (group, stage), r in sorted(ranks.items())
    )
