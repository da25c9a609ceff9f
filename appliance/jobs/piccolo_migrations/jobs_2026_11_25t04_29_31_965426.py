from piccolo.apps.migrations.auto.migration_manager import MigrationManager
from piccolo.columns.column_types import Varchar

ID = "2026-11-25T04:29:31:965426"
VERSION = "1.38.0"
DESCRIPTION = ""


async def forwards():
    manager = MigrationManager(
        migration_id=ID, app_name="jobs", description=DESCRIPTION
    )

    manager.alter_column(
        table_class_name="RunTask",
        tablename="jobs_task",
        column_name="worker_id",
        db_column_name="worker_id",
        params={"index": True},
        old_params={"index": False},
        column_class=Varchar,
        old_column_class=Varchar,
        schema=None,
    )

    return manager
