"""Placement: which worker serves which run, as the holder of a rank or as a helper running an
extra attempt (a backup or a validation replica). This module is the only writer of that binding
(``Worker.run_id``, a run's ranks, its helpers and the workers it sent away): ``bind_*`` puts a
worker in a run, ``unbind`` takes it out, for a cause that says what follows.
"""

from __future__ import annotations

import enum
import time
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

from appliance.fleet import protocol as p
from appliance.fleet.registry import Worker
from appliance.jobs import selection
from appliance.jobs.engine.live import LiveRun
from appliance.jobs.engine.shared import Shared
from appliance.jobs.execution import Attempt, Task, TaskEvent, Try
from appliance.jobs.logs import FLEET
from appliance.jobs.metrics import TASK_FAILURES
from appliance.jobs.peers import Peers


class Unbind(enum.StrEnum):
    """Why a worker stops serving a run."""

    EXTRA_ENDED = "extra-ended"  # the extra attempt a helper ran ended: it is free again (if idle)
    OUTRUN = "outrun"  # a helper outran the rank's worker and holds the rank now
    OUTPACED = "outpaced"  # a free browser would redo the rank's range sooner: it holds the rank now
    DISCONNECTED = "disconnected"  # gone, and not back within the reconnect grace
    NOT_BACK = "not-back"  # did not come back after the appliance restarted (recovery logs it)
    TIMED_OUT = "timed-out"  # ran past its worker timeout without an emit
    BAD_REPORT = "bad-report"  # reported what cannot be (a bad result, done before its input)
    HUNG = "hung"  # no progress while it answers pings (a stopped browser process)
    BLAMED = "blamed"  # the run's failed copies point at it (jobs/copy_failures.py)
    RUN_ENDED = "run-ended"


@dataclass(frozen=True)
class Effect:
    exclude: bool = False  # the run never takes it back
    vacate: bool = False  # its rank, if it holds one, is vacant: its tasks and what only it held run again
    announce: bool = False  # the loss is counted, told to the rank's group, and logged
    judged: bool = False  # a verdict on a worker still connected: skipped once it left or was sent away


EFFECTS: dict[Unbind, Effect] = {
    Unbind.EXTRA_ENDED: Effect(),
    Unbind.OUTRUN: Effect(),
    Unbind.OUTPACED: Effect(exclude=True),  # else, idle, it would take the rank back (spread)
    Unbind.DISCONNECTED: Effect(vacate=True, announce=True),
    Unbind.NOT_BACK: Effect(vacate=True),
    Unbind.TIMED_OUT: Effect(exclude=True, vacate=True, announce=True),
    Unbind.BAD_REPORT: Effect(exclude=True, vacate=True, announce=True),
    Unbind.HUNG: Effect(exclude=True, vacate=True, announce=True, judged=True),
    Unbind.BLAMED: Effect(exclude=True, vacate=True, announce=True, judged=True),
    Unbind.RUN_ENDED: Effect(),
}


class Placement:
    def __init__(self, shared: Shared, peers: Peers):
        self.shared = shared
        self.fleet = shared.fleet
        self.peers = peers

    # ------------------------------------------------------------ binding

    def bind_rank(self, run: LiveRun, group: str, rank: int, worker: Worker) -> None:
        run.execution.assign(group, rank, worker.worker_id)
        run.seats.helpers.discard(worker.worker_id)
        run.seats.vacant_since.pop((group, rank), None)
        worker.serve(run.run_id)
        run.served_by(worker)

    def bind_extra(self, run: LiveRun, worker: Worker) -> None:
        """A worker runs an extra attempt of the run: as a helper when it serves no run yet."""
        if worker.run_id is None:
            worker.serve(run.run_id)
            run.seats.helpers.add(worker.worker_id)
        run.served_by(worker)

    def rebind(self, run: LiveRun, worker: Worker) -> None:
        """A rank's worker connected again (after a disconnection or a restart): its rank waited for it."""
        run.seats.away.pop(worker.worker_id, None)
        worker.serve(run.run_id)
        run.served_by(worker)

    def idle_worker(self, run: LiveRun, avoid: Collection[str] = ()) -> Worker | None:
        """The best eligible worker that serves no run and answers its pings (not one of ``avoid``), or None."""
        now = time.monotonic()
        candidates = [
            w
            for w in self.fleet.workers.values()
            if selection.available(w)
            and w.answers(now)
            and w.worker_id not in run.seats.excluded
            and w.worker_id not in avoid
            and self.shared.eligible(w, run.spec, run.owner_id)
        ]
        return selection.ranked(candidates, self.shared.speeds.of)[0] if candidates else None

    def fill_vacancies(self, run: LiveRun) -> None:
        """A vacant rank goes to an idle eligible worker; with none, in a run whose ranks do not talk, to
        the run's worker holding the fewest ranks (it runs their tasks one after the other), so a run
        outlives the browsers that leave it as long as one is left. A rank waits for a replacement
        (and the run fails after the replacement grace) only when its stages talk to other ranks."""
        for group, rank in run.execution.vacant_ranks():
            worker = self.idle_worker(run)
            if worker is None and (worker := self._co_holder(run)) is not None:
                self.bind_rank(run, group, rank, worker)
                self.shared.logs.add(
                    run.run_id,
                    f"worker {worker.worker_id} takes rank {rank} of group {group} as well: no other eligible "
                    "worker is free",
                    level="warn",
                    source=FLEET,
                )
                continue
            if worker is None:
                run.seats.vacant_since.setdefault((group, rank), time.monotonic())
                continue
            self.bind_rank(run, group, rank, worker)
            self.shared.logs.add(
                run.run_id, f"worker {worker.worker_id} took over rank {rank} of group {group}", source=FLEET
            )

    def _co_holder(self, run: LiveRun) -> Worker | None:
        """The connected worker of the run holding the fewest of its ranks, in a run whose ranks do
        not talk (its collectives need a worker per rank); None otherwise."""
        if run.execution.talking:
            return None
        held = Counter(w for group in run.execution.groups.values() for w in group.ranks if w is not None)
        present = [
            w
            for worker_id in held
            if (w := self.fleet.get(worker_id)) is not None
            and worker_id not in run.seats.away
            and worker_id not in run.seats.excluded
        ]
        return min(selection.ranked(present), key=lambda w: held[w.worker_id], default=None)

    def spread(self, run: LiveRun) -> None:
        """A worker holding more than one rank hands one whose next task has not started to an idle
        eligible worker that joined meanwhile (the run grows back to a worker per rank), not to one a
        backup outran in this run (it took the rank from that one)."""
        if not (doubled := self._doubled(run)):
            return
        execution = run.execution
        for group, rank in doubled:
            task = execution.groups[group].first_not_done(rank)
            if task is not None and task.state != "waiting":
                continue  # under way on its holder: it moves once that task is done
            if (worker := self.idle_worker(run, avoid=execution.outrun)) is None:
                return
            self.bind_rank(run, group, rank, worker)
            self.shared.logs.add(
                run.run_id, f"worker {worker.worker_id} took over rank {rank} of group {group}", source=FLEET
            )

    @staticmethod
    def _doubled(run: LiveRun) -> list[tuple[str, int]]:
        """The ranks of workers holding more than one, but each worker's first."""
        seen: set[str] = set()
        doubled = []
        for group in run.execution.groups.values():
            for rank, holder in enumerate(group.ranks):
                if holder is None:
                    continue
                if holder in seen:
                    doubled.append((group.letter, rank))
                seen.add(holder)
        return doubled

    def hand_over(
        self, run: LiveRun, task: Task, slow_id: str, winner: Worker, why: str = "", cause: Unbind = Unbind.OUTRUN
    ) -> None:
        """A helper outran the rank's own worker (or would, OUTPACED): it keeps the rank, whose next task
        then finds its input where it is, and the slower browser is free for other runs."""
        self.bind_rank(run, task.group, task.rank, winner)
        self.unbind(run, slow_id, cause)
        why = why or f"which outran {slow_id}"
        self.shared.logs.add(
            run.run_id, f"rank {task.rank} of group {task.group} moves to worker {winner.worker_id}, {why}"
        )

    # ------------------------------------------------------------ unbinding

    def unbind(
        self, run: LiveRun, worker_id: str, cause: Unbind, why: str = "", running: Try | None = None
    ) -> list[Task]:
        """``worker_id`` stops serving the run for ``cause`` (EFFECTS says what follows); ``why`` is
        for the run's log, ``running`` an attempt still under way there, which its page drops.
        Returns the tasks that run again because it left its rank."""
        effect, seats = EFFECTS[cause], run.seats
        worker = self.fleet.get(worker_id)
        if effect.judged:
            if worker is None or worker_id in seats.excluded:
                return []
            self.shared.logs.add(run.run_id, f"worker {worker_id} taken off the run: {why}", level="warn", source=FLEET)
        if cause is Unbind.EXTRA_ENDED:
            if worker_id not in seats.helpers or any(t.worker_id == worker_id for t in run.execution.active):
                self.shared.wake.set()
                return []
            seats.helpers.discard(worker_id)
        if running is not None:
            self.shared.send(worker, p.TaskCancel(task_id=running.id))
        seats.away.pop(worker_id, None)
        if worker is not None and worker.run_id == run.run_id:
            worker.serve(None)
        if effect.exclude:  # its own log line said why (a judged cause's above, the caller's otherwise)
            seats.excluded.add(worker_id)
            why = "was taken off the run"
        again = self._vacate(run, worker_id, why if effect.announce else None) if effect.vacate else []
        self.shared.wake.set()
        return again

    def _vacate(self, run: LiveRun, worker_id: str, why: str | None) -> list[Task]:
        places = run.execution.places_of(worker_id)
        again = run.execution.lose_worker(worker_id)
        for group, rank in places:
            if (heir := self._heir(run, (group, rank))) is not None:
                self.bind_rank(run, group, rank, heir)
                self.shared.logs.add(
                    run.run_id,
                    f"worker {heir.worker_id} took over rank {rank} of group {group} (its backup attempt goes on "
                    "as the rank's task)",
                    source=FLEET,
                )
            if why is None:
                continue
            TASK_FAILURES.labels("worker_lost").inc()
            self.tell_loss(run, group, rank, f"its worker {why}")
            if heir is None:
                run.seats.vacant_since.setdefault((group, rank), time.monotonic())
            self.shared.logs.add(
                run.run_id,
                f"worker {worker_id} (rank {rank} of group {group}) {why}; "
                f"{len(again)} task(s) will run again on its replacement",
                level="warn",
                source=FLEET,
            )
        return again

    def _heir(self, run: LiveRun, place: tuple[str, int]) -> Worker | None:
        """The helper now running the rank's task (its backup, adopted when the rank's worker left)."""
        for task in run.execution.active:
            if (task.group, task.rank) == place and task.worker_id in run.seats.helpers and not task.is_backup:
                return self.fleet.get(task.worker_id)
        return None

    def tell_loss(self, run: LiveRun, group: str, rank: int, why: str) -> None:
        """The group's other ranks learn that ``rank`` lost what it ran: a stage whose ranks talk to each
        other starts again (a new epoch, so no message of the old one is taken)."""
        run.talk.epochs[group] = run.talk.epochs.get(group, 0) + 1
        run.talk.lost_at[group] = time.monotonic()
        self.peers.rank_lost(run, group, rank, why)

    def release_all(self, run: LiveRun) -> None:
        """The run ended: its workers and helpers serve nothing."""
        for worker_id in run.execution.workers() | run.seats.helpers:
            self.unbind(run, worker_id, Unbind.RUN_ENDED)

    # ------------------------------------------------------------ extra attempts

    def extra_worker(
        self, run: LiveRun, task: Task, avoid: set[str | None] = frozenset(), other_accounts: set = frozenset()
    ) -> Worker | None:
        """An eligible worker with nothing to do: one in no run first, then one of this run whose rank
        has no task ready (it takes its own rank's next task once the race is over), or whose reduce
        waits for its input (the page runs both); one of an account not in ``other_accounts`` first
        when there is such a worker."""
        occupied = {t.worker_id for t in run.execution.active if not run.execution.waiting_for_input(t)}
        now = time.monotonic()
        candidates = [
            w
            for w in self.fleet.workers.values()
            if not w.paused
            and w.answers(now)
            and w.worker_id != task.worker_id
            and w.worker_id not in avoid
            and w.worker_id not in run.seats.excluded
            and (w.run_id is None or (w.run_id == run.run_id and w.worker_id not in occupied))
            and self.shared.eligible(w, run.spec, run.owner_id)
        ]
        return min(
            selection.ranked(candidates, self.shared.speeds.of),
            key=lambda w: (w.account_id in other_accounts, w.run_id is not None),
            default=None,
        )

    def drop_extra(self, run: LiveRun, attempt: Attempt, event: TaskEvent, why: str) -> None:
        """An extra attempt ends without result; the task goes on, its helper is free."""
        worker_id = attempt.worker_id or ""
        self.shared.send(worker_id, p.TaskCancel(task_id=attempt.id))
        run.execution.drop_backup(attempt, event, why)
        self.shared.logs.add(
            run.run_id, f"attempt {attempt.attempt} of {run.where(attempt)} on worker {worker_id} ended: {why}"
        )
        self.unbind(run, worker_id, Unbind.EXTRA_ENDED)
