"""Secrets generated on first start and kept in the data directory (mode 0600)."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import secrets
from pathlib import Path

import msgspec

try:
    import fcntl
except ImportError:  # not on POSIX: no other process to race with in practice
    fcntl = None

log = logging.getLogger(__name__)
SECRETS_FILE_NAME = "secrets.json"


class Secrets(msgspec.Struct, frozen=True):
    # Signs CSRF tokens and keys the hash of session identifiers.
    session_key: str
    # Shared with the TURN server for coturn-style REST credentials.
    turn_secret: str
    # Fernet key encrypting the Cloud Data secrets stored in the database. Data dirs made before it
    # existed get one on their next start (see _add_missing).
    cloud_data_key: str = ""


def _fernet_key() -> str:
    """32 random bytes in the URL-safe base64 form cryptography's Fernet takes."""
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()


def _generate() -> Secrets:
    return Secrets(session_key=secrets.token_hex(32), turn_secret=secrets.token_hex(32), cloud_data_key=_fernet_key())


@contextlib.contextmanager
def _locked(path: Path):
    """Excludes other processes starting on the same data dir while the file is rewritten."""
    if fcntl is None:
        yield
        return
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _rewrite(path: Path, data: dict) -> None:
    """Replace the file atomically, keeping it readable by its owner only."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _add_missing(path: Path, stored: Secrets) -> Secrets:
    """Generate, once, the keys a data dir made by an earlier version lacks."""
    if stored.cloud_data_key:
        return stored
    with _locked(path):
        # Another process may have added them while this one waited for the lock.
        data = json.loads(path.read_bytes())
        if not data.get("cloud_data_key"):
            data["cloud_data_key"] = _fernet_key()
            _rewrite(path, data)
            log.info("added the Cloud Data encryption key to %s", path)
    return msgspec.convert(data, type=Secrets)


def load_or_create_secrets(data_dir: Path, turn_secret_override: str = "") -> Secrets:
    path = data_dir / SECRETS_FILE_NAME
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        # O_EXCL: two processes starting at once must not overwrite each other's secrets.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if path.stat().st_mode & 0o077:
            log.warning("%s was readable by others; restricting it to its owner", path)
            path.chmod(0o600)
        stored = _add_missing(path, msgspec.json.decode(path.read_bytes(), type=Secrets))
    else:
        stored = _generate()
        with os.fdopen(fd, "w") as fh:
            json.dump(msgspec.to_builtins(stored), fh)
            fh.flush()
            os.fsync(fh.fileno())
    if turn_secret_override:
        return msgspec.structs.replace(stored, turn_secret=turn_secret_override)
    return stored
