"""Blob throughput between two Chromium workers through PMRFS, against a raw RTCDataChannel.

PMRFS: worker A holds an object (copied to it by the appliance, whose own copy is
then released); the appliance restarts with replication factor 2 and worker B
joins, so every blob goes A -> B over WebRTC, SHA-256 verified and stored in
IndexedDB on arrival. Measured from B's connection (its page reports the
appliance's welcome) to the last replica confirmed, polled every 0.1 s.
Reference: the same bytes over one raw RTCDataChannel between the same two
browsers, in the same run. Target (issue 3): at least 0.8 of the raw channel.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.raw_channel import raw_channel_seconds  # noqa: E402
from tests.browsers import launch_persistent  # noqa: E402
from tests.support import Appliance  # noqa: E402

MIB = int(os.environ.get("BENCH_MIB", "64"))


def open_worker(playwright, url: str, token: str, profile: Path, worker_id: str):
    context = launch_persistent(playwright.chromium, profile, bypass_csp=True)
    page = context.new_page()
    page.goto(f"{url}/worker/start#token={token}&worker={worker_id}")
    page.wait_for_function("window.peermrWorker && window.peermrWorker.connected", timeout=60_000)
    return context, page


def browser_holders(api: httpx.Client) -> list[set[str]]:
    state = api.get("/api/v1/objects-status/bench/data.bin").json()
    return [set(b["replicas"]) - {"appliance"} for b in state["blobs"]]


def main() -> None:
    size = MIB * 1024 * 1024
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        tmp = Path(tmp)
        server = Appliance(tmp / "data", env={"PEERMR_REPLICATION_FACTOR": "1", "PEERMR_LOG_LEVEL": "warning"}).start()
        server.add_user("bench@example.com", "coordinator", "bench-password-1")
        token = server.cli("token", "create", "bench@example.com").stdout.strip()
        api = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=120)
        a_id, b_id = uuid.uuid4().hex, uuid.uuid4().hex
        a_context, a_page = open_worker(playwright, server.url, token, tmp / "a", a_id)
        try:
            api.put("/api/v1/buckets/bench")
            api.put("/api/v1/buckets/bench/objects/data.bin?pin=false", content=os.urandom(size))
            deadline = time.monotonic() + 300
            while not all(h == {a_id} for h in browser_holders(api)) and time.monotonic() < deadline:
                time.sleep(0.2)
            blobs = len(browser_holders(api))

            # Factor 2 from now on: B must get every blob from A.
            server.stop()
            server.env["PEERMR_REPLICATION_FACTOR"] = "2"
            server.start()
            a_page.wait_for_function("window.peermrWorker.connected", timeout=90_000)
            time.sleep(2)  # A's hello reconciled
            b_context, b_page = open_worker(playwright, server.url, token, tmp / "b", b_id)
            started = time.monotonic()  # B has said hello: from here on it is the transfers
            while not all(b_id in h for h in browser_holders(api)):
                if time.monotonic() - started > 600:
                    raise TimeoutError("PMRFS transfer did not finish")
                time.sleep(0.1)
            pmrfs_seconds = time.monotonic() - started

            raw_ms = raw_channel_seconds(a_page, b_page, size) * 1000
            b_context.close()
        finally:
            a_context.close()
            server.stop()
    pmrfs_rate = size / 2**20 / pmrfs_seconds
    raw_rate = size / 2**20 / (raw_ms / 1000)
    print(f"object                   {MIB} MiB in {blobs} blobs")
    print(
        f"PMRFS A -> B             {pmrfs_seconds:.2f} s, {pmrfs_rate:.1f} MiB/s "
        "(join, signaling, WebRTC, SHA-256, IndexedDB, namenode)"
    )
    print(f"raw RTCDataChannel A->B  {raw_ms / 1000:.2f} s, {raw_rate:.1f} MiB/s (64 KiB messages, same two browsers)")
    print(f"ratio PMRFS / raw        {pmrfs_rate / raw_rate:.2f} (target >= 0.8)")


if __name__ == "__main__":
    main()
