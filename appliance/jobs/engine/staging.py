"""Staging: a task's inputs copied to its worker before its task-assign, the partitions of a done map
prestaged to the reduces that read them, and a streaming reduce fed each map's pieces as they come.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

from appliance.cloud import service as cloud
from appliance.events import EndCause
from appliance.fleet import protocol as p
from appliance.fleet.registry import Worker, copy_stall, copy_timeout
from appliance.fleet.transfers import TransferTag
from appliance.jobs.engine.ending import Ending
from appliance.jobs.engine.live import LiveRun
from appliance.jobs.engine.placement import Placement, Unbind
from appliance.jobs.engine.shared import Shared
from appliance.jobs.execution import INPUT_STAGE, Output, Task, TaskEvent, Try
from appliance.jobs.logs import FLEET

MAX_PARALLEL_COPIES = 8


def stalled_on(run: LiveRun, task: Try) -> str:
    return f"it made no progress on {run.where(task)} while it answered pings"


def partition_problem(run: LiveRun, task: Try, partition: int) -> str | None:
    """What is wrong with a partition a task names (in an output or a task-put-url), or None."""
    if run.execution.partitioning(task.stage) == "rank" and partition != task.rank:
        return f"partition {partition} from rank {task.rank} of a stage partitioned by rank"
    if partition >= (count := run.execution.partitions(task.stage)):
        return f"partition {partition} of {count}"
    return None


class Staging:
    def __init__(self, shared: Shared, placement: Placement, ending: Ending):
        self.shared = shared
        self.fleet = shared.fleet
        self.placement = placement
        self.ending = ending
        # The last resort for an input no browser could send: the appliance's own copy (a pinned
        # PMRFS object), fetched by the target over HTTP (pmrfs/datanodes.py); set by the app.
        self.from_appliance: Callable[[str, int, Worker], Awaitable[bool]] | None = None

    def _forget_gone_holders(self, inputs: list[Output]) -> bool:
        """Drop holders that are no longer connected; True when some input has none left."""
        for output in inputs:
            output.holders = {h for h in output.holders if self.fleet.get(h) is not None}
        return any(not o.holders for o in inputs)

    def _input_lost(self, run: LiveRun) -> None:
        again = run.execution.recompute_lost()
        self.shared.logs.add(
            run.run_id, f"an input was lost with its worker; {len(again)} task(s) run again", level="warn"
        )
        self.shared.wake.set()

    # ------------------------------------------------------------ a task's start

    async def launch(self, run: LiveRun, task: Try) -> None:
        """Copy the task's inputs to its worker, then send it its task-assign."""
        if run.execution.waiting_for_input(task):
            await self._stream(run, task)
            return
        worker = self.fleet.get(task.worker_id or "")
        if worker is None:
            return
        inputs = run.execution.inputs(task)
        if run.storage is not None:
            described = [{"url": cloud.presign_get(run.storage, o.location)} for o in inputs]
        elif (described := await self._staged(run, task, worker, inputs)) is None:
            return
        assignment = self._launched(run, task, inputs, described)
        with contextlib.suppress(Exception):  # the socket closed; worker_left reschedules the task
            await worker.send(assignment)

    def launch_at_once(self, run: LiveRun, task: Try) -> bool:
        """launch() without a task of its own, when it would wait for nothing: no input to copy (every
        one on the task's worker already, or none) and a socket that takes the task-assign at once (an
        edge's, through Redis). False when launch() must run instead."""
        execution = run.execution
        worker = self.fleet.get(task.worker_id or "")
        # Not a streaming reduce: its task-assign names the producers it still awaits, each a
        # task-input later, and those done by the time its task runs are named in it instead (sent
        # from the round, a 64 x 40 map/reduce sent ~15 % more task-inputs).
        if worker is None or worker.send_now is None or run.storage is not None or execution.waiting_for_input(task):
            return False
        inputs = execution.inputs(task)
        if inputs and (self._forget_gone_holders(inputs) or any(worker.worker_id not in o.holders for o in inputs)):
            return False  # a copy first, or an input lost: launch() sees to it
        cause = execution.transitions.stimulus
        worker.send_now(self._launched(run, task, inputs, [{"sha256": o.location, "size": o.size} for o in inputs]))
        execution.transitions.stimulus = cause  # the round's other moves are still the round's
        return True

    def _launched(self, run: LiveRun, task: Try, inputs: list[Output], described: list[dict]) -> p.TaskAssign:
        """The task's inputs are in place: it runs from now, and this is its task-assign."""
        for entry, output in zip(described, inputs, strict=True):
            if (chunk := run.execution.chunk_of(task, output)) is not None:
                entry["chunk"] = chunk  # where a range's page may stop (task-split)
        run.execution.transitions.because(f"staged:{task.id}")
        run.execution.running(task)
        if not task.is_backup:
            run.params.task_started(task.group, task.rank, replacement=task.attempt > 0)
        assignment = self.assignment(run, task, described)
        if assignment.shares:
            total, homes = sum(assignment.shares), run.execution.groups[task.group].ranks
            cut = ", ".join(
                f"rank {r} {share / total:.0%} (speed {self.shared.speeds.of(home or ''):.2f})"
                for r, (share, home) in enumerate(zip(assignment.shares, homes, strict=True))
            )
            note = f"group {task.group}'s input is cut by the speed estimates of its ranks' browsers: {cut}"
            self.shared.logs.add(run.run_id, note, source=FLEET)
        return assignment

    async def _staged(self, run: LiveRun, task: Try, worker: Worker, inputs: list[Output]) -> list[dict] | None:
        """PMRFS inputs copied to the worker: how the task-assign names them, or None when the task
        does not start now (an input was lost, a copy failed, or it was sent back meanwhile)."""
        attempt = task.attempt
        if self._forget_gone_holders(inputs):
            self._holder_gone(run, task)
            return None
        missing = any(task.worker_id not in o.holders for o in inputs)
        error = await self.copy(run, worker, inputs) if missing else None
        run.execution.transitions.because(f"copied:{task.id}")
        if error is not None and await self.copy_failed(run, worker, error):
            return None
        if task.attempt != attempt or task.state != "staging":
            # Sent back meanwhile (its worker blamed or lost, an input computed again): it starts
            # again later; a backup's helper is free.
            if task.is_backup:
                self.placement.unbind(run, task.worker_id or "", Unbind.EXTRA_ENDED)
            return None
        if error is not None and self._forget_gone_holders(inputs):
            self._holder_gone(run, task)  # the holder that could not send left meanwhile
            return None
        if error is not None:
            self._copy_error(run, task, error)
            return None
        return [{"sha256": o.location, "size": o.size} for o in inputs]

    def _holder_gone(self, run: LiveRun, task: Try) -> None:
        """An input's last holder left before it could be copied to the task's worker: it is computed
        again, and the task starts again once it is."""
        if not task.is_backup:
            run.execution.retry(task, TaskEvent.INPUT_LOST, "an input was lost with its worker")
            self._input_lost(run)
            return
        self.placement.drop_extra(run, task, TaskEvent.INPUT_LOST, "an input was lost with its worker")
        if (away := task.primary.worker_id) in run.seats.away:
            # A stand-in whose input lived only on the browser that left: waiting for that browser
            # would cost the reconnect grace; its rank moves now, and lineage computes the input again.
            self.placement.unbind(run, away or "", Unbind.DISCONNECTED, "disconnected holding its stand-in's input")

    def _copy_error(self, run: LiveRun, task: Try, error: str) -> None:
        if not task.is_backup:
            run.execution.retry(task, TaskEvent.FAIL, error)
            self.shared.wake.set()
            return
        self.placement.drop_extra(run, task, TaskEvent.FAIL, f"could not move an input to its worker: {error}")
        if task.primary.stalled and task.primary.state == "running":
            # What a stalled task's backup cannot copy is likely on the stalled browser itself:
            # take it off the run, so what only it holds is computed again elsewhere.
            stalled = task.primary
            why = stalled_on(run, stalled)
            self.placement.unbind(run, stalled.worker_id or "", Unbind.HUNG, why, running=stalled)

    def answering(self, worker: Worker) -> bool:
        """Still connected and answering its pings: a copy to a worker that is not failed through no
        fault of its source (the worker froze or left, which is handled on its own)."""
        return self.fleet.get(worker.worker_id) is worker and worker.answers(time.monotonic())

    async def copy_failed(self, run: LiveRun, worker: Worker, error: str) -> bool:
        """An input could not be copied to ``worker``: note it, take off the workers the run's failed
        copies point at; True when there were too many and the run ended."""
        self.shared.logs.add(run.run_id, f"could not move an input to worker {worker.worker_id}: {error}", level="warn")
        if not self.answering(worker):
            return False  # no copy was counted against its sources (copy)
        failures = run.transfers.copy_failures
        blamed = failures.to_blame()
        if failures.limit_reached():
            reason = f"inputs could not be moved between workers: {error}"
            await self.ending.end(run, "failed", EndCause.TRANSFER_FAILED, reason)
            return True
        for culprit, why in blamed.items():
            running = next((t for t in run.execution.active if t.worker_id == culprit), None)
            self.placement.unbind(run, culprit, Unbind.BLAMED, why, running)
        return False

    def assignment(self, run: LiveRun, task: Try, described: list[dict], awaiting: list[int] = ()) -> p.TaskAssign:
        stage, execution = task.stage, run.execution
        return p.TaskAssign(
            task_id=task.id,
            run_id=run.run_id,
            script=run.script_url,
            warm=run.warm_url,
            kind=execution.kind(stage),
            stage=stage,
            group=task.group,
            rank=task.rank,
            worker_count=execution.worker_count,
            partitioning=execution.partitioning(stage),
            input_content_type=execution.wire_type(stage - 1) if stage != INPUT_STAGE else "application/json",
            output_content_type=execution.wire_type(stage),
            combine=stage < execution.last_stage and run.spec.stages[stage + 1].combine,
            prepare_next=stage < execution.last_stage and not task.is_backup,
            inputs=described,
            wasm={w.name: w.url for w in run.spec.wasm_binaries},
            storage="pmrfs" if run.storage is None else "s3",
            worker_timeout=task.worker_timeout,
            fetch_origins=run.origins,
            seed=run.spec.seed or 0,
            staleness=run.spec.staleness or 0,
            epoch=run.talk.epochs.get(task.group, 0),
            awaiting=list(awaiting),
            chunks=execution.chunks[0] if stage == INPUT_STAGE else 1,
            shares=execution.input_shares(task.group, self.shared.speeds.of) if stage == INPUT_STAGE else [],
            producers=len(execution.producers(task.primary or task)) if execution.kind(stage) == "reduce" else 0,
        )

    # ------------------------------------------------------------ a streaming reduce

    async def _stream(self, run: LiveRun, task: Task) -> None:
        """A reduce whose rank's map is done starts while other maps still run: its task-assign names
        the pieces its worker holds now, and _feed sends each other producer's pieces once that
        producer is done and they are copied, so the page decodes them while the shuffle goes on."""
        worker = self.fleet.get(task.worker_id or "")
        if worker is None:
            return
        try:
            await worker.send(self._streamed(run, task, worker))
        except Exception:
            return  # the socket closed; worker_left reschedules the task
        self._stream_started(run, task)

    def _streamed(self, run: LiveRun, task: Task, worker: Worker) -> p.TaskAssign:
        """A streaming reduce's task-assign: the pieces its worker holds now, and the producers it awaits."""
        execution = run.execution
        described = []
        for producer in execution.producers(task):
            pieces = execution.pieces(task, producer)
            index = execution.producer_index(producer)
            if producer.state == "done" and all(worker.worker_id in o.holders for o in pieces):
                described += [{"sha256": o.location, "size": o.size, "producer": index} for o in pieces]
                execution.fed(task, index)
        if not task.awaiting:
            execution.running(task)  # every map finished in the meantime
        run.params.task_started(task.group, task.rank, replacement=task.attempt > 0)
        return self.assignment(run, task, described, sorted(task.awaiting))

    def _stream_started(self, run: LiveRun, task: Task) -> None:
        """Its task-assign went: the producers done since it was made feed it."""
        run.transfers.streams.add(task.id)
        for producer in run.execution.producers(task):
            if producer.state == "done" and self._unfed(run, task, producer):
                self._feed_soon(run, task, producer)

    def feed_consumers(self, run: LiveRun, producer: Task) -> None:
        """A map is done: the streaming reduces waiting for it get its pieces."""
        execution = run.execution
        if execution.partitioning(producer.stage) != "hash":
            return
        for rank in range(execution.worker_count):
            consumer = execution.task(producer.group, producer.stage + 1, rank)
            # Most consumers await nothing (not started, or fed): the cheapest test first.
            if consumer.awaiting and consumer.id in run.transfers.streams and self._unfed(run, consumer, producer):
                self._feed_soon(run, consumer, producer)

    def _feed_soon(self, run: LiveRun, task: Task, producer: Task) -> None:
        """_feed, at once when it would wait for nothing: the producer's pieces on the reduce's worker
        already (or none: a producer that emitted nothing for it), and a socket that sends at once.
        A streaming reduce of R ranks is fed by up to R producers: a task each was most of its cost."""
        execution = run.execution
        worker = self.fleet.get(task.worker_id or "")
        if worker is None or worker.send_now is None or not execution.waiting_for_input(task):
            self.shared.spawn(self._feed(run, task, producer))
            return
        pieces = execution.pieces(task, producer)
        if pieces and (self._forget_gone_holders(pieces) or any(worker.worker_id not in o.holders for o in pieces)):
            self.shared.spawn(self._feed(run, task, producer))  # a copy first, or a piece lost
            return
        index = execution.producer_index(producer)
        if execution.fed(task, index):  # its last piece: it runs, a move caused by this feed
            cause = execution.transitions.stimulus
            execution.transitions.because(f"fed:{task.id}")
            execution.running(task)
            execution.transitions.stimulus = cause
        described = [{"sha256": o.location, "size": o.size} for o in pieces]
        worker.send_now(p.TaskInput(task_id=task.id, producer=index, inputs=described))

    @staticmethod
    def _unfed(run: LiveRun, task: Task, producer: Task) -> bool:
        """The streaming reduce still awaits the producer's pieces and nobody feeds them yet (_feed
        asks again once it runs): a task is spawned only then, not for each producer of each reduce."""
        index = run.execution.producer_index(producer)
        return index in task.awaiting and (task.id, index) not in run.transfers.feeding

    async def _feed(self, run: LiveRun, task: Task, producer: Task) -> None:
        """Copy a done producer's pieces to a streaming reduce's worker (unless there already or on
        their way, prestage), then tell its page (task-input). A copy that fails sends the reduce
        back to wait, as a failed copy before a task-assign would."""
        index = run.execution.producer_index(producer)
        key = (task.id, index)
        worker = self.fleet.get(task.worker_id or "")
        if worker is None or not self._unfed(run, task, producer):
            return
        execution, attempt, outputs = run.execution, task.attempt, producer.outputs
        run.transfers.feeding.add(key)
        try:
            pieces = execution.pieces(task, producer)
            if self._forget_gone_holders(pieces):
                self._input_lost(run)  # the map runs again; its pieces come when it is done
                return
            error = await self.copy(run, worker, pieces)
            execution.transitions.because(f"fed:{task.id}")
            if task.attempt != attempt or not execution.waiting_for_input(task) or producer.outputs is not outputs:
                return  # sent back meanwhile, or the map ran again (its new pieces come when it is done)
            if error is not None:
                if not await self.copy_failed(run, worker, error) and task.attempt == attempt:
                    execution.retry(task, TaskEvent.FAIL, error)
                    self.shared.wake.set()
                return
            if execution.fed(task, index):
                execution.running(task)
            described = [{"sha256": o.location, "size": o.size} for o in pieces]
            with contextlib.suppress(Exception):  # the socket closed; worker_left reschedules the task
                await worker.send(p.TaskInput(task_id=task.id, producer=index, inputs=described))
        finally:
            run.transfers.feeding.discard(key)

    # ------------------------------------------------------------ copies

    def prestage(self, run: LiveRun, task: Task) -> None:
        """A task whose output feeds a reduce is done: copy each of its partitions now to the worker of
        the rank that reads it, while the stage's other tasks still run, so the shuffle overlaps the
        stage and the reduce starts with most of its input in place. A partition its own worker reads
        goes to a keeper as well: so every partition lives in two browsers, and the loss of one costs
        its reduce a copy from the other instead of a map run again first. Best effort: a copy that
        fails here is made (and blamed) by the reduce's own staging."""
        execution = run.execution
        if run.storage is not None or self.shared.draining or execution.partitioning(task.stage) != "hash":
            return
        ranks = execution.groups[task.group].ranks
        prestaging = run.transfers.prestaging
        for output in task.outputs:
            target = self.fleet.get(ranks[output.partition] or "")
            if target is not None and target.worker_id == task.worker_id:
                target = self._keeper(run, ranks, output.partition, target.worker_id)
            key = (output.location, target.worker_id if target is not None else "")
            if target is None or target.worker_id in output.holders or key in prestaging:
                continue
            prestaging[key] = self.shared.spawn(self._prestage_copy(run, output, target, key))

    def _keeper(self, run: LiveRun, ranks: list[str | None], partition: int, reader: str) -> Worker | None:
        """Who keeps the second copy of a partition its reader produced: the worker of the next rank
        after the partition's that is another browser and serves the run now (None when there is none)."""
        seats = run.seats
        for step in range(1, len(ranks)):
            worker_id = ranks[(partition + step) % len(ranks)]
            if worker_id is None or worker_id == reader or worker_id in seats.away or worker_id in seats.excluded:
                continue
            if (worker := self.fleet.get(worker_id)) is not None:
                return worker
        return None

    async def _prestage_copy(self, run: LiveRun, output: Output, target: Worker, key: tuple[str, str]) -> None:
        try:
            for source in self.sources(run, output):
                if await self._copy_from(run, output, source, target):
                    # Unless the target left the run meanwhile (lineage forgot it as a holder).
                    if self.fleet.get(target.worker_id) is target and target.worker_id not in run.seats.excluded:
                        output.holders.add(target.worker_id)
                    return
        finally:
            run.transfers.prestaging.pop(key, None)

    def sources(self, run: LiveRun, output: Output) -> list[Worker]:
        """The output's connected holders to copy it from, suspect ones last: a holder that has not
        answered lately, whose attempt in the run is stalled or backed up (slow), that failed copies
        of the run or was taken off it. A copy from a holder that cannot send fails in seconds
        (copy_stall), then the next is asked."""
        now = time.monotonic()
        failed = run.transfers.copy_failures.peers
        slow = {t.worker_id for t in run.execution.active if t.stalled or t in run.execution.backups}

        def suspect(worker: Worker) -> bool:
            worker_id = worker.worker_id
            return (
                not worker.answers(now) or worker_id in slow or worker_id in failed or worker_id in run.seats.excluded
            )

        live = [w for holder in sorted(output.holders) if (w := self.fleet.get(holder)) is not None]
        return sorted(live, key=suspect)

    async def _copy_from(self, run: LiveRun, output: Output, source: Worker, target: Worker) -> bool:
        tag = TransferTag(account=run.owner_id, run=run.run_id, private=run.spec.private_mode)  # billed to the run
        timeout, stall = copy_timeout(output.size), copy_stall(source, target)
        return await self.fleet.copy_blob(output.location, output.size, source, target, timeout, tag, stall)

    async def copy(self, run: LiveRun, target: Worker, inputs: list[Output]) -> str | None:
        """Copy the inputs the target does not hold from a worker that does; None when all arrived,
        otherwise what went wrong."""
        limit = asyncio.Semaphore(MAX_PARALLEL_COPIES)
        # A pair of workers whose copies fail together (a range's pieces, moved at once) counts once.
        failed: set[tuple[str, str]] = set()

        async def fetch(output: Output) -> str | None:
            if (early := run.transfers.prestaging.get((output.location, target.worker_id))) is not None:
                await asyncio.wait([early])  # already on its way (prestage); it may fail, then we copy
                if target.worker_id in output.holders:
                    return None
            async with limit:
                sources = self.sources(run, output)
                for source in sources:
                    if self.fleet.get(source.worker_id) is not source:
                        continue  # it left while an earlier holder was asked
                    if await self._copy_from(run, output, source, target):
                        output.holders.add(target.worker_id)
                        return None
                    if not self.answering(target):
                        return f"worker {target.worker_id} stopped answering while it was sent blob {output.location}"
                    if (source.worker_id, target.worker_id) not in failed:
                        failed.add((source.worker_id, target.worker_id))
                        run.transfers.copy_failures.record(source.worker_id, target.worker_id)
                if self.from_appliance is not None and await self.from_appliance(output.location, output.size, target):
                    output.holders.add(target.worker_id)
                    return None
                tried = ", ".join(s.worker_id for s in sources) or "any worker"
                return f"blob {output.location} could not be copied from {tried}"

        missing = [o for o in inputs if target.worker_id not in o.holders]
        errors = [e for e in await asyncio.gather(*(fetch(o) for o in missing)) if e is not None]
        return errors[0] if errors else None

    async def put_url(self, run: LiveRun, task: Try, worker: Worker, message: p.TaskPutUrl) -> None:
        """A presigned URL for one object of the task's output (s3 storage), under the task's prefix."""
        if run.storage is None:
            error = "this run stores its data in PMRFS"
        else:
            error = partition_problem(run, task, message.partition)
        if error:
            await worker.send(p.TaskPutUrlReply(reply_to=message.id, error=error))
            return
        seq = run.transfers.put_keys.get(task.id, 0)
        run.transfers.put_keys[task.id] = seq + 1
        key = f"{run.task_prefix(task)}/part-{message.partition:05d}-{seq:05d}"
        url = cloud.presign_put(run.storage, key)
        await worker.send(p.TaskPutUrlReply(reply_to=message.id, url=url, key=key))
