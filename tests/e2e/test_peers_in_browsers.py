"""Ranks talking to ranks on real Chromium workers: peer messages, collectives, the parameter server.

Four worker tabs (one browser, a context each) hold the ranks; tests that close a tab mid-run
add one back so the next test has four again.
"""

from __future__ import annotations

import importlib.util
import re
import time

import httpx
import pytest
from sklearn.linear_model import LogisticRegression

from tests.browsers import Workers
from tests.e2e.test_jobs_in_browsers import EXAMPLES, logs, output, save_and_run, wait
from tests.s3_server import REGION
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("no_run_left")]

# The example's data set, generated in Python as its input function generates it in the browsers.
_spec = importlib.util.spec_from_file_location("logreg_data", EXAMPLES / "logreg_data.py")
logreg_data = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(logreg_data)


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    server = Appliance(tmp_path_factory.mktemp("peers") / "data").start()
    yield server
    server.stop()


def job(workers: int, body: str, **settings) -> str:
    lines = "".join(f"execution.{k} = {v};\n" for k, v in settings.items())
    return f"""
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = {workers};
{lines}execution.setInputFn(async function input() {{ return Array.from({{length: {workers}}}, (_, i) => i); }});
execution.addStage(new MapStage(async function map(x) {{
{body}
  await context.onComplete();
}}));
execution.start(jobRunner);
"""


def succeeded(api: httpx.Client, run_id: int, timeout: float = 240) -> dict:
    run = wait(api, run_id, timeout)
    assert run["state"] == "succeeded", run["reason"] + "\n" + logs(api, run_id)[-4000:]
    return dict(output(api, run_id))


RING = """
  const r = context.getRank(), n = context.getWorkerCount();
  const next = (r + 1) % n, prev = (r + n - 1) % n;
  const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));
  for (const direct of [false, true]) {
    const mode = direct ? 'direct' : 'indirect';
    // Send first, then receive.
    await context.sendToRank(next, 'sent-first', {from: r, mode}, {direct});
    const first = await context.receiveFromRank(prev, 'sent-first', {direct});
    // Receive first (the receive is waiting before anyone sends), then send.
    const pending = context.receiveFromRank(next, 'received-first', {direct});
    await sleep(300);
    await context.sendToRank(prev, 'received-first', new Float64Array([r, r * 10.5]), {direct});
    const second = await pending;
    context.emit(`${mode}-${r}`, {first, second: Array.from(second), typed: second.constructor.name});
  }
  if (r === 0) {
    const began = Date.now();
    try {
      await context.receiveFromRank(1, 'never-sent', {timeout: 1500});
      context.emit('timeout', 'resolved');
    } catch (e) {
      context.emit('timeout', {message: e.message, waited: Date.now() - began >= 1400});
    }
  }
"""


def test_ring_messages_in_both_orders_indirect_and_direct_and_a_receive_timeout(api, workers):
    out = succeeded(api, save_and_run(api, "ring", job(4, RING)))
    for mode in ("indirect", "direct"):
        for r in range(4):
            prev, nxt = (r + 3) % 4, (r + 1) % 4
            assert out[f"{mode}-{r}"] == {
                "first": {"from": prev, "mode": mode},
                "second": [nxt, nxt * 10.5],
                "typed": "Float64Array",
            }
    assert out["timeout"]["waited"] is True
    assert "timed out after 1500 ms" in out["timeout"]["message"]


COLLECTIVES = """
  const r = context.getRank(), n = context.getWorkerCount();
  await context.barrier('start');
  for (const size of [1, 3, 4, 5, 1000, 65537]) {
    const v = new Float64Array(size);
    for (let i = 0; i < size; i++) v[i] = (r + 1) * ((i % 7) + 1) + r / 4;
    const sum = await context.allReduce(v, 'sum', `sum-${size}`);
    const max = await context.allReduce(new Int32Array(v), 'max', `max-${size}`);
    const mean = await context.allReduce(Float32Array.from(v), 'mean', `mean-${size}`);
    context.emit(`${size}-${r}`, {
      kind: sum.constructor.name, length: sum.length,
      sum: size <= 1000 ? Array.from(sum) : [sum[0], sum[size - 1], sum.reduce((a, b) => a + b, 0)],
      max: Array.from(max.slice(0, 7)), maxKind: max.constructor.name,
      mean: Array.from(mean.slice(0, 7)),
    });
  }
  const greeting = await context.broadcast(2, r === 2 ? {hello: 'from rank 2', values: [1, 2]} : null, 'greet');
  const squares = await context.allGather(r * r, 'squares');
  const shard = context.shard(Array.from({length: 10}, (_, i) => i));
  const rng = context.rng();
  context.emit(`other-${r}`, {greeting, squares, shard, random: [rng(), rng(), rng()]});
"""


def p2p_bytes_billed(appliance: Appliance, run_id: int, at_least: int) -> int:
    """The peer-to-peer bytes charged to the run's owner, once the closed links were metered."""
    sql = (
        f"SELECT SUM(quantity) FROM billing_usage WHERE run = {run_id} AND resource = 'p2p_bytes' AND side = 'consumer'"
    )
    deadline = time.monotonic() + 30
    while (billed := appliance.query(sql)[0][0] or 0) < at_least and time.monotonic() < deadline:
        time.sleep(0.5)
    return billed


def test_collectives_give_the_exact_answer_on_every_rank(appliance, api, workers):
    run_id = save_and_run(api, "collectives", job(4, COLLECTIVES, seed=1234))
    out = succeeded(api, run_id)
    for size in (1, 3, 4, 5, 1000, 65537):
        values = [[(r + 1) * (i % 7 + 1) + r / 4 for i in range(size)] for r in range(4)]
        sums = [sum(column) for column in zip(*values, strict=True)]
        for r in range(4):
            got = out[f"{size}-{r}"]
            assert got["kind"] == "Float64Array" and got["length"] == size
            expected = sums if size <= 1000 else [sums[0], sums[-1], sum(sums)]
            assert got["sum"] == pytest.approx(expected, rel=1e-12)
            assert got["maxKind"] == "Int32Array"
            assert got["max"] == [max(int(v[i]) for v in values) for i in range(min(size, 7))]
            assert got["mean"] == pytest.approx([s / 4 for s in sums[:7]], rel=1e-6)
    shards = []
    for r in range(4):
        other = out[f"other-{r}"]
        assert other["greeting"] == {"hello": "from rank 2", "values": [1, 2]}
        assert other["squares"] == [0, 1, 4, 9]
        shards.append(other["shard"])
    # Contiguous parts, the first len % ranks one longer (as input chunks are cut).
    assert shards == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    randoms = [tuple(out[f"other-{r}"]["random"]) for r in range(4)]
    assert len(set(randoms)) == 4 and all(0 <= x < 1 for t in randoms for x in t)
    # Direct links are billed as peer-to-peer bytes: both ends report, the smaller count is charged
    # twice (egress and ingress). Each allReduce of S bytes sends 6 S over the links of 4 ranks.
    reduced = 65537 * (8 + 4 + 4)
    assert p2p_bytes_billed(appliance, run_id, 2 * 6 * reduced) >= 2 * 6 * reduced
    # The same seed gives the same numbers; another seed others.
    again = succeeded(api, save_and_run(api, "collectives-again", job(4, COLLECTIVES, seed=1234)))
    assert [tuple(again[f"other-{r}"]["random"]) for r in range(4)] == randoms
    other_seed = succeeded(api, save_and_run(api, "collectives-seed", job(4, COLLECTIVES, seed=99)))
    assert [tuple(other_seed[f"other-{r}"]["random"]) for r in range(4)] != randoms


def running_worker_of(api: httpx.Client, run_id: int, marker: str, timeout: float = 120) -> str:
    """The worker id whose log shows ``marker`` (job code logs it once it is where the test wants it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in logs(api, run_id).splitlines():
            if marker in line:
                return re.search(r'"source":\s*"([^"]+)"', line).group(1)
        time.sleep(0.2)
    raise AssertionError(f"{marker!r} never logged: {logs(api, run_id)[-2000:]}")


def close_worker(workers: Workers, worker_id: str) -> None:
    tab = next(t for t in workers.tabs if t.locator("#worker-id").text_content() == worker_id)
    workers.close(tab)


REPLACED = """
  const r = context.getRank();
  if (r === 0) {
    await context.sendToRank(1, 'early', {note: 'sent before the replacement joined'});
    context.emit('sender', 'done');
  } else {
    context.log('rank 1 waiting');
    await new Promise(resolve => setTimeout(resolve, 10000));  // time for the test to close this tab
    context.emit('received', await context.receiveFromRank(0, 'early'));
  }
"""


def test_an_indirect_send_reaches_the_replacement_of_a_closed_rank(api, workers):
    run_id = save_and_run(api, "replaced", job(2, REPLACED))
    close_worker(workers, running_worker_of(api, run_id, "rank 1 waiting"))
    workers.add(1)
    out = succeeded(api, run_id)
    assert out["received"] == {"note": "sent before the replacement joined"}
    assert "took over rank 1" in logs(api, run_id)


MID_COLLECTIVE = """
  const r = context.getRank();
  for (let k = 0; k < 60; k++) {
    const v = new Float32Array(200000).fill((r + 1) * (k + 1));
    const sum = await context.allReduce(v, 'sum', `step-${k}`);
    context.log(`step ${k} sum ${sum[0]} ${sum[199999]} end`);
    if (k === 3) context.log('collectives under way');
  }
"""


def test_a_rank_closed_mid_collective_still_gives_the_right_sums(api, workers):
    run_id = save_and_run(api, "mid-collective", job(3, MID_COLLECTIVE))
    victim = running_worker_of(api, run_id, "collectives under way")
    close_worker(workers, victim)
    workers.add(1)
    run = wait(api, run_id, 240)
    text = logs(api, run_id)
    # Never a wrong or partial sum: every step any rank finished has 1+2+3 times (k + 1) everywhere.
    steps = re.findall(r"step (\d+) sum (\S+) (\S+) end", text)
    assert steps
    for k, first, last in steps:
        assert float(first) == float(last) == 6 * (int(k) + 1)
    # The other ranks' allReduce failed on the lost rank (PeerLostError names it); the stage started
    # again once the replacement joined, and every rank went through all 60 steps.
    assert run["state"] == "succeeded", run["reason"] + text[-3000:]
    assert re.search(r"starts again: rank \d of group A failed during allReduce 'step-\d+'", text), text[-3000:]
    assert {int(k) for k, _, _ in steps} == set(range(60))


@pytest.mark.parametrize("staleness", [0, 2])
def test_logistic_regression_on_the_parameter_server_matches_scikit_learn(api, workers, staleness):
    script = (EXAMPLES / "logistic-regression.js").read_text()
    run_id = save_and_run(api, f"logreg-{staleness}", script, staleness=staleness)
    out = succeeded(api, run_id, timeout=300)
    x, y = logreg_data.generate()
    reference = LogisticRegression(max_iter=1000).fit(x, y).score(x, y)
    accuracy = logreg_data.accuracy(out["weights"], x, y)
    assert abs(accuracy - reference) <= 0.01, (accuracy, reference)
    # The trained weights are downloadable from the parameter server after the run.
    params = api.get(f"/runs/{run_id}/parameters").json()
    assert any(p["key"] == "w" for p in params)


def test_tensorflow_js_data_parallel_training_keeps_every_rank_identical(api, workers):
    # The example as shipped: TensorFlow.js from the appliance (/static/vendor/tfjs), gradients
    # averaged with allReduce each step.
    run_id = save_and_run(api, "tfjs", (EXAMPLES / "tfjs-data-parallel.js").read_text())
    run = wait(api, run_id, 300)
    assert run["state"] == "succeeded", run["reason"] + "\n" + logs(api, run_id)[-4000:]
    records = output(api, run_id)
    checksums = [value for key, value in records if key == "weights checksum"]
    assert len(checksums) == 4 and len(set(checksums)) == 1, checksums
    out = dict(records)
    assert out["test accuracy"] >= 0.95, out


def test_indirect_messages_of_an_s3_run_go_through_the_accounts_bucket(appliance, api, workers, s3):
    bucket = s3.create_bucket("peer-data")
    admin = appliance.client()
    admin.login(ADMIN_EMAIL, ADMIN_PASSWORD)
    settings = {"provider": "s3", "endpoint_url": s3.url, "region": REGION, "bucket": bucket}
    saved = admin.form("/ui/cloud", {**settings, "access_key_id": "test-key", "secret_access_key": "test-secret"})
    assert saved.status_code in (200, 303), saved.text
    admin.form("/ui/cloud/cors")
    script = job(4, RING).replace("storageType = 'pmrfs'", "storageType = 's3'")
    run_id = save_and_run(api, "ring-s3", script)
    out = succeeded(api, run_id)
    for r in range(4):
        assert out[f"indirect-{r}"]["first"] == {"from": (r + 3) % 4, "mode": "indirect"}
        assert out[f"direct-{r}"]["second"] == [(r + 1) % 4, (r + 1) % 4 * 10.5]
    # The messages were objects under the run's prefix, deleted when it ended.
    deadline = time.monotonic() + 30
    prefix = f"peermr/runs/{run_id}/messages/"
    while s3.client().list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not s3.client().list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents")
