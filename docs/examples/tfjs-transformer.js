// A small decoder-only Transformer language model, trained data-parallel across the job's browsers
// with TensorFlow.js and the appliance's add-on: `model.trainOnBatch(inputs, targets, context)`
// averages the gradients of every rank at each step, so every rank holds the same model.
//
// Each rank trains on its own part of a word-level corpus (the next word after each window of
// `contextSize` words) and reports the loss of each step on its batches and a SHA-256 of its
// weights, which is the same on every rank.
//
// Scaled to run in a few minutes on CPUs: the same code trains a larger model when contextSize,
// numBlocks, numHeads, modelDims and iterations grow (with a GPU, set execution.gpu = true and
// tf.setBackend('webgpu')).
const execution = new JobExecution('pmrfs');
execution.workerCount = 4;
// TensorFlow.js and the data-parallel add-on, both served by the appliance (the add-on loads
// /static/vendor/tfjs/tf.min.js itself when it is not listed first).
execution.scripts = ['/static/vendor/tfjs/tf.min.js', '/static/vendor/tfjs/tf-data-parallel.js'];

// Runs in one browser: the corpus as word ids, one equal part per rank.
execution.setInputFn(async function inputs() {
  // With real data: const text = await (await fetch('https://.../corpus.txt')).text();
  const subjects = ['the cat', 'a dog', 'my friend', 'the bird', 'our teacher'];
  const verbs = ['sees', 'likes', 'follows', 'hears', 'finds'];
  const objects = ['the ball', 'a tree', 'the river', 'some bread', 'the moon'];
  let seed = 7;
  const pick = words => words[(seed = seed * 16807 % 2147483647) % words.length];  // a seeded choice
  const sentences = [];
  for (let i = 0; i < 400; i++) sentences.push(`${pick(subjects)} ${pick(verbs)} ${pick(objects)} .`);
  const words = sentences.join(' ').split(' ');
  const vocab = {};
  for (const word of words) if (!(word in vocab)) vocab[word] = Object.keys(vocab).length;
  const ids = words.map(word => vocab[word]);

  const workerCount = context.getWorkerCount();
  const perWorker = Math.floor(ids.length / workerCount);
  return Array.from({length: workerCount}, (_, i) => ({vocab, data: ids.slice(i * perWorker, (i + 1) * perWorker)}));
});

const stage = new MapStage(async function map(mapInputs) {
  if (mapInputs.length !== 1) throw new Error(`expected one input record, got ${mapInputs.length}`);

  const contextSize = 16;   // tokens the model sees at once
  const numBlocks = 2;      // Transformer blocks
  const numHeads = 4;       // attention heads per block
  const modelDims = 32;     // width of embeddings and hidden layers
  const batchSize = 4;      // windows per rank and step
  const iterations = 32;    // steps
  const learningRate = 3e-3;
  await tf.setBackend('cpu');  // no GPU on these workers (a Web Worker may have no WebGL either)

  // -1e9 above the diagonal: position i attends to positions 0..i only.
  function causalMask(n) {
    return tf.tidy(() => {
      const positions = tf.range(0, n);
      const later = tf.greater(positions.reshape([1, -1]), positions.reshape([-1, 1]));
      return later.cast('float32').mul(-1e9);
    });
  }

  // Multi-head causal self-attention built from dense layers. TF.js tracks only the weights a
  // layer adds itself, so layers made of other layers list their weights (trainableWeights).
  class CausalSelfAttention extends tf.layers.Layer {
    constructor(name, numHeads, modelDims, contextSize) {
      super({name});
      this.project = ['query', 'key', 'value', 'output'].map(
        part => tf.layers.dense({name: `${name}-${part}`, units: modelDims, useBias: false}));
      this.mask = causalMask(contextSize);
      this.numHeads = numHeads;
      this.scale = 1 / Math.sqrt(modelDims / numHeads);
    }

    build(inputShape) {
      for (const dense of this.project) dense.build(inputShape);
      this.built = true;
    }

    get trainableWeights() {
      return this.project.flatMap(dense => dense.trainableWeights);
    }

    computeOutputShape(inputShape) {
      return inputShape;
    }

    call(inputs) {
      return tf.tidy(() => {
        const x = Array.isArray(inputs) ? inputs[0] : inputs;
        const [batch, length, dims] = x.shape;
        const heads = t => t.reshape([batch, length, this.numHeads, -1]).transpose([0, 2, 1, 3]);
        const [query, key, value] = this.project.slice(0, 3).map(dense => heads(dense.apply(x)));
        const mask = this.mask.slice([0, 0], [length, length]);
        const scores = tf.softmax(query.matMul(key, false, true).mul(this.scale).add(mask), -1);
        const mixed = scores.matMul(value).transpose([0, 2, 1, 3]).reshape([batch, length, dims]);
        return this.project[3].apply(mixed);
      });
    }

    static get className() {
      return 'CausalSelfAttention';
    }
  }
  tf.serialization.registerClass(CausalSelfAttention);

  // Pre-norm block: x + attention(norm(x)), then that + mlp(norm(that)).
  class TransformerBlock extends tf.layers.Layer {
    constructor(name, numHeads, modelDims, contextSize) {
      super({name});
      this.attention = tf.sequential({layers: [
        tf.layers.layerNormalization({epsilon: 1e-5, inputShape: [contextSize, modelDims]}),
        new CausalSelfAttention(`${name}-attention`, numHeads, modelDims, contextSize),
      ]});
      this.mlp = tf.sequential({layers: [
        tf.layers.layerNormalization({epsilon: 1e-5, inputShape: [contextSize, modelDims]}),
        tf.layers.dense({units: 4 * modelDims, activation: 'relu'}),
        tf.layers.dense({units: modelDims}),
      ]});
    }

    get trainableWeights() {
      return [...this.attention.trainableWeights, ...this.mlp.trainableWeights];
    }

    computeOutputShape(inputShape) {
      return inputShape;
    }

    call(inputs) {
      return tf.tidy(() => {
        const x = Array.isArray(inputs) ? inputs[0] : inputs;
        const attended = x.add(this.attention.apply(x));
        return attended.add(this.mlp.apply(attended));
      });
    }

    static get className() {
      return 'TransformerBlock';
    }
  }
  tf.serialization.registerClass(TransformerBlock);

  // Token ids in, the next token's probabilities out (TF.js's sparseCategoricalCrossentropy takes
  // probabilities, not logits).
  class TransformerLM extends tf.LayersModel {
    constructor(vocabSize, numBlocks, numHeads, modelDims, contextSize) {
      const tokens = tf.input({shape: [contextSize]});
      let x = tf.layers.embedding({name: 'embedding', inputDim: vocabSize, outputDim: modelDims}).apply(tokens);
      for (let i = 0; i < numBlocks; i++) x = new TransformerBlock(`block-${i}`, numHeads, modelDims, contextSize).apply(x);
      const next = tf.layers.dense({name: 'next-token', units: vocabSize, activation: 'softmax'}).apply(x);
      super({inputs: tokens, outputs: next, name: 'transformer_lm'});
    }

    static get className() {
      return 'TransformerLM';
    }
  }
  tf.serialization.registerClass(TransformerLM);

  // Windows starting at offset..offset+batchSize-1: inputs are contextSize tokens, targets the
  // same window one token later.
  function batchAt(data, offset) {
    const windows = [];
    for (let i = offset; i < offset + batchSize; i++) windows.push(data.slice(i, i + contextSize + 1));
    return tf.tidy(() => {
      const all = tf.tensor2d(windows);
      return [all.slice([0, 0], [batchSize, contextSize]), all.slice([0, 1], [batchSize, contextSize])];
    });
  }

  const [[, {vocab, data}]] = mapInputs;
  const vocabSize = Object.keys(vocab).length;
  const transformer = new TransformerLM(vocabSize, numBlocks, numHeads, modelDims, contextSize);
  transformer.compile({optimizer: tf.train.adam(learningRate), loss: 'sparseCategoricalCrossentropy'});
  context.log(`training a Transformer of ${transformer.countParams()} parameters on ${data.length} tokens`);

  const windows = data.length - contextSize;  // windows with a target
  const losses = [];
  for (let step = 0, offset = 0; step < iterations; step++, offset = (offset + batchSize) % (windows - batchSize)) {
    const [inputs, targets] = batchAt(data, offset);
    const loss = await transformer.trainOnBatch(inputs, targets, context);
    tf.dispose([inputs, targets]);
    losses.push(loss);
    if (step % 8 === 0) context.log(`step ${step}: loss ${loss.toFixed(4)}`);
  }

  // Raises on every rank if any rank's weights differ from the others'.
  await context.assertReplicaIntegrity(transformer.getWeights());
  const flat = tf.tidy(() => tf.concat(transformer.getWeights().map(w => w.reshape([-1]))));
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', await flat.data()));
  context.emit(`rank ${context.getRank()}`, {
    parameters: transformer.countParams(),
    losses,
    weights: Array.from(digest, b => b.toString(16).padStart(2, '0')).join(''),
  });
  await context.onComplete();
});
stage.timeout = 30 * 60;
execution.addStage(stage);

execution.start(jobRunner);
