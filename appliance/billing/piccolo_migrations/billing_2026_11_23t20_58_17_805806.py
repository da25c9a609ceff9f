from piccolo.apps.migrations.auto.migration_manager import MigrationManager

from appliance.fleet.tables import WorkerScore

ID = "2026-11-23T20:58:17:805806"
VERSION = "1.38.0"
DESCRIPTION = "Worker scores move to the fleet domain (fleet_worker_score*); their rows go with them"

# The columns are the same on both sides; the raw step runs before the tables are dropped.
_SCORE_COLUMNS = "worker_id, account, score, runs, tasks_done, disconnects, timeouts, updated_at"
_RUN_COLUMNS = "slot, run, worker_id, account, tasks_done, disconnects, timeouts, excused, points, at"


async def _copy_scores() -> None:
    for table, columns in (("worker_score", _SCORE_COLUMNS), ("worker_score_run", _RUN_COLUMNS)):
        await WorkerScore.raw(f"INSERT INTO fleet_{table} ({columns}) SELECT {columns} FROM billing_{table}")


async def forwards():
    manager = MigrationManager(
        migration_id=ID, app_name="billing", description=DESCRIPTION
    )
    manager.add_raw(_copy_scores)

    manager.drop_table(
        class_name="WorkerScoreRun",
        tablename="billing_worker_score_run",
        schema=None,
    )

    manager.drop_table(
        class_name="WorkerScore", tablename="billing_worker_score", schema=None
    )

    return manager
