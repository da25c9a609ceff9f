"""Stragglers in real Chromium workers: a throttled tab's task gets a backup attempt that wins, a tab
whose browser process is stopped (its renderer still running) has its task reported stalled, and a
job can turn speculation off (the same with simulated workers: tests/integration/test_stragglers.py).

One appliance (stall limit 8 s) and four worker tabs for the whole module: three in the shared
Playwright Chromium, one alone in a Chromium this module launches itself (so it owns the browser
process's pid, to SIGSTOP it). That lone tab is the straggler of every test.

Throttling (tests/browsers.py): ``Emulation.setCPUThrottlingRate`` slows only a page's main thread,
and tasks run in a dedicated Web Worker per task; so ``Throttle`` also pauses the tab's workers with
the debugger for (rate - 1) / rate of every period: the same slowdown, for the code that runs the task.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import re
import time
from collections import Counter

import httpx
import pytest
from playwright.sync_api import Error as PlaywrightError

from tests.browsers import LoneChromium, Throttle, Workers
from tests.cpu_groups import CpuGroup
from tests.e2e.test_jobs_in_browsers import CorpusServer
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance

pytestmark = pytest.mark.e2e

STALL_SECONDS = 8
PARTS = 4
LINES_PER_PART = 1500
# Work per word in the map (a loop over its letters), so that a map takes a few seconds.
ROUNDS = 4000
RATE = 10


def make_corpus(seed: int = 11, parts: int = PARTS, lines: int = LINES_PER_PART) -> list[str]:
    rng = random.Random(seed)
    words = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9))) for _ in range(800)]
    return [
        "\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(4, 14))) for _ in range(lines)) + "\n"
        for _ in range(parts)
    ]


# A word count whose map spends CPU on every word (ROUNDS passes over its letters), counts the words
# of its part in a Map (a small shuffle) and says it is alive with context.progress() as it goes.
JOB = """
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = %(workers)d;
%(options)s
execution.setInputFn(async function input() {
  return %(urls)s;
});

const map = new MapStage(async function map(x) {
  context.log('map running');
  %(map_wait)s
  const counts = new Map();
  let check = 0;
  for await (const kv of x) {
    const response = await fetch(kv[1]);
    if (!response.ok) throw new Error(`${kv[1]}: HTTP ${response.status}`);
    const lines = (await response.text()).split('\\n');
    for (let n = 0; n < lines.length; n++) {
      for (const word of lines[n].split(' ')) {
        if (!word) continue;
        let h = 0;
        for (let r = 0; r < %(rounds)d; r++) {
          for (let i = 0; i < word.length; i++) h = (Math.imul(h, 31) + word.charCodeAt(i) + r) | 0;
        }
        check ^= h;
        counts.set(word, (counts.get(word) || 0) + 1);
      }
      if (n %% 50 === 0) context.progress();
    }
  }
  for (const [word, n] of counts) context.emit(word, n);
  context.log('map checksum ' + check);
  await context.onComplete();
});
map.timeout = %(timeout)d;
%(chunks)s
execution.addStage(map);

const reduce = new ReduceStage(async function reduce(keyToValues) {
  context.log('reduce running');
  %(reduce_wait)s
  %(reduce_fetch)s
  for (const word in keyToValues) context.emit(word, keyToValues[word].reduce((a, b) => a + b, 0));
  await context.onComplete();
});
reduce.timeout = %(timeout)d;
execution.addStage(reduce);

execution.start(jobRunner);
"""


def waiting(ms: int) -> str:
    if not ms:
        return ""
    return f"for (let t = 0; t < {ms}; t += 250) {{ context.progress(); await new Promise(r => setTimeout(r, 250)); }}"


def job_script(
    urls: list[str],
    *,
    workers: int = 4,
    speculation: bool = True,
    rounds: int = ROUNDS,
    timeout: int = 600,
    map_ms: int = 0,
    reduce_ms: int = 0,
    reduce_fetches: bool = False,
    chunks: str | None = "rank",
) -> str:
    return JOB % {
        "workers": workers,
        "options": "" if speculation else "execution.speculation = false;",
        "urls": json.dumps(urls),
        "rounds": rounds,
        "timeout": timeout,
        # One task per rank by default: a slow or stopped browser's one task is what these tests race.
        "chunks": f"map.chunks = {json.dumps(chunks)};" if chunks else "",
        # A map or reduce that takes a while, and keeps saying so (not stalled while its browser runs).
        "map_wait": waiting(map_ms),
        "reduce_wait": waiting(reduce_ms),
        # A fetch after the wait: a task whose browser process is stopped hangs there for certain (a
        # store of its output into IndexedDB does not always wait for the browser process).
        # A URL of its own: one the tab's map fetched may come from its HTTP cache without the browser process.
        "reduce_fetch": f"await fetch({json.dumps(urls[0])} + '?reduce');" if reduce_fetches else "",
    }


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def texts():
    return make_corpus()


@pytest.fixture(scope="module")
def data_server(texts):
    server = CorpusServer({f"/part-{i}.txt": t.encode() for i, t in enumerate(texts)})
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def urls(data_server):
    return [f"{data_server.origin}/part-{i}.txt" for i in range(PARTS)]


@pytest.fixture(scope="module")
def expected(texts):
    return dict(Counter(w for t in texts for w in t.split()))


@pytest.fixture(scope="module")
def appliance(tmp_path_factory, data_server):
    env = {"PEERMR_FETCH_ORIGINS": data_server.origin, "PEERMR_JOB_STALL_SECONDS": str(STALL_SECONDS)}
    server = Appliance(tmp_path_factory.mktemp("stragglers") / "data", env=env).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def admin(appliance):
    client = appliance.client()
    client.login(ADMIN_EMAIL, ADMIN_PASSWORD)
    yield client
    client.close()


@pytest.fixture(scope="module")
def cpu_group():
    """The lone browser's CPU cgroup: no limit but while a test makes it a slow machine."""
    group = CpuGroup(f"peermr-test-{os.getpid()}-lone")
    yield group
    group.remove()


@pytest.fixture(scope="module")
def lone(chromium, cpu_group):
    browser = LoneChromium(chromium.browser_type, cpu_group)
    yield browser
    browser.close()


@pytest.fixture(scope="module")
def steady(chromium, appliance, token):
    """Three worker tabs in the shared Chromium."""
    fleet = Workers(chromium, appliance, token)
    fleet.add(3)
    yield fleet
    for page in list(fleet.tabs):
        fleet.close(page)


@pytest.fixture(scope="module")
def straggler(lone, appliance, token, steady):
    """The fourth worker tab, alone in its browser (connected last)."""
    fleet = Workers(lone.browser, appliance, token)
    fleet.add(1)
    yield fleet
    for page in list(fleet.tabs):
        try:
            fleet.close(page)
        except PlaywrightError:
            pass


# ------------------------------------------------------------------ helpers


def worker_id(page) -> str:
    return page.evaluate("window.peermrWorker.workerId")


def start(api: httpx.Client, name: str, script: str) -> int:
    job = api.post("/jobs", json={"name": name, "script": script})
    assert job.status_code == 201, job.text
    run = api.post(f"/jobs/{job.json()['id']}/runs", json={})
    assert run.status_code == 201, run.text
    return run.json()["id"]


def ended(api: httpx.Client, run_id: int) -> dict | None:
    run = api.get(f"/runs/{run_id}").json()
    return run if run["state"] in ("succeeded", "failed", "cancelled") else None


def wait_throttled(api: httpx.Client, run_id: int, throttle: Throttle, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (run := ended(api, run_id)) is not None:
            return run
        throttle.wait(1.0)
    raise AssertionError(f"run {run_id} did not end within {timeout} s: {api.get(f'/runs/{run_id}').json()}")


def wait(api: httpx.Client, run_id: int, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (run := ended(api, run_id)) is not None:
            return run
        time.sleep(0.25)
    raise AssertionError(f"run {run_id} did not end within {timeout} s: {api.get(f'/runs/{run_id}').json()}")


def output(api: httpx.Client, run_id: int) -> dict:
    response = api.get(f"/runs/{run_id}/output")
    assert response.status_code == 200, response.text
    return dict(json.loads(line) for line in response.text.splitlines())


def log_lines(api: httpx.Client, run_id: int, worker: str | None = None) -> list[dict]:
    params = {"worker": worker} if worker else {}
    return [json.loads(line) for line in api.get(f"/runs/{run_id}/logs", params=params).text.splitlines()]


def log_text(api: httpx.Client, run_id: int) -> str:
    return "\n".join(line["text"] for line in log_lines(api, run_id))


def attempts(appliance: Appliance, run_id: int) -> list[tuple]:
    return appliance.query(
        f"SELECT stage, rank, attempt, worker_id, state FROM jobs_task WHERE run = {run_id} "
        "ORDER BY stage, rank, attempt"
    )


def durations(appliance: Appliance, run_id: int) -> list[tuple]:
    """(stage, rank, worker, state, seconds) of every attempt: what a failed assertion shows."""
    rows = appliance.query(
        f"SELECT stage, rank, worker_id, state, started_at, finished_at FROM jobs_task WHERE run = {run_id} "
        "ORDER BY stage, rank, attempt"
    )
    return [(st, rank, w[:8], state, round(when(f) - when(s), 2)) for st, rank, w, state, s, f in rows]


def when(value) -> float:
    """A timestamp of the store (SQLite text or a datetime) as seconds since the epoch."""
    stamp = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.UTC)).timestamp()


def all_idle(api: httpx.Client, pages: list, timeout: float = 60) -> None:
    """Every tab connected and not in a run (a run just ended: its workers are freed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = [p.evaluate("[window.peermrWorker.connected, window.peermrWorker.state]") for p in pages]
        if all(connected and state == "idle" for connected, state in states):
            return
        time.sleep(0.25)
    raise AssertionError(f"worker tabs not idle: {states}")


# ------------------------------------------------------------------ tests


def test_a_throttled_tab_gets_a_backup_attempt_that_wins(appliance, api, admin, steady, straggler, urls, expected):
    tab = straggler.tabs[0]
    slow = worker_id(tab)
    all_idle(api, steady.tabs + straggler.tabs)
    throttle = Throttle(tab, RATE)
    try:
        run_id = start(api, "throttled", job_script(urls))
        run = wait_throttled(api, run_id, throttle, timeout=240)
    finally:
        throttle.stop()
    log = log_text(api, run_id)
    assert run["state"] == "succeeded", run["reason"] + log[-3000:]
    assert output(api, run_id) == expected
    rows = attempts(appliance, run_id)
    # The throttled tab's map lost the race to a backup attempt on another tab. (Another tab's map may
    # have had a backup too, on a loaded machine: there the backup is what lost.)
    superseded = [r for r in rows if r[0] == 0 and r[4] == "superseded" and r[3] == slow]
    assert len(superseded) == 1, f"{slow[:8]} {durations(appliance, run_id)}\n{log}"
    rank = superseded[0][1]
    winner = [r for r in rows if r[0] == 0 and r[1] == rank and r[4] == "done"]
    assert len(winner) == 1 and winner[0][3] != slow and winner[0][2] > superseded[0][2], rows
    assert any(f"on worker {slow} is {why}" in log for why in ("slow: ", "lagging: ", "stalled")), log
    assert f"a backup attempt starts on worker {winner[0][3]}" in log, log
    won = f"attempt {winner[0][2]} on worker {winner[0][3]} finished first"
    assert f"{won}; attempt {superseded[0][2]} on worker {slow} is cancelled" in log, log
    # The run page's timeline shows both attempts of that map.
    page = admin.get(f"/ui/runs/{run_id}").text
    assert 'class="tl-bar tl-superseded"' in page and 'class="tl-bar tl-done"' in page


@pytest.mark.timeout(600)  # above the run's own wait: a loaded CI machine makes the throttled tab slower still
def test_speculation_off_the_throttled_tab_finishes_its_own_task(appliance, api, steady, straggler, urls, expected):
    tab = straggler.tabs[0]
    slow = worker_id(tab)
    all_idle(api, steady.tabs + straggler.tabs)
    throttle = Throttle(tab, RATE)
    try:
        # A quarter of the work: no backup shortens the throttled tab's tasks here, and 10x of the
        # full job takes minutes on a loaded machine.
        script = job_script(urls, speculation=False, rounds=ROUNDS // 4)
        run_id = start(api, "throttled-no-speculation", script)
        run = wait_throttled(api, run_id, throttle, timeout=480)
    finally:
        throttle.stop()
    log = log_text(api, run_id)
    assert run["state"] == "succeeded", run["reason"] + log[-3000:]
    assert output(api, run_id) == expected
    rows = attempts(appliance, run_id)
    assert all(r[4] == "done" for r in rows), rows
    assert "a backup attempt starts" not in log and "finished first" not in log
    # The throttled tab did run its map, and took clearly longer than the others, unless the
    # appliance, which knows it slow from the test before, gave it less of the input (the cut by speed).
    cut = re.search(r"input is cut by the speed estimates of its ranks' browsers: (.*)", log)
    maps = [
        (w, when(finished) - when(started))
        for w, started, finished in appliance.query(
            f"SELECT worker_id, started_at, finished_at FROM jobs_task WHERE run = {run_id} AND stage = 0"
        )
    ]
    mine = [s for w, s in maps if w == slow]
    others = sorted(s for w, s in maps if w != slow)
    assert len(mine) == 1 and (mine[0] > 2 * others[len(others) // 2] or cut), (maps, log)


def running_on(api: httpx.Client, run_id: int, worker: str, what: str, timeout: float = 120) -> None:
    """Wait for the log line ``what`` from the tab ``worker`` and from every rank (all of them have
    their inputs: none is still copying one from ``worker``); logs are stored every second."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [line for line in log_lines(api, run_id) if line["text"] == what]
        if any(line["source"] == worker for line in lines) and len({line["source"] for line in lines}) >= PARTS:
            return
        if ended(api, run_id) is not None:
            raise AssertionError(f"run {run_id} ended before {worker} logged {what!r}: {log_text(api, run_id)}")
        time.sleep(0.2)
    raise AssertionError(f"{worker} did not log {what!r} in run {run_id}")


@pytest.mark.parametrize("stage", ["map", "reduce"])
def test_a_browser_stopped_mid_task_is_taken_over_in_seconds(
    appliance, api, lone, steady, straggler, urls, expected, stage
):
    """SIGSTOP the lone Chromium's browser process once its tab runs a map (or a reduce); SIGCONT
    after the run ended.

    What happens (Chromium 156): the renderer goes on, but the task hangs where it needs the
    browser process (its fetch, storing its output), and the page's socket soon goes quiet too. Either
    path ends with the fifth tab running the task and taking the rank:
    - the page stops answering the pings a worker in a run gets every second: after about 3 s it
      has left, and its task starts at once on the fifth tab (a stand-in);
    - or it still answers, and after job_stall_seconds the task is reported stalled and gets a
      backup attempt there (a stalled reduce's backup cannot copy the input only the stopped browser
      holds: that copy fails within seconds and the stopped tab is taken off the run); its store's
      reads go unanswered, which the pongs say, so it leaves within seconds even so.
    The fifth tab takes over its rank and runs again what it held."""
    # A tab the appliance has no speed estimate for: the lone browser's is low from the tests before
    # (stopped, throttled), and a browser far slower than the others leaves its reduce to a faster one.
    straggler.close(straggler.tabs[0])
    straggler.add(1)
    tab = straggler.tabs[0]
    all_idle(api, steady.tabs + straggler.tabs)
    stuck = worker_id(tab)
    timeout = 300
    # The stopped task sleeps 8 s (the stop lands in its sleep even on a loaded machine, where the
    # appliance stores logs once a second and the test polls them), then fetches.
    reduce = stage == "reduce"
    # Stopped in its reduce, the tab must still hold its rank then: maps too short to be found lagging
    # (a backup that outran its map would take the rank, and the reduce, elsewhere).
    script = job_script(
        urls,
        timeout=timeout,
        rounds=ROUNDS // 20 if reduce else ROUNDS,
        map_ms=0 if reduce else 8000,
        reduce_ms=8000 if reduce else 4000,
        reduce_fetches=reduce,
    )
    run_id = start(api, f"stopped-browser-{stage}", script)
    assert lone.renderers(), "the lone Chromium has no renderer process"
    started = time.monotonic()
    spare = None
    try:
        while api.get(f"/runs/{run_id}").json()["state"] == "queued":
            time.sleep(0.1)
        # A fifth tab, in no run (added once the run holds the other four): the backup attempt's first
        # choice, and the replacement of the stopped browser's tab when it is dropped.
        steady.add(1)
        spare = steady.tabs[-1]
        running_on(api, run_id, stuck, f"{stage} running")
        lone.stop_main()
        stopped_at = time.monotonic()
        run = wait(api, run_id, timeout=timeout)
        took = time.monotonic() - started
    finally:
        lone.continue_main()
        if spare is not None:
            steady.close(spare)
    log = log_text(api, run_id)
    assert run["state"] == "succeeded", run["reason"] + log[-4000:]
    assert output(api, run_id) == expected
    assert took < timeout / 2, f"{took:.0f} s for a stage timeout of {timeout} s\n{log}"
    index, name = (0, "stage 1 (map)") if stage == "map" else (1, "stage 2 (reduce)")
    rows = attempts(appliance, run_id)
    rank = next(r[1] for r in rows if r[0] == index and r[3] == stuck)
    where = f"{name} on rank {rank} of group A"
    # A backup attempt of its task: as a stand-in once it left, or before that as a stalled (or, with
    # the rest of the stage done, slow) task's backup.
    backed_up = f"{where} on worker {stuck} is " in log and "a backup attempt starts on worker" in log
    stood_in = f"worker {stuck} disconnected while running {where}: a backup attempt starts on worker" in log
    assert backed_up or stood_in, log
    if stage == "map":  # the backup (or stand-in) won, or went on as the task once the browser was gone
        assert (0, rank, stuck) in [(r[0], r[1], r[3]) for r in rows if r[4] in ("superseded", "lost")], rows
    # The stopped tab leaves the run (taken off as hung, or dropped for silence); another takes its rank.
    left = [f"worker {stuck} (rank {rank} of group A) {how}" for how in ("was taken off the run", "disconnected")]
    assert any(text in log for text in left), log
    assert f"took over rank {rank} of group A" in log, log
    assert (index, rank, "done") in [(r[0], r[1], r[4]) for r in rows if r[3] != stuck], rows
    before = stopped_at - started
    print(f"\n{stage}: the browser stopped {before:.1f} s into the run, which ended {took - before:.1f} s later")
    print(
        "\n".join(f"  {line['at'][11:23]} {line['source'][:8]} {line['text'][:160]}" for line in log_lines(api, run_id))
    )


# Each map awaits for 1.5 stall limits without emitting or calling context.progress() (a long
# training step); each reduce spins that long without yielding to its event loop.
BUSY_JOB = """
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 2;
execution.setInputFn(async function input() {
  return [1, 2, 3, 4];
});
const map = new MapStage(async function map(x) {
  for (let t = 0; t < %(ms)d; t += 200) await new Promise(r => setTimeout(r, 200));
  for await (const kv of x) context.emit(String(kv[1] %% 2), 1);
  await context.onComplete();
});
map.chunks = 'rank';
execution.addStage(map);
const reduce = new ReduceStage(async function reduce(keyToValues) {
  const end = Date.now() + %(ms)d;
  while (Date.now() < end) {}
  for (const key in keyToValues) context.emit(key, keyToValues[key].length);
  await context.onComplete();
});
execution.addStage(reduce);
execution.start(jobRunner);
"""


def test_a_task_that_awaits_without_emitting_is_busy_and_one_that_spins_is_stalled(api, steady):
    """The sandbox's heartbeat comes while a task's event loop turns: a map that awaits for longer
    than the stall limit without a sign of progress is not stalled; a reduce that blocks its event
    loop as long still is."""
    all_idle(api, steady.tabs)
    run_id = start(api, "busy-not-hung", BUSY_JOB % {"ms": STALL_SECONDS * 1500})
    run = wait(api, run_id, timeout=180)
    log = log_text(api, run_id)
    assert run["state"] == "succeeded", run["reason"] + log
    assert output(api, run_id) == {"0": 2, "1": 2}
    assert not [line for line in log.splitlines() if line.startswith("stage 1 (map)") and "is stalled" in line], log
    assert [line for line in log.splitlines() if line.startswith("stage 2 (reduce)") and "is stalled" in line], log


SLOW_CORES = 0.1  # the slow machine's share of the CPU


@pytest.mark.timeout(900)
def test_a_slow_machine_gets_a_smaller_share_of_the_input(appliance, api, steady, straggler, cpu_group, urls, expected):
    """Uneven machines: the lone browser's CPU group is given a tenth of a core, the three others run
    free. A word count whose map is cut into chunks (four times the corpus: sixteen items) runs twice
    on the four: the first run finds the slow browser out (its tasks are raced and outrun), the second
    cuts the input by the browsers' speed estimates, and the slow browser's rank gets the smallest
    share. Both give the right counts."""
    slow = worker_id(straggler.tabs[0])
    all_idle(api, steady.tabs + straggler.tabs)
    script = job_script(urls * 4, rounds=ROUNDS // 4, chunks=None)
    cpu_group.limit(SLOW_CORES)
    try:
        runs = []
        for name in ("uneven-first", "uneven-second"):
            runs.append(start(api, name, script))
            run = wait(api, runs[-1], timeout=300)
            assert run["state"] == "succeeded", run["reason"] + log_text(api, runs[-1])[-3000:]
            assert output(api, runs[-1]) == {word: 4 * n for word, n in expected.items()}
            all_idle(api, steady.tabs + straggler.tabs)
    finally:
        cpu_group.limit(None)
    log = log_text(api, runs[-1])
    cut = re.search(r"group A's input is cut by the speed estimates of its ranks' browsers: (.*)", log)
    assert cut, log
    shares = {int(rank): int(pct) for rank, pct in re.findall(r"rank (\d+) (\d+)%", cut.group(1))}
    [(home,)] = appliance.query(
        f"SELECT rank FROM jobs_task WHERE run = {runs[-1]} AND stage = 0 AND chunk = 0 AND attempt = 0 "
        f"AND worker_id = '{slow}'"
    )
    assert all(shares[home] < share for rank, share in shares.items() if rank != home), (home, shares)


@pytest.mark.timeout(600)
def test_a_throttled_tabs_range_is_cut_to_the_chunk_it_is_in(appliance, api, admin, steady, straggler, urls, expected):
    """The default chunks: each map runs its rank's chunks as one range. A tab throttled 10x is found
    slow by how many of its records it has reached; once other tabs are free, its page is asked to
    split and answers at once, though its job computes without awaiting: it keeps the chunk it is
    in, the free tabs take the rest (or its range starts again on a free tab, or, when it starts
    late, the free tabs share its chunks and back up its one), and it takes no chunk of theirs. The
    throttled tab runs the chunk it was in at most (or fewer than any other), the counts are right,
    and the stage page shows the ranges with the chunks they ran."""
    # A tab the appliance has no speed estimate for (the lone tab's is low from the tests before, and
    # the cut by speed would give its rank nothing to read).
    straggler.close(straggler.tabs[0])
    straggler.add(1)
    tab = straggler.tabs[0]
    slow = worker_id(tab)
    all_idle(api, steady.tabs + straggler.tabs)
    throttle = Throttle(tab, RATE)
    try:
        run_id = start(api, "throttled-range", job_script(urls * 4, rounds=ROUNDS // 4, chunks=None))
        run = wait_throttled(api, run_id, throttle, timeout=480)
    finally:
        throttle.stop()
    log = log_text(api, run_id)
    assert run["state"] == "succeeded", run["reason"] + log[-3000:]
    assert output(api, run_id) == {word: 4 * n for word, n in expected.items()}
    cut = re.search(rf"on worker {slow} stops before chunk \d+: free workers take the rest", log)
    again = re.search(rf"on worker {slow} is slower than worker .*: it starts again on worker", log)
    # On a loaded machine the throttled tab's range can start late (its input copies slowly): the free
    # tabs, done with theirs, share its chunks when it is handed out, and its one chunk gets a backup.
    shared = re.search(rf"\(chunk\d+ of \d+\) of group A on worker {slow} is [^\n]*: a backup attempt starts", log)
    assert cut or again or shared, log
    ran: dict[str, int] = {}
    for worker, chunks in appliance.query(
        f"SELECT worker_id, chunks FROM jobs_task WHERE run = {run_id} AND stage = 0 AND state = 'done'"
    ):
        ran[worker] = ran.get(worker, 0) + chunks
    mine, others = ran.get(slow, 0), [n for worker, n in ran.items() if worker != slow]
    assert mine <= 1 or mine < min(others), (ran, log)  # the chunk it was in, or less than any other
    stage = admin.get(f"/ui/runs/{run_id}/stages/A/0").text
    assert re.search(r"\d+ · chunks \d+–\d+", stage), stage
    assert "Chunks done" in stage
