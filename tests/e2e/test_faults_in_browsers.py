"""Faults in real Chromium workers, each handled by the path meant for it, and each run ending with
the right output:
- with a spare: a browser frozen whole (every process of it stopped) in a map or a reduce, a browser
  killed in a map or a reduce and started again under the same worker id, a tab closed in a map. The
  rank's task starts at once on the spare as a backup (a stand-in), which finishes and takes the
  rank; a reduce's stand-in copies its input from the browsers left (the partition the lost
  browser's own map wrote for it has a second copy on a keeper), so no map runs again;
- a browser frozen whole between its map (done) and its reduce (waiting for the other maps): as
  soon as it stops answering, its rank moves to the spare, whose reduce takes its input from the
  others;
- a browser frozen whole in a stage whose ranks run collectives: its rank goes to the spare once it
  is taken for gone, the others' collective fails naming it, and the stage starts again;
- with no spare: one tab closed in a map, or a tab closed and a browser killed. The run's own workers
  take the lost ranks (each runs two ranks' tasks one after the other).

One appliance and four worker tabs for the whole module: three in the shared Playwright Chromium,
one alone in a Chromium this module launches itself (so it owns its processes, to stop or kill
them). A run with a spare takes three of them: before it one tab is paused (so the run leaves it
out) and resumed once the run started, so that it is the spare a stand-in needs. A run with no
spare takes all four.

The job's tasks call no context.progress(): a task of a frozen browser must not be judged lagging
(and backed up as such) before its browser is taken for gone. A map waiting at its gate does (see
job_script): beside a map let through, which emitted, it would lag, and get a backup.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect

from tests.browsers import LoneChromium
from tests.e2e import test_stragglers_in_browsers as stragglers
from tests.e2e.test_stragglers_in_browsers import (
    log_lines,
    log_text,
    make_corpus,
    output,
    start,
    wait,
    worker_id,
)
from tests.support import Appliance, Client

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("no_run_left")]

# The stragglers module's fixtures, found by pytest under these names (texts, appliance and the lone
# tab are this module's own).
admin, data_server, expected, steady = stragglers.admin, stragglers.data_server, stragglers.expected, stragglers.steady

RANKS = 3
# Parts of the input: one per tab, for a run with no spare.
PARTS = 4
LINES_PER_PART = 300
# How long the stage a test faults takes (its task sleeps, then counts): the fault lands in the sleep.
SLEEP_MS = 8000
# How long a rank waits for its disconnected worker to come back: longer than a stand-in's task, so
# that it finishes while the browser is away, and a browser started again comes back in time.
GRACE = 15
WAIT = 120

JOB = """
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = %(ranks)d;
execution.setInputFn(async function input() {
  return %(urls)s;
});

const map = new MapStage(async function map(x) {
  context.log('map running');
  const gate = %(gate)s;  // a URL that answers 404 until the test opens it (gates)
  while (gate && !(await fetch(gate + context.getRank(), {cache: 'no-store'})).ok) {
    context.progress();
    await new Promise(r => setTimeout(r, 100));
  }
  await new Promise(r => setTimeout(r, %(map_ms)d));
  const counts = new Map();
  for await (const kv of x) {
    const response = await fetch(kv[1]);
    if (!response.ok) throw new Error(`${kv[1]}: HTTP ${response.status}`);
    for (const word of (await response.text()).split(/\\s+/)) {
      if (word) counts.set(word, (counts.get(word) || 0) + 1);
    }
  }
  for (const [word, n] of counts) context.emit(word, n);
  await context.onComplete();
});
map.timeout = 300;
map.chunks = 'rank';  // each fault lands in one rank's one sleeping task
execution.addStage(map);

const reduce = new ReduceStage(async function reduce(keyToValues) {
  context.log('reduce running');
  await new Promise(r => setTimeout(r, %(reduce_ms)d));
  for (const word in keyToValues) context.emit(word, keyToValues[word].reduce((a, b) => a + b, 0));
  await context.onComplete();
});
reduce.timeout = 300;
execution.addStage(reduce);

execution.start(jobRunner);
"""

STAGES = {"map": "stage 1 (map)", "reduce": "stage 2 (reduce)"}


def job_script(urls: list[str], stage: str, ranks: int = RANKS) -> str:
    """The word count on ``ranks`` ranks, whose ``stage`` takes SLEEP_MS (the other is quick); with
    ``gated``, each map waits until its rank's gate opens instead."""
    return JOB % {
        "ranks": ranks,
        "urls": json.dumps(urls),
        "gate": json.dumps(urls[0].rsplit("/", 1)[0] + "/go-" if stage == "gated" else None),
        "map_ms": SLEEP_MS if stage == "map" else 0,
        "reduce_ms": SLEEP_MS if stage == "reduce" else 0,
    }


# ------------------------------------------------------------------ the lone browser


def process_tree(root: int) -> list[int]:
    """``root`` and its descendants (a browser's zygotes, renderers, GPU and utility processes)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # ended meanwhile
        parent = int(stat.rsplit(")", 1)[1].split()[1])  # after the command's name, which may hold spaces
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def signal_tree(root: int, sig: int) -> None:
    """Send ``sig`` to every process of the tree, until no new one appears (one may fork meanwhile)."""
    done: set[int] = set()
    while pids := set(process_tree(root)) - done:
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        done |= pids


class LoneWorker:
    """A worker tab alone in a Chromium of our own, which a test may freeze, thaw, kill and start
    again: started again, the tab comes back under the same worker id, as `peermr worker` restarts a
    browser (its start URL names the id)."""

    def __init__(self, browser_type, appliance: Appliance, token: str):
        self.browser_type, self.appliance, self.token = browser_type, appliance, token
        self.chromium: LoneChromium | None = None
        self.tab = self._open("")
        self.worker_id = worker_id(self.tab)

    def _open(self, worker: str):
        self.chromium = LoneChromium(self.browser_type)
        page = self.chromium.browser.new_context().new_page()
        fragment = f"token={self.token}" + (f"&worker={worker}" if worker else "")
        page.goto(f"{self.appliance.url}/worker/start#{fragment}")
        expect(page.locator("#connection")).to_have_text("connected", timeout=WAIT * 1000)
        return page

    def freeze(self) -> None:
        signal_tree(self.chromium.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        signal_tree(self.chromium.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        signal_tree(self.chromium.proc.pid, signal.SIGKILL)
        self.chromium.proc.wait(30)
        with contextlib.suppress(PlaywrightError):
            self.chromium.browser.close()
        shutil.rmtree(self.chromium.profile, ignore_errors=True)

    def relaunch(self) -> None:
        self.tab = self._open(self.worker_id)

    def close(self) -> None:
        self.thaw()
        self.chromium.close()


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def texts():
    return make_corpus(parts=PARTS, lines=LINES_PER_PART)


@pytest.fixture(scope="module")
def urls(data_server):
    return [f"{data_server.origin}/part-{i}.txt" for i in range(PARTS)]


@pytest.fixture(scope="module")
def appliance(appliance_with, data_server):
    return appliance_with(env={"PEERMR_FETCH_ORIGINS": data_server.origin}, job_reconnect_grace_seconds=GRACE)


@pytest.fixture(scope="module")
def lone(chromium, appliance, token, steady):
    """The fourth worker tab, alone in its browser."""
    worker = LoneWorker(chromium.browser_type, appliance, token)
    yield worker
    worker.close()


# ------------------------------------------------------------------ helpers


def fleet_states(admin: Client) -> dict[str, str]:
    """Each connected worker's state as the appliance sees it (its Workers page)."""
    table = admin.get("/ui/workers/live").text
    return dict(re.findall(r'data-worker="([^"]+)">.*?worker-state state-(\w+)', table, re.S))


def until_states(admin: Client, wanted: dict[str, str]) -> None:
    deadline = time.monotonic() + WAIT
    while any((states := fleet_states(admin)).get(w) != s for w, s in wanted.items()):
        if time.monotonic() > deadline:
            raise AssertionError(f"workers {states}, not {wanted}")
        time.sleep(0.25)


def all_idle(admin: Client, steady, lone: LoneWorker) -> None:
    """The four tabs connected and idle, for the appliance."""
    until_states(admin, {w: "idle" for w in [*map(worker_id, steady.tabs), lone.worker_id]})


def start_with_spare(api: httpx.Client, admin: Client, spare, name: str, script: str) -> int:
    """Start a run on three of the four tabs, leaving out ``spare``, which is idle once it started."""
    spare_id = worker_id(spare)
    spare.click("#pause")
    until_states(admin, {spare_id: "paused"})
    run_id = start(api, name, script)
    deadline = time.monotonic() + WAIT
    while api.get(f"/runs/{run_id}").json()["state"] == "queued":
        assert time.monotonic() < deadline, f"run {run_id} did not start: {api.get(f'/runs/{run_id}').json()}"
        time.sleep(0.1)
    spare.click("#pause")  # Resume
    until_states(admin, {spare_id: "idle"})
    return run_id


def ranks_running(api: httpx.Client, run_id: int, stage: str, count: int = RANKS) -> dict[str, int]:
    """Wait until each of ``count`` ranks logged that its ``stage`` runs (so none is still copying an
    input); the rank of each worker that did. Logs are stored every second."""
    what = f"{stage} running"
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        ranks = {line["source"]: line["rank"] for line in log_lines(api, run_id) if line["text"] == what}
        if len(ranks) >= count:
            return ranks
        run = api.get(f"/runs/{run_id}").json()
        assert run["state"] in ("queued", "running"), f"run {run_id} {run['state']} before every rank logged {what!r}"
        time.sleep(0.2)
    raise AssertionError(f"not every rank logged {what!r} in run {run_id}: {log_text(api, run_id)}")


def not_rank_0(ranks: dict[str, int], worker: str) -> None:
    """A map's stand-in needs the map's input from another browser: rank 0's lives only in rank 0's,
    which ran the input function. (The lone tab joined last, and ranks last among idle workers.)"""
    assert ranks[worker] != 0, f"{worker} holds rank 0 of the run: {ranks}"


def succeeded(api: httpx.Client, run_id: int, title: str) -> str:
    """Wait for the run's end, print its log (what a failure shows) and assert it succeeded. Returns
    the log."""
    try:
        run = wait(api, run_id, timeout=WAIT)
    finally:
        print(f"\nrun {run_id}, {title}:")
        for line in log_lines(api, run_id):
            print(f"  {line['at'][11:23]} {line['source'][:8]} {line['text'][:200]}")
    log = log_text(api, run_id)
    assert run["state"] == "succeeded", run["reason"] + "\n" + log
    return log


def logged(api: httpx.Client, run_id: int, text: str) -> None:
    """Wait until the run's log holds ``text``."""
    deadline = time.monotonic() + WAIT
    while text not in (log := log_text(api, run_id)):
        assert time.monotonic() < deadline, f"{text!r} not logged in run {run_id}:\n{log}"
        time.sleep(0.2)


def maps_done(api: httpx.Client, run_id: int, count: int) -> None:
    deadline = time.monotonic() + WAIT
    while True:
        run = api.get(f"/runs/{run_id}").json()
        if next(p["done"] for p in run["progress"] if p["stage"] == 0) >= count:
            return
        assert run["state"] == "running", f"run {run_id} {run['state']} before {count} maps were done"
        assert time.monotonic() < deadline, f"not {count} maps done in run {run_id}: {run}"
        time.sleep(0.1)


@contextlib.contextmanager
def gates(data_server):
    """The gates of a ``gated`` run's maps (its ranks' maps wait until they open); open(rank) lets one
    go on. All close again at the end."""

    def open_gate(rank: int) -> None:
        data_server.files[f"/go-{rank}"] = b"go"

    try:
        yield open_gate
    finally:
        for path in [p for p in data_server.files if p.startswith("/go-")]:
            del data_server.files[path]


def maps_ran_once(api: httpx.Client, run_id: int, log: str) -> None:
    """No map ran again: each rank's map logged that it ran once, and nothing was computed again."""
    ran = [line["rank"] for line in log_lines(api, run_id) if line["text"] == "map running"]
    assert sorted(ran) == list(range(RANKS)), log
    assert "run again" not in log, log


def stood_in(api: httpx.Client, run_id: int, stage: str, gone: str, rank: int, spare: str) -> str:
    """Assert the run succeeded with a stand-in: ``gone``'s task of ``stage`` started on ``spare`` as
    soon as ``gone`` disconnected. Returns the run's log."""
    log = succeeded(api, run_id, f"{stage}, {gone[:8]} gone, {spare[:8]} spare")
    where = f"{STAGES[stage]} on rank {rank} of group A"
    started = f"worker {gone} disconnected while running {where}: a backup attempt starts on worker {spare} at once"
    assert started in log, log
    return log


# ------------------------------------------------------------------ tests


@pytest.mark.parametrize("stage", ["map", "reduce"])
def test_a_browser_frozen_whole_has_its_task_started_at_once_on_a_spare(
    api, admin, steady, lone, urls, expected, stage
):
    """Every process of the lone browser stopped (SIGSTOP) while its tab runs a map (or a reduce):
    its page stops answering pings, the appliance takes it for gone within seconds, and its task
    starts at once on the spare tab. The stand-in finishes while the browser is away and takes its
    rank; a reduce's took its input from the others (no map ran again). The browser goes on
    (SIGCONT) once the run ended."""
    all_idle(admin, steady, lone)
    spare = worker_id(steady.tabs[0])
    gone = lone.worker_id
    run_id = start_with_spare(api, admin, steady.tabs[0], f"frozen-in-{stage}", job_script(urls, stage))
    try:
        ranks = ranks_running(api, run_id, stage)
        lone.freeze()
        if stage == "map":
            not_rank_0(ranks, gone)
        log = stood_in(api, run_id, stage, gone, ranks[gone], spare)
    finally:
        lone.thaw()
    assert output(api, run_id) == expected
    assert f"moves to worker {spare}, which stood in for {gone} (disconnected)" in log, log
    if stage == "reduce":
        maps_ran_once(api, run_id, log)
    all_idle(admin, steady, lone)


@pytest.mark.parametrize("stage", ["map", "reduce"])
def test_a_browser_killed_and_started_again_has_its_task_started_at_once_on_a_spare(
    api, admin, steady, lone, urls, expected, stage
):
    """The lone browser killed (SIGKILL to all its processes) while its tab runs a map (or a
    reduce), and started again at once: its tab comes back under the same worker id, without the
    task, which started on the spare tab when the browser went, and goes on there. A reduce's
    stand-in copies the piece of the rank's own map from its keeper: no map runs again."""
    all_idle(admin, steady, lone)
    spare = worker_id(steady.tabs[0])
    gone = lone.worker_id
    run_id = start_with_spare(api, admin, steady.tabs[0], f"killed-in-{stage}", job_script(urls, stage))
    ranks = ranks_running(api, run_id, stage)
    lone.kill()
    lone.relaunch()
    assert worker_id(lone.tab) == gone
    if stage == "map":
        not_rank_0(ranks, gone)
    rank = ranks[gone]
    log = stood_in(api, run_id, stage, gone, rank, spare)
    assert output(api, run_id) == expected
    # Back while the stand-in ran, or after it finished (then the rank had moved to the spare).
    back = f"worker {gone} is back without {STAGES[stage]} on rank {rank} of group A"
    moved = f"moves to worker {spare}, which stood in for {gone} (disconnected)"
    assert back in log or moved in log, log
    if stage == "reduce":
        maps_ran_once(api, run_id, log)
    all_idle(admin, steady, lone)


def test_a_tab_closed_has_its_task_started_at_once_on_a_spare(api, admin, steady, lone, urls, expected):
    """A tab of the shared Chromium closed while it runs a map (not rank 0's, see not_rank_0): its
    map starts at once on the spare tab, finishes, and the spare takes the rank. A new tab takes the
    closed one's place in the module's four."""
    all_idle(admin, steady, lone)
    spare_tab = steady.tabs[0]
    spare = worker_id(spare_tab)
    run_id = start_with_spare(api, admin, spare_tab, "tab-closed-in-map", job_script(urls, "map"))
    closed = None
    try:
        ranks = ranks_running(api, run_id, "map")
        closed = next(t for t in steady.tabs[1:] if ranks.get(worker_id(t), 0) != 0)
        gone = worker_id(closed)
        closed.close()
        log = stood_in(api, run_id, "map", gone, ranks[gone], spare)
    finally:
        if closed is not None:
            steady.close(closed)
            steady.add(1)
    assert output(api, run_id) == expected
    assert f"moves to worker {spare}, which stood in for {gone} (disconnected)" in log, log
    all_idle(admin, steady, lone)


def test_a_browser_frozen_between_its_map_and_its_reduce_has_its_rank_taken_over_by_the_spare(
    api, admin, steady, lone, urls, data_server, expected
):
    """Every map waits at its gate; the lone tab's alone goes on and is done, so its reduce is
    assigned and waits for the other maps' output. Then the lone browser is frozen whole and the
    other maps go on: its reduce has started none of its work, so once its pings go unanswered
    (before it is taken for gone) its rank moves to the spare, which reduces with the pieces the
    others hold (its map's own piece from the keeper). Were the spare busy with a backup then, the
    rank would go to it once the browser is taken for gone. SIGCONT after the run."""
    all_idle(admin, steady, lone)
    spare = worker_id(steady.tabs[0])
    gone = lone.worker_id
    run_id = start_with_spare(api, admin, steady.tabs[0], "frozen-between", job_script(urls, "gated"))
    with gates(data_server) as open_gate:
        try:
            ranks = ranks_running(api, run_id, "map")
            open_gate(ranks[gone])
            maps_done(api, run_id, 1)
            lone.freeze()
            for rank in range(RANKS):
                open_gate(rank)
            log = succeeded(api, run_id, f"between map and reduce, {gone[:8]} gone, {spare[:8]} spare")
        finally:
            lone.thaw()
    assert output(api, run_id) == expected
    rank = ranks[gone]
    moved = f"rank {rank} of group A moves to worker {spare}, as worker {gone} has not answered"
    gone_for_good = re.search(rf"worker {gone} \(rank {rank} of group A\) (disconnected|was taken off the run)", log)
    assert moved in log or (gone_for_good and f"worker {spare} took over rank {rank} of group A" in log), log
    all_idle(admin, steady, lone)


TALKING = """
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = %(ranks)d;
execution.setInputFn(async function input() { return [1, 2, 3]; });
const steps = new MapStage(async function map(x) {
  const rank = context.getRank();
  let total = 0;
  for (let k = 0; k < 30; k++) {
    const sum = await context.allReduce(new Float32Array(4).fill(rank + 1), 'sum', `step-${k}`);
    total += sum[0];
    if (k === 2) context.log('collectives under way');
    await new Promise(r => setTimeout(r, 200));
  }
  context.emit(rank, total);
  await context.onComplete();
});
steps.timeout = 300;
execution.addStage(steps);
execution.start(jobRunner);
"""


def test_a_browser_frozen_in_a_collective_has_the_stage_started_again_with_the_spare(api, admin, steady, lone):
    """A stage whose ranks run allReduce after allReduce; the lone browser is frozen whole in it. Once
    it is taken for gone, its rank goes at once to the spare (a collective needs a worker per rank),
    the others' allReduce fails on the lost rank, naming it, and the stage starts again with the spare:
    in seconds, not after a receive's timeout. Every rank's 30 sums are right."""
    all_idle(admin, steady, lone)
    spare = worker_id(steady.tabs[0])
    gone = lone.worker_id
    run_id = start_with_spare(api, admin, steady.tabs[0], "frozen-in-collective", TALKING % {"ranks": RANKS})
    try:
        logged(api, run_id, "collectives under way")
        lone.freeze()
        log = succeeded(api, run_id, f"collective, {gone[:8]} frozen, {spare[:8]} spare")
    finally:
        lone.thaw()
    assert output(api, run_id) == {rank: 30 * 6 for rank in range(RANKS)}
    rank = next(line["rank"] for line in log_lines(api, run_id) if line["source"] == gone)
    assert f"worker {gone} (rank {rank} of group A) disconnected (a replacement was idle)" in log, log
    assert f"worker {spare} took over rank {rank} of group A" in log, log
    assert re.search(rf"starts again: rank {rank} of group A failed during allReduce 'step-\d+'", log), log
    all_idle(admin, steady, lone)


def test_a_map_in_chunks_outlives_a_tab_closed_for_good_with_no_spare(api, admin, steady, lone, urls, expected):
    """Four ranks on the four tabs, each rank's input in four chunks (each part of the corpus four
    times: sixteen items), run as one range a rank. A shared tab is closed for good once every rank's
    map runs, and nobody is spare: its range's chunks wait again at once, the run's other browsers
    share them as they free up, and any free browser takes the tasks of its rank after (no rank
    waits out the reconnect grace)."""
    all_idle(admin, steady, lone)
    script = job_script(urls * 4, "map", ranks=PARTS).replace("map.chunks = 'rank';", "map.chunks = 'auto';")
    script = script.replace(f"setTimeout(r, {SLEEP_MS})", "setTimeout(r, 1500)")
    run_id = start(api, "chunks-no-spare", script)
    closed = None
    try:
        ranks = ranks_running(api, run_id, "map", count=PARTS)
        closed = next(t for t in steady.tabs if ranks[worker_id(t)] != 0)
        gone = worker_id(closed)
        closed.close()
        log = succeeded(api, run_id, f"chunks, no spare, {gone[:8]} gone")
    finally:
        if closed is not None:
            steady.close(closed)
            steady.add(1)
    assert output(api, run_id) == {word: 4 * n for word, n in expected.items()}
    assert f"worker {gone} disconnected while running {STAGES['map']} on rank {ranks[gone]} (chunk" in log, log
    assert "its chunks wait for the run's free workers" in log and "waits up to" not in log, log
    ran = [line for line in log_lines(api, run_id) if line["text"] == "map running" and line["rank"] == ranks[gone]]
    assert {line["source"] for line in ran} - {gone}, log  # its rank's chunks ran on the others too
    all_idle(admin, steady, lone)


@pytest.mark.parametrize("lost", [1, 2], ids=["a-tab-closed", "a-tab-closed-and-a-browser-killed"])
def test_with_no_spare_the_runs_own_workers_take_the_lost_ranks(
    api, admin, steady, lone, urls, data_server, expected, lost
):
    """A run of four ranks on the four tabs, every map waiting at its gate. A shared tab is closed
    (not rank 0's: see not_rank_0), and with two lost the lone browser killed too (started again once
    the run ended); a new tab takes the closed one's place then. No spare is left, so each lost rank
    waits for its browser:
    - one lost: the gates open, and once the other maps are done the lost map (whose progress calls
      stopped with its tab) lags: it gets a backup on a worker of the run whose map is done, which
      stands in for it and takes its rank;
    - two lost: the reconnect grace runs out first (every other worker is in its map, at its gate:
      none is free for a backup), and each vacant rank goes to a worker of the run as well as its
      own; then the gates open.
    Each of those workers runs both its ranks' tasks, one after the other."""
    all_idle(admin, steady, lone)
    run_id = start(api, f"no-spare-{lost}-lost", job_script(urls, "gated", ranks=PARTS))
    closed, killed = None, False
    with gates(data_server) as open_gate:
        try:
            ranks = ranks_running(api, run_id, "map", count=PARTS)
            closed = next(t for t in steady.tabs if ranks[worker_id(t)] != 0)
            gone = [worker_id(closed)]
            closed.close()
            if lost == 2:
                not_rank_0(ranks, lone.worker_id)
                lone.kill()
                killed = True
                gone.append(lone.worker_id)
            for worker in gone:
                where = f"{STAGES['map']} on rank {ranks[worker]} of group A"
                logged(api, run_id, f"worker {worker} disconnected while running {where}; its rank waits up to")
            if lost == 2:
                for worker in gone:
                    logged(api, run_id, f"takes rank {ranks[worker]} of group A as well: no other eligible worker")
            for rank in range(PARTS):
                open_gate(rank)
            log = succeeded(api, run_id, f"no spare, {', '.join(w[:8] for w in gone)} gone")
        finally:
            if closed is not None:
                steady.close(closed)
                steady.add(1)
            if killed:
                lone.relaunch()
    assert output(api, run_id) == expected
    holders = set(ranks) - set(gone)
    for worker in gone:
        rank = ranks[worker]
        if lost == 1:
            stood = rf"rank {rank} of group A moves to worker (\S+), which stood in for {worker} \(disconnected\)"
            assert (match := re.search(stood, log)) and match.group(1) in holders, log
        else:
            took = re.search(rf"worker (\S+) takes rank {rank} of group A as well", log)
            assert took and took.group(1) in holders, log
    all_idle(admin, steady, lone)
