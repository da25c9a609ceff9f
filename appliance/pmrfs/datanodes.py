"""Browsers as PMRFS datanodes: placement, re-replication, and reading blobs back from browsers.

Hears the fleet's events (wired in app.create_app). When a worker joins, its reported blobs are reconciled
with the namenode; whenever a blob has fewer live browser replicas than the
replication factor, a copy is made on another eligible browser: from the
appliance's own copy over HTTP, or from a browser holding it over a WebRTC
transfer the fleet arranges. Once enough browsers hold an unpinned blob, the
appliance's copy is released. A private bucket's blobs only go to browsers of
the bucket's owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable

from piccolo.query.functions.aggregate import Sum

from appliance.background import BackgroundTasks
from appliance.events import BlobsDropped, TransferFinished, WorkerJoined, WorkerLeft
from appliance.fleet import protocol as p
from appliance.fleet.batches import Batches
from appliance.fleet.registry import Fleet, Worker
from appliance.fleet.transfers import Transfer, TransferTag
from appliance.pmrfs import namenode
from appliance.pmrfs.blobstore import BlobStore, sha256_hex
from appliance.pmrfs.grants import Grants
from appliance.pmrfs.namenode import APPLIANCE, LiveHolders
from appliance.pmrfs.tables import Blob

log = logging.getLogger(__name__)

LOOP_SECONDS = 2.0
MAX_IN_FLIGHT = 16
REQUEST_TIMEOUT = 60.0


class DataNodes:
    def __init__(self, fleet: Fleet, store: BlobStore, live: LiveHolders, grants: Grants, factor: int):
        self.fleet = fleet
        self.store = store
        self.live = live
        self.grants = grants
        self.factor = factor
        self.wake = asyncio.Event()
        self.in_flight: set[tuple[str, str]] = set()  # (sha256, target worker)
        self.uploads: dict[tuple[str, str], asyncio.Future[bytes]] = {}  # (sha256, worker) -> bytes PUT
        self.task: asyncio.Task | None = None
        self.background = BackgroundTasks("PMRFS datanodes")
        self._spawn = self.background.spawn
        # Joined workers whose blobs are still to be reconciled: with those that join meanwhile (one
        # query reads what the namenode recorded for them all).
        self.joining = Batches(self.background, self._reconcile_joined, namenode.CHUNK)
        # The blobs running runs still use (their stage outputs, not PMRFS files): a reconnecting tab
        # keeps them. Set by whoever runs jobs (app.py: the coordinator).
        self.run_blobs: Callable[[], set[str]] = set

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.live.fetch = self.fetch_from_browsers
        self.live.restore = self.restore_later
        self.task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        self.live.fetch = self.live.restore = None
        if self.task:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.background.cancel()

    def restore_later(self, shas: list[str]) -> None:
        """Copy these blobs back to the appliance from the browsers holding them, in the background."""
        self._spawn(namenode.restore_appliance_copies(self.store, shas, self.live))

    # ------------------------------------------------------------ fleet events

    def worker_joined(self, event: WorkerJoined) -> None:
        self.live.connected(event.worker.worker_id)
        self.joining.add((event.worker, event.blobs))

    def worker_left(self, event: WorkerLeft) -> None:
        self.live.disconnected(event.worker.worker_id)
        self.wake.set()

    def blobs_dropped(self, event: BlobsDropped) -> None:
        async def forget() -> None:
            for sha in event.blobs:
                await namenode.remove_replica(sha, event.worker.worker_id)
            self.wake.set()

        self._spawn(forget())

    def transfer_finished(self, event: TransferFinished) -> None:
        # The replica itself is recorded by _copy_between_browsers, which awaits the same transfer.
        transfer = event.transfer
        if not event.ok and isinstance(transfer, Transfer):
            log.info(
                "transfer of %s from %s to %s failed: %s",
                transfer.sha256,
                transfer.source,
                transfer.target,
                event.reason,
            )

    # ------------------------------------------------------------ reconcile

    async def _reconcile_joined(self, joined: list[tuple[Worker, list[str]]]) -> None:
        recorded = await namenode.blobs_held_by_each([worker.worker_id for worker, _ in joined])
        for worker, reported in joined:  # each on its own: a slow tab holds up no other
            if reported or recorded[worker.worker_id]:
                self._spawn(self._reconcile(worker, reported, recorded[worker.worker_id]))
            else:  # nothing to reconcile (most of a fleet): no task each
                worker.blobs = worker.bytes_held = 0
        self.wake.set()

    async def _reconcile(self, worker: Worker, reported: list[str], recorded_shas: list[str]) -> None:
        """After a (re)connect: what the tab holds is what counts."""
        recorded = set(recorded_shas)
        held = set(reported)
        for sha in recorded - held:
            await namenode.remove_replica(sha, worker.worker_id)
        for sha in held - recorded - self.run_blobs():
            # Not ours to keep (deleted meanwhile, or never recorded): the tab frees the space.
            await worker.send(p.BlobDelete(sha256=sha))
        kept = sorted(held & recorded)
        worker.blobs = len(kept)
        worker.bytes_held = await _total_size(kept)
        self.wake.set()

    # ------------------------------------------------------------ placement loop

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.wake.wait(), LOOP_SECONDS)
            self.wake.clear()
            try:
                await self._place()
                await namenode.release_appliance_copies(self.store, self.factor, self.live)
            except Exception:
                log.exception("PMRFS placement round failed; retrying")

    async def _place(self) -> None:
        if not self.fleet.workers:
            return
        # Copies on their way when the round starts still count if they finish while the report is read:
        # the report may predate their confirmation. Erring this way only delays a copy to the next round.
        started_before = set(self.in_flight)
        for need in await namenode.replication_report(self.factor, self.live):
            # Copies already on their way count: never more replicas than the factor.
            coming = sum(1 for sha, _ in started_before | self.in_flight if sha == need.sha256)
            for _ in range(need.missing - coming):
                if len(self.in_flight) >= MAX_IN_FLIGHT:
                    return
                target = await self._target_for(need.sha256, need.size, need.live_workers)
                if target is None:
                    break
                if await namenode.has_appliance_replica(need.sha256) and self.store.exists(need.sha256):
                    job = self.copy_from_appliance(need.sha256, need.size, target)
                elif need.live_workers and (source := self.fleet.get(random.choice(need.live_workers))) is not None:
                    # A random holder: a failed or corrupt copy is retried from another replica next round.
                    job = self._copy_between_browsers(need.sha256, need.size, source, target)
                else:
                    break
                self._start(need.sha256, target, job)

    async def _target_for(self, sha: str, size: int, holders: list[str]) -> Worker | None:
        owners = await namenode.private_owners(sha)
        if len(owners) > 1:
            return None  # in two accounts' private buckets: it stays on the appliance
        busy_targets = {t for s, t in self.in_flight if s == sha}
        candidates = [
            w
            for w in self.fleet.workers.values()
            if w.worker_id not in holders
            and w.worker_id not in busy_targets
            and not w.paused
            and (not owners or w.account_id in owners)
            and _free_space(w) >= size
        ]
        # Spread: the browser holding the least goes first.
        return min(candidates, key=lambda w: (w.bytes_held, w.connected_at), default=None)

    def _start(self, sha: str, target: Worker, job) -> None:
        key = (sha, target.worker_id)
        self.in_flight.add(key)

        async def run() -> None:
            try:
                if await job:
                    await namenode.confirm_replica(sha, target.worker_id)
                    target.blobs += 1
                    target.bytes_held += await _size_of(sha)
            except Exception as exc:
                log.info("copy of %s to %s failed: %s", sha, target.worker_id, exc)
            finally:
                self.in_flight.discard(key)
                self.wake.set()

        self._spawn(run())

    async def copy_from_appliance(self, sha: str, size: int, target: Worker) -> bool:
        """The target fetches the appliance's copy over HTTP; False when there is none, or it failed."""
        if not self.store.exists(sha):
            return False
        url = self.grants.url("fetch", sha, target.worker_id)
        try:
            reply = await target.request(
                lambda i: p.BlobFetch(id=i, sha256=sha, size=size, url=url), timeout=REQUEST_TIMEOUT
            )
        except TimeoutError:
            return False
        return isinstance(reply, p.BlobStored) and reply.sha256 == sha

    async def _copy_between_browsers(self, sha: str, size: int, source: Worker, target: Worker) -> bool:
        owner = await namenode.billing_owner(sha)
        tag = TransferTag(account=owner[0], private=owner[1]) if owner else None  # billed to the blob's owner
        return await self.fleet.copy_blob(sha, size, source, target, REQUEST_TIMEOUT, tag)

    # ------------------------------------------------------------ reading back

    async def fetch_from_browsers(self, sha: str) -> bytes | None:
        """The blob's bytes from a live browser replica (it PUTs them to us), verified; None if none could.
        Holders are asked in the order the object's status lists them; one whose bytes do not match
        the blob's SHA-256 is passed over at once, and its copy forgotten (and deleted from the tab
        unless a running run reads it) so that the placement loop makes another."""
        for replica in sorted(await namenode.replicas_of(sha), key=lambda r: r.holder):
            worker = self.fleet.get(replica.holder) if replica.holder != APPLIANCE else None
            if worker is None or not replica.confirmed:
                continue
            key = (sha, worker.worker_id)
            arrived = self.uploads[key] = asyncio.get_running_loop().create_future()
            try:
                url = self.grants.url("upload", sha, worker.worker_id)
                reply = await worker.request(lambda i, u=url: p.BlobUpload(id=i, sha256=sha, url=u), REQUEST_TIMEOUT)
                if isinstance(reply, p.BlobUploaded):
                    if (data := await asyncio.wait_for(arrived, 5)) is not None:
                        return data
                damaged = arrived.done() and arrived.result() is None
                if damaged or (isinstance(reply, p.BlobFailed) and reply.reason == "missing"):
                    await namenode.remove_replica(sha, worker.worker_id)
                    self.wake.set()
                if damaged and sha not in self.run_blobs():
                    await worker.send(p.BlobDelete(sha256=sha))
            except (TimeoutError, ConnectionError) as exc:
                log.info("could not read %s back from %s: %s", sha, worker.worker_id, exc)
            finally:
                self.uploads.pop(key, None)
        return None

    def uploaded(self, sha: str, worker_id: str, data: bytes) -> bool:
        """Bytes a worker PUT for a fetch_from_browsers request; False if not asked for or corrupt
        (the request then goes on to another replica)."""
        waiter = self.uploads.get((sha, worker_id))
        if waiter is None or waiter.done():
            return False
        intact = sha256_hex(data) == sha
        if not intact:
            log.warning("%s sent bytes that do not match blob %s: another replica is asked", worker_id, sha)
        waiter.set_result(data if intact else None)
        return intact


def _free_space(worker: Worker) -> int:
    caps = worker.capabilities
    if not caps.storage_quota:
        return 1 << 62  # the browser did not say: assume room
    return caps.storage_quota - caps.storage_usage - worker.bytes_held


async def _size_of(sha: str) -> int:
    return await _total_size([sha])


async def _total_size(shas: list[str]) -> int:
    total = 0
    for part in namenode.chunks(shas):
        row = await Blob.select(Sum(Blob.size).as_alias("n")).where(Blob.sha256.is_in(part)).first()
        total += int(row["n"] or 0) if row else 0
    return total
