from piccolo.apps.migrations.auto.migration_manager import MigrationManager
from piccolo.columns.column_types import Boolean
from piccolo.columns.column_types import Varchar
from piccolo.columns.indexes import IndexMethod

ID = "2026-11-25T04:12:10:120427"
VERSION = "1.38.0"
DESCRIPTION = ""


async def forwards():
    manager = MigrationManager(
        migration_id=ID, app_name="jobs", description=DESCRIPTION
    )

    manager.add_column(
        table_class_name="RunTask",
        tablename="jobs_task",
        column_name="gpu_adapter",
        db_column_name="gpu_adapter",
        column_class_name="Varchar",
        column_class=Varchar,
        params={
            "length": 300,
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

    manager.add_column(
        table_class_name="SchedulingRules",
        tablename="jobs_scheduling_rules",
        column_name="software_gpus",
        db_column_name="software_gpus",
        column_class_name="Boolean",
        column_class=Boolean,
        params={
            "default": False,
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
