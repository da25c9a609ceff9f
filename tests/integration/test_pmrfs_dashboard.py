"""The dashboard's Storage page: buckets, upload (plain form and htmx), download, pin, delete."""

from __future__ import annotations

import hashlib
import html
import os
import re

import pytest

from tests.support import Client

MiB = 1024 * 1024
LIMIT = 10 * MiB
PASSWORD = "storage-password-1"
FLASH_RE = re.compile(r'class="flash flash-(\w+)" role="\w+">([^<]*)<')


@pytest.fixture(scope="module")
def appliance(appliance_with):
    return appliance_with(pmrfs_max_upload_bytes=LIMIT)


@pytest.fixture(scope="module")
def people(appliance):
    appliance.add_user("cora@example.com", "coordinator", PASSWORD)
    appliance.add_user("dan@example.com", "coordinator", PASSWORD)
    clients = {}
    for name in ("cora", "dan"):
        clients[name] = Client(appliance.url)
        clients[name].login(f"{name}@example.com", PASSWORD)
    yield clients
    for client in clients.values():
        client.close()


def flashes(page: str) -> list[tuple[str, str]]:
    return [(level, html.unescape(text)) for level, text in FLASH_RE.findall(page)]


def upload(client: Client, bucket: str, name: str, data: bytes, *, key: str = "", pin: bool = True, htmx=False):
    fields = {"_csrf_token": client.csrf(), "key": key}
    if pin:
        fields["pin"] = "true"
    headers = {"hx-request": "true", "x-csrftoken": client.csrf()} if htmx else {}
    return client.post(
        f"/ui/storage/buckets/{bucket}/upload",
        data=fields,
        files={"file": (name, data, "application/x-test")},
        headers=headers,
    )


def test_storage_page_replaces_the_placeholder(people, appliance):
    cora = people["cora"]
    page = cora.get("/ui/storage")
    assert page.status_code == 200
    assert "New bucket" in page.text and "Nothing here yet" not in page.text
    assert 'href="/ui/storage"' in cora.get("/ui").text  # still in the navigation


def test_create_bucket_from_the_dashboard(people):
    cora = people["cora"]
    created = cora.form("/ui/storage/buckets", {"name": "cora-data", "private": "true"})
    assert created.status_code == 303 and created.headers["location"] == "/ui/storage/buckets/cora-data"
    assert ("success", "Bucket cora-data created.") in flashes(cora.get(created.headers["location"]).text)

    refused = cora.form("/ui/storage/buckets", {"name": "Cora_Data"})
    assert refused.status_code == 400
    assert any(level == "error" and "lowercase" in text for level, text in flashes(refused.text))
    taken = people["dan"].form("/ui/storage/buckets", {"name": "cora-data"})
    assert taken.status_code == 409
    assert 'id="bucket-cora-data"' in cora.get("/ui/storage").text
    assert 'id="bucket-cora-data"' not in people["dan"].get("/ui/storage").text


def test_upload_and_download_through_the_form(people, appliance):
    cora = people["cora"]
    cora.form("/ui/storage/buckets", {"name": "cora-files"})
    data = os.urandom(9 * MiB + 3)
    sent = upload(cora, "cora-files", "big.bin", data, key="dir/big.bin")
    assert sent.status_code == 303, sent.text[:300]
    page = cora.get(sent.headers["location"]).text
    assert ("success", "Uploaded dir/big.bin (9.0 MiB).") in flashes(page)
    assert 'data-key="dir/big.bin"' in page and "available" in page and "pinned" in page

    download = cora.get("/ui/storage/download/cora-files/dir/big.bin")
    assert download.status_code == 200
    assert hashlib.sha256(download.content).hexdigest() == hashlib.sha256(data).hexdigest()
    assert download.headers["content-length"] == str(len(data))
    assert download.headers["content-type"] == "application/x-test"
    assert download.headers["content-disposition"].startswith('attachment; filename="big.bin"')

    details = cora.get("/ui/storage/object/cora-files/dir/big.bin")
    assert details.status_code == 200
    shas = [hashlib.sha256(data[i : i + 4 * MiB]).hexdigest() for i in range(0, len(data), 4 * MiB)]
    assert len(shas) == 3
    for blob_sha in shas:
        assert f'title="{blob_sha}"' in details.text
    assert details.text.count(">appliance</span>") == 3

    # Without a key the file's name is used.
    assert upload(cora, "cora-files", "näme.txt", b"hello").status_code == 303
    assert cora.get("/ui/storage/download/cora-files/n%C3%A4me.txt").content == b"hello"


def test_htmx_upload_answers_with_the_object_list(people):
    cora = people["cora"]
    cora.form("/ui/storage/buckets", {"name": "cora-htmx"})
    sent = upload(cora, "cora-htmx", "a.bin", b"x" * 1000, key="a.bin", pin=False, htmx=True)
    assert sent.status_code == 200
    assert sent.text.lstrip().startswith('<div id="objects">')
    assert 'data-key="a.bin"' in sent.text and "unpinned" in sent.text
    assert 'hx-swap-oob="true"' in sent.text and "Uploaded a.bin" in sent.text
    page = cora.get("/ui/storage/buckets/cora-htmx").text
    assert 'data-upload-progress="upload-progress"' in page and "/static/js/storage.js" in page
    assert cora.get("/static/js/storage.js").status_code == 200


def test_upload_without_the_csrf_token_stores_nothing(people, appliance):
    cora = people["cora"]
    cora.form("/ui/storage/buckets", {"name": "cora-csrf"})
    before = sorted((appliance.data_dir / "blobs").glob("??/??/*"))
    forged = cora.post(
        "/ui/storage/buckets/cora-csrf/upload",
        data={"key": "forged.bin"},
        files={"file": ("forged.bin", os.urandom(5000), "application/octet-stream")},
    )
    assert forged.status_code == 403
    wrong = cora.post(
        "/ui/storage/buckets/cora-csrf/upload",
        data={"_csrf_token": "0" * 128, "key": "forged.bin"},
        files={"file": ("forged.bin", os.urandom(5000), "application/octet-stream")},
    )
    assert wrong.status_code == 403
    assert sorted((appliance.data_dir / "blobs").glob("??/??/*")) == before
    assert 'data-key="forged.bin"' not in cora.get("/ui/storage/buckets/cora-csrf").text


def test_upload_over_the_limit_is_refused(people, appliance):
    cora = people["cora"]
    cora.form("/ui/storage/buckets", {"name": "cora-limit"})
    before = sorted((appliance.data_dir / "blobs").glob("??/??/*"))
    sent = upload(cora, "cora-limit", "huge.bin", os.urandom(LIMIT + MiB))
    assert sent.status_code == 303
    page = cora.get(sent.headers["location"]).text
    assert any(level == "error" and "larger than the limit" in text for level, text in flashes(page))
    assert "This bucket is empty." in page
    assert sorted((appliance.data_dir / "blobs").glob("??/??/*")) == before

    no_file = cora.post(
        "/ui/storage/buckets/cora-limit/upload",
        data={"_csrf_token": cora.csrf(), "key": "k"},
        files={"file": ("", b"", "application/octet-stream")},
    )
    assert no_file.status_code == 303
    assert any("Choose a file" in text for _, text in flashes(cora.get(no_file.headers["location"]).text))


def test_pin_unpin_delete_object_and_bucket(people, appliance):
    cora = people["cora"]
    cora.form("/ui/storage/buckets", {"name": "cora-pins"})
    upload(cora, "cora-pins", "p.bin", os.urandom(3000), key="p.bin")
    unpinned = cora.form("/ui/storage/buckets/cora-pins/objects/pin", {"key": "p.bin", "pinned": "false"})
    assert unpinned.status_code == 303
    page = cora.get("/ui/storage/buckets/cora-pins").text
    assert "unpinned" in page and "Pin</button>" in page
    repinned = cora.form(
        "/ui/storage/buckets/cora-pins/objects/pin", {"key": "p.bin", "pinned": "true"}, headers={"hx-request": "true"}
    )
    assert repinned.status_code == 200 and "Unpin</button>" in repinned.text

    sha = re.search(r'title="([0-9a-f]{64})"', cora.get("/ui/storage/object/cora-pins/p.bin").text).group(1)
    path = appliance.data_dir / "blobs" / sha[:2] / sha[2:4] / sha
    assert path.exists()
    deleted = cora.form(
        "/ui/storage/buckets/cora-pins/objects/delete", {"key": "p.bin"}, headers={"hx-request": "true"}
    )
    assert deleted.status_code == 200 and "This bucket is empty." in deleted.text
    assert not path.exists()
    assert cora.get("/ui/storage/download/cora-pins/p.bin").status_code == 404

    upload(cora, "cora-pins", "q.bin", b"q" * 100, key="q.bin")
    gone = cora.form("/ui/storage/buckets/cora-pins/delete", {"force": "true"})
    assert gone.status_code == 303 and gone.headers["location"] == "/ui/storage"
    assert ("success", "Bucket cora-pins deleted with its 1 object.") in flashes(cora.get("/ui/storage").text)
    assert cora.get("/ui/storage/buckets/cora-pins").status_code == 404


def test_another_coordinator_sees_nothing(people):
    cora, dan = people["cora"], people["dan"]
    cora.form("/ui/storage/buckets", {"name": "cora-secret"})
    upload(cora, "cora-secret", "s.txt", b"secret", key="s.txt")
    assert dan.get("/ui/storage/buckets/cora-secret").status_code == 404
    assert dan.get("/ui/storage/download/cora-secret/s.txt").status_code == 404
    assert dan.get("/ui/storage/object/cora-secret/s.txt").status_code == 404
    assert upload(dan, "cora-secret", "s.txt", b"mine now", key="s.txt").status_code == 404
    assert dan.form("/ui/storage/buckets/cora-secret/objects/delete", {"key": "s.txt"}).status_code == 404
    assert dan.form("/ui/storage/buckets/cora-secret/delete", {"force": "true"}).status_code == 404
    assert cora.get("/ui/storage/download/cora-secret/s.txt").content == b"secret"
