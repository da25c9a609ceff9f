"""PMRFS through the REST API of a real appliance: buckets, objects, authorization, limits, GC."""

from __future__ import annotations

import hashlib
import os
import urllib.parse

import httpx
import pytest

from tests.support import ADMIN_EMAIL, Appliance

MiB = 1024 * 1024
BLOB = 4 * MiB
LIMIT = 12 * MiB
PASSWORD = "pmrfs-password-1"


@pytest.fixture(scope="module")
def appliance(appliance_with):
    """An appliance whose upload limit is small enough to exceed in a test."""
    return appliance_with(pmrfs_max_upload_bytes=LIMIT)


@pytest.fixture(scope="module")
def api(appliance):
    """An API client per account: ada and bob (coordinators), walt (worker account), admin."""
    for email, role in (("ada@example.com", "coordinator"), ("bob@example.com", "coordinator")):
        appliance.add_user(email, role, PASSWORD)
    appliance.add_user("walt@example.com", "worker", PASSWORD)
    clients = {}
    for name, email in (("ada", "ada@example.com"), ("bob", "bob@example.com"), ("walt", "walt@example.com")):
        clients[name] = bearer(appliance, email)
    clients["admin"] = bearer(appliance, ADMIN_EMAIL)
    yield clients
    for client in clients.values():
        client.close()


def bearer(appliance: Appliance, email: str) -> httpx.Client:
    token = appliance.cli("token", "create", email).stdout.strip()
    assert token.startswith("pmr_"), token
    return httpx.Client(base_url=appliance.url + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60)


def q(key: str) -> str:
    return urllib.parse.quote(key, safe="/")


def blob_files(appliance: Appliance) -> set[str]:
    root = appliance.data_dir / "blobs"
    return {p.name for p in root.glob("??/??/*")} if root.exists() else set()


def blob_path(appliance: Appliance, sha: str):
    return appliance.data_dir / "blobs" / sha[:2] / sha[2:4] / sha


def test_bucket_names_follow_s3_rules(api):
    ada = api["ada"]
    for bad in ("ab", "Upper", "under_score", "-dash", "dash-", "two..dots", "192.168.0.1", "x" * 64):
        response = ada.put(f"/buckets/{bad}")
        assert response.status_code == 400, (bad, response.text)
        assert response.json()["detail"]
    created = ada.put("/buckets/ada-names.ok-1")
    assert created.status_code == 201, created.text
    assert created.json() | {"created_at": None} == {
        "name": "ada-names.ok-1",
        "owner": "ada@example.com",
        "private": True,
        "created_at": None,
        "objects": 0,
        "bytes": 0,
    }
    shared = ada.put("/buckets/ada-shared-fleet", params={"private": "false"})
    assert shared.status_code == 201 and shared.json()["private"] is False
    assert ada.delete("/buckets/ada-shared-fleet").status_code == 204


def test_at_most_twenty_buckets_per_account(appliance):
    appliance.add_user("many@example.com", "coordinator", PASSWORD)
    many = bearer(appliance, "many@example.com")
    with many:
        for i in range(20):
            assert many.put(f"/buckets/many-{i:02d}").status_code == 201
        refused = many.put("/buckets/many-20")
        assert refused.status_code == 409 and "at most 20 buckets" in refused.json()["detail"]
        assert len(many.get("/buckets").json()) == 20
        assert many.delete("/buckets/many-00").status_code == 204
        assert many.put("/buckets/many-20").status_code == 201


def test_bucket_names_are_unique_across_accounts(api):
    assert api["ada"].put("/buckets/taken-name").status_code == 201
    again = api["ada"].put("/buckets/taken-name")
    assert again.status_code == 409 and "already have" in again.json()["detail"]
    other = api["bob"].put("/buckets/taken-name")
    assert other.status_code == 409 and "taken" in other.json()["detail"]
    assert "taken-name" not in [b["name"] for b in api["bob"].get("/buckets").json()]


def test_worker_accounts_cannot_create_buckets(api):
    response = api["walt"].put("/buckets/walts-bucket")
    assert response.status_code == 403
    assert api["walt"].get("/buckets").json() == []


def test_other_accounts_cannot_touch_a_private_bucket(api):
    ada, bob, admin = api["ada"], api["bob"], api["admin"]
    assert ada.put("/buckets/ada-private").status_code == 201
    assert ada.put("/buckets/ada-private/objects/secret.txt", content=b"for ada only").status_code == 201

    def refusals(client: httpx.Client, bucket: str) -> list[tuple[int, str]]:
        answers = [
            client.get(f"/buckets/{bucket}/objects"),
            client.get(f"/buckets/{bucket}/objects/secret.txt"),
            client.put(f"/buckets/{bucket}/objects/secret.txt", content=b"overwritten"),
            client.put(f"/buckets/{bucket}/objects/new.txt", content=b"planted"),
            client.delete(f"/buckets/{bucket}/objects/secret.txt"),
            client.get(f"/objects-status/{bucket}/secret.txt"),
            client.delete(f"/buckets/{bucket}", params={"force": "true"}),
        ]
        return [(r.status_code, r.json()["detail"].replace(bucket, "B")) for r in answers]

    # Bob is told exactly what he would be told about a bucket that does not exist.
    assert refusals(bob, "ada-private") == refusals(bob, "no-such-bucket")
    assert all(status == 404 for status, _ in refusals(bob, "ada-private"))
    assert all(status == 404 for status, _ in refusals(api["walt"], "ada-private"))
    assert "ada-private" not in [b["name"] for b in bob.get("/buckets").json()]

    # Nothing changed for Ada; an admin sees and reads everything.
    assert ada.get("/buckets/ada-private/objects/secret.txt").content == b"for ada only"
    assert [o["key"] for o in ada.get("/buckets/ada-private/objects").json()] == ["secret.txt"]
    assert "ada-private" in [b["name"] for b in admin.get("/buckets").json()]
    assert admin.get("/buckets/ada-private/objects/secret.txt").content == b"for ada only"


@pytest.mark.parametrize("size", [0, 1, BLOB, BLOB + 1, 9 * MiB + 12345])
def test_round_trip_byte_for_byte(api, appliance, size):
    ada = api["ada"]
    ada.put("/buckets/ada-sizes")
    data = os.urandom(size)
    key = f"sizes/{size}.bin"
    put = ada.put(f"/buckets/ada-sizes/objects/{key}", content=data, headers={"Content-Type": "application/x-test"})
    assert put.status_code == 201, put.text
    assert put.json()["size"] == size and put.json()["pinned"] is True

    got = ada.get(f"/buckets/ada-sizes/objects/{key}")
    assert got.status_code == 200
    assert hashlib.sha256(got.content).hexdigest() == hashlib.sha256(data).hexdigest()
    assert got.headers["content-length"] == str(size)
    assert got.headers["content-type"] == "application/x-test"

    status = ada.get(f"/objects-status/ada-sizes/{key}").json()
    expected_sizes = [BLOB] * (size // BLOB) + ([size % BLOB] if size % BLOB else [])
    assert [b["size"] for b in status["blobs"]] == expected_sizes
    assert {k: status[k] for k in ("size", "available", "pinned")} == {"size": size, "available": True, "pinned": True}
    for i, blob in enumerate(status["blobs"]):
        piece = data[i * BLOB : (i + 1) * BLOB]
        assert blob["sha256"] == hashlib.sha256(piece).hexdigest()
        assert blob["replicas"] == ["appliance"]
        assert blob_path(appliance, blob["sha256"]).read_bytes() == piece


def test_unpinned_objects_keep_their_appliance_copy_until_browsers_hold_them(api):
    ada = api["ada"]
    ada.put("/buckets/ada-unpinned")
    data = os.urandom(BLOB + 7)
    put = ada.put("/buckets/ada-unpinned/objects/u.bin", params={"pin": "false"}, content=data)
    assert put.status_code == 201 and put.json()["pinned"] is False
    status = ada.get("/objects-status/ada-unpinned/u.bin").json()
    assert status["pinned"] is False and status["available"] is True
    assert [b["replicas"] for b in status["blobs"]] == [["appliance"], ["appliance"]]
    assert ada.get("/buckets/ada-unpinned/objects/u.bin").content == data


def test_keys_prefixes_and_listing(api):
    ada = api["ada"]
    ada.put("/buckets/ada-keys")
    keys = ["a/1.txt", "a/2.txt", "a_b/3.txt", "b/ünï cødé.txt", "A/4.txt"]
    for key in keys:
        assert ada.put(f"/buckets/ada-keys/objects/{q(key)}", content=key.encode()).status_code == 201
    listed = ada.get("/buckets/ada-keys/objects").json()
    assert [o["key"] for o in listed] == sorted(keys)
    assert all(o["available"] and o["content_type"] == "application/octet-stream" for o in listed)
    by_prefix = ada.get("/buckets/ada-keys/objects", params={"prefix": "a/"}).json()
    assert [o["key"] for o in by_prefix] == ["a/1.txt", "a/2.txt"]  # neither "a_b/" (LIKE's _) nor "A/" (case)
    assert ada.get(f"/buckets/ada-keys/objects/{q('b/ünï cødé.txt')}").content == "b/ünï cødé.txt".encode()
    # Replacing keeps one object per key.
    assert ada.put("/buckets/ada-keys/objects/a/1.txt", content=b"v2").status_code == 201
    assert ada.get("/buckets/ada-keys/objects/a/1.txt").content == b"v2"
    assert len(ada.get("/buckets/ada-keys/objects").json()) == len(keys)
    # Sent as written (httpx would resolve a literal "./"): refused, not stored under a tidied-up key.
    for bad in ("a//b", "a/%2E/b", "a/%2E%2E/b", "trailing/", "ctl%0Achar"):
        refused = ada.put(f"/buckets/ada-keys/objects/{bad}", content=b"x")
        assert refused.status_code == 400, (bad, refused.text)
    assert ada.get("/buckets/ada-keys/objects/a/b").status_code == 404
    assert ada.get("/buckets/ada-keys/objects/missing.txt").status_code == 404


def test_identical_content_is_stored_once(api, appliance):
    ada = api["ada"]
    ada.put("/buckets/ada-dedup")
    data = os.urandom(9 * MiB)
    before = blob_files(appliance)
    assert ada.put("/buckets/ada-dedup/objects/first", content=data).status_code == 201
    added = blob_files(appliance) - before
    assert len(added) == 3
    rows = appliance.query("select count(*) from pmrfs_blob")[0][0]
    assert ada.put("/buckets/ada-dedup/objects/second", content=data).status_code == 201
    assert bob_cannot_tell(api)
    assert blob_files(appliance) - before == added
    assert appliance.query("select count(*) from pmrfs_blob")[0][0] == rows
    first = ada.get("/objects-status/ada-dedup/first").json()["blobs"]
    second = ada.get("/objects-status/ada-dedup/second").json()["blobs"]
    assert first == second
    # Zeros repeat within one object too: two equal blobs, one file.
    zeros = bytes(2 * BLOB)
    assert ada.put("/buckets/ada-dedup/objects/zeros", content=zeros).status_code == 201
    status = ada.get("/objects-status/ada-dedup/zeros").json()
    assert len(status["blobs"]) == 2 and status["blobs"][0]["sha256"] == status["blobs"][1]["sha256"]
    assert ada.get("/buckets/ada-dedup/objects/zeros").content == zeros


def bob_cannot_tell(api) -> bool:
    """Deduplication happens on the appliance only: another account learns nothing from it."""
    return api["bob"].get("/buckets/ada-dedup/objects/first").status_code == 404


def test_uploads_over_the_limit_are_refused_with_nothing_stored(api, appliance):
    ada = api["ada"]
    ada.put("/buckets/ada-limit")
    files, rows = blob_files(appliance), appliance.query("select count(*) from pmrfs_blob")[0][0]
    too_big = os.urandom(LIMIT + 1)

    announced = ada.put("/buckets/ada-limit/objects/big", content=too_big)
    assert announced.status_code == 413
    assert "limit" in announced.json()["detail"]

    def chunked():  # no Content-Length: refused once the limit is crossed
        for i in range(0, len(too_big), 256 * 1024):
            yield too_big[i : i + 256 * 1024]

    streamed = ada.put("/buckets/ada-limit/objects/big", content=chunked())
    assert streamed.status_code == 413

    assert ada.get("/buckets/ada-limit/objects").json() == []
    assert blob_files(appliance) == files
    assert appliance.query("select count(*) from pmrfs_blob")[0][0] == rows
    assert ada.put("/buckets/ada-limit/objects/fits", content=too_big[:LIMIT]).status_code == 201


def test_delete_and_garbage_collection_remove_the_files(api, appliance):
    ada = api["ada"]
    ada.put("/buckets/ada-gc")
    data = os.urandom(BLOB + 100)
    ada.put("/buckets/ada-gc/objects/one", content=data)
    ada.put("/buckets/ada-gc/objects/two", content=data[:BLOB] + b"different tail")
    one = [b["sha256"] for b in ada.get("/objects-status/ada-gc/one").json()["blobs"]]
    two = [b["sha256"] for b in ada.get("/objects-status/ada-gc/two").json()["blobs"]]
    assert one[0] == two[0]

    assert ada.delete("/buckets/ada-gc/objects/one").status_code == 204
    assert ada.get("/buckets/ada-gc/objects/one").status_code == 404
    assert not blob_path(appliance, one[1]).exists()
    assert blob_path(appliance, one[0]).exists()  # "two" still uses it

    not_empty = ada.delete("/buckets/ada-gc")
    assert not_empty.status_code == 409 and "not empty" in not_empty.json()["detail"]
    assert ada.delete("/buckets/ada-gc", params={"force": "true"}).status_code == 204
    assert not any(blob_path(appliance, sha).exists() for sha in one + two)
    assert ada.get("/buckets/ada-gc/objects").status_code == 404
    shas = "', '".join(one + two)
    assert appliance.query(f"select count(*) from pmrfs_blob where sha256 in ('{shas}')")[0][0] == 0
    assert appliance.query("select count(*) from pmrfs_replica where blob not in (select id from pmrfs_blob)") == [(0,)]


def test_a_corrupt_blob_makes_the_object_unavailable(api, appliance):
    ada = api["ada"]
    ada.put("/buckets/ada-corrupt")
    data = os.urandom(BLOB + 1000)
    ada.put("/buckets/ada-corrupt/objects/c.bin", content=data)
    first, second = [b["sha256"] for b in ada.get("/objects-status/ada-corrupt/c.bin").json()["blobs"]]
    blob_path(appliance, second).write_bytes(b"flipped bits")

    # The first blob is already sent when the second proves corrupt: the body ends short.
    with pytest.raises(httpx.HTTPError):
        ada.get("/buckets/ada-corrupt/objects/c.bin").read()
    assert "corrupt" in appliance.log()

    status = ada.get("/objects-status/ada-corrupt/c.bin").json()
    assert status["available"] is False
    assert [b["replicas"] for b in status["blobs"]] == [["appliance"], []]
    unavailable = ada.get("/buckets/ada-corrupt/objects/c.bin")
    assert unavailable.status_code == 503
    assert "unavailable" in unavailable.json()["detail"] and "1 of its 2 blob" in unavailable.json()["detail"]
    listed = ada.get("/buckets/ada-corrupt/objects").json()
    assert [o["available"] for o in listed] == [False]

    # Uploading the same content again restores it.
    assert ada.put("/buckets/ada-corrupt/objects/c.bin", content=data).status_code == 201
    assert ada.get("/buckets/ada-corrupt/objects/c.bin").content == data
    assert blob_path(appliance, first).exists()
