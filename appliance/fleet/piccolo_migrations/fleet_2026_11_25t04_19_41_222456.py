from piccolo.apps.migrations.auto.migration_manager import MigrationManager
from piccolo.columns.column_types import DoublePrecision
from piccolo.columns.column_types import Timestamptz
from piccolo.columns.column_types import Varchar
from piccolo.columns.defaults.timestamptz import TimestamptzNow
from piccolo.columns.indexes import IndexMethod

ID = "2026-11-25T04:19:41:222456"
VERSION = "1.38.0"
DESCRIPTION = "Courtesy rules for worker pages: core share and working hours"


async def forwards():
    manager = MigrationManager(
        migration_id=ID, app_name="fleet", description=DESCRIPTION
    )

    manager.add_table(
        class_name="CourtesyRules",
        tablename="fleet_courtesy",
        schema=None,
        columns=None,
    )

    manager.add_column(
        table_class_name="CourtesyRules",
        tablename="fleet_courtesy",
        column_name="core_share",
        db_column_name="core_share",
        column_class_name="DoublePrecision",
        column_class=DoublePrecision,
        params={
            "default": 0.5,
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
        table_class_name="CourtesyRules",
        tablename="fleet_courtesy",
        column_name="hours_from",
        db_column_name="hours_from",
        column_class_name="Varchar",
        column_class=Varchar,
        params={
            "length": 5,
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
        table_class_name="CourtesyRules",
        tablename="fleet_courtesy",
        column_name="hours_to",
        db_column_name="hours_to",
        column_class_name="Varchar",
        column_class=Varchar,
        params={
            "length": 5,
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
        table_class_name="CourtesyRules",
        tablename="fleet_courtesy",
        column_name="updated_at",
        db_column_name="updated_at",
        column_class_name="Timestamptz",
        column_class=Timestamptz,
        params={
            "default": TimestamptzNow(),
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
