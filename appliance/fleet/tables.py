"""Worker scores: each browser's reliability, from what it did in the runs it took part in (reliability.py).

Keyed by worker id (one browser tab's id, kept across reconnects) with the account it worked for,
without a foreign key: like the ledger, the history outlives a deleted account.
"""

from piccolo.columns import BigInt, Boolean, DoublePrecision, Integer, Timestamptz, Varchar
from piccolo.table import Table


class WorkerScore(Table, tablename="fleet_worker_score"):
    """A worker's score as of ``updated_at`` (it decays from there: reliability.decayed) and its totals."""

    worker_id = Varchar(length=64, unique=True)
    account = Integer(index=True)
    score = DoublePrecision(default=0.0)
    runs = Integer(default=0)
    tasks_done = BigInt(default=0)
    disconnects = Integer(default=0)
    timeouts = Integer(default=0)
    # Outputs that differed from the one other workers agreed on (validation).
    rejections = Integer(default=0)
    updated_at = Timestamptz()


class WorkerScoreRun(Table, tablename="fleet_worker_score_run"):
    """What one run gave one worker: written once per (run, worker), so a run never counts twice."""

    # "<run>:<worker id>"
    slot = Varchar(length=80, unique=True)
    run = Integer(index=True)
    worker_id = Varchar(length=64, index=True)
    account = Integer()
    tasks_done = Integer(default=0)
    disconnects = Integer(default=0)
    timeouts = Integer(default=0)
    rejections = Integer(default=0)
    # True when the run ended for a reason that is nobody's fault but the job's (cancelled, job code
    # failed, a stage timed out): its disconnects and timeouts cost nothing.
    excused = Boolean(default=False)
    points = DoublePrecision(default=0.0)
    at = Timestamptz()


class CourtesyRules(Table, tablename="fleet_courtesy"):
    """One row: how much of an employee's machine a worker page may use (Admin → Settings)."""

    # The share of the device's cores a tab may keep busy, (0, 1]; employees may lower it on the page.
    core_share = DoublePrecision(default=0.5)
    # Local hours (HH:MM, the device's clock) between which tabs take tasks; both empty: any time.
    hours_from = Varchar(length=5, default="")
    hours_to = Varchar(length=5, default="")
    # Pages pause while the computer is busy (CPU pressure); off for machines given over to the work.
    pause_when_busy = Boolean(default=True)
    updated_at = Timestamptz()
