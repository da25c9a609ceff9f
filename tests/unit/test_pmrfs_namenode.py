"""The namenode through its service API, on a SQLite store of its own.

Browser datanodes do not exist yet, so replicas on workers are recorded for made-up worker ids
exactly as the fleet will record them: ``add_replica``/``confirm_replica`` and ``LiveHolders``.
"""

from __future__ import annotations

import asyncio
import hashlib
import os

import pytest

from appliance import db
from appliance.accounts import users
from appliance.accounts.actor import Actor
from appliance.config import load_settings
from appliance.errors import TooLarge, Unavailable
from appliance.pmrfs import namenode, service
from appliance.pmrfs.blobstore import BLOB_SIZE, BlobStore, store_for
from appliance.pmrfs.namenode import APPLIANCE, LiveHolders

MiB = 1024 * 1024


@pytest.fixture
async def pmrfs(tmp_path):
    """A fresh store and blob directory; yields (owner, blob store)."""
    settings = load_settings({"data_dir": str(tmp_path / "data")}, environ={})
    db.configure(settings)
    await db.migrate()
    account, _ = await users.create_user("owner@example.com", "coordinator", "owner-password-1")
    owner = Actor(user_id=account.id, role=account.role)
    await service.create_bucket(owner, "data")
    yield owner, store_for(settings.data_path)


async def stream(data: bytes, piece: int = 100_000):
    for i in range(0, len(data), piece):
        yield data[i : i + piece]


async def put(owner, store, key: str, data: bytes, *, pinned: bool = True):
    return await service.put_object(owner, "data", key, stream(data), store, max_bytes=1 << 40, pinned=pinned)


async def shas_of(owner, key: str) -> list[str]:
    return [b.sha256 for b in (await service.object_status(owner, "data", key, LiveHolders())).blobs]


async def test_objects_are_cut_into_blobs_of_at_most_4_mib(pmrfs):
    owner, store = pmrfs
    for size, pieces in [(0, []), (1, [1]), (BLOB_SIZE, [BLOB_SIZE]), (BLOB_SIZE + 1, [BLOB_SIZE, 1])]:
        data = os.urandom(size)
        await put(owner, store, f"size-{size}", data)
        status = await service.object_status(owner, "data", f"size-{size}", LiveHolders())
        assert [b.size for b in status.blobs] == pieces
        assert status.size == size
        assert all(blob.replicas == [APPLIANCE] for blob in status.blobs)
        assert b"".join(store.path(blob.sha256).read_bytes() for blob in status.blobs) == data


async def test_identical_blobs_are_stored_once(pmrfs):
    owner, store = pmrfs
    data = b"\x07" * (2 * BLOB_SIZE)  # two identical blobs in one object
    await put(owner, store, "twice", data)
    await put(owner, store, "again", data)
    shas = await shas_of(owner, "twice")
    assert shas == [hashlib.sha256(data[:BLOB_SIZE]).hexdigest()] * 2
    assert store.stored() == [shas[0]]


async def test_release_waits_for_the_replication_factor_on_distinct_live_workers(pmrfs):
    owner, store = pmrfs
    data = os.urandom(BLOB_SIZE + 10)
    await put(owner, store, "unpinned", data, pinned=False)
    shas = await shas_of(owner, "unpinned")
    live = LiveHolders()

    # Nothing held by workers yet: the appliance copy is the only one.
    assert await namenode.release_appliance_copies(store, 2, live) == []

    # One live worker, recorded twice: still one distinct holder.
    live.connected("worker-a")
    for sha in shas:
        await namenode.add_replica(sha, "worker-a")
        await namenode.add_replica(sha, "worker-a")
    assert await namenode.release_appliance_copies(store, 2, live) == []

    # A second worker still receiving (unconfirmed) does not count.
    for sha in shas:
        await namenode.add_replica(sha, "worker-b", confirmed=False)
    live.connected("worker-b")
    assert await namenode.release_appliance_copies(store, 2, live) == []

    # Confirmed, but offline: does not count either.
    live.disconnected("worker-b")
    for sha in shas:
        await namenode.confirm_replica(sha, "worker-b")
    assert await namenode.release_appliance_copies(store, 2, live) == []
    report = {n.sha256: n for n in await namenode.replication_report(2, live)}
    assert {sha: (n.live_workers, n.missing) for sha, n in report.items()} == {sha: (["worker-a"], 1) for sha in shas}

    # Back online: two distinct live workers hold both blobs, so the appliance lets go.
    live.connected("worker-b")
    assert sorted(await namenode.release_appliance_copies(store, 2, live)) == sorted(shas)
    assert not any(store.exists(sha) for sha in shas)
    status = await service.object_status(owner, "data", "unpinned", live)
    assert status.available and not status.pinned
    assert [b.replicas for b in status.blobs] == [["worker-a", "worker-b"]] * 2
    assert await namenode.replication_report(2, live) == []

    # The appliance cannot serve it itself any more; with a fetcher from browsers it can.
    with pytest.raises(Unavailable):
        await service.open_object(owner, "data", "unpinned", store, live)
    pieces = {hashlib.sha256(data[i : i + BLOB_SIZE]).hexdigest(): data[i : i + BLOB_SIZE] for i in (0, BLOB_SIZE)}

    async def from_browsers(sha: str) -> bytes | None:
        return pieces.get(sha)

    live.fetch = from_browsers
    restores = []
    live.restore = lambda missing: restores.append(namenode.restore_appliance_copies(store, missing, live))
    content = (await service.open_object(owner, "data", "unpinned", store, live)).content
    assert b"".join([chunk async for chunk in content]) == data

    # Pinning it again brings the copies back onto the appliance's disk.
    assert await namenode.restore_appliance_copies(store, shas, live) == shas
    assert all(store.exists(sha) for sha in shas)
    status = await service.object_status(owner, "data", "unpinned", live)
    assert [b.replicas for b in status.blobs] == [[APPLIANCE, "worker-a", "worker-b"]] * 2
    assert sorted(await namenode.release_appliance_copies(store, 2, live)) == sorted(shas)
    await service.set_pinned(owner, "data", "unpinned", True, store, live)
    await asyncio.gather(*restores)  # what the datanodes run in the background
    assert all(store.exists(sha) for sha in shas)
    assert await namenode.release_appliance_copies(store, 2, live) == []  # pinned: the copies stay
    await service.set_pinned(owner, "data", "unpinned", False, store, live)
    assert sorted(await namenode.release_appliance_copies(store, 2, live)) == sorted(shas)

    # Both holders gone: unavailable until one returns.
    live.disconnected("worker-a")
    live.disconnected("worker-b")
    assert not (await service.object_status(owner, "data", "unpinned", live)).available
    live.connected("worker-b")
    assert (await service.object_status(owner, "data", "unpinned", live)).available


async def test_pinned_objects_keep_their_appliance_copy(pmrfs):
    owner, store = pmrfs
    await put(owner, store, "pinned", os.urandom(1000), pinned=True)
    # The same content in an unpinned object: the pinned one still needs the appliance copy.
    shared = os.urandom(2000)
    await put(owner, store, "shared-pinned", shared, pinned=True)
    await put(owner, store, "shared-unpinned", shared, pinned=False)
    live = LiveHolders()
    for worker in ("w1", "w2", "w3"):
        live.connected(worker)
        for key in ("pinned", "shared-pinned"):
            for sha in await shas_of(owner, key):
                await namenode.add_replica(sha, worker)
    assert await namenode.release_appliance_copies(store, 2, live) == []

    # Unpinning the last pinned reference lets it go.
    await service.set_pinned(owner, "data", "shared-pinned", False, store, live)
    [sha] = await shas_of(owner, "shared-pinned")
    assert await namenode.release_appliance_copies(store, 2, live) == [sha]
    assert not store.exists(sha)
    assert (await namenode.replicas_of(sha))[0].holder != APPLIANCE


async def test_a_blob_an_upload_holds_is_neither_released_nor_collected(pmrfs):
    owner, store = pmrfs
    data = os.urandom(500)
    await put(owner, store, "busy", data, pinned=False)
    [sha] = await shas_of(owner, "busy")
    live = LiveHolders()
    for worker in ("w1", "w2"):
        live.connected(worker)
        await namenode.add_replica(sha, worker)
    store.hold(sha)
    try:
        assert await namenode.release_appliance_copies(store, 2, live) == []
        await service.delete_object(owner, "data", "busy", store)
        assert store.exists(sha)
    finally:
        store.release(sha)
    assert await namenode.collect_garbage(store) == [sha]
    assert not store.exists(sha)


async def test_delete_and_garbage_collection(pmrfs):
    owner, store = pmrfs
    shared = os.urandom(BLOB_SIZE)
    await put(owner, store, "one", shared + b"tail-one")
    await put(owner, store, "two", shared + b"tail-two")
    one, two = await shas_of(owner, "one"), await shas_of(owner, "two")
    assert one[0] == two[0] and one[1] != two[1]

    await service.delete_object(owner, "data", "one", store)
    assert not store.exists(one[1])
    assert store.exists(one[0])  # still part of "two"

    # Replacing an object drops the old version's blobs.
    await put(owner, store, "two", b"replaced")
    assert not store.exists(two[0]) and not store.exists(two[1])
    assert await namenode.collect_garbage(store) == []
    assert len(store.stored()) == 1

    # Worker replicas go with their blob.
    [sha] = await shas_of(owner, "two")
    await namenode.add_replica(sha, "w1")
    assert await namenode.blobs_held_by("w1") == [sha]
    assert await service.delete_bucket(owner, "data", store, force=True) == 1
    assert await namenode.blobs_held_by("w1") == []
    assert store.stored() == []


async def test_remove_replica(pmrfs):
    owner, store = pmrfs
    await put(owner, store, "x", b"x" * 10 + b"y" * 10)
    [sha] = await shas_of(owner, "x")
    await namenode.add_replica(sha, "w1")
    await namenode.add_replica(sha, "w2")
    # What several workers hold, read at once for workers joining together (DataNodes.worker_joined).
    assert await namenode.blobs_held_by_each(["w1", "w2", "w3"]) == {"w1": [sha], "w2": [sha], "w3": []}
    assert await namenode.remove_replica(sha, "w2")
    assert not await namenode.remove_replica(sha, "w2")
    # A worker that reconnects without the blob loses its replica the same way (DataNodes._reconcile).
    assert await namenode.remove_replica(sha, "w1")
    assert [r.holder for r in await namenode.replicas_of(sha)] == [APPLIANCE]
    with pytest.raises(KeyError):
        await namenode.add_replica("0" * 64, "w1")
    with pytest.raises(ValueError):
        await namenode.add_replica(sha, "")


async def test_private_owners(pmrfs):
    owner, store = pmrfs
    await put(owner, store, "p", b"private data")
    [sha] = await shas_of(owner, "p")
    assert await namenode.private_owners(sha) == {owner.user_id}
    await service.create_bucket(owner, "open", private=False)
    await service.put_object(owner, "open", "q", stream(b"open data"), store, max_bytes=100)
    [open_sha] = [b.sha256 for b in (await service.object_status(owner, "open", "q", LiveHolders())).blobs]
    assert await namenode.private_owners(open_sha) == set()


async def test_a_corrupt_file_is_missing_and_the_object_unavailable(pmrfs, caplog):
    owner, store = pmrfs
    await put(owner, store, "c", b"good content")
    [sha] = await shas_of(owner, "c")
    store.path(sha).write_bytes(b"bad content!")
    live = LiveHolders()
    content = (await service.open_object(owner, "data", "c", store, live)).content
    with pytest.raises(Unavailable):
        [chunk async for chunk in content]
    assert "corrupt" in caplog.text
    assert not store.exists(sha)
    status = await service.object_status(owner, "data", "c", live)
    assert not status.available and status.blobs[0].replicas == []
    with pytest.raises(Unavailable, match="1 of its 1 blob"):
        await service.open_object(owner, "data", "c", store, live)


async def test_uploads_over_the_limit_store_nothing(pmrfs):
    owner, store = pmrfs
    with pytest.raises(TooLarge):
        await service.put_object(owner, "data", "big", stream(os.urandom(3 * MiB)), store, max_bytes=2 * MiB)
    with pytest.raises(TooLarge):
        await service.put_object(owner, "data", "big", stream(b""), store, max_bytes=2 * MiB, declared_size=2 * MiB + 1)
    assert store.stored() == []
    assert await service.list_objects(owner, "data", LiveHolders()) == []


def test_blob_store_writes_atomically_and_verifies(tmp_path):
    store = BlobStore(tmp_path / "blobs")
    data = b"hello blob"
    sha = hashlib.sha256(data).hexdigest()
    assert store._write(sha, data) is True
    assert store._write(sha, data) is False  # already there and good
    assert store.path(sha) == tmp_path / "blobs" / sha[:2] / sha[2:4] / sha
    assert store._read_verified(sha) == data
    assert [p.name for p in store.path(sha).parent.iterdir()] == [sha]  # no temporary files left
    with pytest.raises(ValueError):
        store._write(sha, b"other content")
    store.path(sha).write_bytes(b"tampered")
    assert store._read_verified(sha) is None
    assert not store.exists(sha)
    assert store._write(sha, data) is True
    with pytest.raises(ValueError):
        store.path("../../etc/passwd")
