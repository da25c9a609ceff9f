"""The queue never jams: back-fill past runs that cannot start, fair share between accounts,
queue timeouts, and wait reasons that name the rule (simulated workers, a real appliance).
"""

from __future__ import annotations

import asyncio
import html
import re
import time

import pytest

from tests.integration.test_job_scheduling import Api, job_script, token_for
from tests.sim_workers import SimWorker, cookie_of, start_workers
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD


@pytest.fixture(scope="module")
def appliance(appliance_with):
    # Fair share at a half: while another account's run waits, an account's runs may start on
    # at most half of the connected workers.
    return appliance_with(job_fair_share=0.5)


@pytest.fixture(scope="module")
def people(appliance):
    clients = {}
    for name in ("carol", "dave"):
        appliance.add_user(f"{name}@example.com", "coordinator", f"{name}-password-1")
        client = appliance.client()
        client.login(f"{name}@example.com", f"{name}-password-1")
        clients[name] = client
    return clients


@pytest.fixture(scope="module")
def carol(appliance, people):
    return Api(appliance, token_for(appliance, "carol@example.com"))


@pytest.fixture(scope="module")
def dave(appliance, people):
    return Api(appliance, token_for(appliance, "dave@example.com"))


async def hold(worker: SimWorker, task: dict) -> None:
    """A task that runs until the test releases it (by closing the worker or the run's end)."""
    await asyncio.sleep(3600)


async def test_a_run_that_cannot_start_does_not_hold_back_one_that_can(appliance, people, carol):
    workers = await start_workers(appliance.url, cookie_of(people["carol"]), 3)
    try:
        impossible = carol.run(carol.job(job_script(workers=4)))
        await asyncio.sleep(1.5)
        waiting = carol.get(impossible["id"])
        assert waiting["state"] == "queued"
        assert waiting["reason"] == (
            "asks 4, 3 connected, 3 eligible: waits for more workers to connect (runs queued later may start meanwhile)"
        )
        possible = carol.run(carol.job(job_script(workers=3)))
        assert (await carol.wait(possible["id"]))["state"] == "succeeded"
        assert carol.get(impossible["id"])["state"] == "queued"
        # A fourth worker connects: the run at the head starts with it.
        workers.append(await SimWorker(appliance.url, cookie_of(people["carol"])).start())
        assert (await carol.wait(impossible["id"]))["state"] == "succeeded"
    finally:
        for w in workers:
            await w.close()


async def test_a_head_that_could_run_keeps_its_workers_for_itself(appliance, people, carol):
    workers = await start_workers(appliance.url, cookie_of(people["carol"]), 4, on_task=hold)
    try:
        first = carol.run(carol.job(job_script(workers=2)))  # takes two workers and holds them
        assert (await carol.wait(first["id"], states=("running",)))["state"] == "running"
        # Four are connected, so this one could run once the first ends: the idle two are kept for it.
        head = carol.run(carol.job(job_script(workers=4)))
        behind = carol.run(carol.job(job_script(workers=1)))
        await asyncio.sleep(1.5)
        assert carol.get(head["id"])["reason"] == (
            "needs 4 idle workers, 2 eligible idle, 2 eligible busy (queue order: it gets them first as they free up)"
        )
        assert carol.get(behind["id"])["reason"] == (
            "needs 1 idle worker, 0 eligible idle (2 more kept for runs queued earlier), 2 eligible busy"
        )
        carol.http.post(f"/runs/{first['id']}/cancel")
        assert (await carol.wait(head["id"], states=("running",)))["state"] == "running"
        assert carol.get(behind["id"])["state"] == "queued"
        carol.http.post(f"/runs/{head['id']}/cancel")
        assert (await carol.wait(behind["id"], states=("running",)))["state"] == "running"
        carol.http.post(f"/runs/{behind['id']}/cancel")
    finally:
        for w in workers:
            await w.close()


async def test_a_client_waiting_on_a_run_hears_of_its_end_at_once(appliance, people, carol, dave):
    """GET /runs/{id}?wait=S, a long poll: answered as the run ends (not S seconds later), after S
    while it goes on, at once when it already ended; a wait out of range is refused with why, and
    nobody waits on a run they may not see."""
    workers = await start_workers(appliance.url, cookie_of(people["carol"]), 1, on_task=hold)
    canceller = Api(appliance, token_for(appliance, "carol@example.com"))  # a second client of hers
    try:
        run = carol.run(carol.job(job_script(workers=1)))
        path = f"/runs/{run['id']}"
        assert (await carol.wait(run["id"], states=("running",)))["state"] == "running"
        asked = time.monotonic()
        still = await asyncio.to_thread(carol.http.get, path, params={"wait": 1.5})
        assert still.json()["state"] == "running"
        assert time.monotonic() - asked >= 1.4

        async def cancel_soon() -> None:
            await asyncio.sleep(1)
            await asyncio.to_thread(canceller.http.post, f"{path}/cancel")

        cancelling = asyncio.create_task(cancel_soon())
        asked = time.monotonic()
        ended = await asyncio.to_thread(carol.http.get, path, params={"wait": 45}, timeout=60)
        await cancelling
        assert ended.json()["state"] == "cancelled"
        assert time.monotonic() - asked < 20  # the cancel, not the 45 s
        asked = time.monotonic()
        assert carol.http.get(path, params={"wait": 45}, timeout=60).json()["state"] == "cancelled"
        assert time.monotonic() - asked < 5

        for bad, why in (("-1", "wait must be between 0 and 60 seconds"), ("61", "between 0 and 60"), ("nan", "")):
            refused = carol.http.get(path, params={"wait": bad})
            assert refused.status_code == 400 and why in refused.text, refused.text
        assert carol.http.get(path, params={"wait": "soon"}).status_code == 400
        asked = time.monotonic()
        assert dave.http.get(path, params={"wait": 30}).status_code == 404  # not his run: no wait either
        assert time.monotonic() - asked < 5
    finally:
        for w in workers:
            await w.close()


async def test_fair_share_lets_another_account_in_while_one_holds_half_the_fleet(appliance, people, carol, dave):
    workers = await start_workers(appliance.url, cookie_of(people["carol"]), 4, on_task=hold)
    try:
        mine = carol.run(carol.job(job_script(workers=2)))
        await asyncio.sleep(1.5)
        assert carol.get(mine["id"])["state"] == "running"
        # Nobody else waits: carol may take more than half of the fleet.
        second = carol.run(carol.job(job_script(workers=1)))
        await asyncio.sleep(1.5)
        assert carol.get(second["id"])["state"] == "running"
        carol.http.post(f"/runs/{second['id']}/cancel")
        # Carol's next run could start once hers end and would keep the two idle workers for itself;
        # with dave waiting, her runs may hold no more than half of the four, so dave's run starts.
        big = carol.run(carol.job(job_script(workers=3)))
        small = dave.run(dave.job(job_script(workers=1)))
        assert (await dave.wait(small["id"], states=("running",)))["state"] == "running"
        assert carol.get(big["id"])["reason"] == (
            "fair share: the account's runs hold 2 worker(s); 3 more would pass its limit of 2 "
            "(50% of the connected workers) while another account's run waits"
        )
        for api, run in ((carol, mine), (dave, small)):
            api.http.post(f"/runs/{run['id']}/cancel")
        assert (await carol.wait(big["id"], states=("running",)))["state"] == "running"
        carol.http.post(f"/runs/{big['id']}/cancel")
    finally:
        for w in workers:
            await w.close()


async def test_a_run_that_waits_past_its_queue_timeout_fails_with_the_reason(appliance, people, carol):
    run = carol.run(carol.job(job_script(workers=2, queueTimeout=2)))
    failed = await carol.wait(run["id"], timeout=30)
    assert failed["state"] == "failed"
    assert failed["reason"] == (
        "not started within its queue timeout of 2 s (asks 2, 0 connected, 0 eligible: waits for more workers to "
        "connect (runs queued later may start meanwhile))"
    )
    # The run dialog's and the API's override wins over the script's.
    other = carol.run(carol.job(job_script(workers=2, queueTimeout=3600)), queueTimeout=1)
    assert (await carol.wait(other["id"], timeout=30))["state"] == "failed"


async def test_an_admin_changes_the_queue_rules_while_the_appliance_runs(appliance, carol):
    admin = appliance.client()
    admin.login(ADMIN_EMAIL, ADMIN_PASSWORD)
    in_force = r'id="scheduling-in-force">In force: (.*?)</p>'

    def shown() -> str:
        return " ".join(re.search(in_force, admin.get("/ui/admin/settings").text, re.S).group(1).split())

    assert shown() == "queue timeout 24 h, fair share 50 %, stalled after 60 s."  # the environment's
    refused = admin.form("/ui/admin/settings/scheduling", {"fair_share_percent": "150", "stall_seconds": "0.5"})
    assert refused.status_code == 400
    # Every bad field is named, not only the first.
    assert "The fair share must be from 1 to 100, not 150." in html.unescape(refused.text)
    assert "The stall time must be a whole number, not '0.5'." in html.unescape(refused.text)
    assert 'value="150"' in refused.text and 'value="0.5"' in refused.text  # what was typed stays
    assert shown() == "queue timeout 24 h, fair share 50 %, stalled after 60 s."  # nothing saved

    saved = admin.form(
        "/ui/admin/settings/scheduling",
        {"queue_timeout_hours": "0.0005", "fair_share_percent": "100", "stall_seconds": "30"},
    )
    assert saved.status_code == 303
    assert shown() == "queue timeout 0.0005 h, fair share no limit, stalled after 30 s."
    # The new timeout applies at once: a run nobody can serve fails after about 2 s, not 24 h.
    run = carol.run(carol.job(job_script(workers=2)))
    failed = await carol.wait(run["id"], timeout=30)
    assert failed["reason"].startswith("not started within its queue timeout of 1.8 s"), failed

    # Emptied fields fall back to the environment's values.
    admin.form(
        "/ui/admin/settings/scheduling", {"queue_timeout_hours": "", "fair_share_percent": "", "stall_seconds": ""}
    )
    assert shown() == "queue timeout 24 h, fair share 50 %, stalled after 60 s."
