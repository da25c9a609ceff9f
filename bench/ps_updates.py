"""Parameter-server updates per second: 8 simulated workers, 1 KB and 1 MB float32 values.

Each simulated worker (tests/sim_workers.py, the real worker protocol over real WebSockets) holds
a rank of one run whose map task stays open, and sends ps-update binary frames in a closed loop,
one outstanding at a time, as job code awaiting `context.ps.update` does. Every update is an
element-wise add into the same key, so the figures include the contention of 8 writers. After
the loop a read checks the sum (updates lost would show here). A second figure per size is the
same loop with each update followed by `ps.clock()` (staleness 0: a barrier per iteration), for a
fixed number of iterations.

The appliance runs pinned to core 0 and this process to core 1. No reference is given: no other
parameter server runs in this environment; the WebSocket round trip bounds what is possible.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.sim_workers import SimWorker, cookie_of  # noqa: E402
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance  # noqa: E402

WORKERS = 8
SECONDS = float(os.environ.get("BENCH_SECONDS", "5"))
SIZES = {"1 KB": 1024, "1 MB": 1024 * 1024}
JOB = """
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = %(workers)d;
execution.staleness = %(staleness)d;
execution.setInputFn(async function input() { return []; });
execution.addStage(new MapStage(async function map(x) { await context.onComplete(); }));
execution.start(jobRunner);
"""


class Run:
    """A run whose ranks are simulated workers holding their map task open until ``release``."""

    def __init__(self, url: str, cookie: str):
        self.url, self.cookie = url, cookie
        self.maps: dict[int, tuple[SimWorker, str]] = {}
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def on_task(self, worker: SimWorker, task: dict) -> None:
        if task["kind"] == "map":
            self.maps[task["rank"]] = (worker, task["taskId"])
            if len(self.maps) == WORKERS:
                self.started.set()
            await self.release.wait()
        await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": [], "emits": 0})

    async def start(self, api: httpx.Client, staleness: int) -> Run:
        self.workers = [await SimWorker(self.url, self.cookie, on_task=self.on_task).start() for _ in range(WORKERS)]
        job = api.post("/jobs", json={"name": "ps", "script": JOB % {"workers": WORKERS, "staleness": staleness}})
        self.run_id = api.post(f"/jobs/{job.json()['id']}/runs", json={}).json()["id"]
        await asyncio.wait_for(self.started.wait(), 60)
        return self

    async def ask(self, rank: int, message: dict, payload: bytes | None = None) -> dict:
        worker, task_id = self.maps[rank]
        reply = await worker.request({**message, "taskId": task_id}, payload, timeout=120)
        if reply.get("error"):
            raise RuntimeError(reply["error"])
        return reply

    async def stop(self) -> None:
        self.release.set()
        await asyncio.sleep(0.5)
        for worker in self.workers:
            await worker.close()


async def measure(run: Run, size: int, with_clock: bool) -> dict:
    values = size // 4
    delta = struct.pack(f"<{values}f", *([1.0] * values))
    key = f"w-{size}-{with_clock}"
    await run.ask(0, {"type": "ps-write", "key": key, "dtype": "float32"}, bytes(size))
    latencies: list[float] = []
    counts = [0] * WORKERS
    deadline = time.perf_counter() + SECONDS
    # With clocks every rank must do the same number of iterations (a rank that stopped early would
    # hold the others at the barrier for ever): a fixed count of about SECONDS' worth.
    iterations = int(SECONDS * (40 if size < 65536 else 2)) if with_clock else None

    def going(rank: int) -> bool:
        return counts[rank] < iterations if iterations is not None else time.perf_counter() < deadline

    async def loop(rank: int) -> None:
        while going(rank):
            began = time.perf_counter()
            await run.ask(rank, {"type": "ps-update", "key": key, "dtype": "float32"}, delta)
            if with_clock:
                await run.ask(rank, {"type": "ps-clock"})
            latencies.append(time.perf_counter() - began)
            counts[rank] += 1

    began = time.perf_counter()
    await asyncio.gather(*(loop(r) for r in range(WORKERS)))
    elapsed = time.perf_counter() - began
    read = await run.ask(0, {"type": "ps-read", "key": key})
    first = struct.unpack_from("<f", read["payload"])[0]
    total = sum(counts)
    if first != float(total):
        raise RuntimeError(f"the sum is {first}, {total} updates were sent")
    latencies.sort()
    return {
        "updates": total,
        "per_second": total / elapsed,
        "mb_per_second": total * size / elapsed / 1e6,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
    }


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        appliance = Appliance(Path(tmp) / "data", env={"PEERMR_LOG_LEVEL": "warning"}).start()
        os.sched_setaffinity(appliance.proc.pid, {0})
        os.sched_setaffinity(0, {1})
        try:
            client = appliance.client()
            client.login(ADMIN_EMAIL, ADMIN_PASSWORD)
            token = appliance.cli("token", "create", ADMIN_EMAIL).stdout.strip().split()[-1]
            api = httpx.Client(base_url=appliance.url + "/api/v1", headers={"Authorization": f"Bearer {token}"})
            print(f"parameter server: {WORKERS} simulated workers, closed loop, {SECONDS:.0f} s per figure")
            print(f"{'value':>6} {'clock':>6} {'updates/s':>10} {'MB/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
            for staleness, with_clock in ((1_000_000, False), (0, True)):
                run = await Run(appliance.url, cookie_of(client)).start(api, staleness)
                try:
                    for label, size in SIZES.items():
                        f = await measure(run, size, with_clock)
                        print(
                            f"{label:>6} {'yes' if with_clock else 'no':>6} {f['per_second']:>10,.0f} "
                            f"{f['mb_per_second']:>8,.1f} {f['p50_ms']:>8.2f} {f['p99_ms']:>8.2f}"
                        )
                finally:
                    await run.stop()
        finally:
            appliance.stop()


if __name__ == "__main__":
    asyncio.run(main())
