// The WebGPU adapter as job code sees it: the worker page (runtime.js) runs this in a dedicated Web
// Worker, where tasks run, since a browser may give WebGPU to pages and not to their workers. Posts
// {info, features, limits, fallback}, or null when there is no adapter.
(async () => {
  let result = null;
  try {
    const adapter = self.navigator.gpu ? await navigator.gpu.requestAdapter() : null;
    if (adapter) {
      // adapter.info since Chrome 127; requestAdapterInfo() before it.
      const info = adapter.info || (adapter.requestAdapterInfo ? await adapter.requestAdapterInfo() : {});
      const described = {};
      for (const name of ['vendor', 'architecture', 'device', 'description']) if (info[name]) described[name] = String(info[name]);
      const limits = {};
      for (const name in adapter.limits) limits[name] = adapter.limits[name];
      result = {info: described, features: [...adapter.features], limits, fallback: Boolean(info.isFallbackAdapter)};
    }
  } catch {
    result = null;
  }
  self.postMessage(result);
})();
