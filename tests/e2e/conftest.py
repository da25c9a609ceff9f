import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from tests.s3_server import MotoServer
from tests.support import ADMIN_EMAIL, Appliance

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # The test machine is loaded (its CPU pressure is often critical), which would pause every worker
    # tab; tests/e2e/test_worker_courtesy.py emulates pressure in a browser of its own instead.
    "--disable-blink-features=ComputePressure",
]


# Module scope: Playwright's sync API keeps an event loop running while it is open,
# which would stop asyncio tests collected after the e2e modules.
@pytest.fixture(scope="module")
def chromium():
    """Debian's Chromium, headless, driven by Playwright."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium):
    context = chromium.new_context()
    context.set_default_timeout(30_000)
    page = context.new_page()
    yield page
    context.close()


# For modules that run jobs: they define `appliance`; these give the admin's API token and client,
# and four worker tabs.


@pytest.fixture(scope="module")
def token(appliance):
    return appliance.cli("token", "create", ADMIN_EMAIL).stdout.strip().split()[-1]


@pytest.fixture(scope="module")
def api(appliance, token):
    client = httpx.Client(base_url=appliance.url + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60)
    yield client
    client.close()


class Workers:
    """Worker tabs, each in its own browser context (own cookies and IndexedDB)."""

    def __init__(self, chromium, appliance: Appliance, token: str):
        self.chromium, self.appliance, self.token = chromium, appliance, token
        self.tabs: list = []

    def add(self, count: int = 1) -> None:
        for _ in range(count):
            context = self.chromium.new_context()
            page = context.new_page()
            page.goto(f"{self.appliance.url}/worker/start#token={self.token}")
            expect(page.locator("#connection")).to_have_text("connected", timeout=60_000)
            self.tabs.append(page)

    def close(self, page) -> None:
        self.tabs.remove(page)
        page.context.close()

    def busy(self) -> list:
        return [t for t in self.tabs if t.evaluate("window.peermrWorker.state") == "busy"]


@pytest.fixture(scope="module")
def workers(chromium, appliance, token):
    fleet = Workers(chromium, appliance, token)
    fleet.add(4)
    yield fleet
    for page in list(fleet.tabs):
        fleet.close(page)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto's S3-compatible server, for s3 runs."""
    server = MotoServer(tmp_path_factory.mktemp("moto")).start()
    yield server
    server.stop()
