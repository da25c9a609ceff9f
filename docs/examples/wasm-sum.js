// A WebAssembly job: each map task adds up its numbers with an exported `add` function of a
// small WebAssembly module, and the reduce totals the partial sums.
//
// It runs as it is: add.wasm, `(func (export "add") (param i32 i32) (result i32))`, comes with the
// appliance (/static/examples/). A binary of your own may come from an origin an admin allowed
// (Admin -> Settings, or PEERMR_FETCH_ORIGINS) that answers cross-origin GETs (CORS). The input
// function returns the numbers to add.
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 4;
execution.wasmBinaries = [{name: 'add', url: '/static/examples/add.wasm'}];

execution.setInputFn(async function input() {
  return Array.from({length: 1000}, (_, i) => i + 1);
});

execution.addStage(new MapStage(async function map(x) {
  const {instance} = await WebAssembly.instantiateStreaming(fetch(context.getWebAssemblyURL('add')));
  let sum = 0;
  for (const [, n] of x) sum = instance.exports.add(sum, n);
  context.emit('sum', sum);
  await context.onComplete();
}));

execution.addStage(new ReduceStage(async function reduce(keyToValues) {
  for (const key in keyToValues) context.emit(key, keyToValues[key].reduce((a, b) => a + b, 0));
  await context.onComplete();
}));

execution.start(jobRunner);
