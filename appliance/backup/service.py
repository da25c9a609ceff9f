"""A consistent copy of a data directory while the appliance runs, and its restore into a new one.

A backup directory holds the database (SQLite's online backup of ``peermr.sqlite3``, or a
``pg_dump`` archive ``peermr.pgdump``), ``secrets.json``, ``peermr.toml`` when there is one, the
appliance's blobs, and ``backup.json``, written last: a backup without it was cut short.

Blob files are immutable and named by their SHA-256, so they are copied around the database snapshot:
once before it, then again for those that appeared meanwhile. Every blob the snapshot says the
appliance holds is then in the copy, unless it was collected in the seconds between; such blobs are
counted and named in the summary.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import shutil
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from appliance import __version__
from appliance.config import CONFIG_FILE_NAME, Settings
from appliance.errors import ServiceError
from appliance.pmrfs.blobstore import SHA256_RE
from appliance.secret_keys import SECRETS_FILE_NAME

MANIFEST = "backup.json"
SQLITE_COPY = "peermr.sqlite3"
POSTGRES_DUMP = "peermr.pgdump"
BLOBS = "blobs"
FORMAT = 1


class BackupError(ServiceError):
    """A backup or restore refused or failed; the message says why."""


@dataclass
class Summary:
    database: str  # "sqlite" or "postgresql"
    blobs: int
    blob_bytes: int
    files: list[str]
    missing_blobs: list[str]
    created: str = ""
    version: str = ""


def backup(settings: Settings, target: Path) -> Summary:
    """Copy the data dir of ``settings`` (its appliance may be running) into ``target``, new or empty."""
    source = settings.data_path
    if not (source / SECRETS_FILE_NAME).is_file():
        raise BackupError(f"no {SECRETS_FILE_NAME} in {source}: is it the appliance's data directory?")
    _new_or_empty(target, "the backup directory")
    target.mkdir(parents=True, exist_ok=True)
    blobs = target / BLOBS
    _copy_blobs(source / BLOBS, blobs)
    if settings.uses_postgres:
        _run(["pg_dump", "--format=custom", "--no-owner", f"--file={target / POSTGRES_DUMP}"], settings.database_url)
        files, appliance_blobs = [POSTGRES_DUMP], None
    else:
        _sqlite_snapshot(settings.sqlite_path, target / SQLITE_COPY)
        files, appliance_blobs = [SQLITE_COPY], _appliance_blobs(target / SQLITE_COPY)
    _copy_blobs(source / BLOBS, blobs)  # those written while the snapshot was taken
    for name in (SECRETS_FILE_NAME, CONFIG_FILE_NAME):
        if (source / name).is_file():
            shutil.copyfile(source / name, target / name)
            files.append(name)
    copied = _blob_files(blobs)
    summary = Summary(
        database="postgresql" if settings.uses_postgres else "sqlite",
        blobs=len(copied),
        blob_bytes=sum(path.stat().st_size for path in copied.values()),
        files=files,
        missing_blobs=sorted(set(appliance_blobs or ()) - set(copied)),
        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        version=__version__,
    )
    (target / MANIFEST).write_text(json.dumps(summary.__dict__, indent=2) + "\n")
    return summary


def restore(source: Path, settings: Settings) -> Summary:
    """Put the backup in ``source`` into the data dir of ``settings``, which must be new or empty (and
    under PostgreSQL, its database too)."""
    try:
        summary = Summary(**json.loads((source / MANIFEST).read_text()))
    except FileNotFoundError:
        raise BackupError(f"{source} is not a complete backup: it has no {MANIFEST}") from None
    target = settings.data_path
    _new_or_empty(target, "the data directory to restore into")
    if (summary.database == "postgresql") != settings.uses_postgres:
        where = "PostgreSQL" if summary.database == "postgresql" else "SQLite"
        raise BackupError(f"the backup holds a {where} database: set database_url (PEERMR_DATABASE_URL) to match")
    target.mkdir(parents=True, exist_ok=True)
    if settings.uses_postgres:
        if tables := asyncio.run(_postgres_tables(settings.database_url)):
            raise BackupError(f"the database of database_url already has {tables} table(s): restore into an empty one")
        _run(["pg_restore", "--no-owner", "--exit-on-error", str(source / POSTGRES_DUMP)], settings.database_url)
    else:
        shutil.copyfile(source / SQLITE_COPY, settings.sqlite_path)
    for name in (SECRETS_FILE_NAME, CONFIG_FILE_NAME):
        if (source / name).is_file():
            shutil.copyfile(source / name, target / name)
    _copy_blobs(source / BLOBS, target / BLOBS)
    return summary


def _new_or_empty(path: Path, what: str) -> None:
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise BackupError(f"{what} {path} is not empty: give a new or empty directory (nothing was changed)")


def _sqlite_snapshot(database: Path, copy: Path) -> None:
    """SQLite's online backup: a consistent copy of every committed transaction, taken while the
    appliance goes on writing (it waits out a write in progress)."""
    source = sqlite3.connect(database, timeout=60)
    try:
        with sqlite3.connect(copy) as destination:
            source.backup(destination)
            destination.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        destination.close()
    finally:
        source.close()


def _appliance_blobs(database: Path) -> list[str]:
    """The blobs the database says are on the appliance's disk."""
    with sqlite3.connect(database) as db:
        rows = db.execute(
            "SELECT b.sha256 FROM pmrfs_replica r JOIN pmrfs_blob b ON b.id = r.blob "
            "WHERE r.holder = 'appliance' AND r.confirmed_at IS NOT NULL"
        ).fetchall()
    db.close()
    return [sha for (sha,) in rows]


def _blob_files(root: Path) -> dict[str, Path]:
    if not root.is_dir():
        return {}
    return {path.name: path for path in root.glob("??/??/*") if SHA256_RE.match(path.name)}


def _copy_blobs(source: Path, target: Path) -> None:
    """Copy the blob files of ``source`` not yet in ``target`` (ab/cd/<sha256>, as the blob store keeps them)."""
    have = _blob_files(target)
    for sha, path in _blob_files(source).items():
        if sha in have:
            continue
        copy = target / path.relative_to(source)
        copy.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(path, copy)
        except FileNotFoundError:
            copy.unlink(missing_ok=True)  # collected meanwhile: the snapshot check counts it if it mattered


async def _postgres_tables(url: str) -> int:
    import asyncpg

    connection = await asyncpg.connect(url)
    try:
        return await connection.fetchval("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'")
    finally:
        await connection.close()


def _run(command: list[str], database_url: str) -> None:
    """Run a PostgreSQL client tool on ``database_url``, its password in the environment (not in ps)."""
    parts = urlsplit(database_url)
    env = {**os.environ, "PGCONNECT_TIMEOUT": "30"}
    if parts.password is not None:
        env["PGPASSWORD"] = unquote(parts.password)
        netloc = parts.netloc.rpartition("@")[2]
        user = parts.username
        parts = parts._replace(netloc=f"{user}@{netloc}" if user else netloc)
    try:
        result = subprocess.run([*command, f"--dbname={urlunsplit(parts)}"], capture_output=True, text=True, env=env)
    except FileNotFoundError:
        raise BackupError(
            f"{command[0]} is not installed: install PostgreSQL's client tools of the server's version"
        ) from None
    if result.returncode != 0:
        raise BackupError(f"{command[0]} failed: {result.stderr.strip()}")
