"""Scheduler leadership: one active scheduler, the others standing by, on a PostgreSQL advisory lock.

The lock is session-level (``pg_try_advisory_lock``) on a connection of its own, so it lasts exactly as
long as that session: a clean stop unlocks it at once; a process that dies closes its TCP connection and
PostgreSQL ends the session, which frees the lock; a leader whose connection breaks, or stops answering
within ``check_seconds``, gives up (``lost``), and the server, which sends TCP keepalives on that session,
ends it and frees the lock a little after. A standby holds a connection too and tries the lock every
``retry_seconds``.

Who leads: the leader records its advertised URL in the table ``cluster_leader`` (tables.py) with its
lock session's backend pid, and :func:`current_leader` believes the row only while that backend holds the
lock (``pg_locks``): a dead leader's row names nobody, with nothing to clean up. A table (a migration of
the ``cluster`` app), not the lock session's ``application_name``, which PostgreSQL cuts at 63 bytes,
shorter than some URLs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math

import asyncpg

log = logging.getLogger(__name__)

LEADER_LOCK_KEY = 0x7065_6572_6D72_0001  # "peermr" in ASCII, then 1: the scheduler's leadership
MIGRATION_LOCK_KEY = 0x7065_6572_6D72_0002  # one process at a time migrates the schema

# What an unreachable, restarting or overloaded database raises: retried. Anything else (a wrong
# password, a missing table) is a mistake to report, not to wait out.
UNREACHABLE = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
)

RECORD_LEADER = """
INSERT INTO cluster_leader (lock_key, url, backend_pid, since) VALUES ($1, $2, pg_backend_pid(), now())
ON CONFLICT (lock_key) DO UPDATE SET url = EXCLUDED.url, backend_pid = EXCLUDED.backend_pid, since = EXCLUDED.since
"""
# pg_locks shows a bigint advisory key as its high half (classid) and low half (objid), objsubid 1.
CURRENT_LEADER = """
SELECT leader.url FROM cluster_leader AS leader JOIN pg_locks AS held ON held.pid = leader.backend_pid
WHERE leader.lock_key = $1 AND held.locktype = 'advisory' AND held.granted AND held.objsubid = 1
  AND held.classid::bigint = $2 AND held.objid::bigint = $3
  AND held.database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


class Leadership:
    """This process's claim to lead: :meth:`acquire` returns once it leads, ``lost`` is set if it stops
    leading without :meth:`release` (it must then stop acting as leader; ``leader`` is False)."""

    def __init__(
        self,
        database_url: str,
        *,
        advertise: str,
        retry_seconds: float = 2.0,
        check_seconds: float = 2.0,
        key: int = LEADER_LOCK_KEY,
    ):
        self.database_url = database_url
        self.advertise = advertise
        self.retry_seconds = retry_seconds
        self.check_seconds = check_seconds
        self.key = key
        self.lost = asyncio.Event()
        self._connection: asyncpg.Connection | None = None
        self._check_task: asyncio.Task | None = None
        self._outage = False

    @property
    def leader(self) -> bool:
        return self._connection is not None and not self.lost.is_set()

    async def acquire(self) -> None:
        """Returns once this process leads (at once if it does already)."""
        if self.leader:
            return
        self.lost.clear()
        while True:
            connection = await self._connect()
            try:
                await self._take_lock(connection)
                break
            except UNREACHABLE as error:
                connection.terminate()
                self._outage_began(error)
                await asyncio.sleep(self.retry_seconds)
            except BaseException:
                connection.terminate()  # the lock, if taken, goes with the session
                raise
        self._connection = connection
        connection.add_termination_listener(self._closed)
        self._check_task = asyncio.create_task(self._check(connection), name="leadership check")
        log.info("leading the schedulers as %s", self.advertise)

    async def release(self) -> None:
        """Stops leading and hands over at once (the lock is freed before this returns)."""
        connection, self._connection = self._connection, None
        if self._check_task is not None:
            self._check_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._check_task  # off the connection before it unlocks
            self._check_task = None
        if connection is None:
            return
        try:
            await connection.fetchval("SELECT pg_advisory_unlock($1)", self.key, timeout=self.check_seconds)
            await connection.close(timeout=self.check_seconds)
        except Exception:  # the session's end frees the lock all the same
            connection.terminate()
        log.info("handed over the leadership")

    async def _connect(self) -> asyncpg.Connection:
        # The server probes an idle lock session, so it ends a vanished leader's within about 3 checks.
        probe = str(max(1, math.ceil(self.check_seconds)))
        settings = {
            "application_name": "peermr leadership",
            "tcp_keepalives_idle": probe,
            "tcp_keepalives_interval": probe,
            "tcp_keepalives_count": "2",
        }
        while True:
            try:
                connection = await asyncpg.connect(
                    self.database_url, timeout=max(self.check_seconds, 5), server_settings=settings
                )
            except UNREACHABLE as error:
                self._outage_began(error)
                await asyncio.sleep(self.retry_seconds)
                continue
            if self._outage:
                self._outage = False
                log.info("the database answers again")
            return connection

    async def _take_lock(self, connection: asyncpg.Connection) -> None:
        while not await connection.fetchval("SELECT pg_try_advisory_lock($1)", self.key, timeout=self.check_seconds):
            await asyncio.sleep(self.retry_seconds)
        await connection.execute(RECORD_LEADER, self.key, self.advertise, timeout=self.check_seconds)

    def _outage_began(self, error: BaseException) -> None:
        if not self._outage:  # once per outage, not at every try
            self._outage = True
            log.warning("leadership: the database does not answer (%r); retrying every %g s", error, self.retry_seconds)

    async def _check(self, connection: asyncpg.Connection) -> None:
        while self._connection is connection:
            await asyncio.sleep(self.check_seconds)
            try:
                await connection.fetchval("SELECT 1", timeout=self.check_seconds)
            except Exception as error:  # whatever the cause, the lock is no longer sure
                self._lose(connection, f"its lock connection did not answer ({error!r})")

    def _closed(self, connection: asyncpg.Connection) -> None:
        self._lose(connection, "its lock connection closed")

    def _lose(self, connection: asyncpg.Connection, reason: str) -> None:
        if self._connection is not connection:  # released, or already lost
            return
        self._connection = None
        self.lost.set()
        connection.terminate()
        log.error("leadership lost: %s", reason)


async def current_leader(database_url: str, *, key: int = LEADER_LOCK_KEY, timeout: float = 5.0) -> str | None:
    """The advertised URL of the process that leads now, or None while nobody does."""
    connection = await asyncpg.connect(database_url, timeout=timeout)
    try:
        high, low = (key >> 32) & 0xFFFF_FFFF, key & 0xFFFF_FFFF
        return await connection.fetchval(CURRENT_LEADER, key, high, low, timeout=timeout)
    finally:
        await connection.close(timeout=timeout)


@contextlib.asynccontextmanager
async def migrating(database_url: str, *, key: int = MIGRATION_LOCK_KEY, timeout: float = 10.0):
    """Holds the migration lock: schedulers starting together migrate the schema one after another
    (the later ones find nothing left to do) before any of them campaigns, whose record needs it."""
    connection = await asyncpg.connect(database_url, timeout=timeout)
    try:
        await connection.execute("SELECT pg_advisory_lock($1)", key)
        yield
    finally:
        connection.terminate()  # the session's end frees the lock
