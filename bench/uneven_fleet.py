"""Uneven fleet: the word count on four browsers of uneven CPU against four equal ones of the same total.

Each browser is its own `peermr worker --count 1` (the appliance's runner, Debian's /usr/bin/chromium)
started inside its own CPU cgroup: the cgroup v1 `cpu` controller (cpu.cfs_period_us 100,000,
cpu.cfs_quota_us), or a cgroup v2 child group's cpu.max where only v2 is mounted. The runner writes
its own pid to the group's cgroup.procs before it execs, so Chromium and all its children are in it.
The runners start unlimited (a browser given an eighth of a core may not join within the runner's
30 s); each case then sets the quotas. The appliance and the corpus server run outside the groups.

The job is docs/examples/wordcount.js (4 ranks on the 4 browsers, no spare) on a generated corpus of
about 24 MB (bench/wordcount.py's Zipf corpus), served by a local HTTP server with CORS, in two
layouts of the same text: 48 files of 0.5 MB (16 chunks of 3 files) and 8 files of 3 MB (with 2
files a rank, half of each rank's chunks are empty: chunks cannot balance finely). The cases:

  equal      4 x 0.34 core
  uneven     0.5 / 0.5 / 0.25 / 0.125 core (1.375 cores against 1.36)
  departure  equal shares, 48 files; about 1.5 s into the map stage one browser's runner gets SIGTERM
             (it ends its Chromium and exits: nothing starts it again) and the run goes on with three.
             The victim is a browser other than rank 0's (the one holding the input function's output).
             A run whose map stage had ended before the browser left is played again, the browser
             leaving sooner (0.6 x the wait each time, at most MAX_TRIES runs): a miss, counted.
             After the run the runner is started again, the fleet warmed up, and one clean run timed
             ("beside departures": the reference, as the machine's load moves over minutes).
             Played right after the equal case of 48 files, before any uneven one.

The cases run in that order, 48 files then 8: a browser the uneven case found under a third of the
fastest gets no input for minutes after (its estimate ages back; no task renews it), so the equal
case of 8 files, which follows the uneven one of 48, runs on three browsers' worth of input cuts at
first: its ratio is not a target.

A run: seconds from saving the job to the output downloaded and parsed; its output must equal
collections.Counter over the same text. Each case has one warm-up run per side first (the appliance's
speed estimates settle on the new quotas), then --rounds runs, the sides taking turns run by run.
With --before COMMIT, COMMIT's code runs beside this checkout's (a git worktree at BEFORE_DIR, on
PYTHONPATH, with the same virtualenv; removed at the end): its own appliance and four browsers in
cgroups of their own, given the same quotas. With --per-rank, this checkout also runs the job with
its map asking for one task per rank (`stage.chunks = 'rank'`; chunks, run as ranges split on
demand, are the default) on the same appliance and browsers. A side's runner gets --ignore-busy where it has it
(older runners always ignored the Compute Pressure API).

Targets (issue 28): uneven / equal <= 1.15 on 48 files; departure right, within 1.5 x equal.
Before each run, a browser whose worker page is gone while its Chromium runs on (a renderer crash: the
runner restarts only a Chromium that exits) has its runner restarted, and one run is played uncounted.
BENCH_SHOW_LOG=1 prints every run's warn lines and what it said of its browsers (source fleet); a run
that fails, is wrong or is cancelled after ROUND_TIMEOUT always prints its log (GET
/api/v1/runs/{id}/logs) and its task attempts.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.chaos import Corpus, connected  # noqa: E402
from bench.wordcount import (  # noqa: E402
    Foreign,
    admin_token,
    api_client,
    appliance_env,
    corpus,
    idle_share,
    job_script,
    when,
)
from tests.cpu_groups import CpuGroup  # noqa: E402
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance, Client  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
BROWSERS = 4
TOTAL_MB = 24
LAYOUTS = {"48 x 0.5 MB": 48, "8 x 3 MB": 8}  # files of the same text
SHARES = {"equal": [0.34] * BROWSERS, "uneven": [0.5, 0.5, 0.25, 0.125]}
DEPART_AFTER = 1.5  # seconds into the map stage
BEFORE_DIR = Path("/work/uneven-before")
ROUND_TIMEOUT = 300
MAX_TRIES = 4
SETTLE_TIMEOUT = 120
HEAL_AFTER = 20  # seconds a browser may stay away between runs before its runner is restarted
TASK_ROW = re.compile(r'^(\d+)"(?: data-chunk="(\d+)")?.*?title="([0-9a-f]{32})"', re.S)


@dataclass
class Side:
    """One appliance on one commit's code, and its browsers, each in a CPU group of its own."""

    name: str
    code: Path
    tmp: Path
    server: Corpus
    groups: list[CpuGroup] = field(default_factory=list)
    runners: list[subprocess.Popen | None] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)  # slot -> worker id
    shares: list[float] | None = None  # the quotas set last (None: none yet)

    def start(self) -> None:
        env = appliance_env(self.server) | {"PYTHONPATH": str(self.code)}
        self.appliance = Appliance(self.tmp / f"{self.name}-data", env=env)
        self.appliance.env.pop("PEERMR_JOB_RECONNECT_GRACE_SECONDS")  # the appliance's default, not the tests'
        self.appliance.start()
        self.token = admin_token(self.appliance)
        self.api = api_client(self.appliance, self.token)
        self.ui = Client(self.appliance.url)
        self.ui.login(ADMIN_EMAIL, ADMIN_PASSWORD)
        runner_code = (self.code / "appliance" / "fleet" / "runner.py").read_text()
        self.ignore_busy = ["--ignore-busy"] if "ignore_busy" in runner_code else []
        for slot in range(BROWSERS):
            self.groups.append(CpuGroup(f"peermr-uneven-{os.getpid()}-{self.name}-{slot}"))
            self.runners.append(None)
            self.start_runner(slot)
        self.settle()

    def start_runner(self, slot: int) -> None:
        """The slot's runner, unlimited until it joined (set_shares limits it)."""
        self.groups[slot].limit(None)
        argv = [sys.executable, "-m", "appliance", "worker", "--server", self.appliance.url, "--token", self.token]
        argv += ["--count", "1", "--chromium", CHROMIUM, *self.ignore_busy]
        argv += ["--data-dir", str(self.tmp / f"{self.name}-fleet-{slot}")]
        with open(self.tmp / f"{self.name}-runner-{slot}.log", "ab") as log:
            # cwd: `python -m` puts the working directory first on sys.path, before PYTHONPATH.
            self.runners[slot] = subprocess.Popen(
                self.groups[slot].command(argv),
                cwd=self.tmp,
                env=os.environ | {"PYTHONPATH": str(self.code)},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + SETTLE_TIMEOUT
        # the worker id the runner keeps in the browser's profile (written just after the profile's folder)
        path = self.tmp / f"{self.name}-fleet-{slot}" / "worker-profiles" / "worker-0" / "peermr-worker-id"
        while not re.fullmatch(r"[0-9a-f]{32}", path.read_text().strip() if path.exists() else ""):
            if time.monotonic() > deadline or self.runners[slot].poll() is not None:
                raise RuntimeError(f"{self.name}'s runner {slot} did not start: see its log in {self.tmp}")
            time.sleep(0.1)
        if len(self.workers) <= slot:
            self.workers.append(path.read_text().strip())

    def settle(self) -> None:
        """Until all the browsers are connected and idle."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while (states := connected(self.appliance)) != {"idle": BROWSERS}:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: the workers did not all connect: {states}")
            time.sleep(0.25)

    def set_shares(self, shares: list[float]) -> None:
        self.shares = shares
        for group, cores in zip(self.groups, shares, strict=True):
            group.limit(cores)

    def heal(self) -> bool:
        """Whether a browser had to be started again: one whose worker page is gone while its Chromium runs on
        (a renderer crash; the runner starts again only a Chromium that exits) gets its runner restarted."""
        deadline = time.monotonic() + HEAL_AFTER
        while connected(self.appliance) != {"idle": BROWSERS}:
            if time.monotonic() > deadline:
                break
            time.sleep(0.25)
        else:
            return False
        page = self.ui.get("/ui/workers/live", headers={"HX-Request": "true"}).text
        for slot in [slot for slot, worker in enumerate(self.workers) if worker not in page]:
            print(f"  {self.name}: slot {slot}'s worker is gone while its browser runs: its runner starts again")
            self.runners[slot].terminate()
            self.runners[slot].wait(60)
            self.start_runner(slot)
        self.settle()
        if self.shares is not None:
            self.set_shares(self.shares)
        return True

    def home_of_rank_0(self, run_id: int) -> str | None:
        """The worker running rank 0's map (its first chunk): the rank that holds the input function's output."""
        page = self.ui.get(f"/ui/runs/{run_id}/stages/A/0", headers={"HX-Request": "true"}).text
        for row in page.split('<tr data-rank="')[1:]:
            match = TASK_ROW.match(row.split("</tr>", 1)[0])
            if match and match.group(1) == "0" and match.group(2) in (None, "0"):
                return match.group(3)
        return None

    def stop(self) -> None:
        for runner in self.runners:
            if runner is not None and runner.poll() is None:
                runner.terminate()
        for runner in self.runners:
            if runner is not None:
                try:
                    runner.wait(30)
                except subprocess.TimeoutExpired:
                    runner.kill()
                    runner.wait()
        if hasattr(self, "appliance"):
            self.appliance.stop()
        for group in self.groups:
            group.remove()


@dataclass
class Departure:
    slot: int
    worker: str
    at: float  # seconds after the run was saved
    into_map: float  # seconds after the map stage was seen started


def depart(side: Side, run_id: int, epoch: float, delay: float) -> Departure | None:
    """SIGTERM to one runner ``delay`` s into the map (not rank 0's browser); None if the run ended first."""
    while True:
        run = side.api.get(f"/runs/{run_id}").json()
        if run["state"] not in ("queued", "running"):
            return None
        maps = [p for p in run["progress"] if p["group"] == "A" and p["stage"] == 0]
        if maps and (maps[0]["running"] or maps[0]["done"]):
            break
        time.sleep(0.05)
    map_seen = time.monotonic()
    time.sleep(delay)
    home = side.home_of_rank_0(run_id)
    slot = next(s for s in range(BROWSERS) if side.workers[s] != home)
    side.runners[slot].send_signal(signal.SIGTERM)  # the runner ends its browser and exits for good
    return Departure(slot, side.workers[slot], time.time() - epoch, time.monotonic() - map_seen)


def play(side: Side, script: str, expected: dict, leave: float | None = None) -> dict:
    """One run: seconds from saving the job to the parsed output, whether it is right, and its record."""
    departure, counts = None, None
    cpu_before = [group.used() for group in side.groups]
    with Foreign() as foreign:
        started, epoch = time.perf_counter(), time.time()
        job = side.api.post("/jobs", json={"name": "uneven-fleet", "script": script})
        job.raise_for_status()
        response = side.api.post(f"/jobs/{job.json()['id']}/runs", json={})
        response.raise_for_status()
        run_id = response.json()["id"]
        if leave is not None:
            departure = depart(side, run_id, epoch, leave)
        deadline = time.monotonic() + ROUND_TIMEOUT
        while (run := side.api.get(f"/runs/{run_id}", params={"wait": 30}).json())["state"] in ("queued", "running"):
            if time.monotonic() > deadline:
                side.api.post(f"/runs/{run_id}/cancel")
                run = {**run, "state": "timed out", "reason": f"not ended after {ROUND_TIMEOUT} s; cancelled"}
                break
        if run["state"] == "succeeded":
            output = side.api.get(f"/runs/{run_id}/output")
            output.raise_for_status()
            counts = dict(json.loads(line) for line in output.text.splitlines())
        seconds = time.perf_counter() - started
    cpu = [group.used() - used for group, used in zip(side.groups, cpu_before, strict=True)]
    tasks = side.appliance.query(
        "SELECT stage, rank, attempt, worker_id, state, started_at, finished_at, error FROM jobs_task "
        f"WHERE run = {run_id} ORDER BY started_at"
    )
    logs = [json.loads(line) for line in side.api.get(f"/runs/{run_id}/logs").text.splitlines()]
    return {
        "run_id": run_id,
        "seconds": seconds,
        "correct": counts == expected,
        "state": run["state"],
        "reason": run.get("reason"),
        "foreign": foreign.cores,
        "tasks": tasks,
        "logs": logs,
        "epoch": epoch,
        "departure": departure,
        "cpu": cpu,
    }


def map_end(result: dict) -> float:
    """Seconds from saving the job to the map stage's last done task."""
    ends = [when(row[6]) for row in result["tasks"] if row[0] == 0 and row[4] == "done" and row[6]]
    return max(ends, default=result["epoch"]) - result["epoch"]


def last_task_end(result: dict) -> float:
    """Seconds from saving the job to the run's last done task."""
    ends = [when(row[6]) for row in result["tasks"] if row[4] == "done" and row[6]]
    return max(ends, default=result["epoch"]) - result["epoch"]


def tasks_by_slot(side: Side, result: dict) -> str:
    """Map and reduce tasks done by each slot, attempts that did not count, and when the map stage and the
    run's last task ended."""
    rows = result["tasks"]
    counts = [Counter(row[3] for row in rows if row[0] == stage and row[4] == "done") for stage in (0, 1)]
    maps, reduces = ("/".join(str(done.get(worker, 0)) for worker in side.workers) for done in counts)
    others = Counter(row[4] for row in rows if row[4] != "done")
    lost = ", ".join(f"{n} {state}" for state, n in others.items()) or "none"
    return (
        f"maps by slot {maps}, reduces {reduces}, other attempts: {lost}; "
        f"map stage ended {map_end(result):.2f} s, last task {last_task_end(result):.2f} s"
    )


def show_log(side: Side, result: dict) -> None:
    """The run's log lines (all of them when it went wrong, else its warnings) and its task attempts."""
    wrong = not result["correct"]
    for line in result["logs"]:
        if wrong or line.get("level") in ("warn", "error") or line.get("source") == "fleet":
            at, source = line.get("at", "")[11:23], line.get("source", "")[:8]
            print(f"      {at} {source:8} {line.get('level')}: {line.get('text')}")
    if wrong:
        slots = {worker: slot for slot, worker in enumerate(side.workers)}
        for stage, rank, attempt, worker, state, started, finished, error in result["tasks"]:
            begin = when(started) - result["epoch"] if started else float("nan")
            end = f"{when(finished) - result['epoch']:6.2f}" if finished else "     -"
            who = f"slot {slots[worker]}" if worker in slots else (worker or "-")[:8]
            print(
                f"      stage {stage:2} rank {rank} try {attempt} {who:8} {state:10} {begin:6.2f} -> {end}", error or ""
            )


def describe(player: Player, case: str, result: dict) -> str:
    verdict = "right" if result["correct"] else f"WRONG ({result['state']}: {result['reason']})"
    parts = [
        f"{result['seconds']:6.2f} s",
        verdict,
        f"other load {result['foreign']:.2f} cores",
        tasks_by_slot(player.side, result),
        "CPU s by slot " + "/".join(f"{used:.2f}" for used in result["cpu"]),
    ]
    if (gone := result["departure"]) is not None:
        parts.append(f"slot {gone.slot}'s runner stopped {gone.into_map:.2f} s into the map ({gone.at:.2f} s)")
    return f"  {player.name:12} {case:24} run {result['run_id']:3}: " + "; ".join(parts)


@dataclass
class Player:
    """A job on a side: the example, or the example asking for one map task per rank."""

    name: str
    side: Side
    scripts: dict[str, str]  # layout -> script


class Bench:
    def __init__(self, players: list[Player], expected: dict, rounds: int, verbose: bool):
        self.players, self.expected, self.rounds, self.verbose = players, expected, rounds, verbose
        self.sides = list({id(p.side): p.side for p in players}.values())
        self.results: dict[tuple[str, str], list[dict]] = {}
        self.failures: list[tuple[Player, str, dict]] = []
        self.missed: Counter = Counter()

    def play(self, player: Player, layout: str, leave: float | None = None) -> dict:
        if player.side.heal():  # a browser started again: its first run is slow
            self.record(player, "after a restart", play(player.side, player.scripts[layout], self.expected), False)
        return play(player.side, player.scripts[layout], self.expected, leave)

    def record(self, player: Player, case: str, result: dict, counted: bool = True) -> None:
        label = case if counted else f"{case} (warm-up)"
        print(describe(player, label, result), flush=True)
        if counted:
            self.results.setdefault((player.name, case), []).append(result)
        if not result["correct"]:
            self.failures.append((player, case, result))
        if self.verbose or not result["correct"]:
            show_log(player.side, result)

    def case(self, layout: str, shares: str) -> None:
        case = f"{shares}, {layout}"
        for side in self.sides:
            side.set_shares(SHARES[shares])
        for player in self.players:
            self.record(player, case, self.play(player, layout), counted=False)
        for _ in range(self.rounds):
            for player in self.players:
                self.record(player, case, self.play(player, layout))

    def departures(self, layout: str) -> None:
        case = f"departure, {layout}"
        for side in self.sides:
            side.set_shares(SHARES["equal"])
        for _ in range(self.rounds):
            for player in self.players:
                self.departure(player, case, layout)
                # a clean run beside it, for the ratio (the machine's load moves over minutes)
                self.record(player, f"beside departures, {layout}", self.play(player, layout))

    def departure(self, player: Player, case: str, layout: str) -> None:
        """A run losing a browser DEPART_AFTER s into its map; played again sooner (up to MAX_TRIES) while the
        map stage had ended before the browser left (a side whose maps are short)."""
        side, delay = player.side, DEPART_AFTER
        for _ in range(MAX_TRIES):
            result = self.play(player, layout, leave=delay)
            if (gone := result["departure"]) is not None:
                side.runners[gone.slot].wait(60)
                side.start_runner(gone.slot)
                side.settle()
                side.set_shares(SHARES["equal"])
                self.record(player, f"equal, {layout}", self.play(player, layout), False)
            if gone is not None and map_end(result) > gone.at:
                self.record(player, case, result)
                return
            self.missed[player.name] += 1
            print(f"  {player.name:12} {case:24} run {result['run_id']:3}: missed (the maps had ended); again")
            delay *= 0.6
        print(f"  {player.name:12} {case}: no departure landed in the map in {MAX_TRIES} tries", flush=True)


def report(bench: Bench) -> None:
    def median(player: Player, case: str) -> float | None:
        runs = bench.results.get((player.name, case), [])
        return statistics.median(r["seconds"] for r in runs) if runs else None

    print()
    print("medians: seconds; the browsers' CPU seconds (their cgroups); when the map stage ended; the rest of the run")
    head = f"{'job on':12} {'case':32} {'seconds':>7} {'CPU s':>6} {'maps':>5} {'rest':>5}  runs (s)"
    print(f"{head:{len(head) + 24}}right  other load (max)")
    for (name, case), runs in bench.results.items():
        seconds = ", ".join(f"{r['seconds']:.2f}" for r in runs)
        right = sum(r["correct"] for r in runs)
        load = max(r["foreign"] for r in runs)
        middle, cpu, maps, rest = (
            statistics.median(f(r) for r in runs)
            for f in (
                lambda r: r["seconds"],
                lambda r: sum(r["cpu"]),
                map_end,
                lambda r: last_task_end(r) - map_end(r),
            )
        )
        figures = f"{middle:7.2f} {cpu:6.2f} {maps:5.2f} {rest:5.2f}"
        print(f"{name:12} {case:32} {figures}  {seconds:32} {right}/{len(runs)}   {load:.2f}")
    print()
    for player in bench.players:
        for layout in LAYOUTS:
            equal, uneven = median(player, f"equal, {layout}"), median(player, f"uneven, {layout}")
            if equal and uneven:
                target = " (target <= 1.15)" if layout == next(iter(LAYOUTS)) else ""
                print(f"{player.name:12} {layout}: uneven / equal = {uneven / equal:.2f}{target}")
        layout = next(iter(LAYOUTS))
        gone, equal = median(player, f"departure, {layout}"), median(player, f"equal, {layout}")
        beside = median(player, f"beside departures, {layout}")
        if gone and equal and beside:
            runs = bench.results[(player.name, f"departure, {layout}")]
            right = sum(r["correct"] for r in runs)
            ratios = f"departure / clean beside it = {gone / beside:.2f}, / equal = {gone / equal:.2f} (target <= 1.5)"
            print(f"{player.name:12} {layout}: {ratios}, right {right}/{len(runs)}; missed {bench.missed[player.name]}")


def with_chunks(script: str, chunks: str) -> str:
    """The example with its map asking for ``chunks`` (``stage.chunks``: 'auto', the default, or 'rank')."""
    old = "execution.addStage(new MapStage(async function map(x) {"
    assert script.count(old) == 1, "the example's map stage was not found"
    script = script.replace(old, "const map = new MapStage(async function map(x) {")
    old = "}));\n\nexecution.addStage(new ReduceStage"
    assert script.count(old) == 1, "the example's reduce stage was not found"
    return script.replace(
        old, f"}});\nmap.chunks = '{chunks}';\nexecution.addStage(map);\n\nexecution.addStage(new ReduceStage"
    )


def layouts(text: list[bytes]) -> dict[str, list[bytes]]:
    """The same text cut at line ends into each layout's number of files of about equal size."""
    lines = b"".join(text).splitlines(keepends=True)
    cut = {}
    for name, files in LAYOUTS.items():
        size, parts, current = sum(map(len, lines)) / files, [], []
        written = 0
        for line in lines:
            current.append(line)
            written += len(line)
            if written >= size * (len(parts) + 1) and len(parts) < files - 1:
                parts.append(b"".join(current))
                current = []
        parts.append(b"".join(current))
        cut[name] = parts
    return cut


def worktree(commit: str) -> Path:
    if BEFORE_DIR.exists():
        raise SystemExit(f"{BEFORE_DIR} exists: remove it (git worktree remove --force {BEFORE_DIR}) first")
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(BEFORE_DIR), commit], check=True)
    return BEFORE_DIR


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed runs of each case and side (median)")
    parser.add_argument("--before", metavar="COMMIT", help=f"also COMMIT's code, side by side (worktree {BEFORE_DIR})")
    parser.add_argument("--quick", action="store_true", help="a 6 MB corpus, one round: a smoke run")
    parser.add_argument("--per-rank", action="store_true", help="also the job with one map task per rank")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # the cleanup below still runs
    rounds, total_mb = (1, 6) if args.quick else (args.rounds, TOTAL_MB)
    print(f"load average {Path('/proc/loadavg').read_text().strip()}; idle {idle_share():.0%}", flush=True)
    print(f"CPU groups: {'cgroup v1 cpu controller' if CpuGroup.v1 else 'cgroup v2 cpu.max'}", flush=True)

    text = corpus(total_mb * 1000 * 1000)
    expected = dict(Counter(w for t in text for w in t.decode().split()))
    cut = layouts(text)
    files = {f"/{n}/part-{i:02d}.txt": t for n, parts in enumerate(cut.values()) for i, t in enumerate(parts)}
    server = Corpus(files)  # quiet about fetches a browser broke off
    scripts = {
        name: job_script([f"{server.origin}/{n}/part-{i:02d}.txt" for i in range(len(parts))])
        for n, (name, parts) in enumerate(cut.items())
    }
    print(f"corpus: {sum(map(len, text)) / 1e6:.1f} MB, {len(expected)} distinct words; layouts {', '.join(cut)}")
    before = worktree(args.before) if args.before else None
    sides: list[Side] = []
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # `python -m appliance` puts the working directory first on sys.path, before PYTHONPATH
        try:
            if before is not None:
                sides.append(Side(f"{args.before[:7]}", before, Path(tmp), server))
            sides.append(Side("this", ROOT, Path(tmp), server))
            for side in sides:
                side.start()
            print(f"sides: {', '.join(f'{s.name} ({s.code})' for s in sides)}; {BROWSERS} browsers each", flush=True)
            players = [Player(side.name, side, scripts) for side in sides]
            if args.per_rank:
                per_rank = {layout: with_chunks(script, "rank") for layout, script in scripts.items()}
                players.append(Player("this, 1/rank", sides[-1], per_rank))
            bench = Bench(players, expected, rounds, bool(os.environ.get("BENCH_SHOW_LOG")))
            # The departures right after the equal case of their layout: before any uneven case, whose
            # speed estimates would still leave the browser that was slowest out of the input.
            first = next(iter(LAYOUTS))
            for layout in LAYOUTS:
                for shares in SHARES:
                    bench.case(layout, shares)
                    if (layout, shares) == (first, "equal"):
                        bench.departures(first)
        finally:
            for side in sides:
                side.stop()
            server.shutdown()
            if before is not None:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)], check=False)
    print()
    print(
        f"load average {Path('/proc/loadavg').read_text().strip()}; {len(os.sched_getaffinity(0))} cores shared by all"
    )
    report(bench)
    if bench.failures:
        raise SystemExit(f"{len(bench.failures)} runs failed or were wrong (their logs are above)")


if __name__ == "__main__":
    main()
