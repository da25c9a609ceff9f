"""Past one machine: two schedulers and two edges on a real PostgreSQL and Redis (tests/services.py).

The workers are simulated pages (tests/sim_workers.py) connected to the edges; the processes are
`peermr serve --role scheduler|edge`, killed with SIGKILL as a machine that dies would be.
"""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.cluster import Cluster, leader_status, wait_for_leader
from tests.integration.test_billing_cli_webhook import run_python
from tests.integration.test_billing_stripe import KEY, stripe_get
from tests.integration.test_billing_stripe import localstripe as localstripe  # a fixture of this module too
from tests.integration.test_job_scheduling import job_script
from tests.integration.test_restart_recovery import Fleet, history, kinds, log, signed_in, until
from tests.sim_workers import SimWorker
from tests.support import Appliance, Client, run_cli

GRACE = "3"  # seconds a re-adopted run waits for its workers (as the restart tests)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, postgres_service, redis_service):
    cluster = Cluster(
        tmp_path_factory.mktemp("cluster"),
        postgres_service.new_database(),
        redis_service.url,
        PEERMR_JOB_RECOVERY_GRACE_SECONDS=GRACE,
        PEERMR_JOB_REPLACEMENT_GRACE_SECONDS=GRACE,
    )
    yield cluster
    cluster.stop()


def test_a_role_past_one_process_refuses_sqlite_and_needs_redis(tmp_path):
    refused = run_cli("serve", "--role", "scheduler", "--data-dir", str(tmp_path), env={"PATH": "/usr/bin:/bin"})
    assert refused.returncode != 0
    assert "set database_url (PEERMR_DATABASE_URL) to a postgresql:// URL" in refused.stderr, refused.stderr
    env = {"PATH": "/usr/bin:/bin", "PEERMR_DATABASE_URL": "postgresql://peermr@db.example/peermr"}
    no_redis = run_cli("serve", "--role", "edge", "--data-dir", str(tmp_path), env=env)
    assert no_redis.returncode != 0
    assert "set redis_url (PEERMR_REDIS_URL) to a redis:// URL" in no_redis.stderr, no_redis.stderr


async def test_a_standby_takes_over_a_killed_scheduler_and_the_run_finishes_through_the_edges(cluster):
    first = cluster.start("scheduler", "scheduler-1")
    wait_for_leader(first)
    second = cluster.start("scheduler", "scheduler-2")
    edges = [cluster.start("edge", "edge-1"), cluster.start("edge", "edge-2")]
    assert leader_status(second) == 429  # a standby
    assert all(leader_status(edge) == 429 for edge in edges)  # edges never lead
    # A standby serves its probes and nothing else; the edges pass the dashboard to the leader.
    assert httpx.get(f"{second.url}/login", timeout=5).status_code == 503
    async with connect(second.url.replace("http", "ws", 1) + "/ws/worker", origin=second.url) as socket:
        with pytest.raises(ConnectionClosed) as closed:
            await socket.recv()
    assert closed.value.rcvd.code == 1013  # "try again later": a page that reached it reconnects
    assert httpx.get(f"{edges[1].url}/login", timeout=5).status_code == 200

    # Two workers, one on each edge, run a 2-rank job into its reduce.
    cookie, api = signed_in(edges[0])
    fleet = Fleet(edges[0])
    await fleet.connect(cookie, "edge-one-0001")
    fleet.appliance = edges[1]
    await fleet.connect(cookie, "edge-two-0001")
    run_id = api.run(api.job(job_script(workers=2)))["id"]
    await until(lambda: sum(k == "reduce" for w in fleet.workers.values() for k in kinds(w)) == 2)
    await asyncio.sleep(1.5)  # a checkpoint is written within a second of a change

    first.kill()
    took = await asyncio.to_thread(wait_for_leader, second)
    assert took < 10, f"the standby took {took:.1f} s to lead"
    fleet.reduces.set()
    try:
        done = await api.wait(run_id, timeout=40)
        assert done["state"] == "succeeded", done
        assert "the run continues with 3 finished task(s) kept" in log(api, run_id)
        assert [(r, a, s) for r, a, s, _ in history(second, run_id, 0)] == [(0, 0, "done"), (1, 0, "done")]
        # The edges asked the pages to say hello to the new leader on the sockets they had.
        for worker in fleet.workers.values():
            assert any(m["type"] == "hello-again" for m in worker.messages), worker.messages
            assert not worker.reader.done()
    finally:
        await fleet.close()


async def test_the_pages_of_a_killed_edge_come_back_through_another_and_their_run_goes_on(cluster):
    leader = cluster.leader()
    doomed, other = cluster.start("edge", "edge-3"), cluster.start("edge", "edge-4")
    cookie, api = signed_in(other)
    fleet = Fleet(doomed)
    pages = {"killed-edge-0001": "a1b2c3d4e5f60001", "killed-edge-0002": "a1b2c3d4e5f60002"}

    async def connect(through: Appliance, name: str, blobs: list[str] | None = None) -> None:
        worker = SimWorker(
            through.url,
            cookie,
            worker_id=name,
            on_task=fleet.handle,
            on_blob_receive=fleet.receive,
            blobs=blobs,
            instance=pages[name],
        )
        fleet.workers[name] = await worker.start()

    for name in pages:
        await connect(doomed, name)
    run_id = api.run(api.job(job_script(workers=2)))["id"]
    await until(lambda: sum(k == "reduce" for w in fleet.workers.values() for k in kinds(w)) == 2)

    doomed.kill()
    fleet.reduces.set()
    # The same pages (same page load) reconnect at once through the other edge, keeping their blobs;
    # the scheduler takes them back whether or not it has yet seen the dead edge's sockets go.
    for name, worker in list(fleet.workers.items()):
        await until(lambda w=worker: w.reader.done(), timeout=10)
        await connect(other, name, list(worker.blobs))
    try:
        done = await api.wait(run_id, timeout=40)
        assert done["state"] == "succeeded", done
        # The maps' outputs stayed in the pages: only the reduces ran again.
        assert [(r, a, s) for r, a, s, _ in history(leader, run_id, 0)] == [(0, 0, "done"), (1, 0, "done")]
        # Taken back as the same pages: their earlier sockets dropped, or gone with the edge's key.
        assert re.search(r"killed-edge-0001 connected again|stopped renewing its key", leader.log())
    finally:
        await fleet.close()


def connected(through: Appliance) -> float:
    """Workers in the leader's fleet, from its /metrics (asked through an edge)."""
    text = httpx.get(f"{through.url}/metrics", timeout=10).text
    rows = [line for line in text.splitlines() if line.startswith("peermr_workers_connected{")]
    return sum(float(line.rsplit(" ", 1)[1]) for line in rows)


async def test_the_sockets_of_an_edge_that_dies_leave_the_fleet_when_its_key_lapses(cluster):
    cluster.leader()
    doomed, other = cluster.start("edge", "edge-5"), cluster.start("edge", "edge-6")
    cookie, _ = signed_in(other)
    before = connected(other)
    workers = [await SimWorker(doomed.url, cookie).start() for _ in range(2)]
    try:
        await until(lambda: connected(other) == before + 2, timeout=10)
        doomed.kill()  # it cannot say its sockets closed
        # Not after their 45 s ping silence: the dead edge's key lapses and its sockets leave.
        await until(lambda: connected(other) == before, timeout=40)
        assert "stopped renewing its key: its 2 socket(s) leave" in cluster.leader().log()
    finally:
        for worker in workers:
            await worker.close()


async def test_the_monthly_close_sends_each_invoice_once_across_a_leadership_change(
    tmp_path, postgres_service, redis_service, localstripe
):
    httpx.delete(f"{localstripe}/_config/data", timeout=10).raise_for_status()  # a fresh Stripe
    stripe = {"PEERMR_STRIPE_API_KEY": KEY, "PEERMR_STRIPE_API_BASE": localstripe}
    cluster = Cluster(tmp_path, postgres_service.new_database(), redis_service.url, **stripe)
    first = cluster.process("scheduler", "close-1")
    try:
        assert first.cli("migrate").returncode == 0
        emails = [f"coordinator{n}@example.com" for n in range(4)]
        for email in emails:
            first.add_user(email, "coordinator", "coordinator-password-1")
        accounts = [account for (account,) in first.query("SELECT id FROM accounts_user WHERE role = 'coordinator'")]
        # Usage in eight months gone by: the leader's catch-up closes them and sends 32 invoices.
        months = [f"2026-{m:02d}" for m in range(2, 10)]
        run_python(
            first,
            f"""
            await prices.set_price("cpu_ms", "100", "50", dt.date(2026, 1, 1), tz=billing.tz)
            for account in {accounts}:
                for month in range(2, 10):
                    at = dt.datetime(2026, month, 9, tzinfo=dt.UTC)
                    entry = Entry(account, "cpu_ms", "consumer", 3_600_000, f"{{account}}-{{month}}", at)
                    await ledger.record([entry], billing.tz)
            """,
        )
        standby = cluster.process("scheduler", "close-2")
        first.start()
        wait_for_leader(first)
        starting = asyncio.create_task(asyncio.to_thread(standby.start))
        sent = "SELECT count(*) FROM billing_invoice WHERE state = 'sent'"
        await until(lambda: first.query(sent)[0][0] >= 1, timeout=60)
        first.kill()  # in the middle of sending the invoices
        assert first.query(sent)[0][0] < len(emails) * len(months), "the close was over before the kill"
        await starting
        await asyncio.to_thread(wait_for_leader, standby)
        await until(lambda: standby.query(sent)[0][0] == len(emails) * len(months), timeout=90)
        for email in emails:
            [customer] = stripe_get(localstripe, "/v1/customers", email=email)["data"]
            invoices = stripe_get(localstripe, "/v1/invoices", customer=customer["id"], limit=100)["data"]
            assert len(invoices) == len(months) and all(i["status"] == "open" for i in invoices), invoices
        # Every month from the first with usage to the last one over is closed, once.
        closed = standby.query("SELECT period, count(*) FROM billing_period GROUP BY period ORDER BY period")
        assert set(months) <= {period for period, _ in closed} and {count for _, count in closed} == {1}, closed
    finally:
        cluster.stop()


def test_the_scheduler_sees_the_browsers_address_as_the_edge_found_it_not_as_the_browser_claims(cluster):
    leader = cluster.leader()
    edge = cluster.start("edge", "edge-7")
    # From another loopback address: a browser, not a load balancer the edge believes (127.0.0.1).
    client = Client(edge.url, transport=httpx.HTTPTransport(local_address="127.0.0.2"))
    refused = client.form(
        "/login",
        {"email": "nobody@example.com", "password": "wrong-password-1"},
        headers={"X-Forwarded-For": "203.0.113.9"},
    )
    assert refused.status_code in (400, 401, 403), refused.text[:300]
    lines = [line for line in leader.log().splitlines() if "refused sign-in: nobody@example.com" in line]
    assert lines and all(" from 127.0.0.2: " in line for line in lines), lines
