from piccolo.apps.migrations.auto.migration_manager import MigrationManager
from piccolo.columns.column_types import Varchar
from piccolo.columns.indexes import IndexMethod

ID = "2026-11-24T20:27:37:961159"
VERSION = "1.38.0"
DESCRIPTION = "pmrfs_object.encoding: saved stage outputs kept in the shuffle format"


async def forwards():
    manager = MigrationManager(
        migration_id=ID, app_name="pmrfs", description=DESCRIPTION
    )

    manager.add_column(
        table_class_name="StoredObject",
        tablename="pmrfs_object",
        column_name="encoding",
        db_column_name="encoding",
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
