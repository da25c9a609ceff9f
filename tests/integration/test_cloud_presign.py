"""Presigned URLs, reads and deletes of appliance.cloud.service against an S3-compatible server (moto)."""

from __future__ import annotations

import concurrent.futures
import hashlib
import os

import httpx
import pytest

from appliance import db
from appliance.cloud import service
from appliance.cloud.service import CloudStorage
from appliance.config import load_settings
from tests.s3_server import REGION, MotoServer


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = MotoServer(tmp_path_factory.mktemp("moto")).start()
    yield server
    server.stop()


def storage_on(s3: MotoServer, bucket: str, provider: str = "s3") -> CloudStorage:
    return CloudStorage(
        provider=provider,
        endpoint_url=s3.url,
        region=REGION,
        bucket=bucket,
        access_key_id="presign-key",
        secret_access_key="presign-secret",
    )


def test_bytes_put_to_a_presigned_url_come_back_from_a_presigned_get(s3):
    storage = storage_on(s3, s3.create_bucket("presign-roundtrip"))
    data = os.urandom(256 * 1024) + "ünïcode".encode()
    key = "runs/7/A/stage-0/part 00003 ✓.json"

    put_url = service.presign_put(storage, key, expires=600)
    # Path-style on the given endpoint, so a local server without wildcard DNS works.
    assert put_url.startswith(f"{s3.url}/presign-roundtrip/runs/7/A/stage-0/")
    assert "X-Amz-Expires=600" in put_url and "presign-secret" not in put_url
    response = httpx.put(put_url, content=data, headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text

    response = httpx.get(service.presign_get(storage, key))
    assert response.status_code == 200 and response.content == data
    # The object is really in the bucket, as another S3 client sees it.
    stored = s3.client().get_object(Bucket="presign-roundtrip", Key=key)["Body"].read()
    assert hashlib.sha256(stored).digest() == hashlib.sha256(data).digest()


async def test_read_object_returns_the_bytes_and_says_when_there_are_none(s3):
    storage = storage_on(s3, s3.create_bucket("presign-read"))
    s3.client().put_object(Bucket="presign-read", Key="out/part-0", Body=b"[1, 2]\n")
    assert await service.read_object(storage, "out/part-0") == b"[1, 2]\n"
    with pytest.raises(service.ObjectNotFound, match="no object out/part-9 in bucket presign-read"):
        await service.read_object(storage, "out/part-9")


@pytest.mark.parametrize("provider", ["s3", "gcs"])
async def test_delete_prefix_removes_exactly_the_objects_under_it(s3, provider):
    bucket = s3.create_bucket(f"presign-delete-{provider}")
    storage = storage_on(s3, bucket, provider)
    client = s3.client()
    # More than one DeleteObjects batch (1000 keys) and more than one listing page for s3.
    doomed = [f"runs/12/part-{i:05d}" for i in range(1203 if provider == "s3" else 40)]
    kept = ["runs/120/part-0", "runs/1/part-0", "other/part-0"]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda key: client.put_object(Bucket=bucket, Key=key, Body=b"x"), doomed + kept))

    assert await service.delete_prefix(storage, "runs/12/") == len(doomed)
    left = sorted(item["Key"] for item in client.list_objects_v2(Bucket=bucket).get("Contents", []))
    assert left == sorted(kept)
    assert await service.delete_prefix(storage, "runs/12/") == 0


async def test_delete_prefix_never_empties_a_whole_bucket(s3):
    storage = storage_on(s3, s3.create_bucket("presign-guard"))
    with pytest.raises(ValueError, match="needs a prefix"):
        await service.delete_prefix(storage, "")


def test_origin_is_where_the_presigned_urls_point(s3):
    storage = storage_on(s3, "presign-origin")
    assert storage.origin == s3.url
    aws = CloudStorage("s3", "", "eu-central-1", "my-data", "AKIDEXAMPLE", "secret")
    # AWS itself: the bucket's regional virtual host, which answers without a redirect.
    assert aws.origin == "https://my-data.s3.eu-central-1.amazonaws.com"
    assert service.presign_get(aws, "k").startswith(aws.origin + "/k?")
    gcs = CloudStorage("gcs", "https://storage.googleapis.com", "auto", "my_data", "GOOG1EXAMPLE", "secret")
    assert gcs.origin == "https://storage.googleapis.com"
    assert service.presign_put(gcs, "k").startswith("https://storage.googleapis.com/my_data/k?")


def test_expiry_and_keys_are_checked():
    storage = CloudStorage("s3", "http://127.0.0.1:9", REGION, "b-checks", "AK", "SK")
    for expires in (0, -5, 7 * 24 * 3600 + 1):
        with pytest.raises(ValueError, match="expires after 1 to 604800 seconds"):
            service.presign_get(storage, "k", expires=expires)
    assert "X-Amz-Expires=604800" in service.presign_put(storage, "k", expires=7 * 24 * 3600)
    with pytest.raises(ValueError, match="object key"):
        service.presign_put(storage, "")


def test_the_secret_never_shows_in_a_repr():
    storage = CloudStorage("s3", "", REGION, "b", "AKIDEXAMPLE", "wJalrXUtnFEMI-very-secret")
    for text in (repr(storage), str(storage), f"{storage}", repr([storage])):
        assert "wJalrXUtnFEMI-very-secret" not in text and "AKIDEXAMPLE" in text


async def test_check_access_reports_what_is_wrong(s3):
    s3.create_bucket("presign-check")
    assert await service.check_access(storage_on(s3, "presign-check")) is None
    assert await service.check_access(storage_on(s3, "presign-missing")) == (
        f"There is no bucket named presign-missing at {s3.url}."
    )
    unreachable = CloudStorage("s3", "http://127.0.0.1:9", REGION, "b", "AK", "SK")
    assert "Cannot connect to http://127.0.0.1:9" in await service.check_access(unreachable)
    key_id, secret = s3.new_key()
    good = CloudStorage("s3", s3.url, REGION, "presign-check", key_id, secret)
    with s3.credentials_checked():
        assert await service.check_access(good) is None
        wrong_secret = CloudStorage("s3", s3.url, REGION, "presign-check", key_id, secret[:-1] + "x")
        assert "secret access key does not match" in await service.check_access(wrong_secret)
        unknown = CloudStorage("s3", s3.url, REGION, "presign-check", "AKIAUNKNOWN0000000", secret)
        assert "does not know the access key id AKIAUNKNOWN0000000" in await service.check_access(unknown)


@pytest.fixture
async def database(tmp_path):
    """Setting CORS is audited, so that test writes to a database of its own."""
    db.configure(load_settings({"data_dir": str(tmp_path / "data")}, environ={}))
    await db.migrate()


async def test_check_worker_cors_asks_the_way_a_browser_does(s3, database):
    bucket = s3.create_bucket("presign-cors")
    storage = storage_on(s3, bucket)
    page = "http://appliance.example:8000"
    refused = f"The bucket's CORS settings do not let pages on {page} PUT and GET its objects."
    assert await service.check_worker_cors(storage, page) == refused
    assert await service.set_worker_cors(storage, [page]) is None
    assert await service.check_worker_cors(storage, page) is None
    assert "http://elsewhere.example" in await service.check_worker_cors(storage, "http://elsewhere.example")
    gcs = storage_on(s3, bucket, "gcs")
    assert "cannot change CORS settings" in await service.set_worker_cors(gcs, [page])
