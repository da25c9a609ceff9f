"""How many simulated workers one appliance process holds, at what memory, with what round trip.

Simulated workers speak the real protocol over real WebSockets (hello, pongs,
pause/resume) from a separate client process. Printed: connections held, the
server's resident memory per connection, and request/reply round trips
(pause -> state) measured while every worker is connected.
Target (issue 3): 8192 workers under 2 GiB with p99 under 200 ms.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from websockets.asyncio.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance, Client  # noqa: E402

WORKERS = int(os.environ.get("BENCH_WORKERS", "8192"))
SAMPLES = int(os.environ.get("BENCH_SAMPLES", "2000"))
CONNECT_CONCURRENCY = 64
CAPABILITIES = {"cores": 4, "memoryGib": 8, "userAgent": "bench", "gpu": None}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class SimWorker:
    def __init__(self, ws):
        self.ws = ws
        self.replies: dict[int, asyncio.Future] = {}
        self.reader = asyncio.create_task(self.read())

    async def read(self):
        async for raw in self.ws:
            message = json.loads(raw)
            if message["type"] == "ping":
                await self.ws.send(json.dumps({"type": "pong", "id": message["id"]}))
            elif (future := self.replies.pop(message.get("replyTo"), None)) is not None:
                future.set_result(message)

    async def request(self, message: dict) -> dict:
        future = asyncio.get_running_loop().create_future()
        self.replies[message["id"]] = future
        await self.ws.send(json.dumps(message))
        return await asyncio.wait_for(future, 30)


async def open_worker(url: str, cookie: str, origin: str, gate: asyncio.Semaphore) -> SimWorker:
    async with gate:
        ws = await connect(
            url, additional_headers={"Cookie": cookie}, origin=origin, open_timeout=60, ping_interval=None, max_queue=4
        )
        await ws.send(
            json.dumps({"type": "hello", "id": 1, "workerId": uuid.uuid4().hex, "capabilities": CAPABILITIES})
        )
        while json.loads(await ws.recv())["type"] != "welcome":
            pass
        return SimWorker(ws)


async def run(appliance: Appliance, cookie: str) -> None:
    url = appliance.url.replace("http", "ws") + "/ws/worker"
    base_rss = rss_mib(appliance.proc.pid)
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)
    started = time.perf_counter()
    workers = await asyncio.gather(*(open_worker(url, cookie, appliance.url, gate) for _ in range(WORKERS)))
    connect_seconds = time.perf_counter() - started
    await asyncio.sleep(5)
    held_rss = rss_mib(appliance.proc.pid)

    rtts = []
    sample = random.sample(workers, min(SAMPLES, len(workers)))

    async def round_trip(worker: SimWorker, n: int) -> None:
        kind = "pause" if n % 2 else "resume"
        t0 = time.perf_counter()
        await worker.request({"type": kind, "id": 100 + n})
        rtts.append((time.perf_counter() - t0) * 1000)

    # Spread the requests over a few seconds, as heartbeats from a fleet would arrive.
    for batch in range(0, len(sample), 200):
        await asyncio.gather(*(round_trip(w, batch + i) for i, w in enumerate(sample[batch : batch + 200])))
        await asyncio.sleep(0.25)
    rtts.sort()
    print(f"workers connected         {len(workers)} in {connect_seconds:.1f} s")
    print(f"server RSS                {base_rss:.0f} MiB idle -> {held_rss:.0f} MiB with all connected")
    print(f"RSS per connection        {(held_rss - base_rss) * 1024 / len(workers):.1f} KiB")
    print(
        f"round trip (pause/state)  p50 {statistics.median(rtts):.1f} ms, p99 {rtts[int(len(rtts) * 0.99)]:.1f} ms "
        f"over {len(rtts)} requests"
    )
    print(
        f"target                    8192 workers, < 2048 MiB, p99 < 200 ms -> "
        f"{'met' if len(workers) >= 8192 and held_rss < 2048 and rtts[int(len(rtts) * 0.99)] < 200 else 'NOT met'}"
    )
    for worker in workers:
        worker.reader.cancel()
        await worker.ws.close()


def main() -> None:
    raise_fd_limit()
    with tempfile.TemporaryDirectory() as tmp:
        appliance = Appliance(Path(tmp) / "data", env={"PEERMR_LOG_LEVEL": "warning"}).start()
        try:
            client = Client(appliance.url)
            client.login(ADMIN_EMAIL, ADMIN_PASSWORD)
            cookie = f"peermr_session={client.cookies['peermr_session']}"
            asyncio.run(run(appliance, cookie))
        finally:
            appliance.stop()


if __name__ == "__main__":
    main()
