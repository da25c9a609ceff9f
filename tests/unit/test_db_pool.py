"""The server's kept SQLite connections (appliance/db.py): queries outside transactions reuse them,
see what other connections committed, and a failed query leaves nothing behind."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

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
