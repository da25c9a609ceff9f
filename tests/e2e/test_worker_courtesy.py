"""Courtesy on employees' machines, in real Chromium: a worker tab uses its share of the cores and
says so, stops taking work on battery and under serious CPU pressure and resumes after, and the
scheduler prefers a plugged-in tab.

Power: Chromium's DevTools protocol has no battery emulation (Emulation has no such command; checked
against /json/protocol of Chromium 156), so the tabs' navigator.getBattery is replaced by an init
script with a BatteryManager-like object the test plugs and unplugs. CPU pressure and the number of
cores are Chromium's own emulation (Emulation.setPressureStateOverride,
Emulation.setHardwareConcurrencyOverride). One appliance and two tabs for the module, in a Chromium
launched with the Compute Pressure API on (the shared one turns it off: this machine's real pressure
is often critical).
"""

from __future__ import annotations

import datetime as dt
import html
import re
import time

import pytest
from playwright.sync_api import expect

from tests.browsers import launch
from tests.integration.test_job_scheduling import job_script
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance

pytestmark = pytest.mark.e2e

FAKE_BATTERY = """
(() => {
  const battery = new EventTarget();
  Object.assign(battery, {charging: true, level: 0.8, chargingTime: 0, dischargingTime: Infinity});
  window.__setCharging = charging => {
    battery.charging = charging;
    battery.dispatchEvent(new Event('chargingchange'));
  };
  Object.defineProperty(Navigator.prototype, 'getBattery', {value: () => Promise.resolve(battery), configurable: true});
})();
"""
# Half of the cores (the default), any time of day, pausing while the computer is busy (the default).
COURTESY = {"core_share_percent": "50", "pause_when_busy": "true"}
NO_BATTERY_API = "Object.defineProperty(Navigator.prototype, 'getBattery', {value: undefined, configurable: true});"


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    server = Appliance(tmp_path_factory.mktemp("courtesy") / "data").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def admin(appliance):
    client = appliance.client()
    client.login(ADMIN_EMAIL, ADMIN_PASSWORD)
    assert client.form("/ui/admin/settings/courtesy", COURTESY).status_code == 303
    yield client
    client.close()


class Tab:
    """A worker tab in its own context, with its CDP session and the Web Workers it has open now."""

    def __init__(self, browser, appliance, token: str, *, cores: int, battery_script: str):
        self.context = browser.new_context()
        self.context.add_init_script(battery_script)
        self.page = self.context.new_page()
        self.page.set_default_timeout(60_000)
        self.cdp = self.context.new_cdp_session(self.page)
        self.cdp.send("Emulation.setHardwareConcurrencyOverride", {"hardwareConcurrency": cores})
        self.cdp.send("Emulation.setPressureSourceOverrideEnabled", {"enabled": True, "source": "cpu"})
        self.pressure("nominal")
        self.open_workers = 0
        self.most_workers = 0
        self.page.on("worker", self._worker_started)
        self.page.goto(f"{appliance.url}/worker/start#token={token}")
        expect(self.page.locator("#connection")).to_have_text("connected")
        self.worker_id = self.page.locator("#worker-id").inner_text()

    def _worker_started(self, worker) -> None:
        self.open_workers += 1
        self.most_workers = max(self.most_workers, self.open_workers)
        worker.on("close", lambda _: setattr(self, "open_workers", self.open_workers - 1))

    def pressure(self, state: str) -> None:
        self.cdp.send("Emulation.setPressureStateOverride", {"source": "cpu", "state": state})

    def tasks(self) -> int:
        return self.page.evaluate("window.peermrWorker.tasksStarted")

    def close(self) -> None:
        self.context.close()


@pytest.fixture(scope="module")
def tabs(playwright, appliance, token, admin):
    browser = launch(playwright.chromium, without=["ComputePressure"])
    laptop = Tab(browser, appliance, token, cores=6, battery_script=FAKE_BATTERY)
    desktop = Tab(browser, appliance, token, cores=2, battery_script=NO_BATTERY_API)
    yield laptop, desktop
    laptop.close()
    desktop.close()
    browser.close()


def worker_row(admin, worker_id: str) -> str:
    page = admin.get("/ui/workers/live").text
    return re.search(rf'<tr[^>]*data-worker="{worker_id}".*?</tr>', page, re.S).group(0)


def wait_until(predicate, timeout: float = 60, what: str = ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := predicate():
            return found
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what or predicate}")


def run(api, workers: int = 1) -> int:
    job = api.post("/jobs", json={"name": "courtesy", "script": job_script(workers=workers)})
    assert job.status_code == 201, job.text
    started = api.post(f"/jobs/{job.json()['id']}/runs", json={})
    assert started.status_code == 201, started.text
    return started.json()["id"]


def state_of(api, run_id: int) -> dict:
    return api.get(f"/runs/{run_id}").json()


def finished(api, run_id: int) -> dict:
    return wait_until(
        lambda: (r := state_of(api, run_id))["state"] in ("succeeded", "failed", "cancelled") and r, what="the run"
    )


def test_a_tab_uses_its_share_of_the_cores_and_says_so(tabs, admin):
    laptop, desktop = tabs
    # 50 % of 6 cores: 3 tasks at once; of 2 cores: 1.
    expect(laptop.page.locator("#capacity")).to_have_text("at most 3 tasks at once (50 % of 6 cores)")
    expect(desktop.page.locator("#capacity")).to_have_text("at most 1 task at once (50 % of 2 cores)")
    assert "6 cores (uses 3)" in worker_row(admin, laptop.worker_id)
    # The employee lowers it on the page: 20 % of 6 cores is one task, and the appliance hears it.
    laptop.page.locator("#share").fill("20")
    laptop.page.locator("#share").dispatch_event("change")
    expect(laptop.page.locator("#capacity")).to_have_text("at most 1 task at once (20 % of 6 cores)")
    wait_until(lambda: "6 cores (uses 1)" in worker_row(admin, laptop.worker_id), what="the new capacity")
    # Not above the admin's share: the page's control stops at 50 %.
    assert laptop.page.locator("#share").get_attribute("max") == "50"


def test_the_scheduler_prefers_the_plugged_in_tab_and_a_tab_runs_within_its_share(tabs, api):
    laptop, desktop = tabs
    before = laptop.tasks(), desktop.tasks()
    # Input, map and reduce: three tasks, all on one worker; the plugged-in laptop ranks before the
    # desktop whose browser cannot tell its power source.
    done = finished(api, run(api))
    assert done["state"] == "succeeded", done
    assert laptop.tasks() - before[0] == 3 and desktop.tasks() == before[1]
    # Its share is one task: never more than one Web Worker (task or sandbox started ahead) at once.
    assert laptop.most_workers == 1, laptop.most_workers
    expect(laptop.page.locator("#contributed")).to_contain_text(re.compile(r"^\d+ tasks, \d+ CPU seconds?"))


def test_on_battery_a_tab_stops_taking_work_and_resumes_when_plugged_in(tabs, api, admin):
    laptop, desktop = tabs
    desktop.page.get_by_role("button", name="Pause").click()  # only the laptop could take the run
    expect(desktop.page.locator("#state")).to_have_text("paused")
    try:
        laptop.page.evaluate("window.__setCharging(false)")
        expect(laptop.page.locator("#state")).to_have_text("paused: this computer is on battery")
        wait_until(lambda: "(this computer is on battery)" in worker_row(admin, laptop.worker_id))
        before = laptop.tasks()
        run_id = run(api)
        # The scheduler sees no worker it may use, and says why: both are connected, and paused.
        reason = wait_until(lambda: "2 connected (both paused: " in (r := state_of(api, run_id)["reason"] or "") and r)
        assert "1: this computer is on battery" in reason and "1: paused on the worker page" in reason, reason
        assert state_of(api, run_id)["state"] == "queued" and laptop.tasks() == before

        laptop.page.evaluate("window.__setCharging(true)")
        expect(laptop.page.locator("#state")).not_to_contain_text("paused")
        assert finished(api, run_id)["state"] == "succeeded"
        assert laptop.tasks() - before == 3
    finally:
        desktop.page.get_by_role("button", name="Resume").click()


def test_under_critical_pressure_an_idle_tab_pauses_and_resumes(tabs, api, admin):
    laptop, desktop = tabs
    before = laptop.tasks(), desktop.tasks()
    for tab in tabs:
        tab.pressure("critical")
    for tab in tabs:
        expect(tab.page.locator("#state")).to_have_text("paused: this computer is busy (critical CPU pressure)")
    run_id = run(api)
    # Connected, paused, and why: in the queue's reason, the Overview, the Workers page and the Run dialog.
    paused = "2 connected (both paused: this computer is busy (critical CPU pressure))"
    wait_until(lambda: paused in (state_of(api, run_id)["reason"] or ""), what="the queue's reason")
    overview = html.unescape(admin.get("/ui/overview/live").text)
    assert "2 workers connected, both paused: this computer is busy (critical CPU pressure): runs wait" in overview
    assert "2 connected, both paused: this computer is busy" in html.unescape(admin.get("/ui/workers/live").text)
    job_id = api.get(f"/runs/{run_id}").json()["job_id"]
    summary = api.post(f"/jobs/{job_id}/capacity", json={}).json()["summary"]
    assert summary.startswith("2 workers connected, both paused: this computer is busy (critical CPU pressure)")
    for tab in tabs:
        tab.pressure("fair")
    assert finished(api, run_id)["state"] == "succeeded"
    assert (laptop.tasks() - before[0]) + (desktop.tasks() - before[1]) == 3


def test_a_dedicated_machine_keeps_working_when_busy(tabs, api, admin):
    """Admin → Settings turns the busy check off: pages work on under critical pressure."""
    laptop, desktop = tabs
    assert admin.form("/ui/admin/settings/courtesy", {"core_share_percent": "50"}).status_code == 303
    try:
        for tab in tabs:
            tab.page.reload()  # a page takes the courtesy rules when it loads
            expect(tab.page.locator("#connection")).to_have_text("connected")
            expect(tab.page.locator("#worker")).not_to_contain_text("when the computer is busy")
            tab.pressure("critical")
        assert finished(api, run(api))["state"] == "succeeded"
        assert laptop.tasks() + desktop.tasks() == 3  # counted since the reload
        time.sleep(2)  # idle now under critical pressure: a page with the busy check would pause within a second
        for tab in tabs:
            expect(tab.page.locator("#state")).not_to_contain_text("paused")
    finally:
        assert admin.form("/ui/admin/settings/courtesy", COURTESY).status_code == 303
        for tab in tabs:
            tab.pressure("nominal")
            tab.page.reload()
            expect(tab.page.locator("#connection")).to_have_text("connected")


def test_outside_the_working_hours_a_tab_pauses(tabs, admin):
    _, desktop = tabs
    now = dt.datetime.now()  # the browser's clock and zone are this machine's
    start, end = now + dt.timedelta(hours=2), now + dt.timedelta(hours=3)
    hours = {"hours_from": start.strftime("%H:%M"), "hours_to": end.strftime("%H:%M")}
    assert admin.form("/ui/admin/settings/courtesy", {**COURTESY, **hours}).status_code == 303
    try:
        desktop.page.reload()
        expected = f"paused: outside the working hours ({hours['hours_from']}–{hours['hours_to']})"
        expect(desktop.page.locator("#state")).to_have_text(expected)
        expect(desktop.page.locator("#worker")).to_contain_text(f"outside {hours['hours_from']}–{hours['hours_to']}")
    finally:
        assert admin.form("/ui/admin/settings/courtesy", COURTESY).status_code == 303
    desktop.page.reload()
    expect(desktop.page.locator("#state")).to_have_text("waiting for work")


@pytest.mark.parametrize(
    "form,message",
    [
        ({"core_share_percent": "0"}, "The core share must be from 1 to 100 %, not 0."),
        ({"core_share_percent": "half"}, "The core share must be a percentage from 1 to 100, not 'half'."),
        ({"core_share_percent": "50", "hours_from": "25:00", "hours_to": "08:00"}, "not '25:00'"),
        ({"core_share_percent": "50", "hours_from": "18:00"}, "not ''"),
        ({"core_share_percent": "50", "hours_from": "08:00", "hours_to": "08:00"}, "start and end at the same time"),
        # Every bad field is named, not only the first.
        (
            {"core_share_percent": "0", "hours_from": "25:00", "hours_to": "8"},
            "The core share must be from 1 to 100 %, not 0. Working hours are two times like 18:00 and 08:00 "
            "(or both empty), not '25:00' or '8'.",
        ),
    ],
)
def test_bad_courtesy_settings_are_refused_and_change_nothing(admin, form, message):
    refused = admin.form("/ui/admin/settings/courtesy", form)
    assert refused.status_code == 400 and message in html.unescape(refused.text)
    assert 'name="core_share_percent" inputmode="decimal" value="50"' in admin.get("/ui/admin/settings").text


def test_a_worker_account_sees_its_earnings(appliance):
    appliance.add_user("wanda@example.com", "worker", "wanda-password-1")
    client = appliance.client()
    client.login("wanda@example.com", "wanda-password-1")
    page = html.unescape(client.get("/worker").text)
    assert "Your account's browsers: 0 CPU seconds" in page
    assert re.search(r'earned so far: <strong id="earnings">[^<]*0\.00[^<]*</strong>', page), page
    client.close()
