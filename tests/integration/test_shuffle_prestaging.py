"""The shuffle overlaps the map stage: a finished map's partitions are copied to the workers of the
ranks that reduce them while the other maps still run (simulated workers; real browsers run the
shuffle in tests/e2e/test_shuffle_in_browsers.py).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter

import pytest

from tests.integration.test_job_scheduling import job_script
from tests.sim_workers import SimWorker, cookie_of, finish_empty
from tests.support import Appliance

WORKERS = 4


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    server = Appliance(tmp_path_factory.mktemp("prestaging") / "data").start()
    yield server
    server.stop()


def blob(task_id: str, partition: int) -> str:
    return hashlib.sha256(f"{task_id}/{partition}".encode()).hexdigest()


class Fleet:
    """Four workers whose maps write one blob per partition. The map on rank 0 finishes at once, the
    others when ``release`` is set; ``refuse_first`` copies are refused (a data channel that failed)."""

    def __init__(self, refuse_first: int = 0):
        self.release = asyncio.Event()
        self.received: list[tuple[str, str, bool]] = []  # (worker, blob, while the maps were held)
        self.refusals = refuse_first
        self.rank: dict[str, int] = {}
        self.workers: list[SimWorker] = []

    async def start(self, appliance: Appliance, cookie: str) -> Fleet:
        for _ in range(WORKERS):  # one at a time: the longest connected gets a rank first
            worker = SimWorker(appliance.url, cookie, on_task=self.task, on_blob_receive=self.receive)
            self.workers.append(await worker.start())
        return self

    async def task(self, worker: SimWorker, task: dict) -> None:
        if task["kind"] != "map":
            await finish_empty(worker, task)
            return
        self.rank[worker.worker_id] = task["rank"]
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
        if self.refusals:
            self.refusals -= 1
            reply = {**reply, "type": "blob-failed", "reason": "no data channel"}
        await worker.send({**reply, "size": message["size"]})

    def first_map(self) -> str:
        return next(t["taskId"] for w in self.workers for t in w.tasks if t["kind"] == "map" and t["rank"] == 0)

    async def early_copies(self) -> set[tuple[str, str]]:
        """Waits until rank 0's map output reached the three other ranks' workers (the maps there held)."""
        for _ in range(300):
            if len(self.rank) == WORKERS and len({(w, b) for w, b, early in self.received if early}) >= WORKERS - 1:
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
        # Each other rank's worker got its own partition of rank 0's output, and nothing else yet.
        wanted = {(w, blob(first, rank)) for w, rank in fleet.rank.items() if rank != 0}
        assert early == wanted, (early, fleet.rank)
        fleet.release.set()
        done = await carol.wait(run["id"], timeout=30)
        assert done["state"] == "succeeded", done
        # Every reduce read all four maps' pieces of its partition, each copied to it once: those
        # copied early were not copied again when the reduce started.
        for worker in fleet.workers:
            reduce = next(t for t in worker.tasks if t["kind"] == "reduce")
            maps = [f"{run['id']}.A.0.{r}.0" for r in range(WORKERS)]
            assert [i["sha256"] for i in reduce["inputs"]] == [blob(m, reduce["rank"]) for m in maps]
        copies = Counter(fleet.received)
        assert len(copies) == WORKERS * (WORKERS - 1) and set(copies.values()) == {1}, copies
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
        refused = fleet.received[0]
        assert Counter(fleet.received)[refused] == 1 and (refused[0], refused[1], False) in fleet.received
        # The early copy is best effort: its failure blames nobody and costs the run nothing.
        log = carol.http.get(f"/runs/{run['id']}/logs").text
        assert "could not move an input" not in log and "taken off the run" not in log, log
    finally:
        await fleet.close()
