// PMRFS datanode: this tab stores blobs in IndexedDB and moves them when the appliance asks.
// Browser <-> appliance traffic uses HTTP (with a per-transfer grant in the URL the appliance
// gives); browser <-> browser traffic uses a WebRTC data channel, signaled through the appliance
// and only for transfers (and peer links, static/worker/peers.js) it arranged. Every blob is
// verified by SHA-256 where it lands.
import {sha256Hex} from './sha256.js';

const CHUNK = 64 * 1024;          // data channel message size every browser accepts
const HIGH_WATER = 4 * 1024 * 1024;
const OPEN_TIMEOUT_MS = 20_000;   // a channel not open by then will not open: fail fast
const REUSE_OPEN_MS = 1000;       // on a known connection a channel opens at once, or the connection is dead
const EXPECT_MS = 120_000;        // how long an arranged channel may take to arrive
const EARLY_MS = 10_000;          // and how long one that came before the appliance's word of it waits
// A receiving tab reports the bytes in so far this often: the appliance gives up on a copy whose
// bytes stop coming for a couple of seconds, and asks another holder.
const PROGRESS_MS = 250;

// Bytes in CHUNK messages, waiting while the channel's buffer is above HIGH_WATER.
export async function sendChunked(channel, bytes) {
  for (let offset = 0; offset < bytes.byteLength; offset += CHUNK) {
    if (channel.bufferedAmount > HIGH_WATER) await drained(channel);
    if (channel.readyState !== 'open') throw new Error('the data channel closed');
    channel.send(new Uint8Array(bytes, offset, Math.min(CHUNK, bytes.byteLength - offset)));
  }
}

function drained(channel) {
  return new Promise(resolve => {
    const done = () => {
      channel.removeEventListener('bufferedamountlow', done);
      channel.removeEventListener('close', done);
      resolve();
    };
    channel.addEventListener('bufferedamountlow', done);
    channel.addEventListener('close', done);
  });
}

// A peer is a worker's page load, `${workerId}#${instance}`: a page that started again under the same
// worker id is another peer. This tab's connections to the old one are closed once the appliance
// names the new one: that process is gone, and a channel opened on its connection would never open.
export const peerKey = (worker, instance) => (instance ? `${worker}#${instance}` : worker);

const failure = (transferId, sha256, e) =>
  ({type: 'blob-failed', transferId, sha256, reason: String(e.message || e).slice(0, 200)});

export class DataNode {
  constructor({getStore, send, iceServers, onChange}) {
    this.getStore = getStore;       // the tab's BlobStore (it changes when the data is cleared)
    this.send = send;
    this.iceServers = iceServers;   // function returning the ICE servers of the welcome
    this.onChange = onChange;
    this.outgoing = new Map();      // peer key -> the connection this tab opened to it
    this.incoming = new Map();      // peer key -> the connection it opened to this tab
    this.signaling = new Map();     // transferId -> the connection its signals are for
    this.expected = new Map();      // transferId -> {from, key, label, accept(channel)} of a channel to receive
    this.early = new Map();         // transferId -> candidates that came before the offer
    this.unclaimed = new Map();     // transferId -> {channel, from, messages} that came before expect()
  }

  async handle(message) {
    const handler = {
      'blob-fetch': m => this.fetchFromAppliance(m),
      'blob-upload': m => this.uploadToAppliance(m),
      'blob-send': m => this.sendToPeer(m),
      'blob-receive': m => this.receiveFromPeer(m),
      'blob-delete': m => this.deleteBlob(m),
      'signal': m => this.signal(m),
    }[message.type];
    if (!handler) return false;
    await handler(message);
    return true;
  }

  async verifyAndStore(sha256, bytes) {
    if (await sha256Hex(bytes) !== sha256) throw new Error('SHA-256 mismatch');
    await this.getStore().put(sha256, bytes);
    this.onChange();
  }

  async fetchFromAppliance({id, sha256, url}) {
    try {
      const response = await fetch(url, {credentials: 'same-origin'});
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const bytes = await response.arrayBuffer();
      await this.verifyAndStore(sha256, bytes);
      this.send({type: 'blob-stored', replyTo: id, sha256, size: bytes.byteLength});
    } catch (e) {
      this.send({type: 'blob-failed', replyTo: id, sha256, reason: String(e.message || e).slice(0, 200)});
    }
  }

  async uploadToAppliance({id, sha256, url}) {
    try {
      const bytes = await this.getStore().get(sha256);
      if (!bytes) throw new Error('missing');
      const response = await fetch(url, {method: 'PUT', body: bytes, credentials: 'same-origin'});
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      this.send({type: 'blob-uploaded', replyTo: id, sha256, size: bytes.byteLength});
    } catch (e) {
      this.send({type: 'blob-failed', replyTo: id, sha256, reason: String(e.message || e).slice(0, 200)});
    }
  }

  async deleteBlob({sha256}) {
    await this.getStore().delete(sha256);
    this.onChange();
  }

  // Connections are kept per peer and direction and reused: the next blob to the same browser
  // opens one more data channel on the established connection, without signaling, ICE or DTLS.
  connect(transferId) {
    const pc = new RTCPeerConnection({iceServers: this.iceServers()});
    pc.onicecandidate = ({candidate}) => candidate && this.send({type: 'signal', transferId, data: {candidate}});
    this.signaling.set(transferId, pc);
    return pc;
  }

  usable(pc) {
    return pc && !['failed', 'closed', 'disconnected'].includes(pc.connectionState);
  }

  // Close the connections to the worker's other page loads than `key`.
  retire(worker, key) {
    for (const connections of [this.outgoing, this.incoming]) {
      for (const [other, pc] of connections) {
        if (other !== key && (other === worker || other.startsWith(`${worker}#`))) {
          connections.delete(other);
          pc.close();
        }
      }
    }
  }

  async signal({transferId, data}) {
    let pc = this.signaling.get(transferId);
    if (!pc && data.sdp?.type === 'offer') {
      // A new connection from a sender (the first blob, or its previous connection died).
      const expected = this.expected.get(transferId);
      if (!expected) return;
      pc = this.connect(transferId);
      pc.ondatachannel = ({channel}) => this.receiveChannel(channel, expected.from);
      this.incoming.get(expected.key)?.close();
      this.incoming.set(expected.key, pc);
      for (const candidate of this.early.get(transferId) || []) (pc.pendingCandidates ||= []).push(candidate);
      this.early.delete(transferId);
    }
    if (!pc) {
      if (data.candidate) this.early.set(transferId, [...(this.early.get(transferId) || []), data.candidate]);
      return;
    }
    if (data.sdp) {
      await pc.setRemoteDescription(data.sdp);
      // Candidates that came before the description can be added now.
      for (const candidate of pc.pendingCandidates || []) await pc.addIceCandidate(candidate).catch(() => {});
      pc.pendingCandidates = null;
      if (data.sdp.type === 'offer') {
        await pc.setLocalDescription(await pc.createAnswer());
        this.send({type: 'signal', transferId, data: {sdp: pc.localDescription.toJSON()}});
      }
    } else if (data.candidate) {
      if (!pc.remoteDescription) (pc.pendingCandidates ||= []).push(data.candidate);
      else await pc.addIceCandidate(data.candidate).catch(() => {});
    }
  }

  // A data channel to a peer worker's page load `instance`, on this tab's connection to it or on a
  // new one signaled under `id`; resolves once open. A known connection that opens no channel at
  // once (its peer was frozen, or their association died while the connection still looks alive)
  // is closed and a new one made; a new one that never connects is dropped (and closed), so the
  // next channel to that worker starts afresh.
  async openChannel(to, id, label, instance = '') {
    const key = peerKey(to, instance);
    this.retire(to, key);
    const known = this.outgoing.get(key);
    if (this.usable(known)) {
      try {
        return await this.channelOn(known, label, REUSE_OPEN_MS);
      } catch {
        if (this.outgoing.get(key) === known) this.outgoing.delete(key);
        known.close();
      }
    }
    const pc = this.connect(id);
    this.outgoing.set(key, pc);
    try {
      return await this.channelOn(pc, label, OPEN_TIMEOUT_MS, () => this.offer(pc, id));
    } catch (e) {
      if (this.outgoing.get(key) === pc) this.outgoing.delete(key);
      pc.close();
      throw e;
    }
  }

  // A data channel on `pc`, resolved once open; `offer()` first offers a new connection.
  channelOn(pc, label, timeoutMs, offer) {
    const channel = pc.createDataChannel(label, {ordered: true});
    channel.binaryType = 'arraybuffer';
    channel.bufferedAmountLowThreshold = HIGH_WATER / 2;
    return new Promise((resolve, reject) => {
      let settled = false;
      const fail = reason => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        channel.close();
        reject(new Error(reason));
      };
      const timer = setTimeout(() => fail(`the data channel did not open within ${timeoutMs / 1000} s`), timeoutMs);
      channel.addEventListener('open', () => {
        settled = true;
        clearTimeout(timer);
        resolve(channel);
      }, {once: true});
      channel.addEventListener('error', () => fail('the data channel failed before it opened'), {once: true});
      channel.addEventListener('close', () => fail('the data channel closed before it opened'), {once: true});
      offer?.().catch(e => fail(`could not offer a connection: ${e.message || e}`));
    });
  }

  async offer(pc, id) {
    await pc.setLocalDescription(await pc.createOffer());
    this.send({type: 'signal', transferId: id, data: {sdp: pc.localDescription.toJSON()}});
  }

  // A channel labelled `label` that `from` (its page load `instance`) will open under the arranged
  // `id` (with an offer under that id when it needs a new connection) goes to accept(channel).
  expect(id, from, label, accept, instance = '') {
    const key = peerKey(from, instance);
    this.retire(from, key);
    const early = this.unclaimed.get(id);
    if (early) {
      this.unclaimed.delete(id);
      this.claim(early.channel, early.from, {from, key, label, accept});
      for (const data of early.messages) early.channel.dispatchEvent(new MessageEvent('message', {data}));
      return;
    }
    this.expected.set(id, {from, key, label, accept});
    setTimeout(() => { this.expected.delete(id); this.signaling.delete(id); }, EXPECT_MS);
  }

  // A channel `from` opened on its connection to this tab.
  receiveChannel(channel, from) {
    channel.binaryType = 'arraybuffer';
    const id = channel.label.slice(channel.label.indexOf(':') + 1);
    const expected = this.expected.get(id);
    if (expected) {
      this.expected.delete(id);
      this.claim(channel, from, expected);
      return;
    }
    // On an existing connection a channel can overtake the appliance's word of it: keep it (and
    // what it carries) a while.
    const early = {channel, from, messages: []};
    channel.onmessage = ({data}) => early.messages.push(data);
    this.unclaimed.set(id, early);
    setTimeout(() => {
      if (this.unclaimed.get(id) !== early) return;
      this.unclaimed.delete(id);
      channel.close();
    }, EARLY_MS);
  }

  claim(channel, from, expected) {
    if (from !== expected.from || channel.label !== expected.label) channel.close();  // not what was arranged
    else expected.accept(channel);
  }

  async sendToPeer({transferId, sha256, to, toInstance}) {
    const bytes = await this.getStore().get(sha256);
    if (!bytes) {
      this.send({type: 'blob-failed', transferId, sha256, reason: 'missing'});
      return;
    }
    this.send({type: 'transfer-bytes', transferId, bytes: 0});  // alive, and it has the blob: the copy starts
    try {
      const channel = await this.openChannel(to, transferId, `blob:${transferId}`, toInstance);
      await sendChunked(channel, bytes);
      channel.send('end');
    } catch (e) {
      this.send(failure(transferId, sha256, e));
      return;
    }
    this.send({type: 'transfer-bytes', transferId, bytes: bytes.byteLength});
  }

  receiveFromPeer({transferId, sha256, size, from, fromInstance}) {
    // The data arrives on a channel labelled with the transfer, on a new or an existing connection.
    const receive = channel => this.receiveBlob(channel, transferId, sha256, size);
    this.expect(transferId, from, `blob:${transferId}`, receive, fromInstance);
  }

  receiveBlob(channel, transferId, sha256, size) {
    const buffer = new Uint8Array(size);
    let received = 0;
    let ended = false;
    let reportedAt = performance.now();
    channel.onclose = () => {
      if (!ended) this.send(failure(transferId, sha256, `the data channel closed after ${received} of ${size} bytes`));
    };
    channel.onmessage = async ({data}) => {
      if (typeof data !== 'string') {
        if (received + data.byteLength > size) { channel.close(); return; }  // more than announced: refuse
        buffer.set(new Uint8Array(data), received);
        received += data.byteLength;
        if (performance.now() - reportedAt >= PROGRESS_MS) {
          reportedAt = performance.now();
          this.send({type: 'transfer-bytes', transferId, bytes: received});
        }
        return;
      }
      ended = true;
      this.send({type: 'transfer-bytes', transferId, bytes: received});
      try {
        if (received !== size) throw new Error(`short transfer: ${received} of ${size} bytes`);
        await this.verifyAndStore(sha256, buffer.buffer);
        this.send({type: 'blob-stored', transferId, sha256, size});
      } catch (e) {
        this.send(failure(transferId, sha256, e));
      }
      channel.close();
    };
  }
}
