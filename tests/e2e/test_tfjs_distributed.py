"""TensorFlow.js trained across real Chromium workers without code changes.

The appliance's add-on (static/jobs/tf-data-parallel.js) makes `trainOnBatch(x, y, context)`
and `fit(x, y, {context})` average the gradients of the stage's ranks at each step, and
`context.assertReplicaIntegrity` checks that the ranks hold the same values. Four worker tabs hold
the ranks. Each test asserts the backend it trained on: `cpu` where the job sets it, else TF.js's
default in a task's Web Worker, `webgl` (drawn by Chromium's software renderer: no GPU here).
"""

from __future__ import annotations

import hashlib
import math
import re
import statistics

import pytest

from tests.e2e.test_jobs_in_browsers import EXAMPLES, logs, output, save_and_run, wait
from tests.e2e.test_peers_in_browsers import job

pytestmark = pytest.mark.e2e

SCRIPTS = "['/static/vendor/tfjs/tf.min.js', '/static/jobs/tf-data-parallel.js']"


# Within pytest's 300 s per test (pyproject.toml), which also counts the module's setup for its first
# test (the appliance and four worker tabs); each run here takes well under a minute.
def succeeded(api, run_id: int, timeout: float = 180) -> list:
    run = wait(api, run_id, timeout)
    assert run["state"] == "succeeded", run["reason"] + "\n" + logs(api, run_id)[-4000:]
    return output(api, run_id)


def documented_transformer() -> str:
    """The Transformer job docs/sdk.md shows, which must be docs/examples/tfjs-transformer.js."""
    sdk = (EXAMPLES.parent / "sdk.md").read_text()
    link = "[examples/tfjs-transformer.js](examples/tfjs-transformer.js), the whole job"
    block = re.search(r"```js\n(.*?)```", sdk[sdk.index(link) :], re.DOTALL)
    assert block, "no code block after the Transformer example's link in docs/sdk.md"
    return block.group(1)


def test_the_documented_transformer_trains_across_four_browsers_with_identical_weights(api, workers):
    # The job exactly as docs/sdk.md shows it, which is the example file.
    script = documented_transformer()
    assert script == (EXAMPLES / "tfjs-transformer.js").read_text()
    ranks = dict(succeeded(api, save_and_run(api, "transformer", script)))
    assert sorted(ranks) == [f"rank {r}" for r in range(4)], ranks
    # The same weights on every rank: the fingerprint assertReplicaIntegrity gave each (it also
    # checked the optimizer's state).
    assert len({out["weights"] for out in ranks.values()}) == 1, ranks
    for out in ranks.values():
        assert out["backend"] == "cpu"
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
    backend: tf.getBackend(), epochs, historyLoss: history.history.loss, shared, steps, notContext,
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
        assert out["backend"] == "cpu"
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
  context.emit(`rank ${rank}`, {backend: tf.getBackend(), same, differ, longer, bad});
"""


def test_assert_replica_integrity_raises_on_every_rank_when_one_rank_differs(api, workers):
    # The add-on alone in the job's scripts: it loads tf.min.js itself. By its URL of before it left
    # static/vendor/, as jobs written then name it: the sandboxes follow the redirect.
    script = job(4, INTEGRITY, scripts="['/static/vendor/tfjs/tf-data-parallel.js']")
    records = succeeded(api, save_and_run(api, "integrity", script))
    ranks = dict(records)
    assert sorted(ranks) == [f"rank {r}" for r in range(4)], records
    assert len({out["same"] for out in ranks.values()}) == 1
    for out in ranks.values():
        assert out["backend"] == "webgl"  # TF.js's default here: the job sets none
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


# A small causal language model written as models ported to TF.js from Keras or PyTorch often are,
# which is how the PeerMR documentation's Transformer is written, with nothing added for the
# add-on: custom layers keep their sublayers as properties (dense layers, an array of
# tf.sequential()s) and list no weights themselves; one reads its input as `inputs[0]`, another
# adds `inputs` to a tensor; the last layer gives logits (no softmax) to
# 'sparseCategoricalCrossentropy' with [batch, length] targets; Adam; trainOnBatch(x, y, context);
# no backend set, so TF.js takes its default (webgl here, the add-on's non-cpu cross-entropy).
# Each rank draws its own sequences (context.rng): token t + 1 is token t plus a stride of 1, 2 or
# 5, modulo the vocabulary. Small sizes and a high learning rate (0.01) make the loss fall from
# chance (ln 97 = 4.57) to about 1.7 in 20 steps (measured), each a second or two on webgl here.
LANGUAGE_MODEL = """
  const VOCAB = 97, LENGTH = 12, WIDTH = 24, HEADS = 2, BLOCKS = 2, BATCH = 16, STEPS = 20;
  const rank = context.getRank();

  class MaskedAttention extends tf.layers.Layer {
    static className = 'MaskedAttention';
    constructor(width, heads) {
      super({});
      this.qkv = tf.layers.dense({units: 3 * width, useBias: false});
      this.merge = tf.layers.dense({units: width});
      this.heads = heads;
    }
    build(shape) {
      this.qkv.build(shape);
      this.merge.build(shape);
    }
    call(inputs) {
      return tf.tidy(() => {
        const x = inputs[0];
        const [batch, length, width] = x.shape;
        const byHead = t => t.reshape([batch, length, this.heads, -1]).transpose([0, 2, 1, 3]);
        const [q, k, v] = tf.split(this.qkv.apply(x), 3, -1).map(byHead);
        // -1e9 on the scores of later positions: each position sees itself and earlier ones.
        const later = tf.linalg.bandPart(tf.ones([length, length]), 0, -1).sub(tf.eye(length)).mul(-1e9);
        const attention = tf.softmax(q.matMul(k, false, true).div(Math.sqrt(width / this.heads)).add(later));
        return this.merge.apply(attention.matMul(v).transpose([0, 2, 1, 3]).reshape([batch, length, width]));
      });
    }
  }

  class Block extends tf.layers.Layer {
    static className = 'Block';
    constructor(width, heads) {
      super({});
      const norm = () => tf.layers.layerNormalization({inputShape: [LENGTH, width]});
      this.branches = [
        tf.sequential({layers: [norm(), new MaskedAttention(width, heads)]}),
        tf.sequential({layers: [
          norm(), tf.layers.dense({units: 2 * width, activation: 'relu'}), tf.layers.dense({units: width}),
        ]}),
      ];
    }
    call(inputs) {
      return tf.tidy(() => {
        const mixed = tf.add(inputs, this.branches[0].apply(inputs));
        return tf.add(mixed, this.branches[1].apply(mixed));
      });
    }
  }

  const tokens = tf.input({shape: [LENGTH]});
  let hidden = tf.layers.embedding({inputDim: VOCAB, outputDim: WIDTH}).apply(tokens);
  for (let i = 0; i < BLOCKS; i++) hidden = new Block(WIDTH, HEADS).apply(hidden);
  const model = tf.model({inputs: tokens, outputs: tf.layers.dense({units: VOCAB}).apply(hidden)});
  model.compile({optimizer: tf.train.adam(0.01), loss: 'sparseCategoricalCrossentropy'});

  const random = context.rng();
  function batch() {
    const rows = [];
    for (let b = 0; b < BATCH; b++) {
      const stride = [1, 2, 5][Math.floor(3 * random())];
      let token = Math.floor(VOCAB * random());
      rows.push(Array.from({length: LENGTH + 1}, () => (token = (token + stride) % VOCAB)));
    }
    return tf.tidy(() => {
      const all = tf.tensor2d(rows);
      return [all.slice([0, 0], [BATCH, LENGTH]), all.slice([0, 1], [BATCH, LENGTH])];
    });
  }

  const losses = [];
  let initial;
  for (let step = 0; step < STEPS; step++) {
    const [x, y] = batch();
    losses.push(await model.trainOnBatch(x, y, context));
    tf.dispose([x, y]);
    // After the first step every rank holds rank 0's initial weights, moved by one step.
    initial ??= model.trainableWeights.map(w => w.read().clone());
  }
  const unchanged = model.trainableWeights
    .filter((w, i) => tf.tidy(() => w.read().equal(initial[i]).all().dataSync()[0]))
    .map(w => w.name);
  const slots = await model.optimizer.getWeights();  // Adam: its step count, then m and v of each weight
  context.emit(`rank ${rank}`, {
    backend: tf.getBackend(), losses, unchanged,
    trainable: model.trainableWeights.length, parameters: model.countParams(),
    weights: await context.assertReplicaIntegrity(model.getWeights()),
    optimizer: await context.assertReplicaIntegrity(slots),
    optimizerSlots: slots.map(s => s.name), steps: slots[0].tensor.dataSync()[0],
  });
"""


def test_a_language_model_written_as_keras_ports_are_trains_across_four_browsers(api, workers):
    ranks = dict(succeeded(api, save_and_run(api, "language-model", job(4, LANGUAGE_MODEL, scripts=SCRIPTS))))
    assert sorted(ranks) == [f"rank {r}" for r in range(4)], ranks
    # No backend set: TF.js's default in a task's Web Worker of these tabs (WebGL in an
    # OffscreenCanvas, drawn by Chromium's software renderer).
    assert {out["backend"] for out in ranks.values()} == {"webgl"}, ranks
    # One model and one optimizer state on every rank (each assertReplicaIntegrity passed on every
    # rank and gave every rank the same fingerprint).
    assert len({out["weights"] for out in ranks.values()}) == 1
    assert len({out["optimizer"] for out in ranks.values()}) == 1
    width, vocab = 24, 97
    norms, attention = 2 * 2 * width, 3 * width * width + (width + 1) * width  # qkv has no bias
    block = norms + attention + (width + 1) * 2 * width + (2 * width + 1) * width  # and the MLP
    for out in ranks.values():
        # The blocks' weights, held by their sublayers, are the model's: 1 + 2 x 11 + 2 of them.
        assert out["trainable"] == 25, out
        assert out["parameters"] == vocab * width + 2 * block + width * vocab + vocab, out
        # Adam's state: the step count, then two moments for each of the 25 weights.
        assert out["steps"] == 20 and len(out["optimizerSlots"]) == 1 + 2 * 25, out
        losses = out["losses"]
        assert all(math.isfinite(loss) for loss in losses), losses
        # The cross-entropy of logits starts at chance, ln 97, and falls.
        assert abs(losses[0] - math.log(vocab)) < 0.5, losses
        assert statistics.mean(losses[-5:]) < statistics.mean(losses[:5]) - 1.5, losses
    # Every weight trained, the sublayers' included.
    assert ranks["rank 0"]["unchanged"] == [], ranks["rank 0"]
    # Each rank trained on its own batches: their losses differ.
    assert len({tuple(out["losses"]) for out in ranks.values()}) == 4
