"""The queue, worker selection, failure handling and restarts, with simulated workers.

Simulated workers speak the worker protocol from Python (tests/sim_workers.py); their tasks
finish at once with no output unless a test gives them another handler.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.sim_workers import CAPABILITIES, SimWorker, cookie_of, finish_empty, start_workers
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance

NOOP_JOB = """
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = %(workers)d;
execution.groupCount = %(groups)d;
execution.setInputFn(async function input() { return []; });
const map = new MapStage(async function map(x) { await context.onComplete(); });
map.chunks = '%(chunks)s';
execution.addStage(map);
execution.addStage(new ReduceStage(async function reduce(kv) { await context.onComplete(); }));
execution.start(jobRunner);
"""


def job_script(workers: int = 2, groups: int = 1, chunks: str = "rank", **extra) -> str:
    """A job that does nothing, with ``extra`` execution fields. One map task per rank unless ``chunks``
    is "auto": the simulated pages write the input's pieces a rank each."""
    lines = "".join(f"execution.{k} = {v};\n" for k, v in extra.items())
    script = NOOP_JOB % {"workers": workers, "groups": groups, "chunks": chunks}
    return script.replace("execution.start", lines + "execution.start")


class Api:
    def __init__(self, appliance: Appliance, token: str):
        self.http = httpx.Client(base_url=appliance.url + "/api/v1", headers={"Authorization": f"Bearer {token}"})

    def job(self, script: str, name: str = "job") -> int:
        response = self.http.post("/jobs", json={"name": name, "script": script})
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def run(self, job_id: int, **overrides) -> dict:
        response = self.http.post(f"/jobs/{job_id}/runs", json=overrides)
        assert response.status_code == 201, response.text
        return response.json()

    def get(self, run_id: int) -> dict:
        return self.http.get(f"/runs/{run_id}").json()

    async def wait(self, run_id: int, states=("succeeded", "failed", "cancelled"), timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = await asyncio.to_thread(self.get, run_id)
            if run["state"] in states:
                return run
            await asyncio.sleep(0.1)
        raise AssertionError(f"run {run_id} still {run['state']}: {run}")


def token_for(appliance: Appliance, email: str) -> str:
    result = appliance.cli("token", "create", email)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().split()[-1]


@pytest.fixture(scope="module")
def people(appliance):
    appliance.add_user("carol@example.com", "coordinator", "carol-password-1")
    appliance.add_user("dave@example.com", "coordinator", "dave-password-1")
    clients = {}
    for name, password in (("carol", "carol-password-1"), ("dave", "dave-password-1")):
        client = appliance.client()
        client.login(f"{name}@example.com", password)
        clients[name] = client
    return clients


@pytest.fixture(scope="module")
def carol(appliance, people):
    return Api(appliance, token_for(appliance, "carol@example.com"))


async def test_a_run_waits_for_enough_workers_and_says_why(appliance, people, carol):
    job = carol.job(job_script(workers=3))
    run = carol.run(job)
    assert run["state"] == "queued"
    await asyncio.sleep(1.5)
    queued = carol.get(run["id"])
    assert queued["state"] == "queued"
    assert queued["queue_position"] == 1
    assert "asks 3, 0 connected, 0 eligible: waits for more workers to connect" in queued["reason"]
    workers = await start_workers(appliance.url, cookie_of(people["carol"]), 3)
    try:
        done = await carol.wait(run["id"])
        assert done["state"] == "succeeded", done
        # Input, a map and a reduce task per rank: every task ran exactly once.
        assert sum(len(w.tasks) for w in workers) == 1 + 3 + 3
        assert {t["rank"] for w in workers for t in w.tasks if t["kind"] == "map"} == {0, 1, 2}
        assert [p["done"] for p in done["progress"]] == [p["total"] for p in done["progress"]]
    finally:
        for w in workers:
            await w.close()


async def test_gpu_run_waits_with_the_reason_until_cancelled(appliance, people, carol):
    job = carol.job(job_script(workers=1, gpu="true"))
    run = carol.run(job)
    workers = await start_workers(appliance.url, cookie_of(people["carol"]), 2)
    try:
        await asyncio.sleep(1.5)
        waiting = carol.get(run["id"])
        assert waiting["state"] == "queued"
        assert "asks 1, 2 connected, 0 eligible with WebGPU" in waiting["reason"]
        # A CPU run queued behind it is not held up: the GPU run cannot use these workers.
        behind = carol.run(carol.job(job_script(workers=2)))
        assert (await carol.wait(behind["id"]))["state"] == "succeeded"
        cancelled = carol.http.post(f"/runs/{run['id']}/cancel").json()
        assert cancelled["state"] == "cancelled"
        assert all(t["runId"] != run["id"] for w in workers for t in w.tasks)
    finally:
        for w in workers:
            await w.close()


async def test_gpu_requirements_select_matching_workers(appliance, people, carol):
    webgpu = {
        **CAPABILITIES,
        "gpu": {"info": {"vendor": "acme"}, "features": ["shader-f16"], "limits": {"maxBufferSize": 1 << 30}},
    }
    weak = {**CAPABILITIES, "gpu": {"info": {"vendor": "acme"}, "features": [], "limits": {"maxBufferSize": 1 << 20}}}
    cookie = cookie_of(people["carol"])
    strong_worker = await SimWorker(appliance.url, cookie, capabilities=webgpu).start()
    weak_worker = await SimWorker(appliance.url, cookie, capabilities=weak).start()
    try:
        script = job_script(
            workers=1,
            gpu="true",
            gpuRequirements="{info: {vendor: 'acme'}, features: ['shader-f16'], limits: {maxBufferSize: 1 << 29}}",
        )
        run = carol.run(carol.job(script))
        assert (await carol.wait(run["id"]))["state"] == "succeeded"
        assert strong_worker.tasks and not weak_worker.tasks
    finally:
        await strong_worker.close()
        await weak_worker.close()


async def test_private_run_stays_on_its_accounts_workers(appliance, people, carol):
    mine = await start_workers(appliance.url, cookie_of(people["carol"]), 2)
    theirs = await start_workers(appliance.url, cookie_of(people["dave"]), 2)
    try:
        run = carol.run(carol.job(job_script(workers=2)), privateMode=True)
        assert (await carol.wait(run["id"]))["state"] == "succeeded"
        assert sum(len(w.tasks) for w in mine) == 1 + 2 + 2
        # Nothing of the private run reached the other account's browsers: no task, no blob.
        for w in theirs:
            assert not w.tasks
            assert not [m for m in w.messages if m["type"].startswith(("blob-", "task-"))]
        # Without enough own workers a private run waits, even with the other account's idle.
        waiting = carol.run(carol.job(job_script(workers=3)), privateMode=True)
        await asyncio.sleep(1.5)
        reason = carol.get(waiting["id"])["reason"]
        assert "asks 3, 4 connected, 2 eligible of the run's own account (private mode)" in reason
        carol.http.post(f"/runs/{waiting['id']}/cancel")
    finally:
        for w in mine + theirs:
            await w.close()


async def test_a_worker_that_vanishes_mid_task_is_replaced(appliance, people, carol):
    cookie = cookie_of(people["carol"])
    vanished = asyncio.Event()

    async def vanish_on_map(worker: SimWorker, task: dict) -> None:
        # Its rank's own map (attempt 0), not a backup of another rank's it may be given on a slow machine.
        if task["kind"] == "map" and task["taskId"].endswith(".0") and not vanished.is_set():
            vanished.set()
            await worker.close()  # mid-task: no done, the socket just goes
            return
        await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": [], "emits": 0})

    await SimWorker(appliance.url, cookie, on_task=vanish_on_map).start()
    steady = await start_workers(appliance.url, cookie, 1)
    try:
        run = carol.run(carol.job(job_script(workers=2)))
        await asyncio.wait_for(vanished.wait(), 30)
        spare = await start_workers(appliance.url, cookie, 1)
        steady += spare
        done = await carol.wait(run["id"])
        assert done["state"] == "succeeded", done
        logs = carol.http.get(f"/runs/{run['id']}/logs").text
        # Its map ran again on another worker, which then held the lost rank.
        assert "disconnected" in logs, logs
        assert "moves to worker" in logs or "took over rank" in logs, logs
        # The run page's Browsers panel says the run lost one, and why.
        page = people["carol"].get(f"/ui/runs/{run['id']}").text
        panel = page.split('id="fleet-changes"')[1].split("</section>")[0]
        shrank = [row for row in panel.split("<tr")[1:] if 'class="fleet-shrank"' in row]
        assert shrank and "disconnected" in shrank[0], panel
        if "took over rank" in logs:
            assert 'class="fleet-grew"' in panel and "took over rank" in panel, panel
    finally:
        for w in steady:
            await w.close()


@pytest.mark.parametrize("fault", ["frozen", "browser-process-hung"])
async def test_a_worker_gone_quiet_mid_task_leaves_in_seconds_and_a_spare_stands_in(appliance, people, carol, fault):
    """A frozen browser answers no ping; a hung browser process leaves its page answering, but its
    store does not (the pong says how long). Either way the worker leaves the fleet within seconds,
    its socket closed as silent (4002), and its task starts at once on the spare."""
    cookie = cookie_of(people["carol"])
    quiet = asyncio.Event()

    async def quiet_on_map(worker: SimWorker, task: dict) -> None:
        if task["kind"] == "map" and not quiet.is_set():
            quiet.set()
            worker.store_wait_ms = None if fault == "frozen" else 60_000
            return  # the task never ends there
        await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": [], "emits": 0})

    stuck = await SimWorker(appliance.url, cookie, on_task=quiet_on_map).start()
    others = await start_workers(appliance.url, cookie, 2)
    try:
        run = carol.run(carol.job(job_script(workers=2)))
        await asyncio.wait_for(quiet.wait(), 30)
        done = await carol.wait(run["id"])
        assert done["state"] == "succeeded", done
        logs = carol.http.get(f"/runs/{run['id']}/logs").text
        assert f"worker {stuck.worker_id} disconnected while running stage 1 (map)" in logs, logs
        assert "a backup attempt starts on worker" in logs and "at once" in logs, logs
        await asyncio.wait_for(stuck.reader, 10)
        assert stuck.ws.close_code == 4002, stuck.ws.close_code
    finally:
        for w in [stuck, *others]:
            await w.close()


@pytest.fixture
def short_grace(tmp_path):
    """An appliance of its own whose vacant ranks wait 2 s for a replacement, its admin's API and cookie."""
    appliance = Appliance(tmp_path / "data", env={"PEERMR_JOB_REPLACEMENT_GRACE_SECONDS": "2"}).start()
    try:
        client = appliance.client()
        client.login(ADMIN_EMAIL, ADMIN_PASSWORD)
        yield appliance, Api(appliance, token_for(appliance, ADMIN_EMAIL)), cookie_of(client)
    finally:
        appliance.stop()


async def test_no_replacement_within_the_grace_period_fails_the_run(short_grace):
    appliance, api, cookie = short_grace

    async def hang(worker: SimWorker, task: dict) -> None:
        if task["kind"] == "map":
            await worker.close()
        else:
            await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": []})

    workers = [await SimWorker(appliance.url, cookie, on_task=hang).start() for _ in range(2)]
    run = api.run(api.job(job_script(workers=2)))
    failed = await api.wait(run["id"], timeout=30)
    assert failed["state"] == "failed"
    assert "lost its worker and no eligible worker became free within 2 s" in failed["reason"]
    for w in workers:
        await w.close()


@pytest.mark.parametrize(("workers", "leaving"), [(3, 1), (4, 2)])
async def test_a_run_outlives_browsers_gone_for_good_with_no_spare(appliance, people, carol, workers, leaving):
    """Browsers closed for good mid-map, none spare: their ranks go to the run's remaining browsers,
    which run their tasks one after the other, and the run finishes."""
    cookie = cookie_of(people["carol"])

    async def leave_on_map(worker: SimWorker, task: dict) -> None:
        if task["kind"] == "map":
            await worker.close()  # mid-task, for good
            return
        await finish_empty(worker, task)

    staying = await start_workers(appliance.url, cookie, workers - leaving)
    leavers = [await SimWorker(appliance.url, cookie, on_task=leave_on_map).start() for _ in range(leaving)]
    try:
        run = carol.run(carol.job(job_script(workers=workers)))
        done = await carol.wait(run["id"], timeout=60)
        assert done["state"] == "succeeded", done
        logs = carol.http.get(f"/runs/{run['id']}/logs").text
        for leaver in leavers:
            assert f"worker {leaver.worker_id} disconnected while running stage 1 (map)" in logs, logs
        # Each lost rank went to a browser that already held one: as the stand-in that finished its
        # map, or once the rank fell vacant.
        assert logs.count("as well: no other eligible worker is free") + logs.count("which stood in for") >= leaving
        assert sum(1 for w in staying for t in w.tasks if t["kind"] == "reduce") == workers
    finally:
        for w in [*staying, *leavers]:
            await w.close()


async def test_a_stage_that_talks_to_other_ranks_still_needs_a_replacement(short_grace):
    appliance, api, cookie = short_grace

    async def leave_on_rank_1(worker: SimWorker, task: dict) -> None:
        if task["kind"] == "map" and task["rank"] == 1:
            await worker.close()
        elif task["kind"] != "map":
            await finish_empty(worker, task)
        # rank 0's map waits for rank 1's message, which never comes

    workers = [await SimWorker(appliance.url, cookie, on_task=leave_on_rank_1).start() for _ in range(2)]
    script = job_script(workers=2).replace(
        "async function map(x) { await context.onComplete(); }",
        "async function map(x) { if (context.rank === 1) await context.sendToRank(0, 't', 1); "
        "await context.onComplete(); }",
    )
    run = api.run(api.job(script))
    failed = await api.wait(run["id"], timeout=30)
    assert failed["state"] == "failed"
    assert "lost its worker and no eligible worker became free within 2 s" in failed["reason"]
    assert "its stages talk to other ranks: each rank needs a worker of its own" in failed["reason"]
    for w in workers:
        await w.close()


async def test_a_job_error_fails_the_run_with_the_message(appliance, people, carol):
    async def throw(worker: SimWorker, task: dict) -> None:
        if task["kind"] == "reduce":
            await worker.send(
                {
                    "type": "task-failed",
                    "taskId": task["taskId"],
                    "error": "TypeError: x is not iterable",
                    "stack": "TypeError: x is not iterable\n    at reduce (job:12:5)",
                }
            )
        else:
            await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": []})

    workers = [await SimWorker(appliance.url, cookie_of(people["carol"]), on_task=throw).start() for _ in range(2)]
    try:
        run = carol.run(carol.job(job_script(workers=2)))
        failed = await carol.wait(run["id"])
        assert failed["state"] == "failed"
        assert "stage 2 (reduce) on rank" in failed["reason"]
        assert "TypeError: x is not iterable" in failed["reason"]
        assert "at reduce (job:12:5)" in carol.http.get(f"/runs/{run['id']}/logs").text
    finally:
        for w in workers:
            await w.close()


async def test_a_bad_task_report_takes_the_worker_off_the_run(appliance, people, carol):
    """A browser claiming output for a partition it cannot produce loses its rank; the run still finishes."""
    cookie = cookie_of(people["carol"])

    async def lie(worker: SimWorker, task: dict) -> None:
        outputs = [{"partition": 7, "sha256": "a" * 64, "size": 1, "records": 1}]
        await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": outputs})

    liar = await SimWorker(appliance.url, cookie, on_task=lie).start()
    honest = await start_workers(appliance.url, cookie, 2)
    try:
        run = carol.run(carol.job(job_script(workers=2)))
        done = await carol.wait(run["id"])
        assert done["state"] == "succeeded", done
        assert "reported a bad result" in carol.http.get(f"/runs/{run['id']}/logs").text
    finally:
        for w in [liar, *honest]:
            await w.close()


async def test_stage_timeout_fails_the_run_with_that_reason(appliance, people, carol):
    async def slow_reduce(worker: SimWorker, task: dict) -> None:
        if task["kind"] != "reduce":
            await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": []})
        # a reduce that never finishes (but keeps its socket): only the stage timeout ends it

    workers = [
        await SimWorker(appliance.url, cookie_of(people["carol"]), on_task=slow_reduce).start() for _ in range(2)
    ]
    script = job_script(workers=2)
    script = script.replace(
        "execution.addStage(new ReduceStage(async function reduce(kv) { await context.onComplete(); }));",
        "const r = new ReduceStage(async function reduce(kv) { await context.onComplete(); });\n"
        "r.timeout = 2;\nexecution.addStage(r);",
    )
    try:
        run = carol.run(carol.job(script))
        failed = await carol.wait(run["id"], timeout=30)
        assert failed["state"] == "failed"
        assert failed["reason"] == "stage 2 (reduce) of group A exceeded its timeout of 2 s"
        cancels = [m for w in workers for m in w.messages if m["type"] == "task-cancel"]
        assert len(cancels) == 2, "both running reduce tasks were told to stop"
    finally:
        for w in workers:
            await w.close()


async def test_groups_run_on_their_own_ranks(appliance, people, carol):
    workers = await start_workers(appliance.url, cookie_of(people["carol"]), 4)
    try:
        run = carol.run(carol.job(job_script(workers=2, groups=2)))
        done = await carol.wait(run["id"])
        assert done["state"] == "succeeded"
        assert {p["group"] for p in done["progress"]} == {"A", "B"}
        groups_per_worker = [{t["group"] for t in w.tasks} for w in workers]
        assert all(len(g) == 1 for g in groups_per_worker), "a worker holds one rank of one group"
    finally:
        for w in workers:
            await w.close()


async def test_a_worker_past_its_worker_timeout_is_taken_off_the_run(appliance, people, carol):
    cookie = cookie_of(people["carol"])
    stalled = asyncio.Event()

    async def stall_on_map(worker: SimWorker, task: dict) -> None:
        if task["kind"] == "map" and not stalled.is_set():
            stalled.set()
            # context.setWorkerTimeout(1), then no emit and no progress: the tab hangs.
            await worker.send({"type": "task-worker-timeout", "taskId": task["taskId"], "seconds": 1})
            return
        await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": []})

    hanging = await SimWorker(appliance.url, cookie, on_task=stall_on_map).start()
    others = await start_workers(appliance.url, cookie, 2)
    try:
        run = carol.run(carol.job(job_script(workers=2)))
        done = await carol.wait(run["id"])
        assert done["state"] == "succeeded", done
        assert "without an emit (its worker timeout)" in carol.http.get(f"/runs/{run['id']}/logs").text
        assert any(m["type"] == "task-cancel" for m in hanging.messages)
    finally:
        for w in [hanging, *others]:
            await w.close()
