"""Simulated workers: the worker WebSocket protocol spoken from Python, many per process.

They say hello, answer pings, and run each assigned task with a handler (by default: a no-op
task with no output). A streaming reduce goes to its handler once its input is complete, as a
page runs the job function then, with every piece in producer order. The scheduling, failure
and restart tests and bench/sched_overhead.py use them where real browsers would be too slow or
too many.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Awaitable, Callable

from websockets.asyncio.client import ClientConnection, connect

CAPABILITIES = {"cores": 4, "memoryGib": 8, "userAgent": "Mozilla/5.0 Chrome/156.0 Simulated", "gpu": None}

Handler = Callable[["SimWorker", dict], Awaitable[None]]


async def finish_empty(worker: SimWorker, task: dict) -> None:
    await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": [], "emits": 0, "cpuMs": 0})


class SimWorker:
    def __init__(
        self,
        base_url: str,
        cookie: str,
        *,
        worker_id: str | None = None,
        capabilities: dict | None = None,
        on_task: Handler = finish_empty,
        on_blob_receive: Handler | None = None,
        on_probe_offer: Handler | None = None,
        blobs: list[str] | None = None,
        instance: str = "",
    ):
        self.base_url = base_url
        self.instance = instance  # its page load, as a tab's hello names it ("": not said)
        self.cookie = cookie
        self.worker_id = worker_id or uuid.uuid4().hex
        self.capabilities = capabilities or CAPABILITIES
        self.on_task = on_task
        self.on_blob_receive = on_blob_receive  # a copy of a stage output arranged to this worker
        self.on_probe_offer = on_probe_offer  # the appliance's connectivity probe (ignored without it)
        self.blobs: list[str] = list(blobs or [])  # what its hello says it holds (as a tab's IndexedDB would)
        self.held: list[str] = []  # the task ids its hello says it still has (a page whose connection dropped)
        # What its pongs say: None answers no ping (a frozen browser); a store wait (ms) > 0, a page
        # whose browser process hangs.
        self.store_wait_ms: int | None = 0
        self.ws: ClientConnection | None = None
        self.tasks: list[dict] = []  # every task-assign received (a streaming one once its input is complete)
        self.streaming: dict[str, dict] = {}  # task id -> a streaming task-assign still awaiting input
        self.messages: list[dict] = []  # everything else the appliance sent
        self.reader: asyncio.Task | None = None
        self.replies: dict[int, asyncio.Future] = {}
        self.next_id = 1000

    async def start(self) -> SimWorker:
        self.ws = await connect(
            self.base_url.replace("http", "ws", 1) + "/ws/worker",
            additional_headers={"Cookie": self.cookie},
            origin=self.base_url,
            max_size=None,
        )
        await self.say_hello()
        welcome = json.loads(await self.ws.recv())
        if welcome["type"] != "welcome":
            raise RuntimeError(f"no welcome: {welcome}")
        self.reader = asyncio.create_task(self._read())
        return self

    async def say_hello(self) -> None:
        """At connecting, and again when an edge asks (another scheduler leads: hello-again)."""
        hello = {"type": "hello", "id": 1, "workerId": self.worker_id, "capabilities": self.capabilities}
        await self.send({**hello, "blobs": self.blobs, "tasks": self.held, "instance": self.instance})

    async def send(self, message: dict) -> None:
        await self.ws.send(json.dumps(message))

    async def send_frame(self, header: dict, payload: bytes) -> None:
        """A binary frame: uint32 LE header length, the JSON header, the payload (docs/protocol.md)."""
        await self.ws.send(frame(header, payload))

    async def request(self, message: dict, payload: bytes | None = None, timeout: float | None = 30) -> dict:
        """Send with a fresh id and wait for the reply naming it (a binary reply's bytes are in "payload")."""
        self.next_id += 1
        message = {**message, "id": self.next_id}
        reply = self.replies[self.next_id] = asyncio.get_running_loop().create_future()
        await (self.send(message) if payload is None else self.send_frame(message, payload))
        return await asyncio.wait_for(reply, timeout)

    async def _read(self) -> None:
        with contextlib.suppress(Exception):
            async for raw in self.ws:
                if isinstance(raw, bytes):
                    size = int.from_bytes(raw[:4], "little")
                    message = {**json.loads(raw[4 : 4 + size]), "payload": raw[4 + size :]}
                else:
                    message = json.loads(raw)
                if (waiter := self.replies.pop(message.get("replyTo"), None)) is not None:
                    waiter.set_result(message)
                    continue
                await self._handle(message)

    async def _handle(self, message: dict) -> None:
        kind = message["type"]
        if kind == "ping":
            await self._pong(message)
        elif kind == "hello-again":
            self.messages.append(message)
            await self.say_hello()
        elif kind == "task-assign" and message.get("awaiting"):
            self.streaming[message["taskId"]] = message
        elif kind == "task-input" and message["taskId"] in self.streaming:
            self.messages.append(message)
            self._fed(message)
        elif kind == "task-assign":
            self._run(message)
        elif kind == "task-cancel" and self.streaming.pop(message["taskId"], None) is not None:
            self.messages.append(message)
        elif kind == "task-split":
            # A simulated page reads its input whole: it cannot stop a range early (the end of its
            # range, or 0 when it knows of none, says so).
            self.messages.append(message)
            await self.send({"type": "task-split-at", "taskId": message["taskId"], "chunk": 0})
        elif kind == "blob-receive" and self.on_blob_receive is not None:
            asyncio.create_task(self.on_blob_receive(self, message))
        elif kind == "probe-offer":
            if self.on_probe_offer is not None:
                asyncio.create_task(self.on_probe_offer(self, message))
        else:
            self.messages.append(message)

    async def _pong(self, ping: dict) -> None:
        if self.store_wait_ms is not None:
            await self.send({"type": "pong", "id": ping["id"], "storeWaitMs": self.store_wait_ms})

    def _run(self, task: dict) -> None:
        self.tasks.append(task)
        asyncio.create_task(self.on_task(self, task))

    def _fed(self, message: dict) -> None:
        task = self.streaming[message["taskId"]]
        if message["producer"] not in task["awaiting"]:
            raise RuntimeError(f"task-input of producer {message['producer']} not awaited: {message}")
        task["awaiting"].remove(message["producer"])
        task["inputs"] += [{**piece, "producer": message["producer"]} for piece in message["inputs"]]
        if not task["awaiting"]:
            del self.streaming[task["taskId"]]
            task["inputs"].sort(key=lambda piece: piece["producer"])  # stable: a producer's pieces in order
            self._run(task)

    async def close(self) -> None:
        if self.reader:
            self.reader.cancel()
        if self.ws:
            await self.ws.close()


def frame(header: dict, payload: bytes) -> bytes:
    encoded = json.dumps(header).encode()
    return len(encoded).to_bytes(4, "little") + encoded + payload


def cookie_of(client) -> str:
    """The Cookie header of a signed-in tests.support.Client."""
    return "; ".join(f"{k}={v}" for k, v in client.cookies.items())


async def start_workers(base_url: str, cookie: str, count: int, **kwargs) -> list[SimWorker]:
    return list(await asyncio.gather(*(SimWorker(base_url, cookie, **kwargs).start() for _ in range(count))))


def linked_maps(on_link: Callable[[dict, dict[int, SimWorker]], Awaitable[None]], release: asyncio.Event) -> Handler:
    """The task handler of a two-worker run whose map ranks talk directly: once both maps run, rank 0
    links to rank 1 (`peer-link`) and awaits ``on_link(link reply, workers by rank)``; the maps finish
    once ``release`` is set, every other task at once."""
    maps: dict[int, SimWorker] = {}
    both = asyncio.Event()

    async def on_task(worker: SimWorker, task: dict) -> None:
        if task["kind"] == "map":
            maps[task["rank"]] = worker
            if len(maps) == 2:
                both.set()
            await both.wait()
            if task["rank"] == 0:
                await on_link(await worker.request({"type": "peer-link", "taskId": task["taskId"], "toRank": 1}), maps)
            await release.wait()
        await finish_empty(worker, task)

    return on_task
