"""Secrets generated on first start and kept in the data directory (mode 0600)."""

from __future__ import annotations

import json
import logging
import os
import secrets
from pathlib import Path

import msgspec

log = logging.getLogger(__name__)
SECRETS_FILE_NAME = "secrets.json"


class Secrets(msgspec.Struct, frozen=True):
    # Signs CSRF tokens and keys the hash of session identifiers.
    session_key: str
    # Shared with the TURN server for coturn-style REST credentials.
    turn_secret: str


def _generate() -> Secrets:
    return Secrets(session_key=secrets.token_hex(32), turn_secret=secrets.token_hex(32))


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
        stored = msgspec.json.decode(path.read_bytes(), type=Secrets)
    else:
        stored = _generate()
        with os.fdopen(fd, "w") as fh:
            json.dump(msgspec.to_builtins(stored), fh)
            fh.flush()
            os.fsync(fh.fileno())
    if turn_secret_override:
        return msgspec.structs.replace(stored, turn_secret=turn_secret_override)
    return stored
