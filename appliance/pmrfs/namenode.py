"""The namenode's bookkeeping of replicas: who holds which blob, what is live, what may go.

Holders are the appliance itself (``APPLIANCE``, its files under ``<data-dir>/blobs``) and worker
browsers (their worker id). A replica counts once its holder confirmed it (stored and verified);
it serves only while its holder is live. The appliance is always live; workers are live while
connected, which ``LiveHolders`` says (the appliance has one, built by ``create_app`` and kept up
to date by ``DataNodes``, which also lends it the way to read a blob back from a browser).

Nothing here decides placement or starts transfers: this module answers what the placement and
re-replication loop needs (``replication_report``, ``private_owners``) and records what it did
(``add_replica``, ``confirm_replica``, ``remove_replica``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Iterable

import msgspec
from piccolo.query.functions.aggregate import Count, Sum

from appliance.clock import now
from appliance.pmrfs.blobstore import BlobStore
from appliance.pmrfs.tables import Blob, ObjectBlob, Replica

log = logging.getLogger(__name__)

APPLIANCE = "appliance"
MAX_HOLDER_LENGTH = 64
RESTORES_AT_ONCE = 4  # blobs restore_appliance_copies fetches from browsers at a time
# Lists passed to SQL IN (...) are cut into pieces of this many values.
CHUNK = 500


def chunks(values: list, size: int = CHUNK) -> Iterable[list]:
    for i in range(0, len(values), size):
        yield values[i : i + size]


class LiveHolders:
    """The worker ids connected right now; the appliance is always live.

    ``fetch`` reads a blob back from a live browser replica (set by whoever runs browser datanodes, while
    they run): it returns the verified bytes, or None when no holder could deliver them. ``restore``
    (set likewise) copies blobs back to the appliance from their browser replicas in the background.
    """

    def __init__(self) -> None:
        self._live: set[str] = set()
        self.fetch: Callable[[str], Awaitable[bytes | None]] | None = None
        self.restore: Callable[[list[str]], None] | None = None

    def connected(self, holder: str) -> None:
        self._live.add(holder)

    def disconnected(self, holder: str) -> None:
        self._live.discard(holder)

    def is_live(self, holder: str) -> bool:
        return holder == APPLIANCE or holder in self._live

    def workers(self) -> set[str]:
        return set(self._live)


class ReplicaInfo(msgspec.Struct, frozen=True):
    holder: str
    added_at: dt.datetime
    confirmed_at: dt.datetime | None

    @property
    def confirmed(self) -> bool:
        return self.confirmed_at is not None


class BlobNeed(msgspec.Struct, frozen=True):
    """A blob with fewer live browser replicas than the replication factor."""

    sha256: str
    size: int
    live_workers: list[str]
    missing: int


def serving(replicas: Iterable[ReplicaInfo], live: LiveHolders) -> list[str]:
    """The holders that can deliver a blob now: confirmed and live, the appliance first."""
    holders = {r.holder for r in replicas if r.confirmed and live.is_live(r.holder)}
    return sorted(holders, key=lambda h: (h != APPLIANCE, h))


def check_holder(holder: str) -> str:
    if not holder or len(holder) > MAX_HOLDER_LENGTH or not holder.isprintable():
        raise ValueError(f"not a holder id: {holder!r}")
    return holder


async def _blob_id(sha: str) -> int:
    row = await Blob.select(Blob.id).where(Blob.sha256 == sha).first()
    if row is None:
        raise KeyError(f"no blob {sha}")
    return row["id"]


async def add_replica(sha: str, holder: str, *, confirmed: bool = True) -> None:
    """Record that ``holder`` holds (confirmed) or is receiving (not confirmed) blob ``sha``."""
    check_holder(holder)
    async with Blob._meta.db.transaction():
        blob_id = await _blob_id(sha)
        slot = f"{blob_id}:{holder}"
        t = now()
        existing = await Replica.select(Replica.id, Replica.confirmed_at).where(Replica.slot == slot).first()
        if existing is None:
            await Replica.insert(
                Replica(blob=blob_id, holder=holder, slot=slot, added_at=t, confirmed_at=t if confirmed else None)
            )
        elif confirmed and existing["confirmed_at"] is None:
            await Replica.update({Replica.confirmed_at: t}).where(Replica.id == existing["id"])


async def confirm_replica(sha: str, holder: str) -> None:
    await add_replica(sha, holder, confirmed=True)


async def remove_replica(sha: str, holder: str) -> bool:
    """Forget one replica (the holder lost it, or failed verification); True when there was one."""
    row = await Blob.select(Blob.id).where(Blob.sha256 == sha).first()
    if row is None:
        return False
    deleted = await Replica.delete().where(Replica.slot == f"{row['id']}:{holder}").returning(Replica.id)
    return bool(deleted)


async def blobs_held_by(holder: str) -> list[str]:
    return (await blobs_held_by_each([holder]))[holder]


async def blobs_held_by_each(holders: list[str]) -> dict[str, list[str]]:
    """The blobs each of these holders holds, sorted (one query per CHUNK holders)."""
    held: dict[str, list[str]] = {holder: [] for holder in holders}
    for part in chunks(holders):
        for row in await Replica.select(Replica.holder, Replica.blob.sha256).where(Replica.holder.is_in(part)):
            held[row["holder"]].append(row["blob.sha256"])
    return {holder: sorted(shas) for holder, shas in held.items()}


async def replicas_by_blob(blob_ids: list[int]) -> dict[int, list[ReplicaInfo]]:
    found: dict[int, list[ReplicaInfo]] = {blob_id: [] for blob_id in blob_ids}
    for part in chunks(sorted(set(blob_ids))):
        rows = await Replica.select(Replica.blob, Replica.holder, Replica.added_at, Replica.confirmed_at).where(
            Replica.blob.is_in(part)
        )
        for r in rows:
            found[r["blob"]].append(ReplicaInfo(r["holder"], r["added_at"], r["confirmed_at"]))
    return found


async def replicas_of(sha: str) -> list[ReplicaInfo]:
    blob_id = await _blob_id(sha)
    return (await replicas_by_blob([blob_id]))[blob_id]


async def private_owners(sha: str) -> set[int]:
    """Accounts owning a private bucket with an object made of this blob.

    A browser of account X may hold the blob only when this set is empty or exactly {X}
    (a blob shared by two accounts' private buckets stays on the appliance).
    """
    rows = await ObjectBlob.select(ObjectBlob.stored_object.bucket.owner).where(
        (ObjectBlob.blob.sha256 == sha) & (ObjectBlob.stored_object.bucket.private == True)  # noqa: E712
    )
    return {r["stored_object.bucket.owner"] for r in rows}


async def _referenced_blobs() -> dict[int, tuple[str, int, bool]]:
    """blob id -> (sha256, size, whether some pinned object references it), for every referenced blob."""
    rows = await ObjectBlob.select(
        ObjectBlob.blob, ObjectBlob.blob.sha256, ObjectBlob.blob.size, ObjectBlob.stored_object.pinned
    )
    blobs: dict[int, tuple[str, int, bool]] = {}
    for r in rows:
        sha, size, pinned = r["blob.sha256"], r["blob.size"], bool(r["stored_object.pinned"])
        previous = blobs.get(r["blob"])
        blobs[r["blob"]] = (sha, size, pinned or (previous[2] if previous else False))
    return blobs


def _live_workers(replicas: list[ReplicaInfo], live: LiveHolders) -> list[str]:
    return sorted({r.holder for r in replicas if r.holder != APPLIANCE and r.confirmed and live.is_live(r.holder)})


async def replication_report(factor: int, live: LiveHolders) -> list[BlobNeed]:
    """Referenced blobs held by fewer than ``factor`` distinct live workers, the most urgent first."""
    blobs = await _referenced_blobs()
    replicas = await replicas_by_blob(list(blobs))
    needs = []
    for blob_id, (sha, size, _) in blobs.items():
        workers = _live_workers(replicas[blob_id], live)
        if len(workers) < factor:
            needs.append(BlobNeed(sha256=sha, size=size, live_workers=workers, missing=factor - len(workers)))
    return sorted(needs, key=lambda n: (len(n.live_workers), n.sha256))


async def release_appliance_copies(
    store: BlobStore, factor: int, live: LiveHolders, shas: Iterable[str] | None = None
) -> list[str]:
    """Drop the appliance's copy of each blob that no longer needs it; returns the blobs released.

    A copy may go when no pinned object contains the blob and at least ``factor`` distinct live
    workers hold a confirmed replica. Blobs an upload is writing right now are left alone.
    """
    wanted = set(shas) if shas is not None else None
    blobs = await _referenced_blobs()
    replicas = await replicas_by_blob(list(blobs))
    candidates = [
        (blob_id, sha)
        for blob_id, (sha, _, pinned) in blobs.items()
        if (wanted is None or sha in wanted)
        and not pinned
        and any(r.holder == APPLIANCE for r in replicas[blob_id])
        and len(_live_workers(replicas[blob_id], live)) >= factor
        and not store.is_held(sha)
    ]
    released = []
    for blob_id, sha in candidates:
        async with Replica._meta.db.transaction():
            # Pinned in the meantime? Then the copy stays.
            pinned_now = await ObjectBlob.exists().where(
                (ObjectBlob.blob == blob_id) & (ObjectBlob.stored_object.pinned == True)  # noqa: E712
            )
            if pinned_now or store.is_held(sha):
                continue
            await Replica.delete().where(Replica.slot == f"{blob_id}:{APPLIANCE}")
        await remove_file_if_unused(store, sha)
        released.append(sha)
        log.info("released the appliance copy of blob %s (%d live workers hold it)", sha, factor)
    return released


async def drop_appliance_replica(sha: str) -> None:
    """The appliance's file for ``sha`` is missing or corrupt: it no longer counts as a replica."""
    if await remove_replica(sha, APPLIANCE):
        log.error("blob %s is missing or corrupt on the appliance's disk; its appliance replica is forgotten", sha)


async def restore_appliance_copies(store: BlobStore, shas: Iterable[str], live: LiveHolders) -> list[str]:
    """Bring blobs back onto the appliance's disk from live browsers (after an object is pinned again,
    or a run's output is kept).

    Uses ``live.fetch``, RESTORES_AT_ONCE blobs at a time (a run's output is one blob per rank, each
    from another browser; the bytes of as many are in memory at once); returns the blobs restored.
    Blobs it cannot fetch now are left as they are.
    """
    limit = asyncio.Semaphore(RESTORES_AT_ONCE)

    async def restore(sha: str) -> bool:
        async with limit:
            if await has_appliance_replica(sha) and store.exists(sha):
                return False
            data = await live.fetch(sha) if live.fetch is not None else None
            if data is None:
                return False
            try:
                await store.put(data)
                try:
                    await add_replica(sha, APPLIANCE)
                except KeyError:
                    return False  # deleted meanwhile; garbage collection takes the file
            finally:
                store.release(sha)
            return True

    wanted = list(dict.fromkeys(shas))
    done = await asyncio.gather(*(restore(sha) for sha in wanted))
    return [sha for sha, restored in zip(wanted, done, strict=True) if restored]


async def collect_garbage(store: BlobStore) -> list[str]:
    """Delete blobs no object references any more (their replicas with them) and the appliance's files.

    Returns the SHA-256 of every blob removed. Blobs an upload holds are skipped.
    """
    rows = await Blob.select(Blob.id, Blob.sha256).where(Blob.id.not_in(ObjectBlob.select(ObjectBlob.blob)))
    rows = [r for r in rows if not store.is_held(r["sha256"])]
    removed: list[str] = []
    for part in chunks(rows):
        ids = [r["id"] for r in part]
        async with Blob._meta.db.transaction():
            # Referenced again since (an upload of the same content)? Then it stays.
            deleted = (
                await Blob.delete()
                .where(Blob.id.is_in(ids) & Blob.id.not_in(ObjectBlob.select(ObjectBlob.blob)))
                .returning(Blob.sha256)
            )
        for r in deleted:
            await remove_file_if_unused(store, r["sha256"])
            removed.append(r["sha256"])
    if removed:
        log.info("garbage collection removed %d blob(s)", len(removed))
    return removed


async def has_appliance_replica(sha: str) -> bool:
    return await Replica.exists().where((Replica.blob.sha256 == sha) & (Replica.holder == APPLIANCE))


async def remove_file_if_unused(store: BlobStore, sha: str) -> bool:
    """Unlink the appliance's file for ``sha`` unless a replica row or an upload still needs it.

    The database is asked first; the hold check and the unlink then run without yielding to the
    event loop, so an upload either holds the blob before (and the file stays) or finds it gone
    after (and writes it again).
    """
    if await has_appliance_replica(sha):
        return False
    if store.is_held(sha):
        return False
    return store.remove(sha)


async def sweep_orphan_files(store: BlobStore, older_than: float = 3600) -> list[str]:
    """Remove blob files with no appliance replica, untouched for ``older_than`` seconds
    (what an interrupted upload or a crash between write and commit leaves behind)."""
    removed = []
    for sha in sorted(store.stored(older_than)):
        if await remove_file_if_unused(store, sha):
            removed.append(sha)
    store.sweep_temporary(older_than)
    return removed


# ------------------------------------------------------------------ billing


class HeldBytes(msgspec.Struct, frozen=True):
    """Bytes one worker holds of one account's blobs (confirmed replicas), for storage metering."""

    owner: int
    private: bool
    holder: str
    bytes: int


async def _blob_owners(blob_ids: list[int] | None = None) -> dict[int, tuple[int, bool]]:
    """blob id -> (owner, private) of the oldest bucket with an object made of it (the account it is billed to)."""
    query = ObjectBlob.select(
        ObjectBlob.blob,
        ObjectBlob.stored_object.bucket.as_alias("bucket"),
        ObjectBlob.stored_object.bucket.owner.as_alias("owner"),
        ObjectBlob.stored_object.bucket.private.as_alias("private"),
    )
    rows = []
    if blob_ids is None:
        rows = await query
    else:
        for part in chunks(sorted(set(blob_ids))):
            rows += await query.where(ObjectBlob.blob.is_in(part))
    oldest: dict[int, tuple[int, int, bool]] = {}
    for r in rows:
        if r["blob"] not in oldest or r["bucket"] < oldest[r["blob"]][0]:
            oldest[r["blob"]] = (r["bucket"], r["owner"], bool(r["private"]))
    return {blob: (owner, private) for blob, (_, owner, private) in oldest.items()}


async def browser_replica_bytes() -> list[HeldBytes]:
    """Per (billed owner, worker): the bytes of confirmed replicas in browsers (the appliance's excluded)."""
    rows = await Replica.select(Replica.blob, Replica.holder, Replica.blob.size.as_alias("size")).where(
        (Replica.holder != APPLIANCE) & Replica.confirmed_at.is_not_null()
    )
    owners = await _blob_owners()
    held: dict[tuple[int, bool, str], int] = {}
    for r in rows:
        owner = owners.get(r["blob"])
        if owner is None:
            continue  # no object uses it any more: garbage collection removes it
        key = (owner[0], owner[1], r["holder"])
        held[key] = held.get(key, 0) + r["size"]
    return [HeldBytes(owner, private, holder, size) for (owner, private, holder), size in sorted(held.items())]


async def billing_owner(sha: str) -> tuple[int, bool] | None:
    """(owner, private) of the oldest bucket using this blob: whom a copy of it is made for."""
    row = await Blob.select(Blob.id).where(Blob.sha256 == sha).first()
    if row is None:
        return None
    return (await _blob_owners([row["id"]])).get(row["id"])


async def totals() -> dict[str, int]:
    """How much PMRFS holds: distinct blobs and their bytes, and the replicas of them in browsers."""
    blobs = await Blob.select(Count(Blob.id).as_alias("n"), Sum(Blob.size).as_alias("bytes")).first()
    in_browsers = await Replica.count().where(Replica.holder != APPLIANCE)
    return {"blobs": blobs["n"] or 0, "bytes": blobs["bytes"] or 0, "browser_replicas": in_browsers}
