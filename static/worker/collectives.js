// What the ranks of a stage do together, inside the task sandbox (static/worker/sandbox.js): the
// payload codec of peer messages, the collectives over the sandbox's direct messages (passed in,
// so tests can run N ranks in one page), a rank's shard of an array and its seeded random numbers.
// A classic script (importScripts in the sandbox): defines self.peermrCollectives.
(function () {
  'use strict';

  // --- peer payload codec ---------------------------------------------------------------------------

  // Byte 0 the kind, bytes 1..7 zero (typed payloads stay 8-aligned), the payload from byte 8:
  // 0 JSON text (UTF-8), 1 an ArrayBuffer, 2.. the typed arrays of TYPED, in this order.
  const TYPED = [Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array,
    Float32Array, Float64Array, BigInt64Array, BigUint64Array];
  const HEADER = 8;
  const utf8 = new TextEncoder();
  const fromUtf8 = new TextDecoder('utf-8', {fatal: true});

  const typedIndex = value => TYPED.findIndex(type => value instanceof type);

  function encodePayload(value) {
    let kind, bytes;
    if (value instanceof ArrayBuffer) {
      kind = 1;
      bytes = new Uint8Array(value);
    } else if (ArrayBuffer.isView(value)) {
      const index = typedIndex(value);
      if (index < 0) throw new TypeError(`a ${value.constructor.name} cannot be sent: send a typed array or an ArrayBuffer`);
      kind = 2 + index;
      bytes = new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
    } else {
      const text = JSON.stringify(value);
      if (text === undefined) throw new TypeError(`${typeof value} cannot be sent: send an ArrayBuffer, a typed array or a JSON value`);
      kind = 0;
      bytes = utf8.encode(text);
    }
    const out = new Uint8Array(HEADER + bytes.byteLength);
    out[0] = kind;
    out.set(bytes, HEADER);
    return out.buffer;
  }

  function decodePayload(buffer) {
    const bytes = new Uint8Array(buffer);
    const kind = bytes[0];
    const type = TYPED[kind - 2];
    if (bytes.length < HEADER || kind > 1 && (!type || (bytes.length - HEADER) % type.BYTES_PER_ELEMENT)) {
      throw new Error('a peer message that is not a payload of this runtime');
    }
    if (kind === 0) return JSON.parse(fromUtf8.decode(bytes.subarray(HEADER)));
    if (kind === 1) return buffer.slice(HEADER);
    return new type(buffer.slice(HEADER));
  }

  // --- ranks --------------------------------------------------------------------------------------

  // Part i of n of a length: contiguous, the first length % n parts one longer (as input chunks are).
  function bounds(length, n, i) {
    const base = Math.floor(length / n);
    const extra = length % n;
    const start = i * base + Math.min(i, extra);
    return [start, start + base + (i < extra ? 1 : 0)];
  }

  function shard(items, rank, ranks) {
    const typed = ArrayBuffer.isView(items) && typedIndex(items) >= 0;
    if (!typed && !Array.isArray(items)) throw new TypeError('context.shard() needs an array or a typed array');
    const [start, end] = bounds(items.length, ranks, rank);
    return typed ? items.subarray(start, end) : items.slice(start, end);
  }

  // --- random numbers -----------------------------------------------------------------------------

  // One splitmix32 step: a well-mixed 32-bit word from a state and an input.
  function mix(state, input) {
    let h = (state ^ input) + 0x9e3779b9 | 0;
    h = Math.imul(h ^ h >>> 16, 0x21f0aaad);
    h = Math.imul(h ^ h >>> 15, 0x735a2d97);
    return (h ^ h >>> 15) >>> 0;
  }

  // xoshiro128** seeded from (run seed, group, rank, stream): the same numbers for every attempt of
  // a rank and every run with the same seed. Floats in [0, 1) with 53 random bits.
  function rng(seed, group, rank, stream) {
    let h = mix(mix(0, seed % 2 ** 32 | 0), Math.floor(seed / 2 ** 32) | 0);
    for (const c of String(group)) h = mix(h, c.codePointAt(0));
    h = mix(mix(h, rank), stream | 0);
    let a = mix(h, 1), b = mix(h, 2), c = mix(h, 3), d = mix(h, 4);
    const rotl = (x, k) => x << k | x >>> 32 - k;
    function next() {
      const result = Math.imul(rotl(Math.imul(b, 5), 7), 9);
      const t = b << 9;
      c ^= a; d ^= b; b ^= c; a ^= d; c ^= t; d = rotl(d, 11);
      return result >>> 0;
    }
    const random = () => ((next() >>> 5) * 67108864 + (next() >>> 6)) / 9007199254740992;
    // Standard normal (Box-Muller).
    random.normal = () => Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random());
    return random;
  }

  // --- fingerprints -------------------------------------------------------------------------------

  // 64 bits (two splitmix lanes, as hex) of a value's exact contents: the bytes of typed arrays and
  // of tensors (anything with dataSync() and a shape, as TF.js tensors have), with their types and
  // shapes, and of JSON-like values. Equal values give equal fingerprints on every rank.
  function fingerprint(value, caller) {
    let a = 0x2545f491, b = 0x6c8e9cf5;
    const word = w => { a = mix(a, w); b = mix(b, w ^ 0x5bd1e995); };
    const text = s => { word(s.length); for (let i = 0; i < s.length; i++) word(s.charCodeAt(i)); };
    const bytes = (kind, view) => {
      text(kind);
      word(view.length);
      const whole = view.length >> 2;
      const words = view.byteOffset % 4 ? new Uint32Array(view.slice(0, whole * 4).buffer) : new Uint32Array(view.buffer, view.byteOffset, whole);
      for (let i = 0; i < whole; i++) word(words[i]);
      for (let i = whole * 4; i < view.length; i++) word(view[i]);
    };
    const walk = v => {
      if (v instanceof ArrayBuffer) return bytes('ArrayBuffer', new Uint8Array(v));
      if (ArrayBuffer.isView(v)) return bytes(v.constructor.name, new Uint8Array(v.buffer, v.byteOffset, v.byteLength));
      if (typeof v?.dataSync === 'function' && Array.isArray(v.shape)) {
        text(`tensor ${v.dtype} [${v.shape}]`);
        return walk(v.dataSync());
      }
      if (Array.isArray(v)) {
        text(`array ${v.length}`);
        return v.forEach(walk);
      }
      if (v !== null && typeof v === 'object' && [Object.prototype, null].includes(Object.getPrototypeOf(v))) {
        const keys = Object.keys(v).sort();
        text(`object ${keys.length}`);
        return keys.forEach(key => { text(key); walk(v[key]); });
      }
      if (v === null || ['number', 'bigint', 'string', 'boolean'].includes(typeof v)) return text(`${typeof v} ${v}`);
      throw new TypeError(`${caller}: cannot compare ${v?.constructor?.name || typeof v} values (give tensors, typed arrays or JSON values)`);
    };
    walk(value);
    return [a, b].map(h => h.toString(16).padStart(8, '0')).join('');
  }

  // --- collectives --------------------------------------------------------------------------------

  class PeerLostError extends Error {
    constructor(rank, group, during, reason) {
      super(`rank ${rank} of group ${group} failed during ${during}: ${reason}`);
      this.name = 'PeerLostError';
      this.rank = rank;
      this.group = group;
    }
  }

  const isBig = array => array instanceof BigInt64Array || array instanceof BigUint64Array;

  // Element-wise into `into` (a segment of the result) from what a peer sent.
  const REDUCE = {
    sum(into, from) { for (let i = 0; i < into.length; i++) into[i] += from[i]; },
    max(into, from) { for (let i = 0; i < into.length; i++) if (from[i] > into[i]) into[i] = from[i]; },
    min(into, from) { for (let i = 0; i < into.length; i++) if (from[i] < into[i]) into[i] = from[i]; },
  };
  REDUCE.mean = REDUCE.sum;  // then divided by the rank count

  const MAX_TAG = 150;  // of a collective's tag: its messages' tags (at most 200 characters) add a prefix

  // The collectives of one rank. send(rank, tag, value, during) and receive(rank, tag, during) are
  // direct messages; `during` names the collective (for timeouts and lost peers). Every rank must
  // call the same collectives in the same order; a tag left out counts calls per kind.
  function create({rank, ranks, group, send, receive}) {
    const calls = {};
    const running = new Set();  // the collectives under way: what a lost peer fails
    const mod = i => (i % ranks + ranks) % ranks;

    async function run(kind, tag, body) {
      let name, during;
      if (tag === undefined) {
        calls[kind] = (calls[kind] || 0) + 1;
        name = `#${calls[kind]}`;
        during = `${kind} #${calls[kind]}`;
      } else if (typeof tag === 'string' && tag.length && tag.length <= MAX_TAG) {
        name = `:${tag}`;
        during = `${kind} '${tag}'`;
      } else {
        throw new TypeError(`${kind}: the tag must be a string of 1 to ${MAX_TAG} characters`);
      }
      let fail;
      const failed = new Promise((_, reject) => { fail = reject; });
      failed.catch(() => {});  // only raced against
      const call = {during, fail};
      // Internal tags start with U+0000, which job tags may not.
      const guard = promise => Promise.race([promise, failed]);
      const io = {
        send: (to, step, value) => guard(send(to, `\u0000${kind}${name}:${step}`, value, during)),
        receive: (from, step) => guard(receive(from, `\u0000${kind}${name}:${step}`, during)),
        during,
      };
      running.add(call);
      try {
        return await body(io);
      } finally {
        running.delete(call);
      }
    }

    // Dissemination: in round k every rank signals rank + 2^k and waits for rank - 2^k.
    async function barrier(tag) {
      if (ranks === 1) return;
      await run('barrier', tag, async io => {
        for (let k = 1, step = 0; k < ranks; k *= 2, step++) {
          await Promise.all([io.send(mod(rank + k), step, null), io.receive(mod(rank - k), step)]);
        }
      });
    }

    // A binomial tree from the root: in round k the ranks that have the value pass it 2^k further.
    async function broadcast(root, data, tag) {
      if (!(Number.isInteger(root) && root >= 0 && root < ranks)) {
        throw new RangeError(`broadcast: root ${root} is not a rank of this stage (0 to ${ranks - 1})`);
      }
      if (ranks === 1) return data;
      return run('broadcast', tag, async io => {
        const relative = mod(rank - root);
        let value = data;
        for (let mask = 1, step = 0; mask < ranks; mask *= 2, step++) {
          if (relative < mask) {
            if (relative + mask < ranks) await io.send(mod(rank + mask), step, value);
          } else if (relative < 2 * mask) {
            value = await io.receive(mod(rank - mask), step);
          }
        }
        return value;
      });
    }

    // Ring all-reduce: reduce-scatter then all-gather, one near-equal segment per rank, each step
    // sending to the right neighbour and receiving from the left. Every segment is reduced in the
    // same order, so every rank gets the same bits.
    async function allReduce(array, op = 'sum', tag) {
      if (!ArrayBuffer.isView(array) || typedIndex(array) < 0) throw new TypeError('allReduce needs a typed array');
      if (!Object.hasOwn(REDUCE, op)) throw new TypeError(`allReduce: unknown op ${JSON.stringify(op)} (sum, mean, max or min)`);
      const result = array.slice();
      if (ranks > 1) {
        await run('allReduce', tag, async io => {
          const segment = i => result.subarray(...bounds(result.length, ranks, mod(i)));
          const left = mod(rank - 1);
          const right = mod(rank + 1);
          const exchange = async (step, i) => {
            const [, received] = await Promise.all([io.send(right, step, segment(i)), io.receive(left, step)]);
            const into = segment(i - 1);
            if (received?.constructor !== result.constructor || received.length !== into.length) {
              throw new Error(`${io.during}: rank ${left} reduces an array of another type or length`);
            }
            return [into, received];
          };
          for (let step = 0; step < ranks - 1; step++) REDUCE[op](...await exchange(step, rank - step));
          for (let step = 0; step < ranks - 1; step++) {
            const [into, received] = await exchange(ranks - 1 + step, rank + 1 - step);
            into.set(received);
          }
        });
      }
      if (op === 'mean') {
        const n = isBig(result) ? BigInt(ranks) : ranks;
        for (let i = 0; i < result.length; i++) result[i] /= n;
      }
      return result;
    }

    // Ring all-gather: each value travels ranks - 1 hops to the right.
    const allGather = (data, tag) => gather('allGather', data, tag);

    async function gather(kind, data, tag) {
      const values = new Array(ranks);
      values[rank] = data;
      if (ranks === 1) return values;
      return run(kind, tag, async io => {
        const left = mod(rank - 1);
        for (let step = 0; step < ranks - 1; step++) {
          const [, received] = await Promise.all([io.send(mod(rank + 1), step, values[mod(rank - step)]), io.receive(left, step)]);
          values[mod(rank - step - 1)] = received;
        }
        return values;
      });
    }

    // Whether every rank holds the same values (a model's weights, say): the ranks gather each
    // other's fingerprints of them, so every rank sees a difference and raises. Resolves to the
    // fingerprint they share.
    async function assertReplicaIntegrity(values, tag) {
      const items = Array.isArray(values) ? values : [values];
      const own = items.map(item => fingerprint(item, 'assertReplicaIntegrity'));
      const all = await gather('assertReplicaIntegrity', own, tag);
      const holders = new Map();  // the ranks' fingerprints, joined -> the ranks that hold them
      all.forEach((prints, r) => holders.set(prints.join(), [...holders.get(prints.join()) || [], r]));
      if (holders.size === 1) return fingerprint(own, 'assertReplicaIntegrity');
      const sets = [...holders.values()].map(rs => `[${rs.join(', ')}]`);
      const differing = own.map((print, i) => all.some(prints => prints[i] !== print)).map((d, i) => d ? i : -1)
        .filter(i => i >= 0);
      const where = all.some(prints => prints.length !== own.length)
        ? `they hold ${[...new Set(all.map(prints => prints.length))].join(' or ')} values`
        : `values[${differing[0]}] differs${differing.length > 1 ? ` (and ${differing.length - 1} more)` : ''}`;
      const error = new Error(`assertReplicaIntegrity: the replicas differ: ${where}; ranks with the same values: ${sets.join(', ')}`);
      error.name = 'ReplicaMismatchError';
      throw error;
    }

    function peerLost(lost, reason) {
      for (const call of running) call.fail(new PeerLostError(lost, group, call.during, reason));
    }

    return {barrier, broadcast, allReduce, allGather, assertReplicaIntegrity, peerLost};
  }

  globalThis.peermrCollectives = Object.freeze({encodePayload, decodePayload, bounds, shard, rng, create, PeerLostError});
})();
