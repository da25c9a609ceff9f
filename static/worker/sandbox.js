// The task runtime inside the sandbox: a dedicated Web Worker per run and tab. The worker page
// (static/worker/tasks.js) has it started, through static/worker/sandboxes.js, inside a hidden frame
// loaded without credentials (static/worker/sandbox-frame.js), from the text of the run's sandbox
// script, which the appliance serves as
//
//   importScripts('<appliance>/static/worker/sandbox.js');  // this file: defines self.peermrSandbox
//   peermrSandbox.loadScripts([...job scripts]);             // the job's declared scripts
//   peermrSandbox.seal();                                    // job code may not load more
//   peermrSandbox.define({input: async function input() {...} | null, stages: [function..., ...]});
//
// or starts warm from /worker/sandbox.js (the runtime alone, under the same Content-Security-Policy)
// and loads the run's script when the page says {type: 'load', url, text, scripts}.
// The Web Worker has the frame's context, which holds no credentials: no request it makes carries the
// appliance's cookies, and it has no storage of the worker page. Its URL is a blob: one, so job URLs
// resolve against the sandbox script's URL on the appliance (the frame's importScripts does so too),
// and `self.location` reads as that URL (libraries find their files next to it, as in a Web Worker
// started from it).
// It talks to the page over the MessagePort the frame hands it first ({type: 'port'} on `self`); until
// then what it says waits. Job code never holds that port.
// It runs the input function or a stage function with `context`, encodes what they emit with
// static/worker/codecs.js into one blob per output partition, and reports to the page:
// It runs one task at a time; a run that loads no scripts of its own has its tasks on a tab run in
// the same sandbox, each with the globals as they were before the first (see "one task after another").
//   page -> sandbox  {type: 'run', task, inputs: [Blob | ArrayBuffer | {url}]}, {type: 'put-url', id, url, key}
//                    {type: 'load', url, text, scripts} (a warm sandbox: the run's script, and its scripts' texts)
//                    {type: 'input', taskId, producer, inputs: [Blob]} (a streaming reduce: task.awaiting)
//   sandbox -> page  {type: 'ready', reusable} (loaded: the page may run the run's next tasks in it),
//                    {type: 'log', level, text, at}, {type: 'progress', emits, bytes, ticks, beats},
//                    {type: 'worker-timeout', seconds}, {type: 'need-put-url', id, partition},
//                    {type: 'output', partition, data (transferred), records}            (pmrfs)
//                    {type: 'output', partition, key, size, records}                     (s3, after its PUT)
//                    {type: 'done', emits, cpuMs}, {type: 'failed', error, stack, peerLost}
// Ranks of a stage talk through the page (payloads encoded by static/worker/collectives.js):
//   sandbox -> page  {type: 'peer-send', id, rank, tag, data (transferred), direct?}  (direct, or pmrfs)
//                    {type: 'peer-put-url', id, rank, tag}, then {type: 'peer-send', id, rank, tag, key, size}  (s3)
//                    {type: 'peer-receive', id, rank, tag}                               (indirect)
//                    {type: 'ps', id, op: write|update|read|clock, key, dtype, data, fn, version}
//   page -> sandbox  {type: 'peer-sent', id, error?}, {type: 'peer-put-url', id, url, key, error?},
//                    {type: 'peer-message', id, data | url | error}, {type: 'ps-reply', id, error?, dtype, data, clock, version},
//                    {type: 'peer-direct', rank, tag, data}, {type: 'peer-lost', rank, reason}
// A classic script: its importScripts loads the runtime and the job's declared scripts.
(function () {
  'use strict';

  const scope = self;
  const originalImportScripts = scope.importScripts.bind(scope);
  const originalFetch = scope.fetch.bind(scope);
  const later = scope.setTimeout.bind(scope);
  const cancelLater = scope.clearTimeout.bind(scope);
  const clock = performance.now.bind(performance);
  const hasOwn = Object.hasOwn;

  // Built-ins the runtime's walls use, taken before any job code runs: job code may replace every
  // global and prototype it reaches (Request, URL, Array.prototype.includes...), and must not change
  // what a check sees. Called with Reflect.apply, never as methods of the objects job code passes.
  const apply = Reflect.apply;
  const NativeProxy = Proxy;
  const {get: reflectGet, has: reflectHas, ownKeys: reflectKeys, getOwnPropertyDescriptor: reflectDescriptor} = Reflect;
  const NativeRequest = scope.Request;
  const NativeURL = scope.URL;
  const getter = (proto, name) => Object.getOwnPropertyDescriptor(proto, name).get;
  const requestMethod = getter(NativeRequest.prototype, 'method');
  const requestUrl = getter(NativeRequest.prototype, 'url');
  const urlOrigin = getter(NativeURL.prototype, 'origin');
  const urlHref = getter(NativeURL.prototype, 'href');
  const setHas = Set.prototype.has;
  const portPost = MessagePort.prototype.postMessage;
  const setPortHandler = Object.getOwnPropertyDescriptor(MessagePort.prototype, 'onmessage').set;
  const eventData = getter(MessageEvent.prototype, 'data');
  const eventPorts = getter(MessageEvent.prototype, 'ports');
  const stopEvent = Event.prototype.stopImmediatePropagation;
  const globalEval = scope.eval;

  // The sandbox script's URL on the appliance (the frame names it before the script's first line; a
  // warm sandbox learns the run's with its 'load'): job URLs resolve against it.
  let scriptURL = scope.peermrScriptURL;
  delete scope.peermrScriptURL;
  // Adds texts of the appliance's scripts, which importScripts then evaluates (sandbox-frame.js).
  const preload = scope.peermrPreload;
  delete scope.peermrPreload;
  const resolved = url => apply(urlHref, new NativeURL(url, scriptURL), []);
  Object.defineProperty(scope, 'location', {get: () => new NativeURL(scriptURL), enumerable: true, configurable: true});

  // To the page, over the sandbox's port once the frame has handed it over.
  let port = null;
  const unsent = [];
  function post(message, transfer = []) {
    if (port) apply(portPost, port, [message, transfer]);
    else unsent[unsent.length] = [message, transfer];
  }

  // The served script may load versioned codecs.js and collectives.js first (importScripts(codecs, collectives, sandbox)).
  if (!scope.peermrCodecs) originalImportScripts('/static/worker/codecs.js');
  if (!scope.peermrCollectives) originalImportScripts('/static/worker/collectives.js');
  const codecs = scope.peermrCodecs;
  const shuffle = codecs.shuffle;
  const collectives = scope.peermrCollectives;

  const AUTO_FLUSH_BYTES = 32 * 1024 * 1024;
  const PROGRESS_MS = 250;
  // The sandbox's own heartbeat while the task's event loop turns (docs/protocol.md, task-progress).
  const BEAT_MS = 5000;
  const UNPACK_AHEAD = 4;  // a reduce's input pieces unpacked at once (readInputs)
  const MAX_TEXT = 2000;
  const MAX_STACK = 8000;
  const MAX_LOG_LINES = 10000;
  const MAX_WORKER_TIMEOUT = 7 * 24 * 3600;
  const IMPORT_REFUSED = 'importScripts is not available to job code';
  const POST_REFUSED = 'postMessage is not available to job code: it reaches the page through context only';

  Error.stackTraceLimit = 50;  // the job's frames under ours

  const applianceOrigin = apply(urlOrigin, new NativeURL(scriptURL), []);
  let allowedOrigins = new Set([applianceOrigin]);
  let sealed = false;
  let definition = null;
  let task = null;         // the running task, or the last one (one at a time)
  let logLines = 0;
  let nextRequestId = 1;
  const replies = new Map();  // request id -> resolve(the page's reply)

  // --- the seal ------------------------------------------------------------------------------------

  // Chromium keeps some globals on WorkerGlobalScope.prototype: delete them along the whole chain.
  function removeGlobal(name) {
    for (let o = scope; o; o = Object.getPrototypeOf(o)) if (hasOwn(o, name)) delete o[name];
  }

  function replaceGlobal(name, value) {
    removeGlobal(name);
    Object.defineProperty(scope, name, {value, writable: true, configurable: true});
  }

  // GET and HEAD only, to an allowed origin, without credentials. What goes out is checked on the
  // request that goes out, through the built-ins taken above; its init has no prototype, so nothing
  // job code adds to Object.prototype (a method, a body) joins it.
  function sandboxFetch(input, init) {
    let request;
    try {
      const first = new NativeRequest(typeof input === 'string' ? resolved(input) : input, init);
      request = new NativeRequest(first, {__proto__: null, credentials: 'omit'});
    } catch (e) {
      return Promise.reject(e);
    }
    const method = apply(requestMethod, request, []);
    if (method !== 'GET' && method !== 'HEAD') {
      return Promise.reject(new TypeError('fetch: only GET is allowed in jobs'));
    }
    const origin = apply(urlOrigin, new NativeURL(apply(requestUrl, request, [])), []);
    if (!apply(setHas, allowedOrigins, [origin])) {
      return Promise.reject(new TypeError(
        `fetch to ${origin} is not allowed by this appliance (allowed: ${[...allowedOrigins].join(', ')})`));
    }
    return originalFetch(request);
  }

  // The network and storage limits hold from the start, before any job script (declared ones
  // included) runs: fetch only as above; no other way out (XMLHttpRequest, WebSocket,
  // EventSource, WebTransport); no nested workers (they would run unsealed); no storage or locks
  // (the frame has none of the worker page's, and job code gets none of its own). Job code talks to
  // the page only through `context`: what it posts itself would go to the frame, which ignores it.
  replaceGlobal('fetch', sandboxFetch);
  replaceGlobal('postMessage', function postMessage() { throw new Error(POST_REFUSED); });
  for (const name of ['XMLHttpRequest', 'WebSocket', 'WebSocketStream', 'EventSource', 'WebTransport', 'Worker',
    'SharedWorker', 'indexedDB', 'caches', 'BroadcastChannel']) {
    removeGlobal(name);
  }
  for (let o = scope.navigator; o; o = Object.getPrototypeOf(o)) {
    for (const name of ['storage', 'locks']) if (hasOwn(o, name)) delete o[name];
  }


  function seal() {
    sealed = true;
    replaceGlobal('importScripts', function importScripts() { throw new Error(IMPORT_REFUSED); });
  }

  function loadScripts(urls) {
    if (sealed) throw new Error(IMPORT_REFUSED);
    reusable = !urls?.length;
    for (const url of urls || []) {
      try {
        originalImportScripts(url);
      } catch (e) {
        throw new Error(`could not load the job script ${url}: ${e.message}`);
      }
    }
  }

  function define({input = null, stages = []} = {}) {
    definition = {input, stages};
    post({type: 'ready', reusable});
  }

  // --- one task after another ----------------------------------------------------------------------

  // The page hands a sandbox the run's next task only when the run loads no scripts (a library's own
  // state would outlive the task) and the last task ended well. The next task then starts from the
  // globals as they were when the first started: what a task added to or replaced on the global
  // object is gone, its timers are cleared, its registered update functions forgotten, and its
  // context, if its code still holds it, does nothing more. Changes to built-in prototypes stay
  // (docs/sdk.md); tasks of other runs never share a sandbox.
  let reusable = true;
  let firstGlobals = null;   // the global object's own properties when the first task started
  const jobTimers = new Set();

  function trackTimers() {
    const setInterval = scope.setInterval.bind(scope);
    const clearInterval = scope.clearInterval.bind(scope);
    const track = set => function (handler, ...rest) {
      const id = set(typeof handler === 'function' && set === later
        ? function (...args) { jobTimers.delete(id); return handler.apply(this, args); }
        : handler, ...rest);
      jobTimers.add(id);
      return id;
    };
    const untrack = clear => id => { jobTimers.delete(id); clear(id); };
    replaceGlobal('setTimeout', track(later));
    replaceGlobal('setInterval', track(setInterval));
    replaceGlobal('clearTimeout', untrack(cancelLater));
    replaceGlobal('clearInterval', untrack(clearInterval));
  }
  trackTimers();

  const sameDescriptor = (a, b) => Object.is(a.value, b.value) && a.get === b.get && a.set === b.set &&
    a.writable === b.writable && a.enumerable === b.enumerable && a.configurable === b.configurable;

  // The globals back as the first task found them; '' or what could not be put back.
  function globalsAsFirst() {
    for (const id of jobTimers) cancelLater(id);  // clearTimeout clears intervals too
    jobTimers.clear();
    psFunctions.clear();
    replies.clear();
    logLines = 0;
    for (const key of Reflect.ownKeys(scope)) {
      if (!firstGlobals.has(key) && !Reflect.deleteProperty(scope, key)) return `the global ${String(key)} cannot be removed`;
    }
    for (const [key, first] of firstGlobals) {
      const now = Object.getOwnPropertyDescriptor(scope, key);
      if (now && sameDescriptor(now, first)) continue;
      if (!Reflect.defineProperty(scope, key, first)) return `the global ${String(key)} cannot be put back`;
    }
    return '';
  }

  // A task's context: once the sandbox has gone on to another task, job code of this one that still
  // holds it waits forever, as it would have in a Web Worker that was stopped.
  function ownedBy(owner, context) {
    const guard = fn => function (...args) { return task === owner ? fn.apply(this, args) : new Promise(() => {}); };
    const guarded = {};
    for (const [name, value] of Object.entries(context)) {
      if (typeof value === 'function') guarded[name] = guard(value);
      else guarded[name] = Object.freeze(Object.fromEntries(Object.entries(value).map(([k, fn]) => [k, guard(fn)])));
    }
    return guarded;
  }

  // --- logs ----------------------------------------------------------------------------------------

  function formatArg(arg) {
    if (typeof arg === 'string') return arg;
    if (arg instanceof Error) return arg.stack || `${arg.name}: ${arg.message}`;
    if (arg !== null && typeof arg === 'object') {
      try {
        return JSON.stringify(arg) ?? String(arg);
      } catch {
        return String(arg);
      }
    }
    return String(arg);
  }

  function log(level, args) {
    logLines++;
    if (logLines > MAX_LOG_LINES) {
      if (logLines === MAX_LOG_LINES + 1) {
        post({type: 'log', level: 'warn', text: `more than ${MAX_LOG_LINES} log lines: the rest are dropped`, at: Date.now()});
      }
      return;
    }
    post({type: 'log', level, text: Array.from(args, formatArg).join(' ').slice(0, MAX_TEXT), at: Date.now()});
  }

  const levels = {log: 'info', info: 'info', debug: 'info', dir: 'info', warn: 'warn', error: 'error'};
  for (const [method, level] of Object.entries(levels)) console[method] = (...args) => log(level, args);

  // --- failures ------------------------------------------------------------------------------------

  const OUR_FRAME = /\/static\/worker\/(sandbox|codecs|collectives)\.js/;

  // The stack without this runtime's frames, when some frame of job code is left.
  function jobStack(stack) {
    const lines = String(stack || '').split('\n');
    const isFrame = line => /^\s+at /.test(line);
    const theirs = lines.filter(line => !(isFrame(line) && OUR_FRAME.test(line)));
    return theirs.some(isFrame) ? theirs.join('\n') : lines.join('\n');
  }

  function fail(error) {
    if (!task || task.ended) return;
    task.ended = task.completed = true;
    const isError = error !== null && typeof error === 'object' && 'message' in error;
    const message = isError ? String(error.message) : formatArg(error);
    // A lost peer the job did not catch: the appliance may start the stage again with the replacement.
    const peerLost = isError && error.name === 'PeerLostError';
    post({type: 'failed', error: message.slice(0, MAX_TEXT), stack: jobStack(isError ? error.stack : '').slice(0, MAX_STACK), peerLost});
  }

  scope.addEventListener('error', event => {
    if (!task) return;  // while the script loads: the page sees it as the Worker's error
    event.preventDefault();
    fail(event.error ?? event.message);
  });
  scope.addEventListener('unhandledrejection', event => {
    if (!task) return;
    event.preventDefault();
    fail(event.reason);
  });

  // --- requests to the page ------------------------------------------------------------------------

  // A message the page answers with the same id: reply resolves with the answer.
  function request(message, transfer = []) {
    const id = nextRequestId++;
    const reply = new Promise(resolve => replies.set(id, resolve));
    post({...message, id}, transfer);
    return {id, reply};
  }

  // The promise, or "<what> timed out after <timeout> ms" (then onTimeout()) if it takes longer.
  function timeLimit(promise, timeout, what, onTimeout) {
    let timer;
    const expired = new Promise((_, reject) => {
      timer = later(() => {
        onTimeout();
        reject(new Error(`${what} timed out after ${timeout} ms`));
      }, timeout);
    });
    return Promise.race([promise, expired]).finally(() => cancelLater(timer));
  }

  // --- output --------------------------------------------------------------------------------------

  // Called at every emit. Reading the clock costs more than keeping a record (0.2-0.3 µs in a
  // worker), so it is read every `clockEvery` emits: a number that doubles while emits come less
  // than a microsecond apart, up to 256, and is back to 1 when they come slower or job code awaits.
  function emitted() {
    if (++task.sinceClock < task.clockEvery) return;
    task.sinceClock = 0;
    const now = clock();
    const fast = now - task.clockAt < task.clockEvery * 0.001;
    task.clockAt = now;
    task.clockEvery = fast ? Math.min(task.clockEvery * 2, 256) : 1;
    task.loopTimer ??= later(() => { task.loopTimer = null; task.clockEvery = 1; }, 0);
    progress();
  }

  // At most every PROGRESS_MS while emits change; the last count follows once they stop.
  function progress(force) {
    if (!force && clock() - task.lastProgress < PROGRESS_MS) {
      task.progressTimer ??= later(() => { task.progressTimer = null; progress(true); }, PROGRESS_MS);
      return;
    }
    task.lastProgress = clock();
    if (!task.ended) {
      const bytes = task.flushedBytes + task.buffered;
      post({type: 'progress', emits: task.emits, bytes, ticks: task.ticks, beats: task.beats, read: task.read});
    }
  }

  // A beat comes whenever the task's event loop turns (between its awaits: a fetch, a training
  // step): a task that emits nothing for minutes is busy, not hung. One that never yields stops the
  // beats and is found stalled, as before. Timed with the sandbox's own setTimeout (job code
  // replaces the global one).
  function beat(current) {
    later(() => {
      if (task !== current || current.ended) return;
      current.beats++;
      progress(true);
      beat(current);
    }, BEAT_MS);
  }

  // An emit of a stage that feeds a reduce in the shuffle format: kept with its key's other values
  // until the flush (the key's partition is found then, once per key).
  function addToGroup(key, value) {
    const name = typeof key === 'string' ? key : shuffle.groupName(key);
    const v = typeof value === 'number' && (value | 0) === value ? value : shuffle.plain(value);
    if (shuffle.addToGroup(task.groups, name, v)) {
      task.groupCount++;
      task.buffered += name.length + 8;
    }
    task.buffered += typeof v === 'number' ? 5 : shuffle.plainSize(v);
    task.emits++;
    if (task.buffered > AUTO_FLUSH_BYTES) flush();
    emitted();
  }

  function addRecord(partition, key, value) {
    let encoder = task.encoders.get(partition);
    if (!encoder) task.encoders.set(partition, encoder = codecs.encoder(task.spec.outputContentType));
    const before = encoder.size;
    encoder.add(key, value);  // a value the format cannot hold throws here, at the emit
    task.buffered += encoder.size - before;
    task.emits++;
    if (task.buffered > AUTO_FLUSH_BYTES) flush();
    emitted();
  }

  async function upload(partition, bytes) {
    const reply = await request({type: 'need-put-url', partition}).reply;
    if (!reply.url) throw new Error(`no upload URL for partition ${partition}${reply.error ? `: ${reply.error}` : ''}`);
    const response = await originalFetch(resolved(reply.url), {__proto__: null, method: 'PUT', body: bytes, credentials: 'omit'});
    if (!response.ok) throw new Error(`upload of partition ${partition} failed: HTTP ${response.status}`);
    return reply.key;
  }

  // Shuffle pieces are compressed when that makes them smaller: gzip through the browser's own
  // CompressionStream costs less than moving the bytes between tabs (bench/wordcount.py).
  const COMPRESS_FROM = 4096;

  async function through(bytes, transform) {
    return new Uint8Array(await new Response(new Blob([bytes]).stream().pipeThrough(transform)).arrayBuffer());
  }

  async function compressed(bytes) {
    if (bytes.byteLength < COMPRESS_FROM || typeof CompressionStream !== 'function') return bytes;
    const packed = await through(bytes, new CompressionStream('gzip'));
    return packed.byteLength < bytes.byteLength ? packed : bytes;
  }

  function decompressed(bytes) {
    return bytes[0] === 0x1f && bytes[1] === 0x8b ? through(bytes, new DecompressionStream('gzip')) : bytes;
  }

  // The grouped emits as one shuffle piece per partition, in partition order.
  function cutGroups(groups) {
    const writers = new Map();
    const partitions = task.spec.workerCount;
    for (const name in groups) {
      const values = groups[name];
      const partition = codecs.partitionOf(name, partitions);
      let writer = writers.get(partition);
      if (!writer) writers.set(partition, writer = shuffle.writer(shuffle.GROUPS));
      writer.group(name, values);
    }
    return [...writers].sort(([a], [b]) => a - b)
      .map(([partition, writer]) => ({partition, records: writer.records, bytes: writer.finish()}));
  }

  // The stage's reduce function run on one flush's groups, as Hadoop's combiner: what it emits
  // replaces them. It runs with its own context, whose emits are taken until it first awaits.
  async function combine(groups) {
    const combined = shuffle.groups();
    const reduce = definition.stages[task.spec.stage + 1];
    const keyToValues = shuffle.keyToValues(groups, values => shuffle.valuesOf(values).map(shuffle.value));
    const mapContext = scope.context;
    let open = true;
    scope.context = {
      ...mapContext,
      emit(key, value) {
        if (!open) throw new Error('the combiner emitted after it awaited: emit before the first await');
        shuffle.addToGroup(combined, shuffle.groupName(key), shuffle.plain(value));
      },
      flush: () => Promise.resolve(),
      onComplete: () => Promise.resolve(),
    };
    let result;
    try {
      result = reduce(keyToValues);
    } finally {
      open = false;
      scope.context = mapContext;
    }
    await result;
    return combined;
  }

  // One blob per non-empty partition buffer. Outputs reach the page in the order they were cut.
  function flush() {
    const pieces = [];
    for (const partition of [...task.encoders.keys()].sort((a, b) => a - b)) {
      const encoder = task.encoders.get(partition);
      task.encoders.delete(partition);
      if (encoder.records) pieces.push({partition, records: encoder.records, bytes: encoder.finish()});
    }
    let grouped = null;
    if (task.groupCount) {
      const groups = task.groups;
      task.groups = shuffle.groups();
      task.groupCount = 0;
      grouped = task.spec.combine ? combine(groups).then(cutGroups) : Promise.resolve(cutGroups(groups));
    }
    task.buffered = 0;
    const packed = task.spec.outputContentType === shuffle.TYPE;
    for (const piece of pieces) deliver(piece, packed ? compressed(piece.bytes) : piece.bytes);
    if (grouped) {
      // One link of the chain for them all: pieces cut later wait behind these, whatever the combiner takes.
      task.delivered = Promise.all([task.delivered, grouped]).then(async ([, found]) => {
        const packed = found.map(piece => compressed(piece.bytes));  // all at once, sent in order
        packed.forEach(p => p.catch(() => {}));  // each is awaited in turn below
        for (let i = 0; i < found.length; i++) await send(found[i], await packed[i]);
      });
      task.delivered.catch(fail);
    }
    return task.delivered;
  }

  function deliver(piece, bytes) {
    task.delivered = Promise.all([task.delivered, bytes]).then(([, data]) => send(piece, data));
    task.delivered.catch(fail);
  }

  // To the page (pmrfs), or into the bucket (s3).
  async function send({partition, records}, bytes) {
    const size = bytes.byteLength;
    task.flushedBytes += size;
    if (task.spec.storage === 's3') {
      const key = await upload(partition, bytes);
      post({type: 'output', partition, key, size, records});
    } else {
      const data = bytes.byteOffset === 0 && size === bytes.buffer.byteLength ? bytes.buffer : bytes.slice().buffer;
      post({type: 'output', partition, data, records}, [data]);
    }
  }

  // Flush, then report the task done once every output is delivered (onComplete, or the stage returned).
  function finish() {
    if (!task.finishing) {
      task.completed = true;
      task.finishing = (async () => {
        await flush();
        // A turn of the event loop first: job code that goes on after an onComplete() it did not
        // await (an emit, a throw) fails the task instead of racing its report.
        await new Promise(resolve => later(resolve, 0));
        if (task.ended) return;
        task.ended = true;
        post({type: 'done', emits: task.emits, cpuMs: Math.round(clock() - task.started)});
      })();
      task.finishing.catch(fail);
    }
    return task.finishing;
  }

  // --- peer messages -------------------------------------------------------------------------------

  const PEER_TIMEOUT_MS = 600_000;
  const MAX_TIMEOUT_MS = 2 ** 31 - 1;  // setTimeout's
  const MAX_TAG = 200;
  const MAX_DIRECT = 256 * 1024 * 1024;  // what a receiving page keeps
  // Direct messages (and those a rank sends itself) by [rank, tag]: not yet received, and receives waiting.
  const mailbox = new Map();
  const waiting = new Map();
  const mailKey = (rank, tag) => JSON.stringify([rank, tag]);

  function checkPeer(what, rank, tag) {
    const ranks = task.spec.workerCount;
    if (!(Number.isInteger(rank) && rank >= 0 && rank < ranks)) {
      throw new RangeError(`${what}: ${rank} is not a rank of this stage (0 to ${ranks - 1})`);
    }
    if (typeof tag !== 'string' || !tag.length || tag.length > MAX_TAG || tag[0] === '\u0000') {
      throw new TypeError(`${what}: the tag must be a string of 1 to ${MAX_TAG} characters, not starting with U+0000`);
    }
  }

  function deliverDirect(rank, tag, data) {
    const key = mailKey(rank, tag);
    const receivers = waiting.get(key);
    if (receivers) {
      const receiver = receivers.shift();
      if (!receivers.length) waiting.delete(key);
      receiver.resolve(data);
    } else if (mailbox.has(key)) {
      mailbox.get(key).push(data);
    } else {
      mailbox.set(key, [data]);
    }
  }

  function receiveDirect(rank, tag, timeout, what) {
    const key = mailKey(rank, tag);
    const queued = mailbox.get(key);
    if (queued) {
      const data = queued.shift();
      if (!queued.length) mailbox.delete(key);
      return Promise.resolve(data);
    }
    let receiver;
    const arrived = new Promise((resolve, reject) => { receiver = {rank, what, resolve, reject}; });
    if (waiting.has(key)) waiting.get(key).push(receiver);
    else waiting.set(key, [receiver]);
    return timeLimit(arrived, timeout, what, () => forget(key, receiver));
  }

  function forget(key, receiver) {
    const receivers = waiting.get(key) || [];
    const at = receivers.indexOf(receiver);
    if (at >= 0) receivers.splice(at, 1);
    if (!receivers.length) waiting.delete(key);
  }

  // A rank's worker is gone: every collective under way and every direct receive from it fail
  // (the collectives first, so their errors name them). Indirect receives wait for its replacement.
  function peerLost(rank, reason) {
    task.collectives.peerLost(rank, reason);
    for (const [key, receivers] of waiting) {
      for (const receiver of receivers.filter(r => r.rank === rank)) {
        forget(key, receiver);
        receiver.reject(new collectives.PeerLostError(rank, task.spec.group, receiver.what, reason));
      }
    }
  }

  function sent(what, reply) {
    if (reply.error) throw new Error(`${what} failed: ${reply.error}`);
  }

  // Encoded at once: the sender may change its data as soon as the call returns.
  async function sendPeer(rank, tag, value, direct, what) {
    const data = collectives.encodePayload(value);
    if (rank === task.spec.rank) return deliverDirect(rank, tag, data);
    if (direct && data.byteLength > MAX_DIRECT) throw new RangeError(`${what}: a direct message is at most 256 MiB`);
    if (direct || task.spec.storage !== 's3') {
      return sent(what, await request({type: 'peer-send', rank, tag, data, direct: Boolean(direct)}, [data]).reply);
    }
    const target = await request({type: 'peer-put-url', rank, tag}).reply;
    if (!target.url) throw new Error(`${what}: no upload URL${target.error ? `: ${target.error}` : ''}`);
    const response = await originalFetch(resolved(target.url), {__proto__: null, method: 'PUT', body: data, credentials: 'omit'});
    if (!response.ok) throw new Error(`${what}: the upload failed: HTTP ${response.status}`);
    sent(what, await request({type: 'peer-send', rank, tag, key: target.key, size: data.byteLength}).reply);
  }

  async function receivePeer(rank, tag, direct, timeout, what) {
    if (direct || rank === task.spec.rank) return collectives.decodePayload(await receiveDirect(rank, tag, timeout, what));
    const {id, reply} = request({type: 'peer-receive', rank, tag});
    const message = await timeLimit(reply, timeout, what, () => replies.delete(id));
    if (message.error) throw new Error(`${what} failed: ${message.error}`);
    if (!message.url) return collectives.decodePayload(message.data);
    const response = await originalFetch(resolved(message.url), {__proto__: null, credentials: 'omit'});
    if (!response.ok) throw new Error(`${what}: the download failed: HTTP ${response.status}`);
    return collectives.decodePayload(await response.arrayBuffer());
  }

  // --- parameter server ----------------------------------------------------------------------------

  const DTYPES = {
    float32: Float32Array, float64: Float64Array, int8: Int8Array, int16: Int16Array, int32: Int32Array,
    uint8: Uint8Array, uint16: Uint16Array, uint32: Uint32Array,
  };
  const PS_FUNCTIONS = ['add', 'max', 'min', 'mul', 'replace'];  // the appliance applies these itself
  const MAX_PS_VALUE = 64 * 1024 * 1024;
  const psFunctions = new Map();  // context.ps.register(name, fn)

  function dtypeOf(what, value) {
    if (value instanceof Uint8ClampedArray) return 'uint8';
    for (const [dtype, type] of Object.entries(DTYPES)) if (value instanceof type) return dtype;
    throw new TypeError(`${what}: values are typed arrays (${Object.values(DTYPES).map(type => type.name).join(', ')})`);
  }

  // The page's reply, an error included.
  function psRequest(what, op, key, value, fields = {}) {
    if (!(typeof key === 'string' && key.length && key.length <= MAX_TAG)) {
      throw new TypeError(`${what}: the key must be a string of 1 to ${MAX_TAG} characters`);
    }
    const message = {type: 'ps', op, key, ...fields};
    if (value === undefined) return request(message).reply;
    const dtype = dtypeOf(what, value);
    if (value.byteLength > MAX_PS_VALUE) throw new RangeError(`${what}: values are at most 64 MiB`);
    const data = value.buffer.slice(value.byteOffset, value.byteOffset + value.byteLength);
    return request({...message, dtype, data}, [data]).reply;
  }

  function psResult(what, reply) {
    if (reply.error) throw new Error(`${what} failed: ${reply.error}`);
    return reply;
  }

  function psValue(what, reply) {
    if (!hasOwn(DTYPES, reply.dtype) || !(reply.data instanceof ArrayBuffer)) throw new Error(`${what}: the appliance sent no value`);
    return new DTYPES[reply.dtype](reply.data);
  }

  // A registered update function: read, apply, write unless the version changed meanwhile, else
  // again. A missing key (its read fails) starts from the delta, written if still at version 0.
  async function readModifyWrite(what, key, delta, fn) {
    dtypeOf(what, delta);
    for (;;) {
      const current = await psRequest(what, 'read', key);
      const next = current.error ? delta : await fn(psValue(what, current), delta);
      const written = await psRequest(what, 'write', key, next, {version: current.error ? 0 : current.version});
      if (written.error === 'version') continue;
      return psResult(what, written.error && current.error ? current : written).version;
    }
  }

  const ps = Object.freeze({
    async write(key, value) {
      const what = `context.ps.write('${key}')`;
      return psResult(what, await psRequest(what, 'write', key, value)).version;
    },
    async read(key) {
      const what = `context.ps.read('${key}')`;
      return psValue(what, psResult(what, await psRequest(what, 'read', key)));
    },
    async update(key, delta, fnName = 'add') {
      const what = `context.ps.update('${key}', ${fnName})`;
      if (PS_FUNCTIONS.includes(fnName)) return psResult(what, await psRequest(what, 'update', key, delta, {fn: fnName})).version;
      const fn = psFunctions.get(fnName);
      if (!fn) {
        const registered = [...psFunctions.keys()].join(', ') || 'none';
        throw new TypeError(`${what}: no update function ${fnName} (built in: ${PS_FUNCTIONS.join(', ')}; registered: ${registered})`);
      }
      return readModifyWrite(what, key, delta, fn);
    },
    register(name, fn) {
      if (typeof name !== 'string' || !name || PS_FUNCTIONS.includes(name) || typeof fn !== 'function') {
        throw new TypeError('context.ps.register(name, fn) needs a name other than the built-in ones and a function (value, delta) -> new value');
      }
      psFunctions.set(name, fn);
    },
    async clock() {
      return psResult('context.ps.clock()', await request({type: 'ps', op: 'clock'}).reply).clock;
    },
  });

  // --- context -------------------------------------------------------------------------------------

  function makeContext(spec) {
    return {
      emit(key, value) {
        if (task.completed) throw new Error('context.emit() after context.onComplete()');
        if (task.grouping) addToGroup(key, value);
        else addRecord(spec.partitioning === 'hash' ? codecs.partitionOf(key, spec.workerCount) : spec.rank, key, value);
      },
      flush: () => flush(),
      onComplete: () => finish(),
      log: (...args) => log('info', args),
      getRank: () => spec.rank,
      // Says the task is alive while it computes without emitting (a task whose progress stops is stalled).
      progress: () => { task.ticks++; progress(); },
      getWorkerCount: () => spec.workerCount,
      setWorkerTimeout(seconds) {
        if (!(typeof seconds === 'number' && seconds > 0 && seconds <= MAX_WORKER_TIMEOUT)) {
          throw new RangeError(`context.setWorkerTimeout(seconds) needs a number of seconds above 0, at most ${MAX_WORKER_TIMEOUT}`);
        }
        post({type: 'worker-timeout', seconds});
      },
      async sendToRank(rank, tag, data, {direct = false} = {}) {
        const what = `sendToRank(${rank}, '${tag}')`;
        checkPeer(what, rank, tag);
        await sendPeer(rank, tag, data, direct, what);
      },
      async receiveFromRank(rank, tag, {direct = false, timeout = PEER_TIMEOUT_MS} = {}) {
        const what = `receiveFromRank(${rank}, '${tag}')`;
        checkPeer(what, rank, tag);
        if (!(typeof timeout === 'number' && timeout > 0 && timeout <= MAX_TIMEOUT_MS)) {
          throw new RangeError(`${what}: the timeout is a number of milliseconds above 0, at most ${MAX_TIMEOUT_MS}`);
        }
        return receivePeer(rank, tag, direct, timeout, what);
      },
      barrier: tag => task.collectives.barrier(tag),
      broadcast: (root, data, tag) => task.collectives.broadcast(root, data, tag),
      allReduce: (array, op, tag) => task.collectives.allReduce(array, op, tag),
      allGather: (data, tag) => task.collectives.allGather(data, tag),
      assertReplicaIntegrity: (values, tag) => task.collectives.assertReplicaIntegrity(values, tag),
      ps,
      shard: items => collectives.shard(items, spec.rank, spec.workerCount),
      // A new generator at each call: the same numbers for the same stream (0 unless given).
      rng: (stream = 0) => collectives.rng(spec.seed ?? 0, spec.group, spec.rank, stream),
      getWebAssemblyURL(name) {
        const wasm = spec.wasm || {};
        if (!hasOwn(wasm, name)) {
          throw new Error(`no WebAssembly binary named ${JSON.stringify(name)} (declared: ${Object.keys(wasm).join(', ') || 'none'})`);
        }
        return resolved(wasm[name]);
      },
    };
  }

  // --- running a task ------------------------------------------------------------------------------

  // The bytes of input i (a Blob or buffer the page read from its store, or a presigned URL).
  async function readInput(input, i, count) {
    try {
      if (input instanceof Blob) return await input.arrayBuffer();
      if (input instanceof ArrayBuffer || ArrayBuffer.isView(input)) return input;
      if (input && typeof input.url === 'string') {
        const response = await originalFetch(resolved(input.url), {__proto__: null, credentials: 'omit'});
        if (!response.ok) throw new Error(`HTTP ${response.status}`);
        return await response.arrayBuffer();
      }
      throw new Error('neither data nor a URL');
    } catch (e) {
      throw new Error(`could not read input ${i + 1} of ${count}: ${e.message}`);
    }
  }

  // A read input as bytes; a gzipped shuffle piece unpacked.
  async function unpacked(read, contentType) {
    const bytes = await read;
    const view = bytes instanceof Uint8Array ? bytes : ArrayBuffer.isView(bytes)
      ? new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength) : new Uint8Array(bytes);
    return contentType === shuffle.TYPE ? decompressed(view) : view;
  }

  // Each input decoded as soon as it is read and the ones before it are taken (in input order, the
  // order a reduce sees values in), then dropped: record(key, value) for each record, and
  // group(name, values) for each group of a shuffle piece that has them. Up to UNPACK_AHEAD pieces
  // are unpacked beside the one being decoded: the browser's DecompressionStream takes a few turns
  // of the event loop even for a small piece, and unpacked pieces are what the memory bound counts.
  // starting(i): called before input i's records (optional).
  async function readInputs(inputs, contentType, record, group, starting) {
    const eachRecord = (name, values) => { for (const value of values) record(name, value); };
    const count = inputs.length;
    const reads = inputs.map((input, i) => readInput(input, i, count));
    reads.forEach(read => read.catch(() => {}));  // each is awaited in turn below
    const unpacking = [];
    for (let i = 0; i < count; i++) {
      for (let j = i; j < Math.min(count, i + UNPACK_AHEAD); j++) {
        if (reads[j] === null) continue;  // unpacking (or decoded) already
        unpacking[j] = unpacked(reads[j], contentType);
        unpacking[j].catch(() => {});
        reads[j] = null;
      }
      try {
        const bytes = await unpacking[i];
        unpacking[i] = null;
        starting?.(i);
        const legacy = contentType === shuffle.TYPE && !shuffle.holds(bytes);
        const type = legacy ? 'application/json' : contentType;
        if (type === shuffle.TYPE) {
          shuffle.each(bytes, record, group || eachRecord, {same: Boolean(group)});
          continue;
        }
        for (const [key, value] of codecs.decode(type, bytes)) record(key, value);
      } catch (e) {
        throw e.message.startsWith('could not read input') ? e : new Error(`input ${i + 1} of ${count}: ${e.message}`);
      }
    }
  }

  // x of a map stage: the records, iterable with for...of and for await...of. A range's (its inputs
  // name their chunks, several) is a view of them that notes whether the job reads them other than
  // with for await...of: while it does not, the range may stop at a later chunk's first record
  // (task-split), since the job has seen none after the one it is at.
  async function mapInput(inputs, contentType, specs) {
    const records = [];
    const starts = [];  // [chunk, index of its first record], in order
    await readInputs(inputs, contentType, (key, value) => records.push([key, value]), undefined, i => {
      const chunk = specs[i]?.chunk;
      if (Number.isInteger(chunk) && (!starts.length || starts[starts.length - 1][0] !== chunk)) {
        starts.push([chunk, records.length]);
      }
    });
    if (starts.length < 2) {
      task.range = null;
      if (task.splitBefore !== undefined) split(task.splitBefore);  // asked while its input was read
      Object.defineProperty(records, Symbol.asyncIterator, {
        value: async function* () {
          for (let i = 0; i < records.length; i++) {
            reached(i);
            yield records[i];
          }
        },
      });
      return records;
    }
    const stop = specs.reduce((end, input) => Math.max(end, (input.chunk ?? -1) + 1), 0);  // the range's end
    // all: once the job iterates (gated), every record, while records (what x shows) holds those of
    // the chunks it was let into.
    const range = task.range = {records, starts, end: records.length, stop, at: -1, whole: false, gated: false, all: null};
    const firsts = new Set(starts.slice(1).map(([, first]) => first));
    const iterate = async function* () {
      if (!range.whole && !range.gated) gate(range);
      for (let i = 0; ; i++) {
        if (firsts.has(i) && !await enter(range, i)) return;
        if (i >= range.end) return;
        range.at = i;
        reached(i);
        yield (range.all ?? records)[i];
      }
    };
    if (task.splitBefore !== undefined) split(task.splitBefore);  // asked while its input was read
    const whole = () => { range.whole = true; };
    return new NativeProxy(records, {
      get(target, key, receiver) {
        if (key === Symbol.asyncIterator) return iterate;
        if (key === 'then') return undefined;  // awaited (as the async mapInput's result is): not read
        whole();
        return reflectGet(target, key, receiver);
      },
      has(target, key) { whole(); return reflectHas(target, key); },
      ownKeys(target) { whole(); return reflectKeys(target); },
      getOwnPropertyDescriptor(target, key) { whole(); return reflectDescriptor(target, key); },
    });
  }

  // A range's job iterates (and had not read x otherwise): from now on it goes into each next chunk
  // only with the page's leave, so the page answers a task-split itself, at once, however long the
  // job computes without awaiting. x then shows the records of the chunks it was let into.
  function gate(range) {
    range.gated = true;
    range.all = range.records.slice();
    range.records.length = range.starts[1]?.[1] ?? range.end;
    post({type: 'iterating', chunks: range.starts.map(([chunk]) => chunk), stop: range.stop});
  }

  // Record i begins a chunk: a gated range asks the page whether it may go on (no: the page stopped
  // it there, a split); the records of a chunk it enters join what x shows.
  async function enter(range, i) {
    const at = range.starts.findIndex(([, first]) => first === i);
    if (!range.gated || at < 0) return true;
    const {reply} = request({type: 'enter', chunk: range.starts[at][0]});
    if ((await reply).ok !== true) {
      stopBefore(range, at);
      return false;
    }
    const next = range.starts[at + 1]?.[1] ?? range.end;
    for (let j = range.records.length; j < next; j++) range.records.push(range.all[j]);  // x is their prefix
    return true;
  }

  // The job's for await...of reached record i: the engine reckons a task's time left from how many
  // records it has reached in how long (it splits and backs up by it). The first goes with the next
  // report, so that a short task's first one still carries its emits.
  function reached(i) {
    task.read = i + 1;
    if (i > 0) progress();
  }

  // task-split: the range stops before chunk `before`, or the first chunk after the one the job is
  // at, whichever is later; it says where (the end of its range when it cannot stop early). Asked
  // while its input is read, it answers once that is done (mapInput).
  function split(before) {
    const range = task.range;
    if (range === undefined && task.spec.kind === 'map') {
      task.splitBefore = before;
      return;
    }
    if (!range) return post({type: 'split-at', chunk: 0});  // not a range: it cannot split
    const next = range.starts.findIndex(([chunk, first]) => chunk >= before && first > range.at);
    if (!range.whole && Number.isInteger(before) && next > 0) {
      stopBefore(range, next);
      // However the job goes on to read x, it sees the range's records only (gated: x holds no more).
      if (!range.gated) range.records.length = range.end;
    }
    post({type: 'split-at', chunk: range.stop});
  }

  // The range ends before its chunk starts[k] (a split).
  function stopBefore(range, k) {
    range.stop = range.starts[k][0];
    range.end = range.starts[k][1];
    range.starts = range.starts.slice(0, k);
  }

  // Decodes inputs into groups (shuffle.groups()): the record and group functions of readInputs.
  function into(groups, inputs, contentType) {
    const add = (name, values) => shuffle.mergeGroup(groups, name, values);
    return readInputs(inputs, contentType, (key, value) => {
      const name = codecs.keyString(key);
      const had = groups[name];
      if (Array.isArray(had)) had.push(value);
      else add(name, [value]);
    }, add);
  }

  // keyToValues of a reduce stage: key string -> values, in upstream order. Groups of one repeated
  // value (a Same) are added up as counts while the pieces come in, and made arrays at the end.
  async function reduceInput(inputs, contentType) {
    const merged = shuffle.groups();
    await into(merged, inputs, contentType);
    return shuffle.keyToValues(merged);
  }

  // The input of a streaming reduce, which starts while maps still run: each map's pieces (those of
  // the task-assign, then one 'input' message per map in task.awaiting) are decoded as they come,
  // one map at a time. A map's pieces go straight into the merged groups when every map before it
  // (in rank order) is merged; otherwise into groups of their own, merged once the maps before them
  // are, so the values keep upstream order whatever order the maps finished in. Memory: the merged
  // groups and those decoded ahead. Producers are numbered in upstream order (rank, then chunk).
  // {arrived(producer, inputs), result: Promise of keyToValues}
  function streamedInput(spec, inputs) {
    const count = spec.producers || spec.workerCount;
    const merged = shuffle.groups();
    const parts = new Array(count);  // rank -> its decoded groups until merged (merged: decoded into them)
    let next = 0;  // the first rank not merged yet
    let decoding = Promise.resolve();
    let settle;
    const result = new Promise((resolve, reject) => { settle = {resolve, reject}; });
    result.catch(() => {});  // run() awaits it
    const arrived = (producer, pieces) => {
      if (!Number.isInteger(producer) || producer < 0 || producer >= count || parts[producer] !== undefined) return;
      parts[producer] = null;  // taken: decoding
      decoding = decoding.then(async () => {
        const groups = producer === next ? merged : shuffle.groups();
        try {
          await into(groups, pieces, spec.inputContentType);
        } catch (e) {
          const what = count === spec.workerCount ? 'rank' : 'map task';  // a map split into chunks: a task
          throw new Error(`the output of ${what} ${producer} of the stage before: ${e.message}`);
        }
        parts[producer] = groups;
        for (; next < count && parts[next]; next++) {
          const part = parts[next];
          parts[next] = null;
          if (part !== merged) for (const name in part) shuffle.mergeGroup(merged, name, part[name]);
        }
        if (next === count) settle.resolve(shuffle.keyToValues(merged));
      }).catch(settle.reject);
    };
    const awaiting = new Set(spec.awaiting);
    for (let rank = 0; rank < count; rank++) {
      if (!awaiting.has(rank)) arrived(rank, inputs.filter((input, i) => spec.inputs[i].producer === rank));
    }
    return {arrived, result};
  }

  // Rank r's piece of an array of `length`: contiguous, in rank order; equal (the first length % W one
  // longer) or, with spec.shares, in proportion to rank r's share (integer arithmetic, as the
  // appliance reckons them).
  function piece(length, rank) {
    const shares = task.spec.shares;
    if (!shares?.length) return collectives.bounds(length, task.spec.workerCount, rank);
    let before = 0, total = 0;
    for (let r = 0; r < shares.length; r++) {
      if (r < rank) before += shares[r];
      total += shares[r];
    }
    return [Math.floor(length * before / total), Math.floor(length * (before + shares[rank]) / total)];
  }

  // The input function's array, keyed by index, in workerCount contiguous pieces (piece), each cut
  // into spec.chunks contiguous chunks (the first len % chunks one longer): chunk c of rank r is
  // partition r * chunks + c, so a rank's chunks together hold its piece.
  function emitChunks(result) {
    if (result == null && task.emits > 0) return;  // it emitted its records itself
    if (result == null || typeof result === 'string' || typeof result[Symbol.iterator] !== 'function') {
      throw new TypeError(`the input function must return an array (it returned ${result === null ? 'null' : typeof result})`);
    }
    const items = Array.isArray(result) ? result : Array.from(result);
    const chunks = task.spec.chunks ?? 1;  // left out of the message when 1
    for (let rank = 0; rank < task.spec.workerCount; rank++) {
      const [from, to] = piece(items.length, rank);
      for (let chunk = 0; chunk < chunks; chunk++) {
        const [start, end] = collectives.bounds(to - from, chunks, chunk);
        for (let i = from + start; i < from + end; i++) addRecord(rank * chunks + chunk, i, items[i]);
      }
    }
  }

  async function run(inputs) {
    const spec = task.spec;
    if (!definition) throw new Error('the sandbox script did not call peermrSandbox.define()');
    if (spec.kind === 'input') {
      if (typeof definition.input !== 'function') throw new Error('this job has no input function');
      emitChunks(await definition.input());
    } else {
      const stage = definition.stages[spec.stage];
      if (typeof stage !== 'function') throw new Error(`this job has no stage ${spec.stage}`);
      if (spec.kind === 'map') await stage(await mapInput(inputs || [], spec.inputContentType, spec.inputs || []));
      else if (spec.kind === 'reduce') {
        await stage(await (task.stream ? task.stream.result : reduceInput(inputs || [], spec.inputContentType)));
      }
      else throw new Error(`unknown task kind: ${spec.kind}`);
    }
    await finish();
  }

  function start(spec, inputs) {
    if (task && !task.ended) return;  // one task at a time
    const problem = task ? globalsAsFirst() : '';
    if (!task) firstGlobals = new Map(Reflect.ownKeys(scope).map(key => [key, Object.getOwnPropertyDescriptor(scope, key)]));
    task = {
      spec, started: clock(), emits: 0, ticks: 0, beats: 0, read: 0, buffered: 0, flushedBytes: 0, encoders: new Map(),
      // Output that feeds a reduce in the shuffle format is grouped by key as it is emitted.
      grouping: spec.partitioning === 'hash' && spec.outputContentType === shuffle.TYPE, groups: shuffle.groups(), groupCount: 0,
      delivered: Promise.resolve(), completed: false, ended: false, finishing: null,
      lastProgress: -Infinity, progressTimer: null, sinceClock: 0, clockEvery: 1, clockAt: clock(), loopTimer: null,
    };
    allowedOrigins = new Set([applianceOrigin, ...(spec.fetchOrigins || [])]);
    task.collectives = collectives.create({
      rank: spec.rank, ranks: spec.workerCount, group: spec.group,
      send: (rank, tag, value, during) => sendPeer(rank, tag, value, true, during),
      receive: (rank, tag, during) => receivePeer(rank, tag, true, PEER_TIMEOUT_MS, during),
    });
    scope.context = ownedBy(task, makeContext(spec));
    task.stream = spec.kind === 'reduce' && spec.awaiting?.length ? streamedInput(spec, inputs || []) : null;
    beat(task);
    if (problem) fail(new Error(`this sandbox cannot give the task fresh globals: ${problem}`));
    else run(inputs).catch(fail);
  }

  const REPLIES = new Set(['put-url', 'peer-sent', 'peer-put-url', 'peer-message', 'ps-reply', 'entered']);

  function fromPage(event) {
    const message = apply(eventData, event, []);
    if (message?.type === 'run') {
      start(message.task, message.inputs);
    } else if (message?.type === 'split' && task && !task.ended && message.taskId === task.spec.taskId) {
      split(message.before);
    } else if (message?.type === 'input' && task?.stream && !task.ended && message.taskId === task.spec.taskId) {
      task.stream.arrived(message.producer, message.inputs);
    } else if (message?.type === 'load' && !sealed && typeof message.url === 'string' && typeof message.text === 'string') {
      // A warm sandbox takes on the run's script; a failure is the Worker's error, as a load's is.
      scriptURL = message.url;
      preload?.(message.scripts || {});
      globalEval(`${message.text}\n//# sourceURL=${message.url}`);
    } else if (REPLIES.has(message?.type)) {
      const resolve = replies.get(message.id);
      replies.delete(message.id);
      resolve?.(message);
    } else if (message?.type === 'peer-direct' && task) {
      deliverDirect(message.rank, message.tag, message.data);
    } else if (message?.type === 'peer-lost' && task) {
      peerLost(message.rank, message.reason);
    }
  }

  // The frame's first message hands over the port to the page. This listener is the first on `self`
  // (job scripts load after it), and no later one sees that message.
  scope.addEventListener('message', event => {
    if (port || !event.isTrusted) return;
    const ports = apply(eventPorts, event, []);
    if (apply(eventData, event, [])?.type !== 'port' || ports.length !== 1) return;
    apply(stopEvent, event, []);
    port = ports[0];
    apply(setPortHandler, port, [fromPage]);
    for (let i = 0; i < unsent.length; i++) post(unsent[i][0], unsent[i][1]);
    unsent.length = 0;
  });

  scope.peermrSandbox = Object.freeze({loadScripts, seal, define});
})();
