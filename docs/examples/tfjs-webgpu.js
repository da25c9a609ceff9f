// TF.js on WebGPU in a job: each map task multiplies two matrices with TF.js's WebGPU backend (as
// the appliance ships it, static/vendor/tfjs) and emits the product under its rank.
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 2;
execution.gpu = true;
// Features may also be given as {name: true}.
execution.gpuRequirements = {features: {'float32-filterable': true}, limits: {maxBufferSize: 64 * 1024 * 1024}};
execution.scripts = ['/static/vendor/tfjs/tf.min.js', '/static/vendor/tfjs/tf-backend-webgpu.min.js'];

execution.setInputFn(async function input() {
  return [2, 3];  // one scale factor per map task
});

execution.addStage(new MapStage(async function map(x) {
  if (!await tf.setBackend('webgpu')) throw new Error('the WebGPU backend did not start');
  for (const [, scale] of x) {
    // a (4x8): scale * [[0, 1, ..., 7], [8, ..., 15], ...]; b (8x3): rows [1, 0, 1] and [0, 1, 1] in turn,
    // so each row of the product holds the sums of a's even columns, odd columns and all columns.
    const a = tf.range(0, 32).reshape([4, 8]).mul(scale);
    const b = tf.tensor2d(Array.from({length: 8}, (_, row) => [row % 2 === 0 ? 1 : 0, row % 2, 1]));
    const product = await tf.matMul(a, b).array();
    context.emit(context.getRank(), {backend: tf.getBackend(), scale, product});
    tf.dispose([a, b]);
  }
  await context.onComplete();
}));

execution.start(jobRunner);
