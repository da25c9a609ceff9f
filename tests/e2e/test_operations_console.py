"""The operations pages in real Chromium, with two real worker tabs: the Overview, the Workers view,
the run dialog's capacity line and a stage page, as an admin sees them at 1280 and 390 px.

Screenshots of each page at both widths are kept under the test's temporary directory."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from appliance.jobs.execution import CHUNKS_PER_RANK
from tests.browsers import Workers
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance

pytestmark = pytest.mark.e2e

WIDTHS = (1280, 390)
# 2,000 lines of words; the map reports progress every 200 lines and pauses a little so the run
# lasts long enough to be seen running.
SCRIPT = """const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 2;
execution.setInputFn(async function input() {
  const words = ['alpha', 'beta', 'gamma', 'delta', 'epsilon'];
  return Array.from({length: 2000}, (_, i) => words[i % 5] + ' ' + words[(i * 7) % 5]);
});
execution.addStage(new MapStage(async function map(x) {
  let n = 0;
  for (const [i, line] of x) {
    for (const word of line.split(' ')) context.emit(word, 1);
    if (++n % 200 === 0) { context.progress(); await new Promise(r => setTimeout(r, 50)); }
  }
  await context.onComplete();
}));
execution.addStage(new ReduceStage(async function reduce(keyToValues) {
  for (const key in keyToValues) context.emit(key, keyToValues[key].length);
  await context.onComplete();
}));
execution.start(jobRunner);
"""


# The elements that stick out of the window, outside a scrolling table (what made a page scroll sideways).
TOO_WIDE = """[...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1 && !e.closest('.table-scroll'))
  .slice(0, 5).map(e => `${e.tagName.toLowerCase()}.${e.className} ${Math.round(e.getBoundingClientRect().right)}px`)"""


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    server = Appliance(tmp_path_factory.mktemp("console") / "data", env={"PEERMR_METRICS_SAMPLE_SECONDS": "1"}).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tabs(chromium, appliance, token):
    fleet = Workers(chromium, appliance, token)
    fleet.add(2)
    yield fleet
    for page in list(fleet.tabs):
        fleet.close(page)


@pytest.fixture(scope="module")
def run(api, tabs):
    job = api.post("/jobs", json={"name": "words", "script": SCRIPT})
    assert job.status_code == 201, job.text
    started = api.post(f"/jobs/{job.json()['id']}/runs", json={}).json()
    return {"job": job.json()["id"], "id": started["id"]}


@pytest.fixture(scope="module")
def screens(tmp_path_factory):
    path = tmp_path_factory.mktemp("screenshots")
    print(f"screenshots in {path}")
    return path


def signed_in(chromium, appliance: Appliance, email: str, password: str):
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(f"{appliance.url}/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Overview", exact=True)).to_be_visible()
    return page


@pytest.fixture
def admin(chromium, appliance) -> Page:
    page = signed_in(chromium, appliance, ADMIN_EMAIL, ADMIN_PASSWORD)
    yield page
    page.context.close()


def at_each_width(page: Page, screens, name: str) -> None:
    """No sideways scrolling at either width (tables scroll inside their card); a screenshot of each."""
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(100)  # layout after the resize
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), (
            f"{name} at {width} px: too wide: {page.evaluate(TOO_WIDE)}"
        )
        page.screenshot(path=str(screens / f"{name}-{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def wait_finished(api, run_id: int) -> dict:
    for _ in range(600):
        state = api.get(f"/runs/{run_id}").json()
        if state["state"] not in ("queued", "running"):
            return state
        import time

        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not end")


def test_the_overview_shows_the_fleet_the_run_and_the_last_minutes(
    admin: Page, appliance: Appliance, run, api, screens
):
    admin.goto(f"{appliance.url}/ui")
    # Live numbers: the two tabs, the run running or just finished.
    expect(admin.locator("#fig-workers")).to_have_text("2")
    assert wait_finished(api, run["id"])["state"] == "succeeded"
    expect(admin.locator("#health")).to_contain_text("All is well", timeout=15_000)
    # The plots fill as samples come (one a second here): the fleet plot says two connected.
    fleet_plot = admin.locator("#plot-fleet svg")
    expect(fleet_plot).to_have_attribute("aria-label", re.compile(r"now connected 2, busy 0"), timeout=15_000)
    assert admin.locator("#plot-tasks polyline").count() == 1 and admin.locator("#plot-bytes polyline").count() == 2
    at_each_width(admin, screens, "overview")


def test_the_workers_view_matches_what_each_tab_says_it_stores(
    admin: Page, appliance: Appliance, run, api, tabs, screens
):
    assert wait_finished(api, run["id"])["state"] == "succeeded"
    admin.goto(f"{appliance.url}/ui/workers")
    for tab in tabs.tabs:
        worker_id = tab.locator("#worker-id").inner_text()
        stored = tab.locator("#stored").inner_text()  # "3 blobs, 1.2 KiB", as the tab's page shows it
        row = admin.locator(f'tr[data-worker="{worker_id}"]')
        expect(row.locator("td.stored")).to_have_text(stored, timeout=10_000)
        expect(row.locator(".worker-label")).to_contain_text(worker_id[:8])
        expect(row.locator(".worker-label")).to_contain_text("Chrome")
        assert int(row.locator("td.tasks").inner_text()) >= 1  # each ran a map and a reduce
    # Sorting by a column is a link that keeps the page's filters.
    admin.get_by_role("link", name="Tasks").click()
    expect(admin).to_have_url(re.compile(r"sort=tasks&order=asc"))
    expect(admin.locator("th[aria-sort=ascending]")).to_have_text("Tasks")
    at_each_width(admin, screens, "workers")
    # At 1280 px the whole table fits: nothing to scroll to, Connected and Disconnect in sight.
    assert admin.evaluate(
        "(() => { const s = document.querySelector('.table-scroll'); return s.scrollWidth <= s.clientWidth; })()"
    )
    for button in admin.get_by_role("button", name="Disconnect").all():
        box = button.bounding_box()
        assert box and box["x"] + box["width"] <= 1280
    # At 390 px the table scrolls inside its card.
    admin.set_viewport_size({"width": 390, "height": 900})
    assert admin.evaluate(
        "(() => { const s = document.querySelector('.table-scroll'); return s.scrollWidth > s.clientWidth; })()"
    )


def test_the_stage_page_and_the_run_dialogs_capacity(admin: Page, appliance: Appliance, run, api, screens):
    assert wait_finished(api, run["id"])["state"] == "succeeded"
    admin.goto(f"{appliance.url}/ui/runs/{run['id']}")
    admin.get_by_role("link", name="stage 1 (map)").click()
    expect(admin.get_by_role("heading", name="Stage 1 (map)")).to_be_visible()
    expect(admin.locator("#stage-tasks")).to_have_text("2/2 tasks done")
    # 2,000 lines of two words: 4,000 records between the two map tasks.
    expect(admin.locator("#stage-records")).to_contain_text("4000")
    expect(admin.locator("#stage-spread tr[data-measure=records] td").nth(1)).to_have_text("2000")
    assert admin.locator("#stage-tasks-table tbody tr[data-state=done]").count() == 2
    # Each browser that finished a task, with the chunks it ran: the two ranks' four chunks each, every
    # rank's run as one task (a range).
    expect(admin.locator("#stage-browsers thead")).to_contain_text("Chunks done")
    done = admin.locator("#stage-browsers tbody tr td:nth-child(2)").all_inner_texts()
    assert sum(int(n) for n in done) == 2 * CHUNKS_PER_RANK, done
    at_each_width(admin, screens, "stage")

    # The run dialog says what the run would find, and again as its settings change.
    admin.goto(f"{appliance.url}/ui/jobs/{run['job']}/run")
    capacity = admin.locator("#run-capacity")
    expect(capacity).to_contain_text("2 workers connected; 2 eligible for this run")
    admin.locator("input[name=gpu]").check()
    expect(capacity).to_contain_text("0 eligible for this run (with WebGPU)")
    expect(capacity).to_contain_text("it waits until 2 more eligible worker(s) connect")
    at_each_width(admin, screens, "run-dialog")


def test_a_coordinator_sees_the_browsers_that_would_run_its_runs(chromium, appliance: Appliance, tabs, screens):
    appliance.add_user("cora@example.com", "coordinator", "cora-password-1")
    page = signed_in(chromium, appliance, "cora@example.com", "cora-password-1")
    try:
        # The admin's two tabs would run cora's runs (not in private mode): her Overview counts them.
        expect(page.locator("#fig-workers")).to_have_text("2")
        expect(page.locator("#health")).to_contain_text("All is well")
        at_each_width(page, screens, "overview-coordinator")
        page.get_by_role("link", name="Workers", exact=True).click()
        rows = page.locator("tr.other-account")
        expect(rows).to_have_count(2)
        expect(rows.first.locator(".worker-label")).to_contain_text("another account")
        expect(page.locator("#workers-count")).to_have_text(
            "2 of 2 workers shown; 2 belong to other accounts (they run your runs unless private mode is on)."
        )
        assert ADMIN_EMAIL not in page.content()
        at_each_width(page, screens, "workers-coordinator")
    finally:
        page.context.close()
