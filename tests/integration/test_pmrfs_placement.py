"""PMRFS placement with simulated datanodes speaking the worker protocol from Python.

The simulated workers fetch blobs over HTTP with the grants the appliance hands
out, verify and keep them in memory, and upload them back on request. They show
where the namenode puts replicas, that a private bucket's blobs never reach
another account's browsers, and the availability rules as holders come and go.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import uuid

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.support import Appliance

CAPABILITIES = {"cores": 2, "memoryGib": 4, "userAgent": "sim", "gpu": None, "storageQuota": 1 << 30}


class SimDataNode:
    def __init__(self, appliance: Appliance, cookie: str, worker_id: str | None = None, blobs: dict | None = None):
        self.appliance, self.cookie = appliance, cookie
        self.worker_id = worker_id or uuid.uuid4().hex
        self.blobs: dict[str, bytes] = dict(blobs or {})
        self.commands: list[str] = []
        self.errors: list[dict] = []
        self.uploads: list[int] = []  # the appliance's answers to the blobs it asked back

    async def start(self) -> SimDataNode:
        self.http = httpx.AsyncClient(base_url=self.appliance.url, headers={"Cookie": self.cookie}, timeout=30)
        self.ws = await connect(
            self.appliance.url.replace("http", "ws") + "/ws/worker",
            additional_headers={"Cookie": self.cookie},
            origin=self.appliance.url,
        )
        await self.send(
            {
                "type": "hello",
                "id": 1,
                "workerId": self.worker_id,
                "capabilities": CAPABILITIES,
                "blobs": sorted(self.blobs),
            }
        )
        assert json.loads(await self.ws.recv())["type"] == "welcome"
        self.task = asyncio.create_task(self.serve())
        return self

    async def send(self, message: dict) -> None:
        await self.ws.send(json.dumps(message))

    async def serve(self) -> None:
        async for raw in self.ws:
            message = json.loads(raw)
            kind = message["type"]
            if kind in ("ping", "probe-offer"):
                if kind == "ping":
                    await self.send({"type": "pong", "id": message["id"]})
                continue
            self.commands.append(kind)
            if kind == "blob-fetch":
                data = (await self.http.get(message["url"])).content
                assert hashlib.sha256(data).hexdigest() == message["sha256"]
                self.blobs[message["sha256"]] = data
                await self.send(
                    {"type": "blob-stored", "replyTo": message["id"], "sha256": message["sha256"], "size": len(data)}
                )
            elif kind == "blob-upload":
                response = await self.http.put(message["url"], content=self.blobs[message["sha256"]])
                self.uploads.append(response.status_code)
                await self.send(
                    {
                        "type": "blob-uploaded",
                        "replyTo": message["id"],
                        "sha256": message["sha256"],
                        "size": len(self.blobs[message["sha256"]]),
                    }
                )
            elif kind == "blob-delete":
                self.blobs.pop(message["sha256"], None)
            elif kind == "error":
                self.errors.append(message)

    async def stop(self) -> None:
        self.task.cancel()
        await self.ws.close()
        await self.http.aclose()


async def signed_in_cookie(appliance: Appliance, email: str, password: str) -> str:
    async with httpx.AsyncClient(base_url=appliance.url) as client:
        await client.get("/login")
        response = await client.post(
            "/login", data={"email": email, "password": password, "_csrf_token": client.cookies["csrftoken"]}
        )
        assert response.status_code == 303
        return f"peermr_session={client.cookies['peermr_session']}"


async def wait_for(predicate, timeout: float = 60):
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if result := await predicate():
            return result
        await asyncio.sleep(0.2)
    raise AssertionError("timed out")


async def put_and_place(api: httpx.AsyncClient, bucket: str, payload: bytes, holders: list[SimDataNode]) -> dict:
    """Upload an unpinned object and wait until each of its blobs is on exactly these workers: its status."""
    assert (await api.put(f"/api/v1/buckets/{bucket}")).status_code in (200, 201)
    put = await api.put(f"/api/v1/buckets/{bucket}/objects/data.bin?pin=false", content=payload)
    assert put.status_code in (200, 201), put.text

    async def placed():
        state = (await api.get(f"/api/v1/objects-status/{bucket}/data.bin")).json()
        held = [set(b["replicas"]) for b in state["blobs"]]
        return state if all(h == {w.worker_id for w in holders} for h in held) else None

    return await wait_for(placed)


@pytest.fixture(scope="module")
def accounts(appliance):
    for email in ("owner@example.com", "other@example.com"):
        appliance.add_user(email, "coordinator", "place-password-1")
    return {
        "token": appliance.cli("token", "create", "owner@example.com").stdout.strip(),
    }


async def test_private_blobs_stay_with_the_owners_browsers_and_follow_availability(appliance, accounts):
    api = httpx.AsyncClient(
        base_url=appliance.url, headers={"Authorization": f"Bearer {accounts['token']}"}, timeout=60
    )
    own_cookie = await signed_in_cookie(appliance, "owner@example.com", "place-password-1")
    other_cookie = await signed_in_cookie(appliance, "other@example.com", "place-password-1")
    mine = [await SimDataNode(appliance, own_cookie).start() for _ in range(2)]
    theirs = [await SimDataNode(appliance, other_cookie).start() for _ in range(2)]
    try:
        payload = os.urandom(5 * 1024 * 1024)  # two blobs
        state = await put_and_place(api, "placement-private", payload, mine)
        assert state["available"] and len(state["blobs"]) == 2
        # The other account's browsers were never asked to hold, send or receive anything.
        assert all(w.commands == [] and not w.blobs for w in theirs)

        # The appliance released its copy: the download comes from the browsers.
        download = await api.get("/api/v1/buckets/placement-private/objects/data.bin")
        assert download.status_code == 200 and download.content == payload
        assert any("blob-upload" in w.commands for w in mine)
        assert {code for w in mine for code in w.uploads} == {204}

        # Every holder gone: unavailable. One back with its blobs: available again.
        kept = dict(mine[0].blobs), mine[0].worker_id
        for worker in mine:
            await worker.stop()
        mine = []

        async def unavailable():
            state = (await api.get("/api/v1/objects-status/placement-private/data.bin")).json()
            return not state["available"]

        await wait_for(unavailable)
        refused = await api.get("/api/v1/buckets/placement-private/objects/data.bin")
        assert refused.status_code == 503 and "unavailable" in refused.json()["detail"]
        back = await SimDataNode(appliance, own_cookie, worker_id=kept[1], blobs=kept[0]).start()
        mine = [back]

        async def available():
            state = (await api.get("/api/v1/objects-status/placement-private/data.bin")).json()
            return state["available"]

        await wait_for(available)
        again = await api.get("/api/v1/buckets/placement-private/objects/data.bin")
        assert again.content == payload
    finally:
        for worker in mine + theirs:
            await worker.stop()
        await api.aclose()


async def test_unknown_blobs_are_deleted_and_foreign_signals_refused(appliance, accounts):
    cookie = await signed_in_cookie(appliance, "other@example.com", "place-password-1")
    stray = "ab" * 32
    worker = await SimDataNode(appliance, cookie, blobs={stray: b"left over"}).start()
    try:
        # A blob the namenode does not know of is deleted from the tab.
        await wait_for(lambda: asyncio.sleep(0, result=stray not in worker.blobs))
        # Signaling for a transfer the appliance did not arrange is refused.
        await worker.send({"type": "signal", "transferId": "0123456789abcdef", "data": {"candidate": {}}})
        await wait_for(lambda: asyncio.sleep(0, result=bool(worker.errors)))
        assert worker.errors[0]["code"] == "not-allowed"
    finally:
        await worker.stop()


async def test_replication_factor_is_kept_under_churn(appliance, accounts):
    """A pinned object: the appliance keeps its copy, and refills browsers as they leave or clear their data."""
    api = httpx.AsyncClient(
        base_url=appliance.url, headers={"Authorization": f"Bearer {accounts['token']}"}, timeout=60
    )
    cookie = await signed_in_cookie(appliance, "owner@example.com", "place-password-1")
    workers = [await SimDataNode(appliance, cookie).start() for _ in range(3)]
    live = list(workers)
    try:
        assert (await api.put("/api/v1/buckets/placement-churn")).status_code in (200, 201)
        payload = os.urandom(1024 * 1024)
        put = await api.put("/api/v1/buckets/placement-churn/objects/one.bin?pin=true", content=payload)
        assert put.status_code in (200, 201), put.text

        async def browser_holders() -> set[str]:
            state = (await api.get("/api/v1/objects-status/placement-churn/one.bin")).json()
            (blob,) = state["blobs"]
            assert "appliance" in blob["replicas"]  # pinned: the appliance's copy stays
            return set(blob["replicas"]) - {"appliance"}

        async def factor_met():
            holders = await browser_holders()
            return holders if len(holders) == 2 and holders <= {w.worker_id for w in live} else None

        holders = await wait_for(factor_met)
        # A holder leaves: the third browser gets a copy.
        leaving = next(w for w in live if w.worker_id in holders)
        await leaving.stop()
        live.remove(leaving)
        assert await wait_for(factor_met) == {w.worker_id for w in live}
        # A holder clears its stored data: it is refilled, since no other browser is left.
        clearing = live[0]
        dropped = sorted(clearing.blobs)
        clearing.blobs.clear()
        fetches_before = clearing.commands.count("blob-fetch")
        await clearing.send({"type": "blobs-dropped", "sha256": dropped})
        await wait_for(lambda: asyncio.sleep(0, result=clearing.commands.count("blob-fetch") > fetches_before))
        assert await wait_for(factor_met) == {w.worker_id for w in live}
    finally:
        for worker in live:
            await worker.stop()
        await api.aclose()


async def test_a_damaged_copy_is_refused_forgotten_and_another_serves(appliance, accounts):
    api = httpx.AsyncClient(
        base_url=appliance.url, headers={"Authorization": f"Bearer {accounts['token']}"}, timeout=60
    )
    cookie = await signed_in_cookie(appliance, "owner@example.com", "place-password-1")
    mine = [await SimDataNode(appliance, cookie).start() for _ in range(2)]
    try:
        payload = os.urandom(3 * 1024 * 1024)
        state = await put_and_place(api, "placement-damaged", payload, mine)
        # The holder the status lists first is asked first: damage its copies.
        first = next(w for w in mine if w.worker_id == state["blobs"][0]["replicas"][0])
        first.blobs = {sha: bytes([data[0] ^ 1]) + data[1:] for sha, data in first.blobs.items()}
        download = await api.get("/api/v1/buckets/placement-damaged/objects/data.bin")
        assert download.status_code == 200 and download.content == payload
        # Its bytes were refused by their hash, the operator is told, and the tab drops the copy.
        assert first.uploads and set(first.uploads) == {403}
        assert f"{first.worker_id} sent bytes that do not match blob" in appliance.log()
        await wait_for(lambda: asyncio.sleep(0, result="blob-delete" in first.commands))
    finally:
        for worker in mine:
            await worker.stop()
        await api.aclose()
