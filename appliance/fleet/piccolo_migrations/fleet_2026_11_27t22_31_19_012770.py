from piccolo.apps.migrations.auto.migration_manager import MigrationManager
from piccolo.columns.column_types import Boolean
from piccolo.columns.indexes import IndexMethod

ID = "2026-11-27T22:31:19:012770"
VERSION = "1.38.0"
DESCRIPTION = "Courtesy rules: whether worker pages pause while the computer is busy"


async def forwards():
    manager = MigrationManager(
        migration_id=ID, app_name="fleet", description=DESCRIPTION
    )

    manager.add_column(
        table_class_name="CourtesyRules",
        tablename="fleet_courtesy",
        column_name="pause_when_busy",
        db_column_name="pause_when_busy",
        column_class_name="Boolean",
        column_class=Boolean,
        params={
            "default": True,
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
