// PMRFS datanode: this tab stores blobs in IndexedDB and moves them when the appliance asks.
// Browser <-> appliance traffic uses HTTP (with a per-transfer grant in the URL the appliance
// gives); browser <-> browser traffic uses a WebRTC data channel, signaled through the appliance
// and only for transfers it arranged. Every blob is verified by SHA-256 where it lands.
import {sha256Hex} from './sha256.js';

const CHUNK = 64 * 1024;          // data channel message size every browser accepts
const HIGH_WATER = 4 * 1024 * 1024;

export class DataNode {
  constructor({getStore, send, iceServers, onChange}) {
    this.getStore = getStore;       // the tab's BlobStore (it changes when the data is cleared)
    this.send = send;
    this.iceServers = iceServers;   // function returning the ICE servers of the welcome
    this.onChange = onChange;
    this.outgoing = new Map();      // peer worker id -> the connection this tab opened to it
    this.incoming = new Map();      // peer worker id -> the connection it opened to this tab
    this.signaling = new Map();     // transferId -> the connection its signals are for
    this.expected = new Map();      // transferId -> {sha256, size, from} of a blob to receive
    this.early = new Map();         // transferId -> candidates that came before the offer
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

  async signal({transferId, data}) {
    let pc = this.signaling.get(transferId);
    if (!pc && data.sdp?.type === 'offer') {
      // A new connection from a sender (the first blob, or its previous connection died).
      const expected = this.expected.get(transferId);
      if (!expected) return;
      pc = this.connect(transferId);
      pc.ondatachannel = ({channel}) => this.receiveChannel(channel);
      this.incoming.get(expected.from)?.close();
      this.incoming.set(expected.from, pc);
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

  async sendToPeer({transferId, sha256, to}) {
    const bytes = await this.getStore().get(sha256);
    if (!bytes) {
      this.send({type: 'blob-failed', transferId, sha256, reason: 'missing'});
      return;
    }
    let pc = this.outgoing.get(to);
    const fresh = !this.usable(pc);
    if (fresh) {
      pc = this.connect(transferId);
      this.outgoing.set(to, pc);
    }
    const channel = pc.createDataChannel(`blob:${transferId}`, {ordered: true});
    channel.binaryType = 'arraybuffer';
    channel.bufferedAmountLowThreshold = HIGH_WATER / 2;
    channel.onopen = async () => {
      for (let offset = 0; offset < bytes.byteLength; offset += CHUNK) {
        if (channel.bufferedAmount > HIGH_WATER) {
          await new Promise(resolve => { channel.onbufferedamountlow = resolve; });
        }
        channel.send(bytes.slice(offset, offset + CHUNK));
      }
      channel.send('end');
      this.send({type: 'transfer-bytes', transferId, bytes: bytes.byteLength});
    };
    if (fresh) {
      await pc.setLocalDescription(await pc.createOffer());
      this.send({type: 'signal', transferId, data: {sdp: pc.localDescription.toJSON()}});
    }
  }

  receiveFromPeer({transferId, sha256, size, from}) {
    // The data arrives on a channel labelled with the transfer, on a new or an existing connection.
    this.expected.set(transferId, {sha256, size, from});
    setTimeout(() => { this.expected.delete(transferId); this.signaling.delete(transferId); }, 120_000);
  }

  receiveChannel(channel) {
    const transferId = channel.label.replace(/^blob:/, '');
    const expected = this.expected.get(transferId);
    if (!expected) { channel.close(); return; }  // nothing was arranged under this name
    const {sha256, size} = expected;
    channel.binaryType = 'arraybuffer';
    const buffer = new Uint8Array(size);
    let received = 0;
    channel.onmessage = async ({data}) => {
      if (typeof data !== 'string') {
        if (received + data.byteLength > size) { channel.close(); return; }  // more than announced: refuse
        buffer.set(new Uint8Array(data), received);
        received += data.byteLength;
        return;
      }
      this.expected.delete(transferId);
      this.send({type: 'transfer-bytes', transferId, bytes: received});
      try {
        if (received !== size) throw new Error(`short transfer: ${received} of ${size} bytes`);
        await this.verifyAndStore(sha256, buffer.buffer);
        this.send({type: 'blob-stored', transferId, sha256, size});
      } catch (e) {
        this.send({type: 'blob-failed', transferId, sha256, reason: String(e.message || e).slice(0, 200)});
      }
      channel.close();
    };
  }
}
