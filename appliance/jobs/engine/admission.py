"""Admission: the queue, and which queued run starts, on which workers.

Queue rules (in this order, each round):
- a run queued longer than its queue timeout fails;
- fair share: while another account's run waits (one that the connected workers could run), an
  account's runs may not start beyond ``job_fair_share`` of the connected workers;
- runs start in the order they were queued. A run that the connected workers could run once their
  current runs end keeps its eligible idle workers: a run further back may start only with workers
  that no run ahead of it could use (so a GPU run waiting for WebGPU browsers does not hold up CPU
  runs, and a large run is not starved by small ones). A run asking more eligible workers than
  are connected keeps none (back-fill): it cannot start anyway, and it gets them first as soon as
  enough are connected.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter

from appliance.clock import now
from appliance.cloud import service as cloud
from appliance.events import EndCause
from appliance.fleet import protocol as p
from appliance.fleet.presence import paused_note
from appliance.fleet.registry import Worker
from appliance.jobs import selection
from appliance.jobs.engine.ending import Ending
from appliance.jobs.engine.live import LiveRun, Queued
from appliance.jobs.engine.placement import Placement
from appliance.jobs.engine.shared import Shared
from appliance.jobs.execution import RunExecution
from appliance.jobs.metrics import QUEUE_WAIT
from appliance.jobs.paramserver import ParameterServer
from appliance.jobs.sandbox_policy import allowed_origins
from appliance.jobs.spec import JobSpec
from appliance.jobs.tables import Run


def _duration(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 60:g} min" if seconds % 60 == 0 else f"{seconds:g} s"


class Admission:
    def __init__(self, shared: Shared, placement: Placement, ending: Ending, cloud_keys: cloud.CloudKeys):
        self.shared = shared
        self.placement = placement
        self.ending = ending
        self.cloud_keys = cloud_keys
        self.queue: list[Queued] = []

    def enqueue(self, run_id: int, owner_id: int, spec: JobSpec, queued_at: dt.datetime | None = None) -> None:
        self.queue.append(Queued(run_id, owner_id, spec, queued_at or now()))
        self.shared.logs.add(run_id, f"queued: needs {selection.needed(spec)} worker(s)")
        self.shared.wake.set()

    async def cancel(self, run_id: int) -> bool:
        """Cancel a queued run; False when it is not queued."""
        queued = next((q for q in self.queue if q.run_id == run_id), None)
        if queued is None:
            return False
        self.queue.remove(queued)
        self.shared.logs.add(run_id, "cancelled by its coordinator before it started")
        await self.ending.store_end(run_id, "cancelled", EndCause.CANCELLED, "cancelled by its coordinator", [], [])
        return True

    def position(self, run_id: int) -> int | None:
        """1 for the head of the queue; None when the run is not queued."""
        return next((index + 1 for index, q in enumerate(self.queue) if q.run_id == run_id), None)

    def reason(self, run_id: int) -> str | None:
        return next((q.reason for q in self.queue if q.run_id == run_id), None)

    # ------------------------------------------------------------ each round

    async def start_queued(self) -> None:
        await self._expire()
        if not self.queue:
            return  # a round per joining worker must not walk the whole fleet for nothing (n² as a fleet joins)
        present = [w for w in self.shared.fleet.workers.values() if not w.paused]
        idle = [w for w in present if not w.busy]
        eligible = {
            q.run_id: {w.worker_id for w in present if self.shared.eligible(w, q.spec, q.owner_id)} for q in self.queue
        }
        # Accounts with a run waiting that the connected workers could run: fair share holds back the others.
        waiting = {q.owner_id for q in self.queue if len(eligible[q.run_id]) >= selection.needed(q.spec)}
        held = Counter(run.owner_id for w in present if (run := self.shared.active.get(w.run_id)) is not None)
        share = self.shared.policy.fair_share
        limit = int(share * len(present))
        claimed: set[str] = set()
        for queued in list(self.queue):
            need = selection.needed(queued.spec)
            usable = [w for w in idle if w.worker_id in eligible[queued.run_id]]
            free = [w for w in usable if w.worker_id not in claimed]
            if share < 1 and waiting - {queued.owner_id} and held[queued.owner_id] + need > limit:
                reason = selection.fair_share_reason(held[queued.owner_id], limit, share, need)
            elif len(free) >= need:
                chosen = selection.ranked(free, self.shared.speeds.of)[:need]
                self.queue.remove(queued)
                idle = [w for w in idle if all(w is not c for c in chosen)]
                held[queued.owner_id] += need
                await self._begin(queued, chosen)
                continue
            elif len(eligible[queued.run_id]) >= need:
                busy = len(eligible[queued.run_id]) - len(usable)
                reason = selection.wait_reason(queued.spec, len(free), len(usable) - len(free), busy)
                claimed.update(w.worker_id for w in usable)
            else:
                reason = self._short_reason(queued, len(eligible[queued.run_id]))
            if reason != queued.reason:
                queued.reason = reason
                await Run.update({Run.reason: reason}).where(Run.id == queued.run_id)

    def _short_reason(self, queued: Queued, eligible: int) -> str:
        # Paused workers are connected: the reason counts them and says why they do not work.
        connected = list(self.shared.fleet.workers.values())
        reason = selection.short_reason(queued.spec, len(connected), eligible, paused_note(connected))
        present = [w for w in connected if not w.paused]
        return reason + selection.software_gpu_note(queued.spec, present, self.shared.policy.software_gpus)

    async def _expire(self) -> None:
        """Fail the runs that waited longer than their queue timeout."""
        default = self.shared.policy.queue_timeout_hours * 3600
        at = now()
        for queued in list(self.queue):
            timeout = queued.spec.queue_timeout if queued.spec.queue_timeout is not None else default
            if not timeout or (at - queued.queued_at).total_seconds() <= timeout:
                continue
            self.queue.remove(queued)
            reason = f"not started within its queue timeout of {_duration(timeout)}" + (
                f" ({queued.reason})" if queued.reason else ""
            )
            self.shared.logs.add(queued.run_id, reason, level="error")
            await self.ending.store_end(queued.run_id, "failed", EndCause.QUEUE_TIMEOUT, reason, [], [])

    async def _begin(self, queued: Queued, workers: list[Worker]) -> None:
        run = await self.activate(queued.run_id, queued.owner_id, queued.spec)
        if run is None:
            return
        QUEUE_WAIT.observe((now() - queued.queued_at).total_seconds())
        groups, count = list(run.execution.groups), run.spec.worker_count
        for index, worker in enumerate(workers):
            self.placement.bind_rank(run, groups[index // count], index % count, worker)
        self.shared.active[run.run_id] = run
        update = Run.update({Run.state: "running", Run.started_at: now(), Run.reason: ""}).where(Run.id == run.run_id)
        run.start_stored = self.shared.spawn(update.run())
        names = ", ".join(w.worker_id for w in workers)
        self.shared.logs.add(run.run_id, f"started on {len(workers)} worker(s): {names}")
        for worker in workers:  # their first tasks find the run's sandbox started
            self.shared.send(worker, p.TaskPrepare(run_id=run.run_id, script=run.script_url, warm=run.warm_url))

    async def activate(self, run_id: int, owner_id: int, spec: JobSpec) -> LiveRun | None:
        """The in-memory state of a run that starts (or continues after a restart); None when it
        cannot run, and has been failed with the reason."""
        storage = None
        if spec.storage_type != "pmrfs":
            storage = await cloud.storage_for(self.cloud_keys, owner_id)
            if storage is None:
                reason = "storage type s3 needs the account's Cloud Data settings (bucket and keys); none are saved"
                await self.ending.store_end(run_id, "failed", EndCause.NO_STORAGE, reason, [], [])
                return None
        execution = RunExecution(run_id, spec, cloud=storage is not None)
        settings = self.shared.settings
        params = ParameterServer(
            spec.staleness or 0, list(execution.groups), spec.worker_count, settings.ps_max_bytes_per_run
        )
        return LiveRun(run_id, owner_id, spec, execution, await allowed_origins(settings), params, storage)
