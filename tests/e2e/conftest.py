import pytest

from tests.s3_server import MotoServer


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto's S3-compatible server, for s3 runs."""
    server = MotoServer(tmp_path_factory.mktemp("moto")).start()
    yield server
    server.stop()


@pytest.fixture
def no_run_left(api):
    """A test that failed with its run still going cancels it: the next test gets the workers
    (modules whose tests share their tabs use it: pytestmark usefixtures)."""
    yield
    for run in api.get("/runs").json():
        if run["state"] in ("queued", "running"):
            api.post(f"/runs/{run['id']}/cancel")
