"""PMRFS buckets and objects: what the REST API, the dashboard and the CLI (through the API) use.

Functions take the caller as an ``Actor`` and return plain structs; table rows never leave
this package. Only a bucket's owner, or an admin, sees or changes it: anyone else is told the
bucket does not exist.

An upload streams: the body is cut into blobs of ``BLOB_SIZE`` bytes as it arrives, each blob
is hashed and written to the appliance's blob store (once per content), and the object is
recorded in one transaction at the end. An upload that fails (too large, a bad form, the
client went away) removes the files it wrote and records nothing.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import AsyncIterable, AsyncIterator
from typing import NamedTuple

import msgspec
from piccolo.query.functions.aggregate import Count, Sum

from appliance.accounts import users
from appliance.accounts.actor import Actor
from appliance.clock import now
from appliance.errors import Conflict, Forbidden, InvalidRequest, NotFound, TooLarge, Unavailable
from appliance.pmrfs import namenode
from appliance.pmrfs.blobstore import BLOB_SIZE, BlobStore
from appliance.pmrfs.namenode import APPLIANCE, LiveHolders, ReplicaInfo, chunks, serving
from appliance.pmrfs.names import MAX_BUCKETS_PER_ACCOUNT, check_bucket_name, check_key, runs_bucket_name
from appliance.pmrfs.tables import Blob, Bucket, ObjectBlob, Replica, StoredObject
from appliance.pmrfs.transcoding import SHUFFLE_ENCODING, transcoded

log = logging.getLogger(__name__)

DEFAULT_CONTENT_TYPE = "application/octet-stream"
MAX_CONTENT_TYPE = 255


class BucketInfo(msgspec.Struct, frozen=True):
    name: str
    owner: str
    private: bool
    created_at: dt.datetime
    objects: int
    bytes: int


class ObjectInfo(msgspec.Struct, frozen=True):
    bucket: str
    key: str
    size: int
    content_type: str
    created_at: dt.datetime
    pinned: bool
    available: bool
    # How many blobs the object is made of (objects-status lists them).
    blobs: int


class BlobStatus(msgspec.Struct, frozen=True):
    sha256: str
    size: int
    # Holders that can deliver the blob now ("appliance" for the appliance's disk, else worker ids).
    replicas: list[str]
    # Holders recorded for the blob that are offline or still receiving it.
    offline: list[str]


class ObjectStatus(msgspec.Struct, frozen=True):
    bucket: str
    key: str
    size: int
    content_type: str
    created_at: dt.datetime
    pinned: bool
    available: bool
    blobs: list[BlobStatus]


def _not_found(name: str) -> NotFound:
    return NotFound(f"Bucket {name} not found.")


def _object_not_found(bucket: str, key: str) -> NotFound:
    return NotFound(f"Object {bucket}/{key} not found.")


def _content_type(value: str | None) -> str:
    value = (value or "").strip() or DEFAULT_CONTENT_TYPE
    if len(value) > MAX_CONTENT_TYPE or not value.isprintable():
        raise InvalidRequest(f"A content type may be at most {MAX_CONTENT_TYPE} printable characters.")
    return value


async def _bucket_row(actor: Actor, name: str) -> dict:
    """The bucket, if the actor may see it; otherwise NotFound (existence is not revealed)."""
    row = (
        await Bucket.select(Bucket.id, Bucket.name, Bucket.owner, Bucket.private, Bucket.created_at)
        .where(Bucket.name == name)
        .first()
    )
    if row is None or (row["owner"] != actor.user_id and not actor.is_admin):
        raise _not_found(name)
    return row


async def _owner_emails(owner_ids) -> dict[int, str]:
    owner_ids = set(owner_ids)
    found = await users.emails(owner_ids)
    return {owner_id: found.get(owner_id, f"account {owner_id}") for owner_id in owner_ids}


async def _bucket_infos(rows: list[dict]) -> list[BucketInfo]:
    if not rows:
        return []
    stats = await (
        StoredObject.select(
            StoredObject.bucket, Count(StoredObject.id).as_alias("n"), Sum(StoredObject.size).as_alias("bytes")
        )
        .where(StoredObject.bucket.is_in([r["id"] for r in rows]))
        .group_by(StoredObject.bucket)
    )
    by_bucket = {s["bucket"]: (s["n"], int(s["bytes"] or 0)) for s in stats}
    emails = await _owner_emails(r["owner"] for r in rows)
    return [
        BucketInfo(
            name=r["name"],
            owner=emails[r["owner"]],
            private=bool(r["private"]),
            created_at=r["created_at"],
            objects=by_bucket.get(r["id"], (0, 0))[0],
            bytes=by_bucket.get(r["id"], (0, 0))[1],
        )
        for r in rows
    ]


# -- buckets ----------------------------------------------------------------------------------


async def create_bucket(actor: Actor, name: str, private: bool = True) -> BucketInfo:
    check_bucket_name(name)
    if not actor.is_coordinator:
        raise Forbidden("Worker accounts cannot create buckets.")
    async with Bucket._meta.db.transaction():
        taken = await Bucket.select(Bucket.owner).where(Bucket.name == name).first()
        if taken is not None:
            if taken["owner"] == actor.user_id:
                raise Conflict(f"You already have a bucket named {name}.")
            raise Conflict(f"The bucket name {name} is taken; bucket names are unique across all accounts.")
        if await Bucket.count().where(Bucket.owner == actor.user_id) >= MAX_BUCKETS_PER_ACCOUNT:
            raise Conflict(f"An account may have at most {MAX_BUCKETS_PER_ACCOUNT} buckets; delete one first.")
        await Bucket.insert(Bucket(name=name, owner=actor.user_id, private=private, created_at=now()))
    return await get_bucket(actor, name)


async def get_bucket(actor: Actor, name: str) -> BucketInfo:
    return (await _bucket_infos([await _bucket_row(actor, name)]))[0]


async def list_buckets(actor: Actor) -> list[BucketInfo]:
    """The actor's buckets; an admin sees every account's."""
    query = Bucket.select(Bucket.id, Bucket.name, Bucket.owner, Bucket.private, Bucket.created_at).order_by(Bucket.name)
    if not actor.is_admin:
        query = query.where(Bucket.owner == actor.user_id)
    return await _bucket_infos(await query)


async def delete_bucket(actor: Actor, name: str, store: BlobStore, force: bool = False) -> int:
    """Delete a bucket; with ``force`` also its objects. Returns how many objects went with it."""
    async with Bucket._meta.db.transaction():
        bucket = await _bucket_row(actor, name)
        count = await StoredObject.count().where(StoredObject.bucket == bucket["id"])
        if count and not force:
            raise Conflict(
                f"Bucket {name} is not empty ({count} object{'s' if count != 1 else ''}); "
                "delete its objects first, or force the deletion."
            )
        await StoredObject.delete().where(StoredObject.bucket == bucket["id"])
        await Bucket.delete().where(Bucket.id == bucket["id"])
    if count:
        await namenode.collect_garbage(store)
    return count


# -- uploads ----------------------------------------------------------------------------------


class Ingest:
    """The blobs one upload has written, held against garbage collection until committed or discarded."""

    def __init__(self, store: BlobStore, max_bytes: int):
        self.store = store
        self.max_bytes = max_bytes
        self.blobs: list[tuple[str, int]] = []  # (sha256, size) in order
        self.written: set[str] = set()
        self.size = 0
        self._held: list[str] = []

    def too_large(self) -> TooLarge:
        return TooLarge(f"The upload is larger than the limit of {self.max_bytes} bytes; nothing was stored.")

    async def _add(self, piece: bytes) -> None:
        sha, written = await self.store.put(piece)
        self._held.append(sha)
        if written:
            self.written.add(sha)
        self.blobs.append((sha, len(piece)))

    async def consume(self, stream: AsyncIterable[bytes]) -> None:
        """Read ``stream`` to its end, cutting it into blobs as it arrives."""
        buffer = bytearray()
        async for chunk in stream:
            if not chunk:
                continue
            self.size += len(chunk)
            if self.size > self.max_bytes:
                raise self.too_large()
            buffer += chunk
            while len(buffer) >= BLOB_SIZE:
                piece = bytes(buffer[:BLOB_SIZE])
                del buffer[:BLOB_SIZE]
                await self._add(piece)
        if buffer:
            await self._add(bytes(buffer))

    def release(self) -> None:
        for sha in self._held:
            self.store.release(sha)
        self._held = []

    async def discard(self) -> None:
        """Forget this upload: release its blobs and remove the files it wrote that nothing else uses."""
        self.release()
        for sha in self.written:
            await namenode.remove_file_if_unused(self.store, sha)
        self.written = set()


async def _blob_ids(sizes: dict[str, int], t) -> dict[str, int]:
    """sha256 -> blob id, inserting the blob rows that do not exist yet."""
    ids: dict[str, int] = {}
    for part in chunks(sorted(sizes)):
        rows = await Blob.select(Blob.id, Blob.sha256).where(Blob.sha256.is_in(part))
        ids.update({r["sha256"]: r["id"] for r in rows})
    missing = [sha for sha in sizes if sha not in ids]
    for part in chunks(missing):
        await Blob.insert(*(Blob(sha256=sha, size=sizes[sha], created_at=t) for sha in part))
        rows = await Blob.select(Blob.id, Blob.sha256).where(Blob.sha256.is_in(part))
        ids.update({r["sha256"]: r["id"] for r in rows})
    return ids


async def _ensure_blobs(blobs: list[tuple[str, int]]) -> dict[str, int]:
    """Blob rows (and confirmed appliance replicas) for these blobs; returns sha256 -> blob id."""
    t = now()
    ids = await _blob_ids(dict(blobs), t)
    slots = {f"{blob_id}:{APPLIANCE}": blob_id for blob_id in ids.values()}
    present: set[str] = set()
    for part in chunks(sorted(slots)):
        rows = await Replica.select(Replica.slot, Replica.confirmed_at).where(Replica.slot.is_in(part))
        present.update(r["slot"] for r in rows)
        unconfirmed = [r["slot"] for r in rows if r["confirmed_at"] is None]
        if unconfirmed:
            await Replica.update({Replica.confirmed_at: t}).where(Replica.slot.is_in(unconfirmed))
    new = [slot for slot in slots if slot not in present]
    for part in chunks(new):
        await Replica.insert(
            *(Replica(blob=slots[s], holder=APPLIANCE, slot=s, added_at=t, confirmed_at=t) for s in part)
        )
    return ids


async def commit_object(
    actor: Actor, bucket: str, key: str, ingest: Ingest, *, content_type: str | None, pinned: bool
) -> ObjectInfo:
    """Record an ingested upload as ``bucket/key``, replacing any object of that key."""
    key = check_key(key)
    content_type = _content_type(content_type)
    replaced = False
    async with Bucket._meta.db.transaction():
        row = await _bucket_row(actor, bucket)
        slot = f"{row['id']}/{key}"
        replaced = bool(await StoredObject.delete().where(StoredObject.slot == slot).returning(StoredObject.id))
        ids = await _ensure_blobs(ingest.blobs)
        created = now()
        inserted = await StoredObject.insert(
            StoredObject(
                bucket=row["id"],
                slot=slot,
                key=key,
                size=ingest.size,
                content_type=content_type,
                created_at=created,
                pinned=pinned,
            )
        ).returning(StoredObject.id)
        object_id = inserted[0]["id"]
        references = [
            ObjectBlob(stored_object=object_id, position=i, blob=ids[sha]) for i, (sha, _) in enumerate(ingest.blobs)
        ]
        for part in chunks(references):
            await ObjectBlob.insert(*part)
    ingest.release()
    if replaced:
        await namenode.collect_garbage(ingest.store)
    return ObjectInfo(
        bucket=bucket,
        key=key,
        size=ingest.size,
        content_type=content_type,
        created_at=created,
        pinned=pinned,
        available=True,
        blobs=len(ingest.blobs),
    )


async def record_browser_object(
    owner_id: int,
    key: str,
    blobs: list[tuple[str, int]],
    holders: dict[str, set[str]],
    *,
    content_type: str,
    pinned: bool,
    encoding: str = "",
) -> None:
    """Record an object whose blobs browsers already hold (a job run's output) in the owner's runs bucket.

    The bucket is made on first use and is private, so the blobs only ever move to the owner's browsers.
    A pinned object's blobs are then copied to the appliance (``restore_appliance_copies``).
    """
    key = check_key(key)
    name = runs_bucket_name(owner_id)
    sizes = dict(blobs)
    t = now()
    async with Bucket._meta.db.transaction():
        bucket = await Bucket.select(Bucket.id).where(Bucket.name == name).first()
        if bucket is None:
            await Bucket.insert(Bucket(name=name, owner=owner_id, private=True, created_at=t))
            bucket = await Bucket.select(Bucket.id).where(Bucket.name == name).first()
        slot = f"{bucket['id']}/{key}"
        await StoredObject.delete().where(StoredObject.slot == slot)
        ids = await _blob_ids(sizes, t)
        inserted = await StoredObject.insert(
            StoredObject(
                bucket=bucket["id"],
                slot=slot,
                key=key,
                size=sum(size for _, size in blobs),
                content_type=content_type,
                created_at=t,
                pinned=pinned,
                encoding=encoding,
            )
        ).returning(StoredObject.id)
        object_id = inserted[0]["id"]
        references = [
            ObjectBlob(stored_object=object_id, position=i, blob=ids[sha]) for i, (sha, _) in enumerate(blobs)
        ]
        for part in chunks(references):
            await ObjectBlob.insert(*part)
        wanted = {f"{ids[sha]}:{holder}": (ids[sha], holder) for sha, who in holders.items() for holder in who}
        present: set[str] = set()
        for part in chunks(sorted(wanted)):
            present.update(r["slot"] for r in await Replica.select(Replica.slot).where(Replica.slot.is_in(part)))
        new = [
            Replica(blob=b, holder=h, slot=s, added_at=t, confirmed_at=t)
            for s, (b, h) in wanted.items()
            if s not in present
        ]
        for part in chunks(new):
            await Replica.insert(*part)


async def check_upload(actor: Actor, bucket: str, key: str | None, declared_size: int | None, max_bytes: int) -> None:
    """Refuse an upload before reading its body: unknown bucket, bad key, announced size over the limit."""
    await _bucket_row(actor, bucket)
    if key is not None:
        check_key(key)
    if declared_size is not None and declared_size > max_bytes:
        raise TooLarge(f"The upload is larger than the limit of {max_bytes} bytes; nothing was stored.")


async def put_object(
    actor: Actor,
    bucket: str,
    key: str,
    stream: AsyncIterable[bytes],
    store: BlobStore,
    *,
    max_bytes: int,
    content_type: str | None = None,
    pinned: bool = True,
    declared_size: int | None = None,
) -> ObjectInfo:
    await check_upload(actor, bucket, key, declared_size, max_bytes)
    _content_type(content_type)
    ingest = Ingest(store, max_bytes)
    try:
        await ingest.consume(stream)
        return await commit_object(actor, bucket, key, ingest, content_type=content_type, pinned=pinned)
    except BaseException:
        await ingest.discard()
        raise


# -- reading ----------------------------------------------------------------------------------


async def _object_row(actor: Actor, bucket: str, key: str) -> dict:
    row = await _bucket_row(actor, bucket)
    obj = await StoredObject.select().where(StoredObject.slot == f"{row['id']}/{key}").first()
    if obj is None:
        raise _object_not_found(bucket, key)
    return obj


async def _object_blobs(object_ids: list[int]) -> dict[int, list[tuple[int, str, int]]]:
    """object id -> its blobs in order, as (blob id, sha256, size)."""
    found: dict[int, list[tuple[int, int, str, int]]] = {i: [] for i in object_ids}  # (position, id, sha, size)
    for part in chunks(object_ids):
        rows = await ObjectBlob.select(
            ObjectBlob.stored_object, ObjectBlob.position, ObjectBlob.blob, ObjectBlob.blob.sha256, ObjectBlob.blob.size
        ).where(ObjectBlob.stored_object.is_in(part))
        for r in rows:
            found[r["stored_object"]].append((r["position"], r["blob"], r["blob.sha256"], r["blob.size"]))
    return {i: [(b, sha, size) for _, b, sha, size in sorted(blobs)] for i, blobs in found.items()}


def _info(bucket: str, row: dict, available: bool, blobs: int) -> ObjectInfo:
    return ObjectInfo(
        bucket=bucket,
        key=row["key"],
        size=row["size"],
        content_type=row["content_type"],
        created_at=row["created_at"],
        pinned=bool(row["pinned"]),
        available=available,
        blobs=blobs,
    )


async def list_objects(actor: Actor, bucket: str, live: LiveHolders, prefix: str = "") -> list[ObjectInfo]:
    row = await _bucket_row(actor, bucket)
    query = StoredObject.select().where(StoredObject.bucket == row["id"]).order_by(StoredObject.key)
    if prefix and "\\" not in prefix:
        # LIKE narrows the rows (its wildcards and case folding only widen the match); startswith decides.
        query = query.where(StoredObject.key.like(prefix + "%"))
    objects = [o for o in await query if o["key"].startswith(prefix)]
    blobs = await _object_blobs([o["id"] for o in objects])
    replicas = await namenode.replicas_by_blob([b for bs in blobs.values() for b, _, _ in bs])
    return [
        _info(bucket, o, all(serving(replicas[b], live) for b, _, _ in blobs[o["id"]]), len(blobs[o["id"]]))
        for o in objects
    ]


async def object_status(actor: Actor, bucket: str, key: str, live: LiveHolders) -> ObjectStatus:
    key = check_key(key)
    obj = await _object_row(actor, bucket, key)
    blobs = (await _object_blobs([obj["id"]]))[obj["id"]]
    replicas = await namenode.replicas_by_blob([b for b, _, _ in blobs])
    statuses = []
    for blob_id, sha, size in blobs:
        now_serving = serving(replicas[blob_id], live)
        others = sorted({r.holder for r in replicas[blob_id]} - set(now_serving))
        statuses.append(BlobStatus(sha256=sha, size=size, replicas=now_serving, offline=others))
    info = _info(bucket, obj, all(s.replicas for s in statuses), len(statuses))
    return ObjectStatus(**{**msgspec.structs.asdict(info), "blobs": statuses})


def _deliverable(replicas: list[ReplicaInfo], live: LiveHolders, has_file: bool) -> bool:
    holders = serving(replicas, live)
    if APPLIANCE in holders and has_file:
        return True
    return live.fetch is not None and any(h != APPLIANCE for h in holders)


class Download(NamedTuple):
    info: ObjectInfo
    content: AsyncIterator[bytes]
    # None when the bytes are made while they stream (a saved stage output read back in its content type).
    length: int | None

    def headers(self) -> dict[str, str]:
        found = {"content-type": self.info.content_type}
        if self.length is not None:
            found["content-length"] = str(self.length)
        return found


async def open_object(actor: Actor, bucket: str, key: str, store: BlobStore, live: LiveHolders) -> Download:
    """The object's description and its bytes, blob after blob, each verified.

    Unavailable (503) when some blob has no replica that can deliver it now. A blob that turns
    out missing or corrupt while streaming ends the stream early (the client sees a short body).
    """
    key = check_key(key)
    obj = await _object_row(actor, bucket, key)
    blobs = (await _object_blobs([obj["id"]]))[obj["id"]]
    replicas = await namenode.replicas_by_blob([b for b, _, _ in blobs])
    missing = 0
    for blob_id, sha, _ in blobs:
        has_file = store.exists(sha)
        if not has_file and any(r.holder == APPLIANCE for r in replicas[blob_id]):
            await namenode.drop_appliance_replica(sha)
            replicas[blob_id] = [r for r in replicas[blob_id] if r.holder != APPLIANCE]
        if not _deliverable(replicas[blob_id], live, has_file):
            missing += 1
    if missing:
        raise Unavailable(
            f"Object {bucket}/{key} is unavailable: {missing} of its {len(blobs)} blob(s) have no live replica. "
            "It becomes available again when a browser holding them reconnects."
        )
    info = _info(bucket, obj, True, len(blobs))
    content = _stream_blobs(store, [sha for _, sha, _ in blobs], live)
    if obj["encoding"] == SHUFFLE_ENCODING:
        return Download(info, transcoded(content, info.content_type), None)
    return Download(info, content, info.size)


async def _stream_blobs(store: BlobStore, shas: list[str], live: LiveHolders) -> AsyncIterator[bytes]:
    # Held while streaming, so a concurrent delete does not pull files from under the download.
    for sha in shas:
        store.hold(sha)
    try:
        for sha in shas:
            data = await store.get(sha)
            if data is None:
                await namenode.drop_appliance_replica(sha)
                if live.fetch is not None:
                    data = await live.fetch(sha)
            if data is None:
                log.error("blob %s could not be read from any replica; the download ends early", sha)
                raise Unavailable(f"Blob {sha} became unavailable during the download.")
            yield data
    finally:
        for sha in shas:
            store.release(sha)


# -- changes ----------------------------------------------------------------------------------


async def delete_object(actor: Actor, bucket: str, key: str, store: BlobStore) -> None:
    key = check_key(key)
    async with Bucket._meta.db.transaction():
        obj = await _object_row(actor, bucket, key)
        await StoredObject.delete().where(StoredObject.id == obj["id"])
    await namenode.collect_garbage(store)


async def set_pinned(
    actor: Actor, bucket: str, key: str, pinned: bool, store: BlobStore, live: LiveHolders
) -> ObjectInfo:
    """Pin (keep the appliance copy) or unpin (let it go once browsers hold the replication factor)."""
    key = check_key(key)
    async with Bucket._meta.db.transaction():
        obj = await _object_row(actor, bucket, key)
        await StoredObject.update({StoredObject.pinned: pinned}).where(StoredObject.id == obj["id"])
    status = await object_status(actor, bucket, key, live)
    missing = [b.sha256 for b in status.blobs if APPLIANCE not in b.replicas]
    if pinned and missing and live.restore is not None:
        live.restore(missing)  # browsers hold it but the appliance let go: copies come back in the background
    return ObjectInfo(
        bucket=bucket,
        key=key,
        size=status.size,
        content_type=status.content_type,
        created_at=status.created_at,
        pinned=pinned,
        available=status.available,
        blobs=len(status.blobs),
    )
