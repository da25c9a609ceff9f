"""Runs survive an appliance crash, restart and stop: the run continues from its checkpoint with the
finished tasks whose outputs the returning workers still hold (simulated workers that keep their
blobs, as a tab's IndexedDB does, and say so in their hello; the real appliance as a process,
killed with SIGKILL or stopped with SIGTERM).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_job_scheduling import Api, job_script, token_for
from tests.sim_workers import SimWorker, cookie_of, finish_empty
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance

ROOT = Path(__file__).resolve().parents[2]
GRACE = 3  # seconds a re-adopted run waits for its workers, and a vacant rank for a replacement


@pytest.fixture(scope="module")
def appliance(appliance_with):
    return appliance_with(
        job_recovery_grace_seconds=GRACE, job_replacement_grace_seconds=GRACE, shutdown_grace_seconds=15
    )


class Fleet:
    """Simulated workers whose maps write one blob per partition and keep them across reconnects;
    a reduce finishes once ``reduces`` is set (before that it runs)."""

    def __init__(self, appliance: Appliance, map_seconds: float = 0.0):
        self.appliance = appliance
        self.map_seconds = map_seconds
        self.reduces = asyncio.Event()
        self.workers: dict[str, SimWorker] = {}

    async def handle(self, worker: SimWorker, task: dict) -> None:
        if task["kind"] == "map":
            await asyncio.sleep(self.map_seconds)
            outputs = []
            for part in range(task["workerCount"]):
                sha = hashlib.sha256(f"{task['taskId']}/{part}".encode()).hexdigest()
                worker.blobs.append(sha)
                outputs.append({"partition": part, "size": 10, "records": 1, "sha256": sha})
            await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": outputs, "emits": 1})
            return
        if task["kind"] == "reduce":
            await self.reduces.wait()
        await finish_empty(worker, task)

    async def receive(self, worker: SimWorker, message: dict) -> None:
        worker.blobs.append(message["sha256"])
        reply = {"transferId": message["transferId"], "sha256": message["sha256"], "size": message["size"]}
        await worker.send({"type": "blob-stored", **reply})

    async def connect(self, cookie: str, name: str, blobs: list[str] | None = None) -> SimWorker:
        worker = SimWorker(
            self.appliance.url, cookie, worker_id=name, on_task=self.handle, on_blob_receive=self.receive, blobs=blobs
        )
        self.workers[name] = await worker.start()
        return worker

    async def close(self) -> None:
        for worker in self.workers.values():
            await worker.close()


def signed_in(appliance: Appliance) -> tuple[str, Api]:
    client = appliance.client()
    client.login(ADMIN_EMAIL, ADMIN_PASSWORD)
    return cookie_of(client), Api(appliance, token_for(appliance, ADMIN_EMAIL))


async def until(predicate, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.1)


def kinds(worker: SimWorker) -> list[str]:
    return [t["kind"] for t in worker.tasks]


def history(appliance: Appliance, run_id: int, stage: int) -> list[tuple]:
    return appliance.query(
        f"SELECT rank, attempt, state, error FROM jobs_task WHERE run = {run_id} AND stage = {stage} "
        "ORDER BY rank, attempt"
    )


def log(api: Api, run_id: int) -> str:
    return api.http.get(f"/runs/{run_id}/logs").text


async def run_into_the_reduce(appliance: Appliance, names: list[str]) -> tuple[Fleet, Api, int]:
    """A 2-rank run whose maps are done and whose reduces run, its progress written."""
    cookie, api = signed_in(appliance)
    fleet = Fleet(appliance)
    for name in names:
        await fleet.connect(cookie, name)
    run = api.run(api.job(job_script(workers=2)))
    await until(lambda: sum(k == "reduce" for w in fleet.workers.values() for k in kinds(w)) == 2)
    await asyncio.sleep(1.5)  # a checkpoint is written within a second of a change
    return fleet, api, run["id"]


async def come_back(appliance: Appliance, held: dict[str, list[str]]) -> tuple[Fleet, Api]:
    """After a start: the workers named reconnect with the blobs they kept; reduces finish at once."""
    cookie, api = signed_in(appliance)
    back = Fleet(appliance)
    back.reduces.set()
    for name, blobs in held.items():
        await back.connect(cookie, name, blobs)
    return back, api


async def test_a_run_killed_in_its_reduce_continues_after_a_restart_with_its_maps_kept(appliance):
    fleet, api, run_id = await run_into_the_reduce(appliance, ["keep-0001", "keep-0002"])
    held = {name: list(w.blobs) for name, w in fleet.workers.items()}
    appliance.kill()
    await fleet.close()
    appliance.start()
    back, api = await come_back(appliance, held)
    try:
        done = await api.wait(run_id, timeout=30)
        assert done["state"] == "succeeded", done
        # The maps' outputs were still in the browsers: only the reduces ran again.
        assert sorted(k for w in back.workers.values() for k in kinds(w)) == ["reduce", "reduce"]
        text = log(api, run_id)
        assert "the appliance restarted: the run continues with 3 finished task(s) kept" in text
        assert "recovered after the restart: 2 worker(s) back" in text
        # The reduce attempts cut short by the crash are in the task history, then the ones that finished.
        assert history(appliance, run_id, 1) == [
            (0, 0, "cancelled", "its page no longer had it"),
            (0, 1, "done", ""),
            (1, 0, "cancelled", "its page no longer had it"),
            (1, 1, "done", ""),
        ]
        assert [(r, a, s) for r, a, s, _ in history(appliance, run_id, 0)] == [(0, 0, "done"), (1, 0, "done")]
        assert appliance.query(f"SELECT count(*) FROM jobs_run_checkpoint WHERE run = {run_id}") == [(0,)]
    finally:
        await back.close()


async def test_outputs_of_a_worker_that_does_not_come_back_are_computed_again(appliance):
    fleet, api, run_id = await run_into_the_reduce(appliance, ["stay-0001", "gone-0001"])
    gone_rank = next(t["rank"] for t in fleet.workers["gone-0001"].tasks if t["kind"] == "map")
    # stay-0001 comes back with its own map's output only: the copies of gone-0001's it was sent
    # (its reduce's piece, and the other as the keeper of a second copy) went with its store, so
    # what gone-0001 made is nowhere.
    own = next(t["taskId"] for t in fleet.workers["stay-0001"].tasks if t["kind"] == "map")
    stays = [hashlib.sha256(f"{own}/{part}".encode()).hexdigest() for part in range(2)]
    appliance.kill()
    await fleet.close()
    appliance.start()
    back, api = await come_back(appliance, {"stay-0001": stays, "spare-0001": []})
    spare = back.workers["spare-0001"]
    try:
        done = await api.wait(run_id, timeout=40)
        assert done["state"] == "succeeded", done
        text = log(api, run_id)
        assert "recovered after the restart: 1 worker(s) back; not back: gone-0001" in text
        assert f"stage 1 (map) on rank {gone_rank} of group A" in text.split("was lost and is computed again")[0]
        assert f"worker spare-0001 took over rank {gone_rank} of group A" in text
        assert "map" in kinds(spare)  # the lost map ran again on the spare
        assert "map" not in kinds(back.workers["stay-0001"])  # the kept one did not
    finally:
        await back.close()


async def test_a_run_whose_workers_never_come_back_fails_saying_what_was_lost(appliance):
    fleet, api, run_id = await run_into_the_reduce(appliance, ["lost-0001", "lost-0002"])
    appliance.kill()
    await fleet.close()
    appliance.start()
    _, api = signed_in(appliance)
    done = await api.wait(run_id, timeout=40)
    assert done["state"] == "failed"
    assert "did not come back after the appliance restarted and no eligible worker became free" in done["reason"], done
    assert "lost with the workers that did not come back: " in done["reason"], done["reason"]
    assert "stage 1 (map) on ranks 0, 1 of group A" in done["reason"]
    assert appliance.query(f"SELECT cause FROM jobs_run WHERE id = {run_id}") == [("appliance-restart",)]


async def test_sigterm_lets_running_tasks_finish_exits_0_and_the_run_continues_at_the_next_start(appliance):
    cookie, api = signed_in(appliance)
    fleet = Fleet(appliance, map_seconds=3)
    try:
        for name in ("term-0001", "term-0002"):
            await fleet.connect(cookie, name)
        run_id = api.run(api.job(job_script(workers=2)))["id"]
        await until(lambda: sum(k == "map" for w in fleet.workers.values() for k in kinds(w)) == 2)
        # A client waiting on the run (a long poll of up to 60 s) does not hold up the stop: it is
        # answered, with the run still running, as the appliance drains.
        waiting = asyncio.create_task(
            asyncio.to_thread(api.http.get, f"/runs/{run_id}", params={"wait": 60}, timeout=90)
        )
        await asyncio.sleep(0.5)
        stopping = time.monotonic()
        await asyncio.to_thread(appliance.stop)  # SIGTERM while both maps run; the workers go on meanwhile
        assert appliance.proc.returncode == 0
        assert time.monotonic() - stopping < 15  # the shutdown grace
        answer = await waiting
        assert answer.status_code == 200 and answer.json()["state"] == "running", answer.text
        # The maps finished during the stop; no reduce was started.
        assert all(len(w.blobs) == 2 for w in fleet.workers.values())
        assert not any("reduce" in kinds(w) for w in fleet.workers.values())
        held = {name: list(w.blobs) for name, w in fleet.workers.items()}
    finally:
        await fleet.close()
    appliance.start()
    back, api = await come_back(appliance, held)
    try:
        done = await api.wait(run_id, timeout=30)
        assert done["state"] == "succeeded", done
        assert sorted(k for w in back.workers.values() for k in kinds(w)) == ["reduce", "reduce"], log(api, run_id)
        assert "the appliance is stopping: the run continues when it starts again" in log(api, run_id)
    finally:
        await back.close()


async def test_queued_runs_stay_queued_in_order_across_a_restart(appliance):
    cookie, api = signed_in(appliance)
    first = api.run(api.job(job_script(workers=5)))
    second = api.run(api.job(job_script(workers=3)))
    appliance.kill()
    appliance.start()
    cookie, api = signed_in(appliance)
    assert [api.get(r["id"])["queue_position"] for r in (first, second)] == [1, 2]
    fleet = Fleet(appliance)
    fleet.reduces.set()
    try:
        for n in range(5):
            await fleet.connect(cookie, f"queue-{n:04d}")
        for run in (first, second):
            ended = await api.wait(run["id"], timeout=30)
            assert ended["state"] == "succeeded", (ended["reason"], log(api, run["id"]))
    finally:
        await fleet.close()


async def test_parameter_server_values_survive_a_kill_and_the_stage_resumes_with_them(appliance):
    cookie, api = signed_in(appliance)
    maps: dict[str, tuple[SimWorker, dict]] = {}
    release = asyncio.Event()

    async def hold_maps(worker: SimWorker, task: dict) -> None:
        if task["kind"] == "map":
            maps[worker.worker_id] = (worker, task)
            await release.wait()
        await finish_empty(worker, task)

    async def ask(name: str, message: dict, payload: bytes | None = None) -> dict:
        worker, task = maps[name]
        return await worker.request({**message, "taskId": task["taskId"]}, payload)

    names = ["params-0001", "params-0002"]
    workers = [await SimWorker(appliance.url, cookie, worker_id=n, on_task=hold_maps).start() for n in names]
    run_id = api.run(api.job(job_script(workers=2)))["id"]
    try:
        await until(lambda: len(maps) == 2)
        await ask("params-0001", {"type": "ps-write", "key": "w", "dtype": "float64"}, struct.pack("<3d", 1, 2, 3))
        await ask("params-0002", {"type": "ps-update", "key": "w", "dtype": "float64"}, struct.pack("<3d", 1, 1, 1))
        await asyncio.sleep(1.5)  # written within a second
        appliance.kill()
    finally:
        for worker in workers:
            await worker.close()
    maps.clear()
    appliance.start()
    cookie, api = signed_in(appliance)
    workers = [await SimWorker(appliance.url, cookie, worker_id=n, on_task=hold_maps).start() for n in names]
    try:
        await until(lambda: len(maps) == 2)  # the maps run again, on the same ranks
        read = await ask("params-0002", {"type": "ps-read", "key": "w"})
        assert (struct.unpack("<3d", read["payload"]), read["version"]) == ((2.0, 3.0, 4.0), 2)
        release.set()
        assert (await api.wait(run_id, timeout=30))["state"] == "succeeded"
    finally:
        for worker in workers:
            await worker.close()


# The last release that landed (the shuffle's): its data dir has none of the tables this one adds
# (single sign-on, the audit log, the fleet's samples).
LAST_RELEASE = "094a633"


async def test_a_data_dir_of_the_last_release_is_upgraded_with_a_run_in_flight(tmp_path):
    old_code = tmp_path / "old"
    old_code.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", LAST_RELEASE, "appliance", "templates", "static"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(old_code)], input=archive, check=True)
    # PYTHONSAFEPATH: `python -m` would otherwise put the working directory, this checkout, first.
    env = {"PYTHONPATH": str(old_code), "PYTHONSAFEPATH": "1"}
    found = subprocess.run(
        [sys.executable, "-c", "import appliance; print(appliance.__file__)"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert found.startswith(str(old_code)), f"the old version is not the one imported: {found}"
    old = Appliance(tmp_path / "data", env=env).start()
    try:
        cookie, api = signed_in(old)
        fleet = Fleet(old, map_seconds=3600)  # the maps are under way when the old version stops
        for name in ("old-0001", "old-0002"):
            await fleet.connect(cookie, name)
        run_id = api.run(api.job(job_script(workers=2)))["id"]
        await until(lambda: sum(k == "map" for w in fleet.workers.values() for k in kinds(w)) == 2)
        # The data dir must say so too: the old version may send the maps before it records the state.
        await until(lambda: api.get(run_id)["state"] == "running")
        queued_id = api.run(api.job(job_script(workers=3)))["id"]
        old.kill()
        await fleet.close()
    finally:
        old.stop()
    new = Appliance(tmp_path / "data").start()  # this version, on the same data dir: migrations first
    try:
        back, api = await come_back(new, {"old-0001": [], "old-0002": [], "new-0001": []})
        try:
            for run in (run_id, queued_id):
                assert (await api.wait(run, timeout=30))["state"] == "succeeded"
            # The input task may be over, and in the old version's checkpoint, when it stops.
            assert re.search(r"the appliance restarted: the run continues with [01] finished task", log(api, run_id))
        finally:
            await back.close()
    finally:
        new.stop()


# ---------------------------------------------------------------- tasks that outlive a disconnection


async def test_a_page_that_kept_its_reduces_through_a_kill_reports_them_and_nothing_runs_twice(appliance):
    fleet, api, run_id = await run_into_the_reduce(appliance, ["page-0001", "page-0002"])
    reduces = {name: next(t["taskId"] for t in w.tasks if t["kind"] == "reduce") for name, w in fleet.workers.items()}
    held = {name: list(w.blobs) for name, w in fleet.workers.items()}
    appliance.kill()
    await fleet.close()
    appliance.start()
    cookie, api = signed_in(appliance)
    pages = []
    try:
        for name, task_id in reduces.items():
            # The page ran on while the appliance was away: its hello names the task, then it reports it.
            page = SimWorker(appliance.url, cookie, worker_id=name, blobs=held[name])
            page.held = [task_id]
            pages.append(await page.start())
            await page.send({"type": "task-done", "taskId": task_id, "outputs": [], "emits": 1})
        done = await api.wait(run_id, timeout=30)
        assert done["state"] == "succeeded", done
        assert all(page.tasks == [] for page in pages)  # nothing was assigned again
        assert [(r, a, s) for r, a, s, _ in history(appliance, run_id, 1)] == [(0, 0, "done"), (1, 0, "done")]
        assert "is back: stage 2 (reduce) on rank 0 of group A goes on there" in log(api, run_id)
    finally:
        for page in pages:
            await page.close()


async def test_a_worker_that_reconnects_within_the_grace_keeps_its_task_and_one_that_does_not_loses_its_rank(
    appliance,
):
    cookie, api = signed_in(appliance)
    fleet = Fleet(appliance)
    for name in ("blip-0001", "blip-0002"):
        await fleet.connect(cookie, name)
    try:
        run_id = api.run(api.job(job_script(workers=2)))["id"]
        await until(lambda: sum(k == "reduce" for w in fleet.workers.values() for k in kinds(w)) == 2)
        ranked = list(fleet.workers)
        # One page's connection drops and comes back at once, still running its reduce: with no idle
        # worker to stand in, its rank waits for it.
        blip = fleet.workers[ranked[0]]
        task_id = next(t["taskId"] for t in blip.tasks if t["kind"] == "reduce")
        await blip.close()
        again = SimWorker(appliance.url, cookie, worker_id=blip.worker_id, blobs=blip.blobs)
        again.held = [task_id]
        await again.start()
        await until(lambda: "its rank waits up to 2 s for it" in log(api, run_id))
        # The other's stays away for good, with a spare connected by then: its reduce starts again on
        # the spare at once, which takes the rank.
        spare = await fleet.connect(cookie, "blip-0003")
        await fleet.workers[ranked[1]].close()
        await until(lambda: "reduce" in kinds(spare))
        await asyncio.sleep(GRACE + 1)
        await again.send({"type": "task-done", "taskId": task_id, "outputs": [], "emits": 1})
        fleet.reduces.set()
        done = await api.wait(run_id, timeout=30)
        assert done["state"] == "succeeded", done
        assert again.tasks == []  # its reduce was not sent again
        text = log(api, run_id)
        assert f"a backup attempt starts on worker {spare.worker_id} at once" in text
        # Its own map's partition for its reduce lived only in its page: the stand-in cannot copy it,
        # so the rank moves at once (rather than after the grace) and that map runs again.
        gone = ("disconnected holding its stand-in's input", "disconnected and did not come back")
        assert f"worker {ranked[1]} (rank" in text and any(why in text for why in gone), text
        await again.close()
    finally:
        await fleet.close()
