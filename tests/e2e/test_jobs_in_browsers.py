"""Map-reduce jobs on real Chromium workers, end to end: CLI or API -> queue -> browsers -> output.

Four worker tabs (one browser, a context each, so each has its own cookies and IndexedDB) run
the jobs; a small HTTP server on another origin serves the corpus with CORS, as a data server
an admin allowed (PEERMR_FETCH_ORIGINS) would.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance, free_port, run_cli, save_and_run
from tests.support import wait_for_run as wait

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
WORDS = ["alpha", "beta", "gamma", "delta", "épsilon", "zeta", "eta", "théta", "iota", "kappa", "lambda", "mu"]
PARTS = 4


def corpus(seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [
        "\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12))) for _ in range(400))
        for _ in range(PARTS)
    ]


class CorpusServer(ThreadingHTTPServer):
    def __init__(self, files: dict[str, bytes]):
        self.files = files

        class Handler(BaseHTTPRequestHandler):
            def do_GET(handler):  # noqa: N805
                body = files.get(handler.path)
                handler.send_response(200 if body is not None else 404)
                handler.send_header("Access-Control-Allow-Origin", "*")
                kind = "application/wasm" if handler.path.endswith(".wasm") else "text/plain; charset=utf-8"
                handler.send_header("Content-Type", kind)
                handler.send_header("Content-Length", str(len(body or b"")))
                handler.end_headers()
                handler.wfile.write(body or b"")

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", free_port()), Handler)
        self.origin = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def texts():
    return corpus()


@pytest.fixture(scope="module")
def data_server(texts):
    files = {f"/part-{i}.txt": t.encode() for i, t in enumerate(texts)}
    files["/add.wasm"] = (ROOT / "static/examples/add.wasm").read_bytes()
    server = CorpusServer(files)
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def appliance(tmp_path_factory, data_server):
    server = Appliance(
        tmp_path_factory.mktemp("jobs") / "data", env={"PEERMR_FETCH_ORIGINS": data_server.origin}
    ).start()
    yield server
    server.stop()


def output(api: httpx.Client, run_id: int, group: str = "A") -> list:
    response = api.get(f"/runs/{run_id}/output", params={"group": group})
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines()]


def logs(api: httpx.Client, run_id: int) -> str:
    return api.get(f"/runs/{run_id}/logs").text


def wordcount_script(origin: str, workers: int = 4) -> str:
    script = (EXAMPLES / "wordcount.js").read_text()
    script = script.replace("/static/examples/corpus", origin)
    return script.replace("execution.workerCount = 4;", f"execution.workerCount = {workers};")


def test_word_count_with_the_cli_equals_counter(appliance, workers, token, texts, data_server, tmp_path):
    script = tmp_path / "wordcount.js"
    script.write_text(wordcount_script(data_server.origin))
    out = tmp_path / "out.jsonl"
    try:
        result = run_cli(
            "job", "run", str(script), "--server", appliance.url, "--token", token, "--wait", "--output", str(out)
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the CLI did not finish: {exc.stderr}\n{appliance.log()[-6000:]}") from None
    assert result.returncode == 0, result.stderr + appliance.log()[-3000:]
    assert "succeeded" in result.stderr
    counted = dict(json.loads(line) for line in out.read_text().splitlines())
    assert counted == dict(Counter(w for t in texts for w in t.split()))


def test_four_stage_character_count_equals_python(api, workers):
    run_id = save_and_run(api, "charcount", (EXAMPLES / "charcount.js").read_text())
    run = wait(api, run_id)
    assert run["state"] == "succeeded", run["reason"] + logs(api, run_id)[-2000:]
    lines = [f"line {i}: the quick brown fox jumps over the lazy dog" for i in range(1000)]
    expected = Counter()
    for ch in "".join(lines):
        cls = "letter" if ch.isalpha() else "digit" if ch.isdigit() else "space" if ch.isspace() else "other"
        expected[cls] += 1
    assert dict(output(api, run_id)) == dict(expected)
    # Input, then four stages: the progress shows each of them complete.
    assert [p["stage"] for p in run["progress"]] == [-1, 0, 1, 2, 3]
    assert all(p["done"] == p["total"] for p in run["progress"])


def intermediate_blobs(api: httpx.Client, run_id: int, stage: int) -> int:
    bucket = next(b["name"] for b in api.get("/buckets").json() if b["name"].startswith("peermr-runs-"))
    objects = api.get(f"/buckets/{bucket}/objects", params={"prefix": f"run-{run_id}/A/stage-{stage}/"}).json()
    return sum(o["blobs"] for o in objects)


def test_flush_gives_the_same_answer_with_more_blobs(api, workers):
    # The example flushes every 10,000 emits; its map's chunks emit fewer each, so here every 1,000.
    example = (EXAMPLES / "charcount-flush.js").read_text()
    flushing = example.replace("% 10000 === 0", "% 1000 === 0")
    assert flushing != example
    plain = flushing.replace("if (++emitted % 1000 === 0) await context.flush();", "")
    with_flush = save_and_run(api, "flush", flushing)
    without = save_and_run(api, "no-flush", plain)
    a, b = wait(api, with_flush), wait(api, without)
    assert a["state"] == b["state"] == "succeeded", a["reason"] + b["reason"]
    assert sorted(output(api, with_flush)) == sorted(output(api, without))
    lines = [f"row {i} of the sample text" for i in range(2000)]
    assert dict(output(api, with_flush)) == dict(Counter("".join(lines)))
    assert intermediate_blobs(api, with_flush, 1) > intermediate_blobs(api, without, 1)


FORMATS = """
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 2;
execution.setInputFn(async function input() { return [1, 2, 3, 4, 5, 6]; });
const s = new MapStage(async function map(x) {
  for (const [i, n] of x) {
    context.emit('k' + n, n * 1.5);
    context.emit('s' + n, 'text, "quoted" ' + n);
    context.emit(n, n % 2 === 0);
  }
  await context.onComplete();
});
s.contentType = 'CONTENT_TYPE';
execution.addStage(s);
execution.addStage(new ReduceStage(async function reduce(kv) {
  for (const k in kv) context.emit(k, kv[k][0]);
  await context.onComplete();
}));
execution.start(jobRunner);
"""


@pytest.mark.parametrize("content_type", ["text/csv", "application/bson"])
def test_csv_and_bson_stages_round_trip_keys_and_values(api, workers, content_type):
    run_id = save_and_run(api, f"formats-{content_type}", FORMATS.replace("CONTENT_TYPE", content_type))
    run = wait(api, run_id)
    assert run["state"] == "succeeded", run["reason"] + logs(api, run_id)[-2000:]
    expected = {}
    for n in range(1, 7):
        expected[f"k{n}"] = n * 1.5
        expected[f"s{n}"] = f'text, "quoted" {n}'
        expected[str(n)] = n % 2 == 0  # reduce keys are strings (object keys)
    assert dict(output(api, run_id)) == expected


def test_two_groups_give_outputs_a_and_b(api, workers):
    script = (EXAMPLES / "charcount-flush.js").read_text().replace("workerCount = 4", "workerCount = 2")
    script = script.replace("execution.workerCount = 2;", "execution.workerCount = 2;\nexecution.groupCount = 2;")
    run_id = save_and_run(api, "groups", script)
    run = wait(api, run_id)
    assert run["state"] == "succeeded", run["reason"]
    assert {p["group"] for p in run["progress"]} == {"A", "B"}
    assert output(api, run_id, "A") and sorted(output(api, run_id, "A")) == sorted(output(api, run_id, "B"))
    assert api.get(f"/runs/{run_id}/output", params={"group": "C"}).status_code == 404


SLOW_COUNT = """
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 2;
execution.setInputFn(async function input() {
  const lines = [];
  for (let i = 0; i < 200; i++) lines.push('abc ' + i);
  return lines;
});
execution.addStage(new MapStage(async function map(x) {
  for (const [, line] of x) for (const ch of line) context.emit(ch, 1);
  context.log('map waiting');
  await new Promise(r => setTimeout(r, %(map_ms)d));
  await context.onComplete();
}));
execution.addStage(new ReduceStage(async function reduce(kv) {
  context.log('reduce waiting');
  await new Promise(r => setTimeout(r, %(reduce_ms)d));
  for (const k in kv) context.emit(k, kv[k].reduce((a, b) => a + b, 0));
  await context.onComplete();
}));
execution.start(jobRunner);
"""


def test_workers_closed_mid_map_and_mid_reduce_still_give_the_right_answer(api, workers):
    run_id = save_and_run(api, "churn", SLOW_COUNT % {"map_ms": 4000, "reduce_ms": 4000})
    expected = Counter("".join(f"abc {i}" for i in range(200)))

    def close_one_running(kind: str) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if f"{kind} waiting" in logs(api, run_id):
                busy = workers.busy()
                if busy:
                    workers.close(busy[0])
                    return
            time.sleep(0.2)
        raise AssertionError(f"no {kind} task seen running")

    close_one_running("map")
    workers.add(1)  # keep the fleet at four
    close_one_running("reduce")
    workers.add(1)
    run = wait(api, run_id)
    assert run["state"] == "succeeded", run["reason"] + logs(api, run_id)[-3000:]
    assert dict(output(api, run_id)) == dict(expected)
    assert logs(api, run_id).count("disconnected") >= 2


def test_a_map_closed_after_the_reduces_began_runs_again_and_they_take_its_new_output(api, workers):
    # Rank 0's map ends at once and its reduce starts, streaming; the others' maps take a while.
    script = SLOW_COUNT % {"map_ms": 6000, "reduce_ms": 0}
    script = script.replace("workerCount = 2", "workerCount = 3").replace(
        "await new Promise(r => setTimeout(r, 6000));",
        "await new Promise(r => setTimeout(r, context.getRank() ? 6000 : 0));",
    )
    # One map task per rank, so that rank 1's map is on rank 1's browser.
    script = script.replace(
        "execution.addStage(new MapStage(async function map(x) {", "const map = new MapStage(async function map(x) {"
    )
    script = script.replace(
        "}));\nexecution.addStage(new ReduceStage",
        "});\nmap.chunks = 'rank';\nexecution.addStage(map);\nexecution.addStage(new ReduceStage",
    )
    assert "map.chunks = 'rank'" in script
    run_id = save_and_run(api, "streaming-churn", script)
    expected = Counter("".join(f"abc {i}" for i in range(200)))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run = api.get(f"/runs/{run_id}").json()
        stages = {s["stage"]: s for s in run["progress"]}
        lines = [json.loads(line) for line in logs(api, run_id).splitlines()]
        slow = [line["source"] for line in lines if line["text"] == "map waiting" and line["rank"] == 1]
        if stages[1]["running"] >= 1 and stages[0]["done"] < 3 and slow:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"no reduce started while maps ran: {run['progress']}")
    # The browser of rank 1's map goes away: the map runs again on a new tab, and every reduce gets its output.
    [tab] = [t for t in workers.tabs if t.evaluate("window.peermrWorker.workerId") == slow[0]]
    workers.close(tab)
    workers.add(1)  # keep the fleet at four
    run = wait(api, run_id)
    assert run["state"] == "succeeded", run["reason"] + logs(api, run_id)[-3000:]
    assert dict(output(api, run_id)) == dict(expected)
    assert f"worker {slow[0]} (rank 1 of group A) disconnected" in logs(api, run_id)


def test_webassembly_job_loads_its_binary_from_the_appliance_or_an_allowed_origin(api, workers, data_server):
    # The example as it is, its binary from the appliance; then the same binary from an allowed origin.
    example = (EXAMPLES / "wasm-sum.js").read_text()
    for script in (example, example.replace("/static/examples/add.wasm", f"{data_server.origin}/add.wasm")):
        run_id = save_and_run(api, "wasm", script)
        run = wait(api, run_id)
        assert run["state"] == "succeeded", run["reason"] + logs(api, run_id)[-2000:]
        assert output(api, run_id) == [["sum", sum(range(1, 1001))]]
    # A binary from an origin that is not allowed is refused when the run is asked for.
    script = example.replace("/static/examples/add.wasm", "https://data.example.com/add.wasm")
    elsewhere = api.post("/jobs", json={"name": "wasm-elsewhere", "script": script})
    refused = api.post(f"/jobs/{elsewhere.json()['id']}/runs", json={})
    assert refused.status_code == 400 and "https://data.example.com/add.wasm" in refused.json()["detail"]


FORBIDDEN = """
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 1;
execution.setInputFn(async function input() { return [1]; });
execution.addStage(new MapStage(async function map(x) {
  %s
  await context.onComplete();
}));
execution.start(jobRunner);
"""


def test_fetch_to_an_origin_not_allowed_fails_the_task_with_a_clear_log_line(api, workers):
    run_id = save_and_run(api, "exfiltrate", FORBIDDEN % "await fetch('http://127.0.0.1:9/steal');")
    run = wait(api, run_id)
    assert run["state"] == "failed"
    assert "fetch to http://127.0.0.1:9 is not allowed by this appliance" in run["reason"]
    assert "fetch to http://127.0.0.1:9 is not allowed" in logs(api, run_id)


THROWS = """const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 1;
execution.setInputFn(async function input() { return [1]; });
execution.addStage(new MapStage(async function map(x) {
  context.emit('k', 1);
  await context.onComplete();
}));
execution.addStage(new ReduceStage(async function reduce(keyToValues) {
  console.error(new RangeError('logged, not thrown'));
  function check(n) {
    if (n > 0) throw new Error('no ' + n);
  }
  check(1);
  await context.onComplete();
}));
execution.start(jobRunner);
"""


def test_a_stack_trace_names_the_line_of_the_job_script_and_its_stage(api, workers, appliance, token):
    # Chromium reports where the served sandbox script threw; the appliance names job.js instead.
    run_id = save_and_run(api, "throws", THROWS)
    run = wait(api, run_id)
    assert run["state"] == "failed"
    # The throw is on line 11, column 22; check() was called from line 13, column 3.
    assert "no 1 (at job.js:11:22, in stage 2 (reduce))" in run["reason"]
    text = logs(api, run_id)
    assert "at check (job.js:11:22, in stage 2 (reduce))" in text
    assert "(job.js:13:3, in stage 2 (reduce))" in text
    # What the job logged itself: the RangeError made on line 9, column 17.
    assert "RangeError: logged, not thrown" in text and "(job.js:9:17, in stage 2 (reduce))" in text
    assert "/sandbox.js:" not in text
    status = run_cli("job", "status", str(run_id), "--server", appliance.url, "--token", token)
    assert "job.js:11:22, in stage 2 (reduce)" in status.stdout + status.stderr


def test_import_scripts_from_job_code_is_refused(api, workers):
    run_id = save_and_run(api, "imports", FORBIDDEN % "importScripts('/static/worker/codecs.js');")
    run = wait(api, run_id)
    assert run["state"] == "failed"
    assert "importScripts is not available to job code" in run["reason"]


def test_a_syntax_error_is_refused_at_save_with_its_line(api):
    response = api.post(
        "/jobs", json={"name": "broken", "script": "const e = new JobExecution('pmrfs');\nfunction (\n"}
    )
    assert response.status_code == 400
    body = response.json()
    assert body["extra"]["line"] == 2
    assert re.search(r"line 2", body["detail"])


def test_storage_type_s3_reads_and_writes_the_accounts_bucket(appliance, api, workers, s3):
    from tests.s3_server import REGION

    script = (EXAMPLES / "charcount-flush.js").read_text().replace("storageType = 'pmrfs'", "storageType = 's3'")
    job = api.post("/jobs", json={"name": "s3-count", "script": script}).json()
    refused = api.post(f"/jobs/{job['id']}/runs", json={})
    assert refused.status_code == 400 and "Cloud Data" in refused.json()["detail"]

    bucket = s3.create_bucket("job-data")
    admin = appliance.client()
    admin.login(ADMIN_EMAIL, ADMIN_PASSWORD)
    saved = admin.form(
        "/ui/cloud",
        {
            "provider": "s3",
            "endpoint_url": s3.url,
            "region": REGION,
            "bucket": bucket,
            "access_key_id": "test-key",
            "secret_access_key": "test-secret",
        },
    )
    assert saved.status_code in (200, 303), saved.text
    refused = api.post(f"/jobs/{job['id']}/runs", json={})
    assert refused.status_code == 400 and "CORS" in refused.json()["detail"]
    admin.form("/ui/cloud/cors")

    run = api.post(f"/jobs/{job['id']}/runs", json={})
    assert run.status_code == 201, run.text
    done = wait(api, run.json()["id"])
    assert done["state"] == "succeeded", done["reason"] + logs(api, done["id"])[-2000:]
    lines = [f"row {i} of the sample text" for i in range(2000)]
    assert dict(output(api, done["id"])) == dict(Counter("".join(lines)))
    keys = [o["Key"] for o in s3.client().list_objects_v2(Bucket=bucket).get("Contents", [])]
    prefix = f"peermr/runs/{done['id']}/A/"
    # The output stays in the bucket; intermediates too (saveIntermediateOutput defaults to true).
    assert any(k.startswith(prefix + "stage-2/") for k in keys)
    assert any(k.startswith(prefix + "stage-1/") for k in keys)
    # Nothing of the run went through PMRFS.
    buckets = api.get("/buckets").json()
    runs_bucket = next((b["name"] for b in buckets if b["name"].startswith("peermr-runs-")), None)
    if runs_bucket:
        objects = api.get(f"/buckets/{runs_bucket}/objects", params={"prefix": f"run-{done['id']}/"}).json()
        assert objects == []
