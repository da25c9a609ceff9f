// Tasks on the worker page: each task the appliance assigns runs in a sandbox Web Worker of its run
// (static/worker/sandbox.js, started by static/worker/sandboxes.js in a frame without credentials,
// from the run's sandbox script ahead of the task, or kept from the run's last task here when the
// sandbox can give the next one fresh globals); this relays
// between the sandbox and the appliance's WebSocket (docs/protocol.md).
//   server -> page  task-prepare, task-assign, task-input, task-cancel, task-split, task-put-url-reply
//   page -> server  task-progress, task-log, task-worker-timeout, task-split-at, task-put-url, task-done,
//                   task-failed
// pmrfs inputs are read from the tab's BlobStore; pmrfs outputs are stored in it under their
// SHA-256 before task-done names them. A streaming reduce (task-assign `awaiting` other maps) gets
// the pieces of each of those maps in a task-input once they are in the store, and passes them on.
// The sandbox's peer messages and parameter-server requests, once checked here (job code sends
// them), go to static/worker/peers.js.
import {MAX_DIRECT_BYTES, MAX_LOG_LINES, MAX_MESSAGE_BYTES, SANDBOX_MESSAGES, SOCKET_MESSAGES} from './protocol.js';
import {Sandboxes} from './sandboxes.js';
import {sha256Hex} from './sha256.js';

// The limits of what this relays, as the appliance holds its messages to them (static/worker/protocol.js).
const TO_APPLIANCE = SOCKET_MESSAGES.workerToAppliance;
const FROM_SANDBOX = SANDBOX_MESSAGES.sandboxToPage;
const MAX_ERROR = TO_APPLIANCE['task-failed'].error.maxLength;
const MAX_STACK = TO_APPLIANCE['task-failed'].stack.maxLength;
const MAX_HELD = TO_APPLIANCE.hello.tasks.maxLength;             // task ids a hello may name (tasks run on while disconnected)
const MAX_OUTPUTS = TO_APPLIANCE['task-done'].outputs.maxLength;  // output blobs the appliance accepts in one task-done
const LOG_BATCH = TO_APPLIANCE['task-log'].lines.maxLength;       // lines per task-log
const LOG_LINE = TO_APPLIANCE['task-log'].lines.items.fields;
const LEVELS = new Set(LOG_LINE.level.values);
const TAG = FROM_SANDBOX['peer-send'].tag;  // of a peer message
const PS = FROM_SANDBOX.ps;
const PS_UPDATES = PS.fn.values;
// Bytes per element of each dtype, which names its bit width.
const DTYPE_BYTES = Object.fromEntries(PS.dtype.values.map(dtype => [dtype, Number(dtype.replace(/\D/g, '')) / 8]));
const LOG_BATCH_BYTES = 900 * 1024;    // and bytes (bounded from above) per task-log
const LOG_DELAY_MS = 200;              // a line waits at most this long for others to join it
const PROGRESS_MS = 500;               // task-progress at most twice a second
const SPARE_IDLE_MS = 30_000;          // a run's idle sandbox not taken by then is stopped

const isCount = n => Number.isSafeInteger(n) && n >= 0;
// A string within a field's lengths, and what it should have been.
const fits = (s, field) => typeof s === 'string' && s.length >= field.minLength && s.length <= field.maxLength;
const lengths = field => `a string of ${field.minLength} to ${field.maxLength} characters`;
const mib = bytes => `${bytes / 2 ** 20} MiB`;

// What is wrong with a peer or parameter-server request of the sandbox, or ''.
function peerRequestProblem(spec, m) {
  if (!isCount(m.id)) return 'no request id';
  if (m.type === 'ps') {
    if (m.op === 'clock') return '';
    if (!['read', 'write', 'update'].includes(m.op)) return `unknown op ${JSON.stringify(m.op)}`;
    if (!fits(m.key, PS.key)) return `the key is not ${lengths(PS.key)}`;
    if (m.op === 'read') return '';
    if (!Object.hasOwn(DTYPE_BYTES, m.dtype) || !(m.data instanceof ArrayBuffer) || m.data.byteLength % DTYPE_BYTES[m.dtype]) {
      return 'no value of a known dtype';
    }
    if (m.data.byteLength > PS.data.maxLength) return `a value over ${mib(PS.data.maxLength)}`;
    if (m.op === 'update' && !PS_UPDATES.includes(m.fn)) return `unknown update ${JSON.stringify(m.fn)}`;
    if (m.op === 'write' && m.version !== undefined && !isCount(m.version)) return 'the version is not a count';
    return '';
  }
  if (!(Number.isInteger(m.rank) && m.rank >= 0 && m.rank < spec.workerCount && m.rank !== spec.rank)) {
    return `${m.rank} is not another rank of this stage`;
  }
  if (!fits(m.tag, TAG)) return `the tag is not ${lengths(TAG)}`;
  const s3 = spec.storage === 's3';
  if (m.type === 'peer-put-url' && !s3) return 'upload URLs are for s3 runs';
  if (m.type !== 'peer-send') return '';
  if (m.direct === true || !s3) {
    if (!(m.data instanceof ArrayBuffer)) return 'no data';
    if (m.direct === true && m.data.byteLength > MAX_DIRECT_BYTES) return `a direct message over ${mib(MAX_DIRECT_BYTES)}`;
  } else if (!(typeof m.key === 'string' && isCount(m.size))) {
    return 'no key and size of the uploaded message';
  }
  return '';
}

export class TaskRunner {
  // getStore: the tab's BlobStore (it changes when the data is cleared); send: a message to the
  // appliance, true when it went (false while the connection is away); onBusy(busy): called when
  // the first task starts and when the last one ends;
  // onChange: called once a finished task's output blobs are in the store (optional); peers: the
  // page's Peers (static/worker/peers.js), without which tasks cannot message each other.
  // capacity: how many Web Workers (tasks and spares) may run at once (the tab's share of the cores).
  constructor({getStore, send, onBusy = () => {}, onChange = () => {}, peers = null, capacity = 1}) {
    this.capacity = capacity;
    this.sandboxes = new Sandboxes();
    this.taskCount = 0;        // tasks run here since the page loaded,
    this.taskMs = 0;           // and the time their Web Workers ran
    this.getStore = getStore;
    this.send = send;
    this.peers = peers;
    this.onBusy = onBusy;
    this.onChange = onChange;
    this.tasks = new Map();    // taskId -> running task
    // taskId -> its task-done or task-failed, finished while the connection was away: sent once
    // the appliance is back (see held and resend), unless it cancels the task meanwhile.
    this.unsent = new Map();
    this.putUrls = new Map();  // task-put-url id -> {task, id (the sandbox's)}
    this.nextId = 1;
    // Sandbox script URL -> an idle Web Worker of the run for its next task here: started ahead (when
    // the run starts, and when a task that another follows starts), with what it said while it
    // loaded (the job scripts' top level), or kept from the last task. Each task gets fresh globals
    // without waiting for a worker to start and load the scripts.
    this.spares = new Map();
    // Sandbox scripts whose sandboxes serve one task after another (they said so when they loaded).
    this.reusable = new Set();
    // A warm sandbox: the runtime loaded under the policy of the last run that named one
    // (task-assign's `warm`), started while the tab is idle; a run with that policy has it load its
    // script instead of waiting for a Web Worker to start. {url, worker}
    this.warm = null;
    this.warmUrl = '';
  }

  // Web Workers alive: the tasks', the spares' and the warm one.
  get live() { return this.tasks.size + this.spares.size + (this.warm ? 1 : 0); }

  spare(script, warmUrl) {
    const warm = this.fromWarm(warmUrl, script);
    if (warm) return this.keep(script, warm, true);
    if (this.live >= this.capacity) return;  // the task then starts its own when it comes
    this.keep(script, this.sandboxes.start(script), true);
  }

  // The warm sandbox, now loading the run's script, when the run may use it; else null.
  fromWarm(warmUrl, script) {
    if (!this.warm || this.warm.url !== warmUrl) return null;
    const {worker} = this.warm;
    this.warm = null;
    worker.load(script);
    return worker;
  }

  noteWarm(url) {
    if (typeof url === 'string' && url.startsWith('/worker/sandbox.js?')) this.warmUrl = url;
  }

  // While the tab is idle: a warm sandbox for the next run.
  rewarm() {
    if (!this.warmUrl || this.warm?.url === this.warmUrl) return;
    this.warm?.worker.terminate();
    this.warm = null;
    if (this.live >= this.capacity) return;
    const warm = {url: this.warmUrl, worker: this.sandboxes.start(this.warmUrl)};
    warm.worker.onerror = event => {  // the allow-list changed since the run started: no warm one
      event.preventDefault?.();
      warm.worker.terminate();
      if (this.warm === warm) this.warm = null;
      if (this.warmUrl === warm.url) this.warmUrl = '';
    };
    this.warm = warm;
  }

  // The run's idle sandbox until its next task here takes it. What a new one says while it loads is
  // for that task; what a kept one says comes from the last task's code and is not.
  keep(script, worker, loading = false) {
    const spare = {worker, said: [], failed: null, timer: null};
    worker.onmessage = event => {
      if (event.data?.type === 'ready') this.ready(script, event.data);
      if (loading) spare.said.push(event.data);
    };
    worker.onerror = event => { event.preventDefault?.(); spare.failed ??= event; };
    worker.onmessageerror = () => { spare.failed ??= {message: 'a message from the sandbox could not be read'}; };
    spare.timer = setTimeout(() => {
      if (this.spares.get(script) !== spare) return;
      this.spares.delete(script);
      worker.terminate();
    }, SPARE_IDLE_MS);
    this.spares.set(script, spare);
  }

  // The run's spare sandbox, the warm one, or a new one (a spare that failed to load tries again as
  // the task's own, whose failure the task reports).
  sandbox(script, warmUrl) {
    const spare = this.spares.get(script);
    this.spares.delete(script);
    if (spare) clearTimeout(spare.timer);
    if (spare?.failed) spare.worker.terminate();
    if (spare && !spare.failed) return spare;
    const warm = this.fromWarm(warmUrl, script);
    if (warm) return {worker: warm, said: []};
    for (const [other, idle] of this.spares) {  // spares of other runs and the warm one give way to a task
      if (this.live <= this.capacity) break;
      clearTimeout(idle.timer);
      idle.worker.terminate();
      this.spares.delete(other);
    }
    if (this.live > this.capacity && this.warm) {
      this.warm.worker.terminate();
      this.warm = null;
    }
    return {worker: this.sandboxes.start(script), said: []};
  }

  ready(script, m) {
    if (m.reusable === true) this.reusable.add(script);
  }

  // True when the message was a task message (handled; the task itself runs on).
  async handle(message) {
    switch (message?.type) {
      case 'task-assign': this.start(message); return true;
      case 'task-input': this.input(message); return true;
      case 'task-cancel':
        this.unsent.delete(message.taskId);
        this.end(this.tasks.get(message.taskId));
        return true;
      case 'task-split': {
        // A range stops early: the page says where at once when the job iterates (it lets the job
        // into each chunk); otherwise its sandbox does, once it runs the task.
        const task = this.tasks.get(message.taskId);
        if (task?.range && !task.ended) this.split(task, message.before);
        else {
          task?.fed.then(() => {
            if (!task.ended && task.worker) task.worker.postMessage({type: 'split', taskId: task.id, before: message.before});
          });
        }
        return true;
      }
      case 'task-put-url-reply': this.putUrlReply(message); return true;
      case 'task-prepare':
        this.noteWarm(message.warm);
        if (typeof message.script === 'string' && !this.spares.has(message.script)) this.spare(message.script, message.warm);
        return true;
      default: return false;
    }
  }

  // Tasks run on while the connection is away: these are the ones to name in the next hello (still
  // running, or finished and not reported yet); the appliance cancels those it no longer wants.
  held() {
    return [...this.tasks.keys(), ...this.unsent.keys()].slice(0, MAX_HELD);
  }

  // The appliance is back: report what finished meanwhile.
  resend() {
    for (const [taskId, message] of [...this.unsent]) {
      if (!this.send(message)) return;
      this.unsent.delete(taskId);
    }
  }

  // A task's last word (task-done, task-failed) is kept until it can be sent.
  report(message) {
    if (!this.send(message)) this.unsent.set(message.taskId, message);
  }

  start(spec) {
    if (this.tasks.has(spec.taskId)) return;  // a repeated assignment of a running task
    const task = {
      id: spec.taskId, spec, worker: null, ended: false, outputs: [], stores: [],
      logs: [], logBytes: 0, logLines: 0, logTimer: null,
      progress: null, progressAt: 0, progressTimer: null, sentProgress: '', started: performance.now(),
      awaiting: new Set(Array.isArray(spec.awaiting) ? spec.awaiting : []), fed: null,
      range: null,  // a range whose job iterates: {chunks, stop, entered} (the page lets it into each chunk)
    };
    this.tasks.set(task.id, task);
    if (this.tasks.size === 1) this.onBusy(true);
    task.fed = this.launch(task);  // the task-inputs that follow go to the sandbox after the task
  }

  // pmrfs inputs go to the sandbox as the store's Blobs, found all at once: it reads their bytes as it
  // gets to them. Null (and the task failed) when one is not in the store.
  async blobs(task, specs) {
    const store = this.getStore();
    const inputs = await Promise.all(specs.map(input => (typeof input.url === 'string' ? {url: input.url} : store.blob(input.sha256))));
    const missing = specs.find((input, i) => !inputs[i]);
    if (!missing) return inputs;
    this.fail(task, `input ${missing.sha256} is not in this browser's store`, '', {inputMissing: missing.sha256});
    return null;
  }

  async launch(task) {
    const spec = task.spec;
    try {
      const inputs = await this.blobs(task, spec.inputs || []);
      if (!inputs || task.ended) return;  // missing, or cancelled meanwhile
      this.noteWarm(spec.warm);
      const {worker, said} = this.sandbox(spec.script, spec.warm);
      task.worker = worker;
      worker.onmessage = event => this.fromSandbox(task, event.data);
      worker.onerror = event => {
        // The sandbox script failed to load or to run its top level (job scripts, define).
        event.preventDefault?.();
        const where = event.filename ? `    at ${event.filename}:${event.lineno}:${event.colno}` : '';
        this.fail(task, event.message || `the sandbox script ${spec.script} could not be loaded`, where);
      };
      worker.onmessageerror = () => this.fail(task, 'a message from the sandbox could not be read');
      for (const message of said) this.fromSandbox(task, message);
      worker.postMessage({type: 'run', task: spec, inputs}, inputs.filter(input => input instanceof ArrayBuffer));
      this.peers?.started(task);
    } catch (e) {
      this.fail(task, `could not start the task: ${e.message || e}`);
    }
  }

  // task-split of a range whose job iterates: it stops before the first of its chunks at or after
  // `before` that it has not been let into (the job is at most in the one it entered last), and the
  // appliance hears where at once; its range's end when there is none.
  split(task, before) {
    const range = task.range;
    const next = range.chunks.find(chunk => chunk >= before && chunk > range.entered && chunk < range.stop);
    if (Number.isInteger(before) && next !== undefined) range.stop = next;
    this.splitAt(task, range.stop);
  }

  // Where a range stops, told now and again with its task-done (the appliance may miss the first: a restart).
  splitAt(task, chunk) {
    if (chunk > 0) task.stop = Math.min(task.stop ?? chunk, chunk);
    this.send({type: 'task-split-at', taskId: task.id, chunk});
  }

  // The pieces of one more map of a streaming reduce (each map once), in the store now.
  input({taskId, producer, inputs}) {
    const task = this.tasks.get(taskId);
    if (!task || !task.awaiting.delete(producer) || !Array.isArray(inputs)) return;
    task.fed = task.fed.then(async () => {
      const blobs = task.ended ? null : await this.blobs(task, inputs);
      if (blobs && !task.ended && task.worker) task.worker.postMessage({type: 'input', taskId, producer, inputs: blobs});
    }).catch(e => this.fail(task, `could not read a streamed input: ${e.message || e}`));
  }

  fromSandbox(task, m) {
    if (task.ended || m === null || typeof m !== 'object') return;
    switch (m.type) {
      case 'ready':
        this.ready(task.spec.script, m);
        // The run's next task here gets a sandbox that starts loading now, beside this one, unless
        // this one will serve it: loading one (the runtime's and the job's scripts) takes longer
        // than a short task.
        if (m.reusable !== true && task.spec.prepareNext === true && !this.spares.has(task.spec.script)) {
          this.spare(task.spec.script);
        }
        break;
      case 'log': this.log(task, m); break;
      case 'progress': this.progress(task, m); break;
      case 'output': this.output(task, m); break;
      case 'done': this.done(task, m); break;
      case 'failed': this.fail(task, String(m.error ?? 'the task failed'), String(m.stack ?? ''), m.peerLost === true ? {peerLost: true} : {}); break;
      case 'split-at':
        if (!Number.isInteger(m.chunk) || m.chunk < 0) return;
        if (task.range) task.range.stop = Math.min(task.range.stop, m.chunk);  // a split it heard before it iterated
        this.splitAt(task, m.chunk);
        break;
      case 'iterating':
        if (!task.range && Array.isArray(m.chunks) && m.chunks.length && m.chunks.every(isCount) && isCount(m.stop)) {
          task.range = {chunks: m.chunks, stop: m.stop, entered: m.chunks[0]};
        }
        break;
      case 'enter': {
        if (!isCount(m.id) || !task.worker) return;
        const range = task.range;
        const ok = !!range && isCount(m.chunk) && m.chunk < range.stop;
        if (ok) range.entered = Math.max(range.entered, m.chunk);
        task.worker.postMessage({type: 'entered', id: m.id, ok});
        break;
      }
      case 'worker-timeout':
        if (typeof m.seconds === 'number' && m.seconds > 0) this.send({type: 'task-worker-timeout', taskId: task.id, seconds: m.seconds});
        break;
      case 'need-put-url': {
        if (!this.validPartition(task, m.partition)) return this.fail(task, 'the sandbox asked for an upload URL of no partition');
        const id = this.nextId++;
        this.putUrls.set(id, {task, id: m.id});
        this.send({type: 'task-put-url', id, taskId: task.id, partition: m.partition});
        break;
      }
      case 'peer-send': case 'peer-put-url': case 'peer-receive': case 'ps': {
        const problem = peerRequestProblem(task.spec, m);
        if (problem) return this.fail(task, `the sandbox sent an invalid ${m.type} request: ${problem}`);
        if (!this.peers) return this.fail(task, 'this page does not relay peer messages');
        this.peers.request(task, m);
        break;
      }
    }
  }

  validPartition(task, partition) {
    // The input function writes each rank's piece in `chunks` chunks; the other stages a partition per rank.
    const count = task.spec.workerCount * (task.spec.kind === 'input' ? task.spec.chunks ?? 1 : 1);
    return Number.isInteger(partition) && partition >= 0 && partition < count;
  }

  putUrlReply({replyTo, url, key, error}) {
    const pending = this.putUrls.get(replyTo);
    if (!pending) return;
    this.putUrls.delete(replyTo);
    if (!pending.task.ended) pending.task.worker.postMessage({type: 'put-url', id: pending.id, url, key, error});
  }

  output(task, m) {
    const s3 = task.spec.storage === 's3';
    const valid = this.validPartition(task, m.partition) && isCount(m.records) &&
      (s3 ? typeof m.key === 'string' && isCount(m.size) : m.data instanceof ArrayBuffer);
    if (!valid) return this.fail(task, 'the sandbox sent an invalid output');
    if (task.outputs.length === MAX_OUTPUTS) {
      return this.fail(task, `too many output blobs (more than ${MAX_OUTPUTS}) for one task: flush less often`);
    }
    if (s3) {
      task.outputs.push({partition: m.partition, key: m.key, size: m.size, records: m.records});
      return;
    }
    // Stored concurrently; task-done lists the outputs in the order they were cut.
    const output = {partition: m.partition, sha256: null, size: m.data.byteLength, records: m.records};
    task.outputs.push(output);
    const stored = (async () => {
      output.sha256 = await sha256Hex(m.data);
      await this.getStore().put(output.sha256, m.data);
    })();
    stored.catch(e => this.fail(task, `could not store an output: ${e.message || e}`));
    task.stores.push(stored);
  }

  done(task, m) {
    Promise.all(task.stores).then(() => {
      if (task.ended) return;
      if (task.outputs.some(output => output.sha256)) this.onChange();
      const message = {
        type: 'task-done', taskId: task.id, outputs: task.outputs,
        emits: isCount(m.emits) ? m.emits : 0, cpuMs: isCount(m.cpuMs) ? m.cpuMs : 0,
        ...(task.stop !== undefined ? {stop: task.stop} : {}),
      };
      if (JSON.stringify(message).length > MAX_MESSAGE_BYTES) {
        this.fail(task, `too many output blobs (${task.outputs.length}) to report in one message: flush less often`);
        return;
      }
      this.flushLogs(task);
      this.peers?.flushBytes(task.spec.runId);
      this.report(message);
      this.end(task, true);
    }, () => {});  // a store failure has failed the task already
  }

  // `signal` names a failure the coordinator acts on: {peerLost: true} or {inputMissing: sha256}.
  fail(task, error, stack = '', signal = {}) {
    if (task.ended) return;
    this.flushLogs(task);
    this.peers?.flushBytes(task.spec.runId);
    const failed = {type: 'task-failed', taskId: task.id, error: error.slice(0, MAX_ERROR), stack: stack.slice(0, MAX_STACK)};
    this.report({...failed, ...signal});
    this.end(task);
  }

  // The task is over (done, failed or cancelled). Its Web Worker stays for the run's next task here
  // when it went well, the run has one (prepareNext) and the sandbox serves one task after another
  // (and no other is idle for the run); otherwise it goes. When another task of the run follows here and its sandbox is not
  // loading yet (the one started with this task was not taken in time, SPARE_IDLE_MS), it starts now.
  end(task, done = false) {
    if (!task || task.ended) return;
    task.ended = true;
    const script = task.spec.script;
    const next = task.spec.prepareNext === true;  // the run has another task for this tab
    if (done && next && this.reusable.has(script) && !this.spares.has(script) && this.live <= this.capacity) {
      this.keep(script, task.worker);
    } else {
      task.worker?.terminate();
    }
    if (task.worker) {
      this.taskCount++;
      this.taskMs += performance.now() - task.started;
    }
    clearTimeout(task.logTimer);
    clearTimeout(task.progressTimer);
    for (const [id, pending] of this.putUrls) if (pending.task === task) this.putUrls.delete(id);
    this.peers?.ended(task);
    this.tasks.delete(task.id);
    if (next && !this.spares.has(script)) this.spare(script);
    if (this.tasks.size === 0) {
      this.onBusy(false);
      this.rewarm();
    }
  }

  log(task, m) {
    task.logLines++;
    if (task.logLines > MAX_LOG_LINES) {
      if (task.logLines > MAX_LOG_LINES + 1) return;
      m = {level: 'warn', text: `more than ${MAX_LOG_LINES} log lines: the rest are dropped`};
    }
    const line = {
      at: Number.isFinite(m.at) ? m.at : Date.now(),
      level: LEVELS.has(m.level) ? m.level : 'info',
      text: String(m.text).slice(0, LOG_LINE.text.maxLength),
    };
    const bytes = 3 * JSON.stringify(line).length;  // UTF-8 takes at most 3 bytes per UTF-16 unit
    if (task.logBytes + bytes > LOG_BATCH_BYTES) this.flushLogs(task);
    task.logs.push(line);
    task.logBytes += bytes;
    if (task.logs.length >= LOG_BATCH) this.flushLogs(task);
    else task.logTimer ??= setTimeout(() => this.flushLogs(task), LOG_DELAY_MS);
  }

  flushLogs(task) {
    clearTimeout(task.logTimer);
    task.logTimer = null;
    if (!task.logs.length) return;
    this.send({type: 'task-log', taskId: task.id, lines: task.logs});
    task.logs = [];
    task.logBytes = 0;
  }

  progress(task, m) {
    const counts = [m.emits, m.bytes, m.ticks ?? 0, m.beats ?? 0, m.read ?? 0];
    if (!counts.every(isCount)) return;
    task.progress = {emits: m.emits, bytes: m.bytes, ticks: m.ticks ?? 0, beats: m.beats ?? 0, read: m.read ?? 0};
    const wait = PROGRESS_MS - (Date.now() - task.progressAt);
    if (wait <= 0) this.sendProgress(task);
    else task.progressTimer ??= setTimeout(() => this.sendProgress(task), wait);
  }

  sendProgress(task) {
    clearTimeout(task.progressTimer);
    task.progressTimer = null;
    const latest = task.progress;
    task.progress = null;
    const signature = latest && `${latest.emits}/${latest.bytes}/${latest.ticks}/${latest.beats}/${latest.read}`;
    if (!latest || task.ended || signature === task.sentProgress) return;
    task.sentProgress = signature;
    task.progressAt = Date.now();
    this.send({type: 'task-progress', taskId: task.id, ...latest});
  }
}
