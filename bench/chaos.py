"""Faults: what one fault costs a word count on six headless Chromium workers run by `peermr worker`.

The job is docs/examples/wordcount.js (PMRFS storage, 4 ranks) on a generated corpus of 8 files of
16 MB (`--size-mb`), served by a local HTTP server with CORS on an origin the appliance allows. The
workers are six browsers started by the appliance's own runner, `peermr worker --count 6` (Debian's
/usr/bin/chromium with the runner's flags; a browser that exits is started again under the same
worker id). The appliance keeps its own defaults for the waits a fault runs into (the tests' short
reconnect grace is not set), with replication factor 1 as in wordcount.py.

A round: seconds from saving the job to the output downloaded and parsed, whether it equals
collections.Counter over the same files, and the run's warn lines. After a fault, once the six
workers are connected and idle again, one clean run is timed too ("next run"): what the fault
still costs the run after it (a browser that came back under its id is a new peer to the others).
After one warm-up run (fresh renderers are slow; not counted), each case runs `--rounds` times,
the cases in turn:

  clean           no fault
  kill-map        a browser SIGKILLed, its whole process tree, once its map runs (the runner starts
                  it again under the same id)
  kill-reduce     the same once its reduce runs and every map is done
  freeze-map      a browser's whole tree SIGSTOPped in its map (SIGCONT once the run ended)
  freeze-reduce   the same in its reduce, every map done
  freeze-between  the same once its map is done while other maps still run: its reduce has not
                  started its own work (it is assigned at once and waits for the other maps' input)
  main-stopped    only the browser's main process SIGSTOPped in its map (its renderers run on)
  tab-closed      the worker page closed in its map. A runner's browser has no Playwright handle,
                  so closing the tab is simulated: SIGKILL of the renderer process that holds the
                  worker page (the `--type=renderer` child that is neither Chromium's own WebUI
                  nor an extension, the one with the most CPU time; the page's sandboxes run in
                  it). The browser keeps running with a dead tab and does not load the page again,
                  so the worker does not come back during the run; after the run the bench ends
                  that browser (SIGTERM) and the runner starts it again.

Where a task runs: the dashboard's stage pages (/ui/runs/{id}/stages/A/{stage}, an admin session)
list each live attempt with its worker and state; the REST API gives only counts per stage, and the
run log reaches the store once a second, too late for a reduce. The browser of a worker is the
runner's child whose command line names that worker id (/proc), its tree that process's
descendants. Of the candidate workers, the one whose browser has run longest is hit (a browser the
runner restarted less than a minute ago would be restarted after a pause).

Whether a fault landed where it was aimed is read from the task history after the run: the
victim's attempt was under way at the moment of the fault and did not end done. The reduce after
the last map lasts a few tenths of a second: a round whose fault missed (the run ended before the
bench saw the moment, or the victim's task had ended in its page just before the signal) is not
counted and is played again, at most MAX_TRIES times; the table gives how many missed.

Target (issue "Faults cost seconds, not half a minute"): each fault's every run within
max(2 x the clean median, the clean median + 5 s), and the right output every time.
`--faults` runs some faults (clean always runs); BENCH_SHOW_LOG=1 prints each round's warn lines
and task attempts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.wordcount import (  # noqa: E402
    CorpusServer,
    Foreign,
    admin_token,
    api_client,
    appliance_env,
    corpus,
    descendants,
    idle_share,
    job_script,
    processes,
    when,
)
from tests.browsers import chromium_pids  # noqa: E402
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance, Client  # noqa: E402

FILES = 8
BROWSERS = 6
MAX_TRIES = 5
ROUND_TIMEOUT = 300
SETTLE_TIMEOUT = 120
# fault -> the phase of the victim's tasks it waits for (the module's docstring says what each does)
FAULTS = {
    "kill-map": "map",
    "kill-reduce": "reduce",
    "freeze-map": "map",
    "freeze-reduce": "reduce",
    "freeze-between": "between",
    "main-stopped": "map",
    "tab-closed": "map",
}


class Fleet:
    """The runner's browsers, found in /proc: each worker id's main process and its tree."""

    def __init__(self, runner: subprocess.Popen):
        self.runner = runner

    def mains(self) -> dict[str, int]:
        children = [pid for pid, (parent, _) in processes().items() if parent == self.runner.pid]
        found = {}
        for pid in chromium_pids(among=children):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            # The runner keeps each browser's worker id in its profile (fleet/runner.py).
            if match := re.search(r"--user-data-dir=([^\0]+)", command):
                found[(Path(match.group(1)) / "peermr-worker-id").read_text().strip()] = pid
        return found

    def tree(self, worker: str) -> list[int]:
        """The browser's main process first, then its descendants."""
        main = self.mains()[worker]
        return [main, *sorted(descendants(processes(), main) - {main})]

    def tab(self, worker: str) -> int:
        """The renderer of the worker page: not Chromium's WebUI nor an extension, the most CPU used."""
        table = processes()
        pages = []
        for pid in chromium_pids("renderer", among=descendants(table, self.mains()[worker])):
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"--top-chrome-webui" not in command and b"--extension-process" not in command:
                pages.append(pid)
        return max(pages, key=lambda pid: table[pid][1])

    def oldest(self, workers: list[str]) -> str | None:
        """Of ``workers``, the one whose browser started first."""
        mains = self.mains()

        def started(worker: str) -> int:
            return int(Path(f"/proc/{mains[worker]}/stat").read_text().rsplit(")", 1)[1].split()[19])

        running = [w for w in workers if w in mains]
        return min(running, key=started) if running else None


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


@dataclass
class Fault:
    """One fault on one worker's browser, and what undoes it once the run has ended."""

    name: str
    worker: str
    at: float = 0.0  # wall clock, to compare with the task history
    stopped: list[int] = field(default_factory=list)
    restart: int | None = None

    def strike(self, fleet: Fleet) -> None:
        self.at = time.time()
        if self.name.startswith("kill-"):
            signal_all(fleet.tree(self.worker), signal.SIGKILL)
        elif self.name.startswith("freeze-"):
            self.stopped = fleet.tree(self.worker)
            signal_all(self.stopped, signal.SIGSTOP)
        elif self.name == "main-stopped":
            self.stopped = [fleet.mains()[self.worker]]
            signal_all(self.stopped, signal.SIGSTOP)
        elif self.name == "tab-closed":
            self.restart = fleet.mains()[self.worker]
            signal_all([fleet.tab(self.worker)], signal.SIGKILL)

    def undo(self) -> None:
        signal_all(self.stopped[::-1], signal.SIGCONT)
        if self.restart is not None:
            signal_all([self.restart], signal.SIGTERM)  # the runner starts it again


ROW = re.compile(r'^(\d+)" data-state="([\w-]+)".*?title="([0-9a-f]+)"', re.S)


class Watch:
    """A run's live attempts per stage, from the dashboard's stage pages."""

    def __init__(self, api: httpx.Client, ui: Client, run_id: int):
        self.api, self.ui, self.run_id = api, ui, run_id

    def attempts(self, stage: int) -> list[tuple[int, str, str]]:
        """(rank, state, worker) of each attempt of ``stage`` in group A."""
        page = self.ui.get(f"/ui/runs/{self.run_id}/stages/A/{stage}", headers={"HX-Request": "true"}).text
        return [
            (int(m.group(1)), m.group(2), m.group(3))
            for row in page.split('<tr data-rank="')[1:]
            if (m := ROW.match(row.split("</tr>", 1)[0]))
        ]

    def candidates(self, phase: str) -> list[str] | None:
        """Workers whose tasks are in ``phase`` now; None once the run has ended."""
        run = self.api.get(f"/runs/{self.run_id}").json()
        if run["state"] not in ("queued", "running"):
            return None
        stages = {p["stage"]: p for p in run["progress"] if p["group"] == "A"}
        if 0 not in stages:
            return []
        maps_done = stages[0]["done"] == stages[0]["total"]
        if phase == "map":
            return [w for _, state, w in self.attempts(0) if state == "running"]
        if phase == "reduce":
            return [w for _, state, w in self.attempts(1) if state == "running"] if maps_done else []
        if maps_done:  # between: its map done, its reduce waiting for the maps still running
            return []
        return [w for _, state, w in self.attempts(0) if state == "done"]


def landed(phase: str, fault: Fault, tasks: list[tuple]) -> bool:
    """Whether the fault cost the victim an attempt of ``phase`` under way at its moment. One that still
    ended done had finished in the page before the signal (its report was on the way): a miss."""
    stage = 0 if phase == "map" else 1
    if phase == "between":
        maps = [r for r in tasks if r[0] == 0]
        mine = [r for r in maps if r[3] == fault.worker and r[4] == "done" and when(r[6]) <= fault.at]
        others = [r for r in maps if r[3] != fault.worker and (r[6] is None or when(r[6]) > fault.at)]
        # its reduce, assigned as its map ended, waiting for the other maps
        return bool(mine and others) and any(r[0] == 1 and r[3] == fault.worker and r[4] != "done" for r in tasks)
    return any(
        stage == row_stage
        and worker == fault.worker
        and state != "done"
        and when(started) <= fault.at
        and (finished is None or when(finished) > fault.at)
        for row_stage, _rank, _attempt, worker, state, started, finished in tasks
    )


class Bench:
    def __init__(self, appliance: Appliance, api: httpx.Client, ui: Client, fleet: Fleet, script: str, expected):
        self.appliance, self.api, self.ui, self.fleet = appliance, api, ui, fleet
        self.script, self.expected = script, expected

    def settle(self, restart: str | None = None) -> None:
        """Until all BROWSERS workers are connected and idle (a worker that does not come back has its
        browser ended, for the runner to start it again)."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while (states := connected(self.appliance)) != {"idle": BROWSERS}:
            if time.monotonic() > deadline:
                if restart is None:
                    raise RuntimeError(f"the workers did not come back: {states}")
                if (main := self.fleet.mains().get(restart)) is not None:
                    signal_all([main], signal.SIGTERM)
                restart, deadline = None, time.monotonic() + SETTLE_TIMEOUT
            time.sleep(0.25)

    def play(self, case: str) -> dict:
        """One run with ``case``'s fault (none struck when the run ended before the fault's moment)."""
        phase = FAULTS.get(case)
        fault = None
        with Foreign() as foreign:
            started, epoch = time.perf_counter(), time.time()
            job = self.api.post("/jobs", json={"name": f"chaos-{case}", "script": self.script})
            job.raise_for_status()
            run = self.api.post(f"/jobs/{job.json()['id']}/runs", json={})
            run.raise_for_status()
            run_id = run.json()["id"]
            try:
                if phase is not None:
                    fault = self._strike(case, phase, Watch(self.api, self.ui, run_id))
                run = self._until_ended(run_id)
                if run["state"] == "succeeded":
                    output = self.api.get(f"/runs/{run_id}/output")
                    output.raise_for_status()
                    counts = dict(json.loads(line) for line in output.text.splitlines())
                seconds = time.perf_counter() - started
            finally:
                if fault is not None:
                    fault.undo()
        tasks = self.appliance.query(
            "SELECT stage, rank, attempt, worker_id, state, started_at, finished_at FROM jobs_task "
            f"WHERE run = {run_id} ORDER BY started_at"
        )
        logs = [json.loads(line) for line in self.api.get(f"/runs/{run_id}/logs").text.splitlines()]
        return {
            "seconds": seconds,
            "correct": run["state"] == "succeeded" and counts == self.expected,
            "state": run["state"],
            "reason": run["reason"],
            "foreign": foreign.cores,
            "fault": fault,
            "landed": fault is not None and landed(phase, fault, tasks),
            "warnings": [line for line in logs if line["level"] in ("warn", "error")],
            "tasks": tasks,
            "epoch": epoch,
        }

    def _strike(self, case: str, phase: str, watch: Watch) -> Fault | None:
        while (candidates := watch.candidates(phase)) is not None:
            if victim := self.fleet.oldest(candidates):
                fault = Fault(case, victim)
                fault.strike(self.fleet)
                return fault
            time.sleep(0.05)
        return None

    def _until_ended(self, run_id: int) -> dict:
        deadline = time.monotonic() + ROUND_TIMEOUT
        while (run := self.api.get(f"/runs/{run_id}", params={"wait": 60}).json())["state"] in ("queued", "running"):
            if time.monotonic() > deadline:
                self.api.post(f"/runs/{run_id}/cancel")
                return {**run, "state": "timed out", "reason": f"not ended after {ROUND_TIMEOUT} s; cancelled"}
        return run


class Corpus(CorpusServer):
    def handle_error(self, request, client_address) -> None:
        pass  # a browser killed while it downloads a file


def connected(appliance: Appliance) -> dict[str, int]:
    """Connected workers by state (idle, busy, paused), from the appliance's metrics."""
    states: Counter = Counter()
    for line in httpx.get(f"{appliance.url}/metrics", timeout=30).text.splitlines():
        if line.startswith("peermr_workers_connected{") and (match := re.search(r'state="(\w+)"\} (\S+)', line)):
            states[match.group(1)] += int(float(match.group(2)))
    return {state: n for state, n in states.items() if n}


def show(result: dict) -> None:
    """The round's warn lines and its task attempts, in seconds from saving the job."""
    if (fault := result["fault"]) is not None:
        print(f"      {fault.name} on {fault.worker[:8]} at {fault.at - result['epoch']:.2f} s", flush=True)
    for line in result["warnings"]:
        print(f"      {line['at'][11:23]} {line['source'][:8]:8} {line['level']}: {line['text']}", flush=True)
    for stage, rank, attempt, worker, state, started, finished in result["tasks"]:
        begin = when(started) - result["epoch"]
        end = f"{when(finished) - result['epoch']:6.2f}" if finished is not None else "     -"
        print(f"      stage {stage:2} rank {rank} try {attempt} {worker[:8]} {state:10} {begin:6.2f} -> {end}")


def describe(case: str, result: dict) -> str:
    fault = result["fault"]
    parts = [f"{result['seconds']:7.2f} s", "right" if result["correct"] else f"WRONG ({result['state']})"]
    if fault is not None:
        parts.append(f"victim {fault.worker[:8]}")
    parts.append(f"{len(result['warnings'])} warn lines, other load {result['foreign']:.2f} cores")
    if after := result.get("after"):
        parts.append(f"the clean run after: {after['seconds']:.2f} s, {'right' if after['correct'] else 'WRONG'}")
    return f"{case:15} " + "; ".join(parts)


def report(results: dict[str, list[dict]], missed: Counter) -> None:
    clean = statistics.median(r["seconds"] for r in results["clean"])
    budget = max(2 * clean, clean + 5)
    print()
    print(f"clean median {clean:.2f} s; target: each fault's every run <= {budget:.2f} s (max of 2x, +5 s), all right")
    head = f"{'fault':15} {'n':>2} {'right':>6} {'median s':>9} {'max s':>7} {'cost (x, +s)':>16}"
    print(f"{head} {'missed':>6} {'load':>5} {'next run':>9}  target")
    for case, runs in results.items():
        seconds = [r["seconds"] for r in runs]
        median, worst = statistics.median(seconds), max(seconds)
        right = sum(r["correct"] for r in runs)
        cost = f"{median / clean:.1f}x, {median - clean:+.1f}" if case != "clean" else "-"
        met = "-" if case == "clean" else "met" if worst <= budget and right == len(runs) else "NOT met"
        load = max(r["foreign"] for r in runs)
        after = [r["after"]["seconds"] for r in runs if "after" in r]
        following = f"{statistics.median(after):.2f}" if after else "-"
        row = f"{case:15} {len(runs):>2} {right:>3}/{len(runs):<2} {median:>9.2f} {worst:>7.2f} {cost:>16}"
        print(f"{row} {missed[case]:>6} {load:>5.2f} {following:>9}  {met}")
    print("(load: the most CPU processes outside this bench used during a round, in cores; a lower bound;")
    print(" next run: the median of the clean runs right after the fault's, once its workers were back)")


def measure(bench: Bench, n: int, case: str, runs: list[dict], missed: Counter, show_log: bool) -> None:
    """Round ``n`` of ``case``, played again (up to MAX_TRIES) while its fault does not land where it was
    aimed (the run ended first, or the victim's task ended just before the fault); after a fault, once
    the workers are back, a clean run (its seconds are the fault's aftermath)."""
    for _ in range(MAX_TRIES):
        bench.settle()
        result = bench.play(case)
        if (fault := result["fault"]) is not None:
            bench.settle(restart=fault.worker)
            time.sleep(2)  # a restarted tab's connectivity probe is over
            result["after"] = bench.play("clean")
        if case == "clean" or result["landed"]:
            break
        missed[case] += 1
        why = "the run ended first" if fault is None else f"{fault.worker[:8]}'s task ended first"
        print(f"round {n + 1} {case:15} missed ({why}); again", flush=True)
    else:
        return
    runs.append(result)
    print(f"round {n + 1} {describe(case, result)}", flush=True)
    if show_log:
        show(result)
        if "after" in result:
            print("    the clean run after it:")
            show(result["after"])


def start_workers(appliance: Appliance, token: str, directory: Path) -> subprocess.Popen:
    # Given over to the bench: its load is the work, the browsers must not pause for it.
    command = [sys.executable, "-m", "appliance", "worker", "--server", appliance.url, "--ignore-busy"]
    command += ["--count", str(BROWSERS), "--data-dir", str(directory)]
    with open(directory.parent / "runner.log", "ab") as log:
        env = {**os.environ, "PEERMR_TOKEN": token}
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="runs of each case (default 5)")
    parser.add_argument("--faults", nargs="+", choices=list(FAULTS), default=list(FAULTS), help="the faults to run")
    parser.add_argument("--size-mb", type=int, default=16, help=f"MB in each of the {FILES} files (default 16)")
    parser.add_argument("--quick", action="store_true", help="one round of each, 2 MB files: a smoke run")
    args = parser.parse_args()
    rounds, size_mb = (1, 2) if args.quick else (args.rounds, args.size_mb)
    show_log = bool(os.environ.get("BENCH_SHOW_LOG"))
    idle = idle_share()

    generated = corpus(FILES * size_mb * 1000 * 1000)  # 16 files: two make one of ours
    texts = [a + b for a, b in zip(generated[::2], generated[1::2], strict=True)]
    expected = dict(Counter(w for t in texts for w in t.decode().split()))
    server = Corpus({f"/part-{i}.txt": t for i, t in enumerate(texts)})
    print(f"corpus: {FILES} files of {size_mb} MB, {len(expected)} distinct words; {BROWSERS} workers", flush=True)
    cases = ["clean", *args.faults]
    results: dict[str, list[dict]] = {case: [] for case in cases}
    missed: Counter = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        appliance = Appliance(Path(tmp) / "data", env=appliance_env(server))
        appliance.env.pop("PEERMR_JOB_RECONNECT_GRACE_SECONDS")  # the appliance's default, not the tests'
        appliance.start()
        runner = None
        try:
            token = admin_token(appliance)
            (Path(tmp) / "fleet").mkdir()
            runner = start_workers(appliance, token, Path(tmp) / "fleet")
            ui = Client(appliance.url)
            ui.login(ADMIN_EMAIL, ADMIN_PASSWORD)
            script = job_script([f"{server.origin}/part-{i}.txt" for i in range(FILES)])
            bench = Bench(appliance, api_client(appliance, token), ui, Fleet(runner), script, expected)
            bench.settle()
            time.sleep(2)  # the connectivity probes of the new tabs are over
            warm = bench.play("clean")
            print(f"warm-up (not counted): {describe('clean', warm)}", flush=True)
            for n in range(rounds):
                for case in cases:
                    measure(bench, n, case, results[case], missed, show_log)
        finally:
            if runner is not None:
                runner.terminate()
                runner.wait(60)
            appliance.stop()
            server.shutdown()

    print()
    print(f"machine idle when the bench started: {idle:.0%}; {len(os.sched_getaffinity(0))} cores shared by all")
    report({case: runs for case, runs in results.items() if runs}, missed)


if __name__ == "__main__":
    main()
