// The task runtime inside the sandbox: a dedicated Web Worker per task, started by the worker page
// (static/worker/tasks.js) from the run's sandbox script, which the appliance serves as
//
//   importScripts('/static/worker/sandbox.js');      // this file: defines self.peermrSandbox
//   peermrSandbox.loadScripts([...job scripts]);      // the job's declared scripts
//   peermrSandbox.seal();                             // job code may not load more
//   peermrSandbox.define({input: async function input() {...} | null, stages: [function..., ...]});
//
// It runs the input function or a stage function with `context`, encodes what they emit with
// static/worker/codecs.js into one blob per output partition, and reports to the page:
//   page -> sandbox  {type: 'run', task, inputs: [Blob | ArrayBuffer | {url}]}, {type: 'put-url', id, url, key}
//   sandbox -> page  {type: 'log', level, text, at}, {type: 'progress', emits, bytes},
//                    {type: 'worker-timeout', seconds}, {type: 'need-put-url', id, partition},
//                    {type: 'output', partition, data (transferred), records}            (pmrfs)
//                    {type: 'output', partition, key, size, records}                     (s3, after its PUT)
//                    {type: 'done', emits, cpuMs}, {type: 'failed', error, stack}
// A classic script: workers started with `new Worker(url)` cannot use modules with importScripts.
(function () {
  'use strict';

  const scope = self;
  const originalImportScripts = scope.importScripts.bind(scope);
  const originalFetch = scope.fetch.bind(scope);
  const post = scope.postMessage.bind(scope);
  const later = scope.setTimeout.bind(scope);
  const clock = performance.now.bind(performance);
  const hasOwn = Object.hasOwn;

  // The served script may load a versioned codecs.js first (importScripts(codecs, sandbox)).
  if (!scope.peermrCodecs) originalImportScripts('/static/worker/codecs.js');
  const codecs = scope.peermrCodecs;

  const AUTO_FLUSH_BYTES = 32 * 1024 * 1024;
  const PROGRESS_MS = 250;
  const MAX_TEXT = 2000;
  const MAX_STACK = 8000;
  const MAX_LOG_LINES = 10000;
  const MAX_WORKER_TIMEOUT = 7 * 24 * 3600;
  const IMPORT_REFUSED = 'importScripts is not available to job code';

  Error.stackTraceLimit = 50;  // the job's frames under ours

  let allowedOrigins = [scope.location.origin];
  let sealed = false;
  let definition = null;
  let task = null;         // the running task (one per sandbox)
  let logLines = 0;
  let nextPutId = 1;
  const putReplies = new Map();  // need-put-url id -> resolve

  // --- the seal ------------------------------------------------------------------------------------

  // Chromium keeps some globals on WorkerGlobalScope.prototype: delete them along the whole chain.
  function removeGlobal(name) {
    for (let o = scope; o; o = Object.getPrototypeOf(o)) if (hasOwn(o, name)) delete o[name];
  }

  function replaceGlobal(name, value) {
    removeGlobal(name);
    Object.defineProperty(scope, name, {value, writable: true, configurable: true});
  }

  function sandboxFetch(input, init) {
    let request;
    try {
      request = new Request(input, init);
    } catch (e) {
      return Promise.reject(e);
    }
    if (request.method !== 'GET' && request.method !== 'HEAD') {
      return Promise.reject(new TypeError('fetch: only GET is allowed in jobs'));
    }
    const origin = new URL(request.url).origin;
    if (!allowedOrigins.includes(origin)) {
      return Promise.reject(new TypeError(
        `fetch to ${origin} is not allowed by this appliance (allowed: ${allowedOrigins.join(', ')})`));
    }
    return originalFetch(new Request(request, {credentials: 'omit'}));
  }

  // The network and storage limits hold from the start, before any job script (declared ones
  // included) runs: fetch only as above; no other way out (XMLHttpRequest, WebSocket,
  // EventSource, WebTransport); no nested workers (they would run unsealed); no storage shared
  // with the worker page's origin (the tab's PMRFS blobs live in its IndexedDB).
  replaceGlobal('fetch', sandboxFetch);
  for (const name of ['XMLHttpRequest', 'WebSocket', 'EventSource', 'WebTransport', 'Worker', 'SharedWorker',
    'indexedDB', 'caches', 'BroadcastChannel']) {
    removeGlobal(name);
  }
  for (let o = scope.navigator; o; o = Object.getPrototypeOf(o)) if (hasOwn(o, 'storage')) delete o.storage;

  function seal() {
    sealed = true;
    replaceGlobal('importScripts', function importScripts() { throw new Error(IMPORT_REFUSED); });
  }

  function loadScripts(urls) {
    if (sealed) throw new Error(IMPORT_REFUSED);
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

  const OUR_FRAME = /\/static\/worker\/(sandbox|codecs)\.js/;

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
    post({type: 'failed', error: message.slice(0, MAX_TEXT), stack: jobStack(isError ? error.stack : '').slice(0, MAX_STACK)});
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

  // --- output --------------------------------------------------------------------------------------

  // At most every PROGRESS_MS while emits change; the last count follows once they stop.
  function progress(force) {
    if (!force && clock() - task.lastProgress < PROGRESS_MS) {
      task.progressTimer ??= later(() => { task.progressTimer = null; progress(true); }, PROGRESS_MS);
      return;
    }
    task.lastProgress = clock();
    if (!task.ended) post({type: 'progress', emits: task.emits, bytes: task.flushedBytes + task.buffered});
  }

  function addRecord(partition, key, value) {
    let encoder = task.encoders.get(partition);
    if (!encoder) task.encoders.set(partition, encoder = codecs.encoder(task.spec.outputContentType));
    const before = encoder.size;
    encoder.add(key, value);  // a value the format cannot hold throws here, at the emit
    task.buffered += encoder.size - before;
    task.emits++;
    if (task.buffered > AUTO_FLUSH_BYTES) flush();
    progress();
  }

  async function upload(partition, bytes) {
    const id = nextPutId++;
    const reply = await new Promise(resolve => {
      putReplies.set(id, resolve);
      post({type: 'need-put-url', id, partition});
    });
    if (!reply.url) throw new Error(`no upload URL for partition ${partition}${reply.error ? `: ${reply.error}` : ''}`);
    const response = await originalFetch(reply.url, {method: 'PUT', body: bytes, credentials: 'omit'});
    if (!response.ok) throw new Error(`upload of partition ${partition} failed: HTTP ${response.status}`);
    return reply.key;
  }

  // One blob per non-empty partition buffer. Outputs reach the page in the order they were cut.
  function flush() {
    const partitions = [...task.encoders.keys()].sort((a, b) => a - b);
    for (const partition of partitions) {
      const encoder = task.encoders.get(partition);
      task.encoders.delete(partition);
      const records = encoder.records;
      if (!records) continue;
      const bytes = encoder.finish();
      const size = bytes.byteLength;
      task.flushedBytes += size;
      if (task.spec.storage === 's3') {
        const uploaded = upload(partition, bytes);
        task.delivered = Promise.all([task.delivered, uploaded])
          .then(([, key]) => post({type: 'output', partition, key, size, records}));
        task.delivered.catch(fail);
      } else {
        const data = bytes.byteOffset === 0 && size === bytes.buffer.byteLength ? bytes.buffer : bytes.slice().buffer;
        post({type: 'output', partition, data, records}, [data]);
      }
    }
    task.buffered = 0;
    return task.delivered;
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

  // --- context -------------------------------------------------------------------------------------

  function makeContext(spec) {
    return {
      emit(key, value) {
        if (task.completed) throw new Error('context.emit() after context.onComplete()');
        addRecord(spec.partitioning === 'hash' ? codecs.partitionOf(key, spec.workerCount) : spec.rank, key, value);
      },
      flush: () => flush(),
      onComplete: () => finish(),
      log: (...args) => log('info', args),
      getRank: () => spec.rank,
      getWorkerCount: () => spec.workerCount,
      setWorkerTimeout(seconds) {
        if (!(typeof seconds === 'number' && seconds > 0 && seconds <= MAX_WORKER_TIMEOUT)) {
          throw new RangeError(`context.setWorkerTimeout(seconds) needs a number of seconds above 0, at most ${MAX_WORKER_TIMEOUT}`);
        }
        post({type: 'worker-timeout', seconds});
      },
      getWebAssemblyURL(name) {
        const wasm = spec.wasm || {};
        if (!hasOwn(wasm, name)) {
          throw new Error(`no WebAssembly binary named ${JSON.stringify(name)} (declared: ${Object.keys(wasm).join(', ') || 'none'})`);
        }
        return new URL(wasm[name], scope.location.href).href;
      },
    };
  }

  // --- running a task ------------------------------------------------------------------------------

  async function readInputs(inputs, contentType) {
    const count = inputs.length;
    const buffers = await Promise.all(inputs.map(async (input, i) => {
      try {
        if (input instanceof Blob) return await input.arrayBuffer();
        if (input instanceof ArrayBuffer || ArrayBuffer.isView(input)) return input;
        if (input && typeof input.url === 'string') {
          const response = await originalFetch(input.url, {credentials: 'omit'});
          if (!response.ok) throw new Error(`HTTP ${response.status}`);
          return await response.arrayBuffer();
        }
        throw new Error('neither data nor a URL');
      } catch (e) {
        throw new Error(`could not read input ${i + 1} of ${count}: ${e.message}`);
      }
    }));
    const records = [];
    for (let i = 0; i < count; i++) {
      let decoded;
      try {
        decoded = codecs.decode(contentType, buffers[i]);
      } catch (e) {
        throw new Error(`input ${i + 1} of ${count}: ${e.message}`);
      }
      buffers[i] = null;
      for (const record of decoded) records.push(record);
    }
    return records;
  }

  // x of a map stage: the records, iterable with for...of and for await...of.
  function mapInput(records) {
    Object.defineProperty(records, Symbol.asyncIterator, {
      value: async function* () { for (let i = 0; i < records.length; i++) yield records[i]; },
    });
    return records;
  }

  // keyToValues of a reduce stage: key string -> values, in upstream order.
  function reduceInput(records) {
    const groups = {};
    for (const [key, value] of records) {
      const name = codecs.keyString(key);
      if (hasOwn(groups, name)) groups[name].push(value);
      else Object.defineProperty(groups, name, {value: [value], enumerable: true, writable: true, configurable: true});
    }
    return groups;
  }

  // The input function's array, keyed by index, in workerCount contiguous chunks (the first len % W one longer).
  function emitChunks(result) {
    if (result == null && task.emits > 0) return;  // it emitted its records itself
    if (result == null || typeof result === 'string' || typeof result[Symbol.iterator] !== 'function') {
      throw new TypeError(`the input function must return an array (it returned ${result === null ? 'null' : typeof result})`);
    }
    const items = Array.isArray(result) ? result : Array.from(result);
    const workers = task.spec.workerCount;
    const base = Math.floor(items.length / workers);
    const extra = items.length % workers;
    for (let rank = 0; rank < workers; rank++) {
      const start = rank * base + Math.min(rank, extra);
      const end = start + base + (rank < extra ? 1 : 0);
      for (let i = start; i < end; i++) addRecord(rank, i, items[i]);
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
      const records = await readInputs(inputs || [], spec.inputContentType);
      if (spec.kind === 'map') await stage(mapInput(records));
      else if (spec.kind === 'reduce') await stage(reduceInput(records));
      else throw new Error(`unknown task kind: ${spec.kind}`);
    }
    await finish();
  }

  function start(spec, inputs) {
    if (task) return;  // one task per sandbox
    task = {
      spec, started: clock(), emits: 0, buffered: 0, flushedBytes: 0, encoders: new Map(),
      delivered: Promise.resolve(), completed: false, ended: false, finishing: null,
      lastProgress: -Infinity, progressTimer: null,
    };
    allowedOrigins = [...new Set([scope.location.origin, ...(spec.fetchOrigins || [])])];
    scope.context = makeContext(spec);
    run(inputs).catch(fail);
  }

  scope.addEventListener('message', event => {
    if (!event.isTrusted) return;  // only the page, not job code dispatching events
    const message = event.data;
    if (message?.type === 'run') {
      start(message.task, message.inputs);
    } else if (message?.type === 'put-url') {
      const resolve = putReplies.get(message.id);
      putReplies.delete(message.id);
      resolve?.(message);
    }
  });

  scope.peermrSandbox = Object.freeze({loadScripts, seal, define});
})();
