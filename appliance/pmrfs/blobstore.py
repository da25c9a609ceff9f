"""The appliance as a datanode: blob files under ``<data-dir>/blobs/ab/cd/<sha256>``.

A file is written atomically (temporary file, fsync, rename, fsync of the directory) and
only under the SHA-256 of its content; every read verifies it again, and a file whose content
does not match its name is removed, logged, and treated as missing.

Disk work runs in worker threads so the event loop keeps serving. Uploads that are writing
blobs hold them (``hold``/``release``) so garbage collection never removes a file an upload
is about to reference. The appliance has one ``BlobStore`` (built by ``create_app``, or once by a
CLI command): the holds are counted in it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import logging
import os
import re
import secrets
import time
from pathlib import Path

log = logging.getLogger(__name__)

# The fixed maximum size of a blob: objects are cut into pieces of exactly this size (the last may be shorter).
BLOB_SIZE = 4 * 1024 * 1024
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def sha256_hex(data: bytes | bytearray | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


class BlobStore:
    def __init__(self, root: Path):
        self.root = root
        # sha256 -> number of uploads (or downloads) currently writing, committing or reading that blob.
        self._held: collections.Counter[str] = collections.Counter()

    def hold(self, sha: str) -> None:
        self._held[sha] += 1

    def release(self, sha: str) -> None:
        self._held[sha] -= 1
        if self._held[sha] <= 0:
            del self._held[sha]

    def is_held(self, sha: str) -> bool:
        return self._held.get(sha, 0) > 0

    def path(self, sha: str) -> Path:
        if not SHA256_RE.match(sha):
            raise ValueError(f"not a SHA-256 hex digest: {sha!r}")
        return self.root / sha[:2] / sha[2:4] / sha

    # -- blocking primitives (run in threads) ------------------------------------------------

    def _read_verified(self, sha: str) -> bytes | None:
        path = self.path(sha)
        try:
            with open(path, "rb") as f:
                data = f.read()
                if sha256_hex(data) == sha:
                    return data
                inode = os.fstat(f.fileno()).st_ino
        except FileNotFoundError:
            return None
        log.error("blob %s on disk is corrupt (%d bytes, hash differs); removing it", sha, len(data))
        with contextlib.suppress(FileNotFoundError):
            # Unless an upload has just replaced it with a good copy.
            if os.stat(path).st_ino == inode:
                path.unlink()
        return None

    def _write(self, sha: str, data: bytes, *, hashed: bool = False) -> bool:
        """Store ``data`` under ``sha`` unless a good copy is there already; True when a file was written.

        ``hashed``: the caller has just computed ``sha`` from ``data`` itself.
        """
        if not hashed and sha256_hex(data) != sha:
            raise ValueError(f"content does not match {sha}")
        path = self.path(sha)
        if path.is_file() and self._read_verified(sha) is not None:
            # A fresh time tells the orphan sweep this file is in use again.
            with contextlib.suppress(FileNotFoundError):
                os.utime(path)
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".tmp-{sha[:16]}-{secrets.token_hex(6)}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise
        _fsync_dir(path.parent)
        return True

    def remove(self, sha: str) -> bool:
        """Unlink a blob file at once (no thread hop, so a caller can check ``is_held`` just before)."""
        try:
            self.path(sha).unlink()
        except FileNotFoundError:
            return False
        return True

    # -- async interface --------------------------------------------------------------------

    async def put(self, data: bytes) -> tuple[str, bool]:
        """Hash and store one blob; returns its SHA-256 and whether a new file was written.

        The blob is held (see ``hold``) from before its file is checked until the caller releases it.
        """
        sha = await asyncio.to_thread(sha256_hex, data)
        self.hold(sha)
        try:
            written = await asyncio.to_thread(self._write, sha, data, hashed=True)
        except BaseException:
            self.release(sha)
            raise
        return sha, written

    async def get(self, sha: str) -> bytes | None:
        """The verified content of a blob, or None when it is missing or corrupt."""
        return await asyncio.to_thread(self._read_verified, sha)

    def exists(self, sha: str) -> bool:
        return self.path(sha).is_file()

    def stored(self, older_than: float = 0) -> list[str]:
        """Blob files present (names only, not verified), optionally only those untouched for ``older_than`` s."""
        if not self.root.is_dir():
            return []
        limit = time.time() - older_than
        found = []
        for p in self.root.glob("??/??/*"):
            if SHA256_RE.match(p.name):
                with contextlib.suppress(FileNotFoundError):
                    if not older_than or p.stat().st_mtime < limit:
                        found.append(p.name)
        return found

    def sweep_temporary(self, older_than: float = 3600) -> int:
        """Remove temporary files an interrupted write left behind."""
        removed = 0
        if not self.root.is_dir():
            return 0
        limit = time.time() - older_than
        for tmp in self.root.glob("??/??/.tmp-*"):
            with contextlib.suppress(FileNotFoundError):
                if tmp.stat().st_mtime < limit:
                    tmp.unlink()
                    removed += 1
        return removed


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def store_for(data_path: Path) -> BlobStore:
    """The data dir's blob store: built once, by create_app or a CLI command, and passed to whoever needs it."""
    return BlobStore(data_path / "blobs")
