"""The worker WebSocket protocol with simulated workers: hello, validation, pause, the fleet view, disconnects.

Each bad message gets an answer or closes only its own connection; a second
worker connected alongside keeps working throughout.
"""

from __future__ import annotations

import json
import re
import uuid

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance, Client

CAPABILITIES = {"cores": 4, "memoryGib": 8, "userAgent": "Mozilla/5.0 Chrome/156.0 Test", "gpu": None}


class SimWorker:
    def __init__(self, appliance: Appliance, client: Client, worker_id: str | None = None, origin: str | None = None):
        cookie = "; ".join(f"{k}={v}" for k, v in client.cookies.items())
        self.ws = connect(
            appliance.url.replace("http", "ws") + "/ws/worker",
            additional_headers={"Cookie": cookie},
            origin=origin or appliance.url,
            open_timeout=10,
        )
        self.worker_id = worker_id or uuid.uuid4().hex

    def send(self, message) -> None:
        self.ws.send(message if isinstance(message, str | bytes) else json.dumps(message))

    def recv(self) -> dict:
        while True:
            message = json.loads(self.ws.recv(timeout=10))
            # Simulated workers ignore pings and the appliance's connectivity probe.
            if message["type"] not in ("ping", "probe-offer"):
                return message

    def hello(self, **extra) -> dict:
        self.send({"type": "hello", "id": 1, "workerId": self.worker_id, "capabilities": CAPABILITIES, **extra})
        return self.recv()

    def close(self) -> None:
        self.ws.close()


def signed_in(appliance: Appliance, email: str, password: str) -> Client:
    client = appliance.client()
    client.login(email, password)
    return client


@pytest.fixture(scope="module")
def people(appliance):
    appliance.add_user("ann@example.com", "coordinator", "ann-password-1")
    appliance.add_user("bob@example.com", "coordinator", "bob-password-1")
    return {
        "admin": signed_in(appliance, ADMIN_EMAIL, ADMIN_PASSWORD),
        "ann": signed_in(appliance, "ann@example.com", "ann-password-1"),
        "bob": signed_in(appliance, "bob@example.com", "bob-password-1"),
    }


def test_hello_gets_welcome_and_the_worker_shows_in_the_fleet_view(appliance, people):
    worker = SimWorker(appliance, people["ann"])
    try:
        welcome = worker.hello()
        assert welcome["type"] == "welcome" and welcome["replyTo"] == 1
        assert welcome["account"] == "ann@example.com" and welcome["workerId"] == worker.worker_id
        turn = welcome["iceServers"][1]
        assert turn["username"].endswith(":" + re.search(r":(\d+)$", turn["username"]).group(1))
        assert welcome["pingSeconds"] > 0

        ann_view = people["ann"].get("/ui/workers/live").text
        assert f'data-worker="{worker.worker_id}"' in ann_view and "Chrome 156" in ann_view
        assert f'data-worker="{worker.worker_id}"' in people["admin"].get("/ui/workers").text
        # Another coordinator sees ann's browser as one that would run its runs, without its account or id.
        bob_view = people["bob"].get("/ui/workers/live").text
        assert worker.worker_id not in bob_view and "ann@example.com" not in bob_view
        assert 'class="other-account"' in bob_view and worker.worker_id[:8] in bob_view

        worker.send({"type": "pause", "id": 2})
        assert worker.recv() == {"type": "state", "state": "paused", "replyTo": 2}
        assert "paused" in people["ann"].get("/ui/workers/live").text
        worker.send({"type": "resume", "id": 3})
        assert worker.recv()["state"] == "idle"
    finally:
        worker.close()
    assert worker.worker_id not in people["admin"].get("/ui/workers/live").text


@pytest.mark.parametrize(
    "message,code",
    [
        ("not json", "malformed"),
        ('{"type": "launch-missiles"}', "malformed"),
        ('{"type": "hello", "id": 1}', "malformed"),
        (json.dumps({"type": "hello", "id": 1, "workerId": "bad id!", "capabilities": CAPABILITIES}), "malformed"),
        (json.dumps({"type": "hello", "id": 1, "workerId": "x" * 20, "capabilities": {"cores": -3}}), "malformed"),
        ('{"type": "pause", "id": 5}', "not-ready"),
        # What a tab stores is counted, never negative (before hello it is not taken at all).
        ('{"type": "stored", "blobs": -1, "bytes": 0}', "malformed"),
        ('{"type": "stored", "blobs": 1, "bytes": 2}', "not-ready"),
        (b"\x00\x01binary", "malformed"),
    ],
)
def test_bad_messages_get_an_error_and_others_are_undisturbed(appliance, people, message, code):
    bystander = SimWorker(appliance, people["bob"])
    culprit = SimWorker(appliance, people["ann"])
    try:
        assert bystander.hello()["type"] == "welcome"
        culprit.send(message)
        error = culprit.recv()
        assert error["type"] == "error" and error["code"] == code and error["message"]
        # The culprit's connection still works, and so does the bystander's.
        assert culprit.hello()["type"] == "welcome"
        bystander.send({"type": "pause", "id": 9})
        assert bystander.recv()["state"] == "paused"
    finally:
        culprit.close()
        bystander.close()


def test_oversized_and_repeated_bad_messages_close_only_that_connection(appliance, people):
    bystander = SimWorker(appliance, people["bob"])
    try:
        bystander.hello()
        big = SimWorker(appliance, people["ann"])
        big.send(
            json.dumps(
                {
                    "type": "hello",
                    "id": 1,
                    "workerId": "y" * 20,
                    "capabilities": CAPABILITIES,
                    "blobs": ["0" * 64] * 20_000,
                }
            )
        )
        assert big.recv()["code"] == "too-large"
        with pytest.raises(ConnectionClosed) as closed:
            big.recv()
        assert closed.value.rcvd.code == 1009

        noisy = SimWorker(appliance, people["ann"])
        for _ in range(10):
            noisy.send("garbage")
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                noisy.recv()
        assert closed.value.rcvd.code == 1008
        bystander.send({"type": "resume", "id": 2})
        assert bystander.recv()["state"] == "idle"
    finally:
        bystander.close()


def test_second_hello_and_duplicate_worker_ids_are_refused(appliance, people):
    first = SimWorker(appliance, people["ann"])
    try:
        first.hello()
        first.send({"type": "hello", "id": 2, "workerId": first.worker_id, "capabilities": CAPABILITIES})
        assert first.recv()["code"] == "already-hello"
        copy = SimWorker(appliance, people["ann"], worker_id=first.worker_id)
        answer = copy.hello()
        assert answer["code"] == "duplicate-worker"
        with pytest.raises(ConnectionClosed) as closed:
            copy.recv()
        assert closed.value.rcvd.code == 4001
    finally:
        first.close()


def test_cross_site_pages_cannot_open_a_worker_connection(appliance, people):
    with pytest.raises(InvalidStatus) as refused:
        SimWorker(appliance, people["ann"], origin="https://evil.example")
    assert refused.value.response.status_code == 403


def test_admin_disconnects_a_worker(appliance, people):
    worker = SimWorker(appliance, people["ann"])
    try:
        worker.hello()
        response = people["admin"].form(f"/ui/workers/{worker.worker_id}/disconnect")
        assert response.status_code == 303
        goodbye = worker.recv()
        assert goodbye == {"type": "disconnect", "reason": "disconnected by an administrator", "reconnect": False}
        with pytest.raises(ConnectionClosed) as closed:
            worker.recv()
        assert closed.value.rcvd.code == 4000
        assert worker.worker_id not in people["admin"].get("/ui/workers/live").text
        # Coordinators cannot disconnect workers, not even their own.
        again = SimWorker(appliance, people["ann"])
        again.hello()
        assert people["ann"].form(f"/ui/workers/{again.worker_id}/disconnect").status_code == 403
        again.close()
    finally:
        worker.close()
