"""What the engine keeps of its own steps: each move of an attempt with the cause it handled, the
invariants a step must not break, and what each reason to unbind a worker does."""

from __future__ import annotations

import pytest

from appliance.jobs import invariants
from appliance.jobs.engine.placement import EFFECTS, Unbind
from appliance.jobs.execution import Output, RunExecution, TaskEvent
from tests.unit.test_job_execution import finish, run_ready, spec, started


def test_every_move_names_the_stimulus_that_caused_it():
    run = RunExecution(1, spec("map"))
    started(run, ["w0", "w1"])
    run.transitions.because("round")
    [first] = run_ready(run)
    run.transitions.because("TaskDone:w0")
    finish(run, first, [0, 1])
    moves = [(t.task_id, t.before, t.event, t.after, t.stimulus.split("#")[0]) for t in run.transitions]
    assert moves == [
        (first.id, "waiting", TaskEvent.START, "staging", "round"),
        (first.id, "staging", TaskEvent.LAUNCH, "running", "round"),
        (first.id, "running", TaskEvent.FINISH, "done", "TaskDone:w0"),
    ]
    ids = {t.stimulus for t in run.transitions}
    assert len(ids) == 2  # each cause gets an id of its own, even when the same kind comes again


def test_a_backup_race_and_a_lost_worker_keep_every_invariant():
    run = RunExecution(1, spec("map", "reduce", workers=3))
    started(run, ["w0", "w1", "w2"])
    finish(run, run_ready(run)[0], [0, 1, 2])
    maps = sorted(run_ready(run), key=lambda t: t.rank)
    invariants.check(run)
    backup = run.backup(maps[2], "w9")
    invariants.check(run)
    run.running(backup)  # its inputs copied, its task-assign sent
    loser = maps[2].id
    finish(run, backup, [0, 1, 2])  # the backup wins: the primary's page is told to drop its attempt
    assert run.take_cancels() == [(loser, "w2")]
    invariants.check(run)
    run.lose_worker("w1")
    invariants.check(run)


def test_a_step_that_breaks_an_invariant_is_named():
    run = RunExecution(7, spec("map"))
    run.talking = frozenset({0})  # a run whose ranks talk to each other
    started(run, ["w0", "w0"])  # one worker holding two of its ranks
    [first] = run_ready(run)
    first.state = "waiting"  # and an attempt under way that says it waits
    with pytest.raises(invariants.InvariantBroken) as broken:
        invariants.check(run)
    assert "run 7" in str(broken.value)
    assert "the active set is not the attempts staging or running" in str(broken.value)
    assert "workers w0 hold two ranks of a run whose ranks talk" in str(broken.value)


def test_a_done_count_that_drifts_is_caught():
    run = RunExecution(1, spec("map"))
    started(run, ["w0", "w1"])
    [first] = run_ready(run)
    run.done(first, [Output(0, "a" * 64, 1, 1, {"w0"})], emits=1, cpu_ms=1)
    run.groups["A"].stage_done[-1] = 0
    with pytest.raises(invariants.InvariantBroken, match="counts 0 done tasks in stage -1, not 1"):
        invariants.check(run)


def test_every_reason_to_unbind_says_what_follows():
    assert set(EFFECTS) == set(Unbind)
    sent_away = {cause for cause, effect in EFFECTS.items() if effect.exclude}
    assert sent_away == {Unbind.TIMED_OUT, Unbind.BAD_REPORT, Unbind.HUNG, Unbind.BLAMED, Unbind.OUTPACED}
    # Whoever leaves a rank for good has its work computed again; a helper whose attempt ended keeps
    # nothing; a browser outpaced handed its rank over first (its range starts again there).
    assert all(EFFECTS[c].vacate for c in (*sent_away - {Unbind.OUTPACED}, Unbind.DISCONNECTED, Unbind.NOT_BACK))
    assert not any(EFFECTS[c].vacate for c in (Unbind.EXTRA_ENDED, Unbind.OUTRUN, Unbind.OUTPACED, Unbind.RUN_ENDED))
    # After a restart the recovery logs the workers not back at once, not each loss on its own.
    assert not EFFECTS[Unbind.NOT_BACK].announce
