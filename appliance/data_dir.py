"""The data directory is its owner's alone.

It holds job scripts, run logs, the audit log and PMRFS blobs (private outputs among them). Every
command that creates or writes it (serve, migrate, user add, token create, bill, the worker
runner's browser profiles) calls ``keep_private`` first: with umask 077 whatever the process makes
from then on (the directory, the SQLite file and its -wal and -shm, blobs) is readable by its owner
only, Chromium's profiles included. A directory that already exists open to others is the
operator's to fix: ``peermr serve`` says so at start (``warn_if_exposed``) and changes nothing.
"""

from __future__ import annotations

import logging
import os
import stat

from appliance.config import Settings

log = logging.getLogger(__name__)

PRIVATE_UMASK = 0o077


def keep_private() -> None:
    os.umask(PRIVATE_UMASK)


def exposed(settings: Settings) -> list[str]:
    """The data dir and SQLite file, as "path (mode)", that group or others may read or write."""
    paths = [settings.data_path] + ([] if settings.uses_postgres else [settings.sqlite_path])
    found = []
    for path in paths:
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            continue
        if mode & 0o077:
            found.append(f"{path} ({stat.filemode(mode)})")
    return found


def warn_if_exposed(settings: Settings) -> None:
    if found := exposed(settings):
        log.warning(
            "other users of this machine can open the data directory: %s. It holds job scripts, logs, "
            "the audit log and PMRFS data. Restrict it to this account with: chmod -R go-rwx %s",
            ", ".join(found),
            settings.data_path,
        )
