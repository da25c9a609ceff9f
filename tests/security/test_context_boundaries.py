"""The `context` APIs are boundaries: a task reaches only its own run's ranks, parameters and outputs.

A worker page relays what job code asks through `context` (peer messages, the parameter server,
upload URLs) as WebSocket requests naming the task. A misbehaving browser can send any such request,
so here simulated workers (tests/sim_workers.py) hold ranks of two runs of two accounts at once and
one of them names the other run's task, ranks beyond its run, keys that look like the other run's,
and messages past the protocol's limits: each is refused with a clear error and the other run's
mailbox, parameters and result stay as they were. What job code itself can do through `context`
is tried in real browsers in tests/security/test_context_reach_in_browsers.py.
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from tests.integration.test_cloud_data import fields
from tests.integration.test_job_scheduling import Api, token_for
from tests.integration.test_parameter_server import Training, floats
from tests.s3_server import MotoServer
from tests.sim_workers import SimWorker, cookie_of

NOT_HELD = "this task is not running on this worker"
OURS, THEIRS = "ab" * 32, "cd" * 32  # the sha256 each run's message claims to be stored under


class Coordinator:
    def __init__(self, appliance, email: str):
        appliance.add_user(email, "coordinator", "boundary-password-1")
        self.api = Api(appliance, token_for(appliance, email))
        self.session = appliance.client()
        self.session.login(email, "boundary-password-1")
        self.cookie = cookie_of(self.session)


@pytest.fixture(scope="module")
def carol(appliance):
    return Coordinator(appliance, "carol@example.com")


@pytest.fixture(scope="module")
def dave(appliance):
    return Coordinator(appliance, "dave@example.com")


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = MotoServer(tmp_path_factory.mktemp("moto")).start()
    yield server
    server.stop()


class Held(Training):
    """A private run of ``ranks`` simulated workers of its owner, each holding its map task open."""

    def __init__(self, appliance, owner: Coordinator, ranks: int = 2, storage: str = "pmrfs"):
        super().__init__(appliance, owner.api, owner.cookie, ranks, privateMode="true")
        self.owner = owner
        self.script = self.script.replace("'pmrfs'", f"'{storage}'")

    def task_id(self, rank: int) -> str:
        return self.maps[rank][1]["taskId"]

    def worker(self, rank: int) -> SimWorker:
        return self.maps[rank][0]


async def pending(worker: SimWorker, message: dict) -> asyncio.Future:
    """Send a request whose answer may never come; the future of that answer."""
    worker.next_id += 1
    answer = worker.replies[worker.next_id] = asyncio.get_running_loop().create_future()
    await worker.send({**message, "id": worker.next_id})
    return answer


async def refused_as_malformed(worker: SimWorker, message: dict) -> str:
    """The text of the error the appliance answers a message that breaks the protocol with."""
    seen = len(worker.messages)
    await worker.send(message)
    for _ in range(100):
        errors = [m for m in worker.messages[seen:] if m["type"] == "error"]
        if errors:
            assert errors[0]["code"] == "malformed", errors
            return errors[0]["message"]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no error for {message}")


async def test_peer_messages_reach_only_ranks_of_the_senders_own_run(appliance, carol, dave):
    async with Held(appliance, carol) as ours, Held(appliance, dave) as theirs:
        mine = ours.worker(0)
        # Requests naming the other run's task, as if this worker held it.
        for request in (
            {"type": "peer-send", "toRank": 0, "tag": "t", "size": 4, "sha256": OURS},
            {"type": "peer-receive", "fromRank": 1, "tag": "t"},
            {"type": "peer-link", "toRank": 1},
            {"type": "peer-put-url", "toRank": 1, "tag": "t"},
            {"type": "task-put-url", "partition": 0},
        ):
            answer = await mine.request({**request, "taskId": theirs.task_id(0)})
            assert answer["error"] == NOT_HELD, (request, answer)
        assert not [m for w in theirs.workers for m in w.messages if m["type"] == "peer-link-open"]

        # Ranks beyond the run, in its own task's name.
        beyond = "rank 2 does not exist (this run has ranks 0 to 1)"
        assert (await ours.ask(0, {"type": "peer-send", "toRank": 2, "tag": "t", "size": 4, "sha256": OURS}))[
            "error"
        ] == beyond
        assert (await ours.ask(0, {"type": "peer-receive", "fromRank": 2, "tag": "t"}))["error"] == beyond
        assert (await ours.ask(0, {"type": "peer-link", "toRank": 2}))["error"] == beyond
        # Negative, fractional or textual ranks do not get past the protocol.
        for rank in (-1, 0.5, "1", 8192):
            send = {"type": "peer-send", "id": 5, "taskId": ours.task_id(0), "toRank": rank, "tag": "t", "size": 4}
            assert "$.toRank" in await refused_as_malformed(mine, {**send, "sha256": OURS})
        receive = {"type": "peer-receive", "id": 6, "taskId": ours.task_id(0), "fromRank": -1, "tag": "t"}
        assert "$.fromRank" in await refused_as_malformed(mine, receive)

        # Our rank 0 posts a letter to rank 0 under tag "t": the other run's rank 0, receiving from
        # rank 0 under the same tag, does not get it; it gets its own run's letter once that is sent.
        posted = await ours.ask(0, {"type": "peer-send", "toRank": 0, "tag": "t", "size": 4, "sha256": OURS})
        assert "error" not in posted, posted
        letter = await pending(
            theirs.worker(0), {"type": "peer-receive", "taskId": theirs.task_id(0), "fromRank": 0, "tag": "t"}
        )
        await asyncio.sleep(1.5)
        assert not letter.done(), letter.result()
        await theirs.ask(0, {"type": "peer-send", "toRank": 0, "tag": "t", "size": 4, "sha256": THEIRS})
        assert (await asyncio.wait_for(letter, 10))["sha256"] == THEIRS

        assert (await ours.finish())["state"] == "succeeded"
        assert (await theirs.finish())["state"] == "succeeded"


async def test_parameter_keys_stay_in_the_run_and_group_that_wrote_them(appliance, carol, dave):
    async with Held(appliance, carol) as ours, Held(appliance, dave) as theirs:
        written = await theirs.ask(0, {"type": "ps-write", "key": "w", "dtype": "float64"}, floats(1, 2, 3))
        assert written["version"] == 1
        other = theirs.run["id"]
        # Keys that spell the other run's path are plain keys of our own run.
        for key in (f"../{other}/A/w", f"/runs/{other}/A/w", f"{other}/A/w", "A/w"):
            answer = await ours.ask(0, {"type": "ps-write", "key": key, "dtype": "float64"}, floats(6, 6, 6))
            assert answer["version"] == 1, (key, answer)
            update = await ours.ask(1, {"type": "ps-update", "key": key, "dtype": "float64"}, floats(1, 1, 1))
            assert update["version"] == 2, (key, update)
        missing = await ours.ask(0, {"type": "ps-read", "key": "w"})
        assert missing["error"] == "no parameter 'w' in group A (write it first)"

        # Requests in the other run's task's name are refused.
        mine = ours.worker(0)
        for request, value in (
            ({"type": "ps-write", "key": "w", "dtype": "float64"}, floats(6, 6, 6)),
            ({"type": "ps-update", "key": "w", "dtype": "float64", "op": "replace"}, floats(6, 6, 6)),
            ({"type": "ps-read", "key": "w"}, None),
            ({"type": "ps-clock"}, None),
        ):
            answer = await mine.request({**request, "taskId": theirs.task_id(0)}, value)
            assert answer["error"] == NOT_HELD and "payload" not in answer, (request, answer)

        read = await theirs.ask(1, {"type": "ps-read", "key": "w"})
        assert (read["version"], struct.unpack("<3d", read["payload"])) == (1, (1.0, 2.0, 3.0))
        assert (await ours.finish())["state"] == "succeeded"
        assert (await theirs.finish())["state"] == "succeeded"

    kept = dave.api.http.get(f"/runs/{other}/parameters").json()
    assert [(p["group"], p["key"], p["version"]) for p in kept] == [("A", "w", 1)]
    ours_kept = carol.api.http.get(f"/runs/{ours.run['id']}/parameters").json()
    assert sorted(p["key"] for p in ours_kept) == sorted(
        [f"../{other}/A/w", f"/runs/{other}/A/w", f"{other}/A/w", "A/w"]
    )
    # Another account's run's values are not listed or downloaded for carol.
    assert carol.api.http.get(f"/runs/{other}/parameters").status_code in (403, 404)
    assert carol.api.http.get(f"/runs/{other}/parameters/A/w").status_code in (403, 404)


async def test_an_s3_task_gets_upload_urls_only_for_its_own_partitions_and_messages(appliance, carol, dave, s3):
    bucket = s3.create_bucket("carol-boundaries")
    assert carol.session.form("/ui/cloud", fields(s3, bucket)).status_code == 303
    assert carol.session.form("/ui/cloud/cors").status_code == 303
    async with Held(appliance, carol, storage="s3") as ours, Held(appliance, dave) as theirs:
        run_id = ours.run["id"]
        own = await ours.ask(1, {"type": "task-put-url", "partition": 1})
        assert own["key"].startswith(f"peermr/runs/{run_id}/A/") and "/rank-00001/attempt-" in own["key"]
        assert own["url"].startswith(f"{s3.url}/{bucket}/peermr/runs/{run_id}/A/")
        beyond = await ours.ask(1, {"type": "task-put-url", "partition": 2})
        assert beyond == {"type": "task-put-url-reply", "replyTo": beyond["replyTo"], "error": "partition 2 of 2"}
        # A task of another run (another account's, on PMRFS) gets no URL in this worker's name.
        foreign = await ours.worker(0).request({"type": "task-put-url", "taskId": theirs.task_id(0), "partition": 0})
        assert foreign["error"] == NOT_HELD and "url" not in foreign

        letter = await ours.ask(0, {"type": "peer-put-url", "toRank": 1, "tag": "t"})
        assert "/messages/A/" in letter["key"] and letter["url"].startswith(f"{s3.url}/{bucket}/")
        assert (await ours.ask(0, {"type": "peer-put-url", "toRank": 2, "tag": "t"}))["error"].startswith(
            "rank 2 does not exist"
        )
        # A message may only name the key issued for it: not one that climbs out with "../", nor another
        # run's, nor the one issued for another tag.
        for key in (
            letter["key"] + "/../../../../../../../../runs/1/A/map/rank-00000/attempt-1/part-00000-00000",
            letter["key"].replace(f"/runs/{run_id}/", f"/runs/{theirs.run['id']}/"),
            letter["key"][:-2] + b"u".hex(),
        ):
            sent = await ours.ask(0, {"type": "peer-send", "toRank": 1, "tag": "t", "key": key, "size": 4})
            assert sent["error"] == "that object key was not issued for this message", key
        sent = await ours.ask(0, {"type": "peer-send", "toRank": 1, "tag": "t", "key": letter["key"], "size": 4})
        assert "error" not in sent, sent

        # An output key that climbs out of the task's prefix is a bad result: the worker is sent away.
        await ours.worker(1).send(
            {
                "type": "task-done",
                "taskId": ours.task_id(1),
                "outputs": [{"partition": 1, "size": 4, "records": 1, "key": own["key"] + "/../../../elsewhere"}],
            }
        )
        for _ in range(100):
            logs = carol.api.http.get(f"/runs/{run_id}/logs").text
            if "an output key outside the task's prefix" in logs:
                break
            await asyncio.sleep(0.1)
        assert "reported a bad result (an output key outside the task's prefix)" in logs
        assert (await theirs.finish())["state"] == "succeeded"


async def test_log_lines_and_outputs_past_the_protocols_limits_are_refused(appliance, carol, dave):
    async with Held(appliance, carol) as ours, Held(appliance, dave) as theirs:
        mine, task_id = ours.worker(0), ours.task_id(0)
        line = {"at": 1, "text": "flood"}
        many = {"type": "task-log", "taskId": task_id, "lines": [line] * 101}
        assert "Expected `array` of length <= 100 - at `$.lines`" in await refused_as_malformed(mine, many)
        long = {"type": "task-log", "taskId": task_id, "lines": [{"at": 1, "text": "x" * 2001}]}
        assert "Expected `str` of length <= 2000 - at `$.lines[0].text`" in await refused_as_malformed(mine, long)
        output = {"partition": 0, "size": 1, "records": 1, "sha256": OURS}
        done = {"type": "task-done", "taskId": task_id, "outputs": [output] * 4097}
        assert "Expected `array` of length <= 4096 - at `$.outputs`" in await refused_as_malformed(mine, done)
        # The other run goes on and ends well; neither run's log has the refused lines.
        assert (await theirs.finish())["state"] == "succeeded"
        assert (await ours.finish())["state"] == "succeeded"
    for run in (ours, theirs):
        logs = run.owner.api.http.get(f"/runs/{run.run['id']}/logs").text
        assert "flood" not in logs and "x" * 2000 not in logs
