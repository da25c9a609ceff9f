"""The parameter server and the peer mailbox, spoken to by simulated workers (tests/sim_workers.py).

Each simulated worker holds a rank in a run whose map stage it keeps open while the test sends
ps-* and peer-* requests in that task's name, as the worker page does for job code; values go as
binary WebSocket frames. Browsers drive the same paths in tests/e2e/test_peers_in_browsers.py.
"""

from __future__ import annotations

import asyncio
import re
import struct

import pytest

from tests.integration.test_job_scheduling import Api, job_script, token_for
from tests.sim_workers import SimWorker, cookie_of

SHA = "ab" * 32


@pytest.fixture(scope="module")
def cookie(carol_client):
    return cookie_of(carol_client)


class Training:
    """A run of ``ranks`` simulated workers, each holding its map task open until ``release``."""

    def __init__(self, appliance, carol: Api, cookie: str, ranks: int, **spec):
        self.appliance, self.carol, self.cookie, self.ranks = appliance, carol, cookie, ranks
        self.script = job_script(workers=ranks, **spec)
        self.maps: dict[int, tuple[SimWorker, dict]] = {}
        self.all_started = asyncio.Event()
        self.release = asyncio.Event()

    async def on_task(self, worker: SimWorker, task: dict) -> None:
        if task["kind"] == "map":
            self.maps[task["rank"]] = (worker, task)
            if len(self.maps) == self.ranks:
                self.all_started.set()
            await self.release.wait()
        await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": [], "emits": 0})

    async def __aenter__(self) -> Training:
        self.workers = [
            await SimWorker(self.appliance.url, self.cookie, on_task=self.on_task).start() for _ in range(self.ranks)
        ]
        self.run = self.carol.run(self.carol.job(self.script))
        await asyncio.wait_for(self.all_started.wait(), 30)
        return self

    async def __aexit__(self, *exc) -> None:
        self.release.set()
        for worker in self.workers:
            await worker.close()

    async def ask(self, rank: int, message: dict, payload: bytes | None = None, timeout: float | None = 30) -> dict:
        worker, task = self.maps[rank]
        return await worker.request({**message, "taskId": task["taskId"]}, payload, timeout)

    async def finish(self) -> dict:
        self.release.set()
        return await self.carol.wait(self.run["id"])


def floats(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}d", *values)


def ints(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}i", *values)


async def test_concurrent_updates_sum_exactly_and_values_download_after_the_run(appliance, carol, cookie, carol_client):
    async with Training(appliance, carol, cookie, 8) as run:
        size = 1000
        written = await run.ask(0, {"type": "ps-write", "key": "w", "dtype": "int32"}, ints(*[0] * size))
        assert written["version"] == 1

        async def rank_updates(rank: int) -> None:
            for step in range(25):
                delta = ints(*[rank * 100 + step] * size)
                reply = await run.ask(rank, {"type": "ps-update", "key": "w", "dtype": "int32"}, delta)
                assert not reply.get("error"), reply

        await asyncio.gather(*(rank_updates(r) for r in range(8)))
        read = await run.ask(3, {"type": "ps-read", "key": "w"})
        expected = sum(r * 100 + s for r in range(8) for s in range(25))
        assert read["dtype"] == "int32" and read["version"] == 1 + 8 * 25
        assert set(struct.unpack(f"<{size}i", read["payload"])) == {expected}

        # Other element-wise updates, and what the server refuses (nothing is changed by a refusal).
        await run.ask(1, {"type": "ps-write", "key": "m", "dtype": "float64"}, floats(1, 5, -2))
        await run.ask(2, {"type": "ps-update", "key": "m", "dtype": "float64", "op": "max"}, floats(3, 4, -1))
        shorter = await run.ask(2, {"type": "ps-update", "key": "m", "dtype": "float64"}, floats(1, 2))
        assert "must be 3 float64 values" in shorter["error"]
        other_type = await run.ask(2, {"type": "ps-update", "key": "m", "dtype": "int32"}, ints(1, 2, 3))
        assert "must be 3 float64 values" in other_type["error"]
        ragged = await run.ask(2, {"type": "ps-write", "key": "m", "dtype": "float64"}, b"\0" * 12)
        assert "not a whole number of float64 values" in ragged["error"]
        m = await run.ask(0, {"type": "ps-read", "key": "m"})
        assert struct.unpack("<3d", m["payload"]) == (3.0, 5.0, -1.0)
        missing = await run.ask(0, {"type": "ps-read", "key": "nope"})
        assert "no parameter 'nope'" in missing["error"]

        # Compare-and-set, the base of job-registered update functions.
        cas = {"type": "ps-write", "key": "m", "dtype": "float64"}
        stale = await run.ask(4, {**cas, "ifVersion": 1}, floats(0, 0, 0))
        assert stale["error"] == "version" and stale["version"] == 2
        assert (await run.ask(4, {**cas, "ifVersion": 2}, floats(7, 7, 7)))["version"] == 3
        created = await run.ask(5, {"type": "ps-write", "key": "new", "dtype": "uint8", "ifVersion": 0}, b"\1")
        assert created["version"] == 1
        await run.ask(6, {"type": "ps-write", "key": "layer/0/bias", "dtype": "float64"}, floats(0.5))

        done = await run.finish()
        assert done["state"] == "succeeded", done

    listed = carol.http.get(f"/runs/{run.run['id']}/parameters").json()
    assert {(p["group"], p["key"], p["dtype"], p["length"]) for p in listed} == {
        ("A", "w", "int32", size),
        ("A", "m", "float64", 3),
        ("A", "new", "uint8", 1),
        ("A", "layer/0/bias", "float64", 1),
    }
    raw = carol.http.get(f"/runs/{run.run['id']}/parameters/A/w")
    assert raw.status_code == 200 and raw.headers["x-peermr-dtype"] == "int32"
    assert set(struct.unpack(f"<{size}i", raw.content)) == {expected}
    assert carol.http.get(f"/runs/{run.run['id']}/parameters/A/m", params={"format": "json"}).json() == [7, 7, 7]
    assert carol.http.get(f"/runs/{run.run['id']}/parameters/A/absent").status_code == 404
    # The run page lists them with their downloads.
    page = carol_client.get(f"/ui/runs/{run.run['id']}").text
    assert "Parameter server" in page and f"/ui/runs/{run.run['id']}/parameters/A/w" in page
    download = carol_client.get(f"/ui/runs/{run.run['id']}/parameters/A/m", params={"format": "json"})
    assert download.json() == [7, 7, 7] and "attachment" in download.headers["content-disposition"]
    # A key with slashes, by the page's own link.
    link = re.search(r'href="(/ui/runs/\d+/parameters/A/layer[^"?]*)"', page).group(1)
    assert carol_client.get(link, params={"format": "json"}).json() == [0.5]
    # Another coordinator is told there is no such run.
    appliance.add_user("dave@example.com", "coordinator", "dave-password-1")
    dave = Api(appliance, token_for(appliance, "dave@example.com"))
    assert dave.http.get(f"/runs/{run.run['id']}/parameters").status_code == 404
    assert dave.http.get(f"/runs/{run.run['id']}/parameters/A/w").status_code == 404


async def test_a_fast_worker_waits_for_the_slowest_within_the_staleness_bound(appliance, carol, cookie):
    async with Training(appliance, carol, cookie, 3, staleness=1) as run:
        # Rank 0 may run one clock ahead of the slowest (staleness 1) ...
        assert (await run.ask(0, {"type": "ps-clock"}))["clock"] == 1
        # ... but not two: its second clock waits while ranks 1 and 2 are still at 0.
        second = asyncio.create_task(run.ask(0, {"type": "ps-clock"}, timeout=None))
        await asyncio.sleep(1.0)
        assert not second.done()
        await run.ask(1, {"type": "ps-clock"})
        await asyncio.sleep(0.5)
        assert not second.done(), "rank 2 is still at clock 0"
        await run.ask(2, {"type": "ps-clock"})
        assert (await asyncio.wait_for(second, 10))["clock"] == 2
        # A read waits the same way: rank 0 is at 2, so its read needs every other rank at 1 or more (they are).
        await run.ask(0, {"type": "ps-write", "key": "x", "dtype": "float64"}, floats(1))
        assert (await run.ask(0, {"type": "ps-read", "key": "x"}))["clock"] == 2
        assert (await run.finish())["state"] == "succeeded"


async def test_staleness_zero_is_bulk_synchronous(appliance, carol, cookie):
    async with Training(appliance, carol, cookie, 2, staleness=0) as run:
        first = asyncio.create_task(run.ask(0, {"type": "ps-clock"}, timeout=None))
        await asyncio.sleep(1.0)
        assert not first.done(), "with staleness 0 no rank runs ahead"
        # Rank 1's update made before its clock is in what rank 0 reads after the barrier.
        await run.ask(1, {"type": "ps-update", "key": "g", "dtype": "float64"}, floats(2.5))
        await run.ask(1, {"type": "ps-clock"})
        assert (await asyncio.wait_for(first, 10))["clock"] == 1
        read = await run.ask(0, {"type": "ps-read", "key": "g"})
        assert struct.unpack("<d", read["payload"]) == (2.5,)
        assert (await run.finish())["state"] == "succeeded"


async def test_peer_mailbox_and_requests_in_the_name_of_another_task(appliance, carol, cookie):
    async with Training(appliance, carol, cookie, 2) as run:
        # A receive waits for its letter; the send may come first or second.
        waiting = asyncio.create_task(run.ask(0, {"type": "peer-receive", "fromRank": 0, "tag": "t"}, timeout=None))
        await asyncio.sleep(0.5)
        assert not waiting.done()
        sent = await run.ask(0, {"type": "peer-send", "toRank": 0, "tag": "t", "sha256": SHA, "size": 3})
        assert sent.get("error", "") == ""
        # The receiver already holds the blob (it sent it to itself): no copy is needed.
        assert (await asyncio.wait_for(waiting, 10))["sha256"] == SHA
        again = await run.ask(0, {"type": "peer-send", "toRank": 0, "tag": "t", "sha256": SHA, "size": 3})
        assert "tags are unique per stage and group" in again["error"]
        nowhere = await run.ask(0, {"type": "peer-send", "toRank": 9, "tag": "u", "sha256": SHA, "size": 3})
        assert "rank 9 does not exist" in nowhere["error"]
        to_self = await run.ask(1, {"type": "peer-link", "toRank": 1})
        assert "cannot link to itself" in to_self["error"]

        # Rank 1's worker speaking in rank 0's task's name gets a refusal, not rank 0's value.
        await run.ask(0, {"type": "ps-write", "key": "secret", "dtype": "uint8"}, b"\7")
        worker1, _ = run.maps[1]
        _, task0 = run.maps[0]
        refused = await worker1.request({"type": "ps-read", "taskId": task0["taskId"], "key": "secret"})
        assert refused["error"] == "this task is not running on this worker" and "payload" not in refused
        # A malformed binary frame is refused; the connection carries on.
        await worker1.ws.send(b"\xff\xff\xff\xff{}")
        await asyncio.sleep(0.3)
        assert any(m["type"] == "error" and "binary frame" in m["message"] for m in worker1.messages)
        clocks = await asyncio.gather(run.ask(0, {"type": "ps-clock"}), run.ask(1, {"type": "ps-clock"}))
        assert [c["clock"] for c in clocks] == [1, 1]
        assert (await run.finish())["state"] == "succeeded"


async def test_a_peer_lost_failure_without_a_lost_peer_fails_the_run(appliance, carol, cookie):
    # A browser cannot make the appliance start a stage again by claiming a peer was lost.
    async with Training(appliance, carol, cookie, 2) as run:
        worker, task = run.maps[0]
        await worker.send({"type": "task-failed", "taskId": task["taskId"], "error": "made up", "peerLost": True})
        done = await carol.wait(run.run["id"])
        assert done["state"] == "failed" and "made up" in done["reason"]
