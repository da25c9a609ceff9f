"""TensorFlow.js trained across real Chromium workers without code changes.

The appliance's add-on (static/vendor/tfjs/tf-data-parallel.js) makes `trainOnBatch(x, y, context)`
and `fit(x, y, {context})` average the gradients of the stage's ranks at each step, and
`context.assertReplicaIntegrity` checks that the ranks hold the same values. Four worker tabs hold
the ranks; TF.js runs on its `cpu` backend where the job sets it, and otherwise on the backend
TF.js picks itself (`webgl`, drawn by Chromium's software renderer: the tabs have no GPU).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import statistics

import pytest

from tests.e2e.test_jobs_in_browsers import EXAMPLES, CorpusServer, logs, output, save_and_run, wait
from tests.e2e.test_peers_in_browsers import job
from tests.support import Appliance

pytestmark = pytest.mark.e2e

SCRIPTS = "['/static/vendor/tfjs/tf.min.js', '/static/vendor/tfjs/tf-data-parallel.js']"


@pytest.fixture(scope="module")
def data_server():
    server = CorpusServer({"/ptb.train.txt": word_corpus().encode()})
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def appliance(tmp_path_factory, data_server):
    env = {"PEERMR_FETCH_ORIGINS": data_server.origin}
    server = Appliance(tmp_path_factory.mktemp("tfjs") / "data", env=env).start()
    yield server
    server.stop()


def succeeded(api, run_id: int, timeout: float = 300) -> list:
    run = wait(api, run_id, timeout)
    assert run["state"] == "succeeded", run["reason"] + "\n" + logs(api, run_id)[-4000:]
    return output(api, run_id)


def test_the_transformer_example_trains_across_four_browsers_with_identical_weights(api, workers):
    # The example as shipped: a decoder-only Transformer whose trainOnBatch gets the context.
    records = succeeded(api, save_and_run(api, "transformer", (EXAMPLES / "tfjs-transformer.js").read_text()))
    ranks = dict(records)
    assert sorted(ranks) == [f"rank {r}" for r in range(4)], records
    # The same weights on every rank (the job also passed assertReplicaIntegrity on them).
    assert len({out["weights"] for out in ranks.values()}) == 1, ranks
    for out in ranks.values():
        assert out["parameters"] > 20_000  # the blocks' weights train too, not only embedding and output
        losses = out["losses"]
        # Each rank's loss on its own batches falls: the first steps against the last ones.
        assert statistics.mean(losses[-4:]) < 0.7 * statistics.mean(losses[:4]), losses
    # Each rank trained on its own part of the corpus: their losses differ.
    assert len({tuple(out["losses"]) for out in ranks.values()}) == 4


# Every rank holds all the data (a seeded set) and trains on its part with fit(..., {context});
# then trains a second model, without a context, on every rank's part at once (as one browser
# would), from the same initial weights. The two agree up to float rounding.
FIT = """
  await tf.setBackend('cpu');
  const rank = context.getRank(), ranks = context.getWorkerCount();
  const SAMPLES = 48, BATCH = 4;  // per rank
  const xs = tf.randomUniform([SAMPLES * ranks, 3], -1, 1, 'float32', 11);
  const ys = tf.tidy(() => xs.sum(1, true).sin());
  // Global batch i holds rows [i * BATCH * ranks, (i + 1) * BATCH * ranks); this rank's part of it
  // starts at rank * BATCH.
  const mine = [];
  for (let i = 0; i < SAMPLES / BATCH; i++) {
    for (let j = 0; j < BATCH; j++) mine.push(i * BATCH * ranks + rank * BATCH + j);
  }
  const rows = tf.tensor1d(mine, 'int32');
  const model = () => {
    const m = tf.sequential({layers: [
      tf.layers.dense({inputShape: [3], units: 8, activation: 'tanh'}),  // unseeded: differs per rank
      tf.layers.dense({units: 1}),
    ]});
    m.compile({optimizer: tf.train.adam(0.05), loss: 'meanSquaredError'});
    return m;
  };
  const distributed = model(), alone = model();
  const initial = tf.tidy(() => distributed.getWeights().map(w => w.clone()));
  const epochs = [];
  const history = await distributed.fit(xs.gather(rows), ys.gather(rows), {
    epochs: 3, batchSize: BATCH, shuffle: false, context,
    callbacks: {onEpochEnd: (epoch, logs) => { epochs.push(logs.loss); }},
  });
  // Rank 0's initial weights are the ones all ranks started from.
  const start = await context.broadcast(0, await tf.concat(initial.map(w => w.reshape([-1]))).data());
  let offset = 0;
  alone.setWeights(initial.map(w => tf.tensor(start.subarray(offset, offset += w.size), w.shape)));
  await alone.fit(xs, ys, {epochs: 3, batchSize: BATCH * ranks, shuffle: false});
  const flat = m => tf.concat(m.getWeights().map(w => w.reshape([-1]))).dataSync();
  const a = flat(distributed), b = flat(alone);
  const shared = await context.assertReplicaIntegrity(distributed.getWeights());

  // Bad input: ranks with different numbers of steps, and a context that is not one.
  let steps;
  try {
    await model().fit(tf.zeros([rank === 1 ? 12 : 8, 3]), tf.zeros([rank === 1 ? 12 : 8, 1]), {batchSize: 4, context});
    steps = 'trained';
  } catch (e) {
    steps = e.message;
  }
  let notContext;
  try {
    await model().trainOnBatch(tf.zeros([2, 3]), tf.zeros([2, 1]), {rank: 0});
    notContext = 'trained';
  } catch (e) {
    notContext = `${e.name}: ${e.message}`;
  }
  context.emit(`rank ${rank}`, {
    epochs, historyLoss: history.history.loss, shared, steps, notContext,
    maxDifference: a.reduce((m, v, i) => Math.max(m, Math.abs(v - b[i])), 0),
    weights: Array.from(a),
  });
"""


def test_fit_across_ranks_equals_one_browser_fitting_all_the_data(api, workers):
    records = succeeded(api, save_and_run(api, "tfjs-fit", job(4, FIT, scripts=SCRIPTS)))
    ranks = dict(records)
    assert sorted(ranks) == [f"rank {r}" for r in range(4)], records
    # Identical weights: by the job's assertReplicaIntegrity and by the bytes each rank reported.
    assert len({out["shared"] for out in ranks.values()}) == 1
    digests = {hashlib.sha256(repr(out["weights"]).encode()).hexdigest() for out in ranks.values()}
    assert len(digests) == 1
    for out in ranks.values():
        # The same model as one browser training on the batches of all four at once.
        assert out["maxDifference"] < 1e-4, out["maxDifference"]
        # fit's callbacks and history still work; the loss falls epoch by epoch.
        assert out["epochs"] == pytest.approx(out["historyLoss"])
        assert out["epochs"][-1] < out["epochs"][0]
        # Bad input gets a clear error on every rank, before any step.
        assert out["steps"].startswith(
            "fit(x, y, {context}): the ranks would take 2 (rank 0), 3 (rank 1), 2 (rank 2), 2 (rank 3) steps"
        )
        assert out["notContext"] == (
            "TypeError: trainOnBatch(x, y, context): context must be the task's context "
            "(its allReduce averages the gradients)"
        )


# Every rank checks the same values (passes), then values where rank 2's tensor differs in one
# element, then rank 3 with a value more; then a value that cannot be compared.
INTEGRITY = """
  const rank = context.getRank();
  const values = () => [new Float32Array([1, 2, 3]), {step: 7, name: 'w'}, tf.tensor2d([[1, 2], [3, 4]])];
  const same = await context.assertReplicaIntegrity(values());
  const odd = values();
  if (rank === 2) odd[2] = tf.tensor2d([[1, 2], [3, 4.0001]]);
  let differ;
  try {
    await context.assertReplicaIntegrity(odd);
    differ = 'passed';
  } catch (e) {
    differ = `${e.name}: ${e.message}`;
  }
  let longer;
  try {
    await context.assertReplicaIntegrity(rank === 3 ? [...values(), 5] : values());
    longer = 'passed';
  } catch (e) {
    longer = e.message;
  }
  let bad;
  try {
    await context.assertReplicaIntegrity([() => 1]);
    bad = 'passed';
  } catch (e) {
    bad = `${e.name}: ${e.message}`;
  }
  context.emit(`rank ${rank}`, {same, differ, longer, bad});
"""


def test_assert_replica_integrity_raises_on_every_rank_when_one_rank_differs(api, workers):
    # The add-on alone in the job's scripts: it loads tf.min.js itself.
    script = job(4, INTEGRITY, scripts="['/static/vendor/tfjs/tf-data-parallel.js']")
    records = succeeded(api, save_and_run(api, "integrity", script))
    ranks = dict(records)
    assert sorted(ranks) == [f"rank {r}" for r in range(4)], records
    assert len({out["same"] for out in ranks.values()}) == 1
    for out in ranks.values():
        assert out["differ"] == (
            "ReplicaMismatchError: assertReplicaIntegrity: the replicas differ: values[2] differs; "
            "ranks with the same values: [0, 1, 3], [2]"
        )
        assert out["longer"] == (
            "assertReplicaIntegrity: the replicas differ: they hold 3 or 4 values; "
            "ranks with the same values: [0, 1, 2], [3]"
        )
        assert out["bad"] == (
            "TypeError: assertReplicaIntegrity: cannot compare Function values "
            "(give tensors, typed arrays or JSON values)"
        )


# The documentation's decoder-only Transformer, as a user pastes it, with only what the issue
# allows changed: the corpus URL (a small corpus this test serves), the TF.js script URL (the
# appliance's copy, and the add-on) and the scale constants. Two more changes, said here: the
# example asks for a WebGPU adapter from vendor 'apple' (gpu = true, gpuRequirements), which these
# workers do not have (headless Chromium without a GPU), so those two settings are left out; and
# its learning rate, 1e-3, moves a model this small too little in one pass to see (measured: the
# loss stays at 9.21 for 10 steps), so it is 0.2. The job's code is otherwise the documented one:
# its SelfAttention reads `inputs[0]`, its EncoderLayer adds `inputs` to a tensor, its blocks live
# in tf.sequential()s inside custom layers, its projection outputs logits for
# 'sparseCategoricalCrossentropy', and trainOnBatch(inputs, targets, context) trains it.
# After training, the test's own lines report each rank's weights.
CONTEXT = 4  # context size = model dimensions (the example's input shape is [modelDims])
BATCH = 150  # a multiple of 10: the example logs the loss of steps whose offset is one
RARE = 9998  # with '.' and '<eos>', the 10,000 tokens the example checks for
TRANSFORMER_LM = r"""
const execution = new JobExecution('pmrfs', workerCount = 8);
execution.scripts = ["/static/vendor/tfjs/tf.min.js", "/static/vendor/tfjs/tf-data-parallel.js"];

execution.setInputFn(async function inputs() {
  async function getDatasets() {
    const trainDataUrl = 'ORIGIN/ptb.train.txt';
    context.log(`fetching train data ${trainDataUrl}`);
    const trainDataResponse = await fetch(trainDataUrl);
    const trainDataText = await trainDataResponse.text();

    context.log(`parsing vocab`);
    const eos = '<eos>';
    const vocabTokens = {};
    vocabTokens[eos] = true;
    const lines = trainDataText.split('\\n');
    for (const line of lines) {
      const tokens = line.trim().split(' ');
      for (const token of tokens) {
        const t = token.trim();
        if (t.length) {
          vocabTokens[t] = true;
        }
      }
    }
    const tokenCount = Object.keys(vocabTokens).length;
    context.log(`${tokenCount} vocab tokens`);
    if (tokenCount !== 10_000) {
      throw new Error(`invalid token count ${tokenCount}`);
    }

    let index = 0;
    const vocab = {};
    for (const token in vocabTokens) {
      vocab[token] = index;
      index += 1;
    }

    function* getData(text) {
      const lines = text.split('\\n');
      for (const line of lines) {
        const tokens = line.trim().split(' ');
        for (const token of tokens) {
          const t = token.trim();
          if (t.length) {
            yield vocab[t];
          }
        }
        yield vocab[eos];
      }
    }

    const trainData = Array.from(getData(trainDataText));
    context.log(`${trainData.length} train data size`);
    return [vocab, trainData];
  }

  const [vocab, trainData] = await getDatasets();
  const workerCount = context.getWorkerCount();
  const samplesPerWorker = trainData.length / workerCount;
  const mapStageInputs = [];
  for (let i = 0; i < workerCount; i++) {
    const data = trainData.slice(i * samplesPerWorker, (i + 1) * samplesPerWorker);
    mapStageInputs.push({
      'vocab': vocab,
      'data': data,
    });
  }
  return mapStageInputs;
});

const stage = new MapStage(async function map(mapInputs) {
  if (mapInputs.length !== 1) {
    throw new Error('invalid mapper input length: ' + mapInputs.length);
  }

  const contextSize = CONTEXT;
  const numBlocks = 2;
  const numHeads = 2;
  const batchSize = BATCH;
  const iterations = 1;
  const learningRate = 0.2;
  const modelDims = CONTEXT;

  function createAdditiveCausalMask(N) {
    return tf.tidy(() => {
      const indices = tf.range(0, N);
      const mask = tf.less(tf.reshape(indices, [-1, 1]), tf.reshape(indices, [1, -1]));
      return mask.cast('float32').mul(tf.scalar(-1e9));
    });
  }

  class SelfAttention extends tf.layers.Layer {
    constructor(name, numHeads, modelDims, contextSize) {
      super({name: name, inputShape: [modelDims, modelDims]});
      this.Wq = tf.layers.dense({units: modelDims, useBias: false});
      this.Wk = tf.layers.dense({units: modelDims, useBias: false});
      this.Wv = tf.layers.dense({units: modelDims, useBias: false});
      this.Wo = tf.layers.dense({units: modelDims, useBias: false});
      this.causalMask = createAdditiveCausalMask(contextSize);
      this.numHeads = numHeads;
      this.headDim = modelDims / numHeads;
      this.scale = tf.scalar(1.0 / Math.sqrt(this.headDim));
    }

    build(inputShape) {
      this.Wq.build(inputShape);
      this.Wk.build(inputShape);
      this.Wv.build(inputShape);
      this.Wo.build(inputShape);
    }

    call(inputs, kwargs) {
      return tf.tidy(() => {
        const x = inputs[0];
        let queries = this.Wq.apply(x);
        let keys = this.Wk.apply(x);
        let values = this.Wv.apply(x);
        const [B, L, D] = x.shape;
        queries = tf.transpose(tf.reshape(queries, [B, L, this.numHeads, -1]), [0, 2, 1, 3]);
        keys = tf.transpose(tf.reshape(keys, [B, L, this.numHeads, -1]), [0, 2, 1, 3]);
        values = tf.transpose(tf.reshape(values, [B, L, this.numHeads, -1]), [0, 2, 1, 3]);
        let scores = this.scale.mul(queries.matMul(tf.transpose(keys, [0, 1, 3, 2])));
        scores = tf.softmax(scores.add(this.causalMask), -1);
        values = scores.matMul(values);
        let valuesHat = tf.reshape(tf.transpose(values, [0, 2, 1, 3]), [B, L, -1]);
        return this.Wo.apply(valuesHat);
      });
    }
  }
  SelfAttention.className = 'SelfAttention';
  tf.serialization.registerClass(SelfAttention);

  class EncoderLayer extends tf.layers.Layer {
    constructor(name, numHeads, modelDims, contextSize) {
      super({name: name, inputShape: [modelDims, modelDims]});
      this.selfAttn = tf.sequential();
      this.selfAttn.add(tf.layers.layerNormalization({epsilon: 1e-5, inputShape: [modelDims, modelDims]}));
      this.selfAttn.add(new SelfAttention(`${name}-self-attention`, numHeads, modelDims, contextSize));
      this.mlp = tf.sequential();
      this.mlp.add(tf.layers.layerNormalization({epsilon: 1e-5, inputShape: [modelDims, modelDims]}));
      this.mlp.add(tf.layers.dense({units: 4 * modelDims, activation: 'relu', inputShape: [modelDims, modelDims]}));
      this.mlp.add(tf.layers.dense({units: modelDims}));
    }

    call(inputs, kwargs) {
      return tf.tidy(() => {
        const x = this.selfAttn.apply(inputs);
        const x1 = tf.add(inputs, x);
        const x2 = this.mlp.apply(x1);
        return tf.add(x1, x2);
      });
    }
  }
  EncoderLayer.className = 'EncoderLayer';
  tf.serialization.registerClass(EncoderLayer);

  class TransformerLM extends tf.LayersModel {
    constructor(vocabSize, numLayers, numHeads, modelDims, contextSize) {
      const embedding = tf.layers.embedding({
        name: 'embedding',
        inputDim: vocabSize,
        outputDim: modelDims,
        inputLength: modelDims,
      });
      const trnsfrmr = tf.sequential();
      for (let i = 0; i < numLayers; i++) {
        trnsfrmr.add(new EncoderLayer(`transformer-encoder-layer-${i}`, numHeads, modelDims, contextSize));
      }
      const projection = tf.layers.dense({
        name: 'projection',
        units: vocabSize,
      });
      const input = tf.input({shape: [modelDims]});
      const x1 = embedding.apply(input);
      const x2 = trnsfrmr.apply(x1);
      const x3 = projection.apply(x2);
      super({
        inputs: input,
        outputs: x3,
        name: 'transformer_lm'
      });
    }
  }
  TransformerLM.className = 'TransformerLM';
  tf.serialization.registerClass(TransformerLM);

  function toSamples(contextSize, dataset, batchSize, offset) {
    return tf.tidy(() => {
      const windowSize = contextSize + 1;
      const d = [];
      const upperBound = batchSize + offset;
      for (let i = offset; i < upperBound; i++) {
        d.push(dataset.slice(i, i + windowSize));
      }
      let X = tf.tensor(d);
      const rows = X.shape[0];
      const cols = X.shape[1];
      const inputs = X.slice([0, 0], [rows, cols - 1]);
      const targets = X.slice([0, 1], [rows, cols - 1]);
      return [inputs, targets];
    });
  }

  const [k, mapData] = mapInputs[0];
  const trainData = mapData['data'];
  const vocab = mapData['vocab'];
  const vocabSize = Object.keys(vocab).length;
  context.log(`vocab size: ${vocabSize}`);

  const transformer = new TransformerLM(
    vocabSize, numBlocks, numHeads, modelDims, contextSize
  );
  transformer.compile({
    optimizer: tf.train.sgd(learningRate),
    loss: 'sparseCategoricalCrossentropy',
  });
  transformer.build([batchSize, contextSize]);
  transformer.summary();

  const paramCount = transformer.countParams();
  context.log(`training a transformer with ${paramCount} parameters`);

  const tokenCount = trainData.length;
  const windowSize = contextSize + 1;
  const sampleSize = tokenCount - windowSize + 1;
  for (let i = 0; i < iterations; i++) {
    for (let j = 0; j < sampleSize; j += batchSize) {
      const [inputs, targets] = toSamples(contextSize, trainData, batchSize, j);
      const loss = await transformer.trainOnBatch(inputs, targets, context);
      inputs.dispose();
      targets.dispose();
      if (j % 10 === 0) {
        context.log(`iteration ${j}, loss: ${loss}`);
        context.log(tf.memory());
      }
    }
  }

  // The test's own lines: this rank's weights (assertReplicaIntegrity raises if the ranks differ).
  const shared = await context.assertReplicaIntegrity(transformer.getWeights());
  const flat = tf.concat(transformer.getWeights().map(w => w.reshape([-1])));
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', await flat.data()));
  context.emit(`rank ${context.getRank()}`, {
    shared, backend: tf.getBackend(), parameters: paramCount, trainable: transformer.trainableWeights.length,
    weights: Array.from(digest, b => b.toString(16).padStart(2, '0')).join(''),
  });

  await context.onComplete();
});
stage.timeout = 8 * 60 * 60;
execution.addStage(stage);

execution.start(jobRunner);
"""


def word_corpus(seed: int = 5) -> str:
    """PTB-like text of 9,998 made-up words, each once, three to a sentence ending in '.'.

    With '.' and '<eos>', 10,000 distinct tokens. Some repeated at the end make each rank's part
    (a quarter, '<eos>' included) hold whole batches of windows: the example's last batch would
    otherwise be ragged.
    """
    rng = random.Random(seed)
    rare: set[str] = set()
    while len(rare) < RARE:
        rare.add("".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(3)))
    words = sorted(rare)
    rng.shuffle(words)
    tokens = [t for i in range(0, RARE, 3) for t in [*words[i : i + 3], "."]]
    tokens += tokens[: 4 * (CONTEXT + BATCH * math.ceil((len(tokens) + 1) / 4 / BATCH)) - len(tokens) - 1]
    lines = [" ".join(tokens[i : i + 20]) for i in range(0, len(tokens), 20)]
    return "".join(f" {line} \n" for line in lines)


def block_parameters(dims: int) -> int:
    norms = 2 * 2 * dims
    attention = 4 * dims * dims
    mlp = dims * 4 * dims + 4 * dims + 4 * dims * dims + dims
    return norms + attention + mlp


def test_the_documented_transformer_trains_across_four_browsers(api, workers, data_server):
    script = TRANSFORMER_LM.replace("ORIGIN", data_server.origin)
    script = script.replace("CONTEXT", str(CONTEXT)).replace("BATCH", str(BATCH))
    run_id = save_and_run(api, "documented-transformer", script)
    ranks = dict(succeeded(api, run_id, timeout=400))
    assert sorted(ranks) == [f"rank {r}" for r in range(4)], ranks
    # One model on every rank: the job's assertReplicaIntegrity passed and the bytes agree.
    assert len({out["shared"] for out in ranks.values()}) == 1
    assert len({out["weights"] for out in ranks.values()}) == 1, ranks
    vocab, dims = RARE + 2, CONTEXT
    for out in ranks.values():
        # Embedding, projection and both blocks' weights (in their nested sequentials) count and train.
        assert out["parameters"] == vocab * dims + dims * vocab + vocab + 2 * block_parameters(dims), out
        assert out["trainable"] == 3 + 2 * 12, out
    losses: dict[int, list[float]] = {}
    for line in api.get(f"/runs/{run_id}/logs").text.splitlines():
        entry = json.loads(line)
        if entry["text"].startswith("iteration "):
            losses.setdefault(entry["rank"], []).append(float(entry["text"].split("loss: ")[1]))
    assert sorted(losses) == [0, 1, 2, 3], losses
    steps = ((len(word_corpus().split()) + 1) // 4 - CONTEXT) // BATCH
    for rank, curve in losses.items():
        assert len(curve) == steps, (rank, curve)  # a step per batch, each logged
        assert all(math.isfinite(loss) for loss in curve), (rank, curve)
        # A cross-entropy over 10,000 words starts at chance, ln(10,000) = 9.21, and falls.
        assert abs(curve[0] - math.log(10_000)) < 0.3, (rank, curve)
        assert statistics.mean(curve[-4:]) < statistics.mean(curve[:4]) - 1.0, (rank, curve)  # measured: 9.2 to 7.4
