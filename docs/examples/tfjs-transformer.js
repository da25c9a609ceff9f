// A small decoder-only Transformer language model trained data-parallel across four browsers:
// with the appliance's add-on, `trainOnBatch(inputs, targets, context)` averages every rank's
// gradients at each step, so every rank holds the same model. Scaled for CPUs: raise the sizes
// below for a larger model (with a GPU, set execution.gpu = true and use the 'webgpu' backend).
const execution = new JobExecution('pmrfs');
execution.workerCount = 4;
execution.scripts = ['/static/vendor/tfjs/tf.min.js', '/static/jobs/tf-data-parallel.js'];

// Runs in one browser: a corpus as word ids (made up here; fetch a real one instead), one equal
// part per rank.
execution.setInputFn(async function inputs() {
  const parts = [
    ['the cat', 'a dog', 'my friend', 'the bird', 'our teacher'],
    ['sees', 'likes', 'follows', 'hears', 'finds'],
    ['the ball', 'a tree', 'the river', 'some bread', 'the moon'],
  ];
  let seed = 7;
  const pick = words => words[(seed = seed * 16807 % 2147483647) % words.length];
  const words = Array.from({length: 400}, () => `${parts.map(pick).join(' ')} .`).join(' ').split(' ');
  const vocab = {};
  for (const word of words) vocab[word] ??= Object.keys(vocab).length;
  const ids = words.map(word => vocab[word]);
  const ranks = context.getWorkerCount(), share = Math.floor(ids.length / ranks);
  return Array.from({length: ranks}, (_, i) => ({vocab, data: ids.slice(i * share, (i + 1) * share)}));
});

const stage = new MapStage(async function map(mapInputs) {
  const contextSize = 16, numBlocks = 2, numHeads = 4, modelDims = 32;
  const batchSize = 4, iterations = 32, learningRate = 3e-3;
  await tf.setBackend('cpu');  // workers without a GPU: faster here than WebGL drawn in software

  // Multi-head causal self-attention made of dense layers (the add-on trains their weights as
  // this layer's, as Keras does).
  class CausalSelfAttention extends tf.layers.Layer {
    static className = 'CausalSelfAttention';
    constructor(numHeads, modelDims) {
      super({});
      this.project = [0, 1, 2, 3].map(() => tf.layers.dense({units: modelDims, useBias: false}));
      this.numHeads = numHeads;
    }
    build(inputShape) {
      for (const dense of this.project) dense.build(inputShape);
    }
    call(inputs) {
      return tf.tidy(() => {
        const [batch, length, dims] = inputs.shape;
        const heads = t => t.reshape([batch, length, this.numHeads, -1]).transpose([0, 2, 1, 3]);
        const [query, key, value] = this.project.slice(0, 3).map(dense => heads(dense.apply(inputs)));
        // -1e9 on the scores of later positions: each position sees itself and earlier ones.
        const positions = tf.range(0, length);
        const later = tf.greater(positions.reshape([1, -1]), positions.reshape([-1, 1])).cast('float32').mul(-1e9);
        const scale = 1 / Math.sqrt(dims / this.numHeads);
        const scores = tf.softmax(query.matMul(key, false, true).mul(scale).add(later));
        const mixed = scores.matMul(value).transpose([0, 2, 1, 3]).reshape([batch, length, dims]);
        return this.project[3].apply(mixed);
      });
    }
  }

  // x + attention(norm(x)), then that + mlp(norm(that)).
  class TransformerBlock extends tf.layers.Layer {
    static className = 'TransformerBlock';
    constructor(numHeads, modelDims) {
      super({});
      const norm = () => tf.layers.layerNormalization({epsilon: 1e-5, inputShape: [contextSize, modelDims]});
      this.attention = tf.sequential({layers: [norm(), new CausalSelfAttention(numHeads, modelDims)]});
      this.mlp = tf.sequential({layers: [norm(), tf.layers.dense({units: 4 * modelDims, activation: 'relu'}),
        tf.layers.dense({units: modelDims})]});
    }
    call(inputs) {
      return tf.tidy(() => {
        const attended = tf.add(inputs, this.attention.apply(inputs));
        return tf.add(attended, this.mlp.apply(attended));
      });
    }
  }

  // Token ids in, scores (logits) of the next token out.
  const [[, {vocab, data}]] = mapInputs;
  const vocabSize = Object.keys(vocab).length;
  const tokens = tf.input({shape: [contextSize]});
  let x = tf.layers.embedding({inputDim: vocabSize, outputDim: modelDims}).apply(tokens);
  for (let i = 0; i < numBlocks; i++) x = new TransformerBlock(numHeads, modelDims).apply(x);
  const transformer = tf.model({inputs: tokens, outputs: tf.layers.dense({units: vocabSize}).apply(x)});
  transformer.compile({optimizer: tf.train.adam(learningRate), loss: 'sparseCategoricalCrossentropy'});

  // batchSize windows from offset on: contextSize tokens, and the same window one token later.
  function batchAt(offset) {
    const rows = Array.from({length: batchSize}, (_, i) => data.slice(offset + i, offset + i + contextSize + 1));
    return tf.tidy(() => {
      const windows = tf.tensor2d(rows);
      return [windows.slice([0, 0], [batchSize, contextSize]), windows.slice([0, 1], [batchSize, contextSize])];
    });
  }

  const losses = [];
  const starts = data.length - contextSize - batchSize;  // offsets whose windows all have targets
  for (let step = 0; step < iterations; step++) {
    const [inputs, targets] = batchAt(step * batchSize % starts);
    losses.push(await transformer.trainOnBatch(inputs, targets, context));
    tf.dispose([inputs, targets]);
    if (step % 8 === 0) context.log(`step ${step}: loss ${losses[step].toFixed(4)}`);
  }

  // Raises on every rank if any rank's weights, or its optimizer's state, differ from the others'.
  const weights = await context.assertReplicaIntegrity(transformer.getWeights());
  await context.assertReplicaIntegrity(await transformer.optimizer.getWeights());
  const parameters = transformer.countParams();
  context.emit(`rank ${context.getRank()}`, {backend: tf.getBackend(), parameters, losses, weights});
  await context.onComplete();
});
stage.timeout = 30 * 60;
execution.addStage(stage);
execution.start(jobRunner);
