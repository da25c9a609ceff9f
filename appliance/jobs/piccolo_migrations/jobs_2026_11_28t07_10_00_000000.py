from piccolo.apps.migrations.auto.migration_manager import MigrationManager
from piccolo.columns.column_types import Integer
from piccolo.columns.indexes import IndexMethod

ID = "2026-11-28T07:10:00:000000"
VERSION = "1.38.0"
DESCRIPTION = "jobs_task.chunks: how many chunks an attempt ran (a range's)"


async def forwards():
    manager = MigrationManager(migration_id=ID, app_name="jobs", description=DESCRIPTION)

    manager.add_column(
        table_class_name="RunTask",
        tablename="jobs_task",
        column_name="chunks",
        db_column_name="chunks",
        column_class_name="Integer",
        column_class=Integer,
        params={
            "default": 1,
            "null": False,
            "primary_key": False,
            "unique": False,
            "index": False,
            "index_method": IndexMethod.btree,
            "choices": None,
            "db_column_name": None,
            "secret": False,
        },
        schema=None,
    )

    return manager
