"""Recovery: a running run's progress written every second (jobs/checkpoints.py), runs re-adopted
from it at the next start once their workers are back, and the drain before a stop.

State that must survive a restart lives in the database: the queue is the ``queued`` runs, a
running run's progress is its checkpoint, and a run's outcome, tasks and logs are written when it
ends. Everything else is in memory and rebuilt from the fleet.
"""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec

from appliance.jobs import checkpoints, parameters
from appliance.jobs.engine.admission import Admission
from appliance.jobs.engine.ending import Ending
from appliance.jobs.engine.live import LiveRun, Queued, places
from appliance.jobs.engine.placement import Placement, Unbind
from appliance.jobs.engine.shared import Shared
from appliance.jobs.spec import JobSpec
from appliance.jobs.tables import Run

log = logging.getLogger(__name__)

# How often running runs' progress is written (at most; only runs that changed). Parameter-server
# values, which may be large, are written as often, but never spending more than a tenth of the time.
CHECKPOINT_SECONDS = 1.0
PS_CHECKPOINT_SHARE = 0.1


class Recovery:
    def __init__(self, shared: Shared, placement: Placement, admission: Admission, ending: Ending):
        self.shared = shared
        self.placement = placement
        self.admission = admission
        self.ending = ending
        self.drained = False  # stopping, and the runs' last checkpoints are written

    async def recover(self) -> None:
        """After a restart: queued runs stay queued, in order; runs that were running continue from
        their checkpoint once their workers have come back, or the recovery grace is over."""
        running = Run.select(Run.id, Run.owner, Run.spec).where(Run.state == "running").order_by(Run.id)
        for row in await running:
            spec = msgspec.json.decode(row["spec"], type=JobSpec)
            run = await self.admission.activate(row["id"], row["owner"], spec)
            if run is not None:
                await self._resume(run)
        queued = Run.select(Run.id, Run.owner, Run.spec, Run.queued_at).where(Run.state == "queued").order_by(Run.id)
        for row in await queued:
            spec = msgspec.json.decode(row["spec"], type=JobSpec)
            self.admission.queue.append(Queued(row["id"], row["owner"], spec, row["queued_at"]))

    async def _resume(self, run: LiveRun) -> None:
        grace = self.shared.settings.job_recovery_grace_seconds
        saved = await checkpoints.load(run.run_id)
        kept = 0
        if saved is not None:
            done = checkpoints.restore(run.execution, saved)
            kept = len(done)
            durability = run.durability
            durability.row = True
            run.seats.excluded.update(saved.excluded)
            run.seats.accounts.update(saved.accounts)
            # Attempts from before the restart may still be talking: their messages carry an old epoch.
            run.talk.epochs = {g: saved.epochs.get(g, 0) + 1 for g in run.execution.groups}
            for output in (o for t in done for o in t.outputs if run.storage is None):
                durability.restored.setdefault(output.location, []).append(output)
            durability.recovering_until = time.monotonic() + grace
            run.params.resume(saved.clocks)
            await parameters.restore(run.run_id, run.params)
            durability.params_saved = run.params.changes
        self.shared.active[run.run_id] = run
        waiting = f" once its workers are back (waiting up to {grace} s)" if saved is not None else ", from the start"
        self.shared.logs.add(
            run.run_id,
            f"the appliance restarted: the run continues with {kept} finished task(s) kept{waiting}",
            level="warn",
        )

    def serving(self) -> None:
        """Workers can reconnect only once the appliance listens: the recovery grace of re-adopted runs
        counts from then, not from the start of a startup that may have taken a while."""
        until = time.monotonic() + self.shared.settings.job_recovery_grace_seconds
        for run in self.shared.active.values():
            if run.durability.recovering_until:
                run.durability.recovering_until = max(run.durability.recovering_until, until)

    def recovered(self, run: LiveRun, clock: float) -> bool:
        """Whether a run re-adopted after a restart may go on: its workers are back, or the grace is
        over, and then the ranks of those that are not back are vacant and what only they held is
        computed again."""
        execution, durability = run.execution, run.durability
        missing = sorted(w for w in execution.workers() if self.shared.fleet.get(w) is None)
        if missing and clock < durability.recovering_until:
            return False
        durability.recovering_until = 0.0
        durability.not_back = {place for w in missing for place in execution.places_of(w)}
        again = [task for worker_id in missing for task in self.placement.unbind(run, worker_id, Unbind.NOT_BACK)]
        if not execution.cloud:
            again += execution.recompute_lost()
        for group, rank in execution.vacant_ranks():
            run.seats.vacant_since.setdefault((group, rank), clock)
        durability.lost_in_restart = places(execution, again)
        self.shared.logs.add(
            run.run_id,
            f"recovered after the restart: {len(execution.workers())} worker(s) back"
            + (f"; not back: {', '.join(missing)}" if missing else "")
            + (f"; the output of {durability.lost_in_restart} was lost and is computed again" if again else ""),
            level="warn" if missing or again else "info",
        )
        return True

    # ------------------------------------------------------------ checkpoints

    async def checkpoint(self, final: bool = False) -> None:
        """Write the progress of every run that changed since its last checkpoint (checkpoints.py),
        and its parameter-server values when they are due (PS_CHECKPOINT_SHARE), or all now (``final``)."""
        if self.drained:
            return  # the last one is written: what follows is the stop itself (connections closing)
        async with self.shared.checkpointing:
            for run in list(self.shared.active.values()):
                if run.ending or run.durability.recovering_until:
                    continue
                try:
                    await self._write(run, final)
                except Exception:
                    log.exception("could not write the checkpoint of run %s", run.run_id)

    @staticmethod
    async def _write(run: LiveRun, final: bool) -> None:
        durability, changes = run.durability, run.execution.changes
        if changes != durability.checkpointed:
            clocks = run.params.starting_clocks()
            seats = run.seats
            saved = checkpoints.capture(run.execution, run.talk.epochs, seats.excluded, seats.accounts, clocks)
            await checkpoints.save(run.run_id, checkpoints.encode(saved), durability.row)
            durability.checkpointed, durability.row = changes, True
        values = run.params.changes
        if values != durability.params_saved and (final or time.monotonic() >= durability.params_due):
            began = time.monotonic()
            await parameters.keep(run.run_id, run.params)
            pause = max(CHECKPOINT_SECONDS, (time.monotonic() - began) / PS_CHECKPOINT_SHARE)
            durability.params_saved, durability.params_due = values, began + pause

    async def drain(self, timeout: float) -> None:
        """Before a stop: start nothing more, give running tasks up to ``timeout`` seconds to finish,
        and write every run's progress, so the next start continues the runs."""
        self.shared.draining = True
        self.ending.answer_waiting()
        deadline = time.monotonic() + timeout
        log.info("stopping: no new tasks; waiting up to %s s for the running ones", timeout)

        # A run whose last task finished is storing its end: that finishes too. A streaming reduce
        # still waiting for maps is not waited for (a map that has not started never will now): it
        # starts again at the next start.
        def busy(run: LiveRun) -> bool:
            return run.ending or any(not run.execution.waiting_for_input(t) for t in run.execution.active)

        active = self.shared.active
        while time.monotonic() < deadline and any(busy(r) for r in active.values()):
            await asyncio.sleep(0.2)
        left = sum(len(run.execution.active) for run in active.values())
        for run in active.values():
            self.shared.logs.add(
                run.run_id,
                "the appliance is stopping: the run continues when it starts again"
                + (f" ({left} task(s) cut short run again)" if left else ""),
                level="warn",
            )
        await self.shared.logs.flush()
        await self.checkpoint(final=True)
        self.drained = True
