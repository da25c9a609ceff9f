from piccolo.apps.migrations.auto.migration_manager import MigrationManager
from piccolo.columns.column_types import Varchar
from piccolo.columns.indexes import IndexMethod

ID = "2026-11-23T20:57:56:362692"
VERSION = "1.38.0"
DESCRIPTION = "Run.cause: why a run ended (events.EndCause)"


async def forwards():
    manager = MigrationManager(
        migration_id=ID, app_name="jobs", description=DESCRIPTION
    )

    manager.add_column(
        table_class_name="Run",
        tablename="jobs_run",
        column_name="cause",
        db_column_name="cause",
        column_class_name="Varchar",
        column_class=Varchar,
        params={
            "length": 32,
            "default": "",
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
