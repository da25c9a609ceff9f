"""The shuffle between stages on real Chromium workers: what every reduce gets equals what JSON
lines would bring it, saved stage outputs read back in their content type, the combiner, and a
damaged copy of a piece refused by its SHA-256 while another replica serves it."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from appliance.jobs import codecs
from appliance.jobs.codecs import JSON, key_string, partition_of
from tests.e2e.test_jobs_in_browsers import data_server, logs, output, save_and_run, texts, wait, wordcount_script
from tests.support import Appliance, run_cli

pytestmark = pytest.mark.e2e

__all__ = ["data_server", "texts"]  # module fixtures shared with test_jobs_in_browsers

RANKS = 2

# The map emits each generated record, flushing every `every` emits; each reduce gives its rank and
# every key's values as they arrived.
EMITS = """
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = RANKS;
execution.setInputFn(async function input() { return RECORDS; });
execution.addStage(new MapStage(async function map(x) {
  let n = 0;
  for (const [i, [k, v]] of x) {
    context.emit(k, v);
    if (++n % EVERY === 0) await context.flush();
  }
  await context.onComplete();
}));
execution.addStage(new ReduceStage(async function reduce(keyToValues) {
  for (const key in keyToValues) context.emit(key, {rank: context.getRank(), values: keyToValues[key]});
  await context.onComplete();
}));
execution.start(jobRunner);
"""

text = st.text(max_size=8) | st.sampled_from(["", "é", "😀", "\ud800", "y" * 20_000])
scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False)
values = st.recursive(
    scalars | text, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
)
keys = text | st.integers(-5, 5) | st.sampled_from([None, True, 1.5, [1, "a"], {"k": 1}])


@pytest.fixture(scope="module")
def appliance(tmp_path_factory, data_server):
    server = Appliance(
        tmp_path_factory.mktemp("shuffle") / "data", env={"PEERMR_FETCH_ORIGINS": data_server.origin}
    ).start()
    yield server
    server.stop()


def expected_reduces(records: list) -> dict:
    """What each reduce gets through JSON lines: the input function's array goes to the ranks in
    contiguous chunks (the first ones a record longer), each map emits its chunk in order, and a key
    goes to the rank its FNV-1a hash names."""
    through_json = codecs.decode(JSON, codecs.encode(JSON, records))
    found: dict[str, dict] = {}
    for k, v in through_json:  # rank 0's chunk first: the order a reduce sees its inputs in
        name = key_string(k)
        found.setdefault(name, {"rank": partition_of(name, RANKS), "values": []})["values"].append(v)
    return found


@settings(
    max_examples=4,
    derandomize=True,  # the same runs in every suite: the V8 property tests explore
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(st.tuples(keys, values), max_size=40), st.integers(1, 7))
@example([("a", 1), ("b", "x" * 20_000), ("a", {"n": [1, None, "é"]}), (3, -0.5), ("3", True), ("", "")], 2)
@example([("\ud800", 5.034204853228526e16), ("ቶÊ\U0004697b'P\x12e\x85\u2028", None)], 1)
def test_every_reduce_gets_what_json_lines_would_bring_it(api, workers, records, every):
    script = EMITS.replace("RANKS", str(RANKS)).replace("EVERY", str(every))
    script = script.replace("RECORDS", json.dumps([list(r) for r in records]))
    run_id = save_and_run(api, "shuffle-property", script)
    run = wait(api, run_id)
    assert run["state"] == "succeeded", run["reason"] + logs(api, run_id)[-2000:]
    # Read as the browser wrote it: lines split at "\n" only, integers past 2**53 as doubles.
    response = api.get(f"/runs/{run_id}/output", params={"group": "A"})
    assert response.status_code == 200, response.text
    assert dict(codecs.decode(JSON, response.content)) == expected_reduces(records)


def saved(api, run_id: int, stage: str) -> tuple[str, list[tuple[str, str]]]:
    """The runs bucket, and (key, content type) of the run's saved objects of a stage."""
    bucket = next(b["name"] for b in api.get("/buckets").json() if b["name"].startswith("peermr-runs-"))
    listed = api.get(f"/buckets/{bucket}/objects", params={"prefix": f"run-{run_id}/A/{stage}/"}).json()
    return bucket, [(o["key"], o["content_type"]) for o in listed]


def test_saved_stage_outputs_read_back_as_json_lines(appliance, api, workers, token, texts, data_server, tmp_path):
    run_id = save_and_run(api, "wordcount-saved", wordcount_script(data_server.origin, workers=RANKS))
    run = wait(api, run_id)
    assert run["state"] == "succeeded", run["reason"] + logs(api, run_id)[-2000:]
    bucket, objects = saved(api, run_id, "stage-1")
    assert [t for _, t in objects] == ["application/json"] * RANKS
    words: Counter = Counter()
    for key, _ in objects:
        response = api.get(f"/buckets/{bucket}/objects/{key}")
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("application/json")
        for line in response.text.splitlines():
            word, one = json.loads(line)
            assert one == 1
            words[word] += 1
    assert words == Counter(w for t in texts for w in t.split())
    # The CLI reads the same JSON lines.
    key = objects[0][0]
    got = run_cli("fs", "get", f"{bucket}/{key}", "-", "--server", appliance.url, "--token", token)
    assert got.returncode == 0, got.stderr
    assert got.stdout == api.get(f"/buckets/{bucket}/objects/{key}").text
    assert all(json.loads(line)[1] == 1 for line in got.stdout.splitlines())


def test_the_combiner_gives_the_same_counts_with_a_record_per_word(api, workers, texts, data_server):
    script = wordcount_script(data_server.origin, workers=RANKS).replace(
        "execution.addStage(new ReduceStage(async function reduce(keyToValues) {",
        "const reduce = new ReduceStage(async function reduce(keyToValues) {",
    )
    script = script.replace(
        "}));\n\nexecution.start", "});\nreduce.combine = true;\nexecution.addStage(reduce);\n\nexecution.start"
    )
    assert "reduce.combine = true" in script
    run_id = save_and_run(api, "wordcount-combined", script)
    run = wait(api, run_id)
    assert run["state"] == "succeeded", run["reason"] + logs(api, run_id)[-2000:]
    counts = Counter(w for t in texts for w in t.split())
    assert dict(output(api, run_id)) == dict(counts)
    # Each map task sent one record per word it saw: its counts, not a (word, 1) per occurrence.
    bucket, objects = saved(api, run_id, "stage-1")
    lines = [
        json.loads(line) for key, _ in objects for line in api.get(f"/buckets/{bucket}/objects/{key}").text.splitlines()
    ]
    [maps] = [s["total"] for s in run["progress"] if s["stage"] == 0]
    assert len(lines) <= maps * len(counts) < sum(counts.values())
    assert sum(n for _, n in lines) == sum(counts.values())


# One rank: the input, the map and the reduce run in the same tab. The map leaves what a task can
# leave behind on the global object: a new global, a replaced one, a timer that would change globals
# and a registered update function; the reduce looks for each after the timer's time.
GLOBALS = """
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 1;
execution.setInputFn(async function input() { return ['a']; });
execution.addStage(new MapStage(async function map(x) {
  self.leftOver = 'from the map';
  self.atob = () => 'replaced';
  setInterval(() => { self.ticks = (self.ticks || 0) + 1; }, 10);
  context.ps.register('twice', (value, delta) => value.map((v, i) => v + 2 * delta[i]));
  for (const [i, v] of x) context.emit(v, typeof leftOver);
  await context.onComplete();
}));
execution.addStage(new ReduceStage(async function reduce(keyToValues) {
  await new Promise(resolve => setTimeout(resolve, 100));
  let registered = true;
  try {
    await context.ps.update('k', new Float64Array([1]), 'twice');
  } catch (e) {
    registered = !/no update function twice/.test(e.message);
  }
  for (const key in keyToValues) {
    context.emit(key, [keyToValues[key][0], typeof self.leftOver, atob('YQ=='), typeof self.ticks, registered]);
  }
  await context.onComplete();
}));
execution.start(jobRunner);
"""

# The URLs of the Web Workers a page started since the last call.
STARTED_WORKERS = """() => {
  if (window.startedWorkers === undefined) {
    window.startedWorkers = [];
    const Started = window.Worker;
    window.Worker = class extends Started {
      constructor(url, ...rest) { super(url, ...rest); window.startedWorkers.push(String(url)); }
    };
  }
  return window.startedWorkers.splice(0);
}"""


def test_each_task_gets_fresh_globals_in_a_sandbox_it_shares_with_the_runs_last_task(api, workers):
    for tab in workers.tabs:
        tab.evaluate(STARTED_WORKERS)
    job = api.post("/jobs", json={"name": "fresh-globals", "script": GLOBALS}).json()["id"]
    for attempt in range(2):
        run_id = api.post(f"/jobs/{job}/runs", json={}).json()["id"]
        run = wait(api, run_id)
        assert run["state"] == "succeeded", run["reason"] + logs(api, run_id)[-2000:]
        assert output(api, run_id) == [["a", ["string", "undefined", "a", "undefined", False]]]
        # Three tasks in one tab, in fewer Web Workers started from the run's script: one served the
        # next task, or two when the first said it could only after the input task had started one
        # ahead; none once the tab has a warm sandbox, which its first run leaves it (idle tabs start one).
        started = [url for tab in workers.tabs for url in tab.evaluate(STARTED_WORKERS)]
        own = [url for url in started if url.startswith(f"/worker/runs/{run_id}/")]
        assert len(own) < 3, started
        if attempt == 1:
            assert own == [], started


CORRUPT = """
async ([sha]) => {
  const db = await new Promise((resolve, reject) => {
    const req = indexedDB.open(`peermr-blobs-${window.peermrWorker.workerId}`);
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
  const store = db.transaction('blobs', 'readwrite').objectStore('blobs');
  const blob = await new Promise(resolve => { const r = store.get(sha); r.onsuccess = () => resolve(r.result); });
  if (!blob) return false;
  const bytes = new Uint8Array(await blob.arrayBuffer());
  bytes[bytes.length >> 1] ^= 0xff;
  const tx = db.transaction('blobs', 'readwrite');
  tx.objectStore('blobs').put(new Blob([bytes]), sha);
  await new Promise(resolve => { tx.oncomplete = resolve; });
  return true;
}
"""


def test_a_damaged_copy_of_a_piece_is_refused_and_another_replica_serves_it(
    api, workers, texts, data_server, appliance
):
    """Last in the module: it closes a tab."""
    run_id = save_and_run(api, "wordcount-damaged", wordcount_script(data_server.origin, workers=RANKS))
    run = wait(api, run_id)
    assert run["state"] == "succeeded", run["reason"] + logs(api, run_id)[-2000:]
    bucket, objects = saved(api, run_id, "stage-1")
    # A piece a reduce copied is held by its map's tab and the reduce's: damage one copy.
    status = [api.get(f"/objects-status/{bucket}/{key}").json() for key, _ in objects]
    piece, key = next((b, s["key"]) for s in status for b in s["blobs"] if len(b["replicas"]) >= 2)
    expected = api.get(f"/buckets/{bucket}/objects/{key}").text
    tabs = {t.evaluate("window.peermrWorker.workerId"): t for t in workers.tabs}
    # The appliance asks the holders in the order the status lists them: damage the first.
    first, second = piece["replicas"][:2]
    damaged, intact = tabs[first], tabs[second]
    assert damaged.evaluate(CORRUPT, [piece["sha256"]])
    # The damaged copy is refused by its hash, and the other serves the piece.
    assert api.get(f"/buckets/{bucket}/objects/{key}").text == expected
    assert f"{first} sent bytes that do not match blob {piece['sha256']}" in appliance.log()

    # The damaged copy was forgotten and dropped, and the placement loop copies the piece again from
    # the intact one: losing the intact tab then loses nothing.
    def holders() -> set[str]:
        status = api.get(f"/objects-status/{bucket}/{key}").json()
        return set(next(b for b in status["blobs"] if b["sha256"] == piece["sha256"])["replicas"])

    deadline = time.monotonic() + 120
    while not holders() - {second}:
        assert time.monotonic() < deadline, f"the piece was not copied again: {holders()}"
        time.sleep(0.5)
    workers.close(intact)
    assert api.get(f"/buckets/{bucket}/objects/{key}").text == expected
