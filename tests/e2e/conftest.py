import pytest

from tests.s3_server import MotoServer


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto's S3-compatible server, for s3 runs."""
    server = MotoServer(tmp_path_factory.mktemp("moto")).start()
    yield server
    server.stop()
