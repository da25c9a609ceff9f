"""Stragglers: a word count on 4 Chromium workers, clean, with one tab throttled 10x (speculation on
and off), and with one browser's main process stopped mid-map.

The job is the CPU-heavy word count of tests/e2e/test_stragglers_in_browsers.py (each word hashed
ROUNDS times in the map, counted in a Map, a small shuffle); a generated corpus in 4 files is served
by a local HTTP server with CORS. Four worker tabs: three in one Playwright Chromium (a context
each), one alone in a Chromium launched here (its browser process's pid is ours to SIGSTOP).
Measured: seconds from saving the job to the output downloaded, parsed and found equal to Python's
Counter over the same files.

(i)   clean;
(ii)  the lone tab throttled 10x through the DevTools protocol (its page's main thread with
      Emulation.setCPUThrottlingRate; its task workers, which that command does not reach, paused by
      the debugger 90 % of the time), speculative execution on (the default);
(iii) the same with execution.speculation = false;
(iv)  the lone browser's main process SIGSTOPped once its tab runs its map (a fifth tab joins once
      the run has started, to take a backup or the rank), SIGCONT after the run;
(v)   as (ii) with a fifth tab connected and idle: a backup need not wait for a rank's own task
      to end (with four tabs for four ranks it must, which bounds (ii) near two map durations).

Target: (ii) / (i) <= 1.5. The appliance runs with a stall limit of 8 s (PEERMR_JOB_STALL_SECONDS).
`--cases` runs some of the cases; BENCH_SHOW_LOG=1 prints each run's log.
"""

from __future__ import annotations

import argparse
import os
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
from tests.browsers import LoneChromium, Throttle, Workers, launch  # noqa: E402
from tests.e2e.test_jobs_in_browsers import CorpusServer  # noqa: E402
from tests.e2e.test_stragglers_in_browsers import (  # noqa: E402
    all_idle,
    ended,
    job_script,
    log_lines,
    log_text,
    make_corpus,
    output,
    running_on,
    worker_id,
)
from tests.support import ADMIN_EMAIL, Appliance  # noqa: E402

STALL_SECONDS = 8
LINES = 12_000  # the corpus: 16 files of 750 lines (--chunks auto) or 4 of 3,000 (--chunks rank)
ROUNDS = 4000
RATE = 10
CASES = {
    "clean": "(i)   clean",
    "throttled": f"(ii)  one tab throttled {RATE}x, speculation on",
    "throttled-off": f"(iii) one tab throttled {RATE}x, speculation off",
    "stopped": "(iv)  one browser's main process stopped mid-map",
    "throttled-spare": f"(v)   one tab throttled {RATE}x, a fifth tab idle",
}


class Bench:
    def __init__(
        self, api: httpx.Client, appliance: Appliance, steady: Workers, lone: LoneChromium, lone_tabs: Workers
    ):
        self.api, self.appliance, self.steady, self.lone, self.lone_tabs = api, appliance, steady, lone, lone_tabs

    def timed(self, case: str, urls: list[str], expected: dict, chunks: str) -> dict:
        tabs = self.steady.tabs + self.lone_tabs.tabs
        all_idle(self.api, tabs, timeout=120)
        tab = self.lone_tabs.tabs[0]
        lone_worker = worker_id(tab)
        speculation, chunks_asked = case != "throttled-off", None if chunks == "auto" else chunks
        script = job_script(urls, rounds=ROUNDS, speculation=speculation, timeout=900, chunks=chunks_asked)
        throttle = Throttle(tab, rate=RATE) if case.startswith("throttled") else None
        spare = None
        if case == "throttled-spare":
            spare = self._add_tab()
            time.sleep(2)  # its connectivity probe is over
        with Foreign() as foreign:
            started = time.perf_counter()
            try:
                run_id = self._start(case, script)
                if case == "stopped":
                    self._until_started(run_id)
                    spare = self._add_tab()
                    running_on(self.api, run_id, lone_worker, "map running")
                    self.lone.stop_main()
                self._until_succeeded(case, run_id, throttle)
                counts = output(self.api, run_id)
                seconds = time.perf_counter() - started
            finally:
                self._release(case, throttle, spare)
        if counts != expected:
            raise SystemExit(f"{case}: the output differs from Counter's")
        return self._outcome(run_id, seconds, foreign.cores, lone_worker)

    def _add_tab(self):
        self.steady.add(1)
        return self.steady.tabs[-1]

    def _start(self, case: str, script: str) -> int:
        job = self.api.post("/jobs", json={"name": f"stragglers-{case}", "script": script})
        job.raise_for_status()
        run = self.api.post(f"/jobs/{job.json()['id']}/runs", json={})
        run.raise_for_status()
        return run.json()["id"]

    def _until_started(self, run_id: int) -> None:
        while self.api.get(f"/runs/{run_id}").json()["state"] == "queued":
            time.sleep(0.1)

    def _until_succeeded(self, case: str, run_id: int, throttle: Throttle | None) -> None:
        while (done := ended(self.api, run_id)) is None:
            if throttle is not None:
                throttle.wait(0.5)
            else:
                time.sleep(0.1)
        if done["state"] != "succeeded":
            raise RuntimeError(f"{case}: run {run_id} {done['state']}: {done['reason']}")

    def _release(self, case: str, throttle: Throttle | None, spare) -> None:
        if throttle is not None:
            throttle.stop()
        if case == "stopped":
            self.lone.continue_main()
        if spare is not None:
            self.steady.close(spare)

    def _outcome(self, run_id: int, seconds: float, foreign_cores: float, lone_worker: str) -> dict:
        log = log_text(self.api, run_id)
        if os.environ.get("BENCH_SHOW_LOG"):
            for line in log_lines(self.api, run_id):
                print(f"    {line['at'][11:23]} {line['source'][:8]:8} {line['text']}", flush=True)
        states = Counter(
            row[0] for row in self.appliance.query(f"SELECT state FROM jobs_task WHERE run = {run_id} AND stage >= 0")
        )
        return {
            "seconds": seconds,
            "foreign": foreign_cores,
            "backups": log.count("a backup attempt starts"),
            "superseded": states.get("superseded", 0),
            "stalled": log.count("is stalled: no progress"),
            "dropped": log.count(f"worker {lone_worker} (rank"),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one run of each case instead of three")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES), help="the cases to run")
    parser.add_argument(
        "--chunks",
        choices=["auto", "rank"],
        default="auto",
        help="the map's chunks: auto (16 files, ranges split on demand) or rank (4 files, one task a rank)",
    )
    args = parser.parse_args()
    repeats = 1 if args.quick else 3
    idle = idle_share()

    parts = 16 if args.chunks == "auto" else 4
    texts = make_corpus(seed=23, parts=parts, lines=LINES // parts)
    expected = dict(Counter(w for t in texts for w in t.split()))
    server = CorpusServer({f"/part-{i}.txt": t.encode() for i, t in enumerate(texts)})
    urls = [f"{server.origin}/part-{i}.txt" for i in range(parts)]
    words = sum(len(t.split()) for t in texts)
    print(
        f"corpus: {sum(len(t) for t in texts) / 1e6:.1f} MB, {words / 1e3:.0f} k words in {parts} files; "
        f"map: each word hashed {ROUNDS} times; map.chunks {args.chunks!r}",
        flush=True,
    )
    results: dict[str, list[dict]] = {case: [] for case in CASES}
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            "PEERMR_FETCH_ORIGINS": server.origin,
            "PEERMR_LOG_LEVEL": "warning",
            "PEERMR_JOB_STALL_SECONDS": str(STALL_SECONDS),
        }
        appliance = Appliance(Path(tmp) / "data", env=env).start()
        try:
            token = appliance.cli("token", "create", ADMIN_EMAIL).stdout.strip().split()[-1]
            api = httpx.Client(
                base_url=appliance.url + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=600
            )
            with sync_playwright() as playwright:
                browser = launch(playwright.chromium)
                lone = LoneChromium(playwright.chromium)
                try:
                    steady = Workers(browser, appliance, token)
                    steady.add(3)
                    lone_tabs = Workers(lone.browser, appliance, token)
                    lone_tabs.add(1)
                    time.sleep(2)  # the connectivity probes of the new tabs are over
                    bench = Bench(api, appliance, steady, lone, lone_tabs)
                    for repeat in range(repeats):
                        for case in args.cases:
                            result = bench.timed(case, urls, expected, args.chunks)
                            results[case].append(result)
                            print(
                                f"  run {repeat + 1} {case:14} {result['seconds']:6.1f} s  "
                                f"(backups {result['backups']}, superseded {result['superseded']}, "
                                f"stalled reports {result['stalled']}, lone tab dropped {result['dropped']}; "
                                f"other load {result['foreign']:.2f} cores)",
                                flush=True,
                            )
                finally:
                    lone.close()
                    browser.close()
        finally:
            appliance.stop()
            server.shutdown()

    cores = len(os.sched_getaffinity(0))
    print()
    print(f"machine idle when the bench started: {idle:.0%} (other work on the machine skews the figures)")
    print(f"machine: {cores} cores shared by the appliance, 4-5 Chromium tabs in two browsers and the HTTP server")
    print()
    median = {case: statistics.median(r["seconds"] for r in runs) for case, runs in results.items() if runs}
    print(
        f"{'case (save job -> output parsed, equal to Counter)':60} {'median s':>9}  {'runs':>20}  {'other load':>10}"
    )
    for case in median:
        runs = results[case]
        each = ", ".join(f"{r['seconds']:.1f}" for r in runs)
        load = max(r["foreign"] for r in runs)
        print(f"{CASES[case]:60} {median[case]:>9.2f}  {each:>20}  {load:>6.2f} cores")
    print("(other load: the most CPU that processes outside this bench used during a run, in cores; a lower bound)")
    print()
    if "clean" not in median:
        return
    ratios = {
        "throttled": "ratio (ii) / (i), throttled with speculation / clean:    ",
        "throttled-off": "ratio (iii) / (i), throttled without speculation / clean:",
        "stopped": "ratio (iv) / (i), browser stopped mid-map / clean:       ",
        "throttled-spare": "ratio (v) / (i), throttled with a spare tab / clean:     ",
    }
    for case, label in ratios.items():
        if case in median:
            print(f"{label} {median[case] / median['clean']:.2f}")
    if "throttled" in median:
        ratio = median["throttled"] / median["clean"]
        print(f"target: (ii) / (i) <= 1.5 -> {'met' if ratio <= 1.5 else 'NOT met'}")


if __name__ == "__main__":
    main()
