"""Every dashboard page in real Chromium, at 1280 px and at 390 px (a phone):

- no page scrolls sideways (the document is no wider than the window),
- a table wider than its card scrolls inside the card instead of being cut off,
- axe-core (vendored in tests/e2e/vendor/axe-core) finds no serious or critical accessibility problem,
- on a phone, the top bar with the navigation takes a small share of the screen,

and a screenshot of each under the module's temporary directory (printed at the end). One
appliance and one browser for the module. Two worker tabs stay connected throughout (one of the
admin's, one of the worker account's), so the Workers tables have rows and the Overview's plots
fill (a fleet sample a second): they run docs/examples/wordcount.js as it is, so the run page has
output and logs; another job fails, so a run page has a stack trace; a slow job succeeds once, so
a later run of it shows its progress and time left while it runs.

To check a new page, add a Screen to SCREENS (its path may name the ids the `world` fixture makes,
or those of the fixture the screen needs).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, expect

from appliance.billing import periods
from tests.browsers import Workers
from tests.integration.test_billing_pages import account_id, run_python
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance, Client, save_and_run, wait_for_run

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
AXE = Path(__file__).with_name("vendor") / "axe-core" / "axe.min.js"
WIDTHS = {"desktop": (1280, 800), "phone": (390, 844)}
# On a phone the top bar (brand, account links, the sections) takes at most this share of the screen.
TOP_BAR_SHARE = 0.15
PASSWORD = "every-page-password-1"
COORDINATOR = "cleo@example.com"
WORKER = "wim@example.com"

FAILS = """const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 1;
execution.setInputFn(async function input() { return [1, 2]; });
execution.addStage(new MapStage(async function map(x) {
  for await (const kv of x) {
    if (kv[1] === 2) throw new Error('two is not allowed');
  }
  await context.onComplete();
}));
execution.start(jobRunner);
"""

# 40 records at half a second each: a map of about 20 s that reports its records as it goes.
SLOW = """const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 1;
execution.setInputFn(async function input() { return Array.from({length: 40}, (_, i) => i); });
execution.addStage(new MapStage(async function map(x) {
  for (const [, n] of x) {
    await new Promise(resolve => setTimeout(resolve, 500));
    context.emit(n % 4, 1);
  }
  await context.onComplete();
}));
execution.addStage(new ReduceStage(async function reduce(keyToValues) {
  for (const key in keyToValues) context.emit(key, keyToValues[key].length);
  await context.onComplete();
}));
execution.start(jobRunner);
"""


@dataclass(frozen=True)
class Screen:
    """A page to check: who looks at it, its path (with {names} of the world's ids, or of the fixture
    it ``needs``), the status it answers, and what must be visible on it (CSS selectors)."""

    name: str
    role: str  # anonymous | admin | coordinator | worker
    path: str
    status: int = 200
    shows: tuple[str, ...] = ()
    needs: str = ""  # a fixture that puts the page in its state (a run queued or running)


WORKER_ROWS = "table.workers-table tbody tr"  # a connected browser each (no row says "No worker is connected")
SCREENS = [
    Screen("login", "anonymous", "/login"),
    Screen("enrol", "anonymous", "/enrol/{enrol_token}"),
    Screen("worker-start", "anonymous", "/worker/start", shows=("#start-status[role=alert]",)),
    Screen("overview-admin", "admin", "/ui", shows=("#plot-fleet svg", "#plot-tasks svg", "#plot-bytes svg")),
    Screen("overview-coordinator", "coordinator", "/ui", shows=("#plot-fleet svg",)),
    Screen("overview-worker", "worker", "/ui", shows=("#plot-own svg", "#plot-own-tasks svg", "#served-runs li")),
    Screen("jobs", "admin", "/ui/jobs"),
    Screen("job-new", "coordinator", "/ui/jobs/new"),
    Screen("job-editor", "admin", "/ui/jobs/{job}"),
    Screen("job-run-dialog", "admin", "/ui/jobs/{job}/run"),
    Screen("runs", "admin", "/ui/runs"),
    Screen("runs-coordinator", "coordinator", "/ui/runs"),
    Screen("run-succeeded", "admin", "/ui/runs/{run}"),
    Screen("run-failed", "admin", "/ui/runs/{failed_run}"),
    Screen("run-queued", "admin", "/ui/runs/{queued_run}", shows=("#cancel-run", "#run-wait"), needs="queued_run"),
    Screen(
        "run-running",
        "admin",
        "/ui/runs/{running_run}",
        shows=("#cancel-run", '.stage-estimate:has-text(" left (from run ")', "td.throughput:has-text('records/s')"),
        needs="running_run",
    ),
    Screen("stage", "admin", "/ui/runs/{run}/stages/A/0"),
    Screen(
        "stage-running",
        "admin",
        "/ui/runs/{running_run}/stages/A/0",
        shows=('#stage-eta:has-text("from run")',),
        needs="running_run",
    ),
    Screen("workers-admin", "admin", "/ui/workers", shows=(WORKER_ROWS,)),
    Screen("workers-coordinator", "coordinator", "/ui/workers", shows=(WORKER_ROWS,)),
    Screen("workers-worker", "worker", "/ui/workers", shows=(WORKER_ROWS,)),
    Screen("worker-runs", "admin", "/ui/workers/{worker_id}/runs", shows=("tr[data-run]",)),
    Screen("storage", "admin", "/ui/storage"),
    Screen("bucket", "admin", "/ui/storage/buckets/{bucket}"),
    Screen("object", "admin", "/ui/storage/object/{bucket}/{key}"),
    Screen("cloud", "coordinator", "/ui/cloud"),
    Screen("billing", "coordinator", "/ui/billing"),
    Screen("statement", "coordinator", "/ui/statements/{statement}"),
    Screen("payments", "worker", "/ui/payments"),
    Screen("admin-accounts", "admin", "/ui/admin/accounts"),
    Screen("admin-enrolment", "admin", "/ui/admin/enrolment"),
    Screen("admin-turn", "admin", "/ui/admin/turn"),
    Screen("admin-billing", "admin", "/ui/admin/billing"),
    Screen("admin-settings", "admin", "/ui/admin/settings"),
    Screen("admin-audit", "admin", "/ui/admin/audit"),
    Screen("tokens", "coordinator", "/ui/tokens"),
    Screen("password", "coordinator", "/ui/account/password"),
    Screen("worker-page", "worker", "/worker"),
    Screen("not-found", "admin", "/ui/no-such-page", status=404),
    Screen("refused", "worker", "/ui/runs", status=403),
]

# Tables cut off by their card: visible tables wider than the card with no scrolling box between.
CLIPPED_TABLES = """() => [...document.querySelectorAll('table')].filter(t => t.offsetParent !== null).map(t => {
  const card = t.closest('.panel, .card, dialog, main');
  const edge = card.getBoundingClientRect().right + 1;
  if (t.getBoundingClientRect().right <= edge) return null;
  for (let el = t; el && el !== card; el = el.parentElement) {
    const overflow = getComputedStyle(el).overflowX;
    if ((overflow === 'auto' || overflow === 'scroll') && el.getBoundingClientRect().right <= edge) return null;
  }
  return t.id || t.className || 'a table';
}).filter(Boolean)"""

# The outermost elements past the window's right edge: what makes a page scroll sideways.
TOO_WIDE = """() => [...document.querySelectorAll('body *')].filter(el => {
  const past = e => e.getBoundingClientRect().right > window.innerWidth + 1;
  if (!past(el) || !el.parentElement || past(el.parentElement)) return false;
  for (let up = el.parentElement; up; up = up.parentElement) {
    if (getComputedStyle(up).overflowX !== 'visible') return false;  // clipped or scrolled there
  }
  return true;
}).slice(0, 3).map(el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
  (typeof el.className === 'string' && el.className ? '.' + el.className.trim().split(/\\s+/).join('.') : ''))"""

SERIOUS = """async () => {
  const result = await axe.run(document, {resultTypes: ['violations']});
  return result.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')
    .map(v => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.slice(0, 3).map(n => n.target.join(' ')).join(', ')}`);
}"""


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    # A fleet sample every second, so the Overview's plots fill while the module runs.
    env = {"PEERMR_METRICS_SAMPLE_SECONDS": "1"}
    server = Appliance(tmp_path_factory.mktemp("every-page") / "data", env=env).start()
    server.add_user(COORDINATOR, "coordinator", PASSWORD)
    server.add_user(WORKER, "worker", PASSWORD)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def fleet(appliance, chromium, token) -> list:
    """Two worker tabs, connected while the module runs: the admin's, and one of the worker account's."""
    workers_token = appliance.cli("token", "create", WORKER).stdout.strip().split()[-1]
    accounts = [Workers(chromium, appliance, token), Workers(chromium, appliance, workers_token)]
    for tabs in accounts:
        tabs.add(1)
    yield [tab for tabs in accounts for tab in tabs.tabs]
    for tabs in accounts:
        for tab in list(tabs.tabs):
            tabs.close(tab)


def last_months_statement(appliance: Appliance) -> int:
    """The coordinator's statement of last month: an hour of CPU then, priced and closed with `peermr bill`."""
    cleo = account_id(appliance, COORDINATOR)
    last = periods.preceding(periods.of(dt.datetime.now(dt.UTC), dt.UTC))
    at = periods.bounds(last, dt.UTC)[0] + dt.timedelta(days=2)
    run_python(
        appliance,
        f"""
        from appliance.billing import prices
        await prices.set_price("cpu_ms", "0.60", "0.40", dt.date(2026, 1, 1), tz=billing.tz)
        at = dt.datetime.fromisoformat({at.isoformat()!r})
        await ledger.record([Entry({cleo}, "cpu_ms", "consumer", 3_600_000, "e2e:cpu", at)], billing.tz)
        """,
    )
    assert appliance.cli("bill", "--period", last).returncode == 0
    [(statement,)] = appliance.query(f"SELECT id FROM billing_statement WHERE account = {cleo} AND kind = 'consumer'")
    return statement


@pytest.fixture(scope="module")
def world(appliance, fleet, api) -> dict:
    """What the pages show: a succeeded word count, a failed run, a slow job that succeeded (its next
    run has something to be estimated by), a bucket with an object, an enrolment link, a statement."""
    # The example as it is (its files come with the appliance), on both tabs.
    run = save_and_run(api, "word count", (ROOT / "docs/examples/wordcount.js").read_text(), workerCount=2)
    assert wait_for_run(api, run)["state"] == "succeeded", appliance.log()[-3000:]
    failed_run = save_and_run(api, "fails on two", FAILS)
    assert wait_for_run(api, failed_run)["state"] == "failed"
    slow_run = save_and_run(api, "slow", SLOW)  # runs while the first screens are taken
    assert api.put("/buckets/sweep-data").status_code == 201
    key = "notes/read me.txt"
    assert api.put(f"/buckets/sweep-data/objects/{key}", content=b"hello\n").status_code == 201
    with Client(appliance.url) as admin:
        admin.login(ADMIN_EMAIL, ADMIN_PASSWORD)
        accounts = admin.get("/ui/admin/accounts").text
        worker_id = re.search(r'id="account-(\d+)" data-email="' + re.escape(WORKER), accounts)[1]
        created = admin.form("/ui/admin/enrolment", {"account_id": worker_id, "label": "desk 4", "valid_hours": "24"})
        enrol_token = re.search(r"/enrol/([A-Za-z0-9_-]+)", created.text)[1]
    job = api.get(f"/runs/{run}").json()["job_id"]
    return {"job": job, "run": run, "failed_run": failed_run, "bucket": "sweep-data", "key": "notes/read%20me.txt",
            "enrol_token": enrol_token, "slow_run": slow_run, "slow_job": api.get(f"/runs/{slow_run}").json()["job_id"],
            "statement": last_months_statement(appliance),
            "worker_id": fleet[0].locator("#worker-id").inner_text()}  # fmt: skip


@pytest.fixture
def queued_run(api, world):
    """A run that waits: it asks more workers than are connected."""
    run = save_and_run(api, "waits for many", FAILS.replace("workerCount = 1", "workerCount = 40"))
    yield run
    api.post(f"/runs/{run}/cancel")


@pytest.fixture
def running_run(api, world):
    """A run of the slow job while it runs, once it reported records (its last run took about 20 s)."""
    assert wait_for_run(api, world["slow_run"])["state"] == "succeeded"
    run = api.post(f"/jobs/{world['slow_job']}/runs", json={}).json()["id"]
    for _ in range(200):
        found = api.get(f"/runs/{run}").json()
        if any(p["stage"] == 0 and p["emits"] for p in found["progress"]):
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"run {run} reported no records: {found}")
    yield run
    api.post(f"/runs/{run}/cancel")


def sign_in(context: BrowserContext, url: str, email: str, password: str) -> None:
    page = context.new_page()
    page.goto(f"{url}/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/ui"))
    page.close()


@pytest.fixture(scope="module")
def contexts(chromium: Browser, appliance, world):
    """A browser context per role (the CSP is bypassed so the test can load axe-core)."""
    made = {}
    for role, (email, password) in {
        "anonymous": (None, None),
        "admin": (ADMIN_EMAIL, ADMIN_PASSWORD),
        "coordinator": (COORDINATOR, PASSWORD),
        "worker": (WORKER, PASSWORD),
    }.items():
        context = chromium.new_context(bypass_csp=True)
        context.set_default_timeout(30_000)
        if email:
            sign_in(context, appliance.url, email, password)
        made[role] = context
    yield made
    for context in made.values():
        context.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    folder = tmp_path_factory.mktemp("screenshots")
    yield folder
    print(f"\nscreenshots: {folder}")


@pytest.mark.parametrize("screen", SCREENS, ids=[s.name for s in SCREENS])
def test_the_page_fits_a_laptop_and_a_phone_and_axe_finds_nothing_serious(
    screen, appliance, world, contexts, shots, request
):
    ids = world | ({screen.needs: request.getfixturevalue(screen.needs)} if screen.needs else {})
    page = contexts[screen.role].new_page()
    problems = []
    try:
        for width_name, (width, height) in WIDTHS.items():
            page.set_viewport_size({"width": width, "height": height})
            response = page.goto(appliance.url + screen.path.format(**ids), wait_until="load")
            assert response.status == screen.status, f"{screen.path}: {response.status}"
            page.wait_for_function("document.readyState === 'complete'")
            for selector in screen.shows:  # what the page is checked with
                expect(page.locator(selector).first).to_be_visible()
            page.screenshot(path=shots / f"{screen.name}-{width_name}.png", full_page=True)
            bar = page.evaluate("document.querySelector('header.topbar').getBoundingClientRect().height")
            if width_name == "phone" and bar > TOP_BAR_SHARE * height:
                problems.append(f"{width_name}: the top bar takes {bar:.0f} px of {height} px")
            wider = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            if wider > 0:
                culprits = ", ".join(page.evaluate(TOO_WIDE))
                problems.append(f"{width_name}: the page scrolls sideways by {wider} px ({culprits})")
            for table in page.evaluate(CLIPPED_TABLES):
                problems.append(f"{width_name}: table {table} is cut off by its card")
            page.add_script_tag(path=str(AXE))
            for violation in page.evaluate(SERIOUS):
                problems.append(f"{width_name}: {violation}")
    finally:
        page.close()
    assert not problems, f"{screen.name} ({screen.path}):\n" + "\n".join(problems)


# -- what the pages do, on the same appliance ----------------------------------------------------


@pytest.fixture
def admin_page(contexts):
    page = contexts["admin"].new_page()
    yield page
    page.close()


def test_the_output_viewer_counts_sorts_searches_and_pages_in_the_url(admin_page, appliance, world, api):
    page, run = admin_page, world["run"]
    counts = dict(json.loads(line) for line in api.get(f"/runs/{run}/output").text.splitlines())
    page.goto(f"{appliance.url}/ui/runs/{run}")
    expect(page.locator("#output-total")).to_contain_text(f"{len(counts)} records in group A")
    # Sorting by value: the header toggles the order, and the address follows.
    page.locator("#output-records th").get_by_role("link", name="Value").click()
    expect(page).to_have_url(re.compile(r"sort=value"))
    page.locator("#output-records th").get_by_role("link", name="Value").click()
    expect(page).to_have_url(re.compile(r"sort=-value"))
    top = max(counts.values())
    expect(page.locator("#output-records tbody tr").first.locator("td").nth(2)).to_have_text(str(top))
    # The next page is an address of its own: a reload stays there.
    page.get_by_role("link", name="Next →").click()
    expect(page).to_have_url(re.compile(r"page=2"))
    page.reload()
    expect(page.locator("#output-records")).to_have_attribute("data-page", "2")
    expect(page.locator("#output-records tbody tr").first.locator("td").first).to_have_text("101")
    # Searching keys and values.
    page.get_by_label("Search keys and values").fill("browsers")
    page.locator("#output-filters").get_by_role("button", name="Show").click()
    expect(page).to_have_url(re.compile(r"search=browsers"))
    matching = [k for k in counts if "browsers" in k.lower() or "browsers" in str(counts[k])]
    expect(page.locator("#output-total")).to_contain_text(f"{len(matching)} match")
    expect(page.locator("#output-records tbody tr")).to_have_count(len(matching))


def test_the_log_viewer_filters_links_a_line_and_shows_the_line_of_the_job_script(admin_page, appliance, world):
    page, run = admin_page, world["failed_run"]
    page.goto(f"{appliance.url}/ui/runs/{run}")
    log = page.locator("#log-lines")
    # The stack trace names the line of the job script (line 6, `new Error`) and the stage.
    expect(log).to_contain_text("at map (job.js:6:28, in stage 1 (map))")
    expect(page.locator("#run-reason")).to_contain_text("two is not allowed (at job.js:6:28, in stage 1 (map))")
    expect(page.locator("#log-follow")).to_be_checked()
    page.get_by_label("Level").select_option("error")
    expect(page).to_have_url(re.compile(r"level=error"))
    expect(log.locator(".log-line")).to_have_count(2)  # the task's failure and the run's
    page.get_by_label("Search", exact=True).fill("queued")
    page.locator("#log-filters").get_by_role("button", name="Show").click()
    expect(log.locator(".log-line")).to_have_count(0)
    page.get_by_role("link", name="All lines").click()
    first = log.locator(".log-line").first
    line_id = first.get_attribute("id")
    first.locator("a.log-anchor").click()
    expect(page).to_have_url(re.compile(rf"line={line_id[1:]}#{line_id}$"))
    page.reload()
    expect(page.locator(f"#{line_id}")).to_be_in_viewport()
    assert page.evaluate(f"document.querySelector('#{line_id}').matches(':target')")
    expect(page.locator("#log-follow")).not_to_be_checked()


def test_the_stage_page_says_where_in_the_job_script_a_task_failed(admin_page, appliance, world):
    admin_page.goto(f"{appliance.url}/ui/runs/{world['failed_run']}/stages/A/0")
    failed = admin_page.locator("#stage-tasks-table tr[data-state=failed]")
    expect(failed).to_contain_text("two is not allowed (at job.js:6:28, in stage 1 (map))")


def test_a_refused_change_of_the_last_admin_keeps_its_row(admin_page, appliance):
    page = admin_page
    page.goto(f"{appliance.url}/ui/admin/accounts")
    row = page.locator(f'tr[data-email="{ADMIN_EMAIL}"]')
    row.get_by_role("button", name="Disable").click()
    expect(page.get_by_role("alert")).to_contain_text("last active admin")
    expect(row).to_be_visible()
    expect(row).not_to_have_class(re.compile(r"htmx-(added|settling)"))  # htmx has taken the new row in
    # The refusal's row replaces the one whose select says "worker": wait for it, not for the alert,
    # which the Disable above left with the same words.
    with page.expect_response(lambda r: r.url.endswith("/role") and r.request.method == "POST"):
        row.get_by_label(f"Role of {ADMIN_EMAIL}").select_option("worker")
    expect(page.get_by_role("alert")).to_contain_text("last active admin")
    expect(row.get_by_label(f"Role of {ADMIN_EMAIL}")).to_have_value("admin", timeout=15_000)
    expect(row.get_by_role("button", name="Disable")).to_be_visible()


def test_a_run_is_cancelled_from_its_row_and_the_list_keeps_its_filter(admin_page, appliance, api, world):
    page = admin_page
    run = save_and_run(api, "waits for many", FAILS.replace("workerCount = 1", "workerCount = 40"))
    page.goto(f"{appliance.url}/ui/runs?state=queued")
    row = page.locator(f"#run-{run}")
    expect(row).to_be_visible()
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name=f"Cancel run {run}").click()
    expect(page.get_by_role("status")).to_contain_text(f"Run {run} cancelled.")
    expect(page).to_have_url(re.compile(r"/ui/runs\?state=queued$"))
    expect(row).to_have_count(0)
    expect(page.locator("#no-runs")).to_contain_text("No run matches these filters")


def test_a_new_token_has_a_copy_button_and_a_bad_bucket_name_gets_a_reason(chromium, appliance, world):
    context = chromium.new_context(permissions=["clipboard-read", "clipboard-write"])
    try:
        sign_in(context, appliance.url, COORDINATOR, PASSWORD)
        page = context.new_page()
        page.goto(f"{appliance.url}/ui/tokens")
        page.get_by_label("Name").fill("laptop")
        page.get_by_role("button", name="Create token").click()
        token = page.locator("#new-token").inner_text().strip()
        page.get_by_role("button", name="Copy").click()
        expect(page.get_by_role("button", name="Copied")).to_be_visible()
        assert page.evaluate("navigator.clipboard.readText()") == token
        # A bucket name the rules refuse gets the appliance's reason, not the browser's.
        page.goto(f"{appliance.url}/ui/storage")
        page.get_by_label("Name").fill("Bad_Name")
        page.get_by_role("button", name="Create bucket").click()
        expect(page.get_by_role("alert")).to_contain_text("may contain only lowercase letters")
        expect(page.get_by_label("Name")).to_have_value("Bad_Name")
    finally:
        context.close()


def test_the_runs_bucket_says_what_it_is(admin_page, appliance, world):
    # The word count kept its output in the admin's runs bucket, which the appliance made.
    admin_page.goto(f"{appliance.url}/ui/storage")
    note = admin_page.locator(".runs-bucket-note")
    expect(note).to_have_count(1)
    expect(note).to_contain_text("Made by the appliance: the output of your runs as files")


def test_after_an_admins_disconnect_the_worker_page_says_so_and_clearing_asks_first(chromium, appliance, world):
    context = chromium.new_context()  # a tab of its own, so its store is nobody else's
    context.set_default_timeout(30_000)
    sign_in(context, appliance.url, WORKER, PASSWORD)
    page = context.new_page()
    try:
        page.goto(f"{appliance.url}/worker")
        expect(page.locator("#connection")).to_have_text("connected", timeout=60_000)
        expect(page.locator("#state")).to_have_text("waiting for work")
        # Clearing asks first: dismissed, nothing is deleted.
        asked = []
        page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
        page.get_by_role("button", name="Clear my stored data").click()
        for _ in range(300):  # the dialog handler runs beside the click
            if asked:
                break
            page.wait_for_timeout(100)
        assert asked and "cannot be undone" in asked[0]
        expect(page.locator("#note")).to_have_text("")
        worker_id = page.locator("#worker-id").inner_text()
        with Client(appliance.url) as admin:
            admin.login(ADMIN_EMAIL, ADMIN_PASSWORD)
            assert admin.form(f"/ui/workers/{worker_id}/disconnect").status_code == 303
        expect(page.locator("#note")).to_contain_text("disconnected by an administrator")
        expect(page.locator("#state")).to_have_text("nothing: not connected")
        expect(page.locator("#pause")).to_be_disabled()
        expect(page.locator("#connection")).to_have_text("disconnected")
    finally:
        context.close()
