// PMRFS datanode storage: blobs kept in IndexedDB, one database per tab (worker id),
// so several tabs of one browser never share or corrupt each other's store.

const STORE = 'blobs';

function request(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

export class BlobStore {
  constructor(workerId) {
    this.name = `peermr-blobs-${workerId}`;
    this.db = null;
    this.checking = null;  // when the store's unanswered check began
  }

  // How long a tiny read has gone unanswered, in ms (0 when the last one came back): IndexedDB lives
  // in the browser process, so while that process hangs this page still runs and answers pings, but
  // its store never answers (nor do its task's fetches and output writes). The pong says it.
  waitMs() {
    if (this.checking !== null) return Math.round(performance.now() - this.checking);
    const began = this.checking = performance.now();
    this.transaction('readonly', s => request(s.count()))
      .catch(() => {})
      .finally(() => { if (this.checking === began) this.checking = null; });
    return 0;
  }

  async open() {
    const req = indexedDB.open(this.name, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(STORE);
    this.db = await request(req);
    return this;
  }

  async transaction(mode, fn) {
    const tx = this.db.transaction(STORE, mode);
    const result = await fn(tx.objectStore(STORE));
    await new Promise((resolve, reject) => {
      tx.oncomplete = resolve;
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error);
    });
    return result;
  }

  // Stored as Blobs: the browser keeps large ones as files instead of serialising them into its database.
  put(sha256, bytes) { return this.transaction('readwrite', s => request(s.put(new Blob([bytes]), sha256))); }

  async get(sha256) {
    const value = await this.blob(sha256);
    return value instanceof Blob ? value.arrayBuffer() : value;
  }

  // The stored Blob (an ArrayBuffer if an older page stored one), undefined if there is none: whoever
  // reads its bytes reads them when it needs them, on its own thread (a sandbox's task inputs).
  blob(sha256) { return this.transaction('readonly', s => request(s.get(sha256))); }

  delete(sha256) { return this.transaction('readwrite', s => request(s.delete(sha256))); }
  keys() { return this.transaction('readonly', s => request(s.getAllKeys())); }

  async usage() {
    const values = await this.transaction('readonly', s => request(s.getAll()));
    return {blobs: values.length, bytes: values.reduce((n, v) => n + (v.size ?? v.byteLength), 0)};
  }

  async clear() {
    this.db.close();
    await request(indexedDB.deleteDatabase(this.name));
    return this.open();
  }
}
