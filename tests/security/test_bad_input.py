"""Hostile input gets a 4xx with a message, never a 500, and the appliance keeps serving.

JSON nested 200,000 deep made the decoders raise RecursionError (a 500 on every JSON route, a
crashed worker connection), and so did a job script that built a value 3,000 deep; PMRFS took
object keys with backslashes and C1 control characters, and a bucket name ending in a newline.
"""

from __future__ import annotations

import asyncio
import hashlib
import urllib.parse

import httpx
import pytest

from appliance.json_depth import MAX_DEPTH
from appliance.web.json_bodies import MAX_JSON_BYTES
from tests.integration.test_job_scheduling import job_script, token_for
from tests.sim_workers import SimWorker, cookie_of
from tests.support import ADMIN_EMAIL

DEEP = "[" * 200_000 + "]" * 200_000
# A parameter-server frame (docs/protocol.md) whose JSON header, under the 64 KiB a header may take, is deep.
DEEP_HEADER = b'{"type": "ps-write", "extra": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"
TOO_DEEP = f"at most {MAX_DEPTH} levels deep"


@pytest.fixture(scope="module")
def api(appliance):
    client = httpx.Client(
        base_url=appliance.url, headers={"Authorization": f"Bearer {token_for(appliance, ADMIN_EMAIL)}"}, timeout=60
    )
    yield client
    client.close()


@pytest.fixture(scope="module")
def job_id(api) -> int:
    saved = api.post("/api/v1/jobs", json={"name": "target", "script": job_script()})
    assert saved.status_code == 201, saved.text
    return saved.json()["id"]


def still_serving(appliance, api) -> None:
    assert httpx.get(f"{appliance.url}/healthz").status_code == 200
    assert api.get("/api/v1/me").json()["email"] == ADMIN_EMAIL


@pytest.mark.parametrize("body", [DEEP, '{"name": "deep", "script": ' + DEEP + "}"], ids=["bare", "in-a-field"])
@pytest.mark.parametrize(
    "method,path",
    [
        ("POST", "/api/v1/jobs"),
        ("PUT", "/api/v1/jobs/{job}"),
        ("POST", "/api/v1/jobs/{job}/runs"),
        ("POST", "/api/v1/jobs/{job}/capacity"),
    ],
)
def test_deep_json_gets_400_with_a_message(appliance, api, job_id, method, path, body):
    refused = api.request(method, path.format(job=job_id), content=body, headers={"content-type": "application/json"})
    assert refused.status_code == 400, refused.text
    assert refused.json() == {"status_code": 400, "detail": f"JSON may nest arrays and objects {TOO_DEEP}."}
    still_serving(appliance, api)
    assert api.get(f"/api/v1/jobs/{job_id}").json()["name"] == "target"  # PUT changed nothing


def test_deep_json_to_a_public_route_gets_400(appliance, api):
    browser = appliance.client()
    refused = browser.post(
        "/worker/session",
        content='{"token": ' + DEEP + "}",
        headers={"content-type": "application/json", "x-csrftoken": browser.csrf()},
    )
    assert refused.status_code == 400 and TOO_DEEP in refused.json()["detail"]
    still_serving(appliance, api)


def test_json_as_deep_as_the_limit_is_decoded(api):
    """The bound is the one announced: a body at the limit reaches the route's own validation."""
    at_limit = api.post(
        "/api/v1/jobs", content="[" * MAX_DEPTH + "]" * MAX_DEPTH, headers={"content-type": "application/json"}
    )
    assert at_limit.status_code == 400 and TOO_DEEP not in at_limit.text


def test_a_script_that_builds_a_deep_value_gets_400(appliance, api):
    """The job a script declares comes back from V8 as JSON, which nests as deep as the script likes."""
    deep_value = "let x = []; for (let i = 0; i < 3000; i++) x = [x];\nexecution.gpuRequirements = {info: x};\n"
    script = job_script().replace("execution.start", deep_value + "execution.start")
    refused = api.post("/api/v1/jobs", json={"name": "deep-value", "script": script})
    assert refused.status_code == 400
    assert (
        refused.json()["detail"]
        == f"the job the script declares nests arrays or objects more than {MAX_DEPTH} levels deep"
    )
    still_serving(appliance, api)


def test_an_oversized_json_body_gets_413_and_nothing_is_saved(appliance, api):
    script = "// " + "x" * MAX_JSON_BYTES
    refused = api.post("/api/v1/jobs", json={"name": "oversized", "script": script})
    assert refused.status_code == 413
    assert refused.json()["detail"] == f"A JSON body may be at most {MAX_JSON_BYTES >> 20} MiB."
    assert "oversized" not in {job["name"] for job in api.get("/api/v1/jobs").json()}
    still_serving(appliance, api)


async def error_for(worker: SimWorker) -> dict:
    """The next error the appliance sends the worker (errors to unnumbered messages name no request)."""
    for _ in range(100):
        if errors := [m for m in worker.messages if m["type"] == "error"]:
            worker.messages.clear()
            return errors[0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"no error came: {worker.messages}")


@pytest.mark.parametrize(
    "message",
    [
        DEEP,
        '{"type": "stored", "blobs": 1, "bytes": 2, "extra": ' + DEEP + "}",
        len(DEEP_HEADER).to_bytes(4, "little") + DEEP_HEADER,
    ],
    ids=["text", "unknown-field", "binary-header"],
)
async def test_a_deep_websocket_message_gets_an_error_and_every_worker_is_served(appliance, admin, message):
    cookie = cookie_of(admin)
    bystander = await SimWorker(appliance.url, cookie).start()
    culprit = await SimWorker(appliance.url, cookie).start()
    try:
        await culprit.ws.send(message)
        error = await error_for(culprit)
        assert error["code"] == "malformed" and TOO_DEEP in error["message"]
        # Its connection still works, and so does everyone else's.
        assert (await culprit.request({"type": "pause"}))["state"] == "paused"
        assert (await bystander.request({"type": "pause"}))["state"] == "paused"
    finally:
        await culprit.close()
        await bystander.close()


@pytest.mark.parametrize(
    "key,why",
    [
        ("a\\..\\..\\x", "backslash"),
        ("dir\\file.csv", "backslash"),
        ("line\nbreak", "control character U+000A"),
        ("del\x7f", "control character U+007F"),
        ("next-line\x85", "control character U+0085"),
        ("csi\x9b31m", "control character U+009B"),
    ],
)
def test_object_keys_with_backslashes_or_control_characters_are_refused(appliance, api, key, why):
    assert api.put("/api/v1/buckets/hostile-keys").status_code in (201, 409)  # 409: made by an earlier case
    content = f"stored under {key!r}".encode()
    refused = api.put(f"/api/v1/buckets/hostile-keys/objects/{urllib.parse.quote(key)}", content=content)
    assert refused.status_code == 400
    assert why in refused.json()["detail"]
    assert api.get("/api/v1/buckets/hostile-keys/objects").json() == []
    sha = hashlib.sha256(content).hexdigest()
    assert not (appliance.data_dir / "blobs" / sha[:2] / sha[2:4] / sha).exists()


def test_a_bucket_name_with_a_trailing_newline_is_refused(api):
    refused = api.put("/api/v1/buckets/abc%0A")
    assert refused.status_code == 400 and "lowercase letters" in refused.json()["detail"]
    assert "abc\n" not in {b["name"] for b in api.get("/api/v1/buckets").json()}
