"""allReduce of 1, 16 and 64 MB Float32Arrays across 4 Chromium workers, against a raw data channel.

Four worker tabs (one headless Chromium, a context each, as the e2e tests run them) hold the ranks
of one run. Each rank times `context.allReduce(v, 'sum')` after a warm-up (which opens the links)
and a barrier, several times per size, and checks the sum. The ring sends 2 (n - 1) / n of the
array from every rank, so per rank:

    algorithm bandwidth = size / time          bus bandwidth = 2 (n - 1) / n * size / time

(the terms NCCL uses). In the same run rank 0 sends 64 MB to rank 1 with a direct `sendToRank`
(one peer link: framing, the page relay and the sandbox hand-over); after the run the same bytes
go over a raw RTCDataChannel between the same two tabs. References, after the run in the same
tabs: that raw channel (bus bandwidth / raw), and a raw ring, every tab sending a ring
allReduce's bytes (2 (n - 1) / n of the size) to the next at once over raw channels: the least
time the traffic itself takes on this machine, without reducing or copying anything.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.raw_channel import raw_channel_seconds, raw_ring_seconds  # noqa: E402
from tests.browsers import launch  # noqa: E402
from tests.support import ADMIN_EMAIL, Appliance  # noqa: E402

RANKS = 4
SIZES_MB = [int(s) for s in os.environ.get("BENCH_SIZES_MB", "1,16,64").split(",")]
REPEAT = int(os.environ.get("BENCH_REPEAT", "3"))
LINK_MB = 64
MB = 1024 * 1024

JOB = """
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = %(ranks)d;
execution.setInputFn(async function input() { return Array.from({length: %(ranks)d}, (_, i) => i); });
execution.addStage(new MapStage(async function map(x) {
  const r = context.getRank(), n = context.getWorkerCount();
  const expected = n * (n + 1) / 2;
  for (const mb of %(sizes)s) {
    const length = mb * 1024 * 1024 / 4;
    const v = new Float32Array(length).fill(r + 1);
    await context.allReduce(v, 'sum', `warm-${mb}`);
    const times = [];
    for (let k = 0; k < %(repeat)d; k++) {
      await context.barrier(`ready-${mb}-${k}`);
      const began = performance.now();
      const sum = await context.allReduce(v, 'sum', `timed-${mb}-${k}`);
      times.push(performance.now() - began);
      if (sum[0] !== expected || sum[length - 1] !== expected) throw new Error(`wrong sum at ${mb} MB`);
    }
    context.emit(`allreduce-${mb}-${r}`, times);
  }
  // One peer link, rank 0 -> rank 1, timed at the receiving end from a shared barrier.
  const bytes = %(link_mb)d * 1024 * 1024;
  if (r < 2) {
    await context.sendToRank(1 - r, 'link-warm', new Uint8Array(1024), {direct: true});
    await context.receiveFromRank(1 - r, 'link-warm', {direct: true});
  }
  await context.barrier('link');
  if (r === 0) await context.sendToRank(1, 'link', new Uint8Array(bytes), {direct: true});
  if (r === 1) {
    const began = performance.now();
    const got = await context.receiveFromRank(0, 'link', {direct: true});
    context.emit('link', [performance.now() - began, got.byteLength]);
  }
  await context.onComplete();
}));
execution.start(jobRunner);
"""


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        server = Appliance(Path(tmp) / "data", env={"PEERMR_LOG_LEVEL": "warning"}).start()
        token = server.cli("token", "create", ADMIN_EMAIL).stdout.strip().split()[-1]
        api = httpx.Client(base_url=server.url + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=120)
        browser = launch(playwright.chromium)
        try:
            tabs = []
            for _ in range(RANKS):
                page = browser.new_context(bypass_csp=True).new_page()  # the raw channel is evaluated in it
                page.goto(f"{server.url}/worker/start#token={token}")
                page.wait_for_function("window.peermrWorker && window.peermrWorker.connected", timeout=60_000)
                tabs.append(page)
            script = JOB % {"ranks": RANKS, "sizes": SIZES_MB, "repeat": REPEAT, "link_mb": LINK_MB}
            job = api.post("/jobs", json={"name": "allreduce-bench", "script": script}).json()
            run_id = api.post(f"/jobs/{job['id']}/runs", json={}).json()["id"]
            deadline = time.monotonic() + 900
            while (run := api.get(f"/runs/{run_id}").json())["state"] in ("queued", "running"):
                if time.monotonic() > deadline:
                    raise TimeoutError("the allReduce run did not finish")
                time.sleep(0.5)
            if run["state"] != "succeeded":
                raise RuntimeError(f"run {run['state']}: {run['reason']}")
            out = dict(json.loads(line) for line in api.get(f"/runs/{run_id}/output").text.splitlines())
            # The raw references between the run's tabs, now idle.
            raw_seconds = raw_channel_seconds(tabs[0], tabs[1], LINK_MB * MB)
            ring_seconds = {mb: raw_ring_seconds(tabs, 2 * (RANKS - 1) * mb * MB // RANKS) for mb in SIZES_MB}
        finally:
            browser.close()
            server.stop()

    raw = LINK_MB * MB / raw_seconds / 1e6
    print(f"allReduce (ring, sum) of Float32Arrays across {RANKS} Chromium workers, median of {REPEAT} per rank")
    print(
        f"{'size':>6} {'time ms':>9} {'slowest':>9} {'algbw MB/s':>11} {'busbw MB/s':>11} {'busbw/raw':>10} "
        f"{'raw ring ms':>12} {'raw ring/time':>14}"
    )
    for mb in SIZES_MB:
        medians = [statistics.median(out[f"allreduce-{mb}-{r}"]) / 1000 for r in range(RANKS)]
        typical, slowest = statistics.median(medians), max(medians)
        algbw = mb * MB / typical / 1e6
        busbw = 2 * (RANKS - 1) / RANKS * algbw
        figures = f"{typical * 1000:>9.0f} {slowest * 1000:>9.0f} {algbw:>11.1f} {busbw:>11.1f} {busbw / raw:>10.2f}"
        ring = ring_seconds[mb]
        print(f"{mb:>4}MB {figures} {ring * 1000:>12.0f} {ring / typical:>14.2f}")
    link_ms, link_bytes = out["link"]
    link = link_bytes / (link_ms / 1000) / 1e6
    print(f"peer link rank 0 -> 1, {LINK_MB} MB: {link_ms:.0f} ms, {link:.1f} MB/s ({link / raw:.2f} of raw)")
    print(f"raw RTCDataChannel, same two tabs, {LINK_MB} MB: {raw_seconds * 1000:.0f} ms, {raw:.1f} MB/s")


if __name__ == "__main__":
    main()
