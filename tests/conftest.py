import pytest

from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance


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
