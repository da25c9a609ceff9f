// Job sandboxes of the worker page (docs/architecture.md, "The sandbox"). Job code is hostile, and
// the page is same-origin with the dashboard: a Web Worker started from a URL of the appliance
// would send the employee's cookies with every request job code made. So each sandbox Web Worker
// runs inside a hidden frame loaded without credentials (static/worker/sandbox-frame.js): a
// credentialless iframe (no cookies, no HTTP authentication, storage of its own that ends with the
// page), or, in a browser without those, one with an opaque origin (where Web Workers have no
// WebGPU: this page then reports none). One frame per sandbox policy, which its URL names and the
// sandbox script's x-peermr-frame header gives; its Content-Security-Policy is the Web Workers'. The
// page fetches the sandbox script (with its own cookie, which job code never sees) and hands the
// frame its text.
//
// start(script) gives what tasks.js uses of a Web Worker: postMessage, terminate, onmessage,
// onerror and onmessageerror, plus load(script) for a warm sandbox taking on a run's script. Its
// messages go over a MessagePort straight to the sandbox; the frame only starts and stops them.
const FRAME_TIMEOUT_MS = 30_000;  // a frame that has not answered by then failed to load
const FRAME_LINGER_MS = 60_000;   // a frame without sandboxes is kept this long for the run's next task
export const CREDENTIALLESS = 'credentialless' in HTMLIFrameElement.prototype;

// The appliance's scripts a sandbox imports (x-peermr-preload: the runtime, the job's scripts of the
// appliance), by absolute URL -> their text, or null where one could not be fetched (the sandbox then
// imports it itself). A credentialless frame has no HTTP cache, so without this each sandbox would
// download them again (TF.js is 1 MB); the page's fetch finds them in its cache. Kept for the page's
// life: their URLs are versioned, or a run's.
const texts = new Map();
async function appliancesScripts(paths) {
  const scripts = {};
  await Promise.all(paths.map(async path => {
    const url = new URL(path, location.href).href;
    if (!texts.has(url)) {
      texts.set(url, fetch(url).then(response => (response.ok ? response.text() : null)).catch(() => null));
    }
    const text = await texts.get(url);
    if (text === null) texts.delete(url);
    else scripts[url] = text;
  }));
  return scripts;
}

// The sandbox script: {url (absolute), text, frame (the frame's URL), scripts (appliancesScripts)}, or
// an Error that says why not (the run ended, the network).
async function sandboxScript(script) {
  const failed = why => new Error(`the sandbox script ${script} could not be loaded: ${why}`);
  try {
    const response = await fetch(script);
    if (!response.ok) return failed(`HTTP ${response.status}`);
    const frame = response.headers.get('x-peermr-frame');
    if (!frame?.startsWith('/worker/sandbox.html')) return failed('it names no sandbox frame');
    const preload = (response.headers.get('x-peermr-preload') || '').split(' ').filter(Boolean);
    const [text, scripts] = await Promise.all([response.text(), appliancesScripts(preload)]);
    return {url: new URL(script, location.href).href, text, frame, scripts};
  } catch (e) {
    return failed(e.message || e);
  }
}

class Frame {
  constructor(url, onIdle) {
    this.url = url;
    this.onIdle = onIdle;
    this.linger = null;
    this.iframe = document.createElement('iframe');
    if (CREDENTIALLESS) this.iframe.credentialless = true;
    else this.iframe.sandbox = 'allow-scripts';
    this.iframe.hidden = true;
    this.iframe.src = url;
    const channel = new MessageChannel();
    this.control = channel.port1;
    this.errorHandlers = new Map();  // id of a sandbox not terminated -> its onerror, for the frame's reports
    // Once the frame's script has run (its load event), it gets the control port and answers on it.
    this.connected = new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the sandbox frame ${url} did not load`)), FRAME_TIMEOUT_MS);
      this.control.onmessage = ({data}) => {
        if (data?.type === 'connected') {
          clearTimeout(timer);
          resolve();
        } else if (data?.type === 'error') {
          this.errorHandlers.get(data.id)?.(data);
        }
      };
      this.iframe.addEventListener('load', () => {
        this.iframe.contentWindow.postMessage({type: 'connect'}, '*', [channel.port2]);
      }, {once: true});
    });
    this.connected.catch(() => {});
    document.body.append(this.iframe);
  }

  // sandbox: {id, url, text, scripts}, the spawn message's fields.
  spawn(sandbox, port, onError) {
    clearTimeout(this.linger);
    this.errorHandlers.set(sandbox.id, onError);
    this.connected.then(
      () => { if (this.errorHandlers.has(sandbox.id)) this.control.postMessage({type: 'spawn', ...sandbox}, [port]); },
      e => onError({message: e.message}));
  }

  terminate(id) {
    if (!this.errorHandlers.delete(id)) return;
    this.control.postMessage({type: 'terminate', id});
    if (this.errorHandlers.size === 0) this.linger = setTimeout(() => this.onIdle(this), FRAME_LINGER_MS);
  }

  remove() {
    this.control.close();
    this.iframe.remove();
  }
}

// One sandbox Web Worker, as the page sees it.
class Sandbox {
  constructor(sandboxes, id) {
    this.sandboxes = sandboxes;
    this.id = id;
    this.frame = null;
    this.ended = false;
    this.onmessage = null;
    this.onerror = null;
    this.onmessageerror = null;
    this.loading = null;  // a load under way (its script text is fetched first)
    const channel = new MessageChannel();
    this.port = channel.port1;
    this.remote = channel.port2;
    this.port.onmessage = event => this.onmessage?.(event);
    this.port.onmessageerror = event => this.onmessageerror?.(event);
  }

  // After a load, messages wait for it: the run's script is defined before its task runs.
  postMessage(message, transfer = []) {
    const send = () => { if (!this.ended) this.port.postMessage(message, transfer); };
    if (this.loading) this.loading.then(send);
    else send();
  }

  // The Web Worker's error, as a Web Worker's onerror would see it.
  error({message = '', filename = '', lineno = 0, colno = 0}) {
    if (!this.ended) this.onerror?.({message, filename, lineno, colno, preventDefault() {}});
  }

  async start(script) {
    const loaded = await sandboxScript(script);
    if (this.ended) return;
    if (loaded instanceof Error) return this.error({message: loaded.message});
    this.frame = this.sandboxes.frame(loaded.frame);
    const {url, text, scripts} = loaded;
    this.frame.spawn({id: this.id, url, text, scripts}, this.remote, data => this.error(data));
  }

  // A warm sandbox takes on the run's script (the runtime evaluates it; its policy is the run's).
  load(script) {
    const loading = this.loading || Promise.resolve();
    this.loading = loading.then(() => sandboxScript(script)).then(loaded => {
      if (loaded instanceof Error) this.error({message: loaded.message});
      else if (!this.ended) this.port.postMessage({type: 'load', url: loaded.url, text: loaded.text, scripts: loaded.scripts});
    });
  }

  terminate() {
    if (this.ended) return;
    this.ended = true;
    this.frame?.terminate(this.id);
    this.port.close();
  }
}

export class Sandboxes {
  constructor() {
    this.frames = new Map();  // frame URL -> Frame
    this.nextId = 1;
  }

  // A new sandbox Web Worker started from `script` (a sandbox script URL of the appliance).
  start(script) {
    const sandbox = new Sandbox(this, this.nextId++);
    sandbox.start(script);
    return sandbox;
  }

  // The frame of a policy, by its URL.
  frame(url) {
    let frame = this.frames.get(url);
    if (!frame) {
      frame = new Frame(url, idle => {
        if (this.frames.get(url) !== idle || idle.errorHandlers.size) return;
        this.frames.delete(url);
        idle.remove();
      });
      this.frames.set(url, frame);
    }
    return frame;
  }
}
