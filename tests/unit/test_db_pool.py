"""The server's kept SQLite connections (appliance/db.py): queries and transactions reuse them, see
what other connections committed, and a failed query or transaction leaves nothing behind."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from appliance import db
from appliance.db import POOL_SIZE, DurableSQLiteEngine


@pytest.fixture
async def engine(tmp_path):
    path = tmp_path / "pool.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE t (x INTEGER NOT NULL)")
    engine = DurableSQLiteEngine(path=str(path))
    await engine.start_connection_pool()
    yield engine
    await engine.close_connection_pool()


async def test_queries_reuse_a_kept_connection_that_applies_the_durability_pragmas(engine):
    await engine._run_in_new_connection("INSERT INTO t (x) VALUES (?)", [1])
    kept = list(engine.idle)
    assert len(kept) == 1
    assert await engine._run_in_new_connection("PRAGMA synchronous") == [{"synchronous": 2}]  # FULL
    assert engine.idle == kept


async def test_a_kept_connection_reads_what_another_connection_committed(engine, tmp_path):
    assert await engine._run_in_new_connection("SELECT count(*) AS n FROM t") == [{"n": 0}]
    with sqlite3.connect(tmp_path / "pool.sqlite") as other:
        other.execute("INSERT INTO t (x) VALUES (7)")
    assert await engine._run_in_new_connection("SELECT x FROM t") == [{"x": 7}]


async def test_a_failed_query_raises_its_error_drops_its_connection_and_the_next_query_works(engine):
    await engine._run_in_new_connection("SELECT 1")
    with pytest.raises(sqlite3.IntegrityError, match="NOT NULL"):
        await engine._run_in_new_connection("INSERT INTO t (x) VALUES (NULL)")
    assert engine.idle == []  # the failed query's connection is closed, not kept
    await engine._run_in_new_connection("INSERT INTO t (x) VALUES (2)")
    assert await engine._run_in_new_connection("SELECT x FROM t") == [{"x": 2}]


async def test_at_most_pool_size_connections_are_kept_and_closing_the_pool_closes_them(engine):
    await asyncio.gather(*(engine._run_in_new_connection("SELECT 1") for _ in range(POOL_SIZE + 3)))
    assert len(engine.idle) == POOL_SIZE
    kept = list(engine.idle)
    await engine.close_connection_pool()
    assert engine.idle is None and all(c._connection is None for c in kept)
    # Without a pool (one-off commands), each query opens its own connection again.
    assert await engine._run_in_new_connection("SELECT 3 AS n") == [{"n": 3}]


async def test_transactions_run_on_kept_connections_and_give_them_back(engine):
    async with engine.transaction() as tx:
        await tx.connection.execute("INSERT INTO t (x) VALUES (1)")
        inside = tx.connection
    assert engine.idle == [inside]
    async with engine.transaction() as tx:  # the next one takes it again
        assert tx.connection is inside
        await tx.connection.execute("INSERT INTO t (x) VALUES (2)")
    assert await engine._run_in_new_connection("SELECT x FROM t ORDER BY x") == [{"x": 1}, {"x": 2}]


async def test_a_transaction_that_fails_is_rolled_back_and_its_connection_kept_clean(engine):
    with pytest.raises(sqlite3.IntegrityError, match="NOT NULL"):
        async with engine.transaction() as tx:
            await tx.connection.execute("INSERT INTO t (x) VALUES (1)")
            await tx.connection.execute("INSERT INTO t (x) VALUES (NULL)")
    assert len(engine.idle) == 1 and not engine.idle[0].in_transaction
    assert await engine._run_in_new_connection("SELECT count(*) AS n FROM t") == [{"n": 0}]


async def test_a_transaction_busy_past_the_timeout_fails_and_keeps_no_connection(engine, tmp_path, monkeypatch):
    monkeypatch.setattr(db, "BUSY_TIMEOUT_MS", 100)
    holder = sqlite3.connect(tmp_path / "pool.sqlite", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            async with engine.transaction():
                pass
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert engine.idle == []
    async with engine.transaction() as tx:
        await tx.connection.execute("INSERT INTO t (x) VALUES (3)")
    assert await engine._run_in_new_connection("SELECT x FROM t") == [{"x": 3}]
