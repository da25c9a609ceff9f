"""Which stages talk to other ranks (never speculated): read from the code, not from comments or strings."""

from __future__ import annotations

import msgspec
import pytest

from appliance.jobs.spec import JobSpec, extract_spec
from appliance.jobs.stage_talks import talks_to_ranks


@pytest.mark.parametrize(
    "source",
    [
        "async function f(x) { await context.sendToRank(1, 'x', x); }",
        "async function f(x) { const m = await context.receiveFromRank(0, 'x'); }",
        "async function f(x) { const s = await context.allReduce(new Float32Array(1)); }",
        "async function f(x) { await context?.barrier(); }",
        "async function f(x) { const {allGather} = context; await allGather(x); }",
        "async function f(x) { await context['broadcast'](x, 0); }",
        "async function f(x) { await context.assertReplicaIntegrity(weights); }",
        "async function f(x) { await context.ps.read('w'); }",
        "async function f(x) { await context.ps.update('w', x); }",
        "async function f(x) { const {ps} = context; await ps.write('w', x); }",
        "async function f(x) { const ps = context.ps; await ps.clock(); }",
        "async function f(x) { context.log(`step ${await context.allReduce(x)}`); }",
        "async function f(x) { const s = /a'b/.test(x) ? 1 : 0; await context.barrier(); }",
        "async function f(x) { const a = x / 2; await context.barrier(); const b = x / 3; }",
        "async function f(x) { context.log(`${x ? `a ${x}` : '}'}`); await context.barrier(); }",
    ],
)
def test_a_call_in_code_talks(source):
    assert talks_to_ranks(source)


@pytest.mark.parametrize(
    "source",
    [
        "async function f(x) { context.emit(x, 1); }",
        "async function f(x) { context.emit(x, 1); }  // don't allReduce here",
        "async function f(x) { await fetch('https://example.com/allReduce'); }",
        "async function f(x) { /* context.ps.read('w') came later */ context.emit(x, 1); }",
        "async function f(x) { context.log('before the barrier'); }",
        'async function f(x) { context.log("sendToRank is not used"); }',
        "async function f(x) { context.log(`no broadcast, ${x} records`); }",
        "async function f(x) { const broadcastX = 1; context.emit(x, broadcastX); }",
        "async function f(x) { const myAllReduce = (a) => a; context.emit(x, myAllReduce(x)); }",
        "async function f(x) { const s = x.replace(/allReduce/g, ''); context.emit(s, 1); }",
        "async function f(x) { const ps = points(); context.emit(ps.length, 1); }",
    ],
)
def test_the_same_words_outside_code_do_not(source):
    assert not talks_to_ranks(source)


def test_the_job_spec_records_it_for_each_stage():
    spec = extract_spec(
        """
        const execution = new JobExecution('pmrfs');
        execution.setInputFn(async function input() { return [1, 2]; });
        execution.addStage(new MapStage(async function map(x) {
          await context.allReduce(new Float32Array(1));
        }));
        execution.addStage(new ReduceStage(async function reduce(keyToValues) {
          context.log('allReduce');  // context.ps.read() is not called
          await context.onComplete();
        }));
        execution.start(jobRunner);
        """
    )
    assert [stage.talks_to_ranks for stage in spec.stages] == [True, False]
    assert b'"talksToRanks":true' in msgspec.json.encode(spec)


def test_a_spec_stored_before_it_was_recorded_finds_it_from_the_source():
    stored = {
        "stages": [
            {"kind": "map", "source": "async function map(x) { await context.ps.update('w', x); }"},
            {"kind": "reduce", "source": "async function reduce(k, vs) { context.log('ps.read'); }"},
        ]
    }
    spec = msgspec.json.decode(msgspec.json.encode(stored), type=JobSpec)
    assert [stage.talks_to_ranks for stage in spec.stages] == [True, False]
