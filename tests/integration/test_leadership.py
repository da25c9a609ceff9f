"""Scheduler leadership on a real PostgreSQL: one leader, and a standby that takes over when the leader
stops, dies, loses its session or finds the database again (appliance/cluster/leadership.py)."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import sys
import urllib.parse

import asyncpg
import pytest

from appliance.cluster.leadership import Leadership, current_leader
from tests.support import free_port, run_cli

RETRY = 1.0  # seconds between a standby's tries
CHECK = 1.0  # seconds between a leader's checks of its connection
# Bounds several times what is expected, for a loaded machine.
TAKEOVER = 15.0

CONTENDER = """
import asyncio, sys
from appliance.cluster.leadership import Leadership

async def lead():
    await Leadership(sys.argv[1], advertise=sys.argv[2], key=int(sys.argv[3])).acquire()
    print("leading", flush=True)
    await asyncio.sleep(3600)

asyncio.run(lead())
"""


@pytest.fixture(scope="module")
def database(postgres_service, tmp_path_factory) -> str:
    """A database with the appliance's tables, as `peermr serve` makes it before a scheduler leads."""
    url = postgres_service.new_database()
    result = run_cli(
        "migrate",
        "--data-dir",
        str(tmp_path_factory.mktemp("leadership")),
        env={**os.environ, "PEERMR_DATABASE_URL": url},
    )
    assert result.returncode == 0, result.stderr
    return url


@pytest.fixture
def key() -> int:
    """A lock of the test's own: a test left with a leader does not hold up the next."""
    return secrets.randbits(63)


@pytest.fixture
async def contenders(database, key):
    """Makes Leaderships on the database; those still leading at the end release."""
    made: list[Leadership] = []

    def make(url: str, database_url: str = database) -> Leadership:
        made.append(Leadership(database_url, advertise=url, retry_seconds=RETRY, check_seconds=CHECK, key=key))
        return made[-1]

    yield make
    for leadership in made:
        await leadership.release()


async def test_one_leads_and_the_standby_takes_over_when_it_releases(database, key, contenders):
    first, second = contenders("http://first:8000"), contenders("http://second:8000")
    assert await current_leader(database, key=key) is None

    await first.acquire()
    standby = asyncio.create_task(second.acquire())
    await asyncio.sleep(3 * RETRY)
    assert first.leader and not second.leader and not standby.done()
    assert await current_leader(database, key=key) == "http://first:8000"

    await first.release()
    assert not first.leader
    await asyncio.wait_for(standby, RETRY + TAKEOVER)
    assert second.leader
    assert await current_leader(database, key=key) == "http://second:8000"
    assert not first.lost.is_set()  # a release is no loss

    await second.release()
    assert await current_leader(database, key=key) is None


async def test_the_standby_leads_once_the_leaders_process_is_killed(database, key, contenders):
    doomed = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CONTENDER, database, "http://doomed:8000", str(key), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert await asyncio.wait_for(doomed.stdout.readline(), 60) == b"leading\n"
        assert await current_leader(database, key=key) == "http://doomed:8000"
        standby = contenders("http://standby:8000")
        taking_over = asyncio.create_task(standby.acquire())
        await asyncio.sleep(2 * RETRY)
        assert not taking_over.done()

        doomed.kill()
        await asyncio.wait_for(taking_over, TAKEOVER)
        assert await current_leader(database, key=key) == "http://standby:8000"
    finally:
        if doomed.returncode is None:
            doomed.kill()
        await doomed.wait()


async def test_a_leader_whose_session_ends_is_told_and_the_standby_takes_over(database, key, contenders):
    leader, standby = contenders("http://leader:8000"), contenders("http://standby:8000")
    await leader.acquire()
    taking_over = asyncio.create_task(standby.acquire())

    admin = await asyncpg.connect(database)
    try:
        ended = await admin.fetchval(
            "SELECT pg_terminate_backend(backend_pid) FROM cluster_leader WHERE lock_key = $1", key
        )
    finally:
        await admin.close()
    assert ended

    await asyncio.wait_for(leader.lost.wait(), CHECK + TAKEOVER)
    assert not leader.leader
    await asyncio.wait_for(taking_over, RETRY + TAKEOVER)
    assert standby.leader
    assert await current_leader(database, key=key) == "http://standby:8000"


async def test_waits_out_an_unreachable_database_and_says_so_once(database, key, contenders, haproxy_service, caplog):
    caplog.set_level(logging.INFO, logger="appliance.cluster.leadership")
    # The database behind a proxy that is not there yet: connections are refused until it starts.
    proxy_port = free_port()
    through_proxy = urllib.parse.urlsplit(database)._replace(netloc=netloc_at(database, proxy_port)).geturl()
    leadership = contenders("http://patient:8000", through_proxy)
    waiting = asyncio.create_task(leadership.acquire())
    await asyncio.sleep(4 * RETRY)
    assert not waiting.done()

    database_port = urllib.parse.urlsplit(database).port
    haproxy_service(
        "defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 1m\n  timeout server 1m\n"
        f"listen postgres\n  bind 127.0.0.1:{proxy_port}\n  server db 127.0.0.1:{database_port}\n"
    )
    await asyncio.wait_for(waiting, RETRY + TAKEOVER)
    assert leadership.leader
    messages = [record.getMessage() for record in caplog.records]
    assert len([m for m in messages if "does not answer" in m]) == 1, messages
    assert len([m for m in messages if "answers again" in m]) == 1, messages


def netloc_at(url: str, port: int) -> str:
    """The user, password and host of ``url`` at another port."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.username}:{parts.password}@{parts.hostname}:{port}"
