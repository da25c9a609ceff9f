"""Stragglers: stalled tasks are reported, slow and stalled tasks get a backup attempt on another
worker, the first attempt to finish wins and the other is cancelled (simulated workers; the same
in real browsers is in tests/e2e/test_stragglers_in_browsers.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import time

import pytest

from tests.integration.test_job_scheduling import Api, job_script
from tests.sim_workers import SimWorker, cookie_of, finish_empty, start_workers
from tests.support import Appliance

STALL_SECONDS = 3


@pytest.fixture(scope="module")
def appliance(appliance_with):
    return appliance_with(job_stall_seconds=STALL_SECONDS)


def slow_maps(seconds: float):
    """A worker whose map tasks take ``seconds`` (everything else finishes at once)."""

    async def handler(worker: SimWorker, task: dict) -> None:
        if task["kind"] == "map":
            await asyncio.sleep(seconds)
        await finish_empty(worker, task)

    return handler


async def stall_maps(worker: SimWorker, task: dict) -> None:
    """A map that reports one emit, then hangs while the worker still answers pings."""
    if task["kind"] != "map":
        await finish_empty(worker, task)
        return
    await worker.send({"type": "task-progress", "taskId": task["taskId"], "emits": 1, "bytes": 10})
    await asyncio.sleep(3600)


def attempts(appliance: Appliance, run_id: int) -> list[tuple]:
    return appliance.query(
        f"SELECT stage, rank, attempt, worker_id, state FROM jobs_task WHERE run = {run_id} AND stage = 0 "
        "ORDER BY rank, attempt"
    )


def log_text(carol: Api, run_id: int) -> str:
    return carol.http.get(f"/runs/{run_id}/logs").text


async def test_a_slow_task_gets_a_backup_attempt_that_wins(appliance, carol_client, carol):
    cookie = cookie_of(carol_client)
    slow = await SimWorker(appliance.url, cookie, worker_id="slow-0001", on_task=slow_maps(30)).start()
    quick = await start_workers(appliance.url, cookie, 3)
    try:
        started = time.monotonic()
        run = carol.run(carol.job(job_script(workers=4)))
        done = await carol.wait(run["id"], timeout=25)
        assert done["state"] == "succeeded", done
        assert time.monotonic() - started < 20  # well before the slow map's 30 s
        (slow_map,) = [t for t in slow.tasks if t["kind"] == "map"]
        cancels = [m for m in slow.messages if m["type"] == "task-cancel"]
        assert [m["taskId"] for m in cancels] == [slow_map["taskId"]]
        rows = attempts(appliance, run["id"])
        rank = slow_map["rank"]
        backup_worker = next(t for t in rows if t[1] == rank and t[4] == "done")[3]
        assert backup_worker != "slow-0001"
        assert [(r[2], r[3], r[4]) for r in rows if r[1] == rank] == [
            (0, "slow-0001", "superseded"),
            (1, backup_worker, "done"),
        ]
        assert "is slow" in log_text(carol, run["id"])
        # The run page's timeline shows both attempts.
        page = carol_client.get(f"/ui/runs/{run['id']}").text
        assert 'class="tl-bar tl-superseded"' in page and 'class="tl-bar tl-done"' in page
    finally:
        for w in [slow, *quick]:
            await w.close()


async def test_a_spare_worker_that_outruns_a_rank_keeps_the_rank(appliance, carol_client, carol):
    cookie = cookie_of(carol_client)
    slow = await SimWorker(appliance.url, cookie, worker_id="slow-0003", on_task=slow_maps(30)).start()
    quick = await start_workers(appliance.url, cookie, 3)
    try:
        run = carol.run(carol.job(job_script(workers=4)))
        await carol.wait(run["id"], states=("running",))
        spare = await SimWorker(appliance.url, cookie, worker_id="spare-0003").start()  # in no run: backups go here
        done = await carol.wait(run["id"], timeout=25)
        assert done["state"] == "succeeded", done
        rank = next(t["rank"] for t in slow.tasks if t["kind"] == "map")
        assert f"rank {rank} of group A moves to worker spare-0003, which outran slow-0003" in log_text(
            carol, run["id"]
        )
        # The rank's reduce ran where its map output was, not on the slower browser.
        assert [t["kind"] for t in spare.tasks] == ["map", "reduce"]
        assert "reduce" not in [t["kind"] for t in slow.tasks]
    finally:
        for w in [slow, *quick, spare]:
            await w.close()


async def test_a_stalled_task_is_reported_and_its_backup_finishes_the_run(appliance, carol_client, carol):
    cookie = cookie_of(carol_client)
    stuck = await SimWorker(appliance.url, cookie, worker_id="stuck-0001", on_task=stall_maps).start()
    # Two workers for two ranks and one spare: the backup goes to the worker in no run first.
    others = await start_workers(appliance.url, cookie, 2)
    try:
        run = carol.run(carol.job(job_script(workers=2)))
        done = await carol.wait(run["id"], timeout=30)
        # Equal scores: the longest connected worker gets a rank first.
        assert any(t["kind"] == "map" for t in stuck.tasks)
        assert done["state"] == "succeeded", done
        log = log_text(carol, run["id"])
        assert "is stalled: no progress for" in log and "while worker stuck-0001 still answers" in log
        assert "a backup attempt starts on worker" in log
        assert ("stuck-0001", "superseded") in [(r[3], r[4]) for r in attempts(appliance, run["id"])]
        # Outrun while it answered pings: the hung browser leaves the run, another worker takes its rank.
        assert "worker stuck-0001 taken off the run: it made no progress on stage 1 (map) on rank 0 of group A" in log
        assert "took over rank 0 of group A" in log
        assert [t["kind"] for t in stuck.tasks] == ["input", "map"]  # no reduce went to it
    finally:
        for w in [stuck, *others]:
            await w.close()


async def test_a_task_whose_sandbox_beats_is_busy_not_stalled(appliance, carol_client, carol):
    """A map that emits nothing for three stall limits while its sandbox's heartbeat comes (a long
    training step) is never stalled, and finishes on its own worker."""
    cookie = cookie_of(carol_client)

    async def busy_maps(worker: SimWorker, task: dict) -> None:
        if task["kind"] == "map":
            for beat in range(1, 3 * STALL_SECONDS + 1):
                await asyncio.sleep(1)
                await worker.send({"type": "task-progress", "taskId": task["taskId"], "emits": 0, "beats": beat})
        await finish_empty(worker, task)

    busy = await SimWorker(appliance.url, cookie, worker_id="busy-0001", on_task=busy_maps).start()
    others = await start_workers(appliance.url, cookie, 2)
    try:
        run = carol.run(carol.job(job_script(workers=2)))
        done = await carol.wait(run["id"], timeout=30)
        assert done["state"] == "succeeded", done
        assert any(t["kind"] == "map" for t in busy.tasks)
        log = log_text(carol, run["id"])
        assert "is stalled" not in log, log
        assert ("busy-0001", "done") in [(r[3], r[4]) for r in attempts(appliance, run["id"])]
    finally:
        for w in [busy, *others]:
            await w.close()


async def test_a_job_can_turn_speculation_off(appliance, carol_client, carol):
    cookie = cookie_of(carol_client)
    slow = await SimWorker(appliance.url, cookie, worker_id="slow-0002", on_task=slow_maps(4)).start()
    quick = await start_workers(appliance.url, cookie, 3)
    try:
        run = carol.run(carol.job(job_script(workers=4, speculation="false")))
        done = await carol.wait(run["id"], timeout=30)
        assert done["state"] == "succeeded", done
        assert not [m for m in slow.messages if m["type"] == "task-cancel"]
        assert all(state == "done" for *_, state in attempts(appliance, run["id"]))
    finally:
        for w in [slow, *quick]:
            await w.close()


async def test_a_stalled_task_without_a_backup_shows_on_the_run_page(appliance, carol_client, carol):
    cookie = cookie_of(carol_client)
    stuck = await SimWorker(appliance.url, cookie, worker_id="stuck-0002", on_task=stall_maps).start()
    try:
        run = carol.run(carol.job(job_script(workers=1, speculation="false")))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            page = carol_client.get(f"/ui/runs/{run['id']}").text
            log = log_text(carol, run["id"])  # written to the store every second
            if "1 stalled" in page and "still answers" in log:
                break
            await asyncio.sleep(0.5)
        assert '<span class="stalled">· 1 stalled</span>' in page
        assert "while worker stuck-0002 still answers" in log
        assert carol.get(run["id"])["progress"][1]["stalled"] == 1  # the map stage, in the API too
        carol.http.post(f"/runs/{run['id']}/cancel")
    finally:
        await stuck.close()


# ---------------------------------------------------------------- copies that fail between workers


async def map_with_outputs(worker: SimWorker, task: dict) -> None:
    """Maps write one small blob per partition (so every reduce copies from every map's worker)."""
    if task["kind"] != "map":
        await finish_empty(worker, task)
        return
    outputs = [
        {
            "partition": part,
            "size": 10,
            "records": 1,
            "sha256": hashlib.sha256(f"{task['taskId']}/{part}".encode()).hexdigest(),
        }
        for part in range(task["workerCount"])
    ]
    await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": outputs, "emits": 4, "cpuMs": 1})


def copies(fail_from: set[str] = frozenset(), refuse: bool = False):
    """A worker that receives copies of stage outputs: each fails when it comes from a worker in
    ``fail_from`` (that browser cannot send), or every one when ``refuse`` (this one cannot receive)."""

    async def receive(worker: SimWorker, message: dict) -> None:
        if refuse or message["from"] in fail_from:
            reply = {
                "type": "blob-failed",
                "transferId": message["transferId"],
                "sha256": message["sha256"],
                "reason": "no data channel",
            }
        else:
            reply = {
                "type": "blob-stored",
                "transferId": message["transferId"],
                "sha256": message["sha256"],
                "size": message["size"],
            }
        await worker.send(reply)

    return receive


async def copying_workers(appliance, cookie: str, names: list[str], receive, on_task=map_with_outputs) -> list:
    """Workers in the order given (the longest connected gets a rank first), each with ``receive``."""
    return [
        await SimWorker(appliance.url, cookie, worker_id=name, on_task=on_task, on_blob_receive=receive(name)).start()
        for name in names
    ]


async def test_a_worker_that_cannot_send_its_outputs_is_taken_off_and_they_are_computed_again(
    appliance, carol_client, carol
):
    # "mute" holds a rank; its maps finish but no copy from it arrives (its browser process hangs).
    names = ["mute-0001", "good-0001", "good-0002", "good-0003", "spare-0001"]
    workers = await copying_workers(appliance, cookie_of(carol_client), names, lambda name: copies({"mute-0001"}))
    try:
        run = carol.run(carol.job(job_script(workers=4)))
        done = await carol.wait(run["id"], timeout=30)
        assert done["state"] == "succeeded", done
        log = log_text(carol, run["id"])
        assert "could not move an input to worker" in log and "from mute-0001" in log
        assert "worker mute-0001 taken off the run: " in log
        mute_rank = next(t["rank"] for t in workers[0].tasks if t["kind"] == "map")
        # Its rank went to the spare, which ran that map again.
        assert f"worker spare-0001 took over rank {mute_rank} of group A" in log
        assert any(t["kind"] == "map" and t["rank"] == mute_rank for t in workers[-1].tasks)
        assert not any(t["kind"] == "reduce" for t in workers[0].tasks if t["taskId"].split(".")[-1] != "0"), workers[
            0
        ].tasks
    finally:
        for w in workers:
            await w.close()


async def test_a_worker_that_cannot_receive_is_taken_off_and_its_rank_goes_to_another(appliance, carol_client, carol):
    names = ["deaf-0001", "good-0004", "good-0005", "good-0006", "spare-0002"]
    workers = await copying_workers(
        appliance, cookie_of(carol_client), names, lambda name: copies(refuse=name == "deaf-0001")
    )
    try:
        run = carol.run(carol.job(job_script(workers=4)))
        done = await carol.wait(run["id"], timeout=30)
        assert done["state"] == "succeeded", done
        log = log_text(carol, run["id"])
        assert "worker deaf-0001 taken off the run: its copies with 3 workers failed" in log
        deaf_rank = next(t["rank"] for t in workers[0].tasks if t["kind"] == "map")
        assert any(t["kind"] == "reduce" and t["rank"] == deaf_rank for t in workers[-1].tasks)
    finally:
        for w in workers:
            await w.close()


async def test_a_fleet_whose_browsers_cannot_reach_each_other_fails_the_run_with_the_reason(
    appliance, carol_client, carol
):
    names = [f"walled-{n:04d}" for n in range(5)]
    workers = await copying_workers(appliance, cookie_of(carol_client), names, lambda name: copies(refuse=True))
    try:
        run = carol.run(carol.job(job_script(workers=4)))
        done = await carol.wait(run["id"], timeout=30)
        assert done["state"] == "failed", done
        assert done["reason"].startswith("inputs could not be moved between workers: blob "), done
        assert appliance.query(f"SELECT cause FROM jobs_run WHERE id = {run['id']}") == [("transfer-failed",)]
    finally:
        for w in workers:
            await w.close()


# ---------------------------------------------------------------- a reduce's browser lost


async def test_a_reduce_whose_browser_left_starts_on_the_spare_with_no_map_run_again(appliance, carol_client, carol):
    """Every map is done and the worker of rank 1 is in its reduce when it leaves: the partition its
    own map wrote for it was copied to a keeper as well, so the reduce's stand-in on the spare copies
    its whole input from the browsers left, and no map runs again."""
    received: list[tuple[str, str]] = []

    def keeping(name: str):
        async def receive(worker: SimWorker, message: dict) -> None:
            received.append((name, message["sha256"]))
            await copies()(worker, message)

        return receive

    async def task(worker: SimWorker, task: dict) -> None:
        mapped = [t["rank"] for t in worker.tasks if t["kind"] == "map"]
        if task["kind"] == "reduce" and task["rank"] == 1 and mapped == [1]:
            await asyncio.sleep(3600)  # the rank's own worker, until its browser leaves
        await map_with_outputs(worker, task)

    names = ["keep-0001", "keep-0002", "keep-0003", "keep-0004", "spare-0004"]
    workers = await copying_workers(appliance, cookie_of(carol_client), names, keeping, on_task=task)
    try:
        run = carol.run(carol.job(job_script(workers=4)))
        ranks: dict[int, SimWorker] = {}
        for _ in range(300):
            ranks = {t["rank"]: w for w in workers for t in w.tasks if t["kind"] == "map"}
            own = hashlib.sha256(f"{run['id']}.A.0.1.0/1".encode()).hexdigest()  # map 1's partition 1
            reducing = any(t["kind"] == "reduce" for t in ranks[1].tasks) if 1 in ranks else False
            if reducing and (ranks[2].worker_id, own) in received:
                break
            await asyncio.sleep(0.1)
        gone = ranks[1]
        assert (ranks[2].worker_id, own) in received, received  # the keeper is the next rank's worker
        await gone.close()
        done = await carol.wait(run["id"], timeout=30)
        assert done["state"] == "succeeded", done
        log = log_text(carol, run["id"])
        assert f"worker {gone.worker_id} disconnected while running stage 2 (reduce) on rank 1 of group A: " in log
        assert f"rank 1 of group A moves to worker spare-0004, which stood in for {gone.worker_id}" in log, log
        assert "run again" not in log, log
        assert [r[2:] for r in attempts(appliance, run["id"])] == [(0, ranks[r].worker_id, "done") for r in range(4)]
    finally:
        for w in workers:
            await w.close()


async def test_a_reduce_waiting_for_its_input_on_a_browser_gone_silent_moves_to_an_idle_worker(
    appliance, carol_client, carol
):
    """The worker of rank 1 stops answering (a frozen browser) once its map is done, while its
    streaming reduce waits for the other maps' pieces: the reduce has started none of its work, so
    the rank moves to the idle spare as soon as the browser is silent, without waiting for it to be
    taken for gone, and the spare reduces with the pieces the others hold."""
    gate = asyncio.Event()
    frozen: list[SimWorker] = []

    async def task(worker: SimWorker, task: dict) -> None:
        if task["kind"] == "map" and task["rank"] != 1:
            await gate.wait()
        await map_with_outputs(worker, task)
        if task["kind"] == "map" and task["rank"] == 1 and not frozen:
            worker.store_wait_ms = None  # it answers no ping from now on
            frozen.append(worker)

    def receive(name: str):
        async def handler(worker: SimWorker, message: dict) -> None:
            if worker.store_wait_ms is not None:  # a frozen browser stores nothing
                await copies()(worker, message)

        return handler

    names = ["mute-0002", "good-0007", "good-0008", "good-0009", "spare-0005"]
    workers = await copying_workers(appliance, cookie_of(carol_client), names, receive, on_task=task)
    try:
        run = carol.run(carol.job(job_script(workers=4)))
        for _ in range(300):
            if frozen and frozen[0].streaming:
                break
            await asyncio.sleep(0.1)
        [silent] = frozen
        assert silent.streaming, silent.tasks  # its reduce waits for the other maps' pieces
        gate.set()
        done = await carol.wait(run["id"], timeout=30)
        assert done["state"] == "succeeded", done
        log = log_text(carol, run["id"])
        spare = workers[-1]
        moved = f"rank 1 of group A moves to worker {spare.worker_id}, as worker {silent.worker_id} has not answered"
        assert moved in log, log
        assert [t["rank"] for t in spare.tasks if t["kind"] == "reduce"] == [1], spare.tasks
        assert "run again" not in log, log
    finally:
        for w in workers:
            await w.close()


async def test_a_rank_whose_browser_left_takes_the_spare_from_a_backup_for_slowness(appliance, carol_client, carol):
    """Three ranks and one spare. Rank 0's map lags (one emit while the others made thousands), so the
    spare runs a backup of it; then rank 2's browser leaves mid-map. No worker is free, but a task with
    no attempt running comes before a second attempt of a slow one: the spare gives up its backup and
    stands in for rank 2 at once, instead of the rank waiting out the reconnect grace."""
    release = asyncio.Event()
    names = ["lag-0001", "fast-0001", "left-0001", "spare-0006"]

    async def task(worker: SimWorker, task: dict) -> None:
        if task["kind"] != "map" or (worker.worker_id == "spare-0006" and task["rank"] == 2):
            await finish_empty(worker, task)  # the stand-in finishes at once
            return
        emits = 1 if task["rank"] == 0 else 100_000
        for beat in range(600):  # progress every 0.1 s (its sandbox's heartbeat), until released
            if release.is_set():
                break
            await worker.send({"type": "task-progress", "taskId": task["taskId"], "emits": emits, "beats": beat})
            await asyncio.sleep(0.1)
        await finish_empty(worker, task)

    workers = await copying_workers(appliance, cookie_of(carol_client), names, lambda name: copies(), on_task=task)
    try:
        run = carol.run(carol.job(job_script(workers=3)))
        spare = workers[-1]
        for _ in range(300):
            if any(t["rank"] == 0 for t in spare.tasks):
                break
            await asyncio.sleep(0.1)
        assert any(t["rank"] == 0 for t in spare.tasks), spare.tasks  # the backup of the lagging map
        await workers[2].close()
        for _ in range(300):
            if any(t["rank"] == 2 for t in spare.tasks):
                break
            await asyncio.sleep(0.1)
        release.set()
        done = await carol.wait(run["id"], timeout=30)
        assert done["state"] == "succeeded", done
        log = log_text(carol, run["id"])
        assert "on worker spare-0006 ended: its worker stands in for left-0001" in log, log
        started = "worker left-0001 disconnected while running stage 1 (map) on rank 2 of group A: a backup attempt"
        assert f"{started} starts on worker spare-0006 at once" in log, log
    finally:
        for w in workers:
            await w.close()
