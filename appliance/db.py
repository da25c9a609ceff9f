"""The metadata store: Piccolo on SQLite (default) or PostgreSQL.

SQLite is tuned for a ledger that must survive a crash: WAL journal,
``synchronous=FULL`` (a committed row is on disk), a busy timeout so
concurrent writers wait instead of failing, and IMMEDIATE transactions so a
transaction takes the write lock up front instead of failing half-way when it
upgrades from reading to writing. The server keeps a few SQLite connections for
queries and transactions (Piccolo opens one for each: a thread and three
statements, which was most of the cost of a small query or transaction).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import sqlite3
from collections.abc import Sequence

from piccolo.apps.migrations.commands.forwards import ForwardsMigrationManager
from piccolo.apps.migrations.tables import Migration
from piccolo.engine.base import Engine
from piccolo.engine.postgres import PostgresEngine
from piccolo.engine.sqlite import SQLiteEngine, SQLiteTransaction, TransactionType
from piccolo.table import Table

from appliance.config import Settings

log = logging.getLogger(__name__)

# Piccolo's own tooling (`piccolo migrations new ...`) finds the engine here.
os.environ.setdefault("PICCOLO_CONF", "appliance.piccolo_conf")

BUSY_TIMEOUT_MS = 10_000
POOL_SIZE = 4  # idle SQLite connections kept for queries and transactions
APPS = [
    "appliance.accounts.piccolo_app",
    "appliance.turn.piccolo_app",
    "appliance.fleet.piccolo_app",
    "appliance.pmrfs.piccolo_app",
    "appliance.jobs.piccolo_app",
    "appliance.cloud.piccolo_app",
    "appliance.billing.piccolo_app",
    "appliance.audit.piccolo_app",
    "appliance.metrics.piccolo_app",
    "appliance.cluster.piccolo_app",
]


class PooledTransaction(SQLiteTransaction):
    """A transaction on one of the engine's kept connections, its own until the transaction ends."""

    async def __aenter__(self) -> SQLiteTransaction:
        if self._parent is not None:
            return self._parent
        self.connection = await self.engine.take_connection()
        try:
            await self.begin()
        except BaseException:  # busy past the timeout, or cancelled: not kept
            await asyncio.shield(self.connection.close())
            raise
        self.context = self.engine.current_transaction.set(self)
        return self

    async def __aexit__(self, exception_type, exception, traceback) -> bool:
        if self._parent:
            return exception is None
        try:
            if exception and not self._rolled_back:
                await self.rollback()
            elif not exception and not self._committed and not self._rolled_back:
                await self.commit()
        except BaseException:
            await asyncio.shield(self.connection.close())  # mid-COMMIT or ROLLBACK: its state is unknown
            raise
        else:
            await self.engine.give_back(self.connection)
        finally:
            self.engine.current_transaction.reset(self.context)
        return exception is None


class DurableSQLiteEngine(SQLiteEngine):
    """SQLiteEngine whose every connection applies the durability pragmas. Once its pool is started
    (the server's lifetime; one-off commands open a connection per query as Piccolo does), queries
    and transactions run on kept connections, each on its own while it lasts."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.idle: list | None = None  # kept connections, None while the pool is not started

    async def start_connection_pool(self, **_) -> None:
        self.idle = []

    async def close_connection_pool(self) -> None:
        idle, self.idle = self.idle or [], None
        for connection in idle:
            await connection.close()

    async def take_connection(self):
        """A kept connection, or a new one; ``give_back`` it when done with it, or close it."""
        return self.idle.pop() if self.idle else await self.get_connection()

    async def give_back(self, connection) -> None:
        if self.idle is not None and len(self.idle) < POOL_SIZE:
            self.idle.append(connection)
        else:
            await connection.close()

    async def _run_in_new_connection(self, query: str, args=None, query_type: str = "generic", table=None):
        if self.idle is None or (query_type == "insert" and self.get_version_sync() < 3.35):
            return await super()._run_in_new_connection(query, args, query_type, table)
        connection = await self.take_connection()
        try:
            async with connection.execute(query, args or []) as cursor:
                await connection.commit()
                rows = await cursor.fetchall()
        except BaseException:
            # Its state is unknown (an error mid-statement, a cancelled query): not kept.
            await asyncio.shield(connection.close())
            raise
        await self.give_back(connection)
        return rows

    async def get_connection(self):
        connection = await super().get_connection()
        await connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        await connection.execute("PRAGMA synchronous = FULL")
        return connection

    def transaction(
        self,
        transaction_type: TransactionType = TransactionType.immediate,
        allow_nested: bool = True,
    ):
        if self.idle is None:  # one-off commands: a connection of its own, as Piccolo does
            return super().transaction(transaction_type=transaction_type, allow_nested=allow_nested)
        return PooledTransaction(engine=self, transaction_type=transaction_type, allow_nested=allow_nested)

    def atomic(self, transaction_type: TransactionType = TransactionType.immediate):
        return super().atomic(transaction_type=transaction_type)


def make_engine(settings: Settings) -> Engine:
    if settings.uses_postgres:
        return PostgresEngine(config={"dsn": settings.database_url})
    path = settings.sqlite_path
    path.parent.mkdir(parents=True, exist_ok=True)
    # WAL is a property of the file, so set it once, synchronously, before any query.
    with contextlib.closing(sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
    return DurableSQLiteEngine(path=str(path), timeout=BUSY_TIMEOUT_MS / 1000)


def _app_configs():
    from piccolo.conf.apps import Finder

    return [Finder().get_app_config(name) for name in _app_names()]


def _app_names() -> list[str]:
    from piccolo.conf.apps import Finder

    return Finder().get_sorted_app_names()


_engine: Engine | None = None


def configure(settings: Settings) -> Engine:
    """Create the engine for these settings and bind every table to it."""
    global _engine
    _engine = make_engine(settings)
    Migration._meta.db = _engine
    for app in _app_configs():
        for table in app.table_classes:
            table._meta.db = _engine
    return _engine


def current_engine() -> Engine:
    if _engine is None:
        from appliance.config import load_settings

        return configure(load_settings())
    return _engine


async def insert_many(transaction, table: type[Table], columns: Sequence[str], rows: list[tuple]) -> None:
    """Rows (values in ``columns`` order) into ``table`` with the driver's executemany on the
    transaction's connection (asyncpg's or aiosqlite's): no Piccolo query building a value."""
    if not rows:
        return
    names = ", ".join(f'"{column}"' for column in columns)  # quoted: "group" is an SQL keyword
    if isinstance(transaction.engine, PostgresEngine):
        marks = ", ".join(f"${n}" for n in range(1, len(columns) + 1))
    else:
        marks = ", ".join("?" * len(columns))
    await transaction.connection.executemany(f"INSERT INTO {table._meta.tablename} ({names}) VALUES ({marks})", rows)


async def save_only_row(table: type, values: dict) -> None:
    """Update the one row of a settings table, or insert it (``values``: column -> value)."""
    async with table._meta.db.transaction():
        if await table.exists():
            await table.update(values, force=True)
        else:
            await table.insert(table(**{column._meta.name: value for column, value in values.items()}))


async def migrate() -> list[str]:
    """Apply pending migrations of every domain; returns the ids applied."""
    applied: list[str] = []
    for name in _app_names():
        before = (
            set(await Migration.get_migrations_which_ran(app_name=name)) if await Migration.table_exists() else set()
        )
        manager = ForwardsMigrationManager(app_name=name)
        # Piccolo narrates with emoji on stdout; keep our own output clean.
        with contextlib.redirect_stdout(io.StringIO()) as out:
            result = await manager.run()
        if not result.success:
            raise RuntimeError(f"migrations of {name} failed: {result.message}\n{out.getvalue()}")
        after = set(await Migration.get_migrations_which_ran(app_name=name))
        applied += sorted(after - before)
    for migration_id in applied:
        log.debug("applied migration %s", migration_id)
    if applied:
        log.info("applied %d migration(s), the last %s", len(applied), max(applied))
    return applied
