import os

import pytest
from hypothesis import settings

from appliance.config import ENV_PREFIX, FIELDS
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance

# Property tests check what comes out, never how fast: a loaded CI machine (or a first call into
# V8) must not fail an example on hypothesis's per-example deadline.
settings.register_profile("peermr", deadline=None)
settings.load_profile("peermr")

# Every appliance the tests start checks the job engine's invariants after each step: a step that
# breaks one fails its run as engine-error, which the test sees (bench/ measures without the checks).
os.environ.setdefault("PEERMR_ENGINE_CHECKS", "true")


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
