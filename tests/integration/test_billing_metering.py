"""Runs on a real appliance (simulated workers) land in the billing ledger under the PeerMR rules."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.test_job_scheduling import Api, job_script, token_for
from tests.sim_workers import SimWorker, cookie_of, start_workers

CPU_MS = 250


async def busy(worker: SimWorker, task: dict) -> None:
    """Every task reports CPU_MS of execution."""
    await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": [], "emits": 0, "cpuMs": CPU_MS})


@pytest.fixture(scope="module")
def accounts(appliance):
    appliance.add_user("carol@example.com", "coordinator", "carol-password-1")
    appliance.add_user("walt@example.com", "worker", "walt-password-12")
    clients = {}
    for name, password in (("carol", "carol-password-1"), ("walt", "walt-password-12")):
        clients[name] = appliance.client()
        clients[name].login(f"{name}@example.com", password)
    ids = dict(appliance.query("SELECT email, id FROM accounts_user"))
    return (
        clients,
        ids["carol@example.com"],
        ids["walt@example.com"],
        Api(appliance, token_for(appliance, "carol@example.com")),
    )


def ledger(appliance, run_id: int) -> dict[tuple[int, str, str], int]:
    rows = appliance.query(f"SELECT account, resource, side, quantity FROM billing_usage WHERE run = {run_id}")
    found: dict[tuple[int, str, str], int] = {}
    for account, resource, side, quantity in rows:
        found[(account, resource, side)] = found.get((account, resource, side), 0) + quantity
    return found


async def wait_for_rows(appliance, run_id: int) -> dict:
    for _ in range(50):
        found = ledger(appliance, run_id)
        if found:
            return found
        await asyncio.sleep(0.1)
    return {}


async def test_a_run_bills_its_owner_and_pays_the_other_accounts_browsers(appliance, accounts):
    clients, carol, walt, api = accounts
    own = await start_workers(appliance.url, cookie_of(clients["carol"]), 1, on_task=busy)
    other = await start_workers(appliance.url, cookie_of(clients["walt"]), 1, on_task=busy)
    try:
        run = api.run(api.job(job_script(workers=2)))
        assert (await api.wait(run["id"]))["state"] == "succeeded"
        tasks = appliance.query(
            f"SELECT worker_account, cpu_ms FROM jobs_task WHERE run = {run['id']} AND state = 'done'"
        )
        assert len(tasks) == 1 + 2 + 2
        walt_ms = sum(ms for account, ms in tasks if account == walt)
        assert walt_ms > 0 and walt_ms < 5 * CPU_MS  # the two browsers shared the tasks
        assert await wait_for_rows(appliance, run["id"]) == {
            (carol, "cpu_ms", "consumer"): 5 * CPU_MS,
            (walt, "cpu_ms", "provider"): walt_ms,  # carol's own browser earns nothing
        }
    finally:
        for w in own + other:
            await w.close()


async def test_a_private_run_bills_no_compute(appliance, accounts):
    clients, carol, walt, api = accounts
    own = await start_workers(appliance.url, cookie_of(clients["carol"]), 2, on_task=busy)
    try:
        run = api.run(api.job(job_script(workers=2)), privateMode=True)
        assert (await api.wait(run["id"]))["state"] == "succeeded"
        await asyncio.sleep(0.5)
        assert ledger(appliance, run["id"]) == {}
    finally:
        for w in own:
            await w.close()
