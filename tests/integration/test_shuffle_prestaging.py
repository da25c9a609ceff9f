"""The shuffle overlaps the map stage: a finished map's partitions are copied to the workers of the
ranks that reduce them while the other maps still run, and a reduce whose rank's map is done starts
then, taking each other map's pieces as it finishes (simulated workers; real browsers run the
shuffle in tests/e2e/test_shuffle_in_browsers.py, and a streaming reduce's decoding in
tests/e2e/test_task_sandbox.py).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter

from tests.integration.test_job_scheduling import job_script
from tests.sim_workers import SimWorker, cookie_of, finish_empty
from tests.support import Appliance

WORKERS = 4


def blob(task_id: str, partition: int) -> str:
    return hashlib.sha256(f"{task_id}/{partition}".encode()).hexdigest()


class Fleet:
    """Four workers whose maps write one blob per partition. The map on rank 0 finishes at once, the
    others when ``release`` is set; the ``refuse_first`` first copies of a piece its target reduces are
    refused (a data channel that failed)."""

    def __init__(self, refuse_first: int = 0, spare: int = 0):
        self.spare = spare  # workers beyond the ranks, to replace a lost one
        self.release = asyncio.Event()
        self.received: list[tuple[str, str, bool]] = []  # (worker, blob, while the maps were held)
        self.refusals = refuse_first
        self.rank: dict[str, int] = {}
        self.maps: set[str] = set()  # the maps' task ids
        self.refused: list[tuple[str, str, bool]] = []
        self.workers: list[SimWorker] = []

    async def start(self, appliance: Appliance, cookie: str) -> Fleet:
        for _ in range(WORKERS + self.spare):  # one at a time: the longest connected gets a rank first
            worker = SimWorker(appliance.url, cookie, on_task=self.task, on_blob_receive=self.receive)
            self.workers.append(await worker.start())
        return self

    async def task(self, worker: SimWorker, task: dict) -> None:
        if task["kind"] != "map":
            await finish_empty(worker, task)
            return
        self.rank[worker.worker_id] = task["rank"]
        self.maps.add(task["taskId"])
        if task["rank"] != 0:
            await self.release.wait()
        outputs = [
            {"partition": part, "size": 10, "records": 1, "sha256": blob(task["taskId"], part)}
            for part in range(task["workerCount"])
        ]
        await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": outputs, "emits": 4, "cpuMs": 1})

    async def receive(self, worker: SimWorker, message: dict) -> None:
        self.received.append((worker.worker_id, message["sha256"], not self.release.is_set()))
        reply = {"type": "blob-stored", "transferId": message["transferId"], "sha256": message["sha256"]}
        reduced = {blob(m, self.rank.get(worker.worker_id, -1)) for m in self.maps}
        if self.refusals and message["sha256"] in reduced:
            self.refusals -= 1
            self.refused.append(self.received[-1])
            reply = {**reply, "type": "blob-failed", "reason": "no data channel"}
        await worker.send({**reply, "size": message["size"]})

    def first_map(self) -> str:
        return next(t["taskId"] for w in self.workers for t in w.tasks if t["kind"] == "map" and t["rank"] == 0)

    async def early_copies(self) -> set[tuple[str, str]]:
        """Waits until rank 0's map output reached the three other ranks' workers and its keeper (the
        maps there held)."""
        for _ in range(300):
            if len(self.rank) == WORKERS and len({(w, b) for w, b, early in self.received if early}) >= WORKERS:
                break
            await asyncio.sleep(0.1)
        return {(w, b) for w, b, early in self.received if early}

    async def close(self) -> None:
        self.release.set()
        for worker in self.workers:
            await worker.close()


async def test_a_finished_maps_partitions_reach_the_reduces_workers_while_other_maps_run(
    appliance, carol_client, carol
):
    fleet = await Fleet().start(appliance, cookie_of(carol_client))
    try:
        run = carol.run(carol.job(job_script(workers=WORKERS)))
        early = await fleet.early_copies()
        first = fleet.first_map()
        # Each other rank's worker got its own partition of rank 0's output, and rank 1's worker a
        # second copy of the partition rank 0 reads itself (its keeper), and nothing else yet.
        wanted = {(w, blob(first, rank)) for w, rank in fleet.rank.items() if rank != 0}
        keeper = next(w for w, rank in fleet.rank.items() if rank == 1)
        assert early == wanted | {(keeper, blob(first, 0))}, (early, fleet.rank)
        fleet.release.set()
        done = await carol.wait(run["id"], timeout=30)
        assert done["state"] == "succeeded", done
        # Every reduce read all four maps' pieces of its partition, each copied to it once: those
        # copied early were not copied again when the reduce started. Each map's output went to the
        # three other workers and its own rank's partition to a keeper: every piece in two browsers.
        for worker in fleet.workers:
            reduce = next(t for t in worker.tasks if t["kind"] == "reduce")
            maps = [f"{run['id']}.A.0.{r}.0" for r in range(WORKERS)]
            assert [i["sha256"] for i in reduce["inputs"]] == [blob(m, reduce["rank"]) for m in maps]
        copies = Counter(fleet.received)
        assert len(copies) == WORKERS * WORKERS and set(copies.values()) == {1}, copies
    finally:
        await fleet.close()


async def test_an_early_copy_that_fails_is_made_again_when_the_reduce_starts(appliance, carol_client, carol):
    fleet = await Fleet(refuse_first=1).start(appliance, cookie_of(carol_client))
    try:
        run = carol.run(carol.job(job_script(workers=WORKERS)))
        await fleet.early_copies()
        fleet.release.set()
        done = await carol.wait(run["id"], timeout=30)
        assert done["state"] == "succeeded", done
        [refused] = fleet.refused
        assert Counter(fleet.received)[refused] == 1 and (refused[0], refused[1], False) in fleet.received
        # The early copy is best effort: its failure blames nobody and costs the run nothing.
        log = carol.http.get(f"/runs/{run['id']}/logs").text
        assert "could not move an input" not in log and "taken off the run" not in log, log
    finally:
        await fleet.close()


async def streaming_reduce(worker: SimWorker) -> dict:
    """The reduce task-assign rank 0's worker got while the other maps were held."""
    for _ in range(300):
        if worker.streaming:
            return next(iter(worker.streaming.values()))
        await asyncio.sleep(0.1)
    raise AssertionError(f"no streaming reduce on {worker.worker_id}: {worker.tasks}")


async def test_a_reduce_starts_while_other_maps_run_and_gets_each_maps_pieces_when_it_is_done(
    appliance, carol_client, carol
):
    fleet = await Fleet().start(appliance, cookie_of(carol_client))
    try:
        run = carol.run(carol.job(job_script(workers=WORKERS)))
        await fleet.early_copies()
        first = fleet.first_map()
        rank0 = next(w for w in fleet.workers if fleet.rank.get(w.worker_id) == 0)
        early = await streaming_reduce(rank0)
        # Its own map's piece comes with it; the three maps still running follow.
        assert early["awaiting"] == [1, 2, 3] and early["rank"] == 0
        assert early["inputs"] == [{"sha256": blob(first, 0), "size": 10, "producer": 0}]
        progress = {(s["stage"], s["running"], s["done"]) for s in carol.get(run["id"])["progress"]}
        assert (1, 1, 0) in progress  # the reduce shows as running on the run page
        fleet.release.set()
        done = await carol.wait(run["id"], timeout=30)
        assert done["state"] == "succeeded", done
        maps = [f"{run['id']}.A.0.{r}.0" for r in range(WORKERS)]
        [reduce] = [t for t in rank0.tasks if t["kind"] == "reduce"]
        assert reduce["taskId"] == early["taskId"]  # the same attempt, not started again
        assert [i["sha256"] for i in reduce["inputs"]] == [blob(m, 0) for m in maps]  # in map order
        fed = [m for m in rank0.messages if m["type"] == "task-input"]
        assert sorted(m["producer"] for m in fed) == [1, 2, 3]
        assert Counter(fleet.received).most_common(1)[0][1] == 1  # each piece copied to each worker once
    finally:
        await fleet.close()


async def test_a_map_lost_after_a_reduce_began_runs_again_and_the_reduce_gets_the_new_maps_pieces(
    appliance, carol_client, carol
):
    fleet = await Fleet(spare=1).start(appliance, cookie_of(carol_client))
    try:
        run = carol.run(carol.job(job_script(workers=WORKERS)))
        await fleet.early_copies()
        rank0 = next(w for w in fleet.workers if fleet.rank.get(w.worker_id) == 0)
        early = await streaming_reduce(rank0)
        # The browser of rank 2 vanishes mid-map: the spare takes the rank and runs that map again.
        lost = next(w for w in fleet.workers if fleet.rank.get(w.worker_id) == 2)
        spare = next(w for w in fleet.workers if w.worker_id not in fleet.rank)  # before it may take the rank
        await lost.close()
        await until(lambda: any(t["kind"] == "map" for t in spare.tasks))
        fleet.release.set()
        done = await carol.wait(run["id"], timeout=30)
        assert done["state"] == "succeeded", done
        [reduce] = [t for t in rank0.tasks if t["kind"] == "reduce"]
        assert reduce["taskId"] == early["taskId"]  # it waited on: it had nothing of the lost map
        again = next(t["taskId"] for t in spare.tasks if t["kind"] == "map")
        assert again == f"{run['id']}.A.0.2.1"
        assert blob(again, 0) in [i["sha256"] for i in reduce["inputs"]]
        # (Its worker may have run a backup of a held map meanwhile: a streaming reduce leaves it free for one.)
        assert {"type": "task-cancel", "taskId": reduce["taskId"]} not in rank0.messages
    finally:
        await fleet.close()


class GatedMaps:
    """Workers (one spare) whose map on each rank finishes once that rank's gate opens (rank 0's is
    open); the pieces of rank 1's first map for ranks 2 and 3 never arrive, so only its worker holds them."""

    def __init__(self):
        self.gates = {rank: asyncio.Event() for rank in range(WORKERS)}
        self.gates[0].set()
        self.maps: dict[int, str] = {}  # rank -> its map's latest task id
        self.ranks: dict[str, int] = {}
        self.hung: set[str] = set()
        self.workers: list[SimWorker] = []

    async def start(self, appliance: Appliance, cookie: str) -> GatedMaps:
        for _ in range(WORKERS + 1):
            worker = SimWorker(appliance.url, cookie, on_task=self.task, on_blob_receive=self.receive)
            self.workers.append(await worker.start())
        return self

    async def task(self, worker: SimWorker, task: dict) -> None:
        if task["kind"] != "map":
            await finish_empty(worker, task)
            return
        self.ranks[worker.worker_id], self.maps[task["rank"]] = task["rank"], task["taskId"]
        if task["rank"] == 1 and not self.hung:
            self.hung.update(blob(task["taskId"], part) for part in (2, 3))
        await self.gates[task["rank"]].wait()
        outputs = [
            {"partition": part, "size": 10, "records": 1, "sha256": blob(task["taskId"], part)}
            for part in range(WORKERS)
        ]
        await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": outputs, "emits": 4, "cpuMs": 1})

    async def receive(self, worker: SimWorker, message: dict) -> None:
        if message["sha256"] in self.hung:
            return
        stored = {"type": "blob-stored", "transferId": message["transferId"], "sha256": message["sha256"]}
        await worker.send({**stored, "size": message["size"]})

    def by_rank(self) -> dict[int, SimWorker]:
        return {rank: next(w for w in self.workers if w.worker_id == wid) for wid, rank in self.ranks.items()}

    async def close(self) -> None:
        for worker in self.workers:
            await worker.close()


async def until(condition, tries: int = 300) -> None:
    """Waits (up to ``tries`` tenths of a second) for ``condition()``; what follows asserts what matters."""
    for _ in range(tries):
        if condition():
            return
        await asyncio.sleep(0.1)


async def test_a_reduce_sent_a_maps_pieces_starts_again_when_that_map_must_run_again(appliance, carol_client, carol):
    fleet = await GatedMaps().start(appliance, cookie_of(carol_client))
    try:
        # No backups of the held maps: each rank's map has one attempt at a time here.
        run = carol.run(carol.job(job_script(workers=WORKERS, speculation="false")))
        await until(lambda: len(fleet.ranks) == WORKERS)
        by_rank = fleet.by_rank()
        early = await streaming_reduce(by_rank[0])
        fleet.gates[1].set()
        await until(lambda: any(m["type"] == "task-input" and m["producer"] == 1 for m in by_rank[0].messages))
        # Rank 1's worker vanishes: its pieces for ranks 2 and 3 are gone, so its map runs again, and
        # rank 0's reduce, which has that map's old piece, is stopped and starts again.
        await by_rank[1].close()
        await until(lambda: {"type": "task-cancel", "taskId": early["taskId"]} in by_rank[0].messages)
        assert {"type": "task-cancel", "taskId": early["taskId"]} in by_rank[0].messages, by_rank[0].messages
        fleet.gates[2].set()
        fleet.gates[3].set()
        done = await carol.wait(run["id"], timeout=60)
        assert done["state"] == "succeeded", done
        [reduce] = [t for t in by_rank[0].tasks if t["kind"] == "reduce"]
        assert reduce["taskId"] == f"{run['id']}.A.1.0.1"
        assert [i["sha256"] for i in reduce["inputs"]] == [blob(fleet.maps[r], 0) for r in range(WORKERS)]
        assert fleet.maps[1] == f"{run['id']}.A.0.1.1"  # the map ran again (on the spare worker)
        log = carol.http.get(f"/runs/{run['id']}/logs").text
        assert "run again" in log, log
    finally:
        await fleet.close()
