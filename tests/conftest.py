import pytest
from hypothesis import settings

from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance

# Property tests check what comes out, never how fast: a loaded CI machine (or a first call into
# V8) must not fail an example on hypothesis's per-example deadline.
settings.register_profile("peermr", deadline=None)
settings.load_profile("peermr")


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    """One running appliance per test module, with a known admin login."""
    server = Appliance(tmp_path_factory.mktemp("appliance") / "data").start()
    yield server
    server.stop()


@pytest.fixture
def admin(appliance):
    client = appliance.client()
    client.login(ADMIN_EMAIL, ADMIN_PASSWORD)
    yield client
    client.close()
