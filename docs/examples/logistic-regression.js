// Logistic regression trained with the parameter server: each rank runs mini-batch gradient
// descent on its own rows and adds its share of every step to the shared weights 'w' with
// context.ps.update; context.ps.clock() keeps the ranks at most `staleness` steps apart.
//
// The input function makes the data: 8000 rows of 10 features, two Gaussian classes that
// overlap (no line gets more than about 90% right). logreg_data.py in this folder generates the
// same rows in Python, to compare with scikit-learn. To train on your own data, return your rows
// as {x: [numbers], y: 0 or 1}, or URLs to fetch them from in the map.
//
// The output: 'accuracy' (on the training rows) and 'weights' (one per feature, the bias last).
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 4;
// A rank may run up to 2 steps ahead of the slowest one, reading weights that lack the slower
// ranks' latest updates; 0 is bulk-synchronous (each step waits for every rank's previous one).
execution.staleness = 2;

execution.setInputFn(async function input() {
  const ROWS = 8000, DIMS = 10, SEED = 42;
  let a = SEED;
  const random = () => {  // mulberry32: a small seeded generator, floats in [0, 1)
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t = (t + Math.imul(t ^ (t >>> 7), t | 61)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const normal = () => Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random());
  const rows = [];
  for (let i = 0; i < ROWS; i++) {
    const y = random() < 0.5 ? 1 : 0;
    const x = [];
    for (let j = 0; j < DIMS; j++) x.push(normal() + (y ? 0.4 : -0.4));
    rows.push({x, y});
  }
  return rows;
});

execution.addStage(new MapStage(async function map(records) {
  const STEPS = 50, BATCH = 250, LEARNING_RATE = 1.0;
  const rows = records.map(([, row]) => row);
  const dims = rows[0].x.length;
  const workers = context.getWorkerCount();
  const score = (w, x) => x.reduce((z, xj, j) => z + w[j] * xj, w[dims]);

  // Rank 0 starts the weights at zero; the others wait for it (reading a missing key is an error).
  if (context.getRank() === 0) await context.ps.write('w', new Float32Array(dims + 1));
  await context.barrier('init');
  let w = await context.ps.read('w');

  for (let step = 0; step < STEPS; step++) {
    const grad = new Float64Array(dims + 1);
    for (let k = 0; k < BATCH; k++) {
      const {x, y} = rows[(step * BATCH + k) % rows.length];
      const error = 1 / (1 + Math.exp(-score(w, x))) - y;
      for (let j = 0; j < dims; j++) grad[j] += error * x[j];
      grad[dims] += error;
    }
    // This rank's share of the step: the ranks' updates add up to -rate * (mean gradient).
    await context.ps.update('w', Float32Array.from(grad, g => -LEARNING_RATE * g / (BATCH * workers)));
    await context.ps.clock();  // waits while this rank is more than `staleness` steps ahead
    w = await context.ps.read('w');
  }

  // Every rank's updates are in once all are here: all ranks score with the same final weights.
  await context.barrier('trained');
  w = await context.ps.read('w');
  const correct = rows.filter(({x, y}) => (score(w, x) > 0 ? 1 : 0) === y).length;
  context.emit('counts', {correct, total: rows.length});
  if (context.getRank() === 0) context.emit('weights', Array.from(w));
  await context.onComplete();
}));

execution.addStage(new ReduceStage(async function reduce(keyToValues) {
  for (const key in keyToValues) {
    const values = keyToValues[key];
    if (key === 'counts') {
      const correct = values.reduce((sum, v) => sum + v.correct, 0);
      const total = values.reduce((sum, v) => sum + v.total, 0);
      context.emit('accuracy', correct / total);
    } else {
      context.emit(key, values[0]);  // 'weights', emitted by rank 0 only
    }
  }
  await context.onComplete();
}));

execution.start(jobRunner);
