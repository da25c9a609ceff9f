import pytest
from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
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
