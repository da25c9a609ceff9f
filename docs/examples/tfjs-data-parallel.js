// Data-parallel training of a small TensorFlow.js model: every rank holds the same model, computes
// the gradients of the loss on its shard of the data, and averages them with the other ranks
// (context.allReduce) before each step. Every rank then applies the same mean gradients with the
// same optimizer, so the models stay identical, as if one browser had trained on all the data.
//
// The model: a dense layer of 16 ReLU units and a sigmoid output, which learns whether a point of
// the square [-1, 1]² lies inside a circle (half the points do). Rank 0 reports the loss and the
// accuracy on 1000 points no rank trained on; every rank reports a checksum of its weights, the
// same on all of them.
//
// TensorFlow.js 4.22.0 comes with the appliance, at /static/vendor/tfjs/tf.min.js (a path: a job
// script on the appliance itself needs no origin).
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 4;
execution.scripts = ['/static/vendor/tfjs/tf.min.js'];

execution.setInputFn(async function input() {
  // One record per rank, naming the data set; each rank makes all of it and trains on its shard.
  // (With real data, the record would be the URL of a file every rank reads.)
  return Array.from({length: context.getWorkerCount()}, () => ({seed: 7, train: 4000, test: 1000}));
});

execution.addStage(new MapStage(async function map(records) {
  const STEPS = 100, LEARNING_RATE = 0.05;
  await tf.setBackend('cpu');  // workers have no GPU, and a Web Worker may have no WebGL

  const [[, {seed, train, test}]] = records;
  let a = seed;
  const random = () => {  // mulberry32: a small seeded generator, floats in [0, 1)
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t = (t + Math.imul(t ^ (t >>> 7), t | 61)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const points = Array.from({length: train + test}, () => [2 * random() - 1, 2 * random() - 1]);
  const inside = ([x, y]) => (x * x + y * y < 2 / Math.PI ? 1 : 0);  // the circle of area 2
  const tensors = rows => [tf.tensor2d(rows), tf.tensor2d(rows.map(p => [inside(p)]))];
  const [xs, ys] = tensors(context.shard(points.slice(0, train)));
  const [testXs, testYs] = tensors(points.slice(train));

  // Seeded initial weights: every rank starts from the same model.
  const model = tf.sequential({layers: [
    tf.layers.dense({inputShape: [2], units: 16, activation: 'relu',
                     kernelInitializer: tf.initializers.glorotUniform({seed: 1})}),
    tf.layers.dense({units: 1, activation: 'sigmoid', kernelInitializer: tf.initializers.glorotUniform({seed: 2})}),
  ]});
  const variables = model.trainableWeights.map(weight => weight.read());
  const flatten = tensors => {
    const flat = new Float32Array(tensors.reduce((n, t) => n + t.size, 0));
    let offset = 0;
    for (const t of tensors) { flat.set(t.dataSync(), offset); offset += t.size; }
    return flat;
  };
  const unflatten = flat => {
    let offset = 0;
    return variables.map(v => tf.tensor(flat.subarray(offset, offset += v.size), v.shape));
  };

  const optimizer = tf.train.adam(LEARNING_RATE);
  const loss = (x, y) => tf.losses.logLoss(y, model.predict(x));
  for (let step = 0; step < STEPS; step++) {
    const {value, grads} = optimizer.computeGradients(() => loss(xs, ys), variables);
    const mean = await context.allReduce(flatten(variables.map(v => grads[v.name])), 'mean', 'grads-' + step);
    tf.dispose([value, grads]);
    const averaged = unflatten(mean);
    optimizer.applyGradients(Object.fromEntries(variables.map((v, i) => [v.name, averaged[i]])));
    tf.dispose(averaged);
  }

  if (context.getRank() === 0) {
    const predicted = model.predict(testXs);
    context.emit('test loss', (await tf.losses.logLoss(testYs, predicted).data())[0]);
    context.emit('test accuracy', (await tf.metrics.binaryAccuracy(testYs, predicted).mean().data())[0]);
  }
  context.emit('weights checksum', flatten(variables).reduce((sum, w) => sum + w, 0));
  await context.onComplete();
}));

execution.start(jobRunner);
