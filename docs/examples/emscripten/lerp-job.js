// An Emscripten (embind) module in a job: each map task instantiates LerpModule, built from
// lerp.cpp in this folder, and interpolates its records; the output maps each input's index to
// lerp(from, to, t).
//
// It runs as it is: the build of lerp.cpp (lerp.js and lerp.wasm, see README.md) comes with the
// appliance (/static/examples/emscripten/). A build of your own may come from an origin an admin
// allowed (Admin -> Settings, or PEERMR_FETCH_ORIGINS) that answers cross-origin GETs (CORS).
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 2;

// The generated loader defines the global LerpModule; it fetches the binary itself.
execution.scripts = ['/static/examples/emscripten/lerp.js'];
// Registered binaries are named after the last segment of their URL: context.getWebAssemblyURL('lerp.wasm').
execution.wasmBinaries = ['/static/examples/emscripten/lerp.wasm'];

execution.setInputFn(async function input() {
  const points = [];
  for (let i = 0; i <= 20; i++) points.push([-4, 12, i / 20]);  // [from, to, t]
  return points;
});

execution.addStage(new MapStage(async function map(x) {
  const lerpModule = await LerpModule({
    // Where the loader finds lerp.wasm: the URL the appliance registered for it.
    locateFile: file => (file.endsWith('.wasm') ? context.getWebAssemblyURL('lerp.wasm') : file),
  });
  for await (const [index, [from, to, t]] of x) context.emit(index, lerpModule.lerp(from, to, t));
  await context.onComplete();
}));

execution.start(jobRunner);
