"""Restart: the word count on 4 Chromium workers, clean, and with the appliance killed (SIGKILL) half
way through and started again on the same data dir.

The job is the CPU-heavy word count of tests/e2e/test_stragglers_in_browsers.py (each word hashed
ROUNDS times in the map, counted in a Map); a generated corpus in 4 files is served by a local HTTP
server with CORS. Four worker tabs in one Playwright Chromium (a context each): their pages
reconnect by themselves after the kill and report the blobs their IndexedDB holds. Measured:
seconds from saving the job to the output downloaded, parsed and found equal to Python's Counter;
for the killed run also the seconds from the kill until the appliance answers again, and which
tasks ran again. The kill lands at half the clean run's median time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.wordcount import Foreign, idle_share  # noqa: E402
from tests.browsers import Workers, launch  # noqa: E402
from tests.e2e.test_jobs_in_browsers import CorpusServer  # noqa: E402
from tests.e2e.test_stragglers_in_browsers import PARTS, all_idle, ended, job_script, make_corpus, output  # noqa: E402
from tests.support import ADMIN_EMAIL, Appliance  # noqa: E402

LINES_PER_PART = 6000
ROUNDS = 3000


def timed(api: httpx.Client, appliance: Appliance, tabs: list, script: str, expected: dict, kill_at: float | None):
    all_idle(api, tabs, timeout=120)
    with Foreign() as foreign:
        started = time.perf_counter()
        job = api.post("/jobs", json={"name": "restart", "script": script})
        job.raise_for_status()
        run_id = api.post(f"/jobs/{job.json()['id']}/runs", json={}).json()["id"]
        down = None
        while (done := ended(api, run_id)) is None:
            if kill_at is not None and down is None and time.perf_counter() - started >= kill_at:
                killed = time.perf_counter()
                appliance.kill()
                appliance.start()
                down = time.perf_counter() - killed
            time.sleep(0.1)
        if done["state"] != "succeeded":
            raise RuntimeError(f"run {run_id} {done['state']}: {done['reason']}")
        counts = output(api, run_id)
        seconds = time.perf_counter() - started
    if counts != expected:
        raise SystemExit("the output differs from Counter's")
    rows = appliance.query(f"SELECT stage, state FROM jobs_task WHERE run = {run_id} AND stage >= 0")
    again = Counter(("map" if stage == 0 else "reduce") for stage, state in rows if state == "cancelled")
    return {"seconds": seconds, "down": down, "again": dict(again), "foreign": foreign.cores}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one run of each case instead of three")
    args = parser.parse_args()
    repeats = 1 if args.quick else 3
    idle = idle_share()
    texts = make_corpus(seed=29, parts=PARTS, lines=LINES_PER_PART)
    expected = dict(Counter(w for t in texts for w in t.split()))
    server = CorpusServer({f"/part-{i}.txt": t.encode() for i, t in enumerate(texts)})
    urls = [f"{server.origin}/part-{i}.txt" for i in range(PARTS)]
    script = job_script(urls, rounds=ROUNDS)
    print(f"corpus: {sum(len(t) for t in texts) / 1e6:.1f} MB in {PARTS} files; each word hashed {ROUNDS} times")
    clean: list[dict] = []
    killed: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {"PEERMR_FETCH_ORIGINS": server.origin, "PEERMR_LOG_LEVEL": "warning"}
        appliance = Appliance(Path(tmp) / "data", env=env).start()
        try:
            token = appliance.cli("token", "create", ADMIN_EMAIL).stdout.strip().split()[-1]
            api = httpx.Client(
                base_url=appliance.url + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=600
            )
            with sync_playwright() as playwright:
                browser = launch(playwright.chromium)
                try:
                    tabs = Workers(browser, appliance, token)
                    tabs.add(PARTS)
                    time.sleep(2)  # the connectivity probes of the new tabs are over
                    for repeat in range(repeats):
                        clean.append(timed(api, appliance, tabs.tabs, script, expected, None))
                        half = statistics.median(r["seconds"] for r in clean) / 2
                        killed.append(timed(api, appliance, tabs.tabs, script, expected, half))
                        print(
                            f"  run {repeat + 1}: clean {clean[-1]['seconds']:.1f} s; killed at {half:.1f} s: "
                            f"{killed[-1]['seconds']:.1f} s (appliance back in {killed[-1]['down']:.1f} s; "
                            f"ran again: {killed[-1]['again']}; other load {killed[-1]['foreign']:.2f} cores)",
                            flush=True,
                        )
                finally:
                    browser.close()
        finally:
            appliance.stop()
            server.shutdown()
    base = statistics.median(r["seconds"] for r in clean)
    hit = statistics.median(r["seconds"] for r in killed)
    print()
    print(f"machine idle when the bench started: {idle:.0%} (other work on the machine skews the figures)")
    print(f"clean run (save job -> output equal to Counter), median:       {base:6.2f} s")
    print(f"killed half way and restarted, median:                           {hit:6.2f} s")
    print(f"extra time for the crash and restart:                            {hit - base:6.2f} s ({hit / base:.2f} x)")


if __name__ == "__main__":
    main()
