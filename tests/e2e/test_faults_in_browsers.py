"""Faults in real Chromium workers, each handled by the path meant for it: a browser frozen whole
(every process of it stopped) in a map or a reduce, a browser killed in a map and started again
under the same worker id, and a tab closed in a map. The rank's task starts at once on a spare
worker as a backup (a stand-in), and the run ends with the right output.

One appliance and four worker tabs for the whole module: three in the shared Playwright Chromium,
one alone in a Chromium this module launches itself (so it owns its processes, to stop or kill
them). A run takes three of them: before each run one tab is paused (so the run leaves it out) and
resumed once the run started, so that it is the spare a stand-in needs.

The job's tasks call no context.progress(): a task of a frozen browser must not be judged lagging
(and backed up as such) before its browser is taken for gone.
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

pytestmark = pytest.mark.e2e

# The stragglers module's fixtures, found by pytest under these names (texts, appliance and the lone
# tab are this module's own).
admin, data_server, expected, steady = stragglers.admin, stragglers.data_server, stragglers.expected, stragglers.steady

RANKS = 3
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


def job_script(urls: list[str], stage: str) -> str:
    """The word count, whose ``stage`` takes SLEEP_MS (the other is quick)."""
    return JOB % {
        "ranks": RANKS,
        "urls": json.dumps(urls),
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
    return make_corpus(parts=RANKS, lines=LINES_PER_PART)


@pytest.fixture(scope="module")
def urls(data_server):
    return [f"{data_server.origin}/part-{i}.txt" for i in range(RANKS)]


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


def ranks_running(api: httpx.Client, run_id: int, stage: str) -> dict[str, int]:
    """Wait until every rank logged that its ``stage`` runs (so none is still copying an input); the
    rank of each worker that did. Logs are stored every second."""
    what = f"{stage} running"
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        ranks = {line["source"]: line["rank"] for line in log_lines(api, run_id) if line["text"] == what}
        if len(ranks) >= RANKS:
            return ranks
        run = api.get(f"/runs/{run_id}").json()
        assert run["state"] == "running", f"run {run_id} {run['state']} before every rank logged {what!r}"
        time.sleep(0.2)
    raise AssertionError(f"not every rank logged {what!r} in run {run_id}: {log_text(api, run_id)}")


def not_rank_0(ranks: dict[str, int], worker: str) -> None:
    """A map's stand-in needs the map's input from another browser: rank 0's lives only in rank 0's,
    which ran the input function. (The lone tab joined last, and ranks last among idle workers.)"""
    assert ranks[worker] != 0, f"{worker} holds rank 0 of the run: {ranks}"


def stood_in(api: httpx.Client, run_id: int, stage: str, gone: str, rank: int, spare: str) -> str:
    """Assert the run succeeded with a stand-in: ``gone``'s task of ``stage`` started on ``spare`` as
    soon as ``gone`` disconnected. Returns the run's log."""
    run = wait(api, run_id, timeout=WAIT)
    print(f"\nrun {run_id}, {stage}, {gone[:8]} gone, {spare[:8]} spare:")
    for line in log_lines(api, run_id):
        print(f"  {line['at'][11:23]} {line['source'][:8]} {line['text'][:200]}")
    log = log_text(api, run_id)
    assert run["state"] == "succeeded", run["reason"] + "\n" + log
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
    starts at once on the spare tab. A map's stand-in finishes while the browser is away and takes
    its rank. (A reduce's cannot start: its input from the rank's own map lives only in the frozen
    browser.) The browser goes on (SIGCONT) once the run ended."""
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
    if stage == "map":
        assert f"moves to worker {spare}, which stood in for {gone} (disconnected)" in log, log
    all_idle(admin, steady, lone)


def test_a_browser_killed_and_started_again_has_its_task_started_at_once_on_a_spare(
    api, admin, steady, lone, urls, expected
):
    """The lone browser killed (SIGKILL to all its processes) while its tab runs a map, and started
    again at once: its tab comes back under the same worker id, without the map, which goes on on
    the spare tab, where it started when the browser went."""
    all_idle(admin, steady, lone)
    spare = worker_id(steady.tabs[0])
    gone = lone.worker_id
    run_id = start_with_spare(api, admin, steady.tabs[0], "killed-in-map", job_script(urls, "map"))
    ranks = ranks_running(api, run_id, "map")
    lone.kill()
    lone.relaunch()
    assert worker_id(lone.tab) == gone
    not_rank_0(ranks, gone)
    log = stood_in(api, run_id, "map", gone, ranks[gone], spare)
    assert output(api, run_id) == expected
    # Back while the stand-in ran, or after it finished (then the rank had moved to the spare).
    back = f"worker {gone} is back without stage 1 (map) on rank {ranks[gone]} of group A"
    moved = f"moves to worker {spare}, which stood in for {gone} (disconnected)"
    assert back in log or moved in log, log
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
