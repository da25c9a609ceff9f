"""The dashboard as an operations console, with a real appliance and simulated workers: the Overview
per role, capacity before a run starts (run dialog, API and CLI), the Workers view and a run's stage page."""

from __future__ import annotations

import asyncio
import html
import re
import time

import pytest

from tests.integration.test_job_cli import job
from tests.integration.test_job_scheduling import Api, job_script, token_for
from tests.sim_workers import CAPABILITIES, SimWorker, cookie_of, finish_empty, start_workers
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD


@pytest.fixture(scope="module")
def appliance(appliance_with):
    # A sample of the fleet every second, so the plots fill within the test.
    return appliance_with(metrics_sample_seconds=1)


@pytest.fixture(scope="module")
def people(appliance):
    clients = {}
    for name, role in (("carol", "coordinator"), ("dave", "coordinator"), ("wendy", "worker")):
        appliance.add_user(f"{name}@example.com", role, f"{name}-password-1")
        client = appliance.client()
        client.login(f"{name}@example.com", f"{name}-password-1")
        clients[name] = client
    admin = appliance.client()
    admin.login(ADMIN_EMAIL, ADMIN_PASSWORD)
    clients["admin"] = admin
    return clients


@pytest.fixture(scope="module")
def carol(appliance, people):
    return Api(appliance, token_for(appliance, "carol@example.com"))


def text_of(page: str) -> str:
    """The page's visible text, in one line (tags dropped, entities decoded)."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))


def task_key(task: dict) -> tuple[int, int]:
    """(stage, rank) of a task-assign."""
    _, _, stage, rank, _ = task["taskId"].split(".")
    return int(stage), int(rank)


async def wait_until(check, timeout: float = 20):
    deadline = time.monotonic() + timeout
    while not (result := await asyncio.to_thread(check)):
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.2)
    return result


async def test_the_workers_view_shows_what_tabs_hold_labels_them_and_sorts_and_filters(appliance, people):
    wendy = await start_workers(appliance.url, cookie_of(people["wendy"]), 3)
    mine = await SimWorker(appliance.url, cookie_of(people["carol"])).start()
    try:
        # A tab says what its store holds (PMRFS replicas and run blobs alike): the view shows the same.
        await wendy[0].send({"type": "stored", "blobs": 25, "bytes": 262_349})
        await wait_until(lambda: "25 blobs, 256.2 KiB" in people["admin"].get("/ui/workers/live").text)
        view = people["admin"].get("/ui/workers").text
        row = re.search(rf'<tr data-worker="{wendy[0].worker_id}">.*?</tr>', view, re.S).group(0)
        assert "Chrome 156" in row and "wendy@example.com" in row and wendy[0].worker_id[:8] in row

        # A coordinator sees the browsers that would run its runs: its own, and others' without their
        # account or id (not "No worker is connected").
        carols = people["carol"].get("/ui/workers").text
        assert "No worker is connected" not in carols
        assert f'data-worker="{mine.worker_id}"' in carols and carols.count('class="other-account"') == 3
        assert "wendy@example.com" not in carols and wendy[0].worker_id not in carols
        assert "4 of 4 workers shown; 3 belong to other accounts" in text_of(carols)
        # A worker account sees its own browsers only.
        wendys = people["wendy"].get("/ui/workers/live").text
        assert all(f'data-worker="{w.worker_id}"' in wendys for w in wendy) and mine.worker_id not in wendys

        # Filter by state and text; a paused browser is the only one left.
        await wendy[1].send({"type": "pause", "id": 2})
        await wait_until(lambda: "state-paused" in people["admin"].get("/ui/workers/live").text)
        paused = people["admin"].get("/ui/workers/live?state=paused").text
        assert re.findall(r'<tr data-worker="([^"]+)">', paused) == [wendy[1].worker_id]
        found = people["admin"].get(f"/ui/workers/live?q={mine.worker_id[:8]}").text
        assert re.findall(r'<tr data-worker="([^"]+)">', found) == [mine.worker_id]
        # Sorted by what they store, most first; an unknown sort falls back to the label.
        by_stored = people["admin"].get("/ui/workers/live?sort=blobs&order=desc").text
        assert re.findall(r'<tr data-worker="([^"]+)">', by_stored)[0] == wendy[0].worker_id
        assert people["admin"].get("/ui/workers/live?sort=nonsense&state=bogus").status_code == 200
    finally:
        for w in [*wendy, mine]:
            await w.close()


async def test_capacity_is_shown_before_a_run_starts_as_the_scheduler_decides(appliance, people, carol):
    gpu_caps = {**CAPABILITIES, "gpu": {"info": {"vendor": "acme"}, "features": [], "limits": {}}}
    others = await start_workers(appliance.url, cookie_of(people["dave"]), 2)
    own = await SimWorker(appliance.url, cookie_of(people["carol"]), capabilities=gpu_caps).start()
    job_id = carol.job(job_script(workers=2), name="capacity")
    try:
        found = carol.http.post(f"/jobs/{job_id}/capacity", json={}).json()
        assert (found["connected"], found["eligible"], found["asks"]) == (3, 3, 2)
        assert found["summary"].endswith("The run asks 2: it can start now.")
        # Private mode: only carol's own browser may run it.
        private = carol.http.post(f"/jobs/{job_id}/capacity", json={"privateMode": True}).json()
        assert (private["eligible"], private["privateMode"]) == (1, True)
        assert "1 eligible for this run (of the run's own account (private mode))" in private["summary"]
        assert private["summary"].endswith("it waits until 1 more eligible worker(s) connect.")
        gpu = carol.http.post(f"/jobs/{job_id}/capacity", json={"gpu": True, "workerCount": 1}).json()
        assert (gpu["eligible"], gpu["asks"]) == (1, 1)
        # A bad setting is refused with the reason and nothing starts.
        bad = carol.http.post(f"/jobs/{job_id}/capacity", json={"workerCount": 0})
        assert bad.status_code == 400 and "workerCount" in bad.text
        assert all(r["job_id"] != job_id for r in carol.http.get("/runs").json())

        # The run dialog asks the same as its fields change (htmx sends the form's fields).
        line = (
            people["carol"].get(f"/ui/jobs/{job_id}/capacity?worker_count=2&group_count=1&private_mode=true&gpu=").text
        )
        assert "1 eligible for this run" in text_of(line) and "capacity-short" in line
        line = people["carol"].get(f"/ui/jobs/{job_id}/capacity?worker_count=x&group_count=1").text
        assert "Workers per group must be a whole number." in line
        # Another coordinator's job is not found, whatever the settings.
        assert people["dave"].get(f"/ui/jobs/{job_id}/capacity").status_code == 404

        # The command line says it before queueing the run.
        script = appliance.data_dir.parent / "capacity.js"
        script.write_text(job_script(workers=2))
        token = carol.http.headers["Authorization"].split()[-1]
        result = await asyncio.to_thread(job, appliance, token, "run", str(script), "--private")
        assert result.returncode == 0, result.stderr
        assert "workers: 3 workers connected; 1 eligible for this run" in result.stderr
        carol.http.post(f"/runs/{int(result.stdout.split()[-1])}/cancel")
    finally:
        for w in [*others, own]:
            await w.close()


async def test_the_overview_answers_what_runs_what_waits_and_what_failed(appliance, people, carol):
    async def failing(worker: SimWorker, task: dict) -> None:
        await worker.send({"type": "task-failed", "taskId": task["taskId"], "error": "TypeError: x is undefined"})

    workers = await start_workers(appliance.url, cookie_of(people["carol"]), 2, on_task=failing)
    try:
        failed = carol.run(carol.job(job_script(workers=2), name="broken"))
        assert (await carol.wait(failed["id"]))["state"] == "failed"
        waiting = carol.run(carol.job(job_script(workers=5), name="too-big"))

        def overview_shows() -> str | None:
            live = people["carol"].get("/ui/overview/live").text
            return live if "plot-fleet" in live and f"Run {waiting['id']}" in live else None

        live = text_of(await wait_until(overview_shows))
        assert "Needs a look" in live
        assert f"the latest, run {failed['id']} (broken): " in live and "TypeError: x is undefined" in live
        assert f"Run {waiting['id']} (too-big) waits: asks 5, 2 connected, 2 eligible" in live
        page = people["carol"].get("/ui/overview/live").text
        assert f'href="/ui/runs/{failed["id"]}"' in page
        assert re.search(r'id="fig-queued">1<', page) and re.search(r'id="fig-workers">2<', page)
        # The plots are SVG drawn by the server, one line per series, with a text alternative.
        assert re.search(
            r'<figure class="plot" id="plot-fleet">.*?<polyline class="plot-a" points="[\d., ]+">', page, re.S
        )
        # The latest sample (one a second here) catches up with the fleet: two connected, none busy.
        await wait_until(
            lambda: re.search(
                r'aria-label="Workers connected over the last [^"]*: now connected 2, busy 0',
                people["carol"].get("/ui/overview/live").text,
            )
        )
        # Another coordinator does not see carol's runs.
        daves = text_of(people["dave"].get("/ui/overview/live").text)
        assert "broken" not in daves and "too-big" not in daves and "All is well" in daves
        # A worker account sees its own browsers, not the queue.
        wendys = text_of(people["wendy"].get("/ui").text)
        assert "None of your browsers is connected" in wendys and "too-big" not in wendys
        carol.http.post(f"/runs/{waiting['id']}/cancel")
    finally:
        for w in workers:
            await w.close()


async def test_a_stage_page_shows_every_task_the_spread_and_the_task_that_stands_out(appliance, people, carol):
    release = asyncio.Event()

    async def uneven(worker: SimWorker, task: dict) -> None:
        stage, rank = task_key(task)
        emits = 100
        if stage == 0 and rank == 2:  # the straggler: ten times the records, and late
            emits = 1000
            await worker.send({"type": "task-progress", "taskId": task["taskId"], "emits": 400, "bytes": 4000})
            await release.wait()
        await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": [], "emits": emits, "cpuMs": 1})

    workers = await start_workers(appliance.url, cookie_of(people["carol"]), 3, on_task=uneven)
    try:
        run = carol.run(carol.job(job_script(workers=3), name="uneven"))
        stage_url = f"/ui/runs/{run['id']}/stages/A/0"

        def two_done() -> str | None:
            page = people["carol"].get(stage_url).text
            return page if "2/3 tasks done" in page else None

        # While it runs: two done, one running with its last progress report, and an estimate.
        live = text_of(await wait_until(two_done))
        assert "1 running" in live and "Records 600 (" in live
        assert "Time left about" in live
        running = re.search(
            r'<tr data-rank="2" data-state="running">.*?</tr>', people["carol"].get(stage_url).text, re.S
        )
        assert running and '<td class="num">400</td>' in running.group(0)
        # Its latest moves say what caused each: a round started the tasks, a worker's task-done ended them.
        moves = re.search(
            r'<table class="table" id="stage-moves">.*?</table>', people["carol"].get(stage_url).text, re.S
        )
        moves = [text_of(row) for row in re.findall(r"<tr data-task=.*?</tr>", moves.group(0), re.S)]
        assert sum("running → done finish TaskDone:" in m for m in moves) == 2
        assert sum("waiting → staging start round#" in m for m in moves) == 3
        # The Workers view says which run and rank each worker holds; another coordinator sees that
        # it holds a rank, not whose run.
        straggler = next(w for w in workers if any(task_key(t) == (0, 2) for t in w.tasks))
        view = people["carol"].get("/ui/workers/live").text
        row = re.search(rf'<tr data-worker="{straggler.worker_id}">.*?</tr>', view, re.S).group(0)
        assert f'<a href="/ui/runs/{run["id"]}">run {run["id"]}</a> · A/2' in row and "state-busy" in row
        daves = people["dave"].get("/ui/workers/live").text
        assert "a run · A/2" in daves and f"/ui/runs/{run['id']}" not in daves
        # The run page's progress says the same share: two done, and the third past the median's
        # records (400 of 100) but not done, so counted at 95 %.
        live_row = re.search(
            r'<tr data-stage="stage 1 \(map\)">.*?</tr>', people["carol"].get(f"/ui/runs/{run['id']}/live").text, re.S
        ).group(0)
        assert "2/3" in live_row and "about 98%" in live_row and " left" in live_row
        # The run page links each stage to its page.
        assert f'href="{stage_url}"' in people["carol"].get(f"/ui/runs/{run['id']}").text

        await asyncio.sleep(1.2)  # the straggler runs more than twice the median (and a second more)
        release.set()
        assert (await carol.wait(run["id"]))["state"] == "succeeded"
        page = people["carol"].get(stage_url).text
        done = text_of(page)
        assert "3/3 tasks done" in done and "Time left finished" in done
        records = re.search(r'<tr data-measure="records">.*?</tr>', page, re.S).group(0)
        assert re.findall(r'<td class="num[^"]*">([^<]+)</td>', records) == ["100", "100", "1000", "10.0×"]
        assert "1 task stands out" in done
        assert re.search(r'<tr data-rank="2" data-state="done" class="skew">.*?⚠ slow', page, re.S)
        # Sorted by records, most first: the straggler heads the table.
        by_records = people["carol"].get(f"{stage_url}?sort=records&order=desc").text
        assert re.findall(r'<tr data-rank="(\d+)"', by_records)[0] == "2"
        # Its worker's runs list this run.
        served = people["carol"].get(f"/ui/workers/{straggler.worker_id}/runs").text
        assert f'<tr data-run="{run["id"]}">' in served
        assert "has not served any of your runs" in people["dave"].get(f"/ui/workers/{straggler.worker_id}/runs").text
        # No such stage or group, or another account's run: not found.
        assert people["carol"].get(f"/ui/runs/{run['id']}/stages/A/7").status_code == 404
        assert people["carol"].get(f"/ui/runs/{run['id']}/stages/Q/0").status_code == 404
        assert people["dave"].get(stage_url).status_code == 404
    finally:
        release.set()
        for w in workers:
            await w.close()


async def test_a_rerun_is_estimated_from_the_jobs_last_success_before_any_of_its_tasks_finish(appliance, people, carol):
    release = asyncio.Event()

    async def quarter_then_wait(worker: SimWorker, task: dict) -> None:
        # Each map task reports a quarter of its records and waits; every task ends with 100 records.
        if task_key(task)[0] == 0:
            await worker.send({"type": "task-progress", "taskId": task["taskId"], "emits": 25, "bytes": 2500})
            await release.wait()
        await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": [], "emits": 100, "cpuMs": 1})

    def map_row(run_id: int) -> str | None:
        """The run page's row of the map stage, once both its tasks run and reported."""
        live = people["carol"].get(f"/ui/runs/{run_id}/live").text
        row = re.search(r'<tr data-stage="stage 1 \(map\)">.*?</tr>', live, re.S)
        return row.group(0) if row and "2 running" in row.group(0) and "<td>50</td>" in row.group(0) else None

    workers = await start_workers(appliance.url, cookie_of(people["carol"]), 2, on_task=quarter_then_wait)
    try:
        job_id = carol.job(job_script(workers=2), name="steady")
        first = carol.run(job_id)["id"]
        # A first run: its records and their throughput show the map moving, not how far it is.
        row = await wait_until(lambda: map_row(first))
        assert 'value="0"' in row and "time left known once a task finishes" in text_of(row)
        assert re.search(r"\d+ records/s · [\d.]+ [KMG]?i?B/s", text_of(row))
        await asyncio.sleep(1)  # the tasks take a while: the next run's estimate has a duration to go by
        release.set()
        assert (await carol.wait(first))["state"] == "succeeded"

        # The next run of the job, before any of its map tasks finished: a quarter of the records the
        # last run's tasks wrote, so about a quarter done, with the time left that implies.
        release.clear()
        second = carol.run(job_id)["id"]
        row = text_of(await wait_until(lambda: map_row(second)))
        assert "about 25%" in row and re.search(rf"\d+ s left \(from run {first}\)", row), row
        assert 'value="25"' in map_row(second)
        stage = text_of(people["carol"].get(f"/ui/runs/{second}/stages/A/0").text)
        assert f"(from run {first}, the job's last success)" in stage and "about 25% done" in stage
        release.set()
        assert (await carol.wait(second))["state"] == "succeeded"
    finally:
        release.set()
        for w in workers:
            await w.close()


async def test_a_worker_accounts_overview_shows_its_browsers_over_time_the_runs_they_served_and_earnings(
    appliance, people, carol
):
    prices = {"resource": "cpu_ms", "consumer_rate": "0.60", "provider_rate": "0.40", "effective_from": "2026-01-01"}
    assert people["admin"].form("/ui/admin/billing/prices", prices).status_code == 303

    async def an_hour_each(worker: SimWorker, task: dict) -> None:
        await worker.send(
            {"type": "task-done", "taskId": task["taskId"], "outputs": [], "emits": 0, "cpuMs": 3_600_000}
        )

    wendys = await start_workers(appliance.url, cookie_of(people["wendy"]), 2, on_task=an_hour_each)
    try:
        run = carol.run(carol.job(job_script(workers=2), name="on wendy's browsers"))
        assert (await carol.wait(run["id"]))["state"] == "succeeded"

        def sampled() -> str | None:
            live = people["wendy"].get("/ui/overview/live").text
            own = re.search(r'id="plot-own">.*?aria-label="([^"]*)"', live, re.S)
            tasks = re.search(r'id="plot-own-tasks">.*?points="([^"]*)"', live, re.S)
            # Some minute with tasks: a point of the tasks line above the bottom of the box (y 78).
            did = tasks and any(float(p.split(",")[1]) < 78 for p in tasks[1].split())
            return live if own and "now connected 2, busy 0" in own[1] and did else None

        # Her browsers over the last minutes (a sample a second here): two connected, and the tasks they did.
        live = await wait_until(sampled)
        # The run they served (input, two maps, two reduces), by number and state: the job is carol's.
        served = re.search(rf'<li data-run="{run["id"]}">.*?</li>', live, re.S)
        assert served and "5 tasks by your browsers" in text_of(served[0]) and "succeeded" in served[0]
        assert "on wendy" not in live and "carol@example.com" not in live
        # What the five CPU-hours earned at 0.40 an hour.
        page = text_of(people["wendy"].get("/ui").text)
        assert re.search(r"Your browsers earned 2\.00 USD so far in \w+ \d{4}", page), page
    finally:
        for w in wendys:
            await w.close()


async def test_the_overview_says_how_far_the_stage_under_way_is(appliance, people, carol):
    """Input done, the one map running: the Overview says the map's share done, as the run page does,
    not a share of all the run's tasks (which said 33 % while the map, the work, was at about 0 %)."""
    release = asyncio.Event()

    async def hold_maps(worker: SimWorker, task: dict) -> None:
        if task["kind"] == "map":
            await release.wait()
        await finish_empty(worker, task)

    worker = await SimWorker(appliance.url, cookie_of(people["carol"]), on_task=hold_maps).start()
    try:
        run = carol.run(carol.job(job_script(workers=1), name="under way"))

        def overview_line() -> str | None:
            page = people["admin"].get("/ui/overview/live").text
            found = re.search(rf'<li>[^\n]*?href="/ui/runs/{run["id"]}"[^\n]*?</li>', page)
            return found and text_of(found.group(0))

        line = await wait_until(lambda: (text := overview_line()) and "stage 1 (map)" in text and text)
        assert line.strip().endswith("· stage 1 (map): about 0 %"), line
        release.set()
        assert (await carol.wait(run["id"], timeout=30))["state"] == "succeeded"
    finally:
        release.set()
        await worker.close()
