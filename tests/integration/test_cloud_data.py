"""The Cloud Data page against a real appliance and an S3-compatible server (moto).

Settings go in through the page's form (with its CSRF token); the secret is checked in the SQLite
files, the page and the log; the connection test and the CORS action talk to moto.
"""

from __future__ import annotations

import html
import json
import re

import httpx
import pytest
from cryptography.fernet import Fernet

from appliance.cloud import service
from appliance.cloud.service import CloudStorage
from tests.s3_server import REGION, MotoServer
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance, Client

PASSWORD = "cloud-password-1"
FLASH_RE = re.compile(r'class="flash flash-(\w+)[^"]*" role="\w+"[^>]*>([^<]*)<')
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYzEXAMPLEKEY"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = MotoServer(tmp_path_factory.mktemp("moto")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def people(appliance):
    clients = {}
    for name, role in (("cleo", "coordinator"), ("cass", "coordinator"), ("wes", "worker")):
        appliance.add_user(f"{name}@example.com", role, PASSWORD)
        clients[name] = Client(appliance.url)
        clients[name].login(f"{name}@example.com", PASSWORD)
    clients["admin"] = Client(appliance.url)
    clients["admin"].login(ADMIN_EMAIL, ADMIN_PASSWORD)
    yield clients
    for client in clients.values():
        client.close()


def messages(page: str) -> list[tuple[str, str]]:
    return [(level, html.unescape(text)) for level, text in FLASH_RE.findall(page)]


def fields(s3: MotoServer, bucket: str, **changes) -> dict[str, str]:
    return {
        "provider": "s3",
        "endpoint_url": s3.url,
        "region": REGION,
        "bucket": bucket,
        "access_key_id": "AKIAEXAMPLE",
        "secret_access_key": SECRET,
        **changes,
    }


def save(client: Client, data: dict) -> httpx.Response:
    return client.form("/ui/cloud", data)


def saved_row(appliance: Appliance, email: str) -> tuple | None:
    rows = appliance.query(
        "SELECT c.provider, c.endpoint_url, c.region, c.bucket, c.access_key_id, c.secret_access_key_encrypted"
        f" FROM cloud_settings c JOIN accounts_user u ON u.id = c.account WHERE u.email = '{email}'"
    )
    return rows[0] if rows else None


def check(client: Client, *, htmx: bool) -> tuple[int, str]:
    """Press "Test connection"; the result as the page would show it."""
    if htmx:
        response = client.post("/ui/cloud/test", headers={"hx-request": "true", "x-csrftoken": client.csrf()})
        return response.status_code, html.unescape(response.text)
    response = client.form("/ui/cloud/test")
    assert response.status_code == 303
    return response.status_code, " ".join(text for _, text in messages(client.get("/ui/cloud").text))


def test_settings_are_saved_through_the_form_and_the_secret_only_encrypted(people, appliance, s3):
    cleo = people["cleo"]
    page = cleo.get("/ui/cloud")
    assert page.status_code == 200
    assert 'name="_csrf_token"' in page.text and 'name="secret_access_key"' in page.text
    # The navigation offers the page to coordinators.
    assert '<a href="/ui/cloud"' in page.text and ">Cloud Data<" in page.text

    response = save(cleo, fields(s3, s3.create_bucket("cleo-data")))
    assert response.status_code == 303 and response.headers["location"] == "/ui/cloud"
    page = cleo.get("/ui/cloud").text
    assert (
        "success",
        "Cloud Data settings saved: Amazon S3 or an S3-compatible server, bucket cleo-data.",
    ) in messages(page)
    # The page says a secret is set and offers to replace it, and never shows it.
    assert re.search(r'id="secret-state">Secret access key: <strong>set</strong>', page)
    assert "Replace secret access key" in page
    assert SECRET not in page and SECRET not in html.unescape(page)
    assert f'value="{s3.url}"' in page and 'value="AKIAEXAMPLE"' in page

    row = saved_row(appliance, "cleo@example.com")
    assert row[:5] == ("s3", s3.url, REGION, "cleo-data", "AKIAEXAMPLE")
    token = row[5]
    assert SECRET not in token
    # A Fernet token under the key kept in secrets.json (0600), not some encoding of the secret.
    secrets = json.loads((appliance.data_dir / "secrets.json").read_text())
    assert Fernet(secrets["cloud_data_key"].encode()).decrypt(token.encode()).decode() == SECRET
    assert (appliance.data_dir / "secrets.json").stat().st_mode & 0o777 == 0o600
    # Nowhere in the database files (WAL included) or the log in plain text.
    for path in appliance.data_dir.glob("peermr.sqlite3*"):
        assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in appliance.log()


def test_saving_again_without_a_secret_keeps_the_saved_one(people, appliance, s3):
    cleo = people["cleo"]
    save(cleo, fields(s3, s3.create_bucket("cleo-keep")))
    token = saved_row(appliance, "cleo@example.com")[5]
    response = save(cleo, fields(s3, "cleo-keep", region="eu-west-1", secret_access_key=""))
    assert response.status_code == 303
    row = saved_row(appliance, "cleo@example.com")
    assert row[2] == "eu-west-1" and row[5] == token
    # Another key id needs its own secret.
    response = save(cleo, fields(s3, "cleo-keep", access_key_id="AKIAOTHER", secret_access_key=""))
    assert response.status_code == 400
    assert "A different access key id needs its secret access key" in html.unescape(response.text)
    assert saved_row(appliance, "cleo@example.com") == row


def test_bad_input_gets_its_message_and_loses_nothing_saved(people, appliance, s3):
    cleo = people["cleo"]
    save(cleo, fields(s3, s3.create_bucket("cleo-good")))
    before = saved_row(appliance, "cleo@example.com")

    typed = "a-new-secret-that-must-not-come-back"
    response = save(
        cleo,
        fields(
            s3,
            "Bad_Bucket!",
            endpoint_url="ftp://files.example.com",
            region="us east",
            access_key_id="has space",
            secret_access_key=typed,
        ),
    )
    assert response.status_code == 400
    text = html.unescape(response.text)
    for message in (
        "The settings were not saved: see the fields below. Your saved settings are unchanged.",
        "The endpoint URL must start with http:// or https://",
        "The region must be up to 32 lowercase letters, digits and single hyphens (e.g. us-east-1).",
        "An S3 bucket name may contain only lowercase letters, digits, hyphens and dots",
        "The access key id must be up to 128 printable characters without spaces.",
        "The secret access key you typed was not saved: type it again.",
    ):
        assert message in text, message
    # The form keeps what was typed so it can be corrected, except the secret.
    assert 'value="Bad_Bucket!"' in text and typed not in text
    assert 'aria-invalid="true" aria-describedby="bucket-error"' in response.text
    assert saved_row(appliance, "cleo@example.com") == before

    response = save(cleo, fields(s3, "cleo-good", endpoint_url="", region="europe"))
    assert response.status_code == 400
    assert "'europe' is not an AWS region: AWS regions look like us-east-1" in html.unescape(response.text)
    assert saved_row(appliance, "cleo@example.com") == before


def test_the_first_save_needs_a_secret(people, appliance, s3):
    cass = people["cass"]
    response = save(cass, fields(s3, "cass-data", secret_access_key="  "))
    assert response.status_code == 400
    assert "Enter the secret access key." in response.text
    assert saved_row(appliance, "cass@example.com") is None


@pytest.mark.parametrize("htmx", [True, False])
def test_connection_test_succeeds_against_the_server(people, appliance, s3, htmx):
    cleo = people["cleo"]
    bucket = s3.create_bucket(f"cleo-check-{str(htmx).lower()}")
    save(cleo, fields(s3, bucket))
    status, text = check(cleo, htmx=htmx)
    assert f"Connected: bucket {bucket} at {s3.url} answers to this key." in text
    # It also asks the bucket, as a browser would, whether worker pages may use it: not yet.
    assert (
        f"The bucket's CORS settings do not let pages on {appliance.url} PUT and GET its objects."
        " Press Set CORS for workers."
    ) in text
    if htmx:
        assert status == 200 and 'data-result="ok"' in text and "<html" not in text


def test_connection_test_explains_a_wrong_bucket_or_key(people, s3):
    cleo = people["cleo"]
    save(cleo, fields(s3, "no-such-bucket"))
    assert f"Connection failed: There is no bucket named no-such-bucket at {s3.url}." in check(cleo, htmx=True)[1]

    key_id, secret = s3.new_key()
    s3.create_bucket("cleo-private")
    save(cleo, fields(s3, "cleo-private", access_key_id=key_id, secret_access_key=secret))
    with s3.credentials_checked():
        assert "Connected: bucket cleo-private" in check(cleo, htmx=True)[1]
        save(cleo, fields(s3, "cleo-private", access_key_id=key_id, secret_access_key=secret[:-4] + "abcd"))
        text = check(cleo, htmx=False)[1]
        assert "Connection failed: The secret access key does not match the access key id" in text
        save(cleo, fields(s3, "cleo-private", access_key_id="AKIANOSUCHKEY000000", secret_access_key=secret))
        text = check(cleo, htmx=True)[1]
        assert f"Connection failed: {s3.url} does not know the access key id AKIANOSUCHKEY000000." in text
        assert secret not in text


def test_connection_test_explains_an_unreachable_server(people, s3):
    cass = people["cass"]
    unreachable = "http://127.0.0.1:9"
    assert save(cass, fields(s3, "cass-data", endpoint_url=unreachable)).status_code == 303
    text = check(cass, htmx=True)[1]
    assert f"Connection failed: Cannot connect to {unreachable}: check the endpoint URL" in text


def test_cors_action_lets_the_appliance_origin_use_presigned_urls(people, appliance, s3):
    cleo = people["cleo"]
    bucket = s3.create_bucket("cleo-cors")
    save(cleo, fields(s3, bucket))
    page = cleo.get("/ui/cloud").text
    assert f"<code>{appliance.url}</code>" in page

    storage = CloudStorage("s3", s3.url, REGION, bucket, "AKIAEXAMPLE", SECRET)
    put_url = service.presign_put(storage, "from-browser.txt")

    def preflight() -> httpx.Response:
        return httpx.options(
            put_url, headers={"Origin": appliance.url, "Access-Control-Request-Method": "PUT"}, timeout=10
        )

    assert preflight().headers.get("access-control-allow-origin") is None

    response = cleo.post("/ui/cloud/cors", headers={"hx-request": "true", "x-csrftoken": cleo.csrf()})
    assert response.status_code == 200
    assert f"CORS set on bucket cleo-cors: worker pages on {appliance.url} may GET and PUT" in response.text
    rules = s3.client().get_bucket_cors(Bucket=bucket)["CORSRules"]
    assert [rule["ID"] for rule in rules] == ["peermr-workers"]
    assert rules[0]["AllowedOrigins"] == [appliance.url] and set(rules[0]["AllowedMethods"]) == {"GET", "PUT", "HEAD"}
    answer = preflight()
    assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == appliance.url
    text = check(cleo, htmx=True)[1]
    assert f"Worker pages on {appliance.url} may use its presigned URLs (CORS allows it)." in text
    assert 'data-result="failed"' not in text
    # The appliance's preflights name the object without a signature, so no usable URL reaches the log.
    assert "X-Amz-Signature" not in appliance.log()


def test_cors_action_replaces_its_own_rule_and_keeps_the_others(people, s3):
    cleo = people["cleo"]
    bucket = s3.create_bucket("cleo-cors-rules")
    save(cleo, fields(s3, bucket))
    other = {"ID": "analytics", "AllowedOrigins": ["https://elsewhere.example"], "AllowedMethods": ["GET"]}
    s3.client().put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [other]})
    for _ in range(2):
        assert cleo.form("/ui/cloud/cors").status_code == 303
        assert [rule["ID"] for rule in s3.client().get_bucket_cors(Bucket=bucket)["CORSRules"]] == [
            "peermr-workers",
            "analytics",
        ]
    # (S3 applies the first rule that matches a request; moto refuses a preflight when any rule does
    # not match, so its answer is not checked here: the test above checks it with our rule alone.)


def test_gcs_settings_show_the_gcloud_cors_command(people, appliance):
    admin = people["admin"]
    response = save(
        admin, {"provider": "gcs", "bucket": "admin_data", "access_key_id": "GOOG1E", "secret_access_key": "s"}
    )
    assert response.status_code == 303
    page = html.unescape(admin.get("/ui/cloud").text)
    assert 'value="https://storage.googleapis.com"' in page and 'value="auto"' in page
    assert "gcloud storage buckets update gs://admin_data --cors-file=cors.json" in page
    assert f'"{appliance.url}"' in page
    text = admin.post("/ui/cloud/cors", headers={"hx-request": "true", "x-csrftoken": admin.csrf()}).text
    assert "CORS not set: Cloud Storage's S3-compatible API cannot change CORS settings" in html.unescape(text)


def test_each_account_sees_and_changes_only_its_own(people, appliance, s3):
    # The admin's settings (previous test or not) never show on a coordinator's page, and the other way round.
    save(people["admin"], fields(s3, "admin-own", access_key_id="AKIAADMIN"))
    save(people["cleo"], fields(s3, "cleo-own", access_key_id="AKIACLEO"))
    assert 'value="AKIAADMIN"' in people["admin"].get("/ui/cloud").text
    assert "AKIAADMIN" not in people["cleo"].get("/ui/cloud").text
    assert saved_row(appliance, ADMIN_EMAIL)[3] == "admin-own"


def test_removing_forgets_the_key(people, appliance, s3):
    cass = people["cass"]
    save(cass, fields(s3, "cass-remove"))
    assert saved_row(appliance, "cass@example.com") is not None
    response = cass.form("/ui/cloud/remove")
    assert response.status_code == 303
    assert saved_row(appliance, "cass@example.com") is None
    page = cass.get("/ui/cloud").text
    assert ("success", "Cloud Data settings removed; the appliance no longer holds your key.") in messages(page)
    assert "Test connection" not in page
    _, text = check(cass, htmx=True)
    assert "Save your bucket settings first." in text


def test_worker_accounts_are_refused(people, appliance, s3):
    wes = people["wes"]
    assert wes.get("/ui/cloud").status_code == 403
    assert save(wes, fields(s3, "wes-data")).status_code == 403
    for action in ("test", "cors", "remove"):
        assert wes.form(f"/ui/cloud/{action}").status_code == 403
    assert saved_row(appliance, "wes@example.com") is None
    assert "/ui/cloud" not in wes.get("/ui").text


def test_saves_cors_and_removal_are_audited_without_the_keys(people, appliance, s3):
    cass = people["cass"]
    bucket = s3.create_bucket("cass-audited")
    [(first,)] = appliance.query("SELECT max(id) FROM audit_entry")
    assert save(cass, fields(s3, bucket)).status_code == 303
    assert save(cass, fields(s3, bucket, region="eu-west-1", secret_access_key="")).status_code == 303
    assert cass.form("/ui/cloud/cors").status_code == 303
    assert cass.form("/ui/cloud/remove").status_code == 303

    rows = appliance.query(
        f"SELECT actor, action, target, before, after FROM audit_entry WHERE id > {first} ORDER BY id"
    )
    assert {row[0] for row in rows} == {"cass@example.com"}
    assert [row[1] for row in rows] == ["cloud.saved", "cloud.saved", "cloud.cors", "cloud.removed"]
    where = {"provider": "s3", "endpoint_url": s3.url, "bucket": bucket}
    saved, changed, cors, removed = [
        (target, json.loads(before), json.loads(after)) for *_, target, before, after in rows
    ]
    assert saved == ("cloud data settings of cass@example.com", None, {**where, "region": REGION, "key_replaced": True})
    assert changed[1:] == ({**where, "region": REGION}, {**where, "region": "eu-west-1", "key_replaced": False})
    assert cors == (f"bucket {bucket} at {s3.url}", None, {"origins": [appliance.url]})
    assert removed[1:] == ({**where, "region": "eu-west-1"}, None)
    # Neither the secret nor the key id is in the log.
    assert not [row for row in rows if SECRET in row[3] + row[4] or "AKIAEXAMPLE" in row[3] + row[4]]
