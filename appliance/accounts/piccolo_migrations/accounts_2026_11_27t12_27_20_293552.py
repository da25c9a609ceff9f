from piccolo.apps.migrations.auto.migration_manager import MigrationManager
from piccolo.columns.base import OnDelete
from piccolo.columns.base import OnUpdate
from piccolo.columns.column_types import ForeignKey
from piccolo.columns.column_types import Serial
from piccolo.columns.indexes import IndexMethod
from piccolo.table import Table


class ApiToken(Table, tablename="accounts_api_token", schema=None):
    id = Serial(
        null=False,
        primary_key=True,
        unique=False,
        index=False,
        index_method=IndexMethod.btree,
        choices=None,
        db_column_name="id",
        secret=False,
    )


class EnrolmentLink(Table, tablename="accounts_enrolment_link", schema=None):
    id = Serial(
        null=False,
        primary_key=True,
        unique=False,
        index=False,
        index_method=IndexMethod.btree,
        choices=None,
        db_column_name="id",
        secret=False,
    )


ID = "2026-11-27T12:27:20:293552"
VERSION = "1.38.0"
DESCRIPTION = "accounts_session.api_token, .enrolment_link: the token a worker session was made from"


async def forwards():
    manager = MigrationManager(
        migration_id=ID, app_name="accounts", description=DESCRIPTION
    )

    manager.add_column(
        table_class_name="Session",
        tablename="accounts_session",
        column_name="api_token",
        db_column_name="api_token",
        column_class_name="ForeignKey",
        column_class=ForeignKey,
        params={
            "references": ApiToken,
            "on_delete": OnDelete.cascade,
            "on_update": OnUpdate.cascade,
            "target_column": None,
            "null": True,
            "primary_key": False,
            "unique": False,
            "index": True,
            "index_method": IndexMethod.btree,
            "choices": None,
            "db_column_name": None,
            "secret": False,
        },
        schema=None,
    )

    manager.add_column(
        table_class_name="Session",
        tablename="accounts_session",
        column_name="enrolment_link",
        db_column_name="enrolment_link",
        column_class_name="ForeignKey",
        column_class=ForeignKey,
        params={
            "references": EnrolmentLink,
            "on_delete": OnDelete.cascade,
            "on_update": OnUpdate.cascade,
            "target_column": None,
            "null": True,
            "primary_key": False,
            "unique": False,
            "index": True,
            "index_method": IndexMethod.btree,
            "choices": None,
            "db_column_name": None,
            "secret": False,
        },
        schema=None,
    )

    return manager
