// Data-parallel training for TensorFlow.js in PeerMR jobs. Give a model's training calls the task's
// context and every rank of the stage trains one model together:
//
//   await model.trainOnBatch(xs, ys, context);
//   await model.fit(xs, ys, {epochs: 5, batchSize: 32, context});
//
// At each step every rank computes the gradients of its own batch, the ranks average them
// (context.allReduce, which gives every rank the same bits) and every rank applies the average with
// its own optimizer: weights and optimizer state stay identical, as if one browser had trained on
// the batches of all ranks at once. The first such call on a model copies rank 0's weights to the
// other ranks, so they start from the same model whatever their initializers drew. Without a
// context these calls are TF.js's own.
//
// So that models written as the PeerMR documentation writes them train as they are, the add-on
// also: counts the weights of layers a custom layer holds as its own (as Keras does); lets a list
// of one tensor given to a layer act as that tensor; with a context, takes the categorical
// cross-entropy of a linear output from logits; and on the cpu backend sums embedding gradients
// in one pass (see docs/sdk.md).
//
// A classic script, listed in execution.scripts after tf.min.js, or alone: it then loads the
// appliance's tf.min.js itself.
(function () {
  'use strict';

  if (typeof globalThis.tf === 'undefined') importScripts('/static/vendor/tfjs/tf.min.js');
  const tf = globalThis.tf;
  const BaseCallback = Object.getPrototypeOf(tf.Callback);
  const stock = {
    trainOnBatch: tf.LayersModel.prototype.trainOnBatch,
    fit: tf.LayersModel.prototype.fit,
    fitDataset: tf.LayersModel.prototype.fitDataset,
    sequentialTrainOnBatch: tf.Sequential.prototype.trainOnBatch,
  };
  const replicated = new WeakMap();  // model -> the context whose ranks share its weights

  function isContext(context, call) {
    if (context == null) return false;
    if (!['allReduce', 'broadcast', 'allGather', 'getRank'].every(name => typeof context[name] === 'function')) {
      throw new TypeError(`${call}: context must be the task's context (its allReduce averages the gradients)`);
    }
    return true;
  }

  // Sets object[name] for as long as the returned function is not called.
  function override(object, name, value) {
    const own = Object.getOwnPropertyDescriptor(object, name);
    object[name] = value;
    return () => {
      if (own) Object.defineProperty(object, name, own);
      else delete object[name];
    };
  }

  // One Float32Array of the tensors' values, in order.
  async function flatten(tensors) {
    if (!tensors.length) return new Float32Array(0);
    const flat = tf.tidy(() => tf.concat(tensors.map(t => t.reshape([-1]))));
    const values = await flat.data();
    flat.dispose();
    return values;
  }

  // Tensors of the given shapes, in order, from one flat array (what flatten made).
  function unflatten(values, shapes) {
    let offset = 0;
    return shapes.map(shape => tf.tensor(values.subarray(offset, offset += tf.util.sizeFromShape(shape)), shape));
  }

  // The model's float32 weights (every rank has them in the same order).
  function weightsOf(model) {
    return model.weights.filter(weight => weight.dtype === 'float32');
  }

  // Rank 0's weights on every rank, once per model and task.
  async function replicate(model, context) {
    if (replicated.get(model) === context) return;
    const weights = weightsOf(model);
    const values = await context.broadcast(0, await flatten(weights.map(weight => weight.read())));
    const size = weights.reduce((n, weight) => n + tf.util.sizeFromShape(weight.shape), 0);
    if (values.length !== size) {
      throw new Error(`rank 0's model has ${values.length} weight values and rank ${context.getRank()}'s ${size}: ` +
        'every rank must build the same model');
    }
    if (context.getRank() !== 0) {
      tf.tidy(() => unflatten(values, weights.map(weight => weight.shape)).forEach((value, i) => weights[i].write(value)));
    }
    replicated.set(model, context);
  }

  // Runs train(pending) while the model's training function computes each batch's loss and
  // gradients without applying them: the gradients wait in `pending` for averageAndApply.
  async function deferringGradients(model, train) {
    const pending = [];
    const makeTrainFunction = model.makeTrainFunction;
    const restore = override(model, 'makeTrainFunction', function () {
      const step = makeTrainFunction.call(this);
      return data => {
        const optimizer = this.optimizer;
        const restoreMinimize = override(optimizer, 'minimize', (loss, returnCost, variables) => {
          const {value, grads} = optimizer.computeGradients(loss, variables);
          pending.push(grads);
          Object.values(grads).forEach(tf.keep);  // fit computes a batch inside tf.tidy
          if (returnCost) return value;
          value.dispose();
          return null;
        });
        try {
          return step(data);
        } finally {
          restoreMinimize();
        }
      };
    });
    try {
      return await train(pending);
    } finally {
      restore();
      pending.forEach(grads => tf.dispose(grads));
    }
  }

  // The mean of every rank's gradients, applied by the model's optimizer.
  async function averageAndApply(model, context, grads) {
    try {
      const names = Object.keys(grads);  // the model's weights, in order: the same on every rank
      const mean = await context.allReduce(await flatten(names.map(name => grads[name])), 'mean');
      tf.tidy(() => {
        const averaged = unflatten(mean, names.map(name => grads[name].shape));
        model.optimizer.applyGradients(Object.fromEntries(names.map((name, i) => [name, averaged[i]])));
      });
    } finally {
      tf.dispose(grads);
    }
  }

  // A fit whose ranks took different numbers of steps would leave one waiting for the others'
  // gradients: every rank checks first that they all take as many.
  async function checkSameSteps(context, x, args) {
    const first = x instanceof tf.Tensor ? x : Array.isArray(x) ? x[0] : Object.values(x ?? {})[0];
    let samples = first?.shape?.[0] ?? 0;
    if (args.validationData == null && args.validationSplit > 0 && args.validationSplit < 1) {
      samples = Math.floor(samples * (1 - args.validationSplit));
    }
    const epochs = Math.max(0, (args.epochs ?? 1) - (args.initialEpoch ?? 0));
    const steps = epochs * Math.ceil(samples / (args.batchSize ?? 32));
    const all = await context.allGather(steps);
    if (all.some(n => n !== steps)) {
      const each = all.map((n, r) => `${n} (rank ${r})`).join(', ');
      throw new Error(`fit(x, y, {context}): the ranks would take ${each} steps (epochs × ⌈samples ÷ batchSize⌉): ` +
        'give every rank as many samples');
    }
  }

  // The callbacks of a fit with `hooks` first (before the user's see the weights). TF.js takes a
  // list of callback objects or a list of plain {onBatchEnd, ...} objects, not a mix.
  function withFirst(callbacks, hooks) {
    const list = callbacks == null ? [] : Array.isArray(callbacks) ? callbacks : [callbacks];
    if (list[0] instanceof BaseCallback) return [Object.assign(new tf.Callback(), hooks), ...list];
    return [hooks, ...list];
  }

  // Sparse targets without the trailing axis of 1 that TF.js wants (as Keras takes them: [batch,
  // length] token ids for [batch, length, vocab] outputs): that axis added.
  function sparseTargets(model, y) {
    const sparse = [model.loss, model.loss?.[0]].includes('sparseCategoricalCrossentropy');
    const oneOutput = model.outputs.length === 1 && y instanceof tf.Tensor;
    return sparse && oneOutput && y.rank === model.outputs[0].shape.length - 1 ? y.expandDims(-1) : y;
  }

  // Weights of layers a custom layer holds as properties (an attention layer made of dense layers, a
  // block made of tf.sequential()s) are that layer's weights too, as Keras tracks a layer's
  // sublayers: they train, count and save with the model. TF.js lists only the weights a layer
  // adds itself, so the sublayers' would stay as initialized. Layers that list their parts
  // themselves (models, wrappers, RNNs, a custom layer with its own getter) are left as they are.
  function sublayersOf(layer) {
    const found = [];
    for (const value of Object.values(layer)) {
      for (const item of Array.isArray(value) ? value : [value]) {
        if (item instanceof tf.layers.Layer && item !== layer) found.push(item);
      }
    }
    return found;
  }

  // Each weight once (a sublayer may also be one of the model's layers, or held twice).
  const distinct = weights => [...new Set(weights)];

  // Replaces the getter of prototype[name] with wrap(stock getter), keeping its setter.
  function wrapGetter(prototype, name, wrap) {
    const property = Object.getOwnPropertyDescriptor(prototype, name);
    Object.defineProperty(prototype, name, {...property, get: wrap(property.get)});
  }

  const tracing = new Set();  // layers whose sublayers are being listed (a layer may hold its parent)
  function withSublayers(layer, own, ofSublayer) {
    if (tracing.has(layer)) return own;
    tracing.add(layer);
    try {
      return distinct([...own, ...sublayersOf(layer).flatMap(ofSublayer)]);
    } finally {
      tracing.delete(layer);
    }
  }
  const Layer = tf.layers.Layer.prototype;
  wrapGetter(Layer, 'trainableWeights', stockGetter => function () {
    const own = stockGetter.call(this);
    return this.trainable ? withSublayers(this, own, sub => sub.trainableWeights) : own;
  });
  wrapGetter(Layer, 'nonTrainableWeights', stockGetter => function () {
    const own = stockGetter.call(this);
    return withSublayers(this, own, sub => this.trainable ? sub.nonTrainableWeights : sub.weights);
  });
  const Container = Object.getPrototypeOf(tf.LayersModel.prototype);
  for (const name of ['trainableWeights', 'nonTrainableWeights']) {
    wrapGetter(Container, name, stockGetter => function () {
      return distinct(stockGetter.call(this));
    });
  }

  // TF.js hands a layer's call its inputs as a list in some paths (a model runs each layer on the
  // list of its inputs) and as a tensor in others, and a custom layer written for one breaks in
  // the other: `tf.add(inputs, x)` on a list of one tensor computes with NaN. A list of one tensor
  // given to a layer therefore also acts as that tensor: everything an array has (indexing,
  // length, map, slice, ...) is the array's, everything else (shape, dtype, the tensor methods,
  // and being a tf.Tensor to ops) is the tensor's.
  function listActingAsTensor(list) {
    const [tensor] = list;
    return new Proxy(list, {
      get(target, key) {
        if (key in target) return Reflect.get(target, key);
        const value = tensor[key];
        return typeof value === 'function' ? value.bind(tensor) : value;
      },
      has: (target, key) => key in target || key in tensor,
    });
  }
  const stockApply = Layer.apply;
  Layer.apply = function apply(inputs, kwargs) {
    const single = Array.isArray(inputs) && inputs.length === 1 && inputs[0] instanceof tf.Tensor;
    return stockApply.call(this, single ? listActingAsTensor(inputs) : inputs, kwargs);
  };

  // TF.js's cpu backend computes UnsortedSegmentSum (the gradient of tf.gather, so of every
  // embedding layer) with a pass over the whole input per segment: one per vocabulary entry, ~2 s
  // a step for a 10,000-word embedding. Where the segment ids are one per input row (as gather's
  // gradient gives them) one pass adds each row into its segment, in the same order, so to the
  // same sums; other shapes keep TF.js's kernel.
  const segmentSum = tf.getKernel('UnsortedSegmentSum', 'cpu');
  if (segmentSum) {
    tf.unregisterKernel('UnsortedSegmentSum', 'cpu');
    tf.registerKernel({...segmentSum, kernelFunc(args) {
      const {inputs: {x, segmentIds}, backend, attrs: {numSegments}} = args;
      if (segmentIds.shape.length !== 1 || x.shape.length < 1 || x.dtype === 'complex64') return segmentSum.kernelFunc(args);
      const values = backend.data.get(x.dataId).values;
      const ids = backend.data.get(segmentIds.dataId).values;
      const row = tf.util.sizeFromShape(x.shape.slice(1));
      const sums = new Float64Array(numSegments * row);  // summed in doubles, as TF.js sums
      ids.forEach((id, i) => {
        if (id < 0 || id >= numSegments) return;  // dropped, as TF.js's kernel drops them
        for (let k = 0, from = i * row, to = id * row; k < row; k++) sums[to + k] += values[from + k];
      });
      return backend.makeTensorInfo([numSegments, ...x.shape.slice(1)], 'float32', Float32Array.from(sums));
    }});
  }

  // -log softmax(logits)[id] along the last axis, for integer ids. On the cpu backend one pass per
  // row computes the loss and its gradient (softmax - one-hot): TF.js's composed ops take ~20
  // broadcasting passes over [rows, classes], most of a step with a 10,000-word vocabulary.
  function sparseCrossEntropyOfLogits(yTrue, yPred) {
    const classes = yPred.shape[yPred.rank - 1];
    if (tf.getBackend() !== 'cpu') {
      return tf.tidy(() => {
        const oneHot = tf.oneHot(yTrue.flatten().floor().toInt(), classes).reshape(yPred.shape);
        return tf.logSoftmax(yPred).mul(oneHot).sum(-1).neg();
      });
    }
    const ids = yTrue.dataSync();
    return tf.customGrad(logits => {
      const x = logits.dataSync();
      const rows = x.length / classes;
      const losses = new Float32Array(rows);
      const grad = new Float32Array(x.length);
      for (let r = 0, at = 0; r < rows; r++, at += classes) {
        let max = -Infinity;
        for (let k = at; k < at + classes; k++) max = Math.max(max, x[k]);
        let sum = 0;
        for (let k = at; k < at + classes; k++) sum += (grad[k] = Math.exp(x[k] - max));
        for (let k = at; k < at + classes; k++) grad[k] /= sum;
        const id = Math.floor(ids[r]);
        losses[r] = max + Math.log(sum) - x[at + id];
        grad[at + id] -= 1;
      }
      const gradFunc = dy => {
        const scale = dy.dataSync();
        const scaled = grad.map((g, k) => g * scale[Math.floor(k / classes)]);
        return tf.tensor(scaled, logits.shape);
      };
      return {value: tf.tensor(losses, logits.shape.slice(0, -1)), gradFunc};
    })(yPred);
  }

  // Categorical cross-entropies of scores (logits).
  const crossEntropyOfLogits = {
    categoricalCrossentropy: (yTrue, yPred) => tf.tidy(() => tf.logSoftmax(yPred).mul(yTrue).sum(-1).neg()),
    sparseCategoricalCrossentropy: sparseCrossEntropyOfLogits,
  };

  // The loss functions of a model trained with a context. An output made by a layer with a linear
  // activation (a dense projection without softmax) holds scores of any sign, not probabilities;
  // TF.js's categorical cross-entropies take probabilities (they divide by the sum and clip at
  // 1e-7), which on such scores neither measures nor trains anything. Their cross-entropy is then
  // taken from logits, as Keras' from_logits=True computes it (and as the models such code is
  // ported from do). Outputs of a softmax, or of any layer without an activation, keep TF.js's.
  function lossFunctionsOf(model) {
    return model.lossFunctions.map((lossFunction, i) => {
      const loss = model.loss;
      const name = typeof loss === 'string' ? loss : Array.isArray(loss) ? loss[i] : loss?.[model.outputNames[i]];
      const activation = model.outputLayers[i]?.activation;
      const linear = activation instanceof tf.serialization.Serializable && activation.getClassName() === 'linear';
      return linear && crossEntropyOfLogits[name] ? crossEntropyOfLogits[name] : lossFunction;
    });
  }

  tf.LayersModel.prototype.trainOnBatch = async function trainOnBatch(x, y, context) {
    if (!isContext(context, 'trainOnBatch(x, y, context)')) return stock.trainOnBatch.call(this, x, y);
    await replicate(this, context);
    const targets = sparseTargets(this, y);
    const restoreLosses = override(this, 'lossFunctions', lossFunctionsOf(this));
    try {
      return await deferringGradients(this, async pending => {
        const losses = await stock.trainOnBatch.call(this, x, targets);
        await averageAndApply(this, context, pending.shift());
        return losses;
      });
    } finally {
      restoreLosses();
      if (targets !== y) targets.dispose();
    }
  };

  // A Sequential model trains the functional model it wraps (which shares its weights).
  tf.Sequential.prototype.trainOnBatch = function trainOnBatch(x, y, context) {
    if (!isContext(context, 'trainOnBatch(x, y, context)')) return stock.sequentialTrainOnBatch.call(this, x, y);
    return this.model.trainOnBatch(x, y, context);
  };

  // Each batch's gradients are averaged and applied when the batch ends, before the user's
  // callbacks see it. (A validationSplit's last-batch validation runs just before that update.)
  tf.LayersModel.prototype.fit = async function fit(x, y, args = {}) {
    if (!isContext(args.context, 'fit(x, y, {context})')) return stock.fit.call(this, x, y, args);
    const {context, ...rest} = args;
    await replicate(this, context);
    await checkSameSteps(context, x, rest);
    const restoreLosses = override(this, 'lossFunctions', lossFunctionsOf(this));
    try {
      return await deferringGradients(this, pending => stock.fit.call(this, x, y, {
        ...rest,
        callbacks: withFirst(rest.callbacks, {onBatchEnd: () => averageAndApply(this, context, pending.shift())}),
      }));
    } finally {
      restoreLosses();
    }
  };

  tf.LayersModel.prototype.fitDataset = function fitDataset(dataset, args = {}) {
    if (isContext(args.context, 'fitDataset(dataset, {context})')) {
      const error = new TypeError('fitDataset(dataset, {context}) does not train across ranks: use fit or trainOnBatch');
      return Promise.reject(error);
    }
    return stock.fitDataset.call(this, dataset, args);
  };
})();
