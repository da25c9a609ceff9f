"""What the routes, the metrics and the fleet pages read of the engine: answers built from its state,
never the state itself."""

from __future__ import annotations

import time

from appliance.fleet.presence import paused_note
from appliance.fleet.registry import Worker
from appliance.jobs import selection, stages, views
from appliance.jobs.engine.admission import Admission
from appliance.jobs.engine.live import LiveRun
from appliance.jobs.engine.shared import Shared
from appliance.jobs.engine.speeds import Speeds
from appliance.jobs.spec import JobSpec


class RunView:
    """A running run, as a page or a route may see it."""

    def __init__(self, run: LiveRun, speeds: Speeds):
        self._run = run
        self._speeds = speeds
        self.run_id, self.owner_id, self.spec = run.run_id, run.owner_id, run.spec
        self.origins = list(run.origins)
        self.storage_origin = run.storage.origin if run.storage is not None else None

    def progress(self) -> list[dict]:
        """Per group and stage: tasks done/running/total, emits and bytes."""
        return self._run.execution.progress()

    def stage_attempts(self, group: str, stage: int) -> list:
        return stages.live_attempts(self._run.execution, group, stage)

    def stage_places(self, group: str, stage: int) -> list[tuple[int, int]]:
        return stages.live_places(self._run.execution, group, stage)

    def speed_of(self, worker_id: str) -> float:
        """The browser's speed estimate (1.0: a typical browser's, or not known yet)."""
        return self._speeds.of(worker_id)

    def input_records(self, group: str, stage: int) -> int:
        return stages.input_records(self._run.execution, group, stage)

    def estimates(self, priors) -> dict:
        return stages.estimates(self._run.execution, priors)

    def timeline(self) -> views.Timeline:
        return views.live_timeline(self._run.execution, self._run.seats.adapters)

    def transitions(self, group: str | None = None, stage: int | None = None) -> list:
        """The latest task transitions, each with its cause (execution.Transition), oldest first."""
        return [
            t
            for t in self._run.execution.transitions
            if (group is None or t.group == group) and (stage is None or t.stage == stage)
        ]


class ReadModel:
    def __init__(self, shared: Shared, admission: Admission):
        self._shared = shared
        self._admission = admission

    def view(self, run_id: int) -> RunView | None:
        run = self._shared.active.get(run_id)
        return RunView(run, self._shared.speeds) if run is not None else None

    def position(self, run_id: int) -> int | None:
        """1 for the head of the queue; None when the run is not queued."""
        return self._admission.position(run_id)

    def reason(self, run_id: int) -> str | None:
        """Why a queued run waits."""
        return self._admission.reason(run_id)

    def queue_ages(self) -> list[float]:
        """Seconds since each queued run was queued (metrics)."""
        now = time.time()
        return [max(0.0, now - q.queued_at.timestamp()) for q in self._admission.queue]

    def run_counts(self) -> tuple[int, int]:
        """Runs running and queued now."""
        return len(self._shared.active), len(self._admission.queue)

    def run_owner(self, run_id: int) -> int | None:
        """The account of a run in progress (None when it is not running)."""
        run = self._shared.active.get(run_id)
        return run.owner_id if run is not None else None

    def blobs_in_use(self) -> set[str]:
        """The PMRFS blobs of running runs (their stage outputs, and after a restart those waiting
        for their holders to come back): tabs that reconnect keep them."""
        blobs: set[str] = set()
        for run in self._shared.active.values():
            if run.storage is None:
                blobs.update(run.durability.restored)
                blobs.update(o.location for t in run.execution.all_tasks() for o in t.outputs)
        return blobs

    def allows_sandbox(self, run_id: int, account_id: int) -> bool:
        """Only browsers of an account that holds a rank in the run (or runs an extra attempt of it)
        may load its sandbox script."""
        run = self._shared.active.get(run_id)
        if run is None:
            return False
        fleet = self._shared.fleet
        return any(
            (w := fleet.get(worker_id)) is not None and w.account_id == account_id
            for worker_id in run.execution.workers() | run.seats.helpers
        )

    def placements(self) -> dict[str, tuple[int, str, int]]:
        """Worker id -> (run id, group, rank) of every rank held in the runs in progress."""
        return {
            worker_id: (run.run_id, group.letter, rank)
            for run in self._shared.active.values()
            for group in run.execution.groups.values()
            for rank, worker_id in enumerate(group.ranks)
            if worker_id is not None
        }

    def attempts_by_worker(self, worker_id: str) -> dict[int, int]:
        """Run id -> attempts ``worker_id`` ran or runs in the runs in progress (task rows wait for the end)."""
        counts: dict[int, int] = {}
        for run in self._shared.active.values():
            ran = sum(1 for a in run.execution.history if a.worker_id == worker_id)
            ran += sum(1 for t in run.execution.active if t.worker_id == worker_id)
            if ran or worker_id in run.execution.workers():
                counts[run.run_id] = ran
        return counts

    # ------------------------------------------------------------ the fleet, for a run to be

    def eligible(self, worker: Worker, spec: JobSpec, owner_id: int) -> bool:
        """May run this run's tasks, under the admin's rule on software GPUs."""
        return self._shared.eligible(worker, spec, owner_id)

    def fleet_counts(self, account_id: int) -> selection.FleetCounts:
        connected = list(self._shared.fleet.workers.values())  # paused ones too (fleet/presence.py)
        return selection.FleetCounts(
            connected=len(connected),
            idle=sum(1 for w in connected if selection.available(w)),
            own=sum(1 for w in connected if w.account_id == account_id),
            gpu=sum(1 for w in connected if selection.has_gpu(w, self._shared.policy.software_gpus)),
            paused=paused_note(connected),
        )

    def capacity(self, spec: JobSpec, owner_id: int) -> tuple[int, int, str]:
        """Workers connected (paused ones too), how many of them could run this run (busy or idle, not
        paused), and which are paused and why."""
        connected = list(self._shared.fleet.workers.values())
        eligible = sum(1 for w in connected if not w.paused and self.eligible(w, spec, owner_id))
        return len(connected), eligible, paused_note(connected)
