"""Tasks in real Chromium without the appliance's engine: the worker page's TaskRunner
(static/worker/tasks.js) runs sandbox scripts shaped like the appliance's (importScripts
sandbox.js, seal, define) in the appliance's sandbox frame, under the same Content-Security-Policy,
with the tab's real BlobStore. A small HTTP server stands in for the appliance: it serves static/
(readable from any origin, as the appliance's), the sandbox scripts and frames, an S3-like bucket
and an echo endpoint; a second one is another origin."""

from __future__ import annotations

import base64
import json
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from appliance.jobs import codecs
from tests.support import QuietHandler, reply_sandbox_frame, sandbox_frame_header, serve_in_thread

pytestmark = pytest.mark.e2e

STATIC = Path(__file__).resolve().parents[2] / "static"
TYPES = {".js": "text/javascript", ".css": "text/css", ".wasm": "application/wasm"}
# (module (func (export "add") (param i32 i32) (result i32) local.get 0 local.get 1 i32.add))
ADD_WASM = bytes.fromhex("0061736d0100000001070160027f7f017f030201000707010361646400000a09010700200020016a0b")

HARNESS = """<!doctype html>
<title>task harness</title>
<script type="module">
import {BlobStore} from '/static/worker/blobstore.js';
import {TaskRunner} from '/static/worker/tasks.js';
import {sha256Hex} from '/static/worker/sha256.js';

const store = await new BlobStore('e2e-' + crypto.randomUUID()).open();
const sent = [];
const busy = [];
const fromBase64 = text => Uint8Array.from(atob(text), c => c.charCodeAt(0)).buffer;
const toBase64 = buffer => {
  let binary = '';
  const bytes = new Uint8Array(buffer);
  for (let i = 0; i < bytes.length; i += 8192) binary += String.fromCharCode(...bytes.subarray(i, i + 8192));
  return btoa(binary);
};
let runner;
// The appliance's side of task-put-url: a URL of the test bucket.
function send(message) {
  sent.push(message);
  if (message.type === 'task-put-url') {
    const key = `${message.taskId}/${message.id}-${message.partition}`;
    setTimeout(() => runner.handle({type: 'task-put-url-reply', replyTo: message.id, url: `/s3/${key}`, key}));
  }
}
runner = new TaskRunner({getStore: () => store, send, onBusy: value => busy.push(value)});

window.harness = {
  sent, busy, runner,
  async put(text) {
    const bytes = fromBase64(text);
    const sha256 = await sha256Hex(bytes);
    await store.put(sha256, bytes);
    return {sha256, size: bytes.byteLength};
  },
  async get(sha256) {
    const bytes = await store.get(sha256);
    return bytes ? toBase64(bytes) : null;
  },
  messages: taskId => sent.filter(m => m.taskId === taskId),
  async run(assign) {
    await runner.handle(assign);
    for (;;) {
      const end = sent.find(m => m.taskId === assign.taskId && ['task-done', 'task-failed'].includes(m.type));
      if (end) return {end, messages: sent.filter(m => m.taskId === assign.taskId)};
      await new Promise(resolve => setTimeout(resolve, 20));
    }
  },
};
window.harnessReady = true;
</script>
"""


class Handler(QuietHandler):
    """The appliance's part: static files, sandbox scripts with their CSP, a bucket, an echo."""

    origin = ""
    scripts: dict[str, tuple[str, list[str]]] = {}  # name -> (script, extra connect-src origins)
    bucket: dict[str, bytes] = {}
    posts: list[str] = []
    ticks: Counter = Counter()

    def do_GET(self):
        url = urlsplit(self.path)
        path = url.path
        if path == "/harness":
            return self.reply(200, HARNESS.encode(), "text/html")
        if path.startswith("/static/"):
            file = (STATIC / path.removeprefix("/static/")).resolve()
            if STATIC in file.parents and file.is_file():
                return self.reply(200, file.read_bytes(), TYPES.get(file.suffix, "application/octet-stream"))
            return self.reply(404)
        if path.startswith("/runs/") and path.endswith("/sandbox.js"):
            name = path.split("/")[2]
            if name not in self.scripts:
                return self.reply(404)
            script, connect = self.scripts[name]
            return self.reply(200, script.encode(), "text/javascript", sandbox_frame_header(connect))
        if path == "/worker/sandbox.html":
            return reply_sandbox_frame(self, self.origin, url.query)
        if path.startswith("/s3/") and path[4:] in self.bucket:
            return self.reply(200, self.bucket[path[4:]], "application/octet-stream")
        if path == "/echo":
            cookie = self.headers.get("cookie") or ""
            return self.reply(200, json.dumps({"cookie": cookie}).encode(), "application/json")
        if path == "/tick":
            self.ticks[url.query] += 1
            return self.reply(200)
        if path == "/wasm/add.wasm":
            return self.reply(200, ADD_WASM, "application/wasm")
        return self.reply(404)

    def end_headers(self):
        self.send_header("access-control-allow-origin", "*")
        super().end_headers()

    def do_OPTIONS(self):
        methods = {"access-control-allow-methods": "GET, HEAD, PUT", "access-control-allow-headers": "*"}
        return self.reply(204, headers=methods)

    def do_PUT(self):
        path = urlsplit(self.path).path
        if not path.startswith("/s3/"):
            return self.reply(404)
        self.bucket[path[4:]] = self.rfile.read(int(self.headers["content-length"]))
        return self.reply(200)

    def do_POST(self):
        self.posts.append(self.path)
        return self.reply(200)


@pytest.fixture(scope="module")
def servers():
    """The stand-in appliance and a second origin."""
    main, origin = serve_in_thread(Handler)
    other, other_origin = serve_in_thread(Handler)
    Handler.origin = origin  # both serve the same scripts; only the main one is used for them
    yield origin, other_origin
    main.shutdown()
    other.shutdown()


def sandbox_script(stages: list[str], input_fn: str | None = None, scripts: tuple[str, ...] = ()) -> str:
    """What the appliance serves for a run: the runtime, the job's scripts, the seal, then the job."""
    return (
        f"importScripts('{Handler.origin}/static/worker/sandbox.js?v=e2e');\n"
        f"peermrSandbox.loadScripts({json.dumps(list(scripts))});\n"
        "peermrSandbox.seal();\n"
        f"peermrSandbox.define({{\ninput: {input_fn or 'null'},\nstages: [\n" + ",\n".join(stages) + "\n]});\n"
    )


class Harness:
    def __init__(self, page, origin: str):
        self.page = page
        self.origin = origin
        self.count = 0
        page.goto(f"{origin}/harness")
        page.wait_for_function("window.harnessReady === true")

    def job(self, name: str, stages: list[str], input_fn: str | None = None, connect: tuple[str, ...] = ()) -> str:
        Handler.scripts[name] = (sandbox_script(stages, input_fn), list(connect))
        return f"/runs/{name}/sandbox.js"

    def put(self, content_type: str, records) -> dict:
        data = base64.b64encode(codecs.encode(content_type, records)).decode()
        return self.page.evaluate("text => harness.put(text)", data)

    def blob(self, sha256: str) -> bytes | None:
        data = self.page.evaluate("sha => harness.get(sha)", sha256)
        return None if data is None else base64.b64decode(data)

    def run(self, script: str, kind: str = "map", **fields) -> tuple[dict, list[dict]]:
        self.count += 1
        task = {
            "type": "task-assign",
            "taskId": f"t{self.count}",
            "runId": "run-1",
            "script": script,
            "kind": kind,
            "stage": -1 if kind == "input" else 0,
            "group": "A",
            "rank": 0,
            "workerCount": 1,
            "partitioning": "chunks" if kind == "input" else "rank",
            "inputContentType": "application/json",
            "outputContentType": "application/json",
            "inputs": [],
            "wasm": {},
            "storage": "pmrfs",
            "workerTimeout": 3600,
            "fetchOrigins": [],
        } | fields
        result = self.page.evaluate("task => harness.run(task)", task)
        return result["end"], result["messages"]

    def records(self, content_type: str, outputs: list[dict]) -> list[tuple]:
        out = []
        for output in outputs:
            data = Handler.bucket[output["key"]] if "key" in output else self.blob(output["sha256"])
            assert data is not None and len(data) == output["size"]
            decoded = codecs.decode(content_type, data)
            assert len(decoded) == output["records"]
            out += decoded
        return out

    def ok(self, script: str, **fields) -> tuple[dict, list[dict]]:
        end, messages = self.run(script, **fields)
        assert end["type"] == "task-done", end
        return end, messages


@pytest.fixture
def harness(page, servers):
    return Harness(page, servers[0])


# Words that are also names of Object.prototype's properties are keys like any other.
LINES = [
    "the quick brown fox",
    "jumps over the lazy dog",
    "the dog sleeps",
    "a fox runs",
    "__proto__ constructor",
    "dog days",
    "the end",
]

WORD_COUNT_INPUT = f"async function input() {{ return {json.dumps(LINES)}; }}"
WORD_COUNT_MAP = """async function map(x) {
  let words = 0;
  for await (const [index, line] of x) {
    for (const word of line.split(/\\s+/)) if (word) { context.emit(word, 1); words++; }
  }
  console.log('rank', context.getRank(), 'of', context.getWorkerCount(), 'words', words);
  context.log({rank: context.getRank()});
  console.warn('careful');
  await context.onComplete();
}"""
WORD_COUNT_REDUCE = """async function reduce(keyToValues) {
  for (const word in keyToValues) context.emit(word, keyToValues[word].reduce((a, b) => a + b, 0));
}"""


def test_word_count_through_input_map_and_reduce(harness):
    script = harness.job("wordcount", [WORD_COUNT_MAP, WORD_COUNT_REDUCE], WORD_COUNT_INPUT)
    workers = 2

    # Input stage: the array keyed by index, in contiguous chunks (the first one longer).
    end, _ = harness.ok(script, kind="input", workerCount=workers)
    chunks = {o["partition"]: harness.records(codecs.JSON, [o]) for o in end["outputs"]}
    assert chunks == {0: list(enumerate(LINES[:4])), 1: list(enumerate(LINES[4:], 4))}
    assert end["emits"] == len(LINES)

    # Map stage, hash-partitioned for the reduce: the browser's partitions are Python's.
    map_outputs = []
    for rank in range(workers):
        inputs = [{"sha256": o["sha256"], "size": o["size"]} for o in end["outputs"] if o["partition"] == rank]
        done, messages = harness.ok(script, rank=rank, workerCount=workers, stage=0, partitioning="hash", inputs=inputs)
        for output in done["outputs"]:
            assert {codecs.partition_of(k, workers) for k, _ in harness.records(codecs.JSON, [output])} == {
                output["partition"]
            }
        map_outputs += done["outputs"]
        logs = [line for m in messages if m["type"] == "task-log" for line in m["lines"]]
        words = sum(len(line.split()) for _, line in chunks[rank])
        assert [(line["level"], line["text"]) for line in logs] == [
            ("info", f"rank {rank} of 2 words {words}"),
            ("info", f'{{"rank":{rank}}}'),
            ("warn", "careful"),
        ]
        assert all(abs(line["at"] / 1000 - time.time()) < 60 for line in logs)
        assert done["emits"] == words and done["cpuMs"] >= 0
        assert any(m["type"] == "task-progress" and m["emits"] > 0 for m in messages)

    # Reduce stage: every upstream output of its partition, grouped by key.
    counts: dict = {}
    for rank in range(workers):
        inputs = [{"sha256": o["sha256"], "size": o["size"]} for o in map_outputs if o["partition"] == rank]
        done, _ = harness.ok(script, kind="reduce", stage=1, rank=rank, workerCount=workers, inputs=inputs)
        assert {o["partition"] for o in done["outputs"]} <= {rank}
        for word, count in harness.records(codecs.JSON, done["outputs"]):
            assert word not in counts
            counts[word] = count
    assert counts == Counter(" ".join(LINES).split())
    assert harness.page.evaluate("harness.busy") == [True, False] * 5


def test_the_input_is_cut_in_proportion_to_the_ranks_shares(harness):
    """The appliance cuts the input in proportion to its browsers' speeds (task-assign ``shares``):
    contiguous pieces in rank order, then each rank's piece in its chunks as usual."""
    script = harness.job("shares", [WORD_COUNT_MAP, WORD_COUNT_REDUCE], WORD_COUNT_INPUT)

    def pieces(**fields) -> dict:
        end, _ = harness.ok(script, kind="input", workerCount=2, shares=[3, 1], **fields)
        return {o["partition"]: harness.records(codecs.JSON, [o]) for o in end["outputs"]}

    # 7 lines, 3:1 -> rank 0 the first floor(7 * 3 / 4) = 5.
    assert pieces() == {0: list(enumerate(LINES[:5])), 1: list(enumerate(LINES[5:], 5))}
    # In 2 chunks a rank (the first one longer): partition rank * 2 + chunk.
    in_chunks = pieces(chunks=2)
    assert in_chunks == {
        0: list(enumerate(LINES[:3])),
        1: list(enumerate(LINES[3:5], 3)),
        2: [(5, LINES[5])],
        3: [(6, LINES[6])],
    }


# A map that is slow in its first chunk (a split asked then arrives while it reads it), and one that
# reads its input as an array (it may read any record: it cannot stop early).
RANGE_MAP = """async function map(x) {
  for await (const [index, item] of x) {
    if (index === 0) context.progress();
    if (index === 0) await new Promise(resolve => setTimeout(resolve, 400));
    context.emit(String(index), item);
  }
  await context.onComplete();
}"""
ARRAY_MAP = """async function map(x) {
  context.progress();
  for (let i = 0; i < x.length; i++) {
    if (i === 0) await new Promise(resolve => setTimeout(resolve, 400));
    context.emit(String(x[i][0]), x[i][1]);
  }
}"""


# One that spins through its first record without awaiting anything (it says it has begun first):
# its page answers the split at once, and lets it into no chunk after.
SPINNING_MAP = """async function map(x) {
  for await (const [index, item] of x) {
    if (index === 0) { context.progress(); const end = Date.now() + 400; while (Date.now() < end) {} }
    context.emit(String(index), item);
  }
  await context.onComplete();
}"""


# One that has not started reading when the split comes, then reads x as an array: it sees the range
# up to the split only.
LATE_ARRAY_MAP = """async function map(x) {
  context.progress();
  await new Promise(resolve => setTimeout(resolve, 400));
  for (const [index, item] of x) context.emit(String(index), item);
}"""


@pytest.mark.parametrize("reads", ["for-await", "for-await-spinning", "as-an-array", "as-an-array-after-the-split"])
def test_a_range_stops_before_a_later_chunk_when_asked_unless_its_job_read_its_input_as_an_array(harness, reads):
    """A range's task (its inputs name their chunks) asked to split (task-split) while in its first
    chunk stops before the chunk asked for and says so (task-split-at); its output holds the chunks
    before it. A job that read its input other than with for await...of runs its whole range, and
    says so with the range's end; one that had read nothing yet sees only the records before the
    split, however it reads them."""
    maps = {
        "for-await": RANGE_MAP,
        "for-await-spinning": SPINNING_MAP,
        "as-an-array": ARRAY_MAP,
        "as-an-array-after-the-split": LATE_ARRAY_MAP,
    }
    script = harness.job(f"range-{reads}", [maps[reads]])
    inputs = [harness.put(codecs.JSON, [(i, f"item {i}")]) | {"chunk": i} for i in range(4)]
    task = {
        "type": "task-assign",
        "taskId": f"range-{reads}",
        "runId": "run-1",
        "script": script,
        "kind": "map",
        "stage": 0,
        "group": "A",
        "rank": 0,
        "workerCount": 1,
        "partitioning": "hash",
        "inputContentType": "application/json",
        "outputContentType": "application/json",
        "inputs": inputs,
        "wasm": {},
        "storage": "pmrfs",
        "workerTimeout": 3600,
        "fetchOrigins": [],
    }
    result = harness.page.evaluate(
        """async task => {
          const done = harness.run(task);
          // The split comes once the job has begun (its first progress: a record reached, or a call).
          while (!harness.messages(task.taskId).some(m => m.type === 'task-progress')) {
            await new Promise(resolve => setTimeout(resolve, 5));
          }
          await harness.runner.handle({type: 'task-split', taskId: task.taskId, before: 2});
          return await done;
        }""",
        task,
    )
    end, messages = result["end"], result["messages"]
    assert end["type"] == "task-done", end
    answers = [m["chunk"] for m in messages if m["type"] == "task-split-at"]
    kept = 4 if reads == "as-an-array" else 2
    assert answers == [kept]
    assert end["stop"] == kept  # said again with its task-done, for an appliance that missed the answer
    assert sorted(int(k) for k, _ in harness.records(codecs.JSON, end["outputs"])) == list(range(kept))


FLUSH_MAP = """async function map(x) {
  for (const [k, v] of x) {
    context.emit(k, v);
    if (k % 10 === 9) await context.flush();
  }
}"""
NO_FLUSH_MAP = "async function map(x) { for (const [k, v] of x) context.emit(k, v); }"
MANY_BLOBS_MAP = """async function map(x) {
  for (let i = 0; i < 4097; i++) { context.emit(i, i); context.flush(); }
}"""
BIG_MAP = """async function map(x) {
  const mib = 'x'.repeat(1 << 20);
  for (let i = 0; i < 40; i++) context.emit(i, mib);
  await context.onComplete();
}"""


def test_flush_cuts_more_blobs_with_the_same_records(harness):
    script = harness.job("flush", [FLUSH_MAP, NO_FLUSH_MAP, BIG_MAP, MANY_BLOBS_MAP])
    records = [(i, {"n": i, "s": "é" * (i % 3)}) for i in range(95)]
    inputs = [harness.put(codecs.JSON, records)]

    flushed, _ = harness.ok(script, inputs=inputs)
    whole, _ = harness.ok(script, inputs=inputs, stage=1)
    assert [o["records"] for o in flushed["outputs"]] == [10] * 9 + [5]
    assert [o["records"] for o in whole["outputs"]] == [95]
    assert harness.records(codecs.JSON, flushed["outputs"]) == harness.records(codecs.JSON, whole["outputs"]) == records
    assert flushed["emits"] == whole["emits"] == 95

    # Past 32 MiB buffered the runtime flushes by itself.
    big, _ = harness.ok(script, stage=2)
    assert [o["records"] for o in big["outputs"]] == [32, 8]  # 32 records of 1 MiB and a bit
    assert sum(o["size"] for o in big["outputs"]) > 40 * 2**20

    # More blobs than one task-done may name fail the task with a reason.
    end, _ = harness.run(script, stage=3)
    assert end["type"] == "task-failed"
    assert end["error"] == "too many output blobs (more than 4096) for one task: flush less often"


VALUES_REDUCE = """async function reduce(keyToValues) {
  for (const key in keyToValues) context.emit(key, keyToValues[key]);
}"""


def streamed(harness, script: str, pieces: dict[int, list[dict]], first: list[int], then: list[int], **fields) -> dict:
    """Runs a reduce of four ranks' pieces as the appliance streams them: the task-assign names the
    pieces of the maps in ``first``, then one task-input per map of ``then``, in that order, each a
    little later (the sandbox decodes the earlier ones meanwhile). Returns its end."""
    harness.count += 1
    task_id = f"t{harness.count}"
    assign = {
        "type": "task-assign",
        "taskId": task_id,
        "runId": "run-1",
        "script": script,
        "kind": "reduce",
        "stage": 0,
        "group": "A",
        "rank": 0,
        "workerCount": 4,
        "partitioning": "rank",
        "inputContentType": "application/json",
        "outputContentType": "application/json",
        "inputs": [{**piece, "producer": rank} for rank in first for piece in pieces[rank]],
        "awaiting": then,
        "wasm": {},
        "storage": "pmrfs",
        "workerTimeout": 3600,
        "fetchOrigins": [],
    } | fields
    later = [{"type": "task-input", "taskId": task_id, "producer": rank, "inputs": pieces[rank]} for rank in then]
    return harness.page.evaluate(
        """async ([assign, later]) => {
          const ended = harness.run(assign);
          for (const message of later) {
            await new Promise(resolve => setTimeout(resolve, 30));
            await harness.runner.handle(message);
          }
          return (await ended).end;
        }""",
        [assign, later],
    )


def test_a_streaming_reduce_gets_its_values_in_map_order_whatever_order_the_maps_finish_in(harness):
    script = harness.job("streaming", [VALUES_REDUCE])
    # Rank 1 cut two pieces, rank 2 wrote nothing for this partition; keys repeat across ranks.
    pieces = {
        0: [harness.put(codecs.JSON, [("a", 0), ("b", {"from": 0}), (7, "seven")])],
        1: [harness.put(codecs.JSON, [("b", 1), ("c", 1)]), harness.put(codecs.JSON, [("a", 1.5), ("a", "1b")])],
        2: [],
        3: [harness.put(codecs.JSON, [("c", 3), ("a", 3), ("__proto__", 3), (2, "two")])],
    }
    every = [piece for rank in range(4) for piece in pieces[rank]]
    whole, _ = harness.ok(script, kind="reduce", stage=0, workerCount=4, inputs=every)
    expected = harness.records(codecs.JSON, whole["outputs"])
    assert dict(expected)["a"] == [0, 1.5, "1b", 3] and dict(expected)["b"] == [{"from": 0}, 1]

    # Whatever came with the task and whatever order the others follow in, the job sees the same.
    for first, then in [([1], [3, 0, 2]), ([3], [2, 1, 0]), ([0, 2], [3, 1]), ([], [2, 3, 1, 0])]:
        end = streamed(harness, script, pieces, first, then)
        assert end["type"] == "task-done", end
        assert harness.records(codecs.JSON, end["outputs"]) == expected, (first, then)

    # A streamed piece not in the store: the appliance is told which, to copy or compute it again.
    missing = {**pieces, 3: [{"sha256": "cd" * 32, "size": 5}]}
    end = streamed(harness, script, missing, [0], [1, 3, 2])
    assert end["type"] == "task-failed" and end["inputMissing"] == "cd" * 32
    # A damaged piece fails the task with the rank it came from.
    garbage = harness.page.evaluate("text => harness.put(text)", base64.b64encode(b"not json\n").decode())
    damaged = {**pieces, 2: [garbage]}
    end = streamed(harness, script, damaged, [0], [2, 1, 3])
    assert end["type"] == "task-failed"
    assert end["error"].startswith("the output of rank 2 of the stage before: input 1 of 1"), end["error"]


CSV_BSON_MAP = """async function map(x) {
  for (const [k, v] of x) context.emit(k, v);
  context.emit('nested', {a: [1, 2.5, 'x', null, true], b: {c: 'é'}});
  context.emit(7, new Uint8Array([1, 2, 255]));
  context.emit([1, 'two'], 2 ** 40);
  context.emit(-0.5, 'quote " and, comma\\r\\nnew line');
}"""
DESCRIBE_MAP = """async function map(x) {
  for (const [k, v] of x) {
    const type = v instanceof Uint8Array ? 'Uint8Array' : Array.isArray(v) ? 'array' : v === null ? 'null' : typeof v;
    context.emit(k, [v, type]);
  }
}"""


@pytest.mark.parametrize("content_type", [codecs.CSV, codecs.BSON])
def test_csv_and_bson_round_trip_keys_and_values(harness, content_type):
    script = harness.job(f"formats-{content_type.split('/')[1]}", [CSV_BSON_MAP, DESCRIBE_MAP])
    upstream = [("k", "v"), (1, 1.5), (True, None), ("", -3)]
    inputs = [harness.put(content_type, upstream)]
    end, _ = harness.ok(script, inputs=inputs, inputContentType=content_type, outputContentType=content_type)
    written = harness.records(content_type, end["outputs"])

    nested = {"a": [1, 2.5, "x", None, True], "b": {"c": "é"}}
    if content_type == codecs.BSON:
        expected = [
            *upstream,
            ("nested", nested),
            (7, b"\x01\x02\xff"),
            ([1, "two"], 2**40),
            (-0.5, 'quote " and, comma\r\nnew line'),
        ]
    else:  # objects and arrays travel as their JSON text
        expected = [
            *upstream,
            ("nested", json.dumps(nested, separators=(",", ":"), ensure_ascii=False)),
            (7, '{"0":1,"1":2,"2":255}'),
            ('[1,"two"]', 2**40),
            (-0.5, 'quote " and, comma\r\nnew line'),
        ]
    assert written == expected

    # The browser reads its own blobs back to the same values.
    inputs = [{"sha256": o["sha256"], "size": o["size"]} for o in end["outputs"]]
    end, _ = harness.ok(script, stage=1, inputs=inputs, inputContentType=content_type)
    described = harness.records(codecs.JSON, end["outputs"])
    assert [k for k, _ in described] == [k for k, _ in expected]
    seen = [v for _, (v, _) in described]
    assert seen[:5] == [v for _, v in expected[:5]] and seen[6:] == [v for _, v in expected[6:]]
    binary = [{"0": 1, "1": 2, "2": 255}, "Uint8Array"] if content_type == codecs.BSON else [expected[5][1], "string"]
    assert described[5][1] == binary


THROWING_MAP = """async function map(x) {
  function parse(line) {
    throw new TypeError('cannot parse ' + line);
  }
  for (const [k, v] of x) parse(v);
}"""
REJECTING_MAP = """async function map(x) {
  Promise.reject(new Error('nobody waits for me'));
  await new Promise(resolve => setTimeout(resolve, 5000));
}"""
EMIT_AFTER_COMPLETE = """async function map(x) {
  context.emit(1, 1);
  context.onComplete();
  context.emit(2, 2);
}"""
TIMER_THROW = """async function map(x) {
  setTimeout(() => { null.property; }, 10);
  await new Promise(resolve => setTimeout(resolve, 5000));
}"""


def test_errors_fail_the_task_with_the_job_code_stack(harness, servers):
    script = harness.job("errors", [THROWING_MAP, REJECTING_MAP, EMIT_AFTER_COMPLETE, TIMER_THROW])
    source = Handler.scripts["errors"][0].splitlines()
    throw_line = next(i for i, line in enumerate(source, 1) if "throw new TypeError" in line)
    call_line = next(i for i, line in enumerate(source, 1) if "parse(v);" in line)
    inputs = [harness.put(codecs.JSON, [(1, "bad line")])]

    end, _ = harness.run(script, inputs=inputs)
    assert end["type"] == "task-failed" and end["error"] == "cannot parse bad line"
    url = f"{servers[0]}{script}"
    assert end["stack"].startswith("TypeError: cannot parse bad line\n")
    assert f"at parse ({url}:{throw_line}:" in end["stack"]
    assert f"at map ({url}:{call_line}:" in end["stack"]
    assert "/static/worker/sandbox.js" not in end["stack"]  # the runtime's own frames are left out

    end, _ = harness.run(script, stage=1)
    assert end["type"] == "task-failed" and end["error"] == "nobody waits for me"
    assert f"at map ({url}:" in end["stack"]

    end, messages = harness.run(script, stage=2)
    assert end["type"] == "task-failed" and end["error"] == "context.emit() after context.onComplete()"
    assert not any(m["type"] == "task-done" for m in messages)

    end, _ = harness.run(script, stage=3)
    assert end["type"] == "task-failed" and "Cannot read properties of null" in end["error"]

    # A sandbox script that does not parse, or is not there.
    Handler.scripts["broken"] = (
        f"importScripts('{Handler.origin}/static/worker/sandbox.js');\npeermrSandbox.define({{stages: [function (]}});",
        [],
    )
    end, _ = harness.run("/runs/broken/sandbox.js")
    assert end["type"] == "task-failed" and "SyntaxError" in end["error"]
    end, _ = harness.run("/runs/missing/sandbox.js")
    assert end["type"] == "task-failed" and "could not be loaded" in end["error"]

    end, _ = harness.run(script, inputs=[{"sha256": "ab" * 32, "size": 10}])
    assert end == {
        "type": "task-failed",
        "taskId": end["taskId"],
        "error": f"input {'ab' * 32} is not in this browser's store",
        "stack": "",
        "inputMissing": "ab" * 32,
    }


PROBE_MAP = """async function map(x) {
  const probe = {};
  const attempt = async (name, fn) => {
    try { probe[name] = await fn(); } catch (e) { probe[name] = 'refused: ' + e.message; }
  };
  const names = ['XMLHttpRequest', 'WebSocket', 'EventSource', 'Worker', 'indexedDB', 'caches'];
  names.push('importScripts', 'fetch');
  for (const name of names) {
    probe['global ' + name] = typeof self[name] + ' ' + typeof WorkerGlobalScope.prototype[name];
  }
  probe.storage = typeof navigator.storage;
  await attempt('importScripts', () => importScripts('/static/worker/codecs.js'));
  await attempt('loadScripts', () => peermrSandbox.loadScripts(['/static/worker/codecs.js']));
  await attempt('same origin', async () => (await fetch('/echo', {credentials: 'include'})).json());
  await attempt('other origin', async () => (await fetch(OTHER + '/echo')).json());
  await attempt('post', async () => (await fetch('/echo', {method: 'POST', body: 'data'})).status);
  await attempt('post request', async () => (await fetch(new Request(OTHER + '/echo', {method: 'PUT'}))).status);
  const wasm = await WebAssembly.instantiateStreaming(fetch(context.getWebAssemblyURL('add.wasm')));
  probe.wasm = wasm.instance.exports.add(2, 3);
  await attempt('unknown wasm', () => context.getWebAssemblyURL('nope.wasm'));
  // eval and new Function work in the task (embind and many libraries need them).
  await attempt('eval', () => eval('6 * 7'));
  await attempt('new Function', () => new Function('a', 'return a * 7')(6));
  context.setWorkerTimeout(120);
  context.emit('probe', probe);
}"""


def test_seal_refuses_imports_other_origins_and_writes(harness, servers):
    origin, other = servers
    harness.page.context.add_cookies([{"name": "session", "value": "secret", "url": origin}])
    assert harness.page.evaluate("fetch('/echo').then(r => r.json())") == {"cookie": "session=secret"}
    stages = [PROBE_MAP.replace("OTHER", json.dumps(other))]
    wasm = {"add.wasm": "/wasm/add.wasm"}

    end, messages = harness.ok(harness.job("seal", stages), wasm=wasm)
    [(_, probe)] = harness.records(codecs.JSON, end["outputs"])
    for name in ["XMLHttpRequest", "WebSocket", "EventSource", "Worker", "indexedDB", "caches"]:
        assert probe[f"global {name}"] == "undefined undefined", name
    assert probe["global importScripts"] == probe["global fetch"] == "function undefined"
    assert probe["storage"] == "undefined"
    assert probe["importScripts"] == probe["loadScripts"] == "refused: importScripts is not available to job code"
    assert probe["same origin"] == {"cookie": ""}  # credentials are never sent
    assert probe["other origin"] == f"refused: fetch to {other} is not allowed by this appliance (allowed: {origin})"
    assert probe["post"] == probe["post request"] == "refused: fetch: only GET is allowed in jobs"
    assert Handler.posts == []
    assert probe["wasm"] == 5
    assert probe["unknown wasm"] == 'refused: no WebAssembly binary named "nope.wasm" (declared: add.wasm)'
    assert probe["eval"] == probe["new Function"] == 42
    assert {"type": "task-worker-timeout", "taskId": end["taskId"], "seconds": 120} in messages

    # An origin the appliance allows for this job (in fetchOrigins and in the script's connect-src).
    end, _ = harness.ok(harness.job("seal-allowed", stages, connect=(other,)), wasm=wasm, fetchOrigins=[other])
    [(_, probe)] = harness.records(codecs.JSON, end["outputs"])
    assert probe["other origin"] == {"cookie": ""}
    assert probe["post request"] == "refused: fetch: only GET is allowed in jobs"


S3_MAP = """async function map(x) {
  for (const [k, v] of x) context.emit(k, v * 2);
  await context.flush();
  context.emit('last', 0);
}"""
ENDLESS_MAP = """async function map(x) {
  console.log('started');
  for (;;) {
    await fetch('/tick?' + context.getRank());
    await new Promise(resolve => setTimeout(resolve, 20));
  }
}"""


def test_s3_inputs_and_outputs_and_cancel(harness):
    script = harness.job("s3", [S3_MAP, ENDLESS_MAP])
    Handler.bucket["in/part-0"] = codecs.encode(codecs.CSV, [("a", 1), ("b", 2)])
    Handler.bucket["in/part-1"] = codecs.encode(codecs.CSV, [("c", 3)])
    inputs = [{"url": "/s3/in/part-0"}, {"url": "/s3/in/part-1"}]

    end, messages = harness.ok(script, storage="s3", inputs=inputs, inputContentType=codecs.CSV)
    asked = [m for m in messages if m["type"] == "task-put-url"]
    assert [(m["partition"]) for m in asked] == [0, 0]
    assert [o["key"] for o in end["outputs"]] == [f"{end['taskId']}/{m['id']}-0" for m in asked]
    assert harness.records(codecs.JSON, end["outputs"]) == [("a", 2), ("b", 4), ("c", 6), ("last", 0)]

    end, _ = harness.run(script, storage="s3", inputs=[{"url": "/s3/in/none"}])
    assert end["type"] == "task-failed" and end["error"] == "could not read input 1 of 1: HTTP 404"

    # Cancelling a task terminates its Web Worker: it stops fetching.
    harness.page.evaluate("task => harness.runner.handle(task)", {**ENDLESS_ASSIGN, "script": script})
    harness.page.wait_for_function("harness.messages('endless').some(m => m.type === 'task-log')")
    deadline = time.monotonic() + 10
    while Handler.ticks["5"] < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert harness.page.evaluate("harness.busy.at(-1)") is True
    harness.page.evaluate("harness.runner.handle({type: 'task-cancel', taskId: 'endless'})")
    assert harness.page.evaluate("harness.busy.at(-1)") is False
    time.sleep(0.3)
    ticks = Handler.ticks["5"]
    time.sleep(0.5)
    assert Handler.ticks["5"] == ticks
    assert [m["type"] for m in harness.page.evaluate("harness.messages('endless')")] == ["task-log"]


ENDLESS_ASSIGN = {
    "type": "task-assign",
    "taskId": "endless",
    "runId": "run-2",
    "kind": "map",
    "stage": 1,
    "group": "A",
    "rank": 5,
    "workerCount": 8,
    "partitioning": "rank",
    "inputContentType": "application/json",
    "outputContentType": "application/json",
    "inputs": [],
    "wasm": {},
    "storage": "pmrfs",
    "workerTimeout": 3600,
    "fetchOrigins": [],
}
