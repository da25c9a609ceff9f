"""A run's task graph without I/O: partitioning, what may start, and what a lost worker costs."""

from __future__ import annotations

import typing

import pytest

from appliance.jobs import checkpoints
from appliance.jobs.execution import (
    CHUNKS_PER_RANK,
    INPUT_STAGE,
    OUTCOMES,
    TRANSITIONS,
    IllegalTransition,
    Output,
    RunExecution,
    TaskEvent,
    TaskState,
)
from appliance.jobs.spec import JobSpec, StageSpec, Validation


def spec(*kinds: str, workers: int = 2, groups: int = 1, timeout: int = 3600, chunks: str = "rank") -> JobSpec:
    """A job of these stages; one task per rank unless ``chunks`` is "auto"."""
    return JobSpec(
        stages=[StageSpec(kind=k, source="async function f(x) {}", timeout=timeout, chunks=chunks) for k in kinds],
        worker_count=workers,
        group_count=groups,
        input_source="async function input() { return []; }",
    )


def started(run: RunExecution, workers: list[str], group: str = "A") -> None:
    for rank, worker in enumerate(workers):
        run.assign(group, rank, worker)


def finish(run: RunExecution, task, partitions: list[int], holder: str | None = None) -> None:
    outputs = [Output(p, f"{task.id}-{p}".ljust(64, "0"), 10, 1, {holder or task.worker_id}) for p in partitions]
    run.done(task, outputs, emits=len(partitions), cpu_ms=1)
    for consumer in run.all_tasks():  # as the coordinator: streaming reduces get the pieces of a done map
        if run.waiting_for_input(consumer) and task.primary is None and task in run.producers(consumer):
            feed(run, consumer)


def feed(run: RunExecution, task) -> None:
    """As the coordinator: a streaming task is sent the pieces of its done producers (copies that
    succeed at once), and runs once it has them all; any other task runs."""
    for producer in run.producers(task) if task.streaming else []:
        if producer.state == "done":
            run.fed(task, run.producer_index(producer))
    if not task.awaiting:
        run.running(task)


def ready_tasks(run: RunExecution) -> list:
    return [task for task, _ in run.ready()]


def run_ready(run: RunExecution) -> list:
    ready = run.ready()
    for task, worker in ready:
        run.start(task, worker)
        feed(run, task)
    return [task for task, _ in ready]


def test_partitioning_follows_what_reads_the_output():
    run = RunExecution(1, spec("map", "map", "reduce", "map"))
    assert [run.partitioning(s) for s in (INPUT_STAGE, 0, 1, 2, 3)] == ["chunks", "rank", "hash", "rank", "rank"]


def test_the_input_runs_alone_then_map_tasks_start_per_rank_without_a_barrier():
    run = RunExecution(1, spec("map", "map"))
    started(run, ["w0", "w1"])
    [first] = run_ready(run)
    assert (first.stage, first.rank) == (INPUT_STAGE, 0)
    finish(run, first, [0, 1])
    maps = run_ready(run)
    assert {(t.stage, t.rank) for t in maps} == {(0, 0), (0, 1)}
    finish(run, maps[1], [1])
    # Rank 1's next map starts at once; rank 0's waits for its own first map only.
    assert [(t.stage, t.rank) for t in run_ready(run)] == [(1, 1)]
    assert [o.location for o in run.inputs(run.task("A", 1, 1))] == [maps[1].outputs[0].location]


def test_a_reduce_starts_once_its_ranks_map_is_done_and_runs_once_every_producers_pieces_came():
    run = RunExecution(1, spec("map", "reduce"))
    started(run, ["w0", "w1"])
    finish(run, run_ready(run)[0], [0, 1])
    maps = sorted(run_ready(run), key=lambda t: t.rank)
    finish(run, maps[0], [0, 1])
    # Rank 0's reduce starts with its own map's piece and waits for rank 1's; rank 1's waits for its map.
    [early] = run_ready(run)
    assert (early.stage, early.rank, early.state, early.streaming, early.awaiting) == (1, 0, "staging", True, {1})
    assert run.waiting_for_input(early)
    finish(run, maps[1], [0, 1])  # its pieces are sent to rank 0's reduce, which runs
    assert early.state == "running" and not run.waiting_for_input(early)
    [late] = run_ready(run)
    assert (late.rank, late.state, late.streaming) == (1, "running", False)  # everything was in place
    assert len(run.inputs(early)) == 2  # partition 0 from both producers


def test_a_reduce_waits_for_every_producer_when_attempts_must_agree_or_it_talks_to_other_ranks():
    validated = spec("map", "reduce")
    validated.validation = Validation(replicas=2)
    talking = spec("map", "reduce")
    talking.stages[1] = StageSpec(kind="reduce", source="async function r(x) { await context.allReduce(1); }")
    for job in (validated, talking):
        run = RunExecution(1, job)
        assert not run._may_stream(run.task("A", 1, 0))
    cloud = RunExecution(1, spec("map", "reduce"), cloud=True)
    assert not cloud._may_stream(cloud.task("A", 1, 0))


def test_a_streaming_reduce_is_neither_idle_stalled_slow_nor_overdue_while_it_waits_for_maps():
    run = RunExecution(1, spec("map", "reduce", timeout=5))
    started(run, ["w0", "w1"])
    finish(run, run_ready(run)[0], [0, 1])
    maps = sorted(run_ready(run), key=lambda t: t.rank)
    finish(run, maps[0], [0, 1])
    [early] = run_ready(run)
    early.worker_timeout = 10
    later = early.started + 3600
    assert run.overdue_stage(now=later) in (None, ("A", 0))  # the map stage's own timeout, not the reduce's
    assert early not in run.idle_too_long(now=later)
    assert early not in run.newly_stalled(60, now=later)
    assert run.speculable(early, now=later) is None
    finish(run, maps[1], [0, 1])
    # Its timeouts count from the moment it had its whole input.
    assert early.launched >= early.started and early.last_activity == early.launched
    assert run.overdue_stage(now=early.launched + 4) is None
    assert run.overdue_stage(now=early.launched + 6) == ("A", 1)


def test_a_reduce_that_streamed_is_judged_slow_by_its_time_since_its_whole_input_came():
    run, maps = map_stage_running()
    for t in maps[:3]:
        finish(run, t, [0, 1, 2, 3])
    reduces = {t.rank: t for t in run_ready(run)}  # ranks 0-2 start streaming, waiting for rank 3's map
    for t in reduces.values():
        t.started = 100.0
    finish(run, maps[3], [0, 1, 2, 3])  # at 200 s, say: the three get their last piece and run
    reduces[3] = run_ready(run)[0]
    for t in reduces.values():
        t.launched = 200.0
    for t in (reduces[0], reduces[1], reduces[3]):
        run.done(t, [], 1, 5, now=202.0)  # 2 s of work each, 102 s since rank 0-1 started
    reduces[2].emits = 1  # emitting as fast as the others did: not lagging
    # Rank 2's reduce has worked 2.5 s, under 1.5 x the 2 s median: not slow, though it started 102.5 s ago.
    assert run.speculable(reduces[2], now=202.5) is None
    assert run.speculable(reduces[2], now=203.5).startswith("slow: 3.5 s, the stage's finished tasks took 2.0 s")


def test_a_streaming_reduce_starts_again_only_when_a_map_whose_pieces_it_was_sent_runs_again():
    run = RunExecution(1, spec("map", "reduce", workers=3))
    started(run, ["w0", "w1", "w2"])
    finish(run, run_ready(run)[0], [0, 1, 2])
    maps = sorted(run_ready(run), key=lambda t: t.rank)
    finish(run, maps[0], [0, 1, 2])
    finish(run, maps[1], [0, 1, 2])
    reduces = {t.rank: t for t in run_ready(run)}
    assert reduces[0].awaiting == {2} and reduces[1].awaiting == {2}
    assert run.take_cancels() == []
    # w2 vanishes mid-map: its map runs again; the reduces were sent nothing of it, so they wait on.
    run.lose_worker("w2")
    assert maps[2].state == "waiting" and reduces[0].state == reduces[1].state == "staging"
    assert run.take_cancels() == []
    # w1 vanishes: its reduce ends, and its map's pieces were on no other worker (none was copied in
    # this test), so that map runs again; rank 0's reduce, which was sent its piece, starts again,
    # and its page drops the attempt it has (take_cancels).
    attempt = reduces[0].id
    run.lose_worker("w1")
    assert maps[1].state == "waiting"
    assert reduces[0].state == "waiting" and not reduces[0].streaming and reduces[0].attempt == 1
    assert (attempt, "w0") in run.take_cancels() and run.take_cancels() == []


def test_a_lost_worker_reruns_its_task_and_recomputes_output_only_it_held():
    run = RunExecution(1, spec("map", "reduce"))
    started(run, ["w0", "w1"])
    finish(run, run_ready(run)[0], [0, 1])
    maps = run_ready(run)
    finish(run, maps[0], [0, 1])
    finish(run, maps[1], [0, 1])
    reduces = run_ready(run)
    finish(run, reduces[0], [0])
    again = run.lose_worker("w1")
    # w1's running reduce and its map (whose output reduce rank 1 still needs) run again.
    assert {(t.stage, t.rank) for t in again} == {(1, 1), (0, 1)}
    assert run.vacant_ranks() == [("A", 1)]
    # Rank 0's finished reduce kept its output: w0 holds it.
    assert run.task("A", 1, 0).state == "done"
    run.assign("A", 1, "w2")
    assert [(t.stage, t.rank) for t in run_ready(run)] == [(0, 1)]
    assert {a.state for a in run.history if a.worker_id == "w1"} >= {"lost"}


def test_output_still_held_elsewhere_is_not_recomputed():
    run = RunExecution(1, spec("map", "reduce"))
    started(run, ["w0", "w1"])
    finish(run, run_ready(run)[0], [0, 1])
    maps = run_ready(run)
    finish(run, maps[0], [0, 1])
    finish(run, maps[1], [0, 1])
    for output in maps[1].outputs:
        output.holders.add("w0")  # copied to w0 for its reduce
    again = run.lose_worker("w1")
    assert [(t.stage, t.rank) for t in again] == []
    assert maps[1].state == "done"


def test_an_input_missing_on_the_worker_recomputes_its_producer_when_no_copy_is_left():
    run = RunExecution(1, spec("map", "reduce"))
    started(run, ["w0", "w1"])
    first = run_ready(run)[0]
    finish(run, first, [0, 1])
    [m0, m1] = run_ready(run)
    missing = first.outputs[1]
    # w1 was told its chunk was there, but the tab lost it; only w0 had held it.
    missing.holders = {"w1"}
    again = run.input_lost(m1, missing.location)
    assert {(t.stage, t.rank) for t in again} == {(0, 1), (INPUT_STAGE, 0)}


def test_a_consumer_still_copying_its_inputs_waits_again_when_its_producer_is_recomputed():
    # Launched with its producer's outputs gone (the coordinator reads them only once its copies
    # are done), a map would run with none of its input and finish with an empty output.
    run = RunExecution(1, spec("map", "reduce", workers=3))
    started(run, ["w0", "w1", "w2"])
    first = run_ready(run)[0]
    finish(run, first, [0, 1, 2])
    maps = sorted(ready_tasks(run), key=lambda t: t.rank)
    for task in maps:
        run.start(task, f"w{task.rank}")  # all three staging
    run.running(maps[2])  # its task-assign is out: it has its input
    backup = run.backup(maps[2], "w9")
    first.outputs[1].holders = {"w1"}
    again = run.input_lost(maps[1], first.outputs[1].location)
    assert first.state == "waiting"  # no copy of the chunk is left: the input function runs again
    assert maps[0].state == "waiting" and maps[0] in again  # it was copying: it waits for the new input
    assert maps[2].state == "running"  # launched already: it goes on with the input it has
    assert backup not in run.active and backup.state == "waiting"  # dropped while copying
    assert [t.stage for t in ready_tasks(run)] == [INPUT_STAGE]


def test_stage_timeout_and_worker_timeout():
    run = RunExecution(1, spec("map", timeout=5))
    started(run, ["w0", "w1"])
    first = run_ready(run)[0]
    first.started = 0.0
    finish(run, first, [0, 1], holder="w0")
    maps = ready_tasks(run)
    for task in maps:
        run.start(task, f"w{task.rank}", now=100.0)
        run.running(task)
    maps[0].worker_timeout = 10
    assert run.overdue_stage(now=104.0) is None
    assert run.overdue_stage(now=106.0) == ("A", 0)
    assert run.idle_too_long(now=111.0) == [maps[0]]


def test_groups_keep_their_own_ranks_and_progress():
    run = RunExecution(1, spec("map", groups=2))
    started(run, ["a0", "a1"], "A")
    started(run, ["b0", "b1"], "B")
    ready = run_ready(run)
    assert {(t.group, t.stage) for t in ready} == {("A", INPUT_STAGE), ("B", INPUT_STAGE)}
    rows = run.progress()
    assert {(r["group"], r["stage"], r["total"]) for r in rows} == {
        ("A", -1, 1),
        ("A", 0, 2),
        ("B", -1, 1),
        ("B", 0, 2),
    }
    assert not run.finished()


def test_recomputing_a_lost_task_recomputes_the_inputs_it_needs_too():
    """w0 held the input chunks and its map output; when it goes, its map runs again and so
    does the input function, whose chunk only w0 had (its consumers were all done before)."""
    run = RunExecution(1, spec("map", "reduce"))
    started(run, ["w0", "w1"])
    finish(run, run_ready(run)[0], [0, 1])
    maps = run_ready(run)
    finish(run, maps[0], [0, 1])
    finish(run, maps[1], [0, 1])
    run_ready(run)  # both reduces running
    again = run.lose_worker("w0")
    assert {(t.stage, t.rank) for t in again} == {(1, 0), (0, 0), (INPUT_STAGE, 0)}
    run.assign("A", 0, "w2")
    assert [(t.stage, t.rank) for t in run_ready(run)] == [(INPUT_STAGE, 0)]


# ------------------------------------------------------------ the task-attempt state table


def task_in(state: str):
    """A run whose input task has been driven into ``state`` the way the coordinator drives it
    (verifying: a validated run's task whose own attempt finished)."""
    job = spec("map")
    if state == "verifying":
        job.validation = Validation(replicas=2)
    run = RunExecution(1, job)
    started(run, ["w0", "w1"])
    [task] = ready_tasks(run)
    if state != "waiting":
        run.start(task, "w0")
    if state in ("running", "done", "verifying"):
        run.running(task)
    if state in ("done", "verifying"):
        finish(run, task, [0, 1])
    assert task.state == state
    return run, task


def apply(run: RunExecution, task, event: TaskEvent) -> None:
    """The RunExecution method the coordinator calls for each event."""
    if event is TaskEvent.START:
        run.start(task, "w0")
    elif event is TaskEvent.LAUNCH:
        run.running(task)
    elif event is TaskEvent.FINISH:
        finish(run, task, [0, 1])
    elif event is TaskEvent.SUPERSEDED:  # a backup attempt of the task finishes first
        backup = run.backup(task, "w-backup")
        run.running(backup)
        finish(run, backup, [0, 1])
    elif event in (
        TaskEvent.VERIFY,
        TaskEvent.AGREED,
        TaskEvent.REJECTED,
        TaskEvent.EMPTY,
        TaskEvent.COVERED,
        TaskEvent.UNCOVERED,
    ):
        # Only validation's agreement makes the first three, the input's cut EMPTY and a range of
        # chunks the last two (their own tests are below).
        run._move(task, event)
    else:
        run.retry(task, event, "why")


@pytest.mark.parametrize("state", typing.get_args(TaskState))
@pytest.mark.parametrize("event", list(TaskEvent))
def test_every_state_and_event_pair_follows_the_table_and_illegal_ones_change_nothing(state, event):
    run, task = task_in(state)
    attempt, history = task.attempt, len(run.history)
    after = TRANSITIONS.get((state, event))
    if after is None:
        with pytest.raises(IllegalTransition):
            apply(run, task, event)
        assert (task.state, task.attempt, len(run.history)) == (state, attempt, history)
        return
    apply(run, task, event)
    assert task.state == after
    ended = event in OUTCOMES and event not in (TaskEvent.FINISH, TaskEvent.REJECTED)
    # An attempt that ends another way than finishing is recorded and the task goes again as a new one.
    assert task.attempt == attempt + (1 if ended or event is TaskEvent.OUTPUT_LOST else 0)
    recorded = run.history[history:]
    if event is TaskEvent.SUPERSEDED:
        assert [(a.worker_id, a.state) for a in recorded] == [("w-backup", "done"), ("w0", "superseded")]
    elif event in OUTCOMES and event is not TaskEvent.REJECTED:
        assert [a.state for a in recorded] == [OUTCOMES[event]]
    else:
        assert recorded == []


def test_a_waiting_task_cannot_be_retried_and_a_done_one_cannot_finish_twice():
    run, task = task_in("waiting")
    with pytest.raises(IllegalTransition, match="cannot fail while waiting"):
        run.retry(task, TaskEvent.FAIL)
    run, task = task_in("done")
    with pytest.raises(IllegalTransition):
        finish(run, task, [0, 1])
    assert run.groups["A"].stage_done[INPUT_STAGE] == 1  # counted once


# ------------------------------------------------------------ speculative execution


def map_stage_running(workers: int = 4):
    """A run whose four map tasks are running on w0..w3 (the input is done)."""
    run = RunExecution(1, spec("map", "reduce", workers=workers))
    started(run, [f"w{r}" for r in range(workers)])
    finish(run, run_ready(run)[0], list(range(workers)))
    maps = run_ready(run)
    return run, sorted(maps, key=lambda t: t.rank)


def test_a_straggler_is_speculated_once_most_of_its_stage_is_done_and_the_backup_wins():
    run, maps = map_stage_running()
    for t in maps[:3]:
        t.started = 100.0
        finish(run, t, [0, 1, 2, 3])
        t.finished = 102.0  # 2 s each
    slow = maps[3]
    slow.started, slow.emits = 100.0, 4  # emitting about as fast as the others did: not lagging
    assert not run.speculable(slow, now=102.5)  # under 1.5 x the 2 s median
    assert run.speculable(slow, now=103.5)
    backup = run.backup(slow, "w9", now=103.5)
    assert backup.id == "1.A.0.3.1" and run.find(backup.id) is backup and run.find(slow.id) is slow
    assert not run.speculable(slow, now=200)  # one backup at a time
    run.running(backup)
    # The reduces of ranks whose maps are done may start, with the pieces so far; rank 3's waits for its map.
    assert sorted(t.rank for t in ready_tasks(run)) == [0, 1, 2]
    superseded = run.done(backup, [Output(p, f"b{p}".ljust(64, "0"), 10, 1, {"w9"}) for p in range(4)], 1, 5)
    assert superseded == [("1.A.0.3.0", "w3")]  # the original attempt, to be stopped on its worker
    assert (slow.state, slow.worker_id, slow.attempt) == ("done", "w9", 1)
    assert [o.holders for o in slow.outputs] == [{"w9"}] * 4  # only the winner's output is used
    ended = [(a.attempt, a.worker_id, a.state) for a in run.history if (a.stage, a.rank) == (0, 3)]
    assert ended == [(1, "w9", "done"), (0, "w3", "superseded")]
    assert len(run.ready()) == 4  # every reduce may start


def test_a_worker_a_backup_outran_gets_a_backup_for_its_next_task_at_once_until_it_wins_a_race():
    run, maps = map_stage_running()
    for t in maps[:3]:
        finish(run, t, [0, 1, 2, 3])
    slow = maps[3]
    slow.stalled = True
    backup = run.backup(slow, "w0")
    run.running(backup)
    run.done(backup, [Output(p, f"b{p}".ljust(64, "0"), 10, 1, {"w0"}) for p in range(4)], 1, 5)
    reduces = {t.rank: t for t in run_ready(run)}
    assert reduces[3].worker_id == "w3"  # the rank stays with its worker
    assert run.speculable(reduces[3]) == "known to be slow (a backup attempt outran it earlier in this run)"
    assert run.speculable(reduces[2]) is None  # the others need the evidence of slowness first
    # This time w3 finishes before its backup: it is not taken for slow any more.
    run.backup(reduces[3], "w0")
    run.done(reduces[3], [], 1, 5)
    assert "w3" not in run.outrun


def test_when_the_original_attempt_finishes_first_the_backup_is_superseded():
    run, maps = map_stage_running()
    slow = maps[3]
    slow.stalled = True  # no progress for a while: speculated whatever the others did
    assert run.speculable(slow)
    backup = run.backup(slow, "w9")
    assert run.done(slow, [], 1, 5) == [(backup.id, "w9")]
    assert (slow.state, slow.worker_id) == ("done", "w3") and backup not in run.active
    assert run.find(backup.id) is None  # its late task-done finds nothing


def test_a_backup_takes_over_when_the_original_attempts_worker_is_lost():
    run, maps = map_stage_running()
    slow = maps[3]
    backup = run.backup(slow, "w9")
    run.running(backup)
    assert slow not in run.lose_worker("w3")  # nothing to run again: the backup goes on
    assert (slow.state, slow.worker_id, slow.attempt) == ("running", "w9", backup.attempt)
    assert run.find(f"1.A.0.3.{backup.attempt}") is slow
    # And a backup whose worker is lost is dropped: the task goes on where it was.
    other = run.backup(maps[2], "w8")
    run.lose_worker("w8")
    assert maps[2].state == "running" and other not in run.active and maps[2] not in run.backups


def test_stages_that_talk_to_other_ranks_and_jobs_that_say_so_are_never_speculated():
    peer = "async function f(x) { const s = await context.allReduce(new Float32Array(1)); }"
    ps = "async function f(x) { await context.ps.update('w', x); }"
    job = JobSpec(
        stages=[StageSpec(kind="map", source=src, timeout=60) for src in (peer, ps, "async function f(x) {}")],
        worker_count=2,
        group_count=1,
        input_source="async function input() { return []; }",
    )
    assert RunExecution(1, job).unspeculated == {0, 1}
    job.speculation = False
    assert RunExecution(1, job).unspeculated == {0, 1, 2}


# ------------------------------------------------------------ validation


def validated_map(replicas: int = 2):
    """A validated run whose input is agreed on and whose map task on rank 0 is running on w0."""
    job = spec("map", workers=1)
    job.validation = Validation(replicas=replicas)
    run = RunExecution(1, job)
    started(run, ["w0"])
    [first] = run_ready(run)
    assert run.replicas_wanted(first) == replicas - 1
    for worker in [f"r{i}" for i in range(replicas - 1)]:
        replica = run.replica(first, worker)
        run.running(replica)
        run.done(replica, output("in", worker), 1, 5)
    if first.state == "running":  # with 3 replicas the two others agreed already
        run.done(first, output("in", "w0"), 1, 5)  # the same outputs: the input is agreed on
    assert first.state == "done"
    [task] = run_ready(run)
    return run, task


def output(blob: str, holder: str) -> list[Output]:
    return [Output(0, blob.ljust(64, "0"), 10, 1, {holder})]


def test_a_validated_task_is_done_once_two_workers_gave_the_same_output():
    run, task = validated_map()
    assert (task.stage, run.replicas_wanted(task)) == (0, 1)
    replica = run.replica(task, "w1")
    run.running(replica)
    assert run.done(task, output("a", "w0"), 1, 5) == []
    assert task.state == "verifying" and ready_tasks(run) == []  # nothing downstream reads it yet
    assert run.replicas_wanted(task) == 0  # the replica is still running
    assert run.done(replica, output("a", "w1"), 1, 5) == []
    assert task.state == "done" and [o.location[:1] for o in task.outputs] == ["a"]
    states = [(a.worker_id, a.state) for a in run.history if a.stage == 0]
    assert sorted(states) == [("w0", "done"), ("w1", "done")]


def test_a_mismatch_starts_a_third_attempt_that_decides_and_the_dissenter_is_rejected():
    run, task = validated_map()
    replica = run.replica(task, "w1")
    run.running(replica)
    run.done(task, output("a", "w0"), 1, 5)
    run.done(replica, output("b", "w1"), 1, 5)  # a different answer
    assert task.state == "verifying" and run.replicas_wanted(task) == 1
    assert run.disagreement(task) is None  # a third attempt may still decide
    referee = run.replica(task, "w2")
    run.running(referee)
    run.done(referee, output("b", "w2"), 1, 5)
    assert task.state == "done" and task.worker_id == "w1" and task.outputs[0].location.startswith("b")
    rejected = [a for a in run.history if a.state == "rejected"]
    assert [(a.worker_id, a.error) for a in rejected] == [
        ("w0", "its output differs from the one workers w1, w2 agreed on")
    ]


def test_when_replicas_agree_first_the_tasks_own_attempt_is_stopped():
    run, task = validated_map(replicas=3)
    first, second = run.replica(task, "w1"), run.replica(task, "w2")
    for r in (first, second):
        run.running(r)
    own = task.id
    assert run.done(first, output("a", "w1"), 1, 5) == []
    assert run.done(second, output("a", "w2"), 1, 5) == [(own, "w0")]  # stop the original attempt
    assert task.state == "done" and task.worker_id == "w1"
    assert ("w0", "superseded") in [(a.worker_id, a.state) for a in run.history]


def test_a_task_whose_attempts_all_disagree_can_never_be_agreed_on():
    run, task = validated_map()
    run.done(task, output("a", "w0"), 1, 5)
    for i, blob in enumerate("bcd", start=1):
        assert run.replicas_wanted(task) == 1
        replica = run.replica(task, f"w{i}")
        run.running(replica)
        run.done(replica, output(blob, f"w{i}"), 1, 5)
    assert run.replicas_wanted(task) == 0
    assert run.disagreement(task) == "4 workers gave 4 different outputs; no 2 agreed"


def test_a_result_whose_worker_left_no_longer_counts():
    run, task = validated_map()
    replica = run.replica(task, "w1")
    run.running(replica)
    run.done(replica, output("a", "w1"), 1, 5)
    run.lose_worker("w1")  # its output went with it
    assert run.results[task] == [] and run.replicas_wanted(task) == 1
    run.done(task, output("a", "w0"), 1, 5)
    assert task.state == "verifying"


def test_a_task_emitting_far_more_slowly_than_its_stage_is_speculated_early():
    run, maps = map_stage_running()
    for t, emits in zip(maps, [900, 1000, 1100, 50], strict=True):
        t.started, t.launched, t.emits, t.work = 99.0, 100.0, emits, 0  # rates count from the launch
    slow = maps[3]
    assert not run.speculable(slow, now=100.5)  # too early to judge
    assert run.speculable(slow, now=103.0) == "lagging: 16.7 emits/s, the stage's median 333"  # nothing done yet
    assert not run.speculable(maps[0], now=103.0)
    # Per record read, once every task read some: a slow browser given a small share of the input (by
    # its speed) is on time at a low rate, and one given as much as the others is not.
    for t, records in zip(maps, [20, 20, 20, 1], strict=True):
        t.work = records
    assert not run.speculable(slow, now=103.0)
    slow.work = 20
    assert run.speculable(slow, now=103.0) == "lagging: 0.833 emits/s per record read, the stage's median 16.7"
    for t in maps:
        t.work = 0
    # A stage that calls context.progress() is judged by those calls alone: a map that counts in a
    # Map emits everything at its end, so a finished task's emits say nothing of the others' pace.
    for t, ticks in zip(maps, [900, 1000, 1100, 1000], strict=True):
        t.emits, t.ticks = 0, ticks
    maps[0].emits, maps[0].state, maps[0].finished = 50_000, "done", 102.0
    assert not run.speculable(slow, now=103.0)
    slow.ticks = 30
    assert run.speculable(slow, now=103.0) == "lagging: 10 progress() calls/s, the stage's median 367"
    # A stage that reports progress only at its end gives no rate to compare: the 75 % / 1.5 x rule decides.
    for t in maps:
        t.ticks = t.emits = 0
    assert not run.speculable(slow, now=103.0)


# ------------------------------------------------------------ chunks finer than ranks


def test_a_map_that_keeps_no_state_per_rank_is_cut_into_chunks_and_its_followers_alike():
    sources = {
        "plain": "async function m(x) { context.log(context.getRank()); }",
        "seeded": "async function m(x) { const r = context.rng(); }",
        "shared out": "async function m(x) { const n = context.getWorkerCount(); }",
        "talking": "async function m(x) { await context.sendToRank(1, 't', 1); }",
    }
    job = spec("map", "map", "reduce", "map", chunks="auto")
    assert RunExecution(1, job).chunks == {INPUT_STAGE: 1, 0: CHUNKS_PER_RANK, 1: CHUNKS_PER_RANK, 2: 1, 3: 1}
    for name, source in sources.items():
        job.stages[0] = StageSpec(kind="map", source=source, chunks="auto")
        expected = CHUNKS_PER_RANK if name == "plain" else 1
        assert RunExecution(1, job).chunks[0] == expected, name
        assert RunExecution(1, job).chunks[1] == expected, name  # it reads the first chunk by chunk
    job.stages[0] = StageSpec(kind="map", source=sources["plain"], chunks="rank")
    assert RunExecution(1, job).chunks[0] == 1


def test_a_map_feeding_a_reduce_runs_ranges_of_chunks_split_for_free_workers_and_read_in_order():
    run = RunExecution(1, spec("map", "reduce", workers=2, chunks="auto"))
    started(run, ["w0", "w1"])
    [source] = run_ready(run)
    # Rank 0 got items for 3 of its chunks, rank 1 for one: rank 1's other chunks never run.
    finish(run, source, [0, 1, 2, 4])
    chunks = {(t.rank, t.chunk): t for t in run.all_tasks() if t.stage == 0}
    assert [chunks[(1, c)].state for c in range(4)] == ["waiting", "done", "done", "done"]
    # Each worker takes its rank's first chunk, covering the rank's waiting chunks after it: one task
    # reads them all, in chunk order.
    first = run_ready(run)
    assert {(t.rank, t.chunk, t.covers, t.worker_id) for t in first} == {(0, 0, 3, "w0"), (1, 0, 1, "w1")}
    rank0 = chunks[(0, 0)]
    assert [o.partition for o in run.inputs(rank0)] == [0, 1, 2]
    assert [run.chunk_of(rank0, o) for o in run.inputs(rank0)] == [0, 1, 2]
    finish(run, chunks[(1, 0)], [0, 1])  # w1 is done with all of rank 1's map
    [(reduce, worker)] = run.ready()  # its reduce starts, to be fed the maps' pieces as they finish
    assert (reduce.stage, reduce.rank, worker) == (1, 1, "w1")
    run.start(reduce, worker)
    # Nothing is left to take: w0's range is asked to stop halfway, once.
    assert run.ready() == [] and run.take_splits() == [(rank0.id, "w0", 2)]
    assert run.ready() == [] and run.take_splits() == []
    # Its page stops before chunk 2, which w1 takes.
    assert run.split_at(rank0, 2) and (rank0.covers, rank0.split) == (2, 0)
    [(taken, worker)] = run_ready_pairs(run)
    assert (taken.rank, taken.chunk, taken.covers, worker) == (0, 2, 3, "w1")
    finish(run, rank0, [0, 1])
    assert chunks[(0, 1)].state == "done" and not chunks[(0, 1)].outputs  # it ran in chunk 0's task
    finish(run, taken, [0, 1])
    # A reduce reads every map task in rank and chunk order, numbered so for its page.
    reduce = run.task("A", 1, 0)
    assert [run.producer_index(p) for p in run.producers(reduce)] == list(range(8))
    assert [o.location for o in run.inputs(reduce)] == [
        o.location for (r, c) in [(0, 0), (0, 2), (1, 0)] for o in chunks[(r, c)].outputs if o.partition == 0
    ]


def run_ready_pairs(run: RunExecution) -> list:
    ready = run.ready()
    for task, worker in ready:
        run.start(task, worker)
        feed(run, task)
    return ready


def test_a_range_that_runs_again_runs_its_chunks_again():
    run = RunExecution(1, spec("map", "reduce", workers=2, chunks="auto"))
    started(run, ["w0", "w1"])
    finish(run, run_ready(run)[0], list(range(8)))
    ranges = {t.rank: t for t in run_ready(run)}
    assert [t.covers for t in ranges.values()] == [4, 4]
    # A page that cannot split (its job read its input as an array) says so: it is not asked again.
    finish(run, ranges[1], [0, 1])
    run.start(run.task("A", 1, 1), "w1")
    assert run.take_splits() == [] and run.ready() == [] and run.take_splits() == [(ranges[0].id, "w0", 2)]
    assert not run.split_at(ranges[0], 4) and run.ready() == [] and run.take_splits() == []
    # Its worker leaves: the chunks it covered wait again, and the next range covers them.
    run.lose_worker("w0")
    assert [run.task("A", 0, 0, c).state for c in range(4)] == ["waiting"] * 4
    assert all(run.task("A", 0, 0, c).covered_by is None for c in range(4))
    # A done range whose output is lost: its chunks are computed again with it.
    done = run.task("A", 0, 1, 0)
    for c in range(1, 4):
        assert run.task("A", 0, 1, c).state == "done"
    run.lose_worker("w1")
    assert [run.task("A", 0, 1, c).state for c in range(4)] == ["waiting"] * 4 and done.covers == 0
    assert run.groups["A"].stage_done[0] == 0


def test_a_run_split_in_chunks_ends_with_each_ranks_output_in_chunk_order():
    run = RunExecution(1, spec("map", workers=2, chunks="auto"))
    started(run, ["w0", "w1"])
    finish(run, run_ready(run)[0], list(range(8)))
    while not run.finished():
        for task in run_ready(run):
            finish(run, task, [task.rank])
    outputs = run.final_outputs()["A"]
    assert [r for r, _ in outputs] == [0, 1]
    assert [o.location.split("-")[0] for o in outputs[1][1]] == [run.task("A", 0, 1, c).id for c in range(4)]


def test_free_workers_take_waiting_chunks_fastest_first_and_a_task_id_names_its_chunk():
    run = RunExecution(1, spec("map", workers=3, chunks="auto"))
    started(run, ["slow", "fast", "mid"])
    finish(run, run_ready(run)[0], list(range(12)))
    for task in run_ready(run):  # each worker's own first chunk
        finish(run, task, [task.rank]) if task.worker_id != "slow" else None
    speeds = {"slow": 0.2, "fast": 3.0, "mid": 1.0}
    # fast and mid go on with their own ranks; the slow one is still busy.
    ready = run.ready(speeds.get)
    assert [(t.rank, t.chunk, w) for t, w in ready] == [(1, 1, "fast"), (2, 1, "mid")]
    for task, worker in ready:
        run.start(task, worker)
    assert run.task("A", 0, 0, 3).id == "1.A.0.0c3.0" and run.find("1.A.0.0c3.0") is run.task("A", 0, 0, 3)
    assert run.find("1.A.0.0c0.0") is None  # a rank's first chunk is named by its rank alone


def test_a_range_taken_while_workers_are_free_shares_its_chunks_with_them_and_the_rest_split():
    """A range claims the chunks it covers, so no other worker takes one in the same round; taken
    while other workers of its group have nothing to do, it covers its share only and they take the
    rest (a page answers a split only between its chunks). A range is asked to split once a worker
    has nothing left to take."""
    run = RunExecution(1, spec("map", "reduce", workers=3, chunks="auto"))
    started(run, ["w0", "w1", "w2"])
    finish(run, run_ready(run)[0], list(range(12)), holder="w1")  # the input is copied to w1 too
    ranges = {t.rank: t for t in run_ready(run)}
    assert all(t.covers == CHUNKS_PER_RANK for t in ranges.values())  # nobody was free: whole ranks
    finish(run, ranges[1], [0, 1, 2])
    finish(run, ranges[2], [0, 1, 2])
    for reduce, worker in run.ready():  # w1 and w2 start their streaming reduces
        run.start(reduce, worker)
    run.lose_worker("w0")
    run.assign("A", 0, "w1")  # w1 holds rank 0 as well: both look for work in the same round
    ready = run.ready()
    assert [(t.stage, t.rank, t.chunk, w) for t, w in ready] == [(0, 0, 0, "w1"), (0, 0, 2, "w2")]
    for task, worker in ready:
        run.start(task, worker)
        run.running(task)
    assert [run.task("A", 0, 0, c).covers for c in (0, 2)] == [2, CHUNKS_PER_RANK]
    assert run.take_splits() == []  # nobody is left with nothing to take
    finish(run, run.task("A", 0, 0, 2), [0])
    # A range near its end (by the speed estimates) is not asked: a task for its second half would cost more.
    assert run.ready(splits=lambda task: None) == [] and run.take_splits() == []
    assert run.ready() == [] and run.take_splits() == [(run.task("A", 0, 0).id, "w1", 1)]
    # A worker away (its rank waits for it to come back) is not asked.
    run.task("A", 0, 0).split = 0
    assert run.ready(away={"w1"}) == [] and run.take_splits() == []


def test_a_checkpoint_keeps_what_each_range_covers():
    run = RunExecution(1, spec("map", "reduce", workers=2, chunks="auto"))
    started(run, ["w0", "w1"])
    finish(run, run_ready(run)[0], list(range(8)), holder="w1")
    ranges = {t.rank: t for t in run_ready(run)}
    finish(run, ranges[1], [0, 1])
    saved = checkpoints.decode(checkpoints.encode(checkpoints.capture(run, {}, set(), {}, {})))
    again = RunExecution(1, spec("map", "reduce", workers=2, chunks="auto"))
    checkpoints.restore(again, saved)
    # The running range covers its chunks again; the done one's chunks are done, and run again with it.
    running = again.task("A", 0, 0)
    assert (running.state, running.covers) == ("running", CHUNKS_PER_RANK)
    assert [again.task("A", 0, 0, c).covered_by for c in range(1, 4)] == [running] * 3
    assert [again.task("A", 0, 1, c).state for c in range(4)] == ["done"] * 4
    again.lose_worker("w1")
    assert [again.task("A", 0, 1, c).state for c in range(4)] == ["waiting"] * 4


def test_a_browser_far_slower_than_the_rest_takes_no_chunk_of_another_rank():
    """Work stealing by a browser under a third of the run's fastest would make the stage end later:
    it runs its own rank's chunks only, and leaves the others' to faster browsers."""
    run = RunExecution(1, spec("map", "reduce", workers=3, chunks="auto"))
    started(run, ["slow", "fast", "mid"])
    finish(run, run_ready(run)[0], list(range(12)), holder="slow")
    ranges = {t.rank: t for t in run_ready(run)}
    assert run.split_at(ranges[1], 2)  # fast's range stops before its chunk 2: chunks 2 and 3 wait
    finish(run, ranges[0], [0, 1, 2])
    for reduce, worker in run.ready():  # slow starts its streaming reduce: it has nothing else of its own
        run.start(reduce, worker)
    assert [(t.rank, t.chunk, w) for t, w in run.ready()] == [(1, 2, "slow")]  # speeds not known: it takes them
    speeds = {"slow": 0.2, "fast": 1.0, "mid": 0.9}
    assert run.ready(speeds.get) == [] and run.take_splits() == []


def test_a_browser_away_takes_nothing_and_its_ranks_chunks_go_to_the_free_workers():
    """A range whose browser left waits again (the engine retries it): the browser, away, is given
    nothing, and the run's free workers share the range's chunks in one round."""
    run = RunExecution(1, spec("map", "reduce", workers=3, chunks="auto"))
    started(run, ["gone", "w1", "w2"])
    finish(run, run_ready(run)[0], list(range(12)), holder="w1")
    ranges = {t.rank: t for t in run_ready(run)}
    finish(run, ranges[1], [0, 1, 2])
    finish(run, ranges[2], [0, 1, 2])
    run.retry(ranges[0], TaskEvent.WORKER_LOST, "its browser left")
    for task, worker in run.ready(away={"gone": 0.0}):  # w1 and w2 start their streaming reduces
        assert worker != "gone"
        run.start(task, worker)
    taken = run.ready(away={"gone": 0.0})
    assert sorted((t.stage, t.rank, t.chunk, w) for t, w in taken) == [(0, 0, 0, "w1"), (0, 0, 2, "w2")]


def test_a_range_split_counts_the_records_of_the_chunks_it_keeps():
    """A range's records (its pace, and its browser's speed estimate, are per record) shrink to those of
    the chunks it keeps when it splits: counted whole, a slow browser whose range was cut would look
    as fast as one that read everything."""
    run = RunExecution(1, spec("map", "reduce", workers=2, chunks="auto"))
    started(run, ["w0", "w1"])
    finish(run, run_ready(run)[0], list(range(8)), holder="w1")  # one record a chunk
    ranges = {t.rank: t for t in run_ready(run)}  # running: their inputs are in place
    assert ranges[0].work == CHUNKS_PER_RANK
    assert run.split_at(ranges[0], 1)
    assert ranges[0].work == 1
