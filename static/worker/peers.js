// Peer messages on the worker page: the page's side of what the ranks of a stage send each other
// and of the appliance's parameter server (docs/protocol.md "Peer messages"). The task runner
// (static/worker/tasks.js) hands over the sandbox's validated requests; the answers go back to
// the sandbox. Indirect messages and ps requests go through the appliance (ps values in binary
// frames). Direct messages go over links: data channels (static/worker/datanode.js) the appliance
// arranges between the workers of two ranks, kept per run and worker. A direct message that
// arrives before its task runs here waits in an inbox.
import {peerKey, sendChunked} from './datanode.js';
import {sha256Hex} from './sha256.js';

const MAX_DIRECT = 256 * 1024 * 1024;  // one direct message, and all of those in the inbox
const INBOX_MS = 10 * 60_000;
const LINK_IDLE_MS = 10 * 60_000;      // a link unused this long is closed (runs end unannounced)
const BYTES_REPORT_MS = 1000;
const MAX_TAG = 200;
// The sandbox's requests and the types of their answers.
const ANSWERS = {'peer-send': 'peer-sent', 'peer-put-url': 'peer-put-url', 'peer-receive': 'peer-message', 'ps': 'ps-reply'};
const REPLIES = new Set(['peer-send-reply', 'peer-put-url-reply', 'peer-message', 'peer-link-reply', 'ps-reply']);

// --- binary WebSocket frames: uint32 little-endian header length, the JSON header, the payload ---

export function encodeFrame(header, payload) {
  const text = new TextEncoder().encode(JSON.stringify(header));
  const frame = new Uint8Array(4 + text.byteLength + payload.byteLength);
  new DataView(frame.buffer).setUint32(0, text.byteLength, true);
  frame.set(text, 4);
  frame.set(new Uint8Array(payload), 4 + text.byteLength);
  return frame.buffer;
}

export function decodeFrame(buffer) {
  const length = new DataView(buffer).getUint32(0, true);
  if (4 + length > buffer.byteLength) throw new Error('a binary frame shorter than its header');
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buffer, 4, length)));
  return {header, payload: buffer.slice(4 + length)};
}

// --- links ---------------------------------------------------------------------------------------

const isRank = n => Number.isInteger(n) && n >= 0;

function parseHeader(text) {
  let h;
  try {
    h = JSON.parse(text);
  } catch {
    return null;
  }
  const valid = typeof h?.group === 'string' && Number.isInteger(h.stage) && isRank(h.fromRank) && isRank(h.toRank) &&
    typeof h.tag === 'string' && h.tag.length >= 1 && h.tag.length <= MAX_TAG && isRank(h.size) && h.size <= MAX_DIRECT &&
    isRank(h.epoch ?? 0);
  return valid ? {...h, epoch: h.epoch ?? 0} : null;
}

// Resolves at the channel's first message; rejects if it closes before one.
function heard(channel) {
  return new Promise((resolve, reject) => {
    channel.addEventListener('message', () => resolve(), {once: true});
    channel.addEventListener('close', () => reject(new Error('the link closed before its opener sent on it')), {once: true});
  });
}

// A data channel to another worker carrying direct messages of one run, both ways: each a JSON
// header {runId, group, stage, fromRank, toRank, tag, size} then `size` bytes in chunks, one
// message after another. Anything else closes it.
class Link {
  constructor(id, runId, worker, {onMessage, onClose, onBytes}) {
    this.id = id;                // the appliance's link id (its billing counts the bytes under it)
    this.runId = runId;
    this.worker = worker;
    this.onMessage = onMessage;  // (link, header, data)
    this.onClose = onClose;      // (link)
    this.onBytes = onBytes;      // (link): this.bytes grew
    this.bytes = 0;              // moved through the link, both ways
    this.reported = 0;           // ... as last reported to the appliance
    this.reportTimer = null;
    this.ready = null;           // resolves with the link once its channel is open
    this.channel = null;
    this.queue = Promise.resolve();
    this.incoming = null;        // {header, bytes, received} of the message arriving
    this.idleTimer = null;
  }

  attach(channel) {
    this.channel = channel;
    channel.onmessage = ({data}) => this.receive(data);
    channel.onclose = () => {
      clearTimeout(this.idleTimer);
      this.onClose(this);
    };
    this.used();
    return this;
  }

  used() {
    clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => this.channel.close(), LINK_IDLE_MS);
  }

  // Resolves once the bytes are in the channel's buffer.
  send(header, data) {
    const sent = this.queue.then(async () => {
      if (this.channel.readyState !== 'open') throw new Error('the link to the peer closed');
      this.used();
      const text = JSON.stringify(header);
      this.channel.send(text);
      await sendChunked(this.channel, data);
      this.moved(text.length + data.byteLength);
    });
    this.queue = sent.catch(() => {});
    return sent;
  }

  moved(bytes) {
    this.bytes += bytes;
    this.onBytes(this);
  }

  receive(data) {
    this.moved(typeof data === 'string' ? data.length : data.byteLength);
    if (typeof data === 'string') {
      const header = this.incoming ? null : parseHeader(data);
      if (header?.runId !== this.runId) return this.channel.close();
      this.used();
      this.incoming = {header, bytes: new Uint8Array(header.size), received: 0};
    } else {
      const incoming = this.incoming;
      if (!incoming || incoming.received + data.byteLength > incoming.header.size) return this.channel.close();
      incoming.bytes.set(new Uint8Array(data), incoming.received);
      incoming.received += data.byteLength;
    }
    const {header, bytes, received} = this.incoming;
    if (received < header.size) return;
    this.incoming = null;
    this.onMessage(this, header, bytes.buffer);
  }
}

// --- peers ---------------------------------------------------------------------------------------

const sameRank = (spec, header) => spec.runId === header.runId && spec.group === header.group &&
  spec.stage === header.stage && spec.rank === header.toRank;
// The epoch counts the ranks the group lost: after a loss the stage starts again, and a message an
// attempt of the old epoch sent must not reach one of the new (it would be summed twice).
const addressed = (spec, header) => sameRank(spec, header) && (spec.epoch ?? 0) === header.epoch;

export class Peers {
  // send, sendBinary(header, payload): a message, a binary frame, to the appliance; getStore: the
  // tab's BlobStore (it changes when the data is cleared); datanode: opens and accepts data channels.
  constructor({send, sendBinary, getStore, datanode}) {
    this.send = send;
    this.sendBinary = sendBinary;
    this.getStore = getStore;
    this.datanode = datanode;
    this.tasks = new Set();     // running tasks (of the task runner) whose sandbox has started
    this.pending = new Map();   // request id to the appliance -> {task, resolve}
    this.links = new Map();     // `${runId}:${peer key}` -> Link (datanode.js: a worker's page load)
    this.open = new Set();      // every open Link (two may join the same workers when both opened one)
    this.workers = new Map();   // `${runId}.${group}.${stage}.${rank}` -> the peer key of that rank
    this.inbox = [];            // {header, data, at} of direct messages for no running task, oldest first
    this.inboxBytes = 0;
    this.nextId = 1;
  }

  // True when the appliance's message (payload: the bytes of a binary frame) was for peers.
  handle(message, payload) {
    if (REPLIES.has(message.type)) {
      const pending = this.pending.get(message.replyTo);
      this.pending.delete(message.replyTo);
      pending?.resolve(payload === undefined ? message : {...message, data: payload});
    } else if (message.type === 'peer-link-open') {
      this.acceptLink(message);
    } else if (message.type === 'peer-lost') {
      this.lost(message);
    } else {
      return false;
    }
    return true;
  }

  started(task) {
    this.tasks.add(task);
    this.pruneInbox();
    const waiting = this.inbox.filter(message => addressed(task.spec, message.header));
    const stale = this.inbox.filter(m => sameRank(task.spec, m.header) && m.header.epoch < (task.spec.epoch ?? 0));
    this.inbox = this.inbox.filter(message => !waiting.includes(message) && !stale.includes(message));
    for (const {data} of stale) this.inboxBytes -= data.byteLength;
    for (const {header, data} of waiting) {
      this.inboxBytes -= data.byteLength;
      this.deliver(task, header, data);
    }
  }

  ended(task) {
    this.tasks.delete(task);
    for (const [id, pending] of this.pending) if (pending.task === task) this.pending.delete(id);
  }

  // A request of the task's sandbox, validated by the task runner; the answer goes back to it.
  request(task, m) {
    const handler = {'peer-send': this.peerSend, 'peer-put-url': this.peerPutUrl, 'peer-receive': this.peerReceive, 'ps': this.ps}[m.type];
    handler.call(this, task, m)
      .catch(e => ({error: String(e.message || e)}))
      .then(answer => this.post(task, {type: ANSWERS[m.type], id: m.id, ...answer}));
  }

  post(task, message) {
    if (!task.ended) task.worker.postMessage(message, message.data instanceof ArrayBuffer ? [message.data] : []);
  }

  // A request to the appliance; resolves with its reply (a binary frame's payload as `data`).
  ask(task, message, payload) {
    const id = this.nextId++;
    return new Promise(resolve => {
      this.pending.set(id, {task, resolve});
      if (payload === undefined) this.send({...message, id});
      else this.sendBinary({...message, id}, payload);
    });
  }

  async peerSend(task, {rank, tag, data, direct, key, size}) {
    if (direct === true) {
      const {runId, group, stage, rank: fromRank} = task.spec;
      const link = await this.link(task, rank);
      const epoch = task.spec.epoch ?? 0;
      await link.send({runId, group, stage, fromRank, toRank: rank, tag, epoch, size: data.byteLength}, data);
      return {};
    }
    let stored = {key, size};
    if (data) {  // pmrfs: the appliance copies the blob from this tab's store to the receiver's
      const sha256 = await sha256Hex(data);
      await this.getStore().put(sha256, data);
      stored = {sha256, size: data.byteLength};
    }
    const {error} = await this.ask(task, {type: 'peer-send', taskId: task.id, toRank: rank, tag, ...stored});
    return {error};
  }

  async peerPutUrl(task, {rank, tag}) {
    const {url, key, error} = await this.ask(task, {type: 'peer-put-url', taskId: task.id, toRank: rank, tag});
    return {url, key, error};
  }

  async peerReceive(task, {rank, tag}) {
    const {error, url, sha256} = await this.ask(task, {type: 'peer-receive', taskId: task.id, fromRank: rank, tag});
    if (error) return {error};
    if (url) return {url};
    const data = await this.getStore().get(sha256);
    if (!data) throw new Error(`the message (blob ${sha256}) is not in this tab's store`);
    return {data};
  }

  async ps(task, {op, key, dtype, data, fn, version}) {
    const taskId = task.id;
    const reply = await {
      write: () => this.ask(task, {type: 'ps-write', taskId, key, dtype, ifVersion: version}, data),
      update: () => this.ask(task, {type: 'ps-update', taskId, key, dtype, op: fn}, data),
      read: () => this.ask(task, {type: 'ps-read', taskId, key}),
      clock: () => this.ask(task, {type: 'ps-clock', taskId}),
    }[op]();
    // The appliance leaves out zeros and empty strings.
    return {error: reply.error, dtype: reply.dtype, data: reply.data, version: reply.version ?? 0, clock: reply.clock ?? 0};
  }

  // The open link to the worker that holds `toRank` of the task's stage: a known one, or a new one
  // the appliance arranges (it may ride this tab's connection to that worker).
  async link(task, toRank) {
    const {runId, group, stage} = task.spec;
    const rankKey = `${runId}.${group}.${stage}.${toRank}`;
    const known = this.links.get(`${runId}:${this.workers.get(rankKey)}`);
    if (known) return known.ready;
    const {linkId, to, toInstance, error} = await this.ask(task, {type: 'peer-link', taskId: task.id, toRank});
    if (error) throw new Error(`no link to rank ${toRank}: ${error}`);
    const peer = peerKey(to, toInstance);
    this.workers.set(rankKey, peer);
    const key = `${runId}:${peer}`;
    if (!this.links.has(key)) {  // else opened by another send meanwhile, or by that worker
      const link = this.newLink(linkId, runId, peer);
      const opened = this.datanode.openChannel(to, linkId, `link:${linkId}`, toInstance);
      link.ready = opened.then(channel => link.attach(channel));
      link.ready.catch(() => this.dropLink(link));
      this.links.set(key, link);
    }
    return this.links.get(key).ready;
  }

  newLink(id, runId, worker) {
    const link = new Link(id, runId, worker, {
      onMessage: (link, header, data) => this.arrived(link, header, data),
      onClose: link => this.dropLink(link),
      onBytes: link => this.reportBytes(link),
    });
    this.open.add(link);
    return link;
  }

  dropLink(link) {
    const key = `${link.runId}:${link.worker}`;
    if (this.links.get(key) === link) this.links.delete(key);
    this.open.delete(link);
    this.sendBytes(link);
  }

  // Before a task of the run reports its end: the appliance meters the run's links when it ends.
  flushBytes(runId) {
    for (const link of this.open) if (link.runId === runId) this.sendBytes(link);
  }

  // Both ends report the bytes a link moved (the appliance bills the smaller count), at most once
  // a second and once more after the last message.
  reportBytes(link) {
    link.reportTimer ??= setTimeout(() => this.sendBytes(link), BYTES_REPORT_MS);
  }

  sendBytes(link) {
    clearTimeout(link.reportTimer);
    link.reportTimer = null;
    if (link.bytes !== link.reported) this.send({type: 'transfer-bytes', transferId: link.id, bytes: link.bytes});
    link.reported = link.bytes;
  }

  // Another worker of the run will open a link to this tab; it serves messages both ways. This end
  // sends on it once the opener's first message is here (a link is opened to send one): Chromium may
  // hand the opener what this end sends before the channel's open event, from which on the opener
  // listens, and a message sent sooner was lost (the collective waiting for it hung).
  acceptLink({linkId, from, runId, fromInstance}) {
    const peer = peerKey(from, fromInstance);
    const accept = channel => {
      const link = this.newLink(linkId, runId, peer).attach(channel);
      link.ready = heard(channel).then(() => link);
      link.ready.catch(() => {});  // a link that closes is dropped on close
      const key = `${runId}:${peer}`;
      if (!this.links.has(key)) this.links.set(key, link);
    };
    this.datanode.expect(linkId, from, `link:${linkId}`, accept, fromInstance);
  }

  arrived(link, header, data) {
    // Replies to the sender go back over the same link.
    this.workers.set(`${header.runId}.${header.group}.${header.stage}.${header.fromRank}`, link.worker);
    const task = [...this.tasks].find(t => addressed(t.spec, header));
    if (task) return this.deliver(task, header, data);
    // Of an older epoch than this rank's task: stale. Of a newer one: for the task that starts next.
    const stale = [...this.tasks].some(t => sameRank(t.spec, header) && (t.spec.epoch ?? 0) > header.epoch);
    if (!stale) this.keep(header, data);
  }

  deliver(task, header, data) {
    this.post(task, {type: 'peer-direct', rank: header.fromRank, tag: header.tag, data});
  }

  // For a task that starts later (its rank's sender may run ahead): at most INBOX_MS, MAX_DIRECT in all.
  keep(header, data) {
    this.pruneInbox();
    while (this.inbox.length && this.inboxBytes + data.byteLength > MAX_DIRECT) {
      const dropped = this.inbox.shift();
      this.inboxBytes -= dropped.data.byteLength;
      console.warn('peers: the inbox is full, dropped a direct message', dropped.header);
    }
    this.inbox.push({header, data, at: Date.now()});
    this.inboxBytes += data.byteLength;
  }

  pruneInbox() {
    const since = Date.now() - INBOX_MS;
    while (this.inbox.length && this.inbox[0].at < since) this.inboxBytes -= this.inbox.shift().data.byteLength;
  }

  // A rank of a run lost its worker: tell the run's sandboxes here, forget where that rank was.
  lost({runId, group, rank, reason}) {
    for (const key of this.workers.keys()) {
      if (key.startsWith(`${runId}.${group}.`) && key.endsWith(`.${rank}`)) this.workers.delete(key);
    }
    for (const task of this.tasks) {
      if (task.spec.runId === runId && task.spec.group === group) this.post(task, {type: 'peer-lost', rank, reason});
    }
  }
}
