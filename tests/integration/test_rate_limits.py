"""Per-account rate limits on API requests and on run submissions (API and dashboard alike)."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.integration.test_job_scheduling import Api, job_script, token_for
from tests.support import Appliance

API_PER_MINUTE = 20
RUNS_PER_MINUTE = 3


@pytest.fixture(scope="module")
def appliance(appliance_with):
    server = appliance_with(api_requests_per_minute=API_PER_MINUTE, run_submissions_per_minute=RUNS_PER_MINUTE)
    for name in ("carol", "dave", "erin"):
        server.add_user(f"{name}@example.com", "coordinator", f"{name}-password-1")
    return server


def api(appliance: Appliance, name: str) -> Api:
    return Api(appliance, token_for(appliance, f"{name}@example.com"))


def assert_limited(response: httpx.Response, what: str, per_minute: int) -> int:
    assert response.status_code == 429, response.text
    assert f"Too many {what}: at most {per_minute} a minute per account" in response.json()["detail"]
    retry_after = int(response.headers["retry-after"])
    assert 1 <= retry_after <= 60
    return retry_after


def test_api_requests_over_the_limit_get_429_with_retry_after_and_other_accounts_are_not_limited(appliance):
    carol, dave = api(appliance, "carol"), api(appliance, "dave")
    for _ in range(API_PER_MINUTE):
        assert carol.http.get("/me").status_code == 200
    retry_after = assert_limited(carol.http.get("/me"), "API requests", API_PER_MINUTE)
    # Each refused request counts nothing: carol is still refused, dave is not limited at all.
    assert carol.http.get("/runs").status_code == 429
    assert dave.http.get("/me").status_code == 200
    # Waiting as long as Retry-After says lets the next request in.
    time.sleep(retry_after)
    assert carol.http.get("/me").status_code == 200


def test_run_submissions_are_limited_per_account_across_the_api_and_the_dashboard(appliance):
    dave, erin = api(appliance, "dave"), api(appliance, "erin")
    job_id = dave.job(job_script(workers=1))
    for _ in range(RUNS_PER_MINUTE):
        dave.run(job_id)
    assert_limited(dave.http.post(f"/jobs/{job_id}/runs", json={}), "run submissions", RUNS_PER_MINUTE)
    queued = appliance.query("SELECT count(*) FROM jobs_run")[0][0]

    # The dashboard's run form is the same allowance: refused with the message and Retry-After.
    browser = appliance.client()
    browser.login("dave@example.com", "dave-password-1")
    browser.get(f"/ui/jobs/{job_id}/run")
    refused = browser.form(f"/ui/jobs/{job_id}/runs", {"worker_count": "1"})
    assert refused.status_code == 429
    assert "Too many run submissions" in refused.text
    assert int(refused.headers["retry-after"]) >= 1
    assert appliance.query("SELECT count(*) FROM jobs_run")[0][0] == queued, "a refused submission queued a run"

    # Another account submits as usual.
    erin_job = erin.job(job_script(workers=1))
    assert erin.http.post(f"/jobs/{erin_job}/runs", json={}).status_code == 201
