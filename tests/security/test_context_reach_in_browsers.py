"""What job code reaches through `context`, tried in real Chromium worker tabs.

A probe job tries, in one run, ranks outside its stage, keys that spell another run's parameter,
malformed parameter-server calls, values past their limits, forged page messages and a log flood;
each attempt is caught and its error kept in the output. Meanwhile another run on the other tabs
writes its own parameter and keeps reading it: it ends with the value it wrote. Jobs that break a
limit without catching fail with a reason that says what to change. The appliance's side of the
same boundaries, with simulated workers: tests/security/test_context_boundaries.py.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.support import save_and_run, wait_for_run

pytestmark = pytest.mark.e2e

RUN_BUDGET = 1024 * 1024  # parameter-server bytes per run on this appliance

# Writes 'w', then reads it back every 200 ms for the given seconds; emits every value it saw.
STEADY = """
const execution = new JobExecution('pmrfs');
execution.workerCount = 2;
execution.setInputFn(async function input() { return [0, 1]; });
execution.addStage(new MapStage(async function map(x) {
  if (context.getRank() === 0) await context.ps.write('w', new Float64Array([1, 2, 3]));
  await context.barrier('written');
  const seen = new Set();
  for (const end = Date.now() + %(seconds)d * 1000; Date.now() < end;) {
    seen.add(Array.from(await context.ps.read('w')).join(','));
    await new Promise(resolve => setTimeout(resolve, 200));
  }
  context.emit('seen-' + context.getRank(), [...seen].join(' | '));
  await context.onComplete();
}));
execution.start(jobRunner);
"""

PROBE = """
const execution = new JobExecution('pmrfs');
execution.workerCount = 2;
execution.setInputFn(async function input() { return [0, 1]; });
execution.addStage(new MapStage(async function map(x) {
  if (context.getRank() !== 0) return context.onComplete();
  const results = {};
  async function attempt(name, fn) {
    try { results[name] = 'allowed: ' + String(await fn()); } catch (e) { results[name] = e.message; }
  }
  await attempt('send -1', () => context.sendToRank(-1, 't', 1));
  await attempt('send 2', () => context.sendToRank(2, 't', 1));
  await attempt('send 0.5', () => context.sendToRank(0.5, 't', 1));
  await attempt('send "1"', () => context.sendToRank('1', 't', 1));
  await attempt('direct 2', () => context.sendToRank(2, 't', 1, {direct: true}));
  await attempt('receive 7', () => context.receiveFromRank(7, 't', {timeout: 1000}));
  await attempt('read w', () => context.ps.read('w'));
  await attempt('write lookalike', () => context.ps.write('../%(other)d/A/w', new Float64Array([6, 6, 6])));
  await attempt('read lookalike', async () => Array.from(await context.ps.read('../%(other)d/A/w')));
  await attempt('write w', () => context.ps.write('w', new Float64Array([7, 7, 7])));
  await attempt('unknown update', () => context.ps.update('w', new Float64Array(3), 'steal'));
  await attempt('wrong dtype', () => context.ps.update('w', new Float32Array(3)));
  await attempt('not typed', () => context.ps.write('w', [1, 2, 3]));
  await attempt('empty key', () => context.ps.read(''));
  await attempt('over 64 MiB', () => context.ps.write('big', new Uint8Array(64 * 1024 * 1024 + 1)));
  await attempt('over the run budget', () => context.ps.write('budget', new Uint8Array(%(budget)d + 1)));
  const forged = {type: 'ps', id: 1, op: 'write', key: 'w', dtype: 'float64', data: new Float64Array(3).buffer};
  await attempt('postMessage', () => postMessage(forged));
  await attempt('self.postMessage', () => self.postMessage({type: 'log', level: 'error', text: 'forged'}));
  context.emit('results', JSON.stringify(results));
  context.log('L'.repeat(5000));
  for (let i = 0; i < 10100; i++) context.log('flood ' + i);
  await context.onComplete();
}));
execution.start(jobRunner);
"""

UNKNOWN_UPDATE = """
const execution = new JobExecution('pmrfs');
execution.workerCount = 1;
execution.setInputFn(async function input() { return [0]; });
execution.addStage(new MapStage(async function map(x) {
  await context.ps.update('w', new Float64Array(3), 'steal');
  await context.onComplete();
}));
execution.start(jobRunner);
"""

MANY_BLOBS = """
const execution = new JobExecution('pmrfs');
execution.workerCount = 1;
execution.setInputFn(async function input() { return [0]; });
execution.addStage(new MapStage(async function map(x) {
  for (let i = 0; i < 4100; i++) { context.emit('k' + i, i); await context.flush(); }
  await context.onComplete();
}));
execution.start(jobRunner);
"""


@pytest.fixture(scope="module")
def appliance(appliance_with):
    return appliance_with(ps_max_bytes_per_run=RUN_BUDGET)


def state(client, run_id: int) -> str:
    return client.get(f"/runs/{run_id}").json()["state"]


def output(client, run_id: int) -> dict:
    return dict(json.loads(line) for line in client.get(f"/runs/{run_id}/output").text.splitlines())


def test_job_code_reaches_only_its_own_ranks_and_parameters(api, workers):  # noqa: F811
    steady = save_and_run(api, "steady", STEADY % {"seconds": 40})
    deadline = time.monotonic() + 60
    while state(api, steady) != "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    probe = save_and_run(api, "probe", PROBE % {"other": steady, "budget": RUN_BUDGET})
    probed = wait_for_run(api, probe)
    logs = api.get(f"/runs/{probe}/logs").text
    assert probed["state"] == "succeeded", probed["reason"] + logs[-3000:]
    # The steady run still reads after every write of the probe.
    assert state(api, steady) == "running"

    results = json.loads(output(api, probe)["results"])
    for name, rank in (("send -1", -1), ("send 2", 2), ("send 0.5", 0.5), ('send "1"', "1")):
        call = f"sendToRank({rank}, 't')"
        assert results[name] == f"{call}: {rank} is not a rank of this stage (0 to 1)", name
    assert results["direct 2"] == "sendToRank(2, 't'): 2 is not a rank of this stage (0 to 1)"
    assert results["receive 7"] == "receiveFromRank(7, 't'): 7 is not a rank of this stage (0 to 1)"
    assert results["read w"] == "context.ps.read('w') failed: no parameter 'w' in group A (write it first)"
    assert results["write lookalike"] == "allowed: 1"
    assert results["read lookalike"] == "allowed: 6,6,6"
    assert results["write w"] == "allowed: 1"
    assert results["unknown update"] == (
        "context.ps.update('w', steal): no update function steal (built in: add, max, min, mul, replace; "
        "registered: none)"
    )
    assert results["wrong dtype"] == (
        "context.ps.update('w', add) failed: an update of 'w' must be 3 float64 values (it was 3 float32 values)"
    )
    assert results["not typed"].startswith("context.ps.write('w'): values are typed arrays (Float32Array,")
    assert results["empty key"] == "context.ps.read(''): the key must be a string of 1 to 200 characters"
    assert results["over 64 MiB"] == "context.ps.write('big'): values are at most 64 MiB"
    assert results["over the run budget"].startswith("context.ps.write('budget') failed: the run's parameter-server")
    assert f"this appliance allows {RUN_BUDGET} per run (PEERMR_PS_MAX_BYTES_PER_RUN)" in results["over the run budget"]
    refused = "postMessage is not available to job code: it reaches the page through context only"
    assert results["postMessage"] == results["self.postMessage"] == refused
    assert "forged" not in logs

    # A long line is cut; a flood is capped with a note.
    assert "L" * 2000 in logs and "L" * 2001 not in logs
    assert "flood 9000" in logs and "flood 10099" not in logs
    assert "more than 10000 log lines: the rest are dropped" in logs

    ran = wait_for_run(api, steady)
    assert ran["state"] == "succeeded", ran["reason"]
    assert output(api, steady) == {"seen-0": "1,2,3", "seen-1": "1,2,3"}


def test_a_job_past_a_limit_fails_with_the_reason_and_others_run_on(api, workers):  # noqa: F811
    unknown = save_and_run(api, "unknown-update", UNKNOWN_UPDATE)
    many = save_and_run(api, "many-blobs", MANY_BLOBS)
    steady = save_and_run(api, "steady", STEADY % {"seconds": 3})
    failed = wait_for_run(api, unknown)
    assert failed["state"] == "failed"
    assert "no update function steal (built in: add, max, min, mul, replace; registered: none)" in failed["reason"]
    failed = wait_for_run(api, many, timeout=300)
    assert failed["state"] == "failed"
    assert "too many output blobs (more than 4096) for one task: flush less often" in failed["reason"]
    ran = wait_for_run(api, steady)
    assert ran["state"] == "succeeded", ran["reason"]
    assert output(api, steady) == {"seen-0": "1,2,3", "seen-1": "1,2,3"}
