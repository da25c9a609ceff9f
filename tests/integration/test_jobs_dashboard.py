"""The Jobs and Runs pages: the editor's forms, the run dialog, the live run page, output and logs.

A real appliance subprocess; simulated workers (tests/sim_workers.py) finish every task with no
output, so a run on them succeeds with an empty output.
"""

from __future__ import annotations

import asyncio
import html
import re
import time

import httpx
import pytest

from tests.sim_workers import cookie_of, start_workers
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Client

PASSWORD = "jobs-page-password-1"
FIXED_ORIGIN = "https://fixed.example.org"
FLASH_RE = re.compile(r'class="flash flash-(\w+)" role="\w+">([^<]*)<')
TEXTAREA_RE = re.compile(r'<textarea id="script"[^>]*>\n(.*?)</textarea>', re.S)

JOB = """const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = %(workers)d;
execution.setInputFn(async function input() { return []; });
execution.addStage(new MapStage(async function map(x) {
  await context.onComplete();
}));
execution.addStage(new ReduceStage(async function reduce(keyToValues) {
  await context.onComplete();
}));
execution.start(jobRunner);
"""


def script(workers: int = 4) -> str:
    return JOB % {"workers": workers}


@pytest.fixture(scope="module")
def appliance(appliance_with):
    return appliance_with(fetch_origins=FIXED_ORIGIN)


@pytest.fixture(scope="module")
def people(appliance):
    appliance.add_user("cora@example.com", "coordinator", PASSWORD)
    appliance.add_user("dan@example.com", "coordinator", PASSWORD)
    appliance.add_user("wes@example.com", "worker", PASSWORD)
    clients = {}
    for name in ("cora", "dan", "wes"):
        clients[name] = Client(appliance.url)
        clients[name].login(f"{name}@example.com", PASSWORD)
    clients["admin"] = Client(appliance.url)
    clients["admin"].login(ADMIN_EMAIL, ADMIN_PASSWORD)
    yield clients
    for client in clients.values():
        client.close()


@pytest.fixture(scope="module")
def api(appliance, people):
    result = appliance.cli("token", "create", "cora@example.com")
    assert result.returncode == 0, result.stderr
    token = result.stdout.strip().split()[-1]
    with httpx.Client(base_url=appliance.url + "/api/v1", headers={"Authorization": f"Bearer {token}"}) as client:
        yield client


def flashes(page: str) -> list[tuple[str, str]]:
    return [(level, html.unescape(text.strip())) for level, text in FLASH_RE.findall(page)]


def editor_text(page: str) -> str:
    match = TEXTAREA_RE.search(page)
    assert match, "no script editor on the page"
    return html.unescape(match.group(1))


def create_job(client: Client, name: str, text: str) -> int:
    response = client.form("/ui/jobs", {"name": name, "script": text})
    assert response.status_code == 303, response.text[:2000]
    return int(response.headers["location"].rsplit("/", 1)[1])


def start_run(client: Client, job_id: int, **fields) -> int:
    values = {"worker_count": "4", "group_count": "1", "save_intermediate_output": "true", **fields}
    response = client.form(f"/ui/jobs/{job_id}/runs", values)
    assert response.status_code == 303, response.text[:2000]
    location = response.headers["location"]
    assert re.fullmatch(r"/ui/runs/\d+", location), location
    return int(location.rsplit("/", 1)[1])


def test_jobs_and_runs_pages_replace_the_placeholders(people):
    cora = people["cora"]
    for path, heading in (("/ui/jobs", "Jobs"), ("/ui/runs", "Runs")):
        page = cora.get(path)
        assert page.status_code == 200
        assert f"<h1>{heading}</h1>" in page.text and "Nothing here yet" not in page.text
    nav = cora.get("/ui").text
    assert 'href="/ui/jobs"' in nav and 'href="/ui/runs"' in nav
    assert 'href="/ui/jobs/new"' in cora.get("/ui/jobs").text

    wes = people["wes"]
    assert 'href="/ui/jobs"' not in wes.get("/ui").text
    for path in ("/ui/jobs", "/ui/jobs/new", "/ui/runs"):
        assert wes.get(path).status_code == 403


def test_a_new_job_starts_from_a_word_count_and_saves_through_the_form(people, api):
    cora = people["cora"]
    page = cora.get("/ui/jobs/new")
    assert page.status_code == 200
    template = editor_text(page.text)
    assert "new JobExecution(" in template and "new MapStage(" in template and "new ReduceStage(" in template
    assert "context.emit(word, 1)" in template and "execution.start(jobRunner)" in template
    # The editor's files load from the appliance (the CSP allows no other origin and no inline script).
    for asset in (
        "vendor/codemirror/lib/codemirror.js",
        "vendor/codemirror/mode/javascript/javascript.js",
        "js/job-editor.js",
    ):
        assert f"/static/{asset}?v=" in page.text
        assert cora.get(f"/static/{asset}").status_code == 200
    assert cora.get("/static/vendor/codemirror/LICENSE").status_code == 200

    # Without the CSRF token, nothing is saved.
    forged = cora.post("/ui/jobs", data={"name": "forged", "script": template})
    assert forged.status_code == 403

    job_id = create_job(cora, "Word count", template)
    saved = cora.get(f"/ui/jobs/{job_id}")
    assert ("success", "Job Word count saved.") in flashes(saved.text)
    assert editor_text(saved.text) == template
    listing = cora.get("/ui/jobs").text
    assert f'id="job-{job_id}"' in listing and "input → map → reduce" in listing
    assert api.get(f"/jobs/{job_id}").json()["script"] == template
    assert "forged" not in listing


def test_a_syntax_error_shows_its_line_and_keeps_the_text(people, api):
    cora = people["cora"]
    job_id = create_job(cora, "syntax", script())
    broken = script().replace(
        "await context.onComplete();\n}));\nexecution.addStage(new Reduce",
        "await context.onComplete(;\n}));\nexecution.addStage(new Reduce",
    )
    line = broken.splitlines().index("  await context.onComplete(;") + 1
    refused = cora.form(f"/ui/jobs/{job_id}", {"name": "syntax", "script": broken})
    assert refused.status_code == 400
    error = html.unescape(re.search(r'id="script-error">(.*?)</div>', refused.text, re.S).group(1))
    assert f"line {line}" in error
    assert "await context.onComplete(;" in error  # the offending line is quoted under the message
    assert f'data-error-line="{line}"' in refused.text
    assert editor_text(refused.text) == broken  # the text is not lost
    assert api.get(f"/jobs/{job_id}").json()["script"] == script()  # and the saved job is unchanged

    # A new job with a syntax error is not created, and its text comes back too.
    before = len(api.get("/jobs").json())
    new = cora.form("/ui/jobs", {"name": "new broken", "script": broken})
    assert new.status_code == 400 and editor_text(new.text) == broken
    assert f'data-error-line="{line}"' in new.text
    assert len(api.get("/jobs").json()) == before

    nameless = cora.form(f"/ui/jobs/{job_id}", {"name": " ", "script": script()})
    assert nameless.status_code == 400 and "needs a name" in nameless.text


def test_edit_and_delete_a_job(people, api):
    cora = people["cora"]
    job_id = create_job(cora, "to edit", script())
    saved = cora.form(f"/ui/jobs/{job_id}", {"name": "edited", "script": script(workers=2)})
    assert saved.status_code == 303
    job = api.get(f"/jobs/{job_id}").json()
    assert job["name"] == "edited" and job["spec"]["workerCount"] == 2
    # The run dialog follows the saved script.
    assert 'name="worker_count" min="1" max="8192" required value="2"' in cora.get(f"/ui/jobs/{job_id}").text

    run_id = start_run(cora, job_id, worker_count="2")
    assert cora.form(f"/ui/runs/{run_id}/cancel").status_code == 303

    # Deleting through htmx (after its confirm) sends the browser to the list; the runs stay.
    deleted = cora.post(f"/ui/jobs/{job_id}/delete", headers={"hx-request": "true", "x-csrftoken": cora.csrf()})
    assert deleted.status_code == 200 and deleted.headers["hx-redirect"] == "/ui/jobs"
    assert cora.get(f"/ui/jobs/{job_id}").status_code == 404
    assert api.get(f"/jobs/{job_id}").status_code == 404
    assert f'id="job-{job_id}"' not in cora.get("/ui/jobs").text
    run_page = cora.get(f"/ui/runs/{run_id}")
    assert run_page.status_code == 200 and "edited" in run_page.text

    other = create_job(cora, "plain delete", script())
    plain = cora.form(f"/ui/jobs/{other}/delete")
    assert plain.status_code == 303 and plain.headers["location"] == "/ui/jobs"
    assert ("success", "Job plain delete deleted; its runs stay under Runs.") in flashes(cora.get("/ui/jobs").text)


def test_the_run_dialog_is_prefilled_and_its_values_reach_the_run(people, api):
    cora = people["cora"]
    text = script(workers=3).replace("execution.start", "execution.saveIntermediateOutput = false;\nexecution.start")
    job_id = create_job(cora, "dialog", text)
    page = cora.get(f"/ui/jobs/{job_id}").text
    dialog = page[page.index('<dialog id="run-dialog"') :]
    assert 'name="worker_count" min="1" max="8192" required value="3"' in dialog
    assert 'name="group_count" min="1" max="26" required value="1"' in dialog
    assert re.search(r'name="save_intermediate_output" value="true">', dialog)  # unchecked: the script says false
    # The same form is a page of its own for browsers without JavaScript.
    assert 'value="3"' in cora.get(f"/ui/jobs/{job_id}/run").text

    run_id = start_run(
        cora, job_id, worker_count="2", group_count="3", private_mode="true", save_intermediate_output="", seed="42"
    )
    # No browser is connected: queued, with a warning that says what it asks and what there is.
    assert (
        "warning",
        f"Run {run_id} of dialog queued, but it asks 6, 0 connected, 0 eligible of the run's own account "
        "(private mode): it waits until enough are connected.",
    ) in flashes(cora.get(f"/ui/runs/{run_id}").text)
    spec = api.get(f"/runs/{run_id}").json()["spec"]
    assert (spec["workerCount"], spec["groupCount"], spec["privateMode"], spec["saveIntermediateOutput"]) == (
        2,
        3,
        True,
        False,
    )
    assert spec["seed"] == 42 and spec["gpu"] is False
    assert api.post(f"/runs/{run_id}/cancel").json()["state"] == "cancelled"

    # Bad values are refused with the message in the dialog: a page without JavaScript, the form with htmx.
    bad = cora.form(f"/ui/jobs/{job_id}/runs", {"worker_count": "0", "group_count": "1"})
    assert bad.status_code == 400
    assert "workerCount" in html.unescape(re.search(r'id="run-error">(.*?)</div>', bad.text, re.S).group(1))
    assert 'value="0"' in bad.text
    words = cora.post(
        f"/ui/jobs/{job_id}/runs",
        data={"worker_count": "many", "group_count": "1"},
        headers={"hx-request": "true", "x-csrftoken": cora.csrf()},
    )
    assert words.status_code == 200 and words.text.lstrip().startswith('<form method="post"')
    assert "Workers per group must be a whole number." in words.text
    groups = cora.form(f"/ui/jobs/{job_id}/runs", {"worker_count": "1", "group_count": "27"})
    assert groups.status_code == 400 and "groupCount" in html.unescape(groups.text)
    # A successful htmx start tells the browser where the run page is.
    started = cora.post(
        f"/ui/jobs/{job_id}/runs",
        data={"worker_count": "1", "group_count": "1"},
        headers={"hx-request": "true", "x-csrftoken": cora.csrf()},
    )
    assert started.status_code == 200 and re.fullmatch(r"/ui/runs/\d+", started.headers["hx-redirect"])
    api.post(f"/runs/{started.headers['hx-redirect'].rsplit('/', 1)[1]}/cancel")


def test_scripts_from_an_origin_the_admin_did_not_allow_are_refused_in_the_dialog(people):
    cora = people["cora"]
    text = script().replace(
        "execution.start", "execution.scripts = ['https://cdn.elsewhere.test/lib.js'];\nexecution.start"
    )
    job_id = create_job(cora, "foreign scripts", text)
    refused = cora.form(f"/ui/jobs/{job_id}/runs", {"worker_count": "4", "group_count": "1"})
    assert refused.status_code == 400
    message = html.unescape(re.search(r'id="run-error">(.*?)</div>', refused.text, re.S).group(1))
    assert "https://cdn.elsewhere.test/lib.js" in message and FIXED_ORIGIN in message


def test_a_queued_run_says_why_it_waits_and_can_be_cancelled(people):
    cora = people["cora"]
    job_id = create_job(cora, "waits", script(workers=4))
    run_id = start_run(cora, job_id)
    deadline = time.monotonic() + 10
    while True:
        page = cora.get(f"/ui/runs/{run_id}").text
        # The scheduler states its reason within a second; the log writer flushes once a second.
        waiting = "asks 4, 0 connected, 0 eligible" in page and "queued: needs 4 worker(s)" in page
        if waiting or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert "asks 4, 0 connected, 0 eligible" in page
    assert re.search(r'id="run-state">queued<', page)
    assert "Position 1 in the queue" in page
    # It is watched live: the fragment polls once a second while the run is queued.
    live = cora.get(f"/ui/runs/{run_id}/live").text
    assert f'hx-get="/ui/runs/{run_id}/live" hx-trigger="every 1s"' in live
    assert 'id="cancel-run"' in live
    assert 'id="flashes"' not in live  # the "queued" message stays while it is true
    # The coordinator's log says what it needs; the log tail keeps polling.
    assert "queued: needs 4 worker(s)" in page and 'class="log-tail"' in page
    listing = cora.get("/ui/runs").text
    assert f'id="run-{run_id}" data-state="queued"' in listing and 'hx-trigger="every 2s"' in listing

    # Cancel through htmx: the answer is the fragment, which no longer polls.
    cancelled = cora.post(f"/ui/runs/{run_id}/cancel", headers={"hx-request": "true", "x-csrftoken": cora.csrf()})
    assert cancelled.status_code == 200
    assert cancelled.text.lstrip().startswith('<div id="run-live" data-state="cancelled">')
    assert "hx-trigger" not in cancelled.text.split("</div>", 1)[0]
    assert "cancelled by its coordinator" in cancelled.text and 'id="cancel-run"' not in cancelled.text
    assert f"Run {run_id} cancelled." in cancelled.text  # as a flash message, out of band
    again = cora.form(f"/ui/runs/{run_id}/cancel")
    assert again.status_code == 303
    assert any(
        level == "error" and "only queued and running" in text
        for level, text in flashes(cora.get(f"/ui/runs/{run_id}").text)
    )
    assert f'id="run-{run_id}" data-state="cancelled"' in cora.get("/ui/runs").text


def test_another_coordinator_gets_404_and_a_worker_403(people):
    cora, dan, wes = people["cora"], people["dan"], people["wes"]
    job_id = create_job(cora, "private to cora", script())
    run_id = start_run(cora, job_id)
    try:
        gets = [
            f"/ui/jobs/{job_id}",
            f"/ui/jobs/{job_id}/run",
            f"/ui/runs/{run_id}",
            f"/ui/runs/{run_id}/live",
            f"/ui/runs/{run_id}/logs",
            f"/ui/runs/{run_id}/logs/download",
            f"/ui/runs/{run_id}/output",
            f"/ui/runs/{run_id}/output.jsonl",
            f"/ui/runs/{run_id}/output.csv",
        ]
        posts = [
            (f"/ui/jobs/{job_id}", {"name": "stolen", "script": script()}),
            (f"/ui/jobs/{job_id}/delete", {}),
            (f"/ui/jobs/{job_id}/runs", {"worker_count": "1", "group_count": "1"}),
            (f"/ui/runs/{run_id}/cancel", {}),
        ]
        for path in gets:
            assert dan.get(path).status_code == 404, path
            assert wes.get(path).status_code == 403, path
        for path, data in posts:
            assert dan.form(path, data).status_code == 404, path
            assert wes.form(path, data).status_code == 403, path
        assert f'id="job-{job_id}"' not in dan.get("/ui/jobs").text
        assert f'id="run-{run_id}"' not in dan.get("/ui/runs").text
        # Still cora's, unchanged and queued.
        assert re.search(r'id="run-state">queued<', cora.get(f"/ui/runs/{run_id}").text)

        # An admin sees everyone's jobs and runs, with their owner.
        admin = people["admin"]
        jobs = admin.get("/ui/jobs").text
        assert f'id="job-{job_id}"' in jobs and "<th>Owner</th>" in jobs and "cora@example.com" in jobs
        assert "<th>Owner</th>" not in cora.get("/ui/jobs").text
        assert f'id="run-{run_id}"' in admin.get("/ui/runs").text
        assert admin.get(f"/ui/runs/{run_id}").status_code == 200
    finally:
        cora.form(f"/ui/runs/{run_id}/cancel")


def test_admin_settings_edit_the_sandbox_fetch_origins(people):
    admin = people["admin"]
    page = admin.get("/ui/admin/settings").text
    assert "Job sandbox: allowed fetch origins" in page
    fixed = re.search(r'id="fixed-origins">(.*?)</p>', page, re.S).group(1)
    assert FIXED_ORIGIN in fixed
    assert "Relay peers" in page  # the TURN section is still there

    refused = admin.form("/ui/admin/settings/fetch-origins", {"origins": "https://data.example.com/corpus"})
    assert refused.status_code == 400
    error = html.unescape(re.search(r'id="fetch-origins-error">(.*?)</div>', refused.text, re.S).group(1))
    assert "without a path" in error
    assert "https://data.example.com/corpus</textarea>" in refused.text  # what was typed stays
    assert "Relay peers" in refused.text

    saved = admin.form(
        "/ui/admin/settings/fetch-origins", {"origins": "https://data.example.com, http://lake.test:9000"}
    )
    assert saved.status_code == 303 and saved.headers["location"] == "/ui/admin/settings"
    page = admin.get("/ui/admin/settings").text
    assert "https://data.example.com\nhttp://lake.test:9000</textarea>" in page
    assert any("Allowed fetch origins saved" in text for _, text in flashes(page))
    assert people["cora"].form("/ui/admin/settings/fetch-origins", {"origins": ""}).status_code == 403
    admin.form("/ui/admin/settings/fetch-origins", {"origins": ""})


async def test_a_run_on_simulated_workers_shows_progress_timeline_logs_and_output(appliance, people):
    cora = people["cora"]

    def get(path: str) -> httpx.Response:
        return cora.get(path)

    job_id = await asyncio.to_thread(create_job, cora, "on sim workers", script(workers=4))
    workers = await start_workers(appliance.url, cookie_of(cora), 4)
    try:
        run_id = await asyncio.to_thread(start_run, cora, job_id)
        deadline = time.monotonic() + 60
        live = ""
        while time.monotonic() < deadline:
            live = (await asyncio.to_thread(get, f"/ui/runs/{run_id}/live")).text
            if 'data-state="succeeded"' in live:
                break
            await asyncio.sleep(0.3)
        assert 'data-state="succeeded"' in live, live[:3000]
    finally:
        for worker in workers:
            await worker.close()

    # Once finished the fragment stops polling, and empties the page's messages ("Run 7 queued." is over).
    assert "hx-trigger" not in live.split(">", 1)[0]
    cleared = live.split('<div id="flashes" class="flashes" aria-live="polite" hx-swap-oob="true">', 1)
    assert len(cleared) == 2 and 'class="flash ' not in cleared[1]
    # The log writer flushes once a second: the last lines may follow the end by that much.
    deadline = time.monotonic() + 10
    while True:
        page = (await asyncio.to_thread(get, f"/ui/runs/{run_id}")).text
        if ("started on 4 worker(s)" in page and 'log-text">succeeded<' in page) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.3)
    assert re.search(r'id="run-state">succeeded<', page)
    # Progress complete: the input task and 4 map and 4 reduce tasks.
    assert 'data-stage="input function"' in page and 'data-stage="stage 1 (map)"' in page
    assert 'data-stage="stage 2 (reduce)"' in page
    assert len(re.findall(r'<progress max="100" value="100"', page)) == 3
    assert re.findall(r'<span class="tasks-done">([^<]*)</span>', page) == ["1/1", "4/4", "4/4"]
    # The timeline: one row per worker, a bar per task attempt (9 tasks, none failed).
    rows = re.findall(r'<div class="tl-row" data-worker="([0-9a-f]+)">', page)
    assert sorted(rows) == sorted(w.worker_id for w in workers)
    assert len(re.findall(r'class="tl-bar tl-done"', page)) == 9
    assert "rank 0, attempt 1" in page
    # Logs: the coordinator's lines, the source selector, and the whole log as a file.
    assert "started on 4 worker(s)" in page and '<span class="log-text">succeeded</span>' in page
    assert '<option value="coordinator"' in page
    logs = await asyncio.to_thread(get, f"/ui/runs/{run_id}/logs/download")
    assert logs.status_code == 200 and logs.headers["content-disposition"] == f'attachment; filename="run-{run_id}.log"'
    assert "coordinator info: started on 4 worker(s)" in logs.text
    only = (await asyncio.to_thread(get, f"/ui/runs/{run_id}/logs?source=coordinator")).text
    assert only.lstrip().startswith('<section class="panel" id="logs">') and "started on 4 worker(s)" in only
    # The output: empty, but browsable and downloadable.
    assert 'id="output-empty"' in page and "Group A produced no records." in page
    jsonl = await asyncio.to_thread(get, f"/ui/runs/{run_id}/output.jsonl?group=A")
    assert jsonl.status_code == 200 and jsonl.content == b""
    assert jsonl.headers["content-disposition"] == f'attachment; filename="run-{run_id}-A.jsonl"'
    csv = await asyncio.to_thread(get, f"/ui/runs/{run_id}/output.csv")
    assert csv.status_code == 200 and csv.text.strip() == "key,value"
    later = await asyncio.to_thread(get, f"/ui/runs/{run_id}/output?group=A&page=3")
    assert later.status_code == 200 and "No records past 200." in later.text
    assert (await asyncio.to_thread(get, f"/ui/runs/{run_id}/output.jsonl?group=Q")).status_code == 404
    listing = (await asyncio.to_thread(get, "/ui/runs")).text
    assert f'id="run-{run_id}" data-state="succeeded"' in listing


async def chatty_input(worker, task: dict) -> None:
    """The input task writes 2100 log lines (in batches of 100, as the page does), then finishes.
    The first line of each batch is a warning; line 0007 is an error."""

    def level(n: int) -> str:
        return "error" if n == 7 else "warn" if n % 100 == 0 else "info"

    if task["kind"] == "input":
        now = int(time.time() * 1000)
        for batch in range(21):
            numbers = range(batch * 100, batch * 100 + 100)
            lines = [{"at": now, "level": level(n), "text": f"line {n:04d}"} for n in numbers]
            await worker.send({"type": "task-log", "taskId": task["taskId"], "lines": lines})
    await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": [], "emits": 0, "cpuMs": 0})


async def test_a_long_log_opens_on_its_last_lines(appliance, people):
    cora = people["cora"]
    job_id = await asyncio.to_thread(create_job, cora, "chatty", script(workers=1))
    workers = await start_workers(appliance.url, cookie_of(cora), 1, on_task=chatty_input)
    try:
        run_id = await asyncio.to_thread(start_run, cora, job_id, worker_count="1")
        deadline = time.monotonic() + 60
        page = ""
        while time.monotonic() < deadline:
            page = (await asyncio.to_thread(cora.get, f"/ui/runs/{run_id}")).text
            if 'id="run-state">succeeded<' in page and '<span class="log-text">succeeded</span>' in page:
                break
            await asyncio.sleep(0.3)
    finally:
        for worker in workers:
            await worker.close()
    assert '<span class="log-text">succeeded</span>' in page
    # The page shows the last 2000 lines and says where the rest is; the download has them all.
    assert 'id="log-skipped"' in page
    assert "line 2099" in page and "line 0000" not in page
    assert page.count('class="log-line ') == 2000
    worker_id = workers[0].worker_id
    assert f'<option value="{worker_id}"' in page
    one = (await asyncio.to_thread(cora.get, f"/ui/runs/{run_id}/logs?source={worker_id}")).text
    assert one.count('class="log-line ') == 2000 and "coordinator" not in one.split('id="log-lines"')[1]
    everything = (await asyncio.to_thread(cora.get, f"/ui/runs/{run_id}/logs/download?source={worker_id}")).text
    assert everything.count(": line ") == 2100 and f"{worker_id} A/0 warn: line 0000" in everything
    assert everything.count(" info: line ") == 2100 - 22 and f"{worker_id} A/0 error: line 0007" in everything

    def shown(path: str) -> list[str]:
        text = cora.get(path).text
        return re.findall(r'<span class="log-text">(line \d+)</span>', text)

    # Level, search and source filters, in the run page's URL and in the tail's.
    assert await asyncio.to_thread(shown, f"/ui/runs/{run_id}?level=error") == ["line 0007"]
    warned = await asyncio.to_thread(shown, f"/ui/runs/{run_id}?level=warn&source={worker_id}")
    assert warned == ["line 0000", "line 0007", *(f"line {n:04d}" for n in range(100, 2100, 100))]
    searched = await asyncio.to_thread(shown, f"/ui/runs/{run_id}?log_search=LINE+00")
    assert searched == [f"line {n:04d}" for n in range(100)]
    tail = await asyncio.to_thread(shown, f"/ui/runs/{run_id}/logs?level=error&after=0&sources=2")
    assert tail == ["line 0007"]
    # A line's link opens the log around it, though it is older than the last 2000 lines.
    first = (await asyncio.to_thread(cora.get, f"/ui/runs/{run_id}?log_search=line+0000")).text
    link = r'id="L(\d+)"><a class="log-anchor" href="/ui/runs/\d+\?log_search=line\+0000&amp;line=\1#L\1"'
    line_id = int(re.search(link, first)[1])
    around = (await asyncio.to_thread(cora.get, f"/ui/runs/{run_id}?line={line_id}")).text
    assert f'id="L{line_id}"' in around and "line 0000" in around
    assert f'href="/ui/runs/{run_id}?line={line_id}#L{line_id}"' in around


def row_ids(page: str, kind: str = "run") -> list[int]:
    return [int(n) for n in re.findall(rf'<tr id="{kind}-(\d+)"', page)]


def test_the_lists_filter_search_and_page_in_the_url_and_cancel_per_row(people):
    dan, cora, admin = people["dan"], people["cora"], people["admin"]
    alpha = create_job(dan, "alpha list", script())
    beta = create_job(dan, "beta list", script())
    alphas = [start_run(dan, alpha) for _ in range(27)]
    betas = [start_run(dan, beta) for _ in range(3)]
    try:
        for run_id in alphas[:-1] + betas[:-1]:
            assert dan.form(f"/ui/runs/{run_id}/cancel").status_code == 303
        first = dan.get("/ui/runs").text
        assert "Runs 1–25 of 30 · page 1 of 2" in first
        assert row_ids(first) == sorted(alphas + betas, reverse=True)[:25]
        assert 'href="/ui/runs?page=2" rel="next"' in first
        second = dan.get("/ui/runs?page=2").text
        assert row_ids(second) == sorted(alphas)[:5][::-1] and "Runs 26–30 of 30" in second
        # A page past the end shows the last one; filters that are not values read as "any".
        assert row_ids(dan.get("/ui/runs?page=99&state=bogus&job=x").text) == row_ids(second)

        # Each filter narrows, and the pager keeps it.
        assert row_ids(dan.get(f"/ui/runs?job={beta}").text) == betas[::-1]
        queued = dan.get("/ui/runs?state=queued").text
        assert row_ids(queued) == [betas[-1], alphas[-1]]
        assert row_ids(dan.get("/ui/runs?q=BETA").text) == betas[::-1]
        assert row_ids(dan.get(f"/ui/runs?q=%23{alphas[3]}").text) == [alphas[3]]
        cancelled = dan.get(f"/ui/runs?state=cancelled&job={alpha}").text
        assert len(row_ids(cancelled)) == 25 and "Runs 1–25 of 26" in cancelled
        assert f'href="/ui/runs?state=cancelled&amp;job={alpha}&amp;page=2"' in cancelled
        assert 'title="cancelled by its coordinator"' in cancelled
        assert row_ids(dan.get("/ui/runs?q=no+such+job").text) == []
        assert "No run matches these filters" in dan.get("/ui/runs?q=no+such+job").text

        # Only queued and running rows have a cancel button, and it returns to the same list.
        assert queued.count('class="inline cancel-row"') == 2 and 'name="back" value="/ui/runs?state=queued"' in queued
        assert 'class="inline cancel-row"' not in cancelled
        back = dan.form(f"/ui/runs/{alphas[-1]}/cancel", {"back": "/ui/runs?state=queued"})
        assert (back.status_code, back.headers["location"]) == (303, "/ui/runs?state=queued")
        assert ("success", f"Run {alphas[-1]} cancelled.") in flashes(dan.get("/ui/runs?state=queued").text)
        # Through htmx, the browser is told to load the list again.
        hx = dan.post(
            f"/ui/runs/{betas[-1]}/cancel",
            data={"back": "/ui/runs?q=beta"},
            headers={"hx-request": "true", "x-csrftoken": dan.csrf()},
        )
        assert hx.headers["hx-redirect"] == "/ui/runs?q=beta"
        # A back address off the lists is not followed: the run's page instead.
        again = dan.form(f"/ui/runs/{alphas[0]}/cancel", {"back": "https://elsewhere.example/ui/runs"})
        assert again.headers["location"] == f"/ui/runs/{alphas[0]}"
        assert dan.get("/ui/runs?state=queued").text.count('class="inline cancel-row"') == 0

        # Another coordinator sees none of it, whatever owner they ask for; an admin narrows to dan.
        owner_id = re.search(r'<option value="(\d+)">dan@example.com</option>', admin.get("/ui/runs").text)[1]
        assert row_ids(cora.get(f"/ui/runs?owner={owner_id}&job={beta}").text) == []
        assert "Owner <select" not in cora.get("/ui/runs").text
        only_dan = admin.get(f"/ui/runs?owner={owner_id}&page=2").text
        assert row_ids(only_dan) == sorted(alphas)[:5][::-1]

        # The Jobs list: search, owner, last run with its reason, a link to the job's runs.
        jobs = dan.get("/ui/jobs?q=beta").text
        assert row_ids(jobs, "job") == [beta] and f'href="/ui/runs?job={beta}"' in jobs
        assert 'title="cancelled by its coordinator"' in jobs
        assert row_ids(cora.get("/ui/jobs?q=beta").text, "job") == []
        assert set(row_ids(admin.get(f"/ui/jobs?owner={owner_id}").text, "job")) >= {alpha, beta}
    finally:
        for run_id in alphas + betas:
            dan.form(f"/ui/runs/{run_id}/cancel")


def test_the_jobs_list_pages_and_offers_cancel_for_a_running_last_run(people):
    cora = people["cora"]
    made = [create_job(cora, f"paged job {n:02d}", script()) for n in range(26)]
    first = cora.get("/ui/jobs?q=paged+job").text
    assert "Jobs 1–25 of 26 · page 1 of 2" in first and row_ids(first, "job") == made[::-1][:25]
    assert row_ids(cora.get("/ui/jobs?q=paged+job&page=2").text, "job") == [made[0]]
    run_id = start_run(cora, made[0])
    try:
        row = cora.get("/ui/jobs?q=paged+job&page=2").text
        assert f'action="/ui/runs/{run_id}/cancel"' in row
        assert 'name="back" value="/ui/jobs?q=paged+job&amp;page=2"' in row
        back = cora.form(f"/ui/runs/{run_id}/cancel", {"back": "/ui/jobs?q=paged+job&page=2"})
        assert back.headers["location"] == "/ui/jobs?q=paged+job&page=2"
        assert f'action="/ui/runs/{run_id}/cancel"' not in cora.get("/ui/jobs?q=paged+job&page=2").text
    finally:
        cora.form(f"/ui/runs/{run_id}/cancel")


def test_the_jobs_list_filters_by_the_state_of_each_jobs_last_run(people):
    cora, dan, admin = people["cora"], people["dan"], people["admin"]
    waits, stopped, unrun, again = (create_job(cora, f"last run {n}", script()) for n in ("a", "b", "c", "d"))
    runs = [start_run(cora, waits), start_run(cora, stopped), start_run(cora, again)]
    try:
        assert cora.form(f"/ui/runs/{runs[1]}/cancel").status_code == 303
        assert cora.form(f"/ui/runs/{runs[2]}/cancel").status_code == 303
        runs.append(start_run(cora, again))  # its last run waits; the cancelled one before it does not count

        def shown(query: str, client: Client = cora) -> set[int]:
            return set(row_ids(client.get(f"/ui/jobs?q=last+run&{query}").text, "job"))

        assert shown("state=queued") == {waits, again}
        assert shown("state=cancelled") == {stopped}
        assert shown("state=never") == {unrun}
        assert shown("state=succeeded") == set()
        assert shown("state=bogus") == {waits, stopped, unrun, again}  # not a state: any
        page = cora.get("/ui/jobs?q=last+run&state=never").text
        assert '<option value="never" selected>never run</option>' in page and "Clear</a>" in page
        # Another coordinator's jobs stay theirs; an admin sees cora's by the same filter.
        assert shown("state=queued", dan) == set()
        assert shown("state=cancelled", admin) == {stopped}
    finally:
        for run_id in runs:
            cora.form(f"/ui/runs/{run_id}/cancel")
