"""Ending: a run's end stored with its tasks' history, its outputs kept (or what it wrote dropped),
its workers freed, and whoever waits for it told."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time

import msgspec

from appliance.clock import now
from appliance.cloud import service as cloud
from appliance.db import insert_many
from appliance.events import EndCause, RunEnded
from appliance.fleet import protocol as p
from appliance.jobs import parameters
from appliance.jobs.engine.live import LiveRun
from appliance.jobs.engine.placement import Placement
from appliance.jobs.engine.shared import Shared
from appliance.jobs.execution import INPUT_STAGE, SHUFFLE_TYPE, Output, TaskEvent, stage_label
from appliance.jobs.peers import Peers
from appliance.jobs.tables import Run, RunCheckpoint, RunOutput, RunTask
from appliance.pmrfs import namenode
from appliance.pmrfs import service as pmrfs
from appliance.pmrfs.blobstore import BlobStore
from appliance.pmrfs.namenode import LiveHolders

log = logging.getLogger(__name__)

# A run's task history (one row per attempt), written when it ends.
TASK_COLUMNS = (
    "run",
    "group",
    "stage",
    "rank",
    "chunk",
    "chunks",
    "attempt",
    "worker_id",
    "worker_account",
    "state",
    "started_at",
    "finished_at",
    "emits",
    "bytes_out",
    "cpu_ms",
    "error",
    "gpu_adapter",
)


class Ending:
    def __init__(self, shared: Shared, placement: Placement, peers: Peers, store: BlobStore, live: LiveHolders):
        self.shared = shared
        self.fleet = shared.fleet
        self.placement = placement
        self.peers = peers
        self.store = store
        self.live_holders = live
        self.ends: dict[int, asyncio.Event] = {}  # run id -> set once its end is stored (end_of)

    def end_of(self, run_id: int) -> asyncio.Event:
        """Set once the run's end is in the database (or at once while the appliance stops): a client
        waits on it instead of polling (take it before reading the run's state, so an end between the
        two is not missed)."""
        if self.shared.draining:
            stopping = asyncio.Event()
            stopping.set()
            return stopping
        return self.ends.setdefault(run_id, asyncio.Event())

    def answer_waiting(self) -> None:
        """Stopping: clients waiting on a run are answered now (it is still running), or they would
        hold up the server's stop, which waits for open requests, for as long as their wait."""
        for ended in self.ends.values():
            ended.set()
        self.ends.clear()

    # ------------------------------------------------------------ a run that ends

    async def succeed(self, run: LiveRun) -> None:
        try:
            outputs = await self._keep_outputs(run)
        except Exception as exc:
            log.exception("run %s: keeping the output failed", run.run_id)
            run.ending = False
            await self.end(run, "failed", EndCause.OUTPUT_LOST, f"the output could not be kept: {exc}")
            return
        await self._finish(run, "succeeded", EndCause.COMPLETED, "", outputs)

    async def end(self, run: LiveRun, state: str, cause: EndCause, reason: str) -> None:
        """Fail or cancel a running run: stop its tasks, drop what they wrote, free its workers."""
        if run.ending:
            return
        run.ending = True
        run.execution.transitions.because(f"end:{cause}")
        for task in [*run.execution.all_extra_attempts(), *run.execution.all_tasks()]:
            if task.state == "verifying":
                run.execution.retry(task, TaskEvent.CANCEL, reason)
            elif task.state in ("staging", "running"):
                self.shared.send(task.worker_id, p.TaskCancel(task_id=task.id))
                if task.is_backup:
                    run.execution.drop_backup(task, TaskEvent.CANCEL, reason)
                else:
                    run.execution.retry(task, TaskEvent.CANCEL, reason)
        run.execution.take_cancels()  # each page was told above
        run.execution.take_splits()  # nothing left to split
        await self._discard(run, intermediate_only=False)
        await self._finish(run, state, cause, reason, [])

    async def _finish(self, run: LiveRun, state: str, cause: EndCause, reason: str, outputs: list[RunOutput]) -> None:
        execution = run.execution
        level = "error" if state == "failed" else "info"
        self.shared.logs.add(run.run_id, f"{state}" + (f": {reason}" if reason else ""), level=level)
        self.placement.release_all(run)
        self.shared.active.pop(run.run_id, None)
        await self.peers.run_ended(run)
        try:
            if run.start_stored is not None:
                await asyncio.wait([run.start_stored])  # never overwrite the end with the start
            await parameters.keep(run.run_id, run.params)
            await self.store_end(run.run_id, state, cause, reason, self._task_rows(run), outputs, execution.progress())
            # Billing meters the attempts; worker reliability scores them.
            await self.fleet.events.publish(
                RunEnded(
                    run.run_id,
                    run.owner_id,
                    state,
                    cause,
                    list(execution.history),
                    dict(run.seats.accounts),
                    frozenset(run.seats.excluded),
                    private=run.spec.private_mode,
                    gpu=run.spec.gpu,
                )
            )
        finally:
            self.shared.logs.forget(run.run_id)
            self.shared.wake.set()

    # ------------------------------------------------------------ outputs

    async def _keep_outputs(self, run: LiveRun) -> list[RunOutput]:
        """Final outputs become pinned PMRFS objects (copied to the appliance), or stay in the cloud bucket."""
        execution = run.execution
        rows: list[RunOutput] = []
        content_type = execution.content_type(execution.last_stage)
        for group, ranks in execution.final_outputs().items():
            for rank, outputs in ranks:
                rows += [
                    RunOutput(
                        run=run.run_id,
                        group=group,
                        rank=rank,
                        seq=seq,
                        location=o.location,
                        size=o.size,
                        records=o.records,
                        content_type=content_type,
                    )
                    for seq, o in enumerate(outputs)
                ]
                if run.storage is None and outputs:
                    key = f"run-{run.run_id}/{group}/output/part-{rank:05d}"
                    await self._record(run, key, outputs, content_type, True)
        if run.storage is None:
            await self._copy_to_appliance([r.location for r in rows])
        if not run.spec.save_intermediate_output:
            await self._discard(run, intermediate_only=True)
        elif run.storage is None:
            for group, stage, rank, outputs in self._intermediates_by_rank(run):
                key = f"run-{run.run_id}/{group}/{stage_label(stage)}/part-{rank:05d}"
                content, wire = execution.content_type(stage), execution.wire_type(stage)
                await self._record(run, key, outputs, content, False, wire)
        return rows

    async def _copy_to_appliance(self, shas: list[str]) -> None:
        restored = set(await namenode.restore_appliance_copies(self.store, shas, self.live_holders))
        missing = [sha for sha in shas if sha not in restored and not self.store.exists(sha)]
        if missing:
            raise RuntimeError(f"{len(missing)} output blob(s) could not be copied from the workers")

    @staticmethod
    def _intermediates_by_rank(run: LiveRun) -> list[tuple[str, int, int, list[Output]]]:
        """Each rank's output of each stage before the last (its chunks' in chunk order), if any."""
        execution = run.execution
        return [
            (group, stage, rank, outputs)
            for group in execution.groups
            for stage in range(INPUT_STAGE, execution.last_stage)
            for rank in range(1 if stage == INPUT_STAGE else execution.worker_count)
            if (outputs := execution.rank_outputs(group, stage, rank))
        ]

    async def _record(
        self, run: LiveRun, key: str, outputs: list[Output], content_type: str, pinned: bool, wire_type: str = ""
    ) -> None:
        blobs = list(dict.fromkeys((o.location, o.size) for o in outputs))
        holders: dict[str, set[str]] = {}
        for o in outputs:
            holders.setdefault(o.location, set()).update(h for h in o.holders if self.fleet.get(h) is not None)
        await pmrfs.record_browser_object(
            run.owner_id,
            key,
            blobs,
            holders,
            content_type=content_type,
            pinned=pinned,
            encoding="shuffle" if wire_type == SHUFFLE_TYPE else "",
        )

    async def _discard(self, run: LiveRun, *, intermediate_only: bool) -> None:
        """Delete what the run's tasks wrote (browsers drop the blobs; cloud objects are deleted)."""
        execution = run.execution
        tasks = [t for t in execution.all_tasks() if not intermediate_only or t.stage != execution.last_stage]
        if run.storage is not None:
            prefixes = [run.task_root(t) + "/" for t in tasks] if intermediate_only else [run.key_prefix() + "/"]
            try:
                for prefix in prefixes:
                    await cloud.delete_prefix(run.storage, prefix)
            except Exception as exc:
                self.shared.logs.add(
                    run.run_id, f"could not delete the run's objects in the bucket: {exc}", level="warn"
                )
            return
        keep = set()
        if intermediate_only:
            keep = {o.location for _, outs in execution.final_outputs().items() for _, os_ in outs for o in os_}
        for task in tasks:
            for o in task.outputs:
                if o.location not in keep:
                    for holder in o.holders:
                        self.shared.send(holder, p.BlobDelete(sha256=o.location))

    # ------------------------------------------------------------ the rows

    @staticmethod
    def _task_rows(run: LiveRun) -> list[tuple]:
        """The run's task attempts as rows of TASK_COLUMNS."""
        wall = time.time() - time.monotonic()  # monotonic -> epoch
        seats = run.seats
        return [
            (
                run.run_id,
                a.group,
                a.stage,
                a.rank,
                a.chunk,
                a.chunks,
                a.attempt,
                a.worker_id,
                seats.accounts.get(a.worker_id),
                a.state,
                dt.datetime.fromtimestamp(a.started + wall, dt.UTC),
                dt.datetime.fromtimestamp(a.finished + wall, dt.UTC),
                a.emits,
                a.bytes,
                a.cpu_ms,
                a.error,
                seats.adapters.get(a.worker_id, ""),
            )
            for a in run.execution.history
        ]

    async def store_end(
        self,
        run_id: int,
        state: str,
        cause: EndCause,
        reason: str,
        tasks: list[tuple],
        outputs: list[RunOutput],
        progress: list[dict] | None = None,
    ) -> None:
        logs = self.shared.logs
        async with logs.flushing, self.shared.checkpointing, Run._meta.db.transaction() as transaction:
            await logs.write()  # the whole log is there once the run shows as ended (one commit)
            await RunCheckpoint.delete().where(RunCheckpoint.run == run_id)
            await Run.update(
                {
                    Run.state: state,
                    Run.cause: cause,
                    Run.reason: reason,
                    Run.finished_at: now(),
                    Run.progress: msgspec.json.encode(progress or []).decode(),
                }
            ).where(Run.id == run_id)
            # The driver's own executemany: Piccolo's objects, or its query building for a raw
            # multi-row INSERT (~1 µs a value), cost more than the run's tasks did.
            await insert_many(transaction, RunTask, TASK_COLUMNS, tasks)
            for start in range(0, len(outputs), 500):
                await RunOutput.insert(*outputs[start : start + 500])
        if (ended := self.ends.pop(run_id, None)) is not None:
            ended.set()
