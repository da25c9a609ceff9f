// The job sandbox's frame: a hidden iframe of the worker page loaded without credentials (a
// credentialless iframe, or an opaque origin; static/worker/sandboxes.js), served under the
// Content-Security-Policy its URL names (jobs/sandbox_routes.py). It starts each sandbox Web Worker
// from the script text the page fetched, as a blob: URL of this frame, so the Web Worker takes this
// frame's credential-free context and policy: no request job code makes carries the employee's
// cookies, and no storage of the worker page is in its reach (docs/architecture.md, "The sandbox").
//   page -> frame   window message {type: 'connect'} with the control port, once
//   control port:   page -> frame  {type: 'spawn', id, url, text, scripts} with the sandbox's port,
//                                  {type: 'terminate', id}
//                   frame -> page  {type: 'connected'} (once), {type: 'error', id, message, filename, lineno, colno}
// The frame hands each Web Worker its port ({type: 'port'}), over which the page and the sandbox
// talk directly. It listens to nothing the Web Workers send: job code cannot reach the page here.
(function () {
  'use strict';

  const sandboxes = new Map();  // id -> {worker, source (its blob: URL)}
  let control = null;

  // What runs first in a sandbox, on the script's first line: importScripts of the appliance's
  // scripts the page fetched (`scripts`, absolute URL -> text) evaluates their text (a credentialless
  // frame has no HTTP cache to find them in), and resolves the other URLs against the sandbox
  // script's. peermrPreload adds texts (a warm sandbox taking on a run's script); the runtime takes it.
  const IMPORTS = `(function (load, texts, base) {
    self.importScripts = function importScripts(...urls) {
      for (const url of urls) {
        const absolute = new URL(url, base).href;
        if (Object.hasOwn(texts, absolute)) (0, eval)(texts[absolute] + '\\n//# sourceURL=' + absolute);
        else load(absolute);
      }
    };
    self.peermrPreload = more => Object.assign(texts, more);
  })(self.importScripts.bind(self), self.peermrTexts, self.peermrScriptURL); delete self.peermrTexts;`.replace(/\n\s*/g, ' ');

  // JSON as a script literal: JSON.stringify leaves U+2028 and U+2029 as they are, which would end
  // lines in the script's source and move every stack frame's line after them.
  const literal = value => JSON.stringify(value).replace(/\u2028/g, '\\u2028').replace(/\u2029/g, '\\u2029');

  function spawn({id, url, text, scripts}, port) {
    // The first line names the script's URL on the appliance (the runtime resolves against it) and
    // sets up its imports; the last makes stack frames name it too, where the appliance maps them back
    // to the job script. Neither moves a line of the script.
    const first = `self.peermrScriptURL = ${literal(url)}; self.peermrTexts = ${literal(scripts || {})}; ${IMPORTS}`;
    const source = URL.createObjectURL(new Blob([`${first} ${text}\n//# sourceURL=${url}\n`], {type: 'text/javascript'}));
    const worker = new Worker(source);
    worker.onerror = event => {
      event.preventDefault();
      const filename = String(event.filename || '').startsWith('blob:') ? url : event.filename;
      control.postMessage({type: 'error', id, message: event.message, filename, lineno: event.lineno, colno: event.colno});
    };
    worker.postMessage({type: 'port'}, [port]);
    sandboxes.set(id, {worker, source});
  }

  function terminate(id) {
    const sandbox = sandboxes.get(id);
    if (!sandbox) return;
    sandboxes.delete(id);
    sandbox.worker.terminate();
    URL.revokeObjectURL(sandbox.source);
  }

  addEventListener('message', event => {
    if (control || event.source !== parent || event.data?.type !== 'connect' || event.ports.length !== 1) return;
    control = event.ports[0];
    control.onmessage = ({data, ports}) => {
      if (data?.type === 'spawn' && typeof data.id === 'number' && typeof data.text === 'string' && ports.length === 1) {
        spawn(data, ports[0]);
      } else if (data?.type === 'terminate') {
        terminate(data.id);
      }
    };
    control.postMessage({type: 'connected'});
  });
})();
