"""Word count end to end on four Chromium workers, against Spark local[2] and one Python process.

A generated corpus (words of a fixed vocabulary drawn with a Zipf-like distribution, in 16
files) is served by a local HTTP server with CORS, on an origin the appliance allows
(PEERMR_FETCH_ORIGINS). Four worker tabs (one Chromium, a context each) run
docs/examples/wordcount.js with its URLs pointed at the corpus, --runs times (the median run
counts). Measured: from saving the job (POST /jobs) to the output downloaded and parsed
(GET /runs/{id}/output), and the run's phases from its task history. References in the same run,
on the same files from disk: PySpark with master local[2] (textFile -> flatMap -> reduceByKey ->
collect), its session started once and its job run --runs times, and collections.Counter in one
Python process. All answers must be equal. Targets: ours / Spark's job <= 0.6, ours / Spark with
its session start <= 0.4; moonshot: within 3x of one Python process.

Also measured: the example with `reduce.combine = true`; for comparison, the job with its map
counting its words in a Map before emitting them (what Spark's reduceByKey does before its
shuffle); the example on a skewed corpus (30 % of its words one word); bytes the map stage
shuffles per record; and the largest resident set of a worker tab's renderer process during each
run. The appliance runs with replication factor 1, so what a run keeps is not copied between the
tabs while the next runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from operator import add
from pathlib import Path

import httpx
from playwright.sync_api import expect, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.browsers import chromium_pids, launch  # noqa: E402
from tests.support import ADMIN_EMAIL, Appliance, free_port  # noqa: E402

FILES = 16
WORKERS = 4
VOCABULARY = 20_000
WORDS_PER_LINE = 12
HOT_WORD = "hotword"
HOT_SHARE = 0.3
RENDERER = "--type=renderer"


TICK = os.sysconf("SC_CLK_TCK")


def _cpu_line() -> list[int]:
    # user nice system idle iowait irq softirq steal (guest time is already in user)
    return [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]


def idle_share(seconds: float = 1.0) -> float:
    """The share of the machine's CPU time that was idle over the next `seconds` (/proc/stat)."""
    before = _cpu_line()
    time.sleep(seconds)
    spent = [b - a for a, b in zip(before, _cpu_line(), strict=True)]
    return (spent[3] + spent[4]) / max(1, sum(spent))


def processes() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds it used, with the children it reaped)."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            found[int(entry)] = (int(fields[1]), sum(int(n) for n in fields[11:15]) / TICK)
    return found


def descendants(table: dict[int, tuple[int, float]], root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found, stack = set(), [root]
    while stack:
        found.add(pid := stack.pop())
        stack.extend(children.get(pid, []))
    return found


class Foreign:
    """CPU that processes outside this bench (not it, nor the appliance, browsers, Spark... it started)
    used while a measurement ran, in cores (0: the machine was ours). A process counts with the
    children it reaped meanwhile, at most the whole window each; processes that ended without a
    live parent reaping them are missed, so it is a lower bound."""

    def __enter__(self) -> Foreign:
        self.started, self.before = time.perf_counter(), processes()
        return self

    def __exit__(self, *exc) -> None:
        after = processes()
        seconds = time.perf_counter() - self.started
        ours = descendants(self.before, os.getpid()) | descendants(after, os.getpid())
        used = 0.0
        for pid, (_, cpu) in after.items():
            if pid not in ours:
                # A reaped child may bring minutes of CPU at once: at most the window counts.
                used += min(cpu - self.before.get(pid, (0, 0.0))[1], seconds)
        self.cores = max(0.0, used) / seconds


def vocabulary(rng: random.Random) -> list[str]:
    words: dict[str, None] = {}
    while len(words) < VOCABULARY:
        words["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 11)))] = None
    return list(words)


def corpus(total_bytes: int, seed: int = 20240601, hot: float = 0.0) -> list[bytes]:
    """FILES texts of about total_bytes together; word of rank k drawn with weight 1/k, except that
    a share `hot` of all words is the one word HOT_WORD (a skewed key)."""
    rng = random.Random(seed)
    words = vocabulary(rng)
    cumulative, running = [], 0.0
    for k in range(1, len(words) + 1):
        running += 1 / k
        cumulative.append(running)
    mean_length = sum(len(w) / k for k, w in enumerate(words, 1)) / running + 1
    per_file = int(total_bytes / FILES / mean_length)
    texts = []
    for _ in range(FILES):
        drawn = rng.choices(words, cum_weights=cumulative, k=per_file)
        if hot:
            drawn = [HOT_WORD if rng.random() < hot else w for w in drawn]
        lines = (" ".join(drawn[i : i + WORDS_PER_LINE]) for i in range(0, len(drawn), WORDS_PER_LINE))
        texts.append(("\n".join(lines) + "\n").encode())
    return texts


class CorpusServer(ThreadingHTTPServer):
    """The corpus over HTTP with CORS, as a data server an admin allowed would serve it."""

    daemon_threads = True

    def __init__(self, files: dict[str, bytes]):
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(handler):  # noqa: N805
                body = files.get(handler.path)
                handler.send_response(200 if body is not None else 404)
                handler.send_header("Access-Control-Allow-Origin", "*")
                handler.send_header("Content-Type", "text/plain; charset=utf-8")
                handler.send_header("Content-Length", str(len(body or b"")))
                handler.end_headers()
                handler.wfile.write(body or b"")

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", free_port()), Handler)
        self.origin = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()


# The worker pages' WebSocket messages that mark the phases of a task, timestamped in the page
# (this only watches the socket: what the page sends and receives is unchanged).
WATCH_SOCKET = """(() => {
  const frames = window.__benchFrames = [];
  const watched = new Set(['task-assign', 'task-done', 'task-failed', 'blob-receive', 'blob-send', 'blob-stored',
    'blob-failed']);
  const note = (direction, data) => {
    if (typeof data !== 'string' || !/"type":"(task-assign|task-done|task-failed|blob-)/.test(data)) return;
    const m = JSON.parse(data);
    if (!watched.has(m.type)) return;
    frames.push([Date.now(), direction, m.type, m.kind || '', m.taskId || m.transferId || '', m.size || 0]);
  };
  const Native = window.WebSocket;
  const send = Native.prototype.send;
  Native.prototype.send = function (data) { note('out', data); return send.call(this, data); };
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener('message', event => note('in', event.data));
    }
  };
})();"""


def job_script(urls: list[str]) -> str:
    script = (ROOT / "docs" / "examples" / "wordcount.js").read_text()
    listed = "\n".join(f"    '{url}'," for url in urls)
    script, replaced = re.subn(r"return \[\n(?:\s+'[^']+',\n)+\s+\];", f"return [\n{listed}\n  ];", script)
    assert replaced == 1, "the example's URL list was not found"
    return script.replace("execution.workerCount = 4;", f"execution.workerCount = {WORKERS};")


def when(value) -> float:
    """An ISO timestamp (API or SQLite) as seconds since the epoch."""
    stamp = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.UTC)).timestamp()


def combining(script: str) -> str:
    """The same job with the map counting its words before it emits (what Spark's reduceByKey does)."""
    for old, new in (
        ("for await (const kv of x) {", "const counts = new Map();\n  for await (const kv of x) {"),
        ("if (word) context.emit(word, 1);", "if (word) counts.set(word, (counts.get(word) || 0) + 1);"),
        (
            "  await context.onComplete();\n}));\n\nexecution.addStage(new ReduceStage",
            "  for (const [word, n] of counts) context.emit(word, n);\n"
            "  await context.onComplete();\n}));\n\nexecution.addStage(new ReduceStage",
        ),
    ):
        assert script.count(old) == 1, f"not in the example: {old}"
        script = script.replace(old, new)
    return script


def with_combiner(script: str) -> str:
    """The example with `reduce.combine = true`: the reduce also runs on each map task's output."""
    old = "execution.addStage(new ReduceStage(async function reduce(keyToValues) {"
    assert script.count(old) == 1, "the example's reduce stage was not found"
    script = script.replace(old, "const reduce = new ReduceStage(async function reduce(keyToValues) {")
    old = "}));\n\nexecution.start(jobRunner);"
    assert script.count(old) == 1, "the example's end was not found"
    return script.replace(
        old, "});\nreduce.combine = true;\nexecution.addStage(reduce);\n\nexecution.start(jobRunner);"
    )


def _cpu_of(path: str) -> tuple[str, float]:
    """(command name, CPU seconds) of a /proc/<pid> or /proc/<pid>/task/<tid> entry."""
    head, tail = Path(f"{path}/stat").read_text().rsplit(")", 1)
    fields = tail.split()
    return head.split("(", 1)[1], (int(fields[11]) + int(fields[12])) / TICK


def _kind(pid: int, appliance_pid: int) -> str:
    if pid == os.getpid():
        return "bench (corpus server, client)"
    if pid == appliance_pid:
        return "appliance"
    command = Path(f"/proc/{pid}/cmdline").read_bytes()
    if RENDERER.encode() in command:
        return "tabs"
    return "Chromium's other processes" if b"chrom" in command else "other"


class CpuBySide:
    """CPU seconds the run took from each side (tabs, Chromium's other processes, the appliance, this
    bench), and within the tabs from each kind of thread; threads that ended meanwhile (a run's Web
    Workers) are what the tabs used beyond their live threads."""

    def __init__(self, appliance_pid: int):
        self.appliance_pid = appliance_pid

    def sample(self) -> dict:
        processes_, threads = {}, {}
        for pid in descendants(processes(), os.getpid()):
            try:
                kind = _kind(pid, self.appliance_pid)
                processes_[pid] = (kind, _cpu_of(f"/proc/{pid}")[1])
                if kind == "tabs":
                    for tid in os.listdir(f"/proc/{pid}/task"):
                        threads[(pid, int(tid))] = _cpu_of(f"/proc/{pid}/task/{tid}")
            except OSError:
                continue
        return {"processes": processes_, "threads": threads}

    def __enter__(self) -> CpuBySide:
        self.before = self.sample()
        return self

    def __exit__(self, *exc) -> None:
        after = self.sample()
        self.sides: Counter = Counter()
        for pid, (kind, cpu) in after["processes"].items():
            self.sides[kind] += cpu - self.before["processes"].get(pid, (kind, 0.0))[1]
        self.threads: Counter = Counter()
        for key, (name, cpu) in after["threads"].items():
            self.threads[name] += cpu - self.before["threads"].get(key, (name, 0.0))[1]
        self.threads["threads that ended (task workers)"] = self.sides["tabs"] - sum(self.threads.values())


def renderers() -> set[int]:
    """The Chromium renderer processes (a worker tab, its Web Workers with it) this bench started."""
    return set(chromium_pids("renderer", among=descendants(processes(), os.getpid())))


class PeakMemory:
    """The largest resident set of a Chromium renderer process started by this bench (of `only`,
    when given), sampled every 50 ms while the block runs."""

    def __init__(self, only: set[int] | None = None):
        self.only = only

    def __enter__(self) -> PeakMemory:
        self.peak = 0
        self.running = True
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self) -> None:
        while self.running:
            for pid in renderers() if self.only is None else self.only:
                try:
                    rss = next(
                        line
                        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                        if line.startswith("VmRSS")
                    )
                except (OSError, StopIteration):
                    continue
                self.peak = max(self.peak, int(rss.split()[1]) * 1024)
            time.sleep(0.05)

    def __exit__(self, *exc) -> None:
        self.running = False
        self.thread.join()


def timed_run(api: httpx.Client, name: str, script: str) -> dict:
    """Save the job, run it, download and parse the output: the seconds that takes, and the run."""
    started = time.perf_counter()
    epoch_started = time.time()
    job = api.post("/jobs", json={"name": name, "script": script})
    job.raise_for_status()
    run = api.post(f"/jobs/{job.json()['id']}/runs", json={})
    run.raise_for_status()
    run_id = run.json()["id"]
    # Answered at the run's end (a long poll), as Spark's collect() returns when its job ends. An
    # appliance from before `wait` (--against an older REV) answers at once: it is asked every 30 ms
    # (under its rate limit of 3,000 API requests a minute).
    while True:
        asked = time.perf_counter()
        run = api.get(f"/runs/{run_id}", params={"wait": 60}).json()
        if run["state"] not in ("queued", "running"):
            break
        time.sleep(max(0.0, 0.03 - (time.perf_counter() - asked)))
    if run["state"] != "succeeded":
        raise RuntimeError(f"run {run_id} {run['state']}: {run['reason']}")
    output = api.get(f"/runs/{run_id}/output")
    output.raise_for_status()
    counts = dict(json.loads(line) for line in output.text.splitlines())
    seconds = time.perf_counter() - started
    # The run's own account (warnings, retries, speculation), for a run far slower than the others.
    logs = [json.loads(line) for line in api.get(f"/runs/{run_id}/logs").text.splitlines()]
    return {"seconds": seconds, "counts": counts, "run": run, "epoch_started": epoch_started, "logs": logs}


def appliance_env(server: CorpusServer) -> dict[str, str]:
    # Replication factor 1: the objects a run keeps are not copied between the tabs during the next.
    return {"PEERMR_FETCH_ORIGINS": server.origin, "PEERMR_LOG_LEVEL": "warning", "PEERMR_REPLICATION_FACTOR": "1"}


def admin_token(appliance: Appliance) -> str:
    return appliance.cli("token", "create", ADMIN_EMAIL).stdout.strip().split()[-1]


def api_client(appliance: Appliance, token: str) -> httpx.Client:
    return httpx.Client(base_url=appliance.url + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=600)


def task_history(appliance: Appliance, run_id: int) -> list[tuple]:
    return appliance.query(
        "SELECT stage, rank, state, started_at, finished_at, cpu_ms, emits, bytes_out "
        f"FROM jobs_task WHERE run = {run_id} ORDER BY stage, rank"
    )


def run_ours(tmp: Path, texts: list[bytes], skewed: list[bytes], runs: int) -> dict[str, list[dict]]:
    """The example as it is (`runs` times), with a combiner, with map-side counting, and on the
    skewed corpus; each run with its task history and its tabs' peak memory."""
    files = {f"/corpus/part-{i:02d}.txt": t for i, t in enumerate(texts)}
    files |= {f"/skewed/part-{i:02d}.txt": t for i, t in enumerate(skewed)}
    server = CorpusServer(files)
    urls = [f"{server.origin}/corpus/part-{i:02d}.txt" for i in range(FILES)]
    skewed_urls = [f"{server.origin}/skewed/part-{i:02d}.txt" for i in range(FILES)]
    appliance = Appliance(tmp / "data", env=appliance_env(server)).start()
    plan = [("example", job_script(urls))] * runs + [
        ("combiner", with_combiner(job_script(urls))),
        ("counting", combining(job_script(urls))),
        ("skewed", job_script(skewed_urls)),
    ]
    results: dict[str, list[dict]] = {}
    try:
        token = admin_token(appliance)
        api = api_client(appliance, token)
        with sync_playwright() as playwright:
            browser = launch(playwright.chromium)
            pages = open_tabs(browser, appliance, token)
            time.sleep(2)  # the connectivity probes of the new tabs are over
            for name, script in plan:
                with Foreign() as foreign, PeakMemory() as memory, CpuBySide(appliance.proc.pid) as cpu:
                    result = timed_run(api, f"wordcount-{name}", script)
                result["foreign"], result["peak_memory"] = foreign.cores, memory.peak
                result["cpu"] = cpu
                results.setdefault(name, []).append(result)
            frames = [page.evaluate("window.__benchFrames") for page in pages]
            browser.close()
        for result in (r for rs in results.values() for r in rs):
            result["frames"] = frames
            result["tasks"] = task_history(appliance, result["run"]["id"])
    finally:
        appliance.stop()
        server.shutdown()
    return results


def open_tabs(browser, appliance: Appliance, token: str) -> list:
    """WORKERS worker tabs (a context each) connected to the appliance, their sockets watched."""
    pages = []
    for _ in range(WORKERS):
        page = browser.new_context().new_page()
        page.add_init_script(WATCH_SOCKET)
        page.goto(f"{appliance.url}/worker/start#token={token}")
        expect(page.locator("#connection")).to_have_text("connected", timeout=60_000)
        pages.append(page)
    return pages


def run_against(tmp: Path, texts: list[bytes], runs: int, base: str) -> None:
    """--against REV: the example on REV's code and on this checkout's, one run each in turn (the
    machine's speed drifts over minutes, so only runs side by side compare), each appliance with its
    own four tabs in one Chromium."""
    code = tmp / "base"
    code.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", base, "appliance", "templates", "static"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(code)], input=archive, check=True)
    server = CorpusServer({f"/corpus/part-{i:02d}.txt": t for i, t in enumerate(texts)})
    urls = [f"{server.origin}/corpus/part-{i:02d}.txt" for i in range(FILES)]
    env = appliance_env(server)
    # PYTHONSAFEPATH: `python -m` would otherwise put the working directory, this checkout, first.
    sides = {
        base: Appliance(tmp / "base-data", env=env | {"PYTHONPATH": str(code), "PYTHONSAFEPATH": "1"}),
        "this checkout": Appliance(tmp / "data", env=env),
    }
    results: dict[str, list[dict]] = {name: [] for name in sides}
    try:
        for appliance in sides.values():
            appliance.start()
        with sync_playwright() as playwright:
            browser = launch(playwright.chromium)
            apis, tabs = {}, {}
            for name, appliance in sides.items():
                token = admin_token(appliance)
                apis[name] = api_client(appliance, token)
                before = renderers()
                open_tabs(browser, appliance, token)
                tabs[name] = renderers() - before
            time.sleep(2)
            for _ in range(runs):
                for name in sides:
                    with PeakMemory(tabs[name]) as memory:
                        result = timed_run(apis[name], "wordcount", job_script(urls))
                    result["tasks"] = task_history(sides[name], result["run"]["id"])
                    result["peak_memory"] = memory.peak
                    results[name].append(result)
            browser.close()
    finally:
        for appliance in sides.values():
            appliance.stop()
        server.shutdown()
    expected = Counter(w for t in texts for w in t.decode().split())
    print(f"wordcount.js, {runs} runs each, in turn: median seconds (runs), and each phase's median")
    medians = {}
    for name, done in results.items():
        assert all(r["counts"] == expected for r in done), f"{name}: a wrong answer"
        medians[name] = statistics.median(r["seconds"] for r in done)
        each = ", ".join(f"{r['seconds']:.2f}" for r in done)
        peak = statistics.median(r["peak_memory"] for r in done) / 2**20
        print(f"  {name:16} {medians[name]:6.2f} s ({each}); a tab's peak memory, median {peak:.0f} MiB")
        rows = [phases(r) for r in done]
        for i, (label, _) in enumerate(rows[0]):
            print(f"      {label:56} {statistics.median(row[i][1] for row in rows):6.2f}")
    pairs = [a["seconds"] / b["seconds"] for a, b in zip(results["this checkout"], results[base], strict=True)]
    faster = sum(ratio < 1 for ratio in pairs)
    print(
        f"this checkout / {base}: {medians['this checkout'] / medians[base]:.2f} on the medians; "
        f"{statistics.median(pairs):.2f} the median of the runs side by side ({faster} of {runs} faster)"
    )
    for done in results.values():
        outliers(done)


def run_spark(directory: Path, runs: int) -> dict:
    """The session started once, then the job `runs` times: the session's seconds and each job's."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    started = time.perf_counter()
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("wordcount-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    session = time.perf_counter() - started
    jobs = []
    for _ in range(runs):
        job_started = time.perf_counter()
        pairs = (
            spark.sparkContext.textFile(str(directory))
            .flatMap(lambda line: line.split())
            .map(lambda word: (word, 1))
            .reduceByKey(add)
            .collect()
        )
        jobs.append(time.perf_counter() - job_started)
    spark.stop()
    return {"session": session, "jobs": jobs, "job": statistics.median(jobs), "counts": dict(pairs)}


def run_python(directory: Path) -> dict:
    started = time.perf_counter()
    counts: Counter[str] = Counter()
    for path in sorted(directory.iterdir()):
        counts.update(path.read_text().split())
    return {"seconds": time.perf_counter() - started, "counts": dict(counts)}


def phases(result: dict) -> list[tuple[str, float]]:
    """Where our run's time went, from the run's timestamps and its task history."""
    run = result["run"]
    tasks = result["tasks"]
    by_stage: dict[int, list] = {}
    for stage, _rank, state, started, finished, *_ in tasks:
        if state == "done":
            by_stage.setdefault(stage, []).append((when(started), when(finished)))
    rows = [("submit -> run queued (save job, POST run)", when(run["queued_at"]) - result["epoch_started"])]
    rows.append(("queued -> started", when(run["started_at"]) - when(run["queued_at"])))
    cursor = when(run["started_at"])
    names = {-1: "input function", 0: "map", 1: "reduce"}
    for stage in sorted(by_stage):
        first = min(s for s, _ in by_stage[stage])
        last = max(f for _, f in by_stage[stage])
        rows.append((f"  (gap before the {names.get(stage, stage)})", first - cursor))
        rows.append((f"{names.get(stage, stage)}: first task started -> last done", last - first))
        cursor = last
    rows.append(("last task done -> run finished (keep output)", when(run["finished_at"]) - cursor))
    rows.append(
        (
            "run finished -> output parsed (poll, GET output)",
            result["epoch_started"] + result["seconds"] - when(run["finished_at"]),
        )
    )
    return rows


def tab_phases(frames: list[list], run_id: int) -> dict:
    """One worker tab's map, shuffle (blobs copied in before its reduce) and reduce in a run, from its socket."""
    mine = [f for f in frames if not f[2].startswith("task-") or f[4].startswith(f"{run_id}.")]
    frames = [f for f in mine if not f[2].startswith("blob-")]
    assigned = {f[4]: (f[0], f[3]) for f in frames if f[2] == "task-assign"}
    done = {f[4]: f[0] for f in frames if f[1] == "out" and f[2] == "task-done"}
    out: dict = {"rank": None}
    for task_id, (at, kind) in assigned.items():
        if kind in ("map", "reduce") and task_id in done:
            out[kind] = (at / 1000, done[task_id] / 1000)
            out["rank"] = int(task_id.split(".")[3])
    # The reduce's inputs (copies before the map are the input function's chunk).
    after = out["map"][0] * 1000 if "map" in out else 0
    before = out["reduce"][0] * 1000 if "reduce" in out else 0
    receives = {f[4]: (f[0], f[5]) for f in mine if f[2] == "blob-receive" and after < f[0] < before}
    stored = {f[4]: f[0] for f in mine if f[1] == "out" and f[2] == "blob-stored" and f[4] in receives}
    if receives:
        out["shuffle"] = (min(t for t, _ in receives.values()) / 1000, max(stored.values(), default=0) / 1000)
        out["blobs_in"] = len(stored)
        out["bytes_in"] = sum(receives[k][1] for k in stored)
        out["copy_seconds"] = [(stored[k] - receives[k][0]) / 1000 for k in stored]
    return out


def describe(result: dict) -> None:
    """Where a run's time went: its phases, its tasks, and each tab's map, shuffle and reduce."""
    for name, seconds in phases(result):
        print(f"  {name:56} {seconds:>8.2f}")
    for stage, label in ((0, "map"), (1, "reduce")):
        rows = [t for t in result["tasks"] if t[0] == stage and t[2] == "done"]
        spans = ", ".join(f"{when(f) - when(s):.2f}" for _, _, _, s, f, *_ in rows)
        sandbox = ", ".join(f"{c / 1000:.2f}" for *_, c, _, _ in rows)
        out = sum(r[7] for r in rows) / 1e6
        print(f"  {label} tasks: wall per rank {spans} s; inside the sandbox {sandbox} s; output {out:.1f} MB")
    if "cpu" in result:
        sides, threads = result["cpu"].sides, result["cpu"].threads
        print(f"  CPU seconds: {', '.join(f'{kind} {sec:.2f}' for kind, sec in sides.most_common())}")
        print(f"  of the tabs: {', '.join(f'{name} {sec:.2f}' for name, sec in threads.most_common(6))}")
    if "frames" not in result:
        return
    print("  per worker tab (its socket's messages, page clock, from the first map task-assign):")
    tabs = [tab_phases(f, result["run"]["id"]) for f in result["frames"]]
    tabs.sort(key=lambda t: t["rank"] if t["rank"] is not None else -1)
    origin = min(t["map"][0] for t in tabs if "map" in t)
    for t in tabs:
        parts = [f"rank {t['rank']}"]
        if "map" in t:
            parts.append(f"map {t['map'][0] - origin:.2f}->{t['map'][1] - origin:.2f} s")
        if "shuffle" in t:
            copies = t["copy_seconds"]
            first, last = t["shuffle"]
            rate = t["bytes_in"] / 1e6 / max(1e-9, last - first)
            parts.append(
                f"blobs in {first - origin:.2f}->{last - origin:.2f} s ({t['blobs_in']} blobs, "
                f"{t['bytes_in'] / 1e6:.1f} MB, {rate:.1f} MB/s; each {min(copies):.2f}-{max(copies):.2f} s)"
            )
        if "reduce" in t:
            parts.append(f"reduce {t['reduce'][0] - origin:.2f}->{t['reduce'][1] - origin:.2f} s")
        print("    " + "; ".join(parts))


def shuffled(result: dict) -> tuple[float, float]:
    """Bytes the map stage sent to the reduces, per record it emitted, and in MB."""
    maps = [t for t in result["tasks"] if t[0] == 0 and t[2] == "done"]
    out, emits = sum(t[7] for t in maps), sum(t[6] for t in maps)
    return out / max(1, emits), out / 1e6


def outliers(examples: list[dict]) -> None:
    """Where a run a third slower than the median lost its time, and what its log says."""
    median = statistics.median(r["seconds"] for r in examples)
    for result in examples:
        if result["seconds"] <= 1.33 * median:
            continue
        print()
        print(f"an outlier: run {result['run']['id']} took {result['seconds']:.2f} s (the median {median:.2f} s):")
        describe(result)
        for line in result["logs"]:
            if line.get("level") != "info" or line.get("source") == "coordinator":
                source, level, text = (line.get(k, "") for k in ("source", "level", "text"))
                print(f"    [{line.get('at', '')}] {source} {level}: {text}")


def report_ours(results: dict[str, list[dict]], single: dict) -> None:
    """--ours-only: our runs, their phases and outliers, against one Python process."""
    examples = results["example"]
    ours = sorted(examples, key=lambda r: r["seconds"])[len(examples) // 2]
    runs = ", ".join(f"{r['seconds']:.2f}" for r in examples)
    print(f"PeerMR, wordcount.js, median of {len(examples)} ({runs}): {ours['seconds']:.2f} s")
    for name in ("combiner", "counting", "skewed"):
        print(f"  {name}: {results[name][0]['seconds']:.2f} s")
    print(f"one Python process: {single['seconds']:.2f} s; answers equal: {ours['counts'] == single['counts']}")
    print("the median run, phase by phase:")
    describe(ours)
    outliers(examples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="an 8 MB corpus: a smoke run")
    parser.add_argument("--runs", type=int, default=3, help="runs of the example and of Spark's job (median)")
    parser.add_argument("--ours-only", action="store_true", help="no Spark and no Python reference (no ratios)")
    parser.add_argument("--against", metavar="REV", help="only the example, on REV's code and this checkout's in turn")
    args = parser.parse_args()
    size = (8 if args.quick else 56) * 1000 * 1000
    idle = idle_share()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t = time.perf_counter()
        texts = corpus(size)
        skewed = corpus(size, hot=HOT_SHARE)
        directory = tmp / "corpus"
        directory.mkdir()
        for i, text in enumerate(texts):
            (directory / f"part-{i:02d}.txt").write_bytes(text)
        total = sum(len(t) for t in texts)
        words = sum(t.count(b" ") + t.count(b"\n") for t in texts)
        print(
            f"corpus: {total / 1e6:.1f} MB, {words / 1e6:.1f} M words of a {VOCABULARY}-word vocabulary "
            f"(Zipf, s=1), {FILES} files; generated in {time.perf_counter() - t:.1f} s; and a skewed one, "
            f"{HOT_SHARE:.0%} of its words one word",
            flush=True,
        )

        if args.against:
            run_against(tmp, texts, args.runs, args.against)
            return
        results = run_ours(tmp, texts, skewed, args.runs)
        with Foreign() as foreign:
            single = run_python(directory)
        single["foreign"] = foreign.cores
        if args.ours_only:
            report_ours(results, single)
            return
        with Foreign() as foreign:
            spark = run_spark(directory, args.runs)
        spark["foreign"] = foreign.cores

    examples = results["example"]
    ours = sorted(examples, key=lambda r: r["seconds"])[len(examples) // 2]  # the median run
    combiner, counting, skew = (results[name][0] for name in ("combiner", "counting", "skewed"))
    skew_expected = Counter(w for t in skewed for w in t.decode().split())
    equal = (
        all(r["counts"] == single["counts"] for r in [*examples, combiner, counting])
        and spark["counts"] == single["counts"]
    )
    skew_equal = skew["counts"] == dict(skew_expected)
    spark_total = spark["session"] + spark["job"]
    cores = len(os.sched_getaffinity(0))
    print(f"machine idle when the bench started: {idle:.0%} (other work on the machine skews the figures)")
    print(
        f"machine: {cores} cores shared by every side (appliance, 4 Chromium tabs, HTTP server; Spark's JVM "
        "and Python workers)"
    )
    print()
    runs = ", ".join(f"{r['seconds']:.2f}" for r in examples)
    jobs = ", ".join(f"{j:.2f}" for j in spark["jobs"])
    print(f"{'system':66} {'seconds':>8}  {'other load':>10}")
    rows = [
        (f"PeerMR, 4 Chromium workers, wordcount.js, median of {len(examples)} ({runs})", ours["seconds"], ours),
        ("Spark local[2], session start + job", spark_total, spark),
        (f"Spark local[2], job only, median of {len(spark['jobs'])} ({jobs})", spark["job"], None),
        ("  (SparkSession start)", spark["session"], None),
        ("one Python process, collections.Counter", single["seconds"], single),
        ("PeerMR, wordcount.js with reduce.combine = true", combiner["seconds"], combiner),
        ("(for comparison: wordcount.js counting in the map before emitting)", counting["seconds"], counting),
        (f"PeerMR, wordcount.js, skewed corpus ({HOT_SHARE:.0%} one word)", skew["seconds"], skew),
    ]
    for label, seconds, measured in rows:
        load = f"{measured['foreign']:.2f} cores" if measured else ""
        print(f"{label:66} {seconds:>8.2f}  {load:>10}")
    print("(other load: CPU that processes outside this bench used meanwhile, in cores of the 2; a lower bound)")
    print()
    print("shuffled by the map stage, and the largest resident set of a worker tab (its renderer) during the run:")
    for label, result in (
        ("wordcount.js", ours),
        ("with the combiner", combiner),
        ("counting in the map", counting),
        ("skewed corpus", skew),
    ):
        per_record, megabytes = shuffled(result)
        peak = result["peak_memory"] / 2**20
        print(f"  {label:24} {megabytes:8.1f} MB, {per_record:6.2f} bytes a record; tab peak {peak:6.0f} MiB")
    print()
    print("wordcount.js (the median run), phase by phase (server timestamps):")
    describe(ours)
    print()
    print("the same with the combiner:")
    describe(combiner)
    print()
    print(f"the skewed corpus ({HOT_SHARE:.0%} of the words are {HOT_WORD!r}):")
    describe(skew)
    print()
    compared = "ours each run, with the combiner, counting in the map; Spark; Counter"
    print(f"answers equal ({compared}): {equal} ({len(single['counts'])} words)")
    print(f"skewed corpus: answer equals Counter: {skew_equal}")
    outliers(examples)
    print(f"ratio ours / Spark with session start: {ours['seconds'] / spark_total:.2f} (target <= 0.4)")
    print(f"ratio ours / Spark job only:           {ours['seconds'] / spark['job']:.2f} (target <= 0.6)")
    print(f"ratio ours / one Python process:       {ours['seconds'] / single['seconds']:.2f} (moonshot <= 3)")
    if not (equal and skew_equal):
        raise SystemExit("the answers differ")


if __name__ == "__main__":
    main()
