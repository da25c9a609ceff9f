"""The Jobs and Runs pages in a real browser: the CodeMirror editor, the run dialog, the live run page."""

from __future__ import annotations

import asyncio
import re
import threading

import pytest
from playwright.sync_api import Page, expect

from tests.sim_workers import cookie_of, start_workers
from tests.support import Appliance, Client

pytestmark = pytest.mark.e2e
EMAIL = "coco@example.com"
PASSWORD = "coco-password-1"

SCRIPT = """const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 2;
execution.setInputFn(async function input() { return []; });
execution.addStage(new MapStage(async function map(x) {
  await context.onComplete();
}));
execution.start(jobRunner);
"""


@pytest.fixture(scope="module")
def coordinator(appliance: Appliance):
    appliance.add_user(EMAIL, "coordinator", PASSWORD)
    return EMAIL


def sign_in(page: Page, appliance: Appliance) -> None:
    page.goto(f"{appliance.url}/login")
    page.get_by_label("Email").fill(EMAIL)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Overview", exact=True)).to_be_visible()


def new_job(page: Page, appliance: Appliance, name: str) -> None:
    """Signed in, the editor saves SCRIPT as a new job and shows it."""
    sign_in(page, appliance)
    page.goto(f"{appliance.url}/ui/jobs/new")
    page.get_by_label("Name").fill(name)
    page.evaluate("t => window.jobEditor.setValue(t)", SCRIPT)
    page.get_by_role("button", name="Save").click()
    expect(page).to_have_url(re.compile(r"/ui/jobs/\d+$"))


class SimulatedWorkers:
    """Simulated workers (tests/sim_workers.py) on an event loop of their own, beside Playwright's."""

    def __init__(self, appliance: Appliance, count: int):
        self.client = Client(appliance.url)
        self.client.login(EMAIL, PASSWORD)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.workers = self._call(start_workers(appliance.url, cookie_of(self.client), count))

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def close(self) -> None:
        async def close_all():
            for worker in self.workers:
                await worker.close()

        self._call(close_all())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.client.close()


def test_the_editor_highlights_indents_and_marks_a_syntax_error(page: Page, appliance: Appliance, coordinator):
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    sign_in(page, appliance)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
    page.get_by_role("link", name="New job").click()
    expect(page).to_have_url(re.compile(r"/ui/jobs/new$"))

    # CodeMirror replaced the textarea: line numbers and JavaScript highlighting.
    editor = page.locator(".CodeMirror")
    expect(editor).to_be_visible()
    expect(page.locator("textarea#script")).to_be_hidden()
    assert page.locator(".CodeMirror-linenumber").count() > 20
    expect(editor.locator(".cm-keyword", has_text="const").first).to_be_visible()
    expect(editor.locator(".cm-string", has_text="'pmrfs'").first).to_be_visible()
    assert "new JobExecution(" in page.evaluate("window.jobEditor.getValue()")

    # Tab inserts indentation (two spaces) instead of leaving the editor.
    page.evaluate("t => window.jobEditor.setValue(t)", SCRIPT)
    page.evaluate("window.jobEditor.focus(); window.jobEditor.setCursor({line: 1, ch: 0})")
    page.keyboard.press("Tab")
    assert page.evaluate("window.jobEditor.getLine(1)") == "  execution.workerCount = 2;"
    expect(page.locator(".CodeMirror-focused")).to_have_count(1)
    page.keyboard.press("Shift+Tab")
    assert page.evaluate("window.jobEditor.getLine(1)") == "execution.workerCount = 2;"

    # A syntax error: the page says where, the editor marks and jumps to that line, the text stays.
    page.get_by_label("Name").fill("e2e job")
    page.evaluate("window.jobEditor.replaceRange('(', {line: 4, ch: 27}, {line: 4, ch: 28})")
    broken = page.evaluate("window.jobEditor.getValue()")
    assert "await context.onComplete((;" in broken
    page.get_by_role("button", name="Save").click()
    alert = page.locator("#script-error")
    expect(alert).to_contain_text("line 5")
    expect(page.locator(".CodeMirror .cm-error-line")).to_have_count(1)
    expect(page.locator(".CodeMirror")).to_have_attribute("data-error-line", "5")
    assert page.evaluate("window.jobEditor.getCursor().line") == 4
    assert page.evaluate("window.jobEditor.getValue()") == broken
    assert page.evaluate("window.jobEditor.lineInfo(4).bgClass") == "cm-error-line"

    # Fixed and saved: the job page, with its Run button.
    page.evaluate("window.jobEditor.replaceRange(')', {line: 4, ch: 27}, {line: 4, ch: 28})")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("Job e2e job saved.")
    expect(page).to_have_url(re.compile(r"/ui/jobs/\d+$"))
    expect(page.locator(".CodeMirror .cm-error-line")).to_have_count(0)
    assert page.evaluate("window.jobEditor.getValue()") == SCRIPT
    assert not [e for e in errors if "Content Security Policy" in e], errors


def test_the_run_dialog_starts_a_run_and_the_run_page_follows_it(page: Page, appliance: Appliance, coordinator):
    new_job(page, appliance, "dialog job")

    # The Run button opens the dialog, prefilled from the script (workerCount = 2).
    page.get_by_role("link", name="Run…").click()
    dialog = page.locator("dialog#run-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_label("Workers per group")).to_have_value("2")
    expect(dialog.get_by_label("Groups")).to_have_value("1")
    expect(dialog.get_by_label("Keep intermediate output")).to_be_checked()
    expect(dialog.get_by_label("Private mode")).not_to_be_checked()
    dialog.get_by_role("link", name="Cancel").click()
    expect(dialog).to_be_hidden()

    # A value the server refuses is shown in the dialog, which stays open.
    page.get_by_role("link", name="Run…").click()
    page.evaluate("document.querySelector('#run-form').noValidate = true")
    dialog.get_by_label("Groups").fill("27")
    dialog.get_by_role("button", name="Start run").click()
    expect(dialog.locator("#run-error")).to_contain_text("groupCount")
    expect(dialog).to_be_visible()
    dialog.get_by_label("Groups").fill("1")
    dialog.get_by_label("Seed").fill("7")
    dialog.get_by_role("button", name="Start run").click()

    # The run page: queued (no workers yet), watched live.
    expect(page).to_have_url(re.compile(r"/ui/runs/\d+$"))
    state = page.locator("#run-state")
    expect(state).to_have_text("queued")
    expect(page.locator("#run-wait")).to_contain_text("asks 2, 0 connected, 0 eligible")
    expect(page.locator("#log-lines")).to_contain_text("queued: needs 2 worker(s)")

    # Workers join: the polled fragment shows the run succeed without a reload.
    page.evaluate("window.__marker = 'same page'")
    workers = SimulatedWorkers(appliance, 2)
    try:
        expect(state).to_have_text("succeeded", timeout=30_000)
    finally:
        workers.close()
    assert page.evaluate("window.__marker") == "same page"
    expect(page.locator("#progress progress").first).to_have_attribute("value", "100")  # a percent
    expect(page.locator(".tl-row[data-worker]")).to_have_count(2)
    expect(page.locator("#log-lines")).to_contain_text("started on 2 worker(s)")
    expect(page.locator("#output-empty")).to_be_visible()
    expect(page.locator("#cancel-run")).to_have_count(0)


def test_the_run_dialog_offers_the_workers_that_are_connected(page: Page, appliance: Appliance, coordinator):
    new_job(page, appliance, "offer job")
    workers = SimulatedWorkers(appliance, 1)
    try:
        # The script asks 2, one is connected: the dialog offers to run on that one.
        page.get_by_role("link", name="Run…").click()
        dialog = page.locator("dialog#run-dialog")
        # The line is polled every 5 s: the worker may have said hello just after the dialog opened.
        expect(dialog.locator("#run-capacity")).to_contain_text("1 worker connected", timeout=15_000)
        dialog.get_by_role("button", name="Use the 1 connected").click()
        expect(dialog.get_by_label("Workers per group")).to_have_value("1")
        expect(dialog.locator("#run-capacity")).to_contain_text("it can start now")
        dialog.get_by_role("button", name="Start run").click()
        expect(page).to_have_url(re.compile(r"/ui/runs/\d+$"))
        expect(page.locator("#run-state")).to_have_text("succeeded", timeout=30_000)
    finally:
        workers.close()


def test_cancel_on_the_run_page(page: Page, appliance: Appliance, coordinator):
    sign_in(page, appliance)
    page.goto(f"{appliance.url}/ui/jobs/new")
    page.get_by_label("Name").fill("cancel me")
    page.evaluate("t => window.jobEditor.setValue(t.replace('workerCount = 2', 'workerCount = 50'))", SCRIPT)
    page.get_by_role("button", name="Save").click()
    page.get_by_role("link", name="Run…").click()
    page.locator("dialog#run-dialog").get_by_role("button", name="Start run").click()
    expect(page).to_have_url(re.compile(r"/ui/runs/\d+$"))
    state = page.locator("#run-state")
    expect(state).to_have_text("queued")
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Cancel run").click()
    expect(state).to_have_text("cancelled")
    expect(page.locator("#run-reason")).to_contain_text("cancelled by its coordinator")
    expect(page.get_by_role("status")).to_contain_text("cancelled")
    # Finished: the fragment stopped polling.
    expect(page.locator("#run-live")).not_to_have_attribute("hx-trigger", re.compile("every"))
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Runs").click()
    expect(page.locator("#run-list tr[data-state='cancelled']").first).to_be_visible()
