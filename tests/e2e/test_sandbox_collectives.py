"""The ranks of a stage together, in real Chromium without the appliance.

First the pure parts of static/worker/collectives.js: the peer payload codec, the collectives of N
ranks over an in-memory transport, shard and rng. Then three worker pages' DataNode, Peers and
TaskRunner in one tab around a stand-in appliance written in JavaScript: blob transfers and links
over real WebRTC connections, tasks that message each other (indirect and direct), run the
collectives, use the parameter server, and fail when a rank is lost.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.support import QuietHandler, reply_sandbox_frame, sandbox_frame_header, serve_in_thread

pytestmark = pytest.mark.e2e

STATIC = Path(__file__).resolve().parents[2] / "static"
RUN_CHECKS = "<!doctype html><title>collectives</title><script src='/static/worker/collectives.js'></script>"

# Three worker pages in one: each with its own store, DataNode, Peers and TaskRunner; `appliance`
# stands in for the server (links, indirect messages, the parameter server, task reports).
WORKERS = """<!doctype html>
<title>workers</title>
<script type="module">
import {BlobStore} from '/static/worker/blobstore.js';
import {DataNode} from '/static/worker/datanode.js';
import {Peers, decodeFrame, encodeFrame} from '/static/worker/peers.js';
import {TaskRunner} from '/static/worker/tasks.js';
import {sha256Hex} from '/static/worker/sha256.js';

const workers = new Map();   // worker id -> {id, store, datanode, peers, tasks, sent}
const pairs = new Map();     // transfer or link id -> [worker id, worker id]
const holders = new Map();   // 'run.group.stage.rank' -> worker id
const mail = new Map();      // 'run.group.stage.from>to:tag' -> bytes
const waiting = new Map();   // same -> [deliver()]
const params = new Map();    // 'run.group.key' -> {dtype, bytes, version}
const clocks = new Map();
const ended = new Map();     // taskId -> task-done | task-failed
const DTYPES = {float32: Float32Array, float64: Float64Array, int8: Int8Array, int16: Int16Array, int32: Int32Array,
  uint8: Uint8Array, uint16: Uint16Array, uint32: Uint32Array};
const UPDATES = {add: (a, b) => a + b, max: Math.max, min: Math.min, mul: (a, b) => a * b, replace: (a, b) => b};
const hex16 = () => Array.from(crypto.getRandomValues(new Uint8Array(8)), b => b.toString(16).padStart(2, '0'))
  .join('');
const ofTask = taskId => {
  const [run, group, stage, rank] = taskId.split('.');
  return {run: Number(run), group, stage: Number(stage), rank: Number(rank)};
};

// As the runtime does: binary frames are encoded and decoded on the way.
function frame(w, header, payload) {
  const decoded = decodeFrame(encodeFrame(header, payload));
  w.peers.handle(decoded.header, decoded.payload);
}

async function appliance(w, m) {
  w.sent.push(m);
  const reply = message => w.peers.handle(message);
  const t = m.taskId && ofTask(m.taskId);
  const scope = t && `${t.run}.${t.group}.${t.stage}`;
  switch (m.type) {
    case 'signal': {
      const [a, b] = pairs.get(m.transferId);
      await workers.get(a === w.id ? b : a).datanode.handle({type: 'signal', transferId: m.transferId, data: m.data});
      break;
    }
    case 'peer-link': {
      const to = holders.get(`${scope}.${m.toRank}`);
      if (!to) return reply({type: 'peer-link-reply', replyTo: m.id, error: 'rank vacant'});
      const linkId = hex16();
      pairs.set(linkId, [w.id, to]);
      workers.get(to).peers.handle({type: 'peer-link-open', linkId, from: w.id, runId: t.run});
      reply({type: 'peer-link-reply', replyTo: m.id, linkId, to});
      break;
    }
    case 'peer-put-url':
      reply({type: 'peer-put-url-reply', replyTo: m.id, url: `/s3/${m.taskId}/${m.tag}`, key: `${m.taskId}/${m.tag}`});
      break;
    case 'peer-send': {
      const key = `${scope}.${t.rank}>${m.toRank}:${m.tag}`;
      mail.set(key, m.key ? {url: `/s3/${m.key}`, size: m.size} : await w.store.get(m.sha256));
      for (const deliver of waiting.get(key) || []) deliver();
      waiting.delete(key);
      reply({type: 'peer-send-reply', replyTo: m.id});
      break;
    }
    case 'peer-receive': {
      const key = `${scope}.${m.fromRank}>${t.rank}:${m.tag}`;
      const deliver = async () => {
        const bytes = mail.get(key);
        if (bytes.url) return reply({type: 'peer-message', replyTo: m.id, ...bytes});
        const sha256 = await sha256Hex(bytes);
        await w.store.put(sha256, bytes);
        reply({type: 'peer-message', replyTo: m.id, sha256, size: bytes.byteLength});
      };
      if (mail.has(key)) deliver();
      else waiting.set(key, [...(waiting.get(key) || []), deliver]);
      break;
    }
    case 'ps-write': case 'ps-update': {
      const key = `${t.run}.${t.group}.${m.key}`;
      const stored = params.get(key);
      const version = stored?.version ?? 0;
      if (m.ifVersion !== undefined && m.ifVersion !== version) {
        return reply({type: 'ps-reply', replyTo: m.id, error: 'version', version});
      }
      let bytes = m.data;
      if (m.type === 'ps-update' && stored) {
        const value = new DTYPES[m.dtype](stored.bytes.slice(0));
        const delta = new DTYPES[m.dtype](m.data);
        for (let i = 0; i < value.length; i++) value[i] = UPDATES[m.op](value[i], delta[i]);
        bytes = value.buffer;
      }
      params.set(key, {dtype: m.dtype, bytes, version: version + 1});
      reply({type: 'ps-reply', replyTo: m.id, version: version + 1});
      break;
    }
    case 'ps-read': {
      const stored = params.get(`${t.run}.${t.group}.${m.key}`);
      if (!stored) return reply({type: 'ps-reply', replyTo: m.id, error: 'no such key'});
      frame(w, {type: 'ps-reply', replyTo: m.id, dtype: stored.dtype, version: stored.version, clock: 0}, stored.bytes);
      break;
    }
    case 'ps-clock': {
      clocks.set(m.taskId, (clocks.get(m.taskId) || 0) + 1);
      reply({type: 'ps-reply', replyTo: m.id, clock: clocks.get(m.taskId)});
      break;
    }
    case 'task-put-url': {  // an s3 run's output
      const key = `out/${m.taskId}/${m.id}`;
      w.tasks.handle({type: 'task-put-url-reply', replyTo: m.id, url: `/s3/${key}`, key});
      break;
    }
    case 'task-done': case 'task-failed':
      ended.set(m.taskId, {...m, worker: w.id});
      break;
  }
}

async function addWorker(id) {
  const store = await new BlobStore(`e2e-${id}-${crypto.randomUUID()}`).open();
  const w = {id, store, sent: []};
  const send = message => { appliance(w, message); };
  w.datanode = new DataNode({getStore: () => store, send, iceServers: () => [], onChange() {}});
  w.peers = new Peers({
    getStore: () => store, send, datanode: w.datanode,
    sendBinary(header, payload) {
      const decoded = decodeFrame(encodeFrame(header, payload));
      appliance(w, {...decoded.header, data: decoded.payload});
    },
  });
  w.tasks = new TaskRunner({getStore: () => store, send, peers: w.peers});
  workers.set(id, w);
}

const until = async (what, test, ms = 15000) => {
  for (const deadline = Date.now() + ms; Date.now() < deadline; await new Promise(r => setTimeout(r, 10))) {
    const value = test();
    if (value) return value;
  }
  throw new Error(`timed out waiting for ${what}`);
};

async function records(w, outputs) {
  const out = [];
  for (const output of outputs) {
    const bytes = output.key ? await (await fetch(`/s3/${output.key}`)).arrayBuffer()
      : await w.store.get(output.sha256);
    const text = new TextDecoder().decode(bytes);
    for (const line of text.split('\\n')) if (line) out.push(JSON.parse(line));
  }
  return out;
}

window.harness = {
  workers, pairs, holders,
  async start(ids) { for (const id of ids) await addWorker(id); },
  // assigns: [[worker id, task-assign]]; resolves with each task's end (and records when done).
  async run(assigns, waitFor = assigns.length) {
    for (const [id, assign] of assigns) {
      holders.set(assign.taskId.split('.').slice(0, 4).join('.'), id);
      workers.get(id).tasks.handle(assign);
    }
    const ids = assigns.map(([, assign]) => assign.taskId);
    await until('the tasks', () => ids.filter(id => ended.has(id)).length >= waitFor);
    return Promise.all(ids.filter(id => ended.has(id)).map(async id => {
      const end = ended.get(id);
      return {...end, records: end.type === 'task-done' ? await records(workers.get(end.worker), end.outputs) : null};
    }));
  },
  ended: taskId => ended.get(taskId) || null,
  hex16, sha256Hex,
  lose(runId, group, rank, reason) {
    for (const w of workers.values()) w.peers.handle({type: 'peer-lost', runId, group, rank, reason});
  },
  until,
};
window.harnessReady = true;
</script>
"""


class Handler(QuietHandler):
    scripts: dict[str, str] = {}
    bucket: dict[str, bytes] = {}

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/checks":
            return self.reply(200, RUN_CHECKS.encode(), "text/html")
        if path == "/workers":
            return self.reply(200, WORKERS.encode(), "text/html")
        if path.startswith("/static/"):
            file = (STATIC / path.removeprefix("/static/")).resolve()
            if STATIC in file.parents and file.is_file():
                return self.reply(200, file.read_bytes(), "text/javascript")
        if path.startswith("/s3/") and path[4:] in self.bucket:
            return self.reply(200, self.bucket[path[4:]], "application/octet-stream")
        origin = f"http://{self.headers['host']}"
        if path.startswith("/runs/") and path.endswith("/sandbox.js") and path.split("/")[2] in self.scripts:
            script = self.scripts[path.split("/")[2]].replace("ORIGIN", origin)
            return self.reply(200, script.encode(), "text/javascript", sandbox_frame_header([]))
        if path == "/worker/sandbox.html":
            return reply_sandbox_frame(self, origin, self.path.partition("?")[2])
        return self.reply(404)

    def end_headers(self):
        self.send_header("access-control-allow-origin", "*")  # static/ and the bucket, as the appliance's
        super().end_headers()

    def do_OPTIONS(self):
        methods = {"access-control-allow-methods": "GET, HEAD, PUT", "access-control-allow-headers": "*"}
        return self.reply(204, headers=methods)

    def do_PUT(self):
        path = self.path.split("?")[0]
        if not path.startswith("/s3/"):
            return self.reply(404)
        self.bucket[path[4:]] = self.rfile.read(int(self.headers["content-length"]))
        return self.reply(200)


@pytest.fixture(scope="module")
def origin():
    server, origin = serve_in_thread(Handler)
    yield origin
    server.shutdown()


@pytest.fixture(scope="module")
def checks(chromium, origin):
    """One page for the checks of the pure parts: they keep no state."""
    context = chromium.new_context()
    page = context.new_page()
    page.goto(f"{origin}/checks")
    yield page
    context.close()


# --- the pure parts ------------------------------------------------------------------------------

# N ranks of peermrCollectives.create over in-memory mailboxes; deliveries take a random number of
# microtask turns, so messages of different steps and ranks interleave.
NETWORK = """
const C = peermrCollectives;
const turns = async () => { for (let i = Math.floor(Math.random() * 4); i > 0; i--) await null; };
function network(ranks, group = 'A') {
  const boxes = new Map();
  const box = key => boxes.get(key) || boxes.set(key, {queue: [], receivers: []}).get(key);
  return Array.from({length: ranks}, (_, rank) => C.create({
    rank, ranks, group,
    async send(to, tag, value) {
      const data = C.encodePayload(value);  // at once, as the sandbox does
      await turns();
      const b = box(`${rank}>${to}:${tag}`);
      if (b.receivers.length) b.receivers.shift()(data);
      else b.queue.push(data);
    },
    async receive(from, tag) {
      const b = box(`${from}>${rank}:${tag}`);
      const data = b.queue.length ? b.queue.shift() : await new Promise(resolve => b.receivers.push(resolve));
      await turns();
      return C.decodePayload(data);
    },
  }));
}
const problems = [];
const check = (ok, what) => { if (!ok) problems.push(what); };
const same = (a, b) => JSON.stringify(a, (k, v) => typeof v === 'bigint' ? `${v}n` : v) ===
  JSON.stringify(b, (k, v) => typeof v === 'bigint' ? `${v}n` : v);
"""


def check(page, body: str) -> None:
    problems = page.evaluate(f"async () => {{ {NETWORK}\n{body}\n return problems; }}")
    assert problems == []


def test_payload_codec_round_trips_json_buffers_and_typed_arrays(checks):
    check(
        checks,
        """
  for (const value of [null, true, 0, -1.5, 'é€😀', '', [1, {a: 'b'}], {x: [null, {}]}]) {
    check(same(C.decodePayload(C.encodePayload(value)), value), `JSON ${JSON.stringify(value)}`);
  }
  const buffer = Uint8Array.from([1, 2, 3, 250]).buffer;
  const back = C.decodePayload(C.encodePayload(buffer));
  check(back instanceof ArrayBuffer && same([...new Uint8Array(back)], [1, 2, 3, 250]), 'ArrayBuffer');
  check(C.decodePayload(C.encodePayload(new ArrayBuffer(0))).byteLength === 0, 'empty ArrayBuffer');
  const types = [Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array,
    Float32Array, Float64Array, BigInt64Array, BigUint64Array];
  types.forEach((type, i) => {
    const big = type.name.startsWith('Big');
    // A view into a larger buffer, at an offset: only its own elements travel.
    const whole = new type(12).map((_, j) => big ? BigInt(j * 3) : j * 3 - (type.name.startsWith('Uint') ? 0 : 7));
    const view = whole.subarray(2, 9);
    const encoded = C.encodePayload(view);
    check(new Uint8Array(encoded)[0] === 2 + i, `${type.name} kind`);
    check(encoded.byteLength === 8 + view.byteLength, `${type.name} size`);
    const decoded = C.decodePayload(encoded);
    check(decoded.constructor === type && same([...decoded], [...view]), `${type.name} values`);
    check(decoded.byteOffset === 0 && decoded.buffer.byteLength === view.byteLength, `${type.name} has its own buffer`);
    check(C.decodePayload(C.encodePayload(new type(0))).length === 0, `empty ${type.name}`);
  });
  for (const bad of [undefined, () => 1, new DataView(new ArrayBuffer(4)), Symbol('x')]) {
    let error = null;
    try { C.encodePayload(bad); } catch (e) { error = e; }
    check(error instanceof TypeError, `refuses ${String(bad)}`);
  }
  const unknownKind = Uint8Array.of(99, 0, 0, 0, 0, 0, 0, 0).buffer;
  const oddInt16s = Uint8Array.of(5, 0, 0, 0, 0, 0, 0, 0, 1).buffer;
  for (const bad of [new ArrayBuffer(3), unknownKind, oddInt16s]) {
    let error = null;
    try { C.decodePayload(bad); } catch (e) { error = e; }
    check(error !== null, `rejects ${[...new Uint8Array(bad)]}`);
  }
""",
    )


def test_ring_all_reduce_is_exact_for_any_length_rank_count_op_and_type(checks):
    check(
        checks,
        """
  const types = [Float64Array, Float32Array, Int32Array, BigInt64Array];
  for (const ranks of [1, 2, 3, 5, 8]) {
    for (const length of [0, 1, 2, 3, 7, 9, 64]) {
      for (const type of types) {
        const big = type === BigInt64Array;
        const inputs = Array.from({length: ranks}, (_, r) =>
          new type(length).map((_, i) => big ? BigInt((r * 7 + i * 3) % 11 - 5) : (r * 7 + i * 3) % 11 - 5));
        for (const op of ['sum', 'mean', 'max', 'min']) {
          const expected = new type(length);
          for (let i = 0; i < length; i++) {
            const column = inputs.map(x => x[i]);
            const sum = column.reduce((a, b) => a + b);
            expected[i] = op === 'sum' ? sum : op === 'mean' ? sum / (big ? BigInt(ranks) : ranks)
              : column.reduce((a, b) => (op === 'max' ? b > a : b < a) ? b : a);
          }
          if (op === 'mean' && type === Float32Array) {  // the sum in float32, then divided
            for (let i = 0; i < length; i++) {
              expected[i] = Math.fround(inputs.reduce((a, x) => Math.fround(a + x[i]), 0)) / ranks;
            }
          }
          const copies = inputs.map(x => x.slice());
          const results = await Promise.all(network(ranks).map((rank, r) => rank.allReduce(inputs[r], op)));
          const what = `${ranks} ranks, ${length} ${type.name}, ${op}`;
          results.forEach((result, r) => {
            check(result.constructor === type && result !== inputs[r], `${what}: a new ${type.name}`);
            check(same([...result], [...expected]), `${what}: rank ${r} ${[...result]} != ${[...expected]}`);
            check(same([...inputs[r]], [...copies[r]]), `${what}: input unchanged`);
          });
        }
      }
    }
  }
  // Non-integral floats: every rank gets the same bits.
  const noisy = Array.from({length: 5}, (_, r) =>
    Float32Array.from({length: 13}, (_, i) => Math.sin(r * 13 + i) * 1e3));
  const results = await Promise.all(network(5).map((rank, r) => rank.allReduce(noisy[r], 'mean', 'noisy')));
  check(results.every(x => same([...x], [...results[0]])), 'identical results on every rank');
""",
    )


def test_barrier_broadcast_all_gather_and_their_refusals(checks):
    check(
        checks,
        """
  for (const ranks of [1, 2, 3, 6]) {
    // Nobody leaves the barrier before everyone entered it.
    let entered = 0;
    const seen = await Promise.all(network(ranks).map(async (rank, r) => {
      await new Promise(resolve => setTimeout(resolve, r * 3));
      entered++;
      await rank.barrier('b');
      return entered;
    }));
    check(seen.every(n => n === ranks), `barrier of ${ranks}: ${seen}`);

    for (let root = 0; root < ranks; root++) {
      const net = network(ranks);
      const value = {root, list: [1, 'two']};
      const got = await Promise.all(net.map((rank, r) => rank.broadcast(root, r === root ? value : undefined)));
      check(got.every(v => same(v, {root, list: [1, 'two']})), `broadcast of ${ranks} from ${root}`);
      const typed = await Promise.all(net.map((rank, r) => rank.broadcast(root, Float64Array.of(r, 0.5))));
      check(typed.every(v => v instanceof Float64Array && same([...v], [root, 0.5])), `typed broadcast from ${root}`);
    }

    const mine = r => r % 2 ? {r} : Int16Array.of(r, -r);
    const gathered = await Promise.all(network(ranks).map((rank, r) => rank.allGather(mine(r))));
    const expected = Array.from({length: ranks}, (_, r) => r % 2 ? {r} : [r, -r]);
    const plain = values => values.map(v => ArrayBuffer.isView(v) ? [...v] : v);
    check(gathered.every(values => same(plain(values), expected)), `allGather of ${ranks}`);
  }

  const [rank] = network(3);
  const refusal = async (call, type, text) => {
    try { await call(); } catch (e) { return check(e instanceof type && e.message.includes(text), `${text}: ${e}`); }
    check(false, `${text}: no error`);
  };
  await refusal(() => rank.allReduce([1, 2]), TypeError, 'allReduce needs a typed array');
  await refusal(() => rank.allReduce(new DataView(new ArrayBuffer(8))), TypeError, 'allReduce needs a typed array');
  await refusal(() => rank.allReduce(new Float32Array(2), 'prod'), TypeError, 'op "prod" (sum, mean, max or min)');
  await refusal(() => rank.broadcast(3, 1), RangeError, 'root 3 is not a rank of this stage (0 to 2)');
  await refusal(() => rank.barrier('x'.repeat(151)), TypeError, 'the tag must be a string of 1 to 150 characters');
""",
    )


def test_a_lost_rank_fails_the_collectives_under_way_with_a_message_naming_it(checks):
    check(
        checks,
        """
  const [zero, one] = network(3);  // rank 2 never joins
  const outcome = Promise.allSettled([zero, one].map(rank => rank.allReduce(new Float32Array(7), 'sum', 'grads')));
  await new Promise(resolve => setTimeout(resolve, 20));
  zero.peerLost(2, 'its worker disconnected');
  one.peerLost(2, 'its worker disconnected');
  for (const {status, reason} of await outcome) {
    check(status === 'rejected' && reason.name === 'PeerLostError' && reason.rank === 2 && reason.group === 'A' &&
      reason.message === "rank 2 of group A failed during allReduce 'grads': its worker disconnected", String(reason));
  }
  // Collectives after it work; auto tags count per kind.
  const net = network(2);
  net[0].peerLost(1, 'gone');  // nothing under way: nothing fails
  const gathered = await Promise.all([net[0].allGather('x'), net[1].allGather('y')]);
  check(same(gathered, [['x', 'y'], ['x', 'y']]), 'a collective after a loss');
  const pending = net[0].barrier();
  net[0].peerLost(1, 'gone');
  try { await pending; check(false, 'barrier #1 should fail'); } catch (e) {
    check(e.message === 'rank 1 of group A failed during barrier #1: gone', e.message);
  }
""",
    )


def test_shard_and_rng(checks):
    check(
        checks,
        """
  for (let length = 0; length <= 11; length++) {
    for (let ranks = 1; ranks <= 4; ranks++) {
      const items = Array.from({length}, (_, i) => i);
      const shards = Array.from({length: ranks}, (_, r) => C.shard(items, r, ranks));
      check(same(shards.flat(), items), `shards of ${length} in ${ranks} cover it in order`);
      const sizes = shards.map(s => s.length);
      check(sizes.every((n, r) => n === Math.floor(length / ranks) + (r < length % ranks ? 1 : 0)), `sizes ${sizes}`);
      const typed = Float32Array.from(items);
      const part = C.shard(typed, ranks - 1, ranks);
      check(part instanceof Float32Array && part.buffer === typed.buffer, 'a typed array shard is a subarray');
    }
  }
  try {
    C.shard('abc', 0, 2);
    check(false, 'shard of a string');
  } catch (e) {
    check(e instanceof TypeError, String(e));
  }

  const draw = (...args) => { const random = C.rng(...args); return Array.from({length: 50}, random); };
  check(same(draw(42, 'A', 1, 0), draw(42, 'A', 1, 0)), 'the same seed, group, rank and stream: the same numbers');
  for (const other of [[43, 'A', 1, 0], [42, 'B', 1, 0], [42, 'A', 2, 0], [42, 'A', 1, 1], [2 ** 40 + 42, 'A', 1, 0]]) {
    check(!same(draw(42, 'A', 1, 0), draw(...other)), `differs for ${other}`);
  }
  const random = C.rng(7, 'A', 0, 0);
  const xs = Array.from({length: 20000}, random);
  check(xs.every(x => x >= 0 && x < 1), 'in [0, 1)');
  const mean = xs.reduce((a, b) => a + b) / xs.length;
  check(Math.abs(mean - 0.5) < 0.01, `uniform mean ${mean}`);
  const normals = Array.from({length: 20000}, random.normal);
  const m = normals.reduce((a, b) => a + b) / normals.length;
  const variance = normals.reduce((a, b) => a + (b - m) ** 2, 0) / normals.length;
  check(Math.abs(m) < 0.03 && Math.abs(variance - 1) < 0.05, `normal mean ${m} variance ${variance}`);
""",
    )


# --- three worker pages in one tab ---------------------------------------------------------------


@pytest.fixture
def workers(page, origin):
    page.goto(f"{origin}/workers")
    page.wait_for_function("window.harnessReady === true")
    page.evaluate("harness.start(['w0', 'w1', 'w2'])")
    return page


def test_blob_transfers_reuse_connections_and_fail_fast_when_a_channel_closes(workers):
    result = workers.evaluate(
        """async () => {
  const {workers, pairs, until, hex16, sha256Hex} = harness;
  const [w0, w1] = [workers.get('w0'), workers.get('w1')];
  const bytes = new Uint8Array(300_001).map((_, i) => i * 31 ^ i >> 8).buffer;
  const sha256 = await sha256Hex(bytes);
  const size = bytes.byteLength;
  await w0.store.put(sha256, bytes);
  const ends = [];
  for (const transferId of [hex16(), hex16()]) {  // the second rides the first one's connection
    pairs.set(transferId, ['w0', 'w1']);
    w1.datanode.handle({type: 'blob-receive', transferId, sha256, size, from: 'w0'});
    w0.datanode.handle({type: 'blob-send', transferId, sha256, to: 'w1'});
    const end = await until('the blob', () =>
      w1.sent.find(m => m.transferId === transferId && m.type.startsWith('blob-')));
    ends.push(end.type);
  }
  const storedSize = (await w1.store.get(sha256)).byteLength;

  // A channel that closes before 'end': the receiving end says so at once.
  const cut = hex16();
  pairs.set(cut, ['w0', 'w1']);
  w1.datanode.handle({type: 'blob-receive', transferId: cut, sha256, size, from: 'w0'});
  const channel = await w0.datanode.openChannel('w1', cut, `blob:${cut}`);
  channel.send(new Uint8Array(1000));
  await new Promise(resolve => setTimeout(resolve, 100));
  channel.close();
  const cutEnd = await until('blob-failed', () => w1.sent.find(m => m.transferId === cut && m.type === 'blob-failed'));

  // A channel that comes before the appliance's word of it waits, with what it carried.
  const early = hex16();
  const link = await w0.datanode.openChannel('w1', early, `link:${early}`);
  link.send('header');
  link.send(Uint8Array.of(1, 2, 3));
  await new Promise(resolve => setTimeout(resolve, 100));
  const got = [];
  w1.datanode.expect(early, 'w0', `link:${early}`, ch => {
    ch.onmessage = ({data}) => got.push(typeof data === 'string' ? data : [...new Uint8Array(data)]);
  });
  await until('the early messages', () => got.length === 2);

  // One from another worker than the arranged one is closed.
  const stranger = hex16();
  const other = await w0.datanode.openChannel('w1', stranger, `link:${stranger}`);
  const closed = new Promise(resolve => other.addEventListener('close', resolve));
  await new Promise(resolve => setTimeout(resolve, 50));
  w1.datanode.expect(stranger, 'w2', `link:${stranger}`, () => got.push('wrongly accepted'));
  await closed;
  return {ends, storedSize, size, connections: w0.datanode.outgoing.size, cut: cutEnd, got,
    bytes: w0.sent.filter(m => m.type === 'transfer-bytes').map(m => m.bytes)};
}"""
    )
    assert result["ends"] == ["blob-stored", "blob-stored"]
    assert result["storedSize"] == result["size"]
    assert result["connections"] == 1
    # The sender says 0 as soon as it has the blob in hand (the copy is under way), then what it sent.
    assert result["bytes"] == [0, result["size"]] * 2
    assert result["cut"]["reason"] == f"the data channel closed after 1000 of {result['size']} bytes"
    assert result["got"] == ["header", [1, 2, 3]]


def sandbox_script(stages: list[str]) -> str:
    return (
        "importScripts('ORIGIN/static/worker/sandbox.js?v=e2e');\n"
        "peermrSandbox.loadScripts([]);\n"
        "peermrSandbox.seal();\n"
        "peermrSandbox.define({input: null, stages: [\n" + ",\n".join(stages) + "\n]});\n"
    )


def assign(name: str, run: int, stage: int, rank: int, ranks: int = 3) -> dict:
    return {
        "type": "task-assign",
        "taskId": f"{run}.A.{stage}.{rank}.0",
        "runId": run,
        "script": f"/runs/{name}/sandbox.js",
        "kind": "map",
        "stage": stage,
        "group": "A",
        "rank": rank,
        "workerCount": ranks,
        "partitioning": "rank",
        "inputContentType": "application/json",
        "outputContentType": "application/json",
        "inputs": [],
        "wasm": {},
        "storage": "pmrfs",
        "workerTimeout": 3600,
        "fetchOrigins": [],
        "seed": 1234,
        "staleness": 0,
    }


TOGETHER = """async function together() {
  const rank = context.getRank(), n = context.getWorkerCount();
  const right = (rank + 1) % n, left = (rank + n - 1) % n;
  const out = {};
  await context.sendToRank(right, 'hello', {from: rank, text: 'é'});
  out.indirect = await context.receiveFromRank(left, 'hello');
  const big = new Float64Array(400_001).map((_, i) => i * rank);  // 3.2 MB: many chunks
  await context.sendToRank(right, 'big', big, {direct: true});
  const got = await context.receiveFromRank(left, 'big', {direct: true});
  out.big = [got.constructor.name, got.length, got[400_000]];
  await context.sendToRank(left, 'back', Int8Array.of(rank), {direct: true});  // the other way on the same links
  out.back = Array.from(await context.receiveFromRank(right, 'back', {direct: true}));
  await context.sendToRank(rank, 'me', Uint16Array.of(1, 2));
  out.self = Array.from(await context.receiveFromRank(rank, 'me'));
  await context.barrier();
  out.broadcast = await context.broadcast(1, rank === 1 ? {from: 'one'} : null);
  out.sum = Array.from(await context.allReduce(Float32Array.from({length: 5}, (_, i) => i + rank), 'sum', 'grads'));
  out.mean = Array.from(await context.allReduce(Int32Array.of(rank * 3, 10), 'mean'));
  out.gather = await context.allGather(rank * 10);

  if (rank === 0) await context.ps.write('w', Float64Array.of(1, 2, 3));
  await context.barrier('written');
  await context.ps.update('w', Float64Array.of(1, 1, 1));
  context.ps.register('double-add', (value, delta) => value.map((v, i) => v * 2 + delta[i]));
  await context.ps.update('counter', Int32Array.of(rank + 1), 'double-add');  // read-modify-write, racing
  await context.barrier('updated');
  out.w = Array.from(await context.ps.read('w'));
  out.counter = Array.from(await context.ps.read('counter'));
  out.clock = [await context.ps.clock(), await context.ps.clock()];
  out.missing = await context.ps.read('nope').catch(e => e.message);

  out.shard = context.shard([...'abcdefgh']);
  const random = context.rng();
  out.rng = [random(), random(), context.rng()()];
  out.timeout = await context.receiveFromRank(left, 'never', {timeout: 150}).catch(e => e.message);
  out.badRank = await context.sendToRank(7, 'x', 1).catch(e => `${e.name}: ${e.message}`);
  context.emit(rank, out);
}"""


def test_ranks_message_each_other_run_collectives_and_share_parameters(workers):
    Handler.scripts["together"] = sandbox_script([TOGETHER])
    ends = workers.evaluate(
        "assigns => harness.run(assigns)", [[f"w{rank}", assign("together", 7, 0, rank)] for rank in range(3)]
    )
    assert [end["type"] for end in ends] == ["task-done"] * 3, ends
    out = {end["records"][0][0]: end["records"][0][1] for end in ends}
    orders = {((a * 2 + b) * 2 + c) for a, b, c in itertools.permutations([1, 2, 3])}
    for rank in range(3):
        left, right = (rank + 2) % 3, (rank + 1) % 3
        o = out[rank]
        assert o["indirect"] == {"from": left, "text": "é"}
        assert o["big"] == ["Float64Array", 400_001, 400_000 * left]
        assert o["back"] == [right]
        assert o["self"] == [1, 2]
        assert o["broadcast"] == {"from": "one"}
        assert o["sum"] == [3 + 3 * i for i in range(5)]
        assert o["mean"] == [3, 10]
        assert o["gather"] == [0, 10, 20]
        assert o["w"] == [4, 5, 6]
        assert o["counter"][0] in orders
        assert o["clock"] == [1, 2]
        assert o["missing"] == "context.ps.read('nope') failed: no such key"
        assert o["shard"] == [list("abc"), list("def"), list("gh")][rank]
        assert o["timeout"] == f"receiveFromRank({left}, 'never') timed out after 150 ms"
        assert o["badRank"] == "RangeError: sendToRank(7, 'x'): 7 is not a rank of this stage (0 to 2)"
    assert len({out[rank]["counter"][0] for rank in range(3)}) == 1
    # Direct messages rode one link per pair of workers, each way on the connection of one of them.
    links = workers.evaluate("[...harness.workers.values()].map(w => [...w.peers.links.keys()].sort())")
    assert links == [["7:w1", "7:w2"], ["7:w0", "7:w2"], ["7:w0", "7:w1"]]
    connections = workers.evaluate(
        "[...harness.workers.values()].map(w => w.datanode.outgoing.size + w.datanode.incoming.size)"
    )
    assert connections == [2, 2, 2]
    # Seeded from (run seed, group, rank): what collectives.js gives for the same inputs.
    for rank in range(3):
        first, second, again = out[rank]["rng"]
        assert first == again != second
    assert len({out[rank]["rng"][0] for rank in range(3)}) == 3
    workers.add_script_tag(url="/static/worker/collectives.js")
    assert out[2]["rng"][:2] == workers.evaluate(
        "() => { const r = peermrCollectives.rng(1234, 'A', 2, 0); return [r(), r()]; }"
    )


def test_indirect_messages_of_s3_runs_travel_through_the_bucket(workers):
    Handler.scripts["s3"] = sandbox_script(
        [
            """async function s3() {
  const rank = context.getRank();
  await context.sendToRank(1 - rank, 'json', {rank});
  await context.sendToRank(1 - rank, 'typed', BigInt64Array.of(BigInt(rank) - 5n));
  const typed = await context.receiveFromRank(1 - rank, 'typed');
  context.emit(rank, [await context.receiveFromRank(1 - rank, 'json'), typed.constructor.name, String(typed[0])]);
}"""
        ]
    )
    ends = workers.evaluate(
        "assigns => harness.run(assigns)",
        [[f"w{rank}", assign("s3", 10, 0, rank, ranks=2) | {"storage": "s3"}] for rank in range(2)],
    )
    assert sorted(end["records"][0] for end in ends) == [
        [0, [{"rank": 1}, "BigInt64Array", "-4"]],
        [1, [{"rank": 0}, "BigInt64Array", "-5"]],
    ]
    messages = ["10.A.0.0.0/json", "10.A.0.0.0/typed", "10.A.0.1.0/json", "10.A.0.1.0/typed"]
    assert sorted(key for key in Handler.bucket if not key.startswith("out/")) == messages


LOST = """async function lost() {
  const rank = context.getRank();
  if (rank === 2) {  // starts late: what rank 1 sent it directly waited in its page's inbox
    context.emit(rank, await context.receiveFromRank(1, 'early', {direct: true}));
    return;
  }
  if (rank === 1) await context.sendToRank(2, 'early', 'waited for you', {direct: true});
  await context.allReduce(new Float32Array(10), 'sum', 'grads');
}"""


def test_a_lost_rank_fails_the_collective_and_early_direct_messages_wait_for_their_task(workers):
    Handler.scripts["lost"] = sandbox_script([LOST])
    # Rank 2 is held by w2 but its task has not started; ranks 0 and 1 wait in allReduce.
    workers.evaluate("harness.holders.set('8.A.0.2', 'w2')")
    first = workers.evaluate(
        """async assigns => {
  const ended = harness.run(assigns);
  await harness.until('the links', () => harness.workers.get('w2').peers.inbox.length >= 2);
  harness.lose(8, 'A', 2, 'its worker disconnected');
  return ended;
}""",
        [[f"w{rank}", assign("lost", 8, 0, rank)] for rank in range(2)],
    )
    assert [(end["type"], end["error"]) for end in first] == [
        ("task-failed", "rank 2 of group A failed during allReduce 'grads': its worker disconnected")
    ] * 2
    [late] = workers.evaluate("assigns => harness.run(assigns)", [["w2", assign("lost", 8, 0, 2)]])
    assert late["type"] == "task-done" and late["records"] == [[2, "waited for you"]]


def test_job_code_reaches_the_page_only_through_context_and_the_page_checks_what_a_sandbox_says(workers):
    # Job code's own postMessage would go to the sandbox's frame, not the page: it is refused, plainly.
    Handler.scripts["forged"] = sandbox_script(
        [
            "async function forged() {"
            " postMessage({type: 'peer-send', id: 1, rank: 9, tag: 'x', data: new ArrayBuffer(8)}); }",
            "async function waits() { await new Promise(() => {}); }",
        ]
    )
    [end] = workers.evaluate("assigns => harness.run(assigns)", [["w0", assign("forged", 9, 0, 0)]])
    assert end["error"] == "postMessage is not available to job code: it reaches the page through context only"

    # What a sandbox says is checked all the same: a malformed request, had one got through, fails its
    # task with the reason.
    ends = workers.evaluate(
        """async assign => {
  const w = harness.workers.get('w1');
  const ended = harness.run([['w1', assign]]);
  const running = () => w.tasks.tasks.get(assign.taskId);
  const task = await harness.until('the task', () => running()?.worker && running());
  const data = new ArrayBuffer(8);
  w.tasks.fromSandbox(task, {type: 'ps', id: 1, op: 'update', key: 'k', dtype: 'float32', data, fn: 'pow'});
  return ended;
}""",
        assign("forged", 9, 1, 0),
    )
    assert [end["error"] for end in ends] == ['the sandbox sent an invalid ps request: unknown update "pow"']


def test_a_link_carries_what_its_far_end_sends_the_moment_the_link_reaches_it(workers):
    # The end that accepts a link may send on it at once (its rank talks to the opener's rank too),
    # and Chromium can hand the opener that message before the channel's open event. Here rank 1
    # sends to rank 0 in the very turn rank 0's link reaches its page, on the connection the pair
    # has already (as every link after a run's first has).
    got = workers.evaluate(
        """async () => {
  const {workers, holders, until} = harness;
  const [w0, w1] = [workers.get('w0'), workers.get('w1')];
  const task = (w, run, rank) => {
    holders.set(`${run}.A.0.${rank}`, w.id);
    const t = {id: `${run}.A.0.${rank}.0`, ended: false, got: [], worker: {postMessage: m => t.got.push(m)},
      spec: {runId: run, group: 'A', stage: 0, rank, workerCount: 2, storage: 'pmrfs'}};
    w.peers.started(t);
    return t;
  };
  const send = (w, t, rank, tag) =>
    w.peers.request(t, {type: 'peer-send', id: 1, rank, tag, data: Uint8Array.of(rank).buffer, direct: true});
  const received = t => t.got.filter(m => m.type === 'peer-direct').map(m => m.tag);

  const [before, after] = [task(w0, 20, 0), task(w1, 20, 1)];
  send(w0, before, 1, 'connect');
  await until('the connection', () => received(after).length);

  const [t0, t1] = [task(w0, 21, 0), task(w1, 21, 1)];
  const claim = w1.datanode.claim;
  w1.datanode.claim = function (channel, ...rest) {  // the link reaches w1's Peers here
    claim.call(this, channel, ...rest);
    send(w1, t1, 0, 'at once');
  };
  send(w0, t0, 1, 'opened it');
  await until('both messages', () => received(t0).length && received(t1).length, 5000).catch(() => {});
  return [received(t0), received(t1)];
}"""
    )
    assert got == [["at once"], ["opened it"]]
