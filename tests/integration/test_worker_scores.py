"""Worker scores on a running appliance, with simulated workers (tests/sim_workers.py).

Each run's end scores the workers that held its ranks (appliance/fleet/reliability.py); the score is
kept per worker id, loaded when that worker connects again, shown on the Workers page, and the
scheduler picks the highest-scored idle workers first.
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from tests.integration.test_job_scheduling import job_script
from tests.sim_workers import SimWorker, cookie_of, start_workers

WORKER_EMAIL = "wendy@example.com"
WORKER_PASSWORD = "wendy-password-1"


@pytest.fixture(scope="module")
def wendy(appliance):
    """A worker account whose browsers work for carol's runs."""
    appliance.add_user(WORKER_EMAIL, "worker", WORKER_PASSWORD)
    client = appliance.client()
    client.login(WORKER_EMAIL, WORKER_PASSWORD)
    return client


def scores(appliance) -> dict[str, tuple]:
    """worker id -> (score as stored, runs, tasks done, disconnects, timeouts)."""
    rows = appliance.query("SELECT worker_id, score, runs, tasks_done, disconnects, timeouts FROM fleet_worker_score")
    return {r[0]: tuple(r[1:]) for r in rows}


def run_points(appliance, run_id: int) -> dict[str, tuple]:
    rows = appliance.query(
        f"SELECT worker_id, points, tasks_done, disconnects, timeouts, excused FROM fleet_worker_score_run "
        f"WHERE run = {run_id}"
    )
    return {r[0]: tuple(r[1:]) for r in rows}


async def scored(appliance, run_id: int, timeout: float = 10) -> dict[str, tuple]:
    """The run's points once written (just after the run shows as ended)."""
    deadline = time.monotonic() + timeout
    while not (points := run_points(appliance, run_id)):
        assert time.monotonic() < deadline, f"run {run_id} was not scored"
        await asyncio.sleep(0.1)
    return points


def shown_scores(client) -> dict[str, float]:
    """Worker id -> the Score column of the Workers page."""
    page = client.get("/ui/workers/live").text
    return {
        m.group(1): float(m.group(2))
        for m in re.finditer(r'<tr data-worker="([^"]+)">.*?<td class="score">(-?[\d.]+)</td>', page, re.S)
    }


async def wait_shown(client, expected: dict[str, float], timeout: float = 10) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        shown = await asyncio.to_thread(shown_scores, client)
        if all(w in shown and shown[w] == pytest.approx(v, abs=0.05) for w, v in expected.items()):
            return shown
        if time.monotonic() > deadline:
            raise AssertionError(f"Workers page shows {shown}, expected {expected}")
        await asyncio.sleep(0.2)


async def test_scores_rise_for_completed_tasks_and_fall_for_a_disconnect_mid_task(appliance, carol, wendy):
    cookie = cookie_of(wendy)
    vanished = asyncio.Event()

    async def vanish_on_map(worker: SimWorker, task: dict) -> None:
        if task["kind"] == "map":
            vanished.set()
            await worker.close()  # mid-task: no task-done, the socket just goes
            return
        await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": [], "cpuMs": 5})

    async def complete(worker: SimWorker, task: dict) -> None:
        await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": [], "cpuMs": 5})

    flaky = await SimWorker(appliance.url, cookie, worker_id="flaky-0001", on_task=vanish_on_map).start()
    steady = await SimWorker(appliance.url, cookie, worker_id="steady-0001", on_task=complete).start()
    # Connected last, it gets no rank: it stands in for the flaky worker's map, and keeps its rank.
    spare = await SimWorker(appliance.url, cookie, worker_id="spare-0001", on_task=complete).start()
    try:
        run = carol.run(carol.job(job_script(workers=2)))
        await asyncio.wait_for(vanished.wait(), 30)
        done = await carol.wait(run["id"])
        assert done["state"] == "succeeded", done
        points = await scored(appliance, run["id"])
        # Every task of the steady worker counts; the flaky one loses FAULT_PENALTY (5) for its map task.
        steady_done = len(steady.tasks)
        assert points["steady-0001"] == (steady_done, steady_done, 0, 0, False)
        flaky_done = len(flaky.tasks) - 1  # its map task was never done
        assert points["flaky-0001"] == (flaky_done - 5, flaky_done, 1, 0, False)
        assert points["spare-0001"][0] > 0
        stored = scores(appliance)
        assert stored["steady-0001"][0] > 0 > stored["flaky-0001"][0]
        assert stored["flaky-0001"][1:] == (1, flaky_done, 1, 0)
        # The Workers page shows the connected workers' scores, updated in memory when the run ended.
        await wait_shown(wendy, {"steady-0001": stored["steady-0001"][0], "spare-0001": stored["spare-0001"][0]})

        # A second good run raises the steady worker further (the first decays only by seconds).
        before = scores(appliance)["steady-0001"][0]
        run = carol.run(carol.job(job_script(workers=2)))
        assert (await carol.wait(run["id"]))["state"] == "succeeded"
        await scored(appliance, run["id"])
        assert scores(appliance)["steady-0001"][0] > before
    finally:
        for w in (flaky, steady, spare):
            if w is not None:
                await w.close()


async def test_selection_prefers_the_higher_score(appliance, carol, wendy):
    """Two idle workers: a one-worker run goes to the higher-scored one, though it connected last."""
    stored = scores(appliance)
    assert stored["steady-0001"][0] > 0 > stored["flaky-0001"][0], "needs the previous test's scores"
    cookie = cookie_of(wendy)
    newcomer = await SimWorker(appliance.url, cookie, worker_id="newcomer-0001").start()
    flaky = await SimWorker(appliance.url, cookie, worker_id="flaky-0001").start()
    try:
        # The flaky worker's score came back with it; a new worker starts at 0.
        await wait_shown(wendy, {"flaky-0001": stored["flaky-0001"][0], "newcomer-0001": 0.0})
        run = carol.run(carol.job(job_script(workers=1)))
        assert (await carol.wait(run["id"]))["state"] == "succeeded"
        assert newcomer.tasks and not flaky.tasks, "0 beats a negative score"

        steady = await SimWorker(appliance.url, cookie, worker_id="steady-0001").start()
        try:
            await wait_shown(wendy, {"steady-0001": scores(appliance)["steady-0001"][0]})
            assert shown_scores(wendy)["steady-0001"] > shown_scores(wendy)["newcomer-0001"]
            run = carol.run(carol.job(job_script(workers=1)))
            assert (await carol.wait(run["id"]))["state"] == "succeeded"
            assert steady.tasks, "the highest score was chosen, though connected last"
            assert not [t for t in newcomer.tasks + flaky.tasks if t["runId"] == run["id"]]
        finally:
            await steady.close()
    finally:
        await newcomer.close()
        await flaky.close()


async def test_a_worker_timeout_lowers_the_score_when_another_worker_completed_the_task(appliance, carol, wendy):
    cookie = cookie_of(wendy)
    stalled = asyncio.Event()

    async def stall_on_map(worker: SimWorker, task: dict) -> None:
        if task["kind"] == "map" and not stalled.is_set():
            stalled.set()
            await worker.send({"type": "task-worker-timeout", "taskId": task["taskId"], "seconds": 1})
            return  # no emit, no progress: taken off after its worker timeout
        await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": []})

    hanging = await SimWorker(appliance.url, cookie, worker_id="hanging-0001", on_task=stall_on_map).start()
    others = await start_workers(appliance.url, cookie, 2)
    try:
        run = carol.run(carol.job(job_script(workers=2)))
        assert (await carol.wait(run["id"]))["state"] == "succeeded"
        points = await scored(appliance, run["id"])
        hanging_done = len(hanging.tasks) - 1
        assert points["hanging-0001"] == (hanging_done - 5, hanging_done, 0, 1, False)
        assert scores(appliance)["hanging-0001"][0] < 0
    finally:
        for w in [hanging, *others]:
            await w.close()


async def test_runs_ended_by_the_job_lower_no_one(appliance, carol, wendy):
    """A run failed by its job code, a stage timeout and a cancelled run: disconnects cost nothing."""
    cookie = cookie_of(wendy)
    left = asyncio.Event()

    async def leave_then_throw(worker: SimWorker, task: dict) -> None:
        if task["kind"] == "map" and not left.is_set():
            left.set()
            await worker.close()  # mid-task
            return
        if task["kind"] == "reduce":
            await worker.send({"type": "task-failed", "taskId": task["taskId"], "error": "TypeError: boom"})
            return
        await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": []})

    leaver = await SimWorker(appliance.url, cookie, worker_id="leaver-0001", on_task=leave_then_throw).start()
    workers = [await SimWorker(appliance.url, cookie, on_task=leave_then_throw).start() for _ in range(2)]
    try:
        run = carol.run(carol.job(job_script(workers=2)))
        failed = await carol.wait(run["id"])
        assert failed["state"] == "failed" and "failed: TypeError: boom" in failed["reason"]
        points = await scored(appliance, run["id"])
        assert points, "the run was scored"
        assert all(p[0] >= 0 and p[4] for p in points.values()), points
        assert sum(p[2] for p in points.values()) == 1, "the disconnect is recorded, not charged"
    finally:
        for w in [leaver, *workers]:
            await w.close()

    async def never_reduce(worker: SimWorker, task: dict) -> None:
        if task["kind"] != "reduce":
            await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": []})

    workers = [await SimWorker(appliance.url, cookie, on_task=never_reduce).start() for _ in range(2)]
    script = job_script(workers=2).replace(
        "execution.addStage(new ReduceStage(async function reduce(kv) { await context.onComplete(); }));",
        "const r = new ReduceStage(async function reduce(kv) { await context.onComplete(); });\n"
        "r.timeout = 2;\nexecution.addStage(r);",
    )
    try:
        run = carol.run(carol.job(script))
        failed = await carol.wait(run["id"], timeout=30)
        assert "exceeded its timeout" in failed["reason"]
        points = await scored(appliance, run["id"])
        assert len(points) == 2 and all(p[0] >= 0 and p[4] for p in points.values()), points
    finally:
        for w in workers:
            await w.close()

    async def hold(worker: SimWorker, task: dict) -> None:
        if task["kind"] == "input":
            await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": []})

    workers = [await SimWorker(appliance.url, cookie, on_task=hold).start() for _ in range(2)]
    try:
        run = carol.run(carol.job(job_script(workers=2)))
        await carol.wait(run["id"], states=("running",))
        await asyncio.sleep(0.5)
        await workers[0].close()  # mid-task, then the coordinator cancels the run
        await asyncio.sleep(0.3)
        assert carol.http.post(f"/runs/{run['id']}/cancel").json()["state"] == "cancelled"
        points = await scored(appliance, run["id"])
        assert len(points) >= 2 and all(p[0] >= 0 and p[4] for p in points.values()), points
    finally:
        for w in workers:
            await w.close()
