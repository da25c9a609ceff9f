"""The warm task sandbox (jobs/sandbox_routes.py): a tab's idle Web Worker with the runtime loaded,
which a run may have load its script instead of starting a Web Worker. It must never let a run's
code work under another policy than the run's own (simulated workers fetch both scripts here; real
browsers use it in tests/e2e/test_shuffle_in_browsers.py)."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.test_job_scheduling import job_script
from tests.sim_workers import SimWorker, cookie_of
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance

CDN = "https://cdn.example.org"


@pytest.fixture(scope="module")
def appliance(appliance_with):
    return appliance_with(fetch_origins=CDN)


async def prepared(appliance: Appliance, carol_client, carol, script: str) -> dict:
    """The task-prepare a worker gets when a run of the script starts on it (the run then waits)."""
    worker = await SimWorker(appliance.url, cookie_of(carol_client), on_task=lambda *_: asyncio.sleep(0)).start()
    try:
        run = carol.run(carol.job(script))
        for _ in range(300):
            if prepare := next((m for m in worker.messages if m.get("type") == "task-prepare"), None):
                return {**prepare, "worker": worker, "run": run["id"]}
            await asyncio.sleep(0.1)
        raise AssertionError(f"no task-prepare: {worker.messages}")
    except BaseException:
        await worker.close()
        raise


async def test_a_warm_sandbox_has_the_policy_of_the_runs_it_may_load(appliance, carol_client, carol):
    prepare = await prepared(appliance, carol_client, carol, job_script(workers=1))
    try:
        assert prepare["warm"].startswith("/worker/sandbox.js?origins=")
        own = carol_client.get(prepare["script"])
        warm = carol_client.get(prepare["warm"])
        assert own.status_code == warm.status_code == 200, (own.text[:300], warm.text[:300])
        # The same sandbox frame, whose Content-Security-Policy is the appliance, the allowed origins,
        # eval; nothing else. It is loaded without credentials: anyone gets it.
        assert warm.headers["x-peermr-frame"] == own.headers["x-peermr-frame"]
        frame = appliance.client().get(warm.headers["x-peermr-frame"])
        assert frame.status_code == 200 and "sandbox-frame.js" in frame.text
        assert f"connect-src {appliance.url} {CDN};" in frame.headers["content-security-policy"]
        assert warm.headers["cache-control"] == "no-store"  # a policy of its own time, never reused
        # The runtime alone: the run's script, loaded into it, does not load the runtime again.
        assert "importScripts(" in warm.text and "define(" not in warm.text
        assert own.text.startswith("if (!self.peermrSandbox) importScripts(")
        # Only for worker browsers and signed-in accounts.
        assert appliance.client().get(prepare["warm"], follow_redirects=False).status_code == 303
    finally:
        carol.http.post(f"/runs/{prepare['run']}/cancel", json={})
        await prepare["worker"].close()


async def test_runs_whose_policy_differs_start_their_own_sandbox(appliance, carol_client, carol):
    # A script from another origin widens script-src beyond the warm sandbox's.
    foreign = job_script(workers=1, scripts=f"['{CDN}/lib.js']")
    prepare = await prepared(appliance, carol_client, carol, foreign)
    try:
        assert "warm" not in prepare  # (an empty field is left out)
    finally:
        carol.http.post(f"/runs/{prepare['run']}/cancel", json={})
        await prepare["worker"].close()
    # Scripts of the appliance's own (the vendored TF.js) keep it.
    vendored = job_script(workers=1, scripts="['/static/vendor/tfjs/tf.min.js']")
    prepare = await prepared(appliance, carol_client, carol, vendored)
    try:
        assert prepare["warm"].startswith("/worker/sandbox.js?origins=")
    finally:
        carol.http.post(f"/runs/{prepare['run']}/cancel", json={})
        await prepare["worker"].close()


async def test_a_warm_sandbox_of_an_earlier_allow_list_is_refused(appliance, carol_client, carol):
    prepare = await prepared(appliance, carol_client, carol, job_script(workers=1))
    await prepare["worker"].close()
    carol.http.post(f"/runs/{prepare['run']}/cancel", json={})
    admin = appliance.client()
    admin.login(ADMIN_EMAIL, ADMIN_PASSWORD)
    saved = admin.form("/ui/admin/settings/fetch-origins", {"origins": "https://data.example.org"})
    assert saved.status_code == 303, saved.text[:500]
    try:
        stale = carol_client.get(prepare["warm"])
        assert stale.status_code == 404
        # Runs started from now on name the new policy's warm sandbox, which is served.
        now = await prepared(appliance, carol_client, carol, job_script(workers=1))
        try:
            assert now["warm"] != prepare["warm"]
            fresh = carol_client.get(now["warm"])
            assert fresh.status_code == 200 and "data.example.org" in fresh.headers["x-peermr-frame"]
        finally:
            carol.http.post(f"/runs/{now['run']}/cancel", json={})
            await now["worker"].close()
    finally:
        admin.form("/ui/admin/settings/fetch-origins", {"origins": ""})
