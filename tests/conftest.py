import httpx
import pytest
from hypothesis import settings
from playwright.sync_api import sync_playwright

from appliance.config import ENV_PREFIX, FIELDS
from tests import forkserver, parallel
from tests.browsers import Workers, launch
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance

# PostgreSQL, Redis and HAProxy started by the tests that ask for them (postgres_service, redis_service, ...).
pytest_plugins = ["tests.services"]

# Property tests check what comes out, never how fast: a loaded CI machine (or a first call into
# V8) must not fail an example on hypothesis's per-example deadline.
settings.register_profile("peermr", deadline=None)
settings.load_profile("peermr")


def pytest_configure(config):
    forkserver.enabled = True  # appliances and commands forked from one that imported the appliance


def pytest_collection_modifyitems(config, items):
    """The modules that drive browsers (those that use the session's Playwright, and the e2e ones that
    launch their own) run after the others, each as a whole: while Playwright's sync API is open it
    marks its event loop as running, and asyncio tests (or async fixtures) after it could not run
    theirs. So a module with browsers has no async tests. The tests of the one-file binary run last,
    when its build, started with the session, is done. Under xdist both are groups that
    tests/parallel.py schedules."""
    with_browsers = {
        item.module
        for item in items
        if "playwright" in getattr(item, "fixturenames", ()) or item.get_closest_marker("e2e")
    }

    def group(item) -> str | None:
        if item.get_closest_marker("binary"):
            return parallel.BINARY
        return parallel.BROWSERS if getattr(item, "module", None) in with_browsers else None

    order = {None: 0, parallel.BROWSERS: 1, parallel.BINARY: 2}
    items.sort(key=lambda item: order[group(item)])
    parallel.tell(config, {item.getparent(pytest.Module).nodeid: name for item in items if (name := group(item))})


def pytest_collection_finish(session):
    if not hasattr(session.config, "workerinput"):  # under xdist the controller starts it (below)
        start_the_build(session.config, any(item.get_closest_marker("binary") for item in session.items))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    start_the_build(node.config, parallel.BINARY in parallel.groups(node.config).values())


def start_the_build(config, wanted: bool) -> None:
    from tests.integration.test_binary import Building

    if wanted and not config.option.collectonly and Building.running is None:
        Building.start()  # beside the other tests: it takes minutes, once for the session


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    parallel.configure_node(node)


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # instead of xdist's
def pytest_xdist_make_scheduler(config, log):
    return parallel.BrowsersApart(config, log)


def pytest_sessionfinish(session):
    from tests.integration.test_binary import Building

    if Building.running:
        Building.running.stop()  # a session cut short (-x, Ctrl-C) leaves no build running


@pytest.fixture(scope="session")
def playwright():
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="session")
def chromium(playwright):
    """Debian's Chromium, headless, driven by Playwright: one for the session, a context per test or
    per module. Tests that stop a browser's process or need other flags launch their own."""
    browser = launch(playwright.chromium)
    yield browser
    browser.close()


@pytest.fixture
def page(chromium):
    context = chromium.new_context()
    context.set_default_timeout(30_000)
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture(scope="module")
def appliance_with(request, tmp_path_factory):
    """Starts an appliance on a data directory of its own, with settings by their name in Settings
    (``job_stall_seconds=3`` is PEERMR_JOB_STALL_SECONDS=3) and ``env`` for other variables; the
    module's end stops every appliance it started."""
    started: list[Appliance] = []

    def start(env: dict[str, str] | None = None, **settings) -> Appliance:
        if unknown := sorted(set(settings) - set(FIELDS)):
            raise TypeError(f"not settings of appliance/config.py: {', '.join(unknown)}")
        variables = {ENV_PREFIX + name.upper(): str(value) for name, value in settings.items()}
        server = Appliance(tmp_path_factory.mktemp(request.module.__name__) / "data", env={**variables, **(env or {})})
        started.append(server)  # stopped even if it fails to come up
        return server.start()

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def appliance(appliance_with):
    """One running appliance per test module, with a known admin login."""
    return appliance_with()


@pytest.fixture
def admin(appliance):
    client = appliance.client()
    client.login(ADMIN_EMAIL, ADMIN_PASSWORD)
    yield client
    client.close()


# For modules that run jobs in browsers: the admin's API token and client, and four worker tabs.


@pytest.fixture(scope="module")
def token(appliance):
    return appliance.cli("token", "create", ADMIN_EMAIL).stdout.strip().split()[-1]


@pytest.fixture(scope="module")
def api(appliance, token):
    client = httpx.Client(base_url=appliance.url + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60)
    yield client
    client.close()


@pytest.fixture(scope="module")
def workers(chromium, appliance, token):
    fleet = Workers(chromium, appliance, token)
    fleet.add(4)
    yield fleet
    for page in list(fleet.tabs):
        fleet.close(page)
