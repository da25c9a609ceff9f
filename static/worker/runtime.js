// The worker runtime: keeps this tab connected to the appliance as a worker.
// Protocol: docs/protocol.md ("Worker WebSocket").
import {BlobStore} from './blobstore.js';
import {Courtesy} from './courtesy.js';
import {DataNode} from './datanode.js';
import {Peers, decodeFrame, encodeFrame} from './peers.js';
import {SOCKET_MESSAGES} from './protocol.js';
import {CREDENTIALLESS} from './sandboxes.js';
import {TaskRunner} from './tasks.js';

const ID_KEY = 'peermr-worker-id';
// The appliance's close when the session this tab connected with ended (revoked, disabled, signed out).
const CLOSE_SESSION_ENDED = 4003;
const $ = id => document.getElementById(id);
const CAPABILITIES = SOCKET_MESSAGES.workerToAppliance.hello.capabilities.fields;

function newWorkerId() {
  const id = crypto.randomUUID();
  sessionStorage.setItem(ID_KEY, id);
  return id;
}

// sessionStorage is per tab (a duplicated tab copies it; the appliance then says
// duplicate-worker and this tab takes a new id).
let workerId = sessionStorage.getItem(ID_KEY) || newWorkerId();
// This page load: after a reload or a browser restart under the same worker id, peers know this
// page for a new one (static/worker/datanode.js, peerKey).
const instance = [...crypto.getRandomValues(new Uint8Array(8))].map(b => b.toString(16).padStart(2, '0')).join('');
let store = null;
let socket = null;
let nextId = 1;
let attempts = 0;
let mayReconnect = true;
let userPaused = false;   // the employee pressed Pause
let pauseReason = '';     // why the tab does not take tasks ('' while it does)
let iceServers = [];

const state = window.peermrWorker = {
  connected: false, workerId, account: null, state: null, error: null, tasksStarted: 0, capacity: 1, pauseReason: '',
};
const panel = $('worker').dataset;
const courtesy = new Courtesy({
  adminShare: Number(panel.coreShare),
  hoursFrom: panel.hoursFrom,
  hoursTo: panel.hoursTo,
  onChange: () => applyCourtesy(),
});

function show(connection, cls) {
  $('connection').textContent = connection;
  $('connection').className = cls;
}

function formatBytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

let storedSent = '';

async function refreshStored() {
  const {blobs, bytes} = await store.usage();
  $('stored').textContent = `${blobs} blob${blobs === 1 ? '' : 's'}, ${formatBytes(bytes)}`;
  // The dashboard's Workers view shows the same (sent when it changed, or after a reconnect).
  if (`${blobs}/${bytes}` !== storedSent && send({type: 'stored', blobs, bytes})) storedSent = `${blobs}/${bytes}`;
}

// The adapter a Web Worker of this tab gets (see gpu-probe.js), asked once per page load. Task Web
// Workers in an opaque-origin frame (browsers without credentialless iframes) get none.
let gpuProbe = null;
function gpuCapabilities() {
  gpuProbe ??= new Promise(resolve => {
    if (!CREDENTIALLESS) return resolve(null);
    let probe;
    try {
      probe = new Worker(new URL('./gpu-probe.js', import.meta.url));
    } catch {
      return resolve(null);
    }
    const done = value => { clearTimeout(timer); probe.terminate(); resolve(value); };
    const timer = setTimeout(() => done(null), 15_000);
    probe.onmessage = event => done(event.data);
    probe.onerror = () => done(null);
  }).then(gpu => {
    showGpu(gpu);
    return gpu;
  });
  return gpuProbe;
}

// A CPU implementation of WebGPU, by the appliance's rule (Gpu.software, appliance/fleet/protocol.py):
// the browser marks it isFallbackAdapter, or its vendor, architecture or description names one.
const SOFTWARE_ADAPTERS = /swiftshader|llvmpipe|lavapipe|softpipe|microsoft basic render/i;
const isSoftware = gpu => gpu.fallback ||
  SOFTWARE_ADAPTERS.test([gpu.info.vendor, gpu.info.architecture, gpu.info.description].join(' '));

function showGpu(gpu) {
  const name = gpu && ([gpu.info.vendor, gpu.info.architecture].filter(Boolean).join(' ') || 'WebGPU');
  $('gpu').textContent = gpu ? `${name}${isSoftware(gpu) ? ' (software)' : ''}` : 'none';
  $('gpu-note').hidden = Boolean(gpu);
}

async function capabilities() {
  const estimate = navigator.storage?.estimate ? await navigator.storage.estimate() : {};
  return {
    cores: navigator.hardwareConcurrency || 1,
    memoryGib: navigator.deviceMemory ?? null,
    userAgent: navigator.userAgent.slice(0, CAPABILITIES.userAgent.maxLength),
    gpu: await gpuCapabilities(),
    visibility: document.visibilityState === 'hidden' ? 'hidden' : 'visible',
    storageQuota: Math.floor(estimate.quota || 0),
    storageUsage: Math.floor(estimate.usage || 0),
    ...conditions(),
  };
}

function conditions() {
  return {capacity: courtesy.capacity, power: courtesy.power, pressure: courtesy.pressure};
}

// The employee's pause or the machine's conditions changed: tell the appliance, and say why on the page.
function applyCourtesy() {
  state.capacity = tasks.capacity = courtesy.capacity;
  $('share').max = Math.round(courtesy.adminShare * 100);
  // Not while the employee is typing a new share in it.
  if (document.activeElement !== $('share')) $('share').value = Math.round(courtesy.share * 100);
  $('capacity').textContent = `at most ${courtesy.capacity} task${courtesy.capacity === 1 ? '' : 's'} at once ` +
    `(${Math.round(courtesy.share * 100)} % of ${courtesy.cores} core${courtesy.cores === 1 ? '' : 's'})`;
  const reason = userPaused ? 'by its user' : courtesy.pauseReason;
  if (reason !== pauseReason) {
    pauseReason = state.pauseReason = reason;
    send(reason ? {type: 'pause', id: nextId++, reason} : {type: 'resume', id: nextId++});
    if (!reason && state.state === 'paused') setState(tasks.tasks.size ? 'busy' : 'idle');  // the appliance confirms
  }
  send({type: 'conditions', ...conditions()});
  showContribution();
}

function showContribution() {
  const seconds = Math.round(tasks.taskMs / 1000);
  $('contributed').textContent = `${tasks.taskCount} task${tasks.taskCount === 1 ? '' : 's'}, ` +
    `${seconds} CPU second${seconds === 1 ? '' : 's'} since this page opened`;
}

// True when the message went (false while the connection is away).
function send(message) {
  if (socket?.readyState !== WebSocket.OPEN) return false;
  socket.send(JSON.stringify(message));
  return true;
}

// A binary frame: a JSON header and its payload's bytes (parameter-server values).
function sendBinary(header, payload) {
  if (socket?.readyState === WebSocket.OPEN) socket.send(encodeFrame(header, payload));
}

const handlers = {
  welcome(m) {
    iceServers = m.iceServers;
    attempts = 0;
    state.connected = true;
    state.account = m.account;
    show('connected', 'status-connected');
    $('pause').disabled = false;
    if (pauseReason) send({type: 'pause', id: nextId++, reason: pauseReason});
    setState(pauseReason ? 'paused' : tasks.tasks.size ? 'busy' : 'idle');
    tasks.resend();
  },
  ping(m) { send({type: 'pong', id: m.id, storeWaitMs: store ? store.waitMs() : 0}); },
  async 'probe-offer'(m) { await answerProbe(m); },
  state(m) { setState(m.state); },
  async 'hello-again'() {
    state.connected = false;
    show('reconnecting (the scheduler changed)…', 'status-connecting');
    await sayHello();
  },
  disconnect(m) {
    mayReconnect = m.reconnect !== false;
    // Not working for the appliance any more: say so at once, and Pause means nothing now.
    state.connected = false;
    $('pause').disabled = true;
    if (!tasks.tasks.size) setState('offline');
    $('note').textContent = `The appliance closed this connection: ${m.reason}.` +
      (mayReconnect ? '' : ' Reload the page to join again.');
  },
  async error(m) {
    state.error = m.code;
    if (m.code === 'duplicate-worker') {
      // A duplicated tab: become a new worker with a store of its own.
      workerId = state.workerId = newWorkerId();
      $('worker-id').textContent = workerId;
      store = await new BlobStore(workerId).open();
      await refreshStored();
      attempts = 0;
    } else {
      $('note').textContent = `The appliance refused a message: ${m.message}`;
    }
  },
};

// The appliance's connectivity probe: answer its offer and echo what it sends on the channel.
async function answerProbe(offer) {
  const pc = new RTCPeerConnection({iceServers});
  const done = () => pc.close();
  const timer = setTimeout(done, 30_000);
  pc.ondatachannel = ({channel}) => {
    channel.onmessage = e => channel.readyState === 'open' && channel.send(e.data);
    channel.onclose = () => { clearTimeout(timer); done(); };
  };
  await pc.setRemoteDescription({type: 'offer', sdp: offer.sdp});
  await pc.setLocalDescription(await pc.createAnswer());
  await new Promise(resolve => {
    if (pc.iceGatheringState === 'complete') return resolve();
    pc.onicegatheringstatechange = () => pc.iceGatheringState === 'complete' && resolve();
    setTimeout(resolve, 5_000);  // send what we have; the probe times out if it is not enough
  });
  send({type: 'probe-answer', replyTo: offer.id, sdp: pc.localDescription.sdp});
}

// This tab's cookie no longer opens the appliance: say why and how to join again, and stop reconnecting.
function signedOut(reason) {
  mayReconnect = false;
  show('signed out', 'status-disconnected');
  $('note').textContent = `This tab stopped working for the appliance: ${reason}.`;
  $('rejoin').hidden = false;
}

// A connection refused before it opened: is it the cookie? The ICE servers need the same one (401 without).
async function cookieRefused() {
  try {
    return (await fetch('/worker/ice-servers')).status === 401;
  } catch {
    return false;  // the appliance cannot be reached: try again later
  }
}

function setState(value) {
  state.state = value;
  const paused = pauseReason && !userPaused ? `paused: ${pauseReason}` : 'paused';
  const words = {idle: 'waiting for work', busy: 'running a task', paused, offline: 'nothing: not connected'};
  $('state').textContent = words[value] || value;
  $('pause').textContent = userPaused ? 'Resume' : 'Pause';
  showContribution();
}

// Who this tab is, what its store holds and which tasks it has: at every connection, and on the same
// socket when another scheduler leads (hello-again).
async function sayHello() {
  const hello = {type: 'hello', id: nextId++, workerId, capabilities: await capabilities()};
  send({...hello, instance, blobs: await store.keys(), tasks: tasks.held()});
  storedSent = '';
  await refreshStored();
}

async function connect() {
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  socket = new WebSocket(`${scheme}//${location.host}/ws/worker`);
  socket.binaryType = 'arraybuffer';
  let opened = false;
  show(attempts ? `reconnecting (attempt ${attempts + 1})…` : 'connecting…', 'status-connecting');
  socket.onopen = async () => {
    opened = true;
    await sayHello();
  };
  socket.onmessage = event => {
    let message, payload;
    try {
      if (typeof event.data === 'string') message = JSON.parse(event.data);
      else ({header: message, payload} = decodeFrame(event.data));
    } catch { return; }
    if (handlers[message.type]) handlers[message.type](message);
    else if (message.type.startsWith('task-')) {
      if (message.type === 'task-assign') state.tasksStarted++;
      tasks.handle(message).catch(e => console.error('task', message.type, e));
    }
    else if (!peers.handle(message, payload)) datanode.handle(message).catch(e => console.error('datanode', message.type, e));
  };
  socket.onclose = async event => {
    state.connected = false;
    // Tasks run on: the next hello names them, and the appliance takes their reports or cancels them.
    $('pause').disabled = true;
    if (!tasks.tasks.size) setState('offline');
    if (event.code === CLOSE_SESSION_ENDED) return signedOut(event.reason);
    if (!opened && await cookieRefused()) return signedOut('its sign-in is no longer valid');
    if (!mayReconnect) {
      show('disconnected', 'status-disconnected');
      return;
    }
    // Back off after failures (the appliance may be restarting), with jitter so a fleet does not reconnect in step.
    const delay = Math.min(30_000, 500 * 2 ** attempts) * (0.75 + Math.random() / 2);
    attempts++;
    show(`disconnected; retrying in ${Math.round(delay / 1000)} s`, 'status-disconnected');
    setTimeout(connect, delay);
  };
}

document.addEventListener('visibilitychange', () =>
  send({type: 'visibility', state: document.visibilityState === 'hidden' ? 'hidden' : 'visible'}));

$('pause').addEventListener('click', () => {
  userPaused = !userPaused;
  applyCourtesy();
});

$('share').addEventListener('change', () => courtesy.setShare(Number($('share').value) / 100));

$('clear').addEventListener('click', async () => {
  const dropped = await store.keys();
  const what = dropped.length ? `the ${dropped.length} blob(s) this tab stores` : 'what this tab stores';
  if (!confirm(`Delete ${what} for the appliance? It cannot be undone.`)) return;
  store = await store.clear();
  if (dropped.length) send({type: 'blobs-dropped', sha256: dropped});
  await refreshStored();
  $('note').textContent = 'This tab no longer stores any data.';
});

store = await new BlobStore(workerId).open();
const datanode = new DataNode({
  getStore: () => store,
  send,
  iceServers: () => iceServers,
  onChange: () => refreshStored(),
});
const peers = new Peers({getStore: () => store, send, sendBinary, datanode});
const tasks = new TaskRunner({
  getStore: () => store,
  send,
  onBusy: busy => {
    courtesy.busy = busy;
    if (state.state !== 'paused') setState(busy ? 'busy' : state.connected ? 'idle' : 'offline');
    applyCourtesy();
  },
  onChange: () => refreshStored(),
  peers,
  capacity: courtesy.capacity,
});
$('worker-id').textContent = workerId;
await refreshStored();
await courtesy.start();
applyCourtesy();
connect();
